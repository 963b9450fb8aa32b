/**
 * PostgreSQL text cannot hold U+0000 (SQLSTATE 22021), which SQLite's TEXT can. What the
 * repositories store from outside may carry one: a quarantined line's detail quotes the bad
 * input, a receiver's response body and an error message are whatever came back. Refusing the
 * insert would fail the whole batch, for ever, on every retry; so the character becomes U+FFFD,
 * the replacement character. Bytes kept whole are bytea (a quarantined line's raw bytes).
 */
export const withoutNul = (text: string): string => (text.includes('\u0000') ? text.replaceAll('\u0000', '\uFFFD') : text);

/**
 * Where a token carries a value: one claim NAME, or a path into nested claims.
 *
 * The syntax is unambiguous: a setting that starts with "/" is a JSON Pointer (RFC 6901) into the
 * payload, "/realm_access/org" or "/https:~1~1example.com~1claims/org" ("~1" is "/", "~0" is
 * "~"); anything else is one claim name taken literally, dots and slashes included, so
 * "https://example.com/claims.org" names that one top-level claim. A claim name never starts
 * with "/", so the two never overlap.
 */
export type ClaimPath = readonly string[];

/** The segments of a claim setting, or the sentence saying why it is not one. */
export function parseClaimPath(text: string): { ok: true; path: ClaimPath } | { ok: false; reason: string } {
  if (text === '') return { ok: false, reason: 'is empty' };
  if (!text.startsWith('/')) return { ok: true, path: [text] };
  const segments = text.slice(1).split('/');
  const path: string[] = [];
  for (const segment of segments) {
    if (/~[^01]|~$/.test(segment)) return { ok: false, reason: `has "~" not followed by 0 or 1 in the JSON Pointer segment ${JSON.stringify(segment)} (write "~0" for "~" and "~1" for "/")` };
    if (segment === '') return { ok: false, reason: 'has an empty segment; a JSON Pointer is "/name/name..."' };
    path.push(segment.replaceAll('~1', '/').replaceAll('~0', '~'));
  }
  return { ok: true, path };
}

/** The value at `path` in `claims`, or undefined. Only own properties of plain objects are followed. */
export function readClaim(claims: Readonly<Record<string, unknown>>, path: ClaimPath): unknown {
  let node: unknown = claims;
  for (const segment of path) {
    if (typeof node !== 'object' || node === null || Array.isArray(node) || !Object.hasOwn(node, segment)) return undefined;
    node = (node as Record<string, unknown>)[segment];
  }
  return node;
}

/**
 * Credentials a receiver echoes back. A receiver that answers with the headers it
 * got (a debugging endpoint, an error page quoting the request) would otherwise hand the
 * webhook's credentials, and the request's signature, to everyone who reads the delivery log,
 * through the answer body an attempt keeps. Pure: which texts stand for a credential, the
 * marker that replaces them, and the replacing.
 */
import { isCredentialHeader, type WebhookHeaders } from './webhook-headers.ts';

/** A text to hide wherever an answer holds it, and the (lower-case) name of the header whose value it comes from. */
export interface Echo {
  readonly text: string;
  readonly header: string;
}

/**
 * What an answer holds instead of a credential the receiver echoed: what was there, never any
 * of it. Brackets, unlike the request view's HIDDEN_HEADER_VALUE, because it stands inside
 * someone else's text.
 */
export function echoMarker(header: string): string {
  return `[hidden: value of header ${header.toLowerCase()}]`;
}

/**
 * Texts shorter than this are hidden only where they stand alone (no letter or digit on either
 * side): a short value looked for anywhere would cut up the answer's ordinary words (the
 * credential rule is on the safe side: `X-Keyboard-Layout: us` counts, and "us" is in
 * "status"). Longer ones are hidden wherever they are.
 */
export const SHORT_ECHO_LENGTH = 8;

/** An authorization scheme and its credentials (RFC 9110 section 11.4): `Bearer abc.def`. */
const SCHEME_AND_CREDENTIALS = /^[A-Za-z][A-Za-z0-9!#$%&'*+.^_`|~-]*\s+(\S.*)$/;

/**
 * The forms a value takes in an answer: as sent, and as a JSON string holds it (quotes and
 * backslashes escaped; also with `/` escaped as `\/`, as PHP's json_encode writes it), which is
 * how a receiver that answers with its headers as JSON writes them.
 */
function forms(text: string, header: string): Echo[] {
  const json = JSON.stringify(text).slice(1, -1);
  return [...new Set([text, json, json.replaceAll('/', '\\/')])].filter((t) => t.length > 0).map((t) => ({ text: t, header: header.toLowerCase() }));
}

/**
 * The texts that stand for the credentials among `headers` (each value isCredentialHeader takes
 * for one): the value, and for an authorization (a scheme and its credentials) the credentials
 * alone too, since a receiver may quote just the token it refused.
 */
export function credentialEchoes(headers: WebhookHeaders): Echo[] {
  const echoes: Echo[] = [];
  for (const [name, value] of headers) {
    if (!isCredentialHeader(name, value)) continue;
    echoes.push(...forms(value, name));
    const credentials = SCHEME_AND_CREDENTIALS.exec(value)?.[1];
    if (credentials !== undefined) echoes.push(...forms(credentials, name));
  }
  return echoes;
}

/**
 * The texts that stand for a `webhook-signature` header an attempt sent: the whole value, each
 * of its signatures (`v1,...`; two during a secret rotation), and each one's base64 alone.
 */
export function signatureEchoes(signature: string): Echo[] {
  const echoes = forms(signature, 'webhook-signature');
  for (const part of signature.split(' ')) {
    if (part === '') continue;
    echoes.push(...forms(part, 'webhook-signature'));
    const comma = part.indexOf(',');
    if (comma >= 0) echoes.push(...forms(part.slice(comma + 1), 'webhook-signature'));
  }
  return echoes;
}

function escapeRegExp(text: string): string {
  return text.replace(/[.*+?^${}()|[\]\\/-]/g, '\\$&');
}

/**
 * `text` with every occurrence of each echo replaced by its marker (echoMarker), in one pass,
 * longest first (a value before the token inside it), so that a marker is never looked into
 * again. Null stays null.
 */
export function hideEchoes<T extends string | null>(text: T, echoes: readonly Echo[]): T {
  if (text === null || text === '' || echoes.length === 0) return text;
  const byText = new Map<string, string>();
  for (const e of echoes) if (!byText.has(e.text)) byText.set(e.text, e.header);
  const texts = [...byText.keys()].sort((a, b) => b.length - a.length);
  const pattern = texts.map((t) => (t.length < SHORT_ECHO_LENGTH ? `(?<![A-Za-z0-9])${escapeRegExp(t)}(?![A-Za-z0-9])` : escapeRegExp(t))).join('|');
  return text.replace(new RegExp(pattern, 'g'), (found) => echoMarker(byText.get(found)!)) as T;
}

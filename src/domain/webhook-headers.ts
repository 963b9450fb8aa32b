/**
 * A webhook's own headers: static name/value pairs an organization sets on its
 * webhook, sent on every attempt next to hookrelay's own. Pure: the rules (what a name and a
 * value may be, which names are hookrelay's), which values are credentials (never echoed), and
 * the stored form (a JSON array of [name, value] pairs: order and spelling kept).
 */
import { excerpt, type InvalidParam } from './errors.ts';

/** A webhook's headers in the order they were given, names spelt as given. */
export type WebhookHeaders = readonly (readonly [name: string, value: string])[];

export const MAX_WEBHOOK_HEADERS = 20;
export const MAX_HEADER_NAME_LENGTH = 100;
export const MAX_HEADER_VALUE_LENGTH = 4096;

/** An HTTP token (RFC 9110 section 5.6.2): what a field name is made of. */
const TOKEN = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/;
/**
 * A value as it can travel unchanged: printable ASCII (spaces inside, none at either end, which
 * HTTP strips). No control characters (CR and LF would split the request), nothing beyond ASCII
 * (undici refuses what is not Latin-1, and receivers read the rest differently).
 */
const VALUE = /^[\x21-\x7e]([\x20-\x7e]*[\x21-\x7e])?$/;

/**
 * Names hookrelay sets itself, or that belong to the connection or the body rather than to the
 * receiver: a webhook cannot set them (lower case). The signature stays the daemon's own, the
 * body's framing the HTTP client's.
 */
const RESERVED: ReadonlyMap<string, string> = new Map([
  ['webhook-id', 'hookrelay sets it (Standard Webhooks)'],
  ['webhook-timestamp', 'hookrelay sets it (Standard Webhooks)'],
  ['webhook-signature', 'hookrelay sets it (Standard Webhooks)'],
  ['user-agent', 'hookrelay sets it'],
  ['content-type', 'hookrelay sets it (the body is JSON)'],
  ['traceparent', 'hookrelay sets it (W3C Trace Context) while tracing is on'],
  ['tracestate', 'hookrelay sets it (W3C Trace Context) while tracing is on'],
  ['content-length', 'the HTTP client sets it from the body'],
  ['host', 'the HTTP client sets it from the webhook URL'],
  ['transfer-encoding', 'it belongs to the connection, not to the receiver'],
  ['connection', 'it belongs to the connection, not to the receiver'],
  ['keep-alive', 'it belongs to the connection, not to the receiver'],
  ['upgrade', 'it belongs to the connection, not to the receiver'],
  ['te', 'it belongs to the connection, not to the receiver'],
  ['trailer', 'it belongs to the connection, not to the receiver'],
  ['expect', 'it belongs to the connection, not to the receiver'],
  ['http2-settings', 'it belongs to the connection, not to the receiver'],
]);
const RESERVED_PREFIXES: readonly (readonly [string, string])[] = [
  ['webhook-', 'the webhook-* names are the Standard Webhooks headers hookrelay sets'],
  ['content-', 'the content-* names describe the body, which is hookrelay\'s'],
  ['proxy-', 'the proxy-* names are for proxies (hookrelay\'s egress proxy is the operator\'s)'],
];

/** Why a webhook may not set header `name`, or null when it may. */
export function reservedHeader(name: string): string | null {
  const lower = name.toLowerCase();
  const exact = RESERVED.get(lower);
  if (exact !== undefined) return exact;
  for (const [prefix, why] of RESERVED_PREFIXES) if (lower.startsWith(prefix)) return why;
  return null;
}

/** Names whose values are credentials, whatever they hold (lower case). */
const CREDENTIAL_NAMES = new Set(['authorization', 'proxy-authorization', 'cookie', 'set-cookie']);
/** A name containing one of these is taken to carry a credential: X-Api-Key, X-Auth-Token, X-Session-Id... */
const CREDENTIAL_WORDS = ['key', 'token', 'secret', 'password', 'passwd', 'auth', 'signature', 'credential', 'session', 'cookie', 'jwt', 'bearer'];
/** A value written as an authorization scheme and its credentials is one, whatever the name. */
const CREDENTIAL_VALUE = /^(bearer|basic|digest|token|apikey)\s/i;

/**
 * Whether a header's value may be a credential: then no answer, log or page shows it (only
 * that it is set). On the safe side: a name that merely looks like one (X-Keyboard-Layout)
 * is hidden too.
 */
export function isCredentialHeader(name: string, value: string): boolean {
  const lower = name.toLowerCase();
  return CREDENTIAL_NAMES.has(lower) || CREDENTIAL_WORDS.some((word) => lower.includes(word)) || CREDENTIAL_VALUE.test(value);
}

/**
 * The headers as answers show them: name -> value, in order, with null for a value that may
 * be a credential (set, not shown). Sending null back in `headers` is refused, so a client
 * that registers what it read cannot set a placeholder as a value by mistake.
 */
export function shownHeaders(headers: WebhookHeaders): Record<string, string | null> {
  const shown: Record<string, string | null> = {};
  for (const [name, value] of headers) shown[name] = isCredentialHeader(name, value) ? null : value;
  return shown;
}

/** What the delivery log shows instead of a credential's value (a string: the request view's headers are strings). */
export const HIDDEN_HEADER_VALUE = '(set; value hidden)';

/**
 * The headers as the delivery log shows them among a request's: by lower-case name, as a
 * receiver reads them, each value that may be a credential replaced by HIDDEN_HEADER_VALUE.
 */
export function loggedHeaders(headers: WebhookHeaders): WebhookHeaders {
  return headers.map(([name, value]) => [name.toLowerCase(), isCredentialHeader(name, value) ? HIDDEN_HEADER_VALUE : value] as const);
}

/**
 * Checks `headers` as register_webhook takes it: an object of header names to string values
 * (as Svix and Hook0 take theirs), at most MAX_WEBHOOK_HEADERS; null or absent means none.
 * Returns the pairs in the order given, or every problem found, each naming the header and
 * never quoting a value (it may be a credential).
 */
export function checkWebhookHeaders(input: unknown): { ok: true; headers: WebhookHeaders } | { ok: false; problems: InvalidParam[] } {
  if (input === undefined || input === null) return { ok: true, headers: [] };
  const problem = (reason: string): InvalidParam => ({ name: 'headers', reason });
  if (typeof input !== 'object' || Array.isArray(input)) {
    return { ok: false, problems: [problem('must be an object of header names to values, such as {"X-Environment": "production"}')] };
  }
  const entries = Object.entries(input as Record<string, unknown>);
  if (entries.length > MAX_WEBHOOK_HEADERS) {
    return { ok: false, problems: [problem(`must hold at most ${MAX_WEBHOOK_HEADERS} headers; got ${entries.length}`)] };
  }
  const problems: InvalidParam[] = [];
  const seen = new Map<string, string>();
  const headers: Array<readonly [string, string]> = [];
  for (const [name, value] of entries) {
    const quoted = excerpt(name);
    if (name.length === 0 || name.length > MAX_HEADER_NAME_LENGTH || !TOKEN.test(name)) {
      problems.push(problem(`must not have ${quoted} as a name: a header name is 1-${MAX_HEADER_NAME_LENGTH} letters, digits and !#$%&'*+-.^_\`|~ (an HTTP token)`));
      continue;
    }
    const reserved = reservedHeader(name);
    if (reserved !== null) {
      problems.push(problem(`must not set ${quoted}: it is reserved (${reserved})`));
      continue;
    }
    const lower = name.toLowerCase();
    const earlier = seen.get(lower);
    if (earlier !== undefined) {
      problems.push(problem(`must not set ${quoted} twice: header names are case-insensitive (${excerpt(earlier)} and ${quoted})`));
      continue;
    }
    seen.set(lower, name);
    if (typeof value !== 'string') {
      problems.push(problem(`must give ${quoted} a string value${value === null ? ' (null is how answers show a hidden credential: send the value itself)' : ''}`));
      continue;
    }
    if (value.length === 0) problems.push(problem(`must not give ${quoted} an empty value`));
    else if (value.length > MAX_HEADER_VALUE_LENGTH) problems.push(problem(`must not give ${quoted} a value longer than ${MAX_HEADER_VALUE_LENGTH} characters`));
    else if (!VALUE.test(value)) {
      problems.push(problem(`must give ${quoted} a value of printable ASCII characters, without control characters and without spaces at either end`));
    } else headers.push([name, value]);
  }
  return problems.length > 0 ? { ok: false, problems } : { ok: true, headers };
}

/** The stored form: a JSON array of [name, value] pairs, or null for none. */
export function storedHeaders(headers: WebhookHeaders): string | null {
  return headers.length === 0 ? null : JSON.stringify(headers);
}

/**
 * The headers of a stored value: the JSON text (SQLite) or the parsed array (PostgreSQL's
 * jsonb). Anything else, or a pair of the wrong shape, reads as no header: a damaged row sends
 * fewer headers, never a malformed request.
 */
export function parseStoredHeaders(stored: unknown): WebhookHeaders {
  if (stored === null || stored === undefined) return [];
  let parsed = stored;
  if (typeof stored === 'string') {
    try {
      parsed = JSON.parse(stored);
    } catch {
      return [];
    }
  }
  if (!Array.isArray(parsed)) return [];
  return parsed.filter((pair): pair is [string, string] => Array.isArray(pair) && pair.length === 2 && typeof pair[0] === 'string' && typeof pair[1] === 'string');
}

/**
 * One `--header 'Name: value'` of the CLI as a pair: split at the first colon, the value's
 * surrounding spaces dropped (as HTTP drops them); null when there is no colon. The pair is
 * then checked by checkWebhookHeaders like the API's.
 */
export function parseHeaderLine(line: string): readonly [string, string] | null {
  const colon = line.indexOf(':');
  if (colon <= 0) return null;
  return [line.slice(0, colon).trim(), line.slice(colon + 1).trim()];
}

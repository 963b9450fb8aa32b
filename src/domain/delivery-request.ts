import { excerpt } from './errors.ts';
import { signatureHeader } from './signature.ts';
import { isCredentialHeader, reservedHeader, type WebhookHeaders } from './webhook-headers.ts';

/**
 * The headers hookrelay sets on a delivery request (the deliverer sends these, the delivery
 * log shows them; test/dispatch/requests.test.ts checks them against what a receiver gets):
 * `content-type`, `user-agent`, the Standard Webhooks `webhook-id` (the event id, the same on
 * every attempt and replay) and `webhook-timestamp` (seconds), and `webhook-signature` over
 * `id.timestamp.body` with each of `secrets` (newest first; none when the webhook does not
 * sign), or, for a request an attempt sent, the `signature` header it recorded (null: none);
 * the W3C `traceparent` and `tracestate` of a traced attempt (`trace`; not signed);
 * then the webhook's own `custom` headers, in their order, as they were spelt (a name that is
 * reserved, or set twice, is left out: registration refuses both, this keeps a row stored
 * under other rules from overriding hookrelay's headers).
 * The HTTP client adds `host`, `connection` and `content-length` (see requestHeadersOnTheWire).
 */
export function deliveryHeaders(request: {
  readonly eventId: string;
  readonly timestampSeconds: number;
  readonly body: string;
  readonly secrets: readonly string[];
  readonly userAgent: string;
  /** The webhook-signature header an attempt sent, taken as it is instead of signing with `secrets`. */
  readonly signature?: string | null;
  /** The webhook's own headers (none when absent). */
  readonly custom?: WebhookHeaders;
  /** The attempt's W3C trace context (tracing on): after the signature, never signed. */
  readonly trace?: { readonly traceparent: string; readonly tracestate?: string } | undefined;
}): Record<string, string> {
  const headers: Record<string, string> = {
    'content-type': 'application/json',
    'user-agent': request.userAgent,
    'webhook-id': request.eventId,
    'webhook-timestamp': String(request.timestampSeconds),
  };
  if (request.signature !== undefined) {
    if (request.signature !== null) headers['webhook-signature'] = request.signature;
  } else if (request.secrets.length > 0) headers['webhook-signature'] = signatureHeader(request.secrets, request.eventId, request.timestampSeconds, request.body);
  if (request.trace !== undefined) {
    headers.traceparent = request.trace.traceparent;
    if (request.trace.tracestate !== undefined) headers.tracestate = request.trace.tracestate;
  }
  if (request.custom !== undefined && request.custom.length > 0) {
    const taken = new Set<string>();
    for (const [name, value] of request.custom) {
      const lower = name.toLowerCase();
      if (reservedHeader(name) !== null || taken.has(lower)) continue;
      taken.add(lower);
      headers[name] = value;
    }
  }
  return headers;
}

/**
 * Every header of a delivery request as it reaches the receiver: `headers` (deliveryHeaders)
 * and those the HTTP client (undici) adds: `host` (the URL's host, with its port when not the
 * scheme's default), `connection: keep-alive` and `content-length` (the body's bytes in UTF-8).
 */
export function requestHeadersOnTheWire(url: string, headers: Readonly<Record<string, string>>, body: string): Record<string, string> {
  return { host: new URL(url).host, connection: 'keep-alive', ...headers, 'content-length': String(Buffer.byteLength(body, 'utf8')) };
}

/** An HTTP token (RFC 9110 section 5.6.2): what a field name is made of. */
const FIELD_NAME = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/;
/**
 * A character a field value cannot hold (RFC 9110 section 5.5): one that is no byte at all
 * (beyond Latin-1), or a control character but the tab. The rule Node's and undici's own
 * checks apply, so a request that passes here is never refused by the HTTP client.
 */
const NOT_FIELD_VALUE = /[^\t\x20-\x7e\x80-\xff]/;

/** The headers deliveryHeaders sets itself (the rest are the webhook's own). */
const HOOKRELAY_HEADERS: ReadonlySet<string> = new Set(['content-type', 'user-agent', 'webhook-id', 'webhook-timestamp', 'webhook-signature', 'traceparent', 'tracestate']);

/**
 * Why a request with these headers (deliveryHeaders) cannot be sent, as a sentence naming the
 * header and the first character at fault, or null when it can. Nothing of a credential's
 * value is described. An event id is stored as the feed gave it (ids stored before the
 * feed kept to printable ASCII may hold anything), a webhook's headers as registration
 * allowed them when they were set: checking here, before the HTTP client sees the request,
 * tells "this request can never be sent" apart from a failure a retry may cure, without
 * reading the client's error messages.
 */
export function unsendableHeader(headers: Readonly<Record<string, string>>): string | null {
  for (const [name, value] of Object.entries(headers)) {
    const own = !HOOKRELAY_HEADERS.has(name);
    if (!FIELD_NAME.test(name)) return `the webhook's header name ${excerpt(name)} is not an HTTP token: no request can carry it`;
    const bad = NOT_FIELD_VALUE.exec(value);
    if (bad === null) continue;
    if (own) {
      const which = isCredentialHeader(name, value) ? '' : ` (${characterAt(value, bad.index)})`;
      return `the webhook's header ${name} holds characters an HTTP header cannot carry${which}; register the webhook again with a valid value, then recover what went dead`;
    }
    return `${name === 'webhook-id' ? 'webhook-id (the event id)' : name} holds characters an HTTP header cannot carry (${characterAt(value, bad.index)})`;
  }
  return null;
}

/**
 * unsendableHeader for the request the deliverer is about to send, without building its headers
 * in the common case: an event id a header carries and no headers of the webhook's own (the
 * rest are hookrelay's, always sendable). Runs before every attempt.
 */
export function unsendableRequest(eventId: string, userAgent: string, custom: WebhookHeaders | undefined): string | null {
  if ((custom === undefined || custom.length === 0) && !NOT_FIELD_VALUE.test(eventId)) return null;
  return unsendableHeader(deliveryHeaders({ eventId, timestampSeconds: 0, body: '', secrets: [], userAgent, ...(custom === undefined ? {} : { custom }) }));
}

/** "U+65E5 at character 5": the character of `text` at UTF-16 index `index`, counted in code points from 1. */
function characterAt(text: string, index: number): string {
  const code = text.codePointAt(index)!.toString(16).toUpperCase().padStart(4, '0');
  return `U+${code} at character ${[...text.slice(0, index)].length + 1}`;
}

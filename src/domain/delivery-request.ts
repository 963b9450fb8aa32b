import { signatureHeader } from './signature.ts';
import { reservedHeader, type WebhookHeaders } from './webhook-headers.ts';

/**
 * The headers hookrelay sets on a delivery request (the deliverer sends these, the delivery
 * log shows them; test/delivery-requests.test.ts checks them against what a receiver gets):
 * `content-type`, `user-agent`, the Standard Webhooks `webhook-id` (the event id, the same on
 * every attempt and replay) and `webhook-timestamp` (seconds), and `webhook-signature` over
 * `id.timestamp.body` with each of `secrets` (newest first; none when the webhook does not
 * sign), or, for a request an attempt sent, the `signature` header it recorded (null: none);
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

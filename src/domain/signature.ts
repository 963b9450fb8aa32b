import { createHmac, timingSafeEqual } from 'node:crypto';
import { webhookSecretKey } from './secrets.ts';

/**
 * Standard Webhooks signature: `v1,<base64 HMAC-SHA256(key, "<id>.<timestamp>.<body>")>`, one per
 * secret, space-separated (the newest secret first during a rotation). `body` must be the exact
 * bytes sent. `timestampSeconds` is the `webhook-timestamp` header value.
 */
export function signatureHeader(secrets: readonly string[], id: string, timestampSeconds: number, body: string): string {
  const signed = `${id}.${timestampSeconds}.${body}`;
  return secrets.map((secret) => `v1,${createHmac('sha256', webhookSecretKey(secret)).update(signed).digest('base64')}`).join(' ');
}

/** Why a request's signature does not verify, or null when it does (see verifySignature). */
export type SignatureProblem = string | null;

/**
 * Verifies a Standard Webhooks request as a receiver should: the three headers present, the
 * timestamp within `toleranceSeconds` of `nowSeconds` (a replayed old request is refused), and
 * at least one `v1,` signature of the header equal (in constant time) to the HMAC of
 * `id.timestamp.body` with one of `secrets`. Returns null when it verifies, else the reason.
 */
export function verifySignature(
  secrets: readonly string[],
  headers: { readonly id: string | undefined; readonly timestamp: string | undefined; readonly signature: string | undefined },
  body: string,
  nowSeconds: number,
  toleranceSeconds = 300,
): SignatureProblem {
  if (!headers.id || !headers.timestamp || !headers.signature) return 'the webhook-id, webhook-timestamp or webhook-signature header is missing';
  if (!/^\d{1,12}$/.test(headers.timestamp)) return 'webhook-timestamp is not a number of seconds';
  const timestamp = Number(headers.timestamp);
  if (Math.abs(nowSeconds - timestamp) > toleranceSeconds) return `webhook-timestamp is ${Math.round(nowSeconds - timestamp)} s away from this clock (more than ${toleranceSeconds} s)`;
  const expected = secrets.map((secret) => Buffer.from(signatureHeader([secret], headers.id!, timestamp, body).slice(3), 'base64'));
  for (const part of headers.signature.split(' ')) {
    const [version, value] = part.split(',', 2);
    if (version !== 'v1' || value === undefined) continue;
    const given = Buffer.from(value, 'base64');
    if (expected.some((e) => e.length === given.length && timingSafeEqual(e, given))) return null;
  }
  return 'no v1 signature matches the secret (tampered body, or another secret)';
}

import { createHmac } from 'node:crypto';
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

import { randomBytes } from 'node:crypto';

export const WEBHOOK_SECRET_PREFIX = 'whsec_';

/** A Standard Webhooks signing secret: `whsec_` + base64 of 32 random bytes. */
export function generateWebhookSecret(): string {
  return WEBHOOK_SECRET_PREFIX + randomBytes(32).toString('base64');
}

/**
 * The secrets that sign at `now` (epoch ms), newest first: the current one, and the previous
 * one during its grace period after a rotation; none when HMAC signing is off.
 */
export function signingSecrets(
  webhook: { readonly activeHmac: boolean; readonly secret: string | null; readonly previousSecret: string | null; readonly previousSecretExpiresAt: number | null },
  now: number,
): string[] {
  if (!webhook.activeHmac || webhook.secret === null) return [];
  const previous = webhook.previousSecret !== null && (webhook.previousSecretExpiresAt ?? 0) > now ? [webhook.previousSecret] : [];
  return [webhook.secret, ...previous];
}

/** The raw key bytes of a `whsec_` secret, as Standard Webhooks libraries derive them. */
export function webhookSecretKey(secret: string): Buffer {
  const encoded = secret.startsWith(WEBHOOK_SECRET_PREFIX) ? secret.slice(WEBHOOK_SECRET_PREFIX.length) : secret;
  return Buffer.from(encoded, 'base64');
}

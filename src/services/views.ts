import type { ApiKey } from '../domain/api-keys.ts';
import { iso } from '../domain/iso.ts';
import type { Webhook } from '../domain/types.ts';
import type { ClientCertificateInfo } from '../domain/client-certificate.ts';
import type { OAuth2Settings } from '../domain/oauth2-settings.ts';
import { shownHeaders } from '../domain/webhook-headers.ts';
import type { DeliveryRow } from '../store/values.ts';
import { deliveryState, publicStatus, type AttemptStats } from './delivery-log.ts';
import { TEST_EVENT_TYPE } from './test-events.ts';
import type { WebhookHealthReport } from './webhooks.ts';

/** Public JSON shapes shared by the admin API and the CLI's --json output. */

export function deliveryView(d: DeliveryRow) {
  const status = publicStatus(d);
  return {
    id: d.id,
    event_id: d.eventId,
    event_type: d.eventType,
    anticipation_request_id: d.eventType === TEST_EVENT_TYPE ? null : d.anticipationRequestId,
    status,
    state: deliveryState(d),
    attempts: d.attempts,
    next_attempt_at: d.status === 'pending' ? iso(d.nextAttemptAt) : null,
    last_attempt_at: iso(d.lastAttemptAt),
    last_status_code: d.lastStatusCode,
    last_error: d.lastError,
    created_at: iso(d.createdAt),
    updated_at: iso(d.updatedAt),
    trace_id: d.traceId,
  };
}

/**
 * The public shape of a webhook configuration: never the secret, and its headers with null for
 * each value that may be a credential (set, not shown: domain/webhook-headers.ts).
 */
export function webhookView(webhook: Webhook) {
  return {
    webhook_url: webhook.url,
    active_hmac: webhook.activeHmac,
    headers: shownHeaders(webhook.headers),
    status: webhook.status,
    rate_limit: webhook.rateLimit,
    client_certificate: clientCertificateView(webhook.clientCertificate),
    oauth2: oauth2View(webhook.oauth2),
    created_at: iso(webhook.createdAt),
    updated_at: iso(webhook.updatedAt),
  };
}

/** What a registration's message says of the receiver's authentication: ". Deliveries present ..." (empty: none). */
export function receiverAuthSentence(webhook: Webhook): string {
  const parts: string[] = [];
  const c = webhook.clientCertificate;
  if (c !== null) parts.push(`present the client certificate ${c.subject} (SHA-256 ${c.fingerprintSha256}, valid until ${iso(c.notAfter)})`);
  if (webhook.oauth2 !== null) parts.push(`carry an OAuth2 access token from ${webhook.oauth2.tokenUrl} (client ${webhook.oauth2.clientId})`);
  return parts.length === 0 ? '' : `. Deliveries ${parts.join(' and ')}`;
}

/** What answers show of a client certificate: who it names, which one, until when; never its key. */
export function clientCertificateView(c: ClientCertificateInfo | null) {
  if (c === null) return null;
  return {
    subject: c.subject,
    issuer: c.issuer,
    fingerprint_sha256: c.fingerprintSha256,
    serial_number: c.serialNumber,
    not_before: iso(c.notBefore),
    not_after: iso(c.notAfter),
    key_type: c.keyType,
  };
}

/** What answers show of the OAuth2 client credentials: everything but the client secret. */
export function oauth2View(o: OAuth2Settings | null) {
  if (o === null) return null;
  return { token_url: o.tokenUrl, client_id: o.clientId, scope: o.scope, audience: o.audience, client_auth: o.clientAuth };
}

/** Why a webhook has its status (GET /webhook/get_webhook adds it to webhookView; `hookrelay status`). */
export function webhookHealthView(h: WebhookHealthReport) {
  return {
    status_detail: h.detail,
    consecutive_failures: h.consecutiveFailures,
    failing_since: iso(h.failingSince),
    last_success_at: iso(h.lastSuccessAt),
    disabled_reason: h.disabledReason,
    last_error: h.lastFailure === null ? null : { at: iso(h.lastFailure.at), status_code: h.lastFailure.statusCode, error: h.lastFailure.error },
  };
}

/**
 * A secret rotation under way (GET /webhook/get_webhook): until when the previous secret keeps
 * signing beside the new one, null when no rotation's grace period is running.
 */
export function secretRotationView(previousSecretExpiresAt: number | null) {
  return { previous_secret_expires_at: iso(previousSecretExpiresAt) };
}

/** GET /webhook/stats: attempts per bucket of the window, oldest first, with the window's totals. */
export function attemptStatsView(stats: AttemptStats) {
  return {
    window: stats.window,
    bucket_seconds: stats.bucketMs / 1000,
    from: iso(stats.from),
    until: iso(stats.until),
    succeeded: stats.buckets.reduce((sum, b) => sum + b.succeeded, 0),
    failed: stats.buckets.reduce((sum, b) => sum + b.failed, 0),
    buckets: stats.buckets.map((b) => ({ start: iso(b.start), succeeded: b.succeeded, failed: b.failed })),
  };
}

/** An API key as the API and `api-key list|create --json` show it: never the key, nor its hash. */
export function apiKeyView(key: ApiKey) {
  return {
    name: key.name,
    role_name: key.roleName,
    prefix: key.prefix,
    created_at: iso(key.createdAt),
    created_by: key.createdBy,
    expires_at: key.expiresAt === null ? null : iso(key.expiresAt),
    last_used_at: key.lastUsedAt === null ? null : iso(key.lastUsedAt),
  };
}

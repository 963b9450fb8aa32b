/**
 * Rows as both backends read them (the same column names in SQLite and PostgreSQL), and their
 * mapping to the services' types. Flags are 0/1 in SQLite and booleans in PostgreSQL.
 */
import { isPermission, type Permission } from '../domain/permissions.ts';
import { storedBody, type RejectReason, type StoredEvent } from '../domain/feed-event.ts';
import { traceIdOf } from '../domain/trace-context.ts';
import { decodeRateWindow, EMPTY_RATE_WINDOW, type RateWindow } from '../domain/rate-window.ts';
import type { Organization, Role, User, Webhook, WebhookStatus } from '../domain/types.ts';
import { parseStoredHeaders } from '../domain/webhook-headers.ts';
import { parseStoredClientCertificate } from '../domain/client-certificate.ts';
import { parseStoredOAuth2 } from '../domain/oauth2-settings.ts';
import type { AttemptRow, SealedCredentials, DeliverableWebhook, DeliveryRow, DeliveryStatus, DeliveryWaitState, DueDelivery, FeedPosition, FeedReject, FeedStats, PruneBounds, WebhookHealth, WebhookSigningKeys } from './values.ts';

/** A 0/1 flag (SQLite) or a boolean (PostgreSQL). */
type Flag = number | boolean;
const isSet = (flag: Flag): boolean => flag === true || flag === 1;

export interface OrgRow {
  id: string;
  name: string;
  created_at: number;
}
export const ORG_COLUMNS = 'id, name, created_at';
export const toOrg = (row: OrgRow): Organization => ({ id: row.id, name: row.name, createdAt: row.created_at });

export interface UserRow {
  id: number;
  org_id: string;
  email: string;
  role_name: string;
  created_at: number;
  updated_at: number;
}
export const USER_COLUMNS = 'id, org_id, email, role_name, created_at, updated_at';
export const toUser = (row: UserRow): User => ({
  id: row.id,
  orgId: row.org_id,
  email: row.email,
  roleName: row.role_name,
  createdAt: row.created_at,
  updatedAt: row.updated_at,
});

export interface RoleRow {
  name: string;
  description: string;
  /** The JSON array as stored: text on both backends. */
  permissions: string;
  builtin: Flag;
}
export const ROLE_COLUMNS = 'name, description, permissions, builtin';
export function toRole(row: RoleRow): Role {
  const parsed: unknown = JSON.parse(row.permissions);
  // A permission this code no longer knows grants nothing (deny by default).
  const permissions = Array.isArray(parsed) ? parsed.filter((p): p is Permission => typeof p === 'string' && isPermission(p)) : [];
  return { name: row.name, description: row.description, permissions, builtin: isSet(row.builtin) };
}

export interface WebhookBaseRow {
  org_id: string;
  url: string;
  active_hmac: Flag;
  /** JSON text of [name, value] pairs (SQLite), the parsed array (PostgreSQL's jsonb), or null. */
  headers: unknown;
  status: WebhookStatus;
  rate_limit: number | null;
  /** JSON text of what may be shown of its client certificate and OAuth2 settings (never their secrets), or null. */
  client_certificate: string | null;
  oauth2: string | null;
  created_at: number;
  updated_at: number;
}
export interface WebhookHealthRow {
  consecutive_failures: number;
  failing_since: number | null;
  last_success_at: number | null;
  disabled_reason: string | null;
}
/** A webhook's columns (WebhookBaseRow): never its secrets. */
export const WEBHOOK_COLUMNS = 'org_id, url, active_hmac, headers, status, rate_limit, client_certificate, oauth2, created_at, updated_at';
/** A webhook's sealed credentials for its receiver (SealedRow): only the deliverer and registration read them. */
export const SEALED_COLUMNS = 'client_certificate_sealed, oauth2_secret_sealed';
export interface SealedRow {
  client_certificate_sealed: string | null;
  oauth2_secret_sealed: string | null;
}
export const toSealed = (row: SealedRow): SealedCredentials => ({ clientCertificate: row.client_certificate_sealed, oauth2ClientSecret: row.oauth2_secret_sealed });
/** A webhook's delivery health (WebhookHealthRow). */
export const HEALTH_COLUMNS = 'consecutive_failures, failing_since, last_success_at, disabled_reason';
/** Where a webhook's requests go and what signs them (SigningKeysRow). */
export const SIGNING_KEY_COLUMNS = 'url, active_hmac, secret, previous_secret, previous_secret_expires_at';
export interface SigningKeysRow {
  url: string;
  active_hmac: Flag;
  secret: string | null;
  previous_secret: string | null;
  previous_secret_expires_at: number | null;
}
export const toSigningKeys = (row: SigningKeysRow): WebhookSigningKeys => ({
  url: row.url,
  activeHmac: isSet(row.active_hmac),
  secret: row.secret,
  previousSecret: row.previous_secret,
  previousSecretExpiresAt: row.previous_secret_expires_at,
});
export interface DeliverableRow {
  org_id: string;
  status: WebhookStatus;
  last_success_at: number | null;
  rate_limit: number | null;
}
export const toDeliverable = (r: DeliverableRow): DeliverableWebhook => ({ orgId: r.org_id, status: r.status, lastSuccessAt: r.last_success_at, rateLimit: r.rate_limit });
export const toWebhook = (row: WebhookBaseRow): Webhook => ({
  orgId: row.org_id,
  url: row.url,
  activeHmac: isSet(row.active_hmac),
  headers: parseStoredHeaders(row.headers),
  status: row.status,
  rateLimit: row.rate_limit,
  clientCertificate: parseStoredClientCertificate(row.client_certificate),
  oauth2: parseStoredOAuth2(row.oauth2),
  createdAt: row.created_at,
  updatedAt: row.updated_at,
});
export const toHealth = (row: WebhookHealthRow): WebhookHealth => ({
  consecutiveFailures: row.consecutive_failures,
  failingSince: row.failing_since,
  lastSuccessAt: row.last_success_at,
  disabledReason: row.disabled_reason,
});

/** An event's stored columns, what its webhook body is built from (see storedBody). */
export interface EventRow {
  id: string;
  org_id: string;
  anticipation_request_id: string;
  payload: string;
  occurred_at: number;
}
export const EVENT_COLUMNS = 'id, org_id, anticipation_request_id, payload, occurred_at';
export const toStoredEvent = (row: EventRow): StoredEvent => ({
  id: row.id,
  orgId: row.org_id,
  anticipationRequestId: row.anticipation_request_id,
  occurredAt: row.occurred_at,
  payload: row.payload,
});

/** An event that may be queued again (DeliveriesRepo.recoverable). */
export interface RecoverableRow {
  seq: number;
  id: string;
  org_id: string;
  anticipation_request_id: string;
  type: string;
}
export const toRecoverable = (r: RecoverableRow) => ({ eventSeq: r.seq, eventId: r.id, orgId: r.org_id, anticipationRequestId: r.anticipation_request_id, type: r.type });

/** Where a delivery stands in its queue (DeliveriesRepo.waitState, sql.ts's waitStateSql). */
export interface WaitStateRow {
  status: DeliveryStatus;
  attempts: number;
  next_attempt_at: number;
  leased: number;
  ordering_key: number;
  held_by: number | null;
  webhook_status: string | null;
}
export const toWaitState = (r: WaitStateRow): DeliveryWaitState => ({
  status: r.status,
  attempts: r.attempts,
  nextAttemptAt: r.next_attempt_at,
  leased: r.leased === 1,
  orderingKey: r.ordering_key,
  heldBy: r.held_by,
  webhookStatus: r.webhook_status,
});

export interface StatsRow {
  source: string;
  accepted: number;
  duplicates: number;
  quarantined: number;
  updated_at: number;
}
export const STATS_COLUMNS = 'source, accepted, duplicates, quarantined, updated_at';
export const toFeedStats = (r: StatsRow): FeedStats => ({ source: r.source, accepted: r.accepted, duplicates: r.duplicates, quarantined: r.quarantined, updatedAt: r.updated_at });

export interface PositionRow {
  source: string;
  dev: string;
  ino: string;
  fingerprint: string;
  fingerprint_bytes: number;
  position: number;
  tail_fingerprint: string | null;
}
export const POSITION_COLUMNS = 'source, dev, ino, fingerprint, fingerprint_bytes, position, tail_fingerprint';
export const toPosition = (row: PositionRow): FeedPosition => ({
  source: row.source,
  dev: row.dev,
  ino: row.ino,
  fingerprint: row.fingerprint,
  fingerprintBytes: row.fingerprint_bytes,
  position: row.position,
  tailFingerprint: row.tail_fingerprint,
});

export interface RejectRow {
  id: number;
  source: string;
  position: number | null;
  line_bytes: number;
  raw: Buffer;
  reason: RejectReason;
  detail: string;
  event_id: string | null;
  received_at: number;
}
export const REJECT_COLUMNS = 'id, source, position, line_bytes, raw, reason, detail, event_id, received_at';
export const toReject = (r: RejectRow): FeedReject => ({
  id: r.id,
  source: r.source,
  position: r.position,
  lineBytes: r.line_bytes,
  raw: r.raw,
  reason: r.reason,
  detail: r.detail,
  eventId: r.event_id,
  receivedAt: r.received_at,
});

/** A delivery with its event's columns, as the delivery log reads it. */
export interface DeliveryLogRow {
  id: number;
  org_id: string;
  event_id: string;
  event_type: string;
  anticipation_request_id: string;
  status: DeliveryStatus;
  attempts: number;
  next_attempt_at: number;
  last_attempt_at: number | null;
  last_status_code: number | null;
  last_error: string | null;
  created_at: number;
  updated_at: number;
  /** Its event's stored traceparent, or null. */
  traceparent: string | null;
}
export const toDeliveryRow = (r: DeliveryLogRow): DeliveryRow => ({
  id: r.id,
  orgId: r.org_id,
  eventId: r.event_id,
  eventType: r.event_type,
  anticipationRequestId: r.anticipation_request_id,
  status: r.status,
  attempts: r.attempts,
  nextAttemptAt: r.next_attempt_at,
  lastAttemptAt: r.last_attempt_at,
  lastStatusCode: r.last_status_code,
  lastError: r.last_error,
  createdAt: r.created_at,
  updatedAt: r.updated_at,
  traceId: r.traceparent === null ? null : traceIdOf(r.traceparent),
});

/** A row of delivery_attempts. */
export interface AttemptLogRow {
  id: number;
  attempt: number;
  started_at: number;
  duration_ms: number;
  url: string;
  status_code: number | null;
  error_class: string | null;
  error_detail: string | null;
  response_body: string | null;
  outcome: string;
  sent_timestamp: number | null;
  sent_signature: string | null;
}
export const ATTEMPT_COLUMNS = 'id, attempt, started_at, duration_ms, url, status_code, error_class, error_detail, response_body, outcome, sent_timestamp, sent_signature';
export const toAttempt = (r: AttemptLogRow): AttemptRow => ({
  id: r.id,
  attempt: r.attempt,
  startedAt: r.started_at,
  durationMs: r.duration_ms,
  url: r.url,
  statusCode: r.status_code,
  errorClass: r.error_class,
  errorDetail: r.error_detail,
  responseBody: r.response_body,
  outcome: r.outcome,
  sentTimestamp: r.sent_timestamp,
  sentSignature: r.sent_signature,
});

/** The newest rows a prune keeps (NEWEST_SQL's row; null: an empty table). */
export interface NewestRow {
  oldest_seq: number | null;
  seq: number | null;
  delivery_id: number | null;
  attempt_id: number | null;
  reject_id: number | null;
}
export const toNewest = (r: NewestRow): PruneBounds => ({ oldestSeq: r.oldest_seq ?? 0, seq: r.seq ?? 0, deliveryId: r.delivery_id ?? 0, attemptId: r.attempt_id ?? 0, rejectId: r.reject_id ?? 0 });

/** A webhook's rate window as SQLite stores it (JSON text, see webhooks-repo.ts), read back; null or unreadable text is an empty window. */
export function rateWindowOf(text: string | null): RateWindow {
  if (text === null) return EMPTY_RATE_WINDOW;
  try {
    return decodeRateWindow(JSON.parse(text));
  } catch {
    return EMPTY_RATE_WINDOW;
  }
}

/** A due delivery as read, before its request body is built (see dueDeliveryOf). */
export interface DueRow {
  id: number;
  org_id: string;
  ordering_key: number;
  attempts: number;
  event_id: string;
  anticipation_request_id: string;
  occurred_at: number;
  payload: string;
  url: string;
  /** JSON text (SQLite) or the parsed jsonb (PostgreSQL) of the webhook's headers, or null. */
  headers: unknown;
  client_certificate: string | null;
  oauth2: string | null;
  active_hmac: number;
  secret: string | null;
  previous_secret: string | null;
  previous_secret_expires_at: number | null;
  /** Its event's trace context (see DueDelivery.traceparent). */
  traceparent: string | null;
  tracestate: string | null;
  /** PostgreSQL: a later pending change of its request waits behind it (left out of the due rows). */
  holds_back?: boolean;
}
/** The request body of a due row, or why there can be none. */
function bodyOf(r: DueRow): { payload: string; unsendable: string | null } {
  try {
    return { payload: storedBody({ id: r.event_id, orgId: r.org_id, anticipationRequestId: r.anticipation_request_id, occurredAt: r.occurred_at, payload: r.payload }), unsendable: null };
  } catch (err) {
    return { payload: '', unsendable: `the stored event cannot be turned into a request body (${err instanceof Error ? err.message : String(err)})` };
  }
}
/** The due delivery of a row read by dueRows(), with its request body (or why it cannot have one). */
export const dueDeliveryOf = (r: DueRow): DueDelivery => ({
  id: r.id,
  orgId: r.org_id,
  orderingKey: r.ordering_key,
  attempts: r.attempts,
  eventId: r.event_id,
  anticipationRequestId: r.anticipation_request_id,
  ...bodyOf(r),
  url: r.url,
  headers: parseStoredHeaders(r.headers),
  // Null for nearly every webhook: nothing to parse.
  clientCertificate: r.client_certificate === null ? null : parseStoredClientCertificate(r.client_certificate),
  oauth2: r.oauth2 === null ? null : parseStoredOAuth2(r.oauth2),
  activeHmac: r.active_hmac === 1,
  secret: r.secret,
  previousSecret: r.previous_secret,
  previousSecretExpiresAt: r.previous_secret_expires_at,
  traceparent: r.traceparent,
  tracestate: r.tracestate,
});

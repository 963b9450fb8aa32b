/**
 * Rows as both backends read them (the same column names in SQLite and PostgreSQL), and their
 * mapping to the services' types. Flags are 0/1 in SQLite and booleans in PostgreSQL.
 */
import { isPermission, type Permission } from '../domain/permissions.ts';
import type { RejectReason } from '../domain/feed-event.ts';
import { decodeRateWindow, EMPTY_RATE_WINDOW, type RateWindow } from '../domain/rate-window.ts';
import type { Role, User, Webhook, WebhookStatus } from '../domain/types.ts';
import { parseStoredHeaders } from '../domain/webhook-headers.ts';
import type { AttemptRow, DeliveryRow, DeliveryStatus, FeedPosition, FeedReject, WebhookHealth } from './repos.ts';

/** A 0/1 flag (SQLite) or a boolean (PostgreSQL). */
type Flag = number | boolean;
const isSet = (flag: Flag): boolean => flag === true || flag === 1;

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
  created_at: number;
  updated_at: number;
}
export interface WebhookHealthRow {
  consecutive_failures: number;
  failing_since: number | null;
  last_success_at: number | null;
  disabled_reason: string | null;
}
export const toWebhook = (row: WebhookBaseRow): Webhook => ({
  orgId: row.org_id,
  url: row.url,
  activeHmac: isSet(row.active_hmac),
  headers: parseStoredHeaders(row.headers),
  status: row.status,
  rateLimit: row.rate_limit,
  createdAt: row.created_at,
  updatedAt: row.updated_at,
});
export const toHealth = (row: WebhookHealthRow): WebhookHealth => ({
  consecutiveFailures: row.consecutive_failures,
  failingSince: row.failing_since,
  lastSuccessAt: row.last_success_at,
  disabledReason: row.disabled_reason,
});

export interface PositionRow {
  source: string;
  dev: string;
  ino: string;
  fingerprint: string;
  fingerprint_bytes: number;
  position: number;
  tail_fingerprint: string | null;
}
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

/** A webhook's rate window as SQLite stores it (JSON text, see webhooks-repo.ts), read back; null or unreadable text is an empty window. */
export function rateWindowOf(text: string | null): RateWindow {
  if (text === null) return EMPTY_RATE_WINDOW;
  try {
    return decodeRateWindow(JSON.parse(text));
  } catch {
    return EMPTY_RATE_WINDOW;
  }
}

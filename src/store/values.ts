/**
 * The values the repositories (repos.ts) take and give: what both backends store, in the
 * services' terms (camelCase, booleans, epoch ms). The rows as the databases spell them, and
 * their mapping to these, are in rows.ts.
 */
import type { RejectReason, StorableEvent } from '../domain/feed-event.ts';
import type { ChangeStatuses } from '../domain/ordering.ts';
import type { RateWindow } from '../domain/rate-window.ts';
import type { Webhook, WebhookStatus } from '../domain/types.ts';
import type { WebhookHeaders } from '../domain/webhook-headers.ts';
import type { ClientCertificateInfo } from '../domain/client-certificate.ts';
import type { OAuth2Settings } from '../domain/oauth2-settings.ts';

export const DeliveryStatus = { pending: 'pending', delivered: 'delivered', dead: 'dead' } as const;
export type DeliveryStatus = (typeof DeliveryStatus)[keyof typeof DeliveryStatus];

/** A delivery the dispatcher may attempt now, with everything the attempt needs. */
export interface DueDelivery {
  readonly id: number;
  readonly orgId: string;
  readonly orderingKey: number;
  readonly attempts: number;
  readonly eventId: string;
  /** Its event's anticipation request (for logs). */
  readonly anticipationRequestId: string;
  readonly payload: string;
  readonly url: string;
  /** The webhook's own headers, read with its URL: sent on this attempt. */
  readonly headers: WebhookHeaders;
  /** Its client certificate (which one: the deliverer opens the sealed material by it); null: none of its own. */
  readonly clientCertificate: ClientCertificateInfo | null;
  /** Its OAuth2 client credentials but the secret; null: no token is sent. */
  readonly oauth2: OAuth2Settings | null;
  readonly activeHmac: boolean;
  readonly secret: string | null;
  readonly previousSecret: string | null;
  readonly previousSecretExpiresAt: number | null;
  /**
   * Its event's trace context (domain/trace-context.ts): the traceparent its attempts are
   * children of, and the tracestate; null when the event has none. Read with the row, so that
   * a retry after a restart joins the event's trace.
   */
  readonly traceparent: string | null;
  readonly tracestate: string | null;
  /**
   * Why no request body can be built from the stored event (a damaged row), or null. Such a
   * delivery can never be sent: the dispatcher marks it dead with this reason and goes on.
   */
  readonly unsendable: string | null;
}

export interface DeliveryRow {
  readonly id: number;
  readonly orgId: string;
  readonly eventId: string;
  readonly eventType: string;
  readonly anticipationRequestId: string;
  readonly status: DeliveryStatus;
  readonly attempts: number;
  readonly nextAttemptAt: number;
  readonly lastAttemptAt: number | null;
  readonly lastStatusCode: number | null;
  readonly lastError: string | null;
  readonly createdAt: number;
  readonly updatedAt: number;
  /** Its event's trace id (32 hex digits), or null when the event has no trace context. */
  readonly traceId: string | null;
}

/** Where a delivery stands in its queue: what retry-now asks before bringing its next attempt forward (DeliveriesRepo.waitState). */
export interface DeliveryWaitState {
  readonly status: DeliveryStatus;
  readonly attempts: number;
  /** Epoch ms. */
  readonly nextAttemptAt: number;
  /** Leased for an attempt (in flight, or claimed ahead to start shortly). */
  readonly leased: boolean;
  readonly orderingKey: number;
  /**
   * A pending delivery of the same request that holds this one back by the claim's own rule
   * (DeliveriesRepo.dueRows: one in flight, or an earlier change still pending); null when none does.
   */
  readonly heldBy: number | null;
  /** Its webhook's status; null when the organization has no webhook. */
  readonly webhookStatus: string | null;
}

export interface AttemptRow {
  readonly id: number;
  readonly attempt: number;
  readonly startedAt: number;
  readonly durationMs: number;
  readonly url: string;
  readonly statusCode: number | null;
  readonly errorClass: string | null;
  readonly errorDetail: string | null;
  readonly responseBody: string | null;
  readonly outcome: string;
  /** The webhook-timestamp (seconds) the attempt sent; null when it sent nothing, or was recorded before schema 10. */
  readonly sentTimestamp: number | null;
  /** The webhook-signature header it sent; null when unsigned, nothing sent, or recorded before schema 10. */
  readonly sentSignature: string | null;
}

export interface ListFilter {
  readonly status?: DeliveryStatus | 'failed' | undefined;
  /** Queued at or after (epoch ms). */
  readonly since?: number | undefined;
  /** Queued before (epoch ms). */
  readonly until?: number | undefined;
  /** Cursor: only deliveries with a smaller id (newest first). */
  readonly beforeId?: number | undefined;
  /**
   * Only deliveries with this id or a larger one. A time window becomes this and beforeId
   * (DeliveriesRepo.idsCreated), so that a page deep in a large log is found without reading
   * the newer deliveries first.
   */
  readonly fromId?: number | undefined;
  /**
   * Only deliveries of this anticipation request. No index holds deliveries by request (one
   * would be written at a random place for every ingested event), so the deliveries with ids
   * in [fromId, beforeId) are read one by one: the caller bounds that range.
   */
  readonly requestId?: string | undefined;
  readonly limit: number;
}

/** Attempts of one bucket of time (see DeliveriesRepo.attemptCounts). */
export interface AttemptCount {
  /** The bucket's number: 0 for the one starting at the window's start. */
  readonly bucket: number;
  /** Attempts that delivered (a 2xx answer). */
  readonly succeeded: number;
  /** Every other attempt: an error answer, a timeout, a connection failure, a refusal. */
  readonly failed: number;
}

/** Where a tailed feed file was last committed, and how to recognise that file again. */
export interface FeedPosition {
  readonly source: string;
  readonly dev: string;
  readonly ino: string;
  /** sha256 (hex) of the file's first `fingerprintBytes` bytes. */
  readonly fingerprint: string;
  readonly fingerprintBytes: number;
  /** Byte offset just past the last committed line. */
  readonly position: number;
  /**
   * sha256 (hex) of the up to 256 bytes just before `position`: a file rewritten with the same
   * first bytes is told apart by what precedes the committed position. Null for positions
   * committed before schema version 8.
   */
  readonly tailFingerprint: string | null;
}

export interface FeedReject {
  readonly id: number;
  readonly source: string;
  readonly position: number | null;
  readonly lineBytes: number;
  readonly raw: Buffer;
  readonly reason: RejectReason;
  readonly detail: string;
  readonly eventId: string | null;
  readonly receivedAt: number;
}

export interface FeedStats {
  readonly source: string;
  readonly accepted: number;
  readonly duplicates: number;
  readonly quarantined: number;
  readonly updatedAt: number;
}

/** Delivery health of a webhook, kept by the dispatcher. */
export interface WebhookHealth {
  readonly consecutiveFailures: number;
  readonly failingSince: number | null;
  readonly lastSuccessAt: number | null;
  readonly disabledReason: string | null;
}

/** A webhook's status before and after a change, with why it was disabled when it was. */
export interface WebhookStatusChange {
  readonly from: WebhookStatus;
  readonly to: WebhookStatus;
  readonly disabledReason: string | null;
}

/** A webhook with its delivery health, for status reports (never the secret). */
export interface WebhookWithHealth extends Webhook, WebhookHealth {
  /** Its deliveries sent after a later change of their request (see DeliveriesRepo.lease); always 0 on SQLite. */
  readonly outOfOrderDeliveries: number;
}

/** Rows a prune removed (or, in a dry run, would remove). */
export interface PrunedRows {
  events: number;
  deliveries: number;
  attempts: number;
  quarantinedLines: number;
}

export const noPrunedRows = (): PrunedRows => ({ events: 0, deliveries: 0, attempts: 0, quarantinedLines: 0 });

/**
 * Where a prune stops and starts: the newest row of each table it may touch, and the oldest
 * event's seq. Rowids are never handed out twice: SQLite
 * gives a new row max(rowid) + 1, so removing the newest row would give its id (an event's seq,
 * a delivery id the API shows, a quarantine id the CLI pages by) to the next row. Retention keeps
 * these rows, whatever their age.
 */
export interface PruneBounds {
  /** The oldest event's seq, where a pass starts. */
  readonly oldestSeq: number;
  readonly seq: number;
  readonly deliveryId: number;
  readonly attemptId: number;
  readonly rejectId: number;
}

/** An event to store, read at byte `position` of its source (null: a source without offsets). */
export interface EventToStore {
  readonly event: StorableEvent;
  readonly position: number | null;
}

/** A delivery to queue: the outbox row of a stored event for its organization's webhook. */
export interface DeliveryToQueue {
  readonly eventSeq: number;
  readonly orgId: string;
  readonly orderingKey: number;
  /**
   * Where the change stands in its request's order (epoch ms; PostgreSQL, see
   * DeliveriesRepo.dueRows): a feed line's occurred_at. Absent: the queue time (a recovery
   * queues old events in the order it queues them, as a replay does).
   */
  readonly orderAt?: number;
  /** Not sent before this (epoch ms; PostgreSQL: the reorder window, see reorderReleaseAt). Absent: the queue time. */
  readonly releaseAt?: number;
  /** The change's status and the one its line names before it (PostgreSQL, a feed change): what a later change's wait for its predecessor reads. */
  readonly statuses?: ChangeStatuses | null;
  /** Until when it may wait for its predecessor (delivery.orderHold, see orderHoldUntil); absent or null: no wait. */
  readonly holdUntil?: number | null;
}

/** A change of a request leased for its first attempt after a later change of the request was already sent (see DeliveriesRepo.lease). */
export interface OutOfOrderDelivery {
  readonly id: number;
  readonly orgId: string;
  readonly eventId: string;
  readonly anticipationRequestId: string;
}

/** What DeliveriesRepo.lease answers. */
export interface Leased {
  /**
   * The epoch each delivery was leased under, by id: its fencing token (see
   * DeliveriesRepo.lease). Null where the store fences nothing (SQLite: one daemon per file).
   */
  readonly epochs: ReadonlyMap<number, number> | null;
  /** Ids of deliveries leased for their first attempt after a later change of their request was sent (always empty on SQLite). */
  readonly late: readonly number[];
}

/** A finished attempt as stored in the attempts log. */
export type AttemptToStore = Omit<AttemptRow, 'id'> & { readonly deliveryId: number };

/** An organization's turn to claim (see DeliveriesRepo.claimTurns). */
export interface ClaimTurn {
  /** Deliveries of the organization leased now by other instances (unexpired leases). */
  readonly leasedElsewhere: number;
  /** The webhook's stored status is `failing`. */
  readonly failing: boolean;
  /** The database is shared by several instances (PostgreSQL): claims take only what can start now. */
  readonly shared: boolean;
  /** The webhook's rate limit and the deliveries it started lately, or null (no limit, or not asked for). */
  readonly rate?: RateState | null;
}

/** A delivery's new state once an attempt has ended (see DeliveriesRepo.settle). */
export interface Settlement {
  readonly status: DeliveryStatus;
  readonly attempts: number;
  readonly nextAttemptAt: number;
  readonly at: number;
  readonly statusCode: number | null;
  readonly error: string | null;
}

/** Where a webhook's requests go and what signs them: only services that sign a request load it. */
export interface WebhookSigningKeys {
  readonly url: string;
  readonly activeHmac: boolean;
  readonly secret: string | null;
  readonly previousSecret: string | null;
  readonly previousSecretExpiresAt: number | null;
}

/** What a webhook registration sets besides its URL and signing. */
export interface WebhookSettings {
  /** Deliveries per second at most (1-10,000); null for no limit. */
  readonly rateLimit: number | null;
  /** The webhook's own headers, sent on every attempt (none: empty). */
  readonly headers: WebhookHeaders;
  /** What may be shown of its client certificate (mutual TLS); null: none. */
  readonly clientCertificate: ClientCertificateInfo | null;
  /** Its OAuth2 client credentials but the secret; null: none. */
  readonly oauth2: OAuth2Settings | null;
  /** The secrets of both, sealed (domain/sealing.ts). */
  readonly sealed: SealedCredentials;
}

/** A webhook's credentials for its receiver as the database holds them: sealed, opened only with the key-encryption key. */
export interface SealedCredentials {
  /** The client certificate's chain and private key (domain/client-certificate.ts materialText), sealed; null: none. */
  readonly clientCertificate: string | null;
  /** The OAuth2 client secret, sealed; null: none. */
  readonly oauth2ClientSecret: string | null;
}

export const NO_SEALED_CREDENTIALS: SealedCredentials = Object.freeze({ clientCertificate: null, oauth2ClientSecret: null });

/** A webhook registered without settings: no rate limit, no headers of its own, no credentials for its receiver. */
export const DEFAULT_WEBHOOK_SETTINGS: WebhookSettings = Object.freeze({ rateLimit: null, headers: Object.freeze([]) as WebhookHeaders, clientCertificate: null, oauth2: null, sealed: NO_SEALED_CREDENTIALS });

/** A webhook that may receive deliveries (WebhooksRepo.deliverable). */
export interface DeliverableWebhook {
  readonly orgId: string;
  readonly status: WebhookStatus;
  readonly lastSuccessAt: number | null;
  readonly rateLimit: number | null;
}

/** A webhook's rate limit and the deliveries it started lately, judged at `now` (see domain/rate-window.ts). */
export interface RateState {
  readonly orgId: string;
  readonly limit: number;
  readonly window: RateWindow;
  /** Epoch ms, in the clock of `window`. */
  readonly now: number;
}

/** A page of the audit trail, newest first (AuditRepo.list); each filter given narrows it. */
export interface AuditFilter {
  readonly orgId?: string | undefined;
  /** The actor's name, exactly (an e-mail, a Unix user). */
  readonly actor?: string | undefined;
  readonly action?: string | undefined;
  readonly outcome?: string | undefined;
  /** Only entries with this id or a larger one (a `since` time becomes this: AuditRepo.firstAt). */
  readonly fromId?: number | undefined;
  /** Cursor: only entries with a smaller id. */
  readonly beforeId?: number | undefined;
  readonly limit: number;
}

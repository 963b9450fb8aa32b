/**
 * The delivery log, as the admin API, the console and the CLI see it: pages of an
 * organization's deliveries (filters, time windows, a search by request), one delivery with its
 * attempts and the request hookrelay sends for it, its attempts per minute for the console's
 * chart; and what an operator does with the log: replay a delivery, recover a window, queue a
 * test event. The dispatcher's side of the deliveries (claiming, recording outcomes) is the
 * outbox (outbox.ts).
 */
import { setImmediate as yieldToEventLoop } from 'node:timers/promises';
import { credentialEchoes, hideEchoes, signatureEchoes, type Echo } from '../domain/credential-echoes.ts';
import { deliveryHeaders, requestHeadersOnTheWire } from '../domain/delivery-request.ts';
import { ErrorCode, HookrelayError, validationError } from '../domain/errors.ts';
import { storedBody } from '../domain/feed-event.ts';
import { iso } from '../domain/iso.ts';
import { orderingKey, testOrderingKey } from '../domain/ordering.ts';
import { signingSecrets } from '../domain/secrets.ts';
import { loggedHeaders, type WebhookHeaders } from '../domain/webhook-headers.ts';
import type { Webhook } from '../domain/types.ts';
import type { Store, Tx } from '../store/repos.ts';
import { DeliveryStatus, type AttemptRow, type DeliveryRow, type ListFilter, type WebhookSigningKeys } from '../store/values.ts';
import { AuditAction, type AuditContext } from '../domain/audit.ts';
import type { AuditTrail } from './audit.ts';
import { bringForward, deliveryNotFound } from './retry-now.ts';
import { queueTestEvent, TEST_EVENT_TYPE, TestKind } from './test-events.ts';
import { requireWebhook } from './webhooks.ts';
import { nobodyListens, type WorkSignal } from './work-signal.ts';

/** Events (a span of seqs) that a chunked recovery handles per transaction. */
export const RECOVER_CHUNK_SEQS = 2_500;

export interface RecoverOptions {
  /** Called after each chunk (see recover) with the events covered so far and in all. */
  readonly onChunk?: (done: number, total: number) => void;
}

/** What a recovery did: events queued again (new deliveries), and failed deliveries made due now (the API's `retried_now`). */
export interface Recovered {
  readonly requeued: number;
  readonly retriedNow: number;
}

/** The public state of a delivery: `failed` is a pending delivery whose last attempt failed. */
export function publicStatus(row: Pick<DeliveryRow, 'status' | 'attempts'>): 'pending' | 'failed' | 'delivered' | 'dead' {
  return row.status === DeliveryStatus.pending && row.attempts > 0 ? 'failed' : row.status;
}

/**
 * A delivery's state in words that cannot be misread (the API's `state`, the CLI's STATUS, the
 * console's badge): `queued` (not attempted yet), `retrying` (its last attempt failed, the next
 * is at next_attempt_at: publicStatus's `failed`), `delivered`, `failed_for_good` (dead: no
 * attempt is left; replayable). `status` keeps v1's names; this says the same in other words.
 */
export const DeliveryState = { queued: 'queued', retrying: 'retrying', delivered: 'delivered', failedForGood: 'failed_for_good' } as const;
export type DeliveryState = (typeof DeliveryState)[keyof typeof DeliveryState];

const STATE_OF_STATUS = { pending: DeliveryState.queued, failed: DeliveryState.retrying, delivered: DeliveryState.delivered, dead: DeliveryState.failedForGood } as const;

export function deliveryState(row: Pick<DeliveryRow, 'status' | 'attempts'>): DeliveryState {
  return STATE_OF_STATUS[publicStatus(row)];
}

/** The status (publicStatus's name, which the store's filter takes) of a state name; the status names are their own. */
export function statusOfName(name: string): ReturnType<typeof publicStatus> | null {
  const found = Object.entries(STATE_OF_STATUS).find(([status, state]) => name === status || name === state);
  return found === undefined ? null : (found[0] as ReturnType<typeof publicStatus>);
}

/**
 * A search by request reads the log's deliveries one by one, by id (no index holds them by
 * request, see ListFilter.requestId), this many ids per read transaction, yielding to the
 * event loop between two (a few ms a chunk on SQLite: docs/console.md)...
 */
export const REQUEST_SEARCH_CHUNK_IDS = 50_000;
/**
 * ...and this many per call: a page not filled by then comes back with what was found (maybe
 * nothing) and a cursor that goes on from there.
 */
export const REQUEST_SEARCH_MAX_IDS = 500_000;

/** The chart's windows: how far back, and how long a bar is. */
export const STATS_WINDOWS = {
  '1h': { spanMs: 3_600_000, bucketMs: 60_000 },
  '24h': { spanMs: 86_400_000, bucketMs: 900_000 },
} as const;
export type StatsWindow = keyof typeof STATS_WINDOWS;
/** attemptStats reads a window an hour at a time, one read transaction each, yielding to the event loop between two. */
export const STATS_CHUNK_MS = 3_600_000;

/** One page of the delivery log: the store's filter, `beforeId` its cursor; the id range of a time window is the service's to work out (see page). */
export type LogQuery = Omit<ListFilter, 'fromId'>;

export interface LogPage {
  readonly deliveries: DeliveryRow[];
  /** The next (older) page's beforeId; null when there is none. */
  readonly nextBeforeId: number | null;
}

/** Attempts of one bar of the chart. */
export interface AttemptBucket {
  /** Epoch ms. */
  readonly start: number;
  readonly succeeded: number;
  readonly failed: number;
}

export interface AttemptStats {
  readonly window: StatsWindow;
  readonly bucketMs: number;
  /** Epoch ms: the first bucket's start. */
  readonly from: number;
  /** Epoch ms: the last bucket's end (the current bucket is under way: `until` is after now). */
  readonly until: number;
  /** Every bucket of the window, oldest first, empty ones included. */
  readonly buckets: AttemptBucket[];
}

/** How the delivery page shows a request's signature. */
export const SignatureShown = {
  /** The signature the attempt sent (or, never sent, one made now with the secrets that sign now). */
  included: 'included',
  /** The request is signed, but the caller may not see a signature (it cannot read the secret either). */
  withheld: 'withheld',
  /** The request is not signed: the attempt sent none (active_hmac was false), or the webhook does not sign. */
  unsigned: 'unsigned',
} as const;
export type SignatureShown = (typeof SignatureShown)[keyof typeof SignatureShown];

/** The request hookrelay sent for a delivery, or, when no attempt sent one yet, the one it would send now (see detail). */
export interface RequestAsSent {
  readonly url: string;
  /** Every header as the receiver gets it, in the order they are set. */
  readonly headers: Record<string, string>;
  /** The exact body: the same bytes on every attempt and replay. */
  readonly body: string;
  /** Epoch ms of the second webhook-timestamp names (when the headers were made). */
  readonly signedAt: number;
  readonly signature: SignatureShown;
  /** The attempt that sent this request (its number); null: no attempt sent one, this is a preview made now. */
  readonly attempt: number | null;
  /** When that attempt started (epoch ms); null for a preview. */
  readonly sentAt: number | null;
}

/**
 * The webhook's own headers as the request view shows them: with the Authorization an OAuth2
 * webhook's attempts carry, which the view hides as any credential (its token is never known
 * here: it is not stored).
 */
export function sentHeaders(webhook: Webhook): WebhookHeaders {
  return webhook.oauth2 === null ? webhook.headers : [...webhook.headers, ['Authorization', 'Bearer (an OAuth2 access token)']];
}

export interface DeliveryDetail {
  readonly delivery: DeliveryRow;
  readonly attempts: AttemptRow[];
  /** With the client certificate the webhook presents now (its own; null: none), never its key. */
  readonly request: RequestAsSent & { readonly clientCertificate: Webhook['clientCertificate'] };
}

/**
 * A delivery's attempts as a caller may read them. The answers a receiver gave, and the
 * sentences of errors, can repeat what the request carried (a receiver that echoes its
 * headers): the webhook's credentials (its headers isCredentialHeader takes for credentials,
 * as it has them now) are replaced by a marker for everyone, as the request view and
 * get_webhook hide them from everyone; the attempts were recorded with the ones they sent
 * hidden already (the deliverer), this covers those recorded before that, and credentials of
 * the webhook set since. Without `withSignature`, the signatures the attempts sent are gone
 * too, from their own field and from every answer that repeats them: the one rule for what a
 * caller who may not read the secret sees.
 */
export function shownAttempts(recorded: readonly AttemptRow[], headers: WebhookHeaders, withSignature: boolean): AttemptRow[] {
  const echoes: Echo[] = credentialEchoes(headers);
  if (!withSignature) for (const a of recorded) if (a.sentSignature !== null) echoes.push(...signatureEchoes(a.sentSignature));
  return recorded.map((a) => ({
    ...a,
    responseBody: hideEchoes(a.responseBody, echoes),
    errorDetail: hideEchoes(a.errorDetail, echoes),
    sentSignature: withSignature ? a.sentSignature : null,
  }));
}


export interface DeliveryLogOptions {
  /** The deliverer's User-Agent (DELIVERY_USER_AGENT). */
  readonly userAgent: string;
  /** How much of the log a search by request reads (tests make it small): REQUEST_SEARCH_CHUNK_IDS and REQUEST_SEARCH_MAX_IDS by default. */
  readonly requestSearch?: { readonly chunkIds: number; readonly maxIds: number };
}

/**
 * The delivery log's service. `work` hears of every delivery it queues (replay, recover, test),
 * so that the daemon's dispatcher sends it without waiting for a poll.
 */
export function createDeliveryLogService(store: Store, options: DeliveryLogOptions, audit: AuditTrail, work: WorkSignal = nobodyListens) {
  const search = options.requestSearch ?? { chunkIds: REQUEST_SEARCH_CHUNK_IDS, maxIds: REQUEST_SEARCH_MAX_IDS };

  return {
    /** Up to `filter.limit` of the organization's deliveries, newest first (`hookrelay deliveries list`). */
    list(orgId: string, filter: ListFilter): Promise<DeliveryRow[]> {
      return store.read((tx) => tx.deliveries.list(orgId, filter));
    },

    /**
     * One delivery with its attempts (`hookrelay deliveries show`; the API's is detail), for
     * the operator: signatures included, the webhook's credentials hidden (see shownAttempts).
     */
    get(orgId: string, id: number): Promise<{ delivery: DeliveryRow; attempts: AttemptRow[] }> {
      return store.read(async (tx) => {
        const row = await tx.deliveries.get(orgId, id);
        if (!row) throw deliveryNotFound(id);
        const webhook = await tx.webhooks.get(orgId);
        return { delivery: row, attempts: shownAttempts(await tx.deliveries.attempts(id), webhook?.headers ?? [], true) };
      });
    },

    /**
     * A page of the organization's deliveries, newest first. A time window is first turned
     * into a range of ids (idsCreated), so that a window deep in a large log is read from its
     * own place in the indexes. A search by request reads that range in chunks (searchByRequest).
     */
    async page(orgId: string, q: LogQuery): Promise<LogPage> {
      const filter = { status: q.status, since: q.since, until: q.until, requestId: q.requestId };
      let fromId = 0;
      let beforeId = q.beforeId;
      if (q.since !== undefined || q.until !== undefined || q.requestId !== undefined) {
        const ids = await store.read((tx) => tx.deliveries.idsCreated(q.since ?? null, q.until ?? null));
        fromId = ids.from;
        beforeId = Math.min(beforeId ?? ids.to, ids.to);
        if (beforeId <= fromId) return { deliveries: [], nextBeforeId: null };
      }
      if (q.requestId === undefined) {
        return pageOf(await store.read((tx) => tx.deliveries.list(orgId, { ...filter, fromId, beforeId, limit: q.limit + 1 })), q.limit);
      }
      return searchByRequest(store, search, orgId, { ...filter, fromId, beforeId: beforeId!, limit: q.limit });
    },

    /**
     * One delivery, its attempts, and the request hookrelay sent for it (requestAsSent): a
     * caller who may not read the secret (`withSignature` false) sees no signature, the
     * request's nor any attempt's; nobody sees the webhook's credentials (see shownAttempts).
     */
    detail(orgId: string, id: number, withSignature: boolean): Promise<DeliveryDetail> {
      return store.read(async (tx) => {
        const delivery = await tx.deliveries.get(orgId, id);
        if (!delivery) throw deliveryNotFound(id);
        const recorded = await tx.deliveries.attempts(id);
        const event = (await tx.feed.storedEvents([delivery.eventId])).get(delivery.eventId);
        const keys = await tx.webhooks.signingKeys(orgId);
        const webhook = await tx.webhooks.get(orgId);
        // A delivery's event and its organization's webhook outlive it (retention removes them together).
        if (!event || !keys || !webhook) throw deliveryNotFound(id);
        const request = requestAsSent({ eventId: delivery.eventId, body: storedBody(event), recorded, keys, headers: sentHeaders(webhook) }, withSignature, options.userAgent, store.clock.now());
        return { delivery, attempts: shownAttempts(recorded, webhook.headers, withSignature), request: { ...request, clientCertificate: webhook.clientCertificate } };
      });
    },

    /**
     * The organization's attempts per bucket of the window, succeeded (a 2xx answer) and failed
     * (anything else), by the time they started. Buckets are aligned on their size (whole
     * minutes, quarters of an hour, UTC) and the last one is the one under way. Read an hour
     * at a time (STATS_CHUNK_MS), each through delivery_attempts_started.
     */
    attemptStats(orgId: string, window: StatsWindow): Promise<AttemptStats> {
      return attemptStatsOf(store, orgId, window);
    },

    /** Queues the delivery's event again (same webhook-id) with a fresh retry schedule. */
    async replay(by: AuditContext, orgId: string, id: number): Promise<DeliveryRow> {
      const queued = await audit.change(by, { action: AuditAction.deliveryReplay, orgId, target: `delivery ${id}` }, (rec) =>
        store.transaction(async (tx) => {
          const row = await queueAgain(store, tx, orgId, id);
          await rec.record(tx, { changes: { new_delivery_id: row.id, event_id: row.eventId } });
          return row;
        }),
      );
      work.notify(orgId, 'queued');
      return queued;
    },

    /**
     * Re-queues every event of the organization received in [since, until) that was never
     * delivered: dead and undeliverable ones get a new delivery, failed ones are made due now.
     */
    recover(by: AuditContext, orgId: string, since: number, until?: number, recoverOptions: RecoverOptions = {}): Promise<Recovered> {
      // In chunks, a transaction each: its entry is recorded once they are all done, in one of its own.
      return audit.change(by, { action: AuditAction.webhookRecover, orgId }, async (rec) => {
        const recovered = await recoverWindow(store, work, orgId, since, until, recoverOptions);
        const changes = { since: iso(since), until: until === undefined ? null : iso(until), requeued: recovered.requeued, retried_now: recovered.retriedNow };
        await rec.recordAlone({ changes });
        return recovered;
      });
    },

    /**
     * Retry now: a delivery waiting for its next attempt (failed, not dead) is made due at once,
     * and the dispatcher hears of it. Its request's later changes stay behind it (the claim's
     * held-back rule), so the order of a request's changes holds. Anything else is refused with
     * `delivery_not_waiting`, saying what to do instead (see notWaiting).
     */
    async retryNow(by: AuditContext, orgId: string, id: number): Promise<DeliveryRow> {
      const { row, orderingKey } = await audit.change(by, { action: AuditAction.deliveryRetry, orgId, target: `delivery ${id}` }, (rec) =>
        store.transaction(async (tx) => {
          const brought = await bringForward(store, tx, orgId, id);
          await rec.record(tx, { changes: { next_attempt_at: iso(brought.row.nextAttemptAt) } });
          return brought;
        }),
      );
      work.notify(orgId, 'queued', new Set([orderingKey]));
      return row;
    },

    /** Stores and queues a test event for the organization's webhook: a `webhook.test`, or a sample status change (TestKind). */
    async sendTest(by: AuditContext, orgId: string, kind: TestKind = TestKind.webhookTest): Promise<DeliveryRow> {
      const queued = await audit.change(by, { action: AuditAction.webhookTest, orgId }, (rec) =>
        store.transaction(async (tx) => {
          const row = await queueTestEvent(store, tx, orgId, kind);
          await rec.record(tx, { changes: { kind, delivery_id: row.id, event_id: row.eventId } });
          return row;
        }),
      );
      work.notify(orgId, 'queued');
      return queued;
    },
  };
}
export type DeliveryLogService = ReturnType<typeof createDeliveryLogService>;

/**
 * The one time base of every queue: when a delivery is queued (ingest, replay, recovery, test
 * events), its created_at is the clock, but never before the newest stored event (see
 * FeedRepo.receivedAt), so queue order and time order agree even when the clock steps back.
 * Call inside the write transaction.
 */
function queueTime(store: Store, tx: Tx): Promise<number> {
  return tx.feed.receivedAt(store.clock.now());
}

/** A new delivery of the delivery's event, once none of it is pending (replay), in the caller's transaction. */
async function queueAgain(store: Store, tx: Tx, orgId: string, id: number): Promise<DeliveryRow> {
  await requireWebhook(tx, orgId);
  const row = await tx.deliveries.get(orgId, id);
  if (!row) throw deliveryNotFound(id);
  const ref = (await tx.deliveries.eventOf(id))!;
  if (await tx.deliveries.hasPendingDelivery(ref.eventSeq)) {
    throw validationError(`delivery ${id}'s event is already queued (a delivery of it is pending); replay it once that one is delivered or dead, or retry that one now if it is waiting for its next attempt`, [{ name: 'id', reason: 'the event has a pending delivery' }]);
  }
  const newId = await tx.deliveries.insert(ref.eventSeq, orgId, ref.orderingKey, await queueTime(store, tx));
  return (await tx.deliveries.get(orgId, newId))!;
}

/** A page of `limit` deliveries from rows read with one more than `limit`: the extra row says there is a next page. */
function pageOf(rows: DeliveryRow[], limit: number): LogPage {
  const deliveries = rows.slice(0, limit);
  return { deliveries, nextBeforeId: rows.length > limit ? deliveries[deliveries.length - 1]!.id : null };
}

/**
 * A search by request: reads the deliveries of [fromId, beforeId) one by one, newest first,
 * `chunkIds` ids per read transaction, yielding to the event loop between two, until the page
 * is full, the range is read, or `maxIds` ids were read: then the page may hold fewer
 * deliveries than `limit` (even none) and still have a next page.
 */
async function searchByRequest(store: Store, search: { readonly chunkIds: number; readonly maxIds: number }, orgId: string, f: ListFilter & { fromId: number; beforeId: number }): Promise<LogPage> {
  const found: DeliveryRow[] = [];
  let top = f.beforeId;
  const end = Math.max(f.fromId, top - search.maxIds);
  while (top > end) {
    const bottom = Math.max(end, top - search.chunkIds);
    const upper = top;
    found.push(...(await store.read((tx) => tx.deliveries.list(orgId, { ...f, fromId: bottom, beforeId: upper, limit: f.limit + 1 - found.length }))));
    if (found.length > f.limit) return pageOf(found, f.limit);
    top = bottom;
    if (top > end) await yieldToEventLoop();
  }
  return { deliveries: found, nextBeforeId: end > f.fromId ? end : null };
}

/** What requestAsSent is made of: a delivery's event id and exact body, its recorded attempts, and its webhook's signing keys and headers as they are now. */
export interface RequestParts {
  readonly eventId: string;
  readonly body: string;
  readonly recorded: readonly AttemptRow[];
  readonly keys: WebhookSigningKeys;
  readonly headers: WebhookHeaders;
}

/**
 * The request hookrelay sent for a delivery: its exact body (the same bytes on every attempt)
 * and every header, with the webhook-timestamp and the webhook-signature the latest attempt
 * that sent a request recorded. When no attempt sent one (never attempted; or every attempt
 * ended before sending, and attempts recorded before schema 10), a preview: the timestamp and
 * the signature made at `now`, as an attempt made now would carry them, with the secrets that
 * sign now (`attempt` null). The webhook's own headers are the ones it has now (an attempt does
 * not record them), by lower-case name, with every value that may be a credential hidden
 * (domain/webhook-headers.ts). Only with `withSignature` (a caller who may read the secret) is
 * there a signature: one less than five minutes old would let anyone who sees it make the
 * receiver accept that request.
 */
export function requestAsSent(parts: RequestParts, withSignature: boolean, userAgent: string, now: number): RequestAsSent {
  const { eventId, body, keys } = parts;
  const custom = loggedHeaders(parts.headers);
  const shown = (signed: boolean): SignatureShown => (!signed ? SignatureShown.unsigned : withSignature ? SignatureShown.included : SignatureShown.withheld);
  const sent = parts.recorded.findLast((a) => a.sentTimestamp !== null);
  if (sent !== undefined) {
    const timestampSeconds = sent.sentTimestamp!;
    const signature = shown(sent.sentSignature !== null);
    const headers = deliveryHeaders({ eventId, timestampSeconds, body, secrets: [], signature: signature === SignatureShown.included ? sent.sentSignature : null, userAgent, custom });
    return { url: sent.url, headers: requestHeadersOnTheWire(sent.url, headers, body), body, signedAt: timestampSeconds * 1000, signature, attempt: sent.attempt, sentAt: sent.startedAt };
  }
  const timestampSeconds = Math.floor(now / 1000);
  const secrets = signingSecrets(keys, now);
  const signature = shown(secrets.length > 0);
  const headers = deliveryHeaders({ eventId, timestampSeconds, body, secrets: signature === SignatureShown.included ? secrets : [], userAgent, custom });
  return { url: keys.url, headers: requestHeadersOnTheWire(keys.url, headers, body), body, signedAt: timestampSeconds * 1000, signature, attempt: null, sentAt: null };
}

/** The chart's buckets of the window (see DeliveryLogService.attemptStats), read an hour at a time. */
async function attemptStatsOf(store: Store, orgId: string, window: StatsWindow): Promise<AttemptStats> {
  const { spanMs, bucketMs } = STATS_WINDOWS[window];
  const until = (Math.floor(store.clock.now() / bucketMs) + 1) * bucketMs;
  const from = until - spanMs;
  const buckets = Array.from({ length: spanMs / bucketMs }, (_, i) => ({ start: from + i * bucketMs, succeeded: 0, failed: 0 }));
  for (let start = from; start < until; start += STATS_CHUNK_MS) {
    const end = Math.min(until, start + STATS_CHUNK_MS);
    const first = (start - from) / bucketMs;
    for (const c of await store.read((tx) => tx.deliveries.attemptCounts(orgId, start, end, bucketMs))) {
      const bucket = buckets[first + c.bucket];
      if (bucket) {
        bucket.succeeded += c.succeeded;
        bucket.failed += c.failed;
      }
    }
    if (end < until) await yieldToEventLoop();
  }
  return { window, bucketMs, from, until, buckets };
}

/**
 * The recovery of a window (see DeliveryLogService.recover), RECOVER_CHUNK_SEQS events per
 * transaction (recoverChunk): the daemon's other work (the admin API, attempts, the feed) runs
 * between two. A lock held by another process part way through keeps the chunks committed,
 * and says how far it got.
 */
async function recoverWindow(store: Store, work: WorkSignal, orgId: string, since: number, until: number | undefined, options: RecoverOptions): Promise<Recovered> {
  // Without `until`: everything received so far, which may be later than the clock if it stepped back.
  const end = until ?? (await store.read((tx) => tx.feed.receivedAt(store.clock.now()))) + 1;
  if (!(since < end)) throw validationError('"since" must be before "until"', [{ name: 'since', reason: 'must be before until' }]);
  const { from, to } = await store.read((tx) => tx.feed.seqRange(since, end));
  const counts = { requeued: 0, retriedNow: 0 };
  options.onChunk?.(0, to - from);
  try {
    for (let lo = from; lo < to; lo += RECOVER_CHUNK_SEQS) {
      const hi = Math.min(lo + RECOVER_CHUNK_SEQS, to);
      const chunk = await store.transaction((tx) => recoverChunk(store, tx, orgId, lo, hi));
      counts.requeued += chunk.requeued;
      counts.retriedNow += chunk.retriedNow;
      options.onChunk?.(hi - from, to - from);
      if (hi < to) await yieldToEventLoop();
    }
  } catch (err) {
    if (counts.requeued + counts.retriedNow === 0 || !(err instanceof HookrelayError) || err.code !== ErrorCode.databaseBusy) throw err;
    work.notify(orgId, 'queued');
    throw new HookrelayError(
      ErrorCode.databaseBusy,
      `the database stayed locked by another process (a hookrelay CLI command or a backup, say) part way through: ${counts.requeued} event(s) of the window were queued again and ${counts.retriedNow} failed delivery(ies) made due now; recover again shortly to do the rest (nothing is queued twice)`,
      { cause: err },
    );
  }
  if (from >= to) await store.read((tx) => requireWebhook(tx, orgId));
  if (counts.requeued + counts.retriedNow > 0) work.notify(orgId, 'queued');
  return counts;
}

/** Requeues the organization's events with seq in [from, to), in the caller's transaction. */
async function recoverChunk(store: Store, tx: Tx, orgId: string, from: number, to: number): Promise<Recovered> {
  await requireWebhook(tx, orgId);
  const queuedAt = await queueTime(store, tx);
  const queue = (await tx.deliveries.recoverable(orgId, from, to)).map((e) => ({
    eventSeq: e.eventSeq,
    orgId,
    orderingKey: e.type === TEST_EVENT_TYPE ? testOrderingKey(orgId, e.eventId) : orderingKey(orgId, e.anticipationRequestId),
  }));
  if (queue.length > 0) await tx.deliveries.insertMany(queue, queuedAt);
  // Retries are due by the raw clock (see DeliveriesRepo.dueRows): made due now by it.
  return { requeued: queue.length, retriedNow: await tx.deliveries.retryFailedNow(orgId, from, to, store.clock.now()) };
}

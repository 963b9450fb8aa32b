import { randomUUID } from 'node:crypto';
import { setImmediate as yieldToEventLoop } from 'node:timers/promises';
import { ErrorCode, HookrelayError, validationError } from '../domain/errors.ts';
import { orderingKey, testOrderingKey } from '../domain/ordering.ts';
import { ratePermits, rateTake } from '../domain/rate-window.ts';
import { isSuccess, type AttemptResult, type DeliveryOutcome } from '../domain/retry-policy.ts';
import { generateWebhookSecret, signingSecrets } from '../domain/secrets.ts';
import { WebhookStatus } from '../domain/types.ts';
import { loggableUrl } from '../domain/validation.ts';
import { DisabledReason, disabledReasonText } from '../domain/webhook-health.ts';
import type { Logger } from '../log.ts';
import { DeliveryStatus, sendable, type AttemptToStore, type DeliverableWebhook, type OutOfOrderDelivery, type DeliveryRow, type Settlement, type DueDelivery, type ListFilter, type Store, type Tx } from '../store/repos.ts';
import type { WebhookHealth, WebhookStatusChange } from '../store/repos.ts';
import { nobodyListens, type WorkSignal } from './work-signal.ts';

export const TEST_EVENT_TYPE = 'webhook.test';

/** Events (a span of seqs) that a chunked recovery handles per transaction. */
export const RECOVER_CHUNK_SEQS = 2_500;

export interface RecoverOptions {
  /** Called after each chunk (see recover) with the events covered so far and in all. */
  readonly onChunk?: (done: number, total: number) => void;
  /**
   * The daemon's mode: a chunk that finds the database locked by another process is tried again
   * on a timer for up to `maxWaitMs` (store/sqlite/lock-wait.ts). Without it, the lock is waited for
   * in SQLite (the CLI's connection has a busy timeout).
   */
  readonly lockWait?: { readonly maxWaitMs?: number };
}

/** A delivery claimed for one attempt: what to send and where. */
export interface ClaimedDelivery extends DueDelivery {
  readonly secrets: readonly string[];
  /**
   * A later change of the same request was seen waiting behind it in the claim (or may wait,
   * as behind a retry): whoever ends its attempt should look at its organization again.
   */
  holdsBack: boolean;
}

/** An attempt that has ended, with what it means for its delivery. */
export interface FinishedAttempt {
  readonly delivery: ClaimedDelivery;
  readonly result: AttemptResult;
  readonly outcome: DeliveryOutcome;
  /** Epoch ms. */
  readonly startedAt: number;
}

/** Up to `room` deliveries of the organization, if it has them due. */
export interface ClaimWanted {
  readonly orgId: string;
  readonly room: number;
  /**
   * On a database shared by several instances: the most this claim may lease, what this
   * instance can start now (the webhook's free slots here, within the instance's own free
   * slots), so that nothing waits leased in one instance while another could send it. The
   * leases other instances hold are taken off it (see claimIn). `room` when not given.
   */
  readonly cap?: number;
  /**
   * The dispatcher believes the webhook has a rate limit: on SQLite the claim reads the limit
   * and its state for these only (see DeliveriesRepo.claimTurns). PostgreSQL reads them for all.
   */
  readonly rateLimited?: boolean;
}

/** What the dispatcher hands over in one group commit. */
export interface FlushWork {
  readonly finished: readonly FinishedAttempt[];
  /** Claimed, then not attempted after all (the daemon is stopping): given back without counting an attempt. */
  readonly released: readonly ClaimedDelivery[];
  /** Deliveries to lease, organizations in the order given; null to lease nothing. */
  readonly claim: { readonly wanted: readonly ClaimWanted[]; readonly leaseMs: number } | null;
}

export interface FlushResult {
  readonly claimed: ClaimedDelivery[];
  /**
   * Organizations whose due queue was read to its end (every row due now was taken or is held
   * back behind a change in flight), with their next retry time (epoch ms, null: none).
   */
  readonly drained: Array<{ orgId: string; nextRetryAt: number | null }>;
  /** Rows found unsendable and marked dead. */
  readonly unsendable: Array<{ id: number; orgId: string; eventId: string; reason: string }>;
  /**
   * Organizations not claimed for because other instances sharing the database hold their
   * turn or their slots (never on SQLite): the dispatcher looks at them again shortly.
   */
  readonly contended: string[];
  /** Outcomes not applied: the lease had lapsed and another instance had taken the delivery over (never on SQLite). */
  readonly superseded: Array<{ id: number; orgId: string }>;
  /**
   * Organizations whose webhook has started as many deliveries as its rate limit allows for
   * now (this claim took the last of them, or found none left): nothing more of theirs may
   * be claimed for `waitMs`. Their due deliveries stay pending, unleased, untouched.
   */
  readonly rateLimited: Array<{ orgId: string; waitMs: number }>;
  /**
   * Deliveries leased for their first attempt after a later change of their request was
   * already sent: stored too late for the reorder window (never on SQLite). They are sent all
   * the same, and counted on their webhook.
   */
  readonly outOfOrder: OutOfOrderDelivery[];
}

export interface DeliveryServiceOptions {
  readonly failingAfterFailures: number;
  readonly disableAfterMs: number;
  readonly secretRotationGraceMs: number;
}

/** The summary of successful deliveries names at most this many organizations (the busiest); the rest are counted together. */
export const SUMMARY_MAX_ORGS = 20;

/** A webhook status change made while recording, logged once the transaction has committed. */
interface StatusChangeOf {
  readonly orgId: string;
  readonly url: string;
  readonly change: WebhookStatusChange;
  /** The webhook's health once the change was made, read in the same transaction (for the log line). */
  health?: WebhookHealth | null;
}

/** The public state of a delivery: `failed` is a pending delivery whose last attempt failed. */
export function publicStatus(row: Pick<DeliveryRow, 'status' | 'attempts'>): 'pending' | 'failed' | 'delivered' | 'dead' {
  return row.status === DeliveryStatus.pending && row.attempts > 0 ? 'failed' : row.status;
}

function notFound(id: number | string): HookrelayError {
  return new HookrelayError(ErrorCode.deliveryNotFound, `no delivery ${id} for this organization`);
}

/**
 * The delivery outbox: claiming under a lease and recording outcomes (for the dispatcher),
 * and the delivery log, replay, recovery, test events and webhook health (for API and CLI).
 */
export function createDeliveryService(store: Store, log: Logger, options: DeliveryServiceOptions, work: WorkSignal = nobodyListens) {
  /** Successful deliveries per organization since the last summary (see logDeliveredSummary). */
  let delivered = new Map<string, number>();
  let summaryFromMono = performance.now();

  /**
   * The one time base of every queue: when a delivery is queued (ingest, replay, recovery, test
   * events), its created_at is the clock, but never before the newest stored event (see
   * FeedRepo.receivedAt), so queue order and time order agree even when the clock steps back.
   * Call inside the write transaction.
   */
  function queueTime(tx: Tx): Promise<number> {
    return tx.feed.receivedAt(store.clock.now());
  }

  async function requireWebhook(tx: Tx, orgId: string) {
    const webhook = await tx.webhooks.get(orgId);
    if (!webhook) throw new HookrelayError(ErrorCode.webhookNotConfigured, `organization "${orgId}" has no webhook; register one first`);
    return webhook;
  }

  /**
   * Leases due deliveries of the organizations in `wanted`, in that order, at most `room` of
   * each. Each organization's queue is read once, one page (see
   * DeliveriesRepo.due), so a claim always ends; from a page it takes at most one delivery per
   * ordering key (a later change of a request waits for the earlier one). A row that can never
   * be sent is marked dead with the reason and skipped. Runs inside the caller's transaction.
   */
  async function claimIn(tx: Tx, wanted: readonly ClaimWanted[], leaseMs: number, now: number, into: FlushResult): Promise<void> {
    // On a database shared by several instances: one claim per webhook at a time, and its cap
    // and a failing webhook's one attempt at a time count every instance's leases.
    const rateLimited = new Set(wanted.filter((w) => w.rateLimited === true).map((w) => w.orgId));
    const turns = await tx.deliveries.claimTurns(wanted.map((w) => w.orgId), now, rateLimited);
    // Every organization's leases in one call, once all are read.
    const leased: number[] = [];
    for (const want of wanted) {
      const { orgId } = want;
      const turn = turns.get(orgId);
      if (turn === undefined) {
        into.contended.push(orgId);
        continue;
      }
      // One instance on its database (SQLite): its room, claimed-ahead deliveries included.
      // Shared (PostgreSQL): what it can start now (`cap`), and the webhook's leases in all
      // stay within its slots, so that its attempts in flight across instances never exceed
      // perWebhookConcurrency, and what this instance cannot start is left to the others.
      const limit = turn.failing ? 1 : turn.shared ? Math.min(want.room, want.cap ?? want.room) : want.room;
      let room = limit - turn.leasedElsewhere;
      if (room <= 0) {
        into.contended.push(orgId);
        continue;
      }
      // The rate limit: no more than it allows now, and none at all (nothing read, nothing
      // leased) when the deliveries started lately have reached it. They wait, unclaimed.
      const rate = turn.rate ?? null;
      if (rate !== null) {
        const { permits, waitMs } = ratePermits(rate.window, rate.limit, rate.now);
        if (permits <= 0) {
          into.rateLimited.push({ orgId, waitMs });
          continue;
        }
        room = Math.min(room, permits);
      }
      const pageSize = room * 2 + 2;
      const page = await tx.deliveries.dueRows(orgId, now, pageSize);
      const byKey = new Map<number, ClaimedDelivery>();
      let full = false;
      for (const row of page) {
        const earlier = byKey.get(row.ordering_key);
        if (earlier !== undefined) {
          earlier.holdsBack = true;
          continue;
        }
        if (byKey.size >= room) {
          full = true;
          break;
        }
        const d = sendable(row);
        if (d.unsendable !== null) {
          await tx.deliveries.markUnsendable(d.id, d.unsendable, now);
          into.unsendable.push({ id: d.id, orgId, eventId: d.eventId, reason: d.unsendable });
          continue;
        }
        leased.push(d.id);
        // A retry may hold back later changes of its request that the query left out; on
        // PostgreSQL the query says whether one waits (it leaves out all but a request's first).
        const claimed: ClaimedDelivery = { ...d, secrets: signingSecrets(d, now), holdsBack: d.attempts > 0 || row.holds_back === true };
        byKey.set(d.orderingKey, claimed);
        into.claimed.push(claimed);
      }
      // A short page read to its end is the whole of what is due now: the organization needs no
      // look before its next retry, a wake-up, or the end of an attempt holding a request back.
      if (page.length < pageSize && !full) into.drained.push({ orgId, nextRetryAt: await tx.deliveries.nextRetryAt(orgId, now) });
      if (rate !== null && byKey.size > 0) {
        // What this claim starts counts against the limit from now, for every instance.
        const window = rateTake(rate.window, rate.now, byKey.size);
        await tx.webhooks.setRateWindow(orgId, window);
        const after = ratePermits(window, rate.limit, rate.now);
        if (after.permits <= 0) into.rateLimited.push({ orgId, waitMs: after.waitMs });
      }
    }
    if (leased.length === 0) return;
    const late = await tx.deliveries.lease(leased, now + leaseMs, now);
    if (late.length > 0) await countOutOfOrder(tx, late, into);
  }

  /** Notes the late changes among those just claimed (see FlushResult.outOfOrder), and counts them on their webhooks. */
  async function countOutOfOrder(tx: Tx, ids: readonly number[], into: FlushResult): Promise<void> {
    const late = new Set(ids);
    const perOrg = new Map<string, number>();
    for (const d of into.claimed) {
      if (!late.has(d.id)) continue;
      into.outOfOrder.push({ id: d.id, orgId: d.orgId, eventId: d.eventId, anticipationRequestId: d.anticipationRequestId });
      perOrg.set(d.orgId, (perOrg.get(d.orgId) ?? 0) + 1);
    }
    for (const [orgId, n] of perOrg) await tx.webhooks.countOutOfOrder(orgId, n);
  }

  /**
   * Records one finished attempt (its log row goes into `attempts`, stored by the caller) and
   * applies its outcome. Runs inside the caller's transaction.
   */
  async function recordIn(tx: Tx, f: FinishedAttempt, now: number, lastSucceeded: Set<string>, changes: StatusChangeOf[], attemptRows: AttemptToStore[], settlements: Array<{ id: number; settlement: Settlement }>): Promise<void> {
    const { delivery: d, result, outcome } = f;
    const { webhooks } = tx;
    const attempts = d.attempts + 1;
    attemptRows.push({
      deliveryId: d.id,
      attempt: attempts,
      startedAt: f.startedAt,
      durationMs: result.durationMs,
      url: d.url,
      statusCode: result.statusCode,
      errorClass: result.error,
      errorDetail: result.errorDetail,
      responseBody: result.responseBody,
      outcome: outcome.kind === 'disable' ? 'disabled' : outcome.kind,
      sentTimestamp: result.sentTimestamp,
      sentSignature: result.sentSignature,
    });
    const error = result.errorDetail;
    const code = result.statusCode;
    const settlement: Settlement =
      outcome.kind === 'delivered'
        ? { status: DeliveryStatus.delivered, attempts, nextAttemptAt: now, at: now, statusCode: code, error: null }
        : outcome.kind === 'retry'
          ? { status: DeliveryStatus.pending, attempts, nextAttemptAt: outcome.at, at: now, statusCode: code, error }
          : outcome.kind === 'dead'
            ? { status: DeliveryStatus.dead, attempts, nextAttemptAt: now, at: now, statusCode: code, error }
            : // 'disable': held, not dropped: it goes out as soon as the webhook is enabled again.
              { status: DeliveryStatus.pending, attempts, nextAttemptAt: now, at: now, statusCode: code, error };
    settlements.push({ id: d.id, settlement });
    if (outcome.kind === 'disable') noteChange(changes, d, await webhooks.setStatus(d.orgId, WebhookStatus.disabled, DisabledReason.gone, now));
    // Webhook health, per organization in attempt order: a run of successes is one update
    // (they all set the same columns), failures each count.
    if (isSuccess(result)) {
      if (!lastSucceeded.has(d.orgId)) noteChange(changes, d, await webhooks.recordSuccess(d.orgId, now));
      lastSucceeded.add(d.orgId);
    } else if (outcome.kind !== 'disable') {
      noteChange(changes, d, await webhooks.recordFailure(d.orgId, now, options.failingAfterFailures, options.disableAfterMs));
      lastSucceeded.delete(d.orgId);
    }
  }

  function noteChange(changes: StatusChangeOf[], d: { orgId: string; url: string }, change: WebhookStatusChange | null): void {
    if (change !== null) changes.push({ orgId: d.orgId, url: d.url, change });
  }

  /** Logs a webhook status change at warn: an operator filtering on warnings sees it. */
  function logChange({ orgId, url, change, health }: StatusChangeOf, by: 'delivery' | 'operator'): void {
    const reason = change.to === WebhookStatus.disabled ? disabledReasonText(change.disabledReason, options.disableAfterMs) : undefined;
    const message =
      change.to === WebhookStatus.disabled
        ? `webhook disabled: ${reason}; its deliveries are held`
        : change.to === WebhookStatus.failing
          ? 'webhook failing: attempts fail in a row'
          : by === 'operator'
            ? 'webhook enabled: held deliveries go out'
            : 'webhook active again: an attempt succeeded';
    log.warn(
      {
        org: orgId,
        url: loggableUrl(url),
        from: change.from,
        to: change.to,
        ...(change.to === WebhookStatus.disabled ? { disabledReason: change.disabledReason } : {}),
        ...(health && change.to !== WebhookStatus.active ? { consecutiveFailures: health.consecutiveFailures, failingSince: health.failingSince === null ? null : new Date(health.failingSince).toISOString() } : {}),
        by,
      },
      message,
    );
  }

  /**
   * One line per attempt, at the level of what it means: a retry at warn, a dead delivery at
   * error, a 410 Gone at warn (its webhook's change to disabled is logged too), a success at
   * debug; successes are counted for the summary logged at info (see logDeliveredSummary). The
   * URL is logged as its origin only (see loggableUrl).
   */
  function logAttempt(f: FinishedAttempt): void {
    const { delivery: d, result: r, outcome } = f;
    if (outcome.kind === 'delivered') delivered.set(d.orgId, (delivered.get(d.orgId) ?? 0) + 1);
    const level = outcome.kind === 'delivered' ? 'debug' : outcome.kind === 'dead' ? 'error' : 'warn';
    if (!log.isLevelEnabled(level)) return;
    const base = { delivery: d.id, org: d.orgId, url: loggableUrl(d.url), eventId: d.eventId, attempt: d.attempts + 1, status: r.statusCode, ms: r.durationMs };
    switch (outcome.kind) {
      case 'delivered':
        log[level]({ ...base, outcome: outcome.kind }, 'delivered');
        break;
      case 'retry':
        log[level]({ ...base, error: r.error, detail: r.errorDetail, outcome: outcome.kind, nextAttemptAt: new Date(outcome.at).toISOString() }, `delivery attempt failed (${r.error}); retrying at ${new Date(outcome.at).toISOString()}`);
        break;
      case 'dead':
        log[level]({ ...base, error: r.error, detail: r.errorDetail, outcome: outcome.kind, nextAttemptAt: null }, `delivery attempt failed (${r.error}) and no retry is left: the delivery is dead (replayable)`);
        break;
      case 'disable':
        log[level]({ ...base, error: r.error, detail: r.errorDetail, outcome: 'disabled', nextAttemptAt: null }, 'the receiver answered 410 Gone: the delivery is held until the webhook is enabled again');
        break;
    }
  }

  return {
    /**
     * The dispatcher's one write: records finished attempts, gives back released ones, then
     * leases what `claim` asks for, all in one IMMEDIATE transaction (one commit, one fsync, for
     * everything the dispatcher gathered in a few milliseconds). Recording comes first, so an
     * attempt that just ended lets its request's next change be claimed in the same commit.
     * Nothing is sent before this returns, so no attempt goes out on a lease that is not committed.
     *
     * `durable: false` (a claim that records nothing) commits without waiting for the disk: a
     * lease a power cut undoes leaves its delivery pending, sent again after the restart, which
     * is what the lease's lapse would have led to anyway (its attempt's outcome was never
     * recorded); the next durable commit makes it durable too.
     */
    async flush(work: FlushWork, options: { durable?: boolean } = {}): Promise<FlushResult> {
      const result: FlushResult = { claimed: [], drained: [], unsendable: [], contended: [], superseded: [], rateLimited: [], outOfOrder: [] };
      const changes: StatusChangeOf[] = [];
      await store.transaction(async (tx) => {
        changes.length = 0;
        result.claimed.length = result.drained.length = result.unsendable.length = result.contended.length = result.superseded.length = result.rateLimited.length = result.outOfOrder.length = 0;
        const now = store.clock.now();
        // The webhooks whose health this commit records, locked up front in one order (a
        // shared database: two instances' commits never wait for each other in a cycle).
        if (work.finished.length > 0) await tx.webhooks.lockInOrder([...new Set(work.finished.map((f) => f.delivery.orgId))]);
        const lastSucceeded = new Set<string>();
        const attemptRows: AttemptToStore[] = [];
        const settlements: Array<{ id: number; settlement: Settlement }> = [];
        for (const f of work.finished) await recordIn(tx, f, now, lastSucceeded, changes, attemptRows, settlements);
        if (settlements.length > 0) {
          const orgOf = new Map(work.finished.map((f) => [f.delivery.id, f.delivery.orgId]));
          for (const id of await tx.deliveries.settleMany(settlements)) result.superseded.push({ id, orgId: orgOf.get(id)! });
        }
        if (attemptRows.length > 0) await tx.deliveries.insertAttempts(attemptRows);
        if (work.released.length > 0) await tx.deliveries.release(work.released.map((d) => d.id), now);
        if (work.claim) await claimIn(tx, work.claim.wanted, work.claim.leaseMs, now, result);
        for (const c of changes) c.health = await tx.webhooks.health(c.orgId);
      }, options);
      for (const f of work.finished) logAttempt(f);
      for (const c of changes) logChange(c, 'delivery');
      for (const s of result.superseded) {
        log.warn({ delivery: s.id, org: s.orgId }, 'attempt recorded, outcome not applied: its lease had lapsed and another instance took the delivery over');
      }
      for (const o of result.outOfOrder) {
        log.warn(
          { delivery: o.id, org: o.orgId, eventId: o.eventId, requestId: o.anticipationRequestId },
          'a change of this request is sent after a later change of it: it was stored after that one had gone out (later than delivery.reorderWindow allows for); the receiver gets it out of order (docs/scale-out.md)',
        );
      }
      for (const u of result.unsendable) log.error({ delivery: u.id, org: u.orgId, eventId: u.eventId, reason: u.reason }, 'delivery cannot be sent; marked dead');
      return result;
    },

    /**
     * Logs at info how many deliveries succeeded since the last call, in all and for the busiest
     * organizations, then starts counting again; nothing when none did. The dispatcher calls it
     * every few seconds and when it stops: a line per successful delivery (now at debug) cost the
     * daemon 3 to 8 % more CPU at full speed, a summary nothing measurable (docs/benchmarks.md).
     */
    logDeliveredSummary(): void {
      const now = performance.now();
      const seconds = Math.round((now - summaryFromMono) / 100) / 10;
      summaryFromMono = now;
      if (delivered.size === 0) return;
      const counts = [...delivered].sort((a, b) => b[1] - a[1]);
      delivered = new Map();
      const total = counts.reduce((sum, [, n]) => sum + n, 0);
      const named = counts.slice(0, SUMMARY_MAX_ORGS);
      const others = counts.slice(SUMMARY_MAX_ORGS).reduce((sum, [, n]) => sum + n, 0);
      log.info(
        { delivered: total, seconds, organizations: Object.fromEntries(named), ...(others > 0 ? { otherOrganizations: counts.length - named.length, otherDelivered: others } : {}) },
        `${total} deliveries delivered in the last ${seconds} s`,
      );
    },

    /**
     * Which of `orgIds` have a delivery due now, read without a write transaction (an idle
     * daemon writes nothing); the others come back with their next retry time.
     */
    peek(orgIds: readonly string[]): Promise<{ due: string[]; drained: Array<{ orgId: string; nextRetryAt: number | null }> }> {
      const now = store.clock.now();
      return store.read(async (tx) => {
        const out = { due: [] as string[], drained: [] as Array<{ orgId: string; nextRetryAt: number | null }> };
        for (const orgId of orgIds) {
          if ((await tx.deliveries.dueRows(orgId, now, 1)).length > 0) out.due.push(orgId);
          else out.drained.push({ orgId, nextRetryAt: await tx.deliveries.nextRetryAt(orgId, now) });
        }
        return out;
      });
    },

    /** The organizations whose webhook may receive deliveries (not disabled), with its status and rate limit. */
    deliverableWebhooks(): Promise<DeliverableWebhook[]> {
      return store.read((tx) => tx.webhooks.deliverable());
    },

    list(orgId: string, filter: ListFilter): Promise<DeliveryRow[]> {
      return store.read((tx) => tx.deliveries.list(orgId, filter));
    },

    get(orgId: string, id: number) {
      return store.read(async (tx) => {
        const row = await tx.deliveries.get(orgId, id);
        if (!row) throw notFound(id);
        return { delivery: row, attempts: await tx.deliveries.attempts(id) };
      });
    },

    /** Queues the delivery's event again (same webhook-id) with a fresh retry schedule. */
    async replay(orgId: string, id: number): Promise<DeliveryRow> {
      const queued = await store.transaction(async (tx) => {
        await requireWebhook(tx, orgId);
        const row = await tx.deliveries.get(orgId, id);
        if (!row) throw notFound(id);
        const ref = (await tx.deliveries.eventOf(id))!;
        if (await tx.deliveries.hasPendingDelivery(ref.eventSeq)) {
          throw validationError(`delivery ${id}'s event is already queued (a delivery of it is pending); replay it once that one is delivered or dead`, [{ name: 'id', reason: 'the event has a pending delivery' }]);
        }
        const newId = await tx.deliveries.insert(ref.eventSeq, orgId, ref.orderingKey, await queueTime(tx));
        return (await tx.deliveries.get(orgId, newId))!;
      });
      work.notify(orgId, 'queued');
      return queued;
    },

    /**
     * Re-queues every event of the organization received in [since, until) that was never
     * delivered: dead and undeliverable ones get a new delivery, failed ones are made due now.
     */
    async recover(orgId: string, since: number, until?: number, options: RecoverOptions = {}): Promise<{ requeued: number; hurried: number }> {
      // Without `until`: everything received so far, which may be later than the clock if it stepped back.
      const end = until ?? (await store.read((tx) => tx.feed.receivedAt(store.clock.now()))) + 1;
      if (!(since < end)) throw validationError('"since" must be before "until"', [{ name: 'since', reason: 'must be before until' }]);
      /** Requeues the events with seq in [from, to) (in the caller's transaction). */
      const recoverRange = async (tx: Tx, from: number, to: number) => {
        await requireWebhook(tx, orgId);
        const queuedAt = await queueTime(tx);
        const queue = (await tx.deliveries.recoverable(orgId, from, to)).map((e) => ({
          eventSeq: e.eventSeq,
          orgId,
          orderingKey: e.type === TEST_EVENT_TYPE ? testOrderingKey(orgId, e.eventId) : orderingKey(orgId, e.anticipationRequestId),
        }));
        if (queue.length > 0) await tx.deliveries.insertMany(queue, queuedAt);
        // Retries are due by the raw clock (see DeliveriesRepo.dueRows): made due now by it.
        return { requeued: queue.length, hurried: await tx.deliveries.hurryFailed(orgId, from, to, store.clock.now()) };
      };
      const inChunk = (lo: number, hi: number) => store.transaction((tx) => recoverRange(tx, lo, hi));
      const { from, to } = await store.read((tx) => tx.feed.seqRange(since, end));
      const counts = { requeued: 0, hurried: 0 };
      options.onChunk?.(0, to - from);
      try {
        for (let lo = from; lo < to; lo += RECOVER_CHUNK_SEQS) {
          const hi = Math.min(lo + RECOVER_CHUNK_SEQS, to);
          const chunk = await inChunk(lo, hi);
          counts.requeued += chunk.requeued;
          counts.hurried += chunk.hurried;
          options.onChunk?.(hi - from, to - from);
          // The daemon's other work (the admin API, attempts, the feed) runs between two chunks.
          if (hi < to) await yieldToEventLoop();
        }
      } catch (err) {
        if (counts.requeued + counts.hurried === 0 || !(err instanceof HookrelayError) || err.code !== ErrorCode.databaseBusy) throw err;
        work.notify(orgId, 'queued');
        throw new HookrelayError(
          ErrorCode.databaseBusy,
          `the database stayed locked by another process (a hookrelay CLI command or a backup, say) part way through: ${counts.requeued} event(s) of the window were queued again and ${counts.hurried} failed delivery(ies) made due now; recover again shortly to do the rest (nothing is queued twice)`,
          { cause: err },
        );
      }
      if (from >= to) await store.read((tx) => requireWebhook(tx, orgId));
      if (counts.requeued + counts.hurried > 0) work.notify(orgId, 'queued');
      return counts;
    },

    /** Stores and queues a `webhook.test` event for the organization's webhook. */
    async sendTest(orgId: string): Promise<DeliveryRow> {
      const queued = await store.transaction(async (tx) => {
        await requireWebhook(tx, orgId);
        const now = await queueTime(tx);
        const id = `evt_test_${randomUUID().replaceAll('-', '')}`;
        const timestamp = new Date(now).toISOString();
        const payload = JSON.stringify({ type: TEST_EVENT_TYPE, timestamp, data: { event_id: id, organization_id: orgId, message: 'Test notification from hookrelay' } });
        const seq = await tx.deliveries.insertTestEvent(id, orgId, payload, now);
        const deliveryId = await tx.deliveries.insert(seq, orgId, testOrderingKey(orgId, id), now);
        return (await tx.deliveries.get(orgId, deliveryId))!;
      });
      work.notify(orgId, 'queued');
      return queued;
    },

    /** New signing secret; the previous one keeps signing for the grace period. Returns the new secret once. */
    rotateSecret(orgId: string): Promise<{ secret: string; previousSecretExpiresAt: number }> {
      return store.transaction(async (tx) => {
        const webhook = await tx.webhooks.getWithSecret(orgId);
        if (!webhook) throw new HookrelayError(ErrorCode.webhookNotConfigured, `organization "${orgId}" has no webhook; register one first`);
        if (!webhook.activeHmac) throw new HookrelayError(ErrorCode.secretNotConfigured, 'HMAC signing is off for this webhook; register it with active_hmac true first');
        const now = store.clock.now();
        const secret = generateWebhookSecret();
        const previousSecretExpiresAt = now + options.secretRotationGraceMs;
        await tx.webhooks.rotateSecret(orgId, secret, previousSecretExpiresAt, now);
        return { secret, previousSecretExpiresAt };
      });
    },

    /** Operator switch: `disabled` holds deliveries; `active` releases them. */
    async setEnabled(orgId: string, enabled: boolean): Promise<void> {
      const changed = await store.transaction(async (tx) => {
        const { url } = await requireWebhook(tx, orgId);
        const change = await tx.webhooks.setStatus(orgId, enabled ? WebhookStatus.active : WebhookStatus.disabled, enabled ? null : DisabledReason.operator, store.clock.now());
        return change === null ? null : { orgId, url, change, health: await tx.webhooks.health(orgId) };
      });
      if (changed !== null) logChange(changed, 'operator');
      work.notify(orgId, 'webhook');
    },
  };
}
export type DeliveryService = ReturnType<typeof createDeliveryService>;

/**
 * The delivery outbox, the dispatcher's side of the deliveries: leasing due deliveries for
 * their attempts and recording the attempts' outcomes, in one group commit (flush). What the
 * admin API and the CLI do with deliveries (the log, replay, recovery, test events) is in
 * delivery-log.ts; enabling, disabling and secret rotation in webhooks.ts.
 */
import { iso } from '../domain/iso.ts';
import { ratePermits, rateTake } from '../domain/rate-window.ts';
import { concernsReceiver, isSuccess, type AttemptResult, type DeliveryOutcome } from '../domain/retry-policy.ts';
import { signingSecrets } from '../domain/secrets.ts';
import { WebhookStatus } from '../domain/types.ts';
import { loggableUrl } from '../domain/validation.ts';
import { DisabledReason } from '../domain/webhook-health.ts';
import type { Logger } from '../log.ts';
import type { Store, TransactionOptions, Tx } from '../store/repos.ts';
import { DeliveryStatus, type AttemptToStore, type DeliverableWebhook, type OutOfOrderDelivery, type Settlement, type DueDelivery, type WebhookStatusChange } from '../store/types.ts';
import { dueDeliveryOf } from '../store/rows.ts';
import { logStatusChange, type LoggedStatusChange } from './webhooks.ts';

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

export interface OutboxOptions {
  /** `delivery.failingAfterFailures`: failed attempts in a row that make a webhook failing. */
  readonly failingAfterFailures: number;
  /** `delivery.disableAfter`, ms: how long a failing webhook goes without a success before it is disabled. */
  readonly disableAfterMs: number;
}

/** The summary of successful deliveries names at most this many organizations (the busiest); the rest are counted together. */
export const SUMMARY_MAX_ORGS = 20;

/**
 * The dispatcher's store operations: claiming under a lease and recording outcomes (flush),
 * looking for due work without writing (peek), the webhooks deliveries may go to, and the
 * summary log of successful deliveries.
 */
export function createOutboxService(store: Store, log: Logger, options: OutboxOptions) {
  /** Successful deliveries per organization since the last summary (see logDeliveredSummary). */
  let delivered = new Map<string, number>();
  let summaryFromMono = performance.now();

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
        const d = dueDeliveryOf(row);
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
  async function recordIn(tx: Tx, f: FinishedAttempt, now: number, lastSucceeded: Set<string>, changes: LoggedStatusChange[], attemptRows: AttemptToStore[], settlements: Array<{ id: number; settlement: Settlement }>): Promise<void> {
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
    // (they all set the same columns), failures each count, but for a request that could not
    // be sent (invalid_request): the receiver never saw it, so its health is left as it was.
    if (isSuccess(result)) {
      if (!lastSucceeded.has(d.orgId)) noteChange(changes, d, await webhooks.recordSuccess(d.orgId, now));
      lastSucceeded.add(d.orgId);
    } else if (outcome.kind !== 'disable' && concernsReceiver(result)) {
      noteChange(changes, d, await webhooks.recordFailure(d.orgId, now, options.failingAfterFailures, options.disableAfterMs));
      lastSucceeded.delete(d.orgId);
    }
  }

  /** Logs a status change an attempt's outcome made (see logStatusChange). */
  function logChange(c: LoggedStatusChange): void {
    logStatusChange(log, c, 'delivery', options.disableAfterMs);
  }

  function noteChange(changes: LoggedStatusChange[], d: { orgId: string; url: string }, change: WebhookStatusChange | null): void {
    if (change !== null) changes.push({ orgId: d.orgId, url: d.url, change });
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
        log[level]({ ...base, error: r.error, detail: r.errorDetail, outcome: outcome.kind, nextAttemptAt: iso(outcome.at) }, `delivery attempt failed (${r.error}); retrying at ${iso(outcome.at)}`);
        break;
      case 'dead':
        log[level](
          { ...base, error: r.error, detail: r.errorDetail, outcome: outcome.kind, nextAttemptAt: null },
          concernsReceiver(r) ? `delivery attempt failed (${r.error}) and no retry is left: the delivery is dead (replayable)` : `the request cannot be sent (${r.error}), on this or any attempt: the delivery is dead at once, and its request's later changes go on`,
        );
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
    async flush(work: FlushWork, options: TransactionOptions = {}): Promise<FlushResult> {
      const result: FlushResult = { claimed: [], drained: [], unsendable: [], contended: [], superseded: [], rateLimited: [], outOfOrder: [] };
      const changes: LoggedStatusChange[] = [];
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
      for (const c of changes) logChange(c);
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
     * daemon a measurable share of its CPU at full speed, a summary nothing measurable
     * (docs/benchmarks.md, "A log line per successful delivery").
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
  };
}
export type OutboxService = ReturnType<typeof createOutboxService>;

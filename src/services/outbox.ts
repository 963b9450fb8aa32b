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
import { traceIdOf } from '../domain/trace-context.ts';
import { WebhookStatus } from '../domain/types.ts';
import { loggableUrl } from '../domain/validation.ts';
import { DisabledReason } from '../domain/webhook-health.ts';
import type { Logger } from '../log.ts';
import type { Store, TransactionOptions, Tx } from '../store/repos.ts';
import { DeliveryStatus, type AttemptToStore, type ClaimTurn, type DeliverableWebhook, type DueDelivery, type OutOfOrderDelivery, type RateState, type Settlement, type WebhookStatusChange } from '../store/values.ts';
import { dueDeliveryOf } from '../store/row-mappers.ts';
import { logStatusChange, type LoggedStatusChange } from './webhooks.ts';

/** A delivery claimed for one attempt: what to send and where. */
export interface ClaimedDelivery extends DueDelivery {
  readonly secrets: readonly string[];
  /** The epoch of the lease this claim took, which its outcome and its give-back are fenced by (DeliveriesRepo.lease); null: not fenced (SQLite). */
  leaseEpoch: number | null;
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

/** Up to `upTo` deliveries of the organization, if it has them due. */
export interface ClaimWanted {
  readonly orgId: string;
  readonly upTo: number;
  /**
   * On a database shared by several instances: the most this claim may lease, what this
   * instance can start now (the webhook's free slots here, within the instance's own free
   * slots), so that nothing waits leased in one instance while another could send it. The
   * leases other instances hold are taken off it (see claimIn). `upTo` when not given.
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

/** An organization with nothing due now, and when its next retry (or release) falls due: epoch ms, null for none. */
export interface Drained {
  readonly orgId: string;
  readonly nextRetryAt: number | null;
}

export interface FlushResult {
  readonly claimed: ClaimedDelivery[];
  /**
   * Organizations whose due queue was read to its end (every row due now was taken or is held
   * back behind a change in flight), with their next retry time (epoch ms, null: none).
   */
  readonly drained: Drained[];
  /** Rows found unsendable and marked dead. */
  readonly unsendable: Unsendable[];
  /**
   * Organizations not claimed for because other instances sharing the database hold their
   * turn or their slots (never on SQLite): the dispatcher looks at them again shortly.
   */
  readonly contended: string[];
  /** Outcomes not applied: the lease had lapsed and the delivery was leased again since, by another instance or this one (never on SQLite). */
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

/** A due delivery that can never be sent (see DueDelivery.unsendable): marked dead by the claim that found it. */
export interface Unsendable {
  readonly id: number;
  readonly orgId: string;
  readonly eventId: string;
  /** Why it cannot be sent. */
  readonly reason: string;
}

/** Which organizations have a delivery due now (peek), and when the others next have one. */
export interface Peeked {
  readonly due: string[];
  readonly drained: Drained[];
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
export interface OutboxService {
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
  flush(work: FlushWork, options?: TransactionOptions): Promise<FlushResult>;
  /**
   * Logs at info how many deliveries succeeded since the last call, in all and for the busiest
   * organizations, then starts counting again; nothing when none did. The dispatcher calls it
   * every few seconds and when it stops. A line per successful delivery at info would cost the
   * daemon a measurable share of its CPU at full speed, the summary nothing measurable
   * (docs/benchmarks.md, "A log line per successful delivery"); each delivery has its line at debug.
   */
  logDeliveredSummary(): void;
  /**
   * Which of `orgIds` have a delivery due now, read without a write transaction (an idle
   * daemon writes nothing); the others come back with their next retry time.
   */
  peek(orgIds: readonly string[]): Promise<Peeked>;
  /** The organizations whose webhook may receive deliveries (not disabled), with its status and rate limit. */
  deliverableWebhooks(): Promise<DeliverableWebhook[]>;
}

export function createOutboxService(store: Store, log: Logger, options: OutboxOptions): OutboxService {
  return new Outbox(store, log, options);
}

// Pure steps of a group commit: what an attempt's end writes, and what a claim may take.

/** The log row of a finished attempt (delivery_attempts). */
export function attemptToStore(f: FinishedAttempt): AttemptToStore {
  const { delivery: d, result: r, outcome } = f;
  const kind = outcome.kind === 'disable' ? 'disabled' : outcome.kind;
  return { deliveryId: d.id, attempt: d.attempts + 1, startedAt: f.startedAt, durationMs: r.durationMs, url: d.url, statusCode: r.statusCode,
    errorClass: r.error, errorDetail: r.errorDetail, responseBody: r.responseBody, outcome: kind, sentTimestamp: r.sentTimestamp, sentSignature: r.sentSignature };
}

/** The delivery's state once the attempt has ended, at `now` (epoch ms). */
export function settlementOf(f: FinishedAttempt, now: number): Settlement {
  const { result, outcome } = f;
  const attempts = f.delivery.attempts + 1;
  const statusCode = result.statusCode;
  switch (outcome.kind) {
    case 'delivered':
      return { status: DeliveryStatus.delivered, attempts, nextAttemptAt: now, at: now, statusCode, error: null };
    case 'retry':
      return { status: DeliveryStatus.pending, attempts, nextAttemptAt: outcome.at, at: now, statusCode, error: result.errorDetail };
    case 'dead':
      return { status: DeliveryStatus.dead, attempts, nextAttemptAt: now, at: now, statusCode, error: result.errorDetail };
    case 'disable':
      // Held, not dropped: it goes out as soon as the webhook is enabled again.
      return { status: DeliveryStatus.pending, attempts, nextAttemptAt: now, at: now, statusCode, error: result.errorDetail };
  }
}

/**
 * What the attempt says of its webhook's health: a success, a failure, or nothing. A request
 * that could not be sent (invalid_request) says nothing: the receiver never saw it. A 410 Gone
 * disables the webhook instead of counting as a failure.
 */
export function healthOf(f: FinishedAttempt): 'success' | 'failure' | 'none' {
  if (isSuccess(f.result)) return 'success';
  return f.outcome.kind !== 'disable' && concernsReceiver(f.result) ? 'failure' : 'none';
}

/**
 * How many deliveries a claim may lease for the organization before its rate limit; none (0
 * or less) when the leases other instances hold fill its slots. One instance on its database
 * (SQLite): its free slots, claimed-ahead deliveries included. Shared (PostgreSQL): what it can start
 * now (`cap`), and the webhook's leases in all stay within its slots, so that its attempts in
 * flight across instances never exceed perWebhookConcurrency, and what this instance cannot
 * start is left to the others. A failing webhook gets one attempt at a time.
 */
export function claimableOf(want: ClaimWanted, turn: ClaimTurn): number {
  const limit = turn.failing ? 1 : turn.shared ? Math.min(want.upTo, want.cap ?? want.upTo) : want.upTo;
  return limit - turn.leasedElsewhere;
}

// The service: long-lived state (the summary's counts) and what follows a commit (its log lines).

class Outbox implements OutboxService {
  readonly #store: Store;
  readonly #log: Logger;
  readonly #options: OutboxOptions;
  /** Successful deliveries per organization since the last summary (see logDeliveredSummary). */
  #delivered = new Map<string, number>();
  #summaryFromMono = performance.now();

  constructor(store: Store, log: Logger, options: OutboxOptions) {
    this.#store = store;
    this.#log = log;
    this.#options = options;
  }

  async flush(work: FlushWork, options: TransactionOptions = {}): Promise<FlushResult> {
    const commit = await this.#store.transaction((tx) => new OutboxCommit(tx, this.#store.clock.now(), this.#options).run(work), options);
    this.#logCommit(work.finished, commit);
    return commit.result;
  }

  logDeliveredSummary(): void {
    const now = performance.now();
    const seconds = Math.round((now - this.#summaryFromMono) / 100) / 10;
    this.#summaryFromMono = now;
    if (this.#delivered.size === 0) return;
    const counts = [...this.#delivered].sort((a, b) => b[1] - a[1]);
    this.#delivered = new Map();
    const total = counts.reduce((sum, [, n]) => sum + n, 0);
    const named = counts.slice(0, SUMMARY_MAX_ORGS);
    const others = counts.slice(SUMMARY_MAX_ORGS).reduce((sum, [, n]) => sum + n, 0);
    this.#log.info(
      { delivered: total, seconds, organizations: Object.fromEntries(named), ...(others > 0 ? { otherOrganizations: counts.length - named.length, otherDelivered: others } : {}) },
      `${total} deliveries delivered in the last ${seconds} s`,
    );
  }

  peek(orgIds: readonly string[]): Promise<Peeked> {
    const now = this.#store.clock.now();
    return this.#store.read(async (tx) => {
      const peeked: Peeked = { due: [], drained: [] };
      for (const orgId of orgIds) {
        if ((await tx.deliveries.dueRows(orgId, now, 1)).length > 0) peeked.due.push(orgId);
        else peeked.drained.push({ orgId, nextRetryAt: await tx.deliveries.nextRetryAt(orgId, now) });
      }
      return peeked;
    });
  }

  deliverableWebhooks(): Promise<DeliverableWebhook[]> {
    return this.#store.read((tx) => tx.webhooks.deliverable());
  }

  /** The log lines of a committed flush: its attempts, the status changes they made, and what the claim found. */
  #logCommit(finished: readonly FinishedAttempt[], commit: OutboxCommit): void {
    const log = this.#log;
    for (const f of finished) this.#logAttempt(f);
    for (const c of commit.changes) logStatusChange(log, c, 'delivery', this.#options.disableAfterMs);
    const { superseded, outOfOrder, unsendable } = commit.result;
    for (const s of superseded) {
      log.warn({ delivery: s.id, org: s.orgId }, 'attempt recorded, outcome not applied: its lease had lapsed and the delivery was leased again since (by another instance, or by this one)');
    }
    for (const o of outOfOrder) {
      log.warn(
        { delivery: o.id, org: o.orgId, eventId: o.eventId, requestId: o.anticipationRequestId },
        'a change of this request is sent after a later change of it: it was stored after that one had gone out (later than delivery.reorderWindow allows for); the receiver gets it out of order (docs/scale-out.md)',
      );
    }
    for (const u of unsendable) log.error({ delivery: u.id, org: u.orgId, eventId: u.eventId, reason: u.reason }, 'delivery cannot be sent; marked dead');
  }

  /**
   * One line per attempt, at the level of what it means: a retry at warn, a dead delivery at
   * error, a 410 Gone at warn (its webhook's change to disabled is logged too), a success at
   * debug; successes are counted for the summary logged at info (see logDeliveredSummary). The
   * URL is logged as its origin only (see loggableUrl).
   */
  #logAttempt(f: FinishedAttempt): void {
    const { delivery: d, result: r, outcome } = f;
    const log = this.#log;
    if (outcome.kind === 'delivered') this.#delivered.set(d.orgId, (this.#delivered.get(d.orgId) ?? 0) + 1);
    const level = outcome.kind === 'delivered' ? 'debug' : outcome.kind === 'dead' ? 'error' : 'warn';
    if (!log.isLevelEnabled(level)) return;
    // The event's trace id, when it has one: the line can be found from the trace, and the trace from the line.
    const base = { delivery: d.id, org: d.orgId, url: loggableUrl(d.url), eventId: d.eventId, ...(d.traceparent === null ? {} : { traceId: traceIdOf(d.traceparent) }), attempt: d.attempts + 1, status: r.statusCode, ms: r.durationMs };
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
}

// One group commit, inside its transaction: record -> release -> claim -> read the health of
// the webhooks whose status changed. Its state lives as long as the transaction.

class OutboxCommit {
  readonly result: FlushResult = { claimed: [], drained: [], unsendable: [], contended: [], superseded: [], rateLimited: [], outOfOrder: [] };
  /** The webhook status changes the attempts' outcomes made, for the log (with their health, read last). */
  readonly changes: LoggedStatusChange[] = [];
  readonly #tx: Tx;
  readonly #now: number;
  readonly #options: OutboxOptions;
  /** Organizations whose last recorded attempt succeeded: a run of successes is one update (they all set the same columns). */
  readonly #lastSucceeded = new Set<string>();

  constructor(tx: Tx, now: number, options: OutboxOptions) {
    this.#tx = tx;
    this.#now = now;
    this.#options = options;
  }

  async run(work: FlushWork): Promise<this> {
    if (work.finished.length > 0) await this.#record(work.finished);
    if (work.released.length > 0) await this.#tx.deliveries.release(work.released.map((d) => d.id), this.#now, work.released.map((d) => d.leaseEpoch));
    if (work.claim) await this.#claim(work.claim.wanted, work.claim.leaseMs);
    for (const c of this.changes) c.health = await this.#tx.webhooks.health(c.orgId);
    return this;
  }

  /**
   * Records the finished attempts: their log rows, their deliveries' new state (one call each
   * for all), and their webhooks' health in attempt order. The webhooks are locked up front in
   * one order (a shared database: two instances' commits never wait for each other in a cycle).
   */
  async #record(finished: readonly FinishedAttempt[]): Promise<void> {
    const { deliveries, webhooks } = this.#tx;
    await webhooks.lockInOrder([...new Set(finished.map((f) => f.delivery.orgId))]);
    const settlements: Array<{ id: number; settlement: Settlement; epoch: number | null }> = [];
    const attempts: AttemptToStore[] = [];
    for (const f of finished) {
      attempts.push(attemptToStore(f));
      settlements.push({ id: f.delivery.id, settlement: settlementOf(f, this.#now), epoch: f.delivery.leaseEpoch });
      await this.#recordHealth(f);
    }
    const superseded = await deliveries.settleMany(settlements);
    if (superseded.length > 0) this.#noteSuperseded(finished, superseded);
    await deliveries.insertAttempts(attempts);
  }

  /** Applies the attempt's word on its webhook's health (healthOf), and a 410 Gone's disabling. */
  async #recordHealth(f: FinishedAttempt): Promise<void> {
    const { webhooks } = this.#tx;
    const { orgId } = f.delivery;
    if (f.outcome.kind === 'disable') this.#noteChange(f.delivery, await webhooks.setStatus(orgId, WebhookStatus.disabled, DisabledReason.gone, this.#now));
    const health = healthOf(f);
    if (health === 'success') {
      if (!this.#lastSucceeded.has(orgId)) this.#noteChange(f.delivery, await webhooks.recordSuccess(orgId, this.#now));
      this.#lastSucceeded.add(orgId);
    } else if (health === 'failure') {
      this.#noteChange(f.delivery, await webhooks.recordFailure(orgId, this.#now, this.#options.failingAfterFailures, this.#options.disableAfterMs));
      this.#lastSucceeded.delete(orgId);
    }
  }

  #noteChange(d: { readonly orgId: string; readonly url: string }, change: WebhookStatusChange | null): void {
    if (change !== null) this.changes.push({ orgId: d.orgId, url: d.url, change });
  }

  #noteSuperseded(finished: readonly FinishedAttempt[], ids: readonly number[]): void {
    const orgOf = new Map(finished.map((f) => [f.delivery.id, f.delivery.orgId]));
    for (const id of ids) this.result.superseded.push({ id, orgId: orgOf.get(id)! });
  }

  /**
   * Leases due deliveries of the organizations in `wanted`, in that order, each within its
   * free slots (claimableOf) and its rate limit; all the leases in one call, once every organization is
   * read. On a database shared by several instances, one claim per webhook at a time
   * (claimTurns): an organization whose turn another instance holds is contended.
   */
  async #claim(wanted: readonly ClaimWanted[], leaseMs: number): Promise<void> {
    const rateLimited = new Set(wanted.filter((w) => w.rateLimited === true).map((w) => w.orgId));
    const turns = await this.#tx.deliveries.claimTurns(wanted.map((w) => w.orgId), this.#now, rateLimited);
    const leased: number[] = [];
    for (const want of wanted) await this.#claimFor(want, turns.get(want.orgId), leased);
    if (leased.length === 0) return;
    const { epochs, late } = await this.#tx.deliveries.lease(leased, this.#now + leaseMs, this.#now);
    if (epochs !== null) for (const d of this.result.claimed) d.leaseEpoch = epochs.get(d.id) ?? null;
    if (late.length > 0) await this.#countOutOfOrder(late);
  }

  /**
   * One organization's claim: contended without its turn or free slots, rate-limited without a
   * permit (nothing read, nothing leased: its due deliveries wait, unclaimed), otherwise what it
   * takes from its due rows (takeDue), which then counts against its rate limit (spendRate).
   */
  async #claimFor(want: ClaimWanted, turn: ClaimTurn | undefined, leased: number[]): Promise<void> {
    const { orgId } = want;
    let upTo = turn === undefined ? 0 : claimableOf(want, turn);
    if (turn === undefined || upTo <= 0) {
      this.result.contended.push(orgId);
      return;
    }
    const rate = turn.rate ?? null;
    if (rate !== null) {
      const { permits, waitMs } = ratePermits(rate.window, rate.limit, rate.now);
      if (permits <= 0) {
        this.result.rateLimited.push({ orgId, waitMs });
        return;
      }
      upTo = Math.min(upTo, permits);
    }
    const taken = await this.#takeDue(orgId, upTo, leased);
    if (rate !== null && taken > 0) await this.#spendRate(orgId, rate, taken);
  }

  /**
   * Takes up to `upTo` of the organization's due deliveries from one page of its queue (see
   * DeliveriesRepo.dueRows), so a claim always ends: at most one per ordering key (a later
   * change of a request waits for the earlier one). A row that can never be sent is marked
   * dead with the reason and skipped. Returns how many it took (their ids go into `leased`).
   */
  async #takeDue(orgId: string, upTo: number, leased: number[]): Promise<number> {
    const pageSize = upTo * 2 + 2;
    const page = await this.#tx.deliveries.dueRows(orgId, this.#now, pageSize);
    const byKey = new Map<number, ClaimedDelivery>();
    let full = false;
    for (const row of page) {
      const earlier = byKey.get(row.ordering_key);
      if (earlier !== undefined) {
        earlier.holdsBack = true;
        continue;
      }
      if (byKey.size >= upTo) {
        full = true;
        break;
      }
      const d = dueDeliveryOf(row);
      if (d.unsendable !== null) {
        await this.#tx.deliveries.markUnsendable(d.id, d.unsendable, this.#now);
        this.result.unsendable.push({ id: d.id, orgId, eventId: d.eventId, reason: d.unsendable });
        continue;
      }
      leased.push(d.id);
      // A retry may hold back later changes of its request that the query left out; on
      // PostgreSQL the query says whether one waits (it leaves out all but a request's first).
      const claimed: ClaimedDelivery = { ...d, secrets: signingSecrets(d, this.#now), holdsBack: d.attempts > 0 || row.holds_back === true, leaseEpoch: null };
      byKey.set(d.orderingKey, claimed);
      this.result.claimed.push(claimed);
    }
    // A short page read to its end is the whole of what is due now: the organization needs no
    // look before its next retry, a wake-up, or the end of an attempt holding a request back.
    if (page.length < pageSize && !full) this.result.drained.push({ orgId, nextRetryAt: await this.#tx.deliveries.nextRetryAt(orgId, this.#now) });
    return byKey.size;
  }

  /** What this claim starts counts against the rate limit from now, for every instance; rate-limited when it took the last permit. */
  async #spendRate(orgId: string, rate: RateState, taken: number): Promise<void> {
    const window = rateTake(rate.window, rate.now, taken);
    await this.#tx.webhooks.setRateWindow(orgId, window);
    const after = ratePermits(window, rate.limit, rate.now);
    if (after.permits <= 0) this.result.rateLimited.push({ orgId, waitMs: after.waitMs });
  }

  /** Notes the late changes among those just claimed (see FlushResult.outOfOrder), and counts them on their webhooks. */
  async #countOutOfOrder(ids: readonly number[]): Promise<void> {
    const late = new Set(ids);
    const perOrg = new Map<string, number>();
    for (const d of this.result.claimed) {
      if (!late.has(d.id)) continue;
      this.result.outOfOrder.push({ id: d.id, orgId: d.orgId, eventId: d.eventId, anticipationRequestId: d.anticipationRequestId });
      perOrg.set(d.orgId, (perOrg.get(d.orgId) ?? 0) + 1);
    }
    for (const [orgId, n] of perOrg) await this.#tx.webhooks.countOutOfOrder(orgId, n);
  }
}

import type { Clock } from '../domain/clock.ts';
import type { RetryPolicy } from '../domain/retry-policy.ts';
import type { Logger } from '../log.ts';
import type { ClaimedDelivery, OutboxService, FlushResult, FlushWork } from '../services/outbox.ts';
import type { StorageHealth } from '../services/storage-health.ts';
import type { WorkKind, WorkSignal } from '../services/work-signal.ts';
import { AttemptRunner } from './attempt-runner.ts';
import type { AttemptTracing } from './attempt-tracing.ts';
import { failingOrSlowCapOf, failingOrSlowInFlight, nextWakeDelay, placeClaimed, planClaims, retryFellDue, type ClaimRules } from './claim-plan.ts';
import type { Deliverer } from './deliverer.ts';
import type { CommitBatch, CommitHost } from './commit-batch.ts';
import { GroupCommit } from './group-commit.ts';
import { WebhookTable, type Attempt, type Hook } from './webhook-table.ts';

/** What the dispatcher asks of the deliveries' store side (OutboxService). */
export type DispatchOutbox = Pick<OutboxService, 'flush' | 'peek' | 'deliverableWebhooks' | 'logDeliveredSummary'>;

export interface DispatcherOptions {
  readonly deliveries: DispatchOutbox;
  /**
   * The database is shared with other instances (PostgreSQL): a claim takes no more than this
   * instance can start now (see plan), so that deliveries it could not start yet stay for the
   * instances with free slots. False (SQLite): a webhook's claim also takes as many again,
   * kept leased in memory, so that one query serves several attempts.
   */
  readonly sharedDatabase?: boolean;
  readonly deliverer: Pick<Deliverer, 'deliver'>;
  readonly policy: RetryPolicy;
  readonly clock: Clock;
  readonly log: Logger;
  /** Attempts in flight at once, in all. */
  readonly concurrency: number;
  /** Attempts in flight at once per webhook (organization), while it answers. */
  readonly perWebhookConcurrency: number;
  /** Lease of a claimed delivery: longer than an attempt can take, so only a crash lets it lapse. */
  readonly leaseMs: number;
  /**
   * The deliverer's deadline for one attempt (ms, `delivery.timeout`): an attempt starts only
   * while its lease outlasts it (see AttemptRunner.start). 0 by default: the lease only must
   * not have lapsed, less a margin.
   */
  readonly attemptTimeoutMs?: number;
  /** The safety net: how often every webhook is looked at without having been woken up. */
  readonly pollIntervalMs: number;
  /** Least time between two group commits (ms): what ends meanwhile is recorded together. */
  readonly groupCommitMs: number;
  /** Who tells the dispatcher that work was queued (ingest, API); without it, only the poll finds work. */
  readonly work?: WorkSignal;
  /** An attempt still running after this long (ms) makes its webhook count as slow. */
  readonly slowAttemptMs?: number;
  /**
   * Hears of storage faults (full disk, damaged database), which it logs once per change: a
   * commit that fails on one keeps what it carries and is tried again after a back-off; on a
   * damaged database nothing more is written (outcomes not recorded are attempted again, once
   * their lease lapses, after a restart on a restored file).
   */
  readonly health?: StorageHealth;
  /**
   * How long the store waits for a lock another process holds before a commit answers
   * database_busy (database.busyTimeout): the commit keeps what it carries, logs the wait once
   * and is asked for again; at stop each of the last commits waits this long at most. 5 s by
   * default.
   */
  readonly lockWaitMs?: number;
  /**
   * The group commit that records outcomes and claims (see group-commit.ts); by default one
   * made from the options above. Taken over by the dispatcher: one per dispatcher.
   */
  readonly groupCommit?: GroupCommit<Attempt>;
  /** The attempts' spans and trace context headers, while tracing is on (absent or null: off). */
  readonly tracing?: AttemptTracing | null;
}

const DEFAULT_SLOW_ATTEMPT_MS = 2_000;
/** The shortest wait before a webhook another instance held is looked at again (see lookAgainSoon). */
const MIN_CONTENDED_WAIT_MS = 25;
/** How often the count of successful deliveries is logged (at info; each one is at debug). */
export const DELIVERED_SUMMARY_MS = 10_000;
/** The longest delay setTimeout takes. */
const MAX_TIMER_MS = 2 ** 31 - 1;

/** `running`: claims and starts attempts; `stopping`: drains them, claims nothing. */
type DispatcherPhase = 'stopped' | 'running' | 'stopping';

/**
 * Recording `a` (or giving it back) calls for another look at its webhook: the attempt may
 * have been holding back a later change of its request (`holdsBack`: one seen waiting in its
 * claim, a retry, or one queued since, see onWork), or it did not end delivered (given back,
 * dead, disabled: what follows is decided anew). Otherwise a webhook whose queue was read to
 * its end needs no look, so that a claim queries only the webhooks whose queue may have changed.
 */
function needsAnotherLook(a: Attempt): boolean {
  return a.delivery.holdsBack || a.finished?.outcome.kind !== 'delivered';
}

/**
 * Claims due deliveries under a lease and runs their attempts, within a global cap and fair
 * per-webhook slots, recording outcomes in group commits.
 *
 * - One write transaction (the group commit, group-commit.ts) records every attempt that ended
 *   since the last one and leases what the free slots can take, at most every `groupCommitMs`;
 *   an attempt keeps its slot until its outcome is committed, so the attempts whose outcome a
 *   crash could lose are never more than `concurrency` (they are sent again once their lease
 *   lapses: at least once, never lost). A healthy webhook's claim takes up to twice its slots:
 *   the extra ones are claimed ahead and wait in memory, leased, and start as its slots free,
 *   so that one query serves several attempts (they are given back at shutdown; a crash lets
 *   their lease lapse, and as they were never sent nothing is sent twice).
 * - New work for a webhook with a free slot and nothing claimed ahead is claimed at once, in a
 *   transaction that only claims and does not wait for the disk (GroupCommit.requestClaim).
 * - Woken by the services (ingest, replay, recovery, test events, webhook changes) and by its
 *   own timers (retries falling due, pauses ending); the poll is only a safety net (work queued
 *   by another process), and an idle poll reads without writing.
 * - Fair (the claim plan, claim-plan.ts): a webhook whose last attempt failed, whose oldest
 *   attempt has been running for `slowAttemptMs`, or that has not answered one yet, gets one
 *   attempt at a time, and the failing or slow ones together at most half of the slots, so
 *   healthy webhooks always find one; a webhook failing again and again waits longer and
 *   longer between attempts, and a 429 or 503 with Retry-After pauses it.
 *
 * Schedules live in the database (next_attempt_at): nothing here needs to survive a restart.
 * The state that lives as long as the dispatcher: the webhooks (WebhookTable), the attempts and
 * their slots (AttemptRunner), the group commit, and the timers of the wake-ups below.
 */
export class Dispatcher {
  readonly #options: DispatcherOptions;
  readonly #log: Logger;
  readonly #rules: ClaimRules;
  /** A delivery claimed ahead waiting longer than this is given back rather than started: its lease must outlast its attempt. */
  readonly #claimedAheadMaxAgeMs: number;
  readonly #commits: GroupCommit<Attempt>;
  readonly #webhooks: WebhookTable;
  readonly #attempts: AttemptRunner;
  /** The claim side of each commit, handed to the group commit at start. */
  readonly #commitHost: CommitHost<Attempt>;
  #phase: DispatcherPhase = 'stopped';
  /** The moments of the commit under way (one at a time), read as it is prepared. */
  #commitAt = 0;
  #commitMono = 0;
  /** The wake-up count when the commit under way began (WebhookTable.wakeMark): wake-ups after it survive its reads. */
  #commitWakeMark = 0;
  /** One timer for the earliest moment something becomes due (see armWakeTimer), and that moment (performance.now()). */
  #wakeTimer: NodeJS.Timeout | null = null;
  #wakeAt = Infinity;
  /** A look again at webhooks whose turn or slots other instances held at the last commit (a shared database). */
  #contendedTimer: NodeJS.Timeout | null = null;
  #pollTimer: NodeJS.Timeout | null = null;
  #summaryTimer: NodeJS.Timeout | null = null;
  #unsubscribe: (() => void) | null = null;

  constructor(options: DispatcherOptions) {
    this.#options = options;
    this.#log = options.log.child({ subsystem: 'dispatch' });
    this.#rules = {
      perWebhook: options.perWebhookConcurrency,
      failingOrSlowCap: failingOrSlowCapOf(options.concurrency),
      slowMs: options.slowAttemptMs ?? DEFAULT_SLOW_ATTEMPT_MS,
      sharedDatabase: options.sharedDatabase === true,
    };
    this.#claimedAheadMaxAgeMs = Math.max(1, Math.floor(options.leaseMs / 4));
    const { deliveries } = options;
    this.#commits = options.groupCommit ?? new GroupCommit<Attempt>({ deliveries, log: this.#log, groupCommitMs: options.groupCommitMs, health: options.health, lockWaitMs: options.lockWaitMs });
    this.#webhooks = new WebhookTable(deliveries, this.#commits);
    this.#attempts = new AttemptRunner({
      deliverer: options.deliverer,
      policy: options.policy,
      clock: options.clock,
      log: this.#log,
      commits: this.#commits,
      webhooks: this.#webhooks,
      concurrency: options.concurrency,
      perWebhook: this.#rules.perWebhook,
      slowMs: this.#rules.slowMs,
      claimedAheadMaxAgeMs: this.#claimedAheadMaxAgeMs,
      tracing: options.tracing ?? null,
      leaseMs: options.leaseMs,
      attemptTimeoutMs: options.attemptTimeoutMs ?? 0,
    });
    this.#commitHost = {
      claiming: () => this.#phase === 'running',
      refresh: () => (this.#webhooks.refreshWanted && this.#phase === 'running' ? this.#webhooks.refresh() : null),
      prepare: () => this.#prepareCommit(),
      plan: (batch) => this.#planClaims(batch),
      peek: (claim) => this.#keepWhatIsDue(claim),
      committed: (batch, result) => this.#afterCommit(batch, result),
      recordedAlone: (a, givenBack) => this.#recordedAlone(a, givenBack),
    };
  }

  /** Looks at every webhook now, as the poll does (the wake-ups from other instances were lost for a while). */
  poll(): void {
    if (this.#phase === 'running') this.#lookAtEveryWebhook();
  }

  start(): void {
    this.#phase = 'running';
    const options = this.#options;
    this.#unsubscribe = options.work?.subscribe(this.#onWork) ?? null;
    this.#pollTimer = setInterval(this.#lookAtEveryWebhook, options.pollIntervalMs);
    this.#summaryTimer = setInterval(() => options.deliveries.logDeliveredSummary(), DELIVERED_SUMMARY_MS);
    this.#summaryTimer.unref();
    this.#log.info({ concurrency: options.concurrency, perWebhook: options.perWebhookConcurrency, groupCommitMs: options.groupCommitMs }, 'dispatcher started');
    this.#commits.start(this.#commitHost);
  }

  /**
   * Stops claiming, lets attempts in flight finish for up to `drainMs`, then aborts the rest
   * (they are given back, not counted, and go out after the next start), and records it all.
   */
  async stop(drainMs = 10_000): Promise<void> {
    if (this.#phase !== 'running') return;
    this.#phase = 'stopping';
    this.#stopWakeUps();
    // A commit under way may still claim: what it leases is kept ahead, and given back here.
    await this.#commits.commitUnderWayEnded();
    for (const hook of this.#webhooks.hooks.values()) this.#webhooks.returnClaimedAhead(hook);
    await this.#attempts.drain(drainMs);
    await this.#commits.close();
    if (this.#summaryTimer !== null) clearInterval(this.#summaryTimer);
    this.#summaryTimer = null;
    this.#options.deliveries.logDeliveredSummary();
    this.#phase = 'stopped';
    this.#log.info('dispatcher stopped');
  }

  // ── Wake-ups ──

  /** Work was queued (or a webhook changed) for `orgId`: `keys`, the ordering keys queued, when the service knows them. */
  readonly #onWork = (orgId: string, kind: WorkKind, keys?: ReadonlySet<number>): void => {
    if (this.#phase !== 'running') return;
    const hook = this.#webhooks.hooks.get(orgId);
    if (hook) {
      this.#webhooks.woken(hook);
      this.#webhooks.markHoldingBack(hook, keys);
    }
    if (!hook || kind === 'webhook') this.#webhooks.wantRefresh(kind === 'webhook' ? orgId : undefined);
    // At once when the webhook would start it at once: a free slot, and nothing claimed ahead.
    if (this.#attempts.slotFree && (!hook || (hook.claimedAhead.length === 0 && hook.attempts.size < this.#rules.perWebhook))) this.#commits.requestClaim();
    else this.#commits.request();
  };

  /** The poll: every webhook may have work (another process may have queued it). */
  readonly #lookAtEveryWebhook = (): void => {
    this.#webhooks.wantRefresh();
    for (const hook of this.#webhooks.hooks.values()) {
      this.#webhooks.woken(hook);
      // Work another process queued may wait behind what is in flight here.
      this.#webhooks.markHoldingBack(hook, undefined);
    }
    this.#commits.request();
  };

  /** One timer for the earliest moment something becomes due: a retry (wall clock), or the end of a pause (monotonic). */
  #armWakeTimer(now: number): void {
    if (this.#phase !== 'running') return;
    const mono = performance.now();
    const delay = nextWakeDelay(this.#webhooks.hooks.values(), now, mono);
    if (delay === Infinity || mono + delay >= this.#wakeAt) return;
    if (this.#wakeTimer !== null) clearTimeout(this.#wakeTimer);
    this.#wakeAt = mono + delay;
    this.#wakeTimer = setTimeout(this.#onWakeTimer, Math.min(Math.ceil(delay), MAX_TIMER_MS));
  }

  readonly #onWakeTimer = (): void => {
    this.#wakeTimer = null;
    this.#wakeAt = Infinity;
    // Shared database: what falls due (on PostgreSQL, mostly changes the reorder window
    // releases) is claimed at once, as new work is, without waiting for the disk; SQLite's
    // timer keeps its group commit.
    if (this.#rules.sharedDatabase) this.#commits.requestClaim();
    else this.#commits.request();
  };

  /**
   * Another instance sharing the database held the turn or every slot of some webhooks at the
   * last commit: they keep their work flag, and a commit looks at them again once a
   * group-commit window has passed (the other instance's commit is over by then, or its
   * attempts have freed slots), rather than at the next poll.
   */
  #lookAgainSoon(): void {
    if (this.#phase !== 'running' || this.#contendedTimer !== null) return;
    this.#contendedTimer = setTimeout(() => {
      this.#contendedTimer = null;
      this.#commits.request();
    }, Math.max(this.#options.groupCommitMs, MIN_CONTENDED_WAIT_MS));
  }

  #stopWakeUps(): void {
    this.#unsubscribe?.();
    this.#unsubscribe = null;
    if (this.#pollTimer !== null) clearInterval(this.#pollTimer);
    if (this.#wakeTimer !== null) clearTimeout(this.#wakeTimer);
    if (this.#contendedTimer !== null) clearTimeout(this.#contendedTimer);
    this.#pollTimer = null;
    this.#wakeTimer = null;
    this.#contendedTimer = null;
    this.#wakeAt = Infinity;
  }

  // ── The claim side of each commit (see CommitHost for the order of the calls) ──

  /** Reads the commit's moments; gives back what was claimed ahead and may not start now; notes retries fallen due. */
  #prepareCommit(): void {
    const now = (this.#commitAt = this.#options.clock.now());
    const mono = (this.#commitMono = performance.now());
    // Before the commit's reads: a wake-up after this moment outlives what they find drained.
    this.#commitWakeMark = this.#webhooks.wakeMark();
    const maxAge = this.#claimedAheadMaxAgeMs;
    for (const hook of this.#webhooks.hooks.values()) {
      // Claimed ahead and not to start now: its webhook is paused, or they waited too long.
      if (hook.claimedAhead.length > 0 && (hook.pausedUntil > mono || mono - hook.claimedAhead[0]!.leasedMono > maxAge)) this.#webhooks.returnClaimedAhead(hook);
      if (this.#phase === 'running' && retryFellDue(hook, now, mono)) {
        hook.retryAt = null;
        hook.hasWork = true;
      }
    }
  }

  /** What this commit claims: the claim plan over every webhook, for the slots free once it has recorded what ended. */
  #planClaims({ ended, cutShort }: CommitBatch<Attempt>): FlushWork['claim'] {
    const mono = this.#commitMono;
    // Webhooks to look at again once this commit has recorded their attempts: in this very
    // commit (recording comes before claiming), or in the next one when they cannot claim yet.
    for (const a of ended) if (needsAnotherLook(a)) a.hook.hasWork = true;
    for (const a of cutShort) a.hook.hasWork = true;
    if (this.#phase !== 'running') return null;
    const hooks = this.#webhooks.hooks;
    const failingOrSlowUsed = failingOrSlowInFlight(hooks.values(), mono, this.#rules.slowMs, cutShort);
    const list = [...hooks.values()];
    const first = list.length === 0 ? 0 : this.#webhooks.nextRoundStart(list.length);
    const wanted = planClaims(this.#rules, list, first, mono, this.#attempts.freeSlots + ended.length + cutShort.length, failingOrSlowUsed);
    return wanted.length > 0 ? { wanted, leaseMs: this.#options.leaseMs } : null;
  }

  /** A group commit with nothing to record: only the webhooks that have something due claim (a read, no write). */
  async #keepWhatIsDue(claim: NonNullable<FlushWork['claim']>): Promise<FlushWork['claim']> {
    const peeked = await this.#options.deliveries.peek(claim.wanted.map((w) => w.orgId));
    this.#webhooks.noteDrained(peeked.drained, this.#commitWakeMark);
    const due = new Set(peeked.due);
    const wanted = claim.wanted.filter((w) => due.has(w.orgId));
    return wanted.length > 0 ? { wanted, leaseMs: claim.leaseMs } : null;
  }

  /** After a commit: what it claimed starts or waits, what was claimed ahead starts in the freed slots, the wake timer follows. */
  #afterCommit(batch: CommitBatch<Attempt>, result: FlushResult | null): void {
    const now = this.#commitAt;
    if (result === null) {
      this.#attempts.startClaimedAhead(this.#commitMono);
      this.#armWakeTimer(now);
      return;
    }
    this.#applyResult(batch, result);
    this.#attempts.startClaimedAhead(performance.now());
    this.#armWakeTimer(now);
    // One that could not claim in this commit (its slot was still taken, say) claims in the next.
    if (this.#phase === 'running' && this.#wantsAnotherLook(batch)) this.#commits.request();
  }

  /** Frees the slots of what the commit recorded, notes what it learned of the queues, and places what it claimed. */
  #applyResult(batch: CommitBatch<Attempt>, result: FlushResult): void {
    const mono = this.#commitMono;
    for (const a of batch.ended) this.#attempts.freeSlot(a);
    for (const a of batch.cutShort) this.#attempts.freeSlot(a);
    this.#webhooks.noteDrained(result.drained, this.#commitWakeMark);
    if (result.contended.length > 0) this.#lookAgainSoon();
    const leasedMono = performance.now();
    for (const { orgId, waitMs } of result.rateLimited) {
      const hook = this.#webhooks.hooks.get(orgId);
      if (hook) hook.rateUntil = leasedMono + waitMs;
    }
    for (const d of result.claimed) this.#place(d, this.#webhooks.hookFor(d.orgId), mono, leasedMono);
  }

  /** A delivery just claimed: started now, kept ahead for its webhook's next free slot, or given back (see placeClaimed). */
  #place(d: ClaimedDelivery, hook: Hook, mono: number, leasedMono: number): void {
    const placement = this.#phase !== 'running' ? 'keep-ahead' : placeClaimed(this.#rules, hook, mono, this.#attempts.slotFree);
    if (placement === 'start') this.#attempts.start(d, hook, mono);
    else if (placement === 'keep-ahead') hook.claimedAhead.push({ delivery: d, leasedMono, leaseStartMono: mono });
    else {
      this.#commits.giveBack(d);
      hook.hasWork = true;
      this.#commits.request();
    }
  }

  /** A webhook this commit recorded an attempt of, and that was to be looked at again, still has work. */
  #wantsAnotherLook(batch: CommitBatch<Attempt>): boolean {
    for (const a of batch.ended) if (needsAnotherLook(a) && a.hook.hasWork && a.hook.deliverable) return true;
    for (const a of batch.cutShort) if (a.hook.hasWork && a.hook.deliverable) return true;
    return false;
  }

  /** After repeated failures, `a` was recorded (or given back) alone: its slot is free. */
  #recordedAlone(a: Attempt, givenBack: boolean): void {
    this.#attempts.freeSlot(a);
    if (givenBack || needsAnotherLook(a)) this.#webhooks.woken(a.hook);
  }
}

/** A dispatcher over `options` (see Dispatcher); start() begins claiming. */
export function createDispatcher(options: DispatcherOptions): Dispatcher {
  return new Dispatcher(options);
}

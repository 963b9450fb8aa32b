import type { Clock } from '../domain/clock.ts';
import { concernsReceiver, decideOutcome, isSuccess, type AttemptResult, type DeliveryOutcome, type RetryPolicy } from '../domain/retry-policy.ts';
import { loggableUrl } from '../domain/validation.ts';
import { iso } from '../domain/iso.ts';
import type { Logger } from '../log.ts';
import type { ClaimedDelivery, OutboxService, FlushResult } from '../services/outbox.ts';
import type { StorageHealth } from '../services/storage-health.ts';
import type { WorkKind, WorkSignal } from '../services/work-signal.ts';
import { isLimited, limitedCapOf, nextWakeDelay, pauseAfterFailure, placeClaimed, planClaims, retryFellDue, troubledInFlight, type ClaimRules } from './claim-plan.ts';
import type { Deliverer } from './deliverer.ts';
import { createGroupCommit, type CommitBatch, type CommitHost, type GroupCommit } from './group-commit.ts';
import { createWebhookTable, type Attempt, type Hook } from './webhook-table.ts';

export interface DispatcherOptions {
  readonly deliveries: OutboxService;
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
}

const DEFAULT_SLOW_ATTEMPT_MS = 2_000;
/** The shortest wait before a webhook another instance held is looked at again (see lookAgainSoon). */
const MIN_CONTENDED_WAIT_MS = 25;
/** How often the count of successful deliveries is logged (at info; each one is at debug). */
export const DELIVERED_SUMMARY_MS = 10_000;

/**
 * Claims due deliveries under a lease and runs their attempts, within a global cap and fair
 * per-webhook slots, recording outcomes in group commits.
 *
 * - One write transaction (the group commit, group-commit.ts) records every attempt that ended
 *   since the last one and leases what the free slots can take, at most every `groupCommitMs`;
 *   an attempt keeps its slot until its outcome is committed, so the attempts whose outcome a
 *   crash could lose are never more than `concurrency` (they are sent again once their lease
 *   lapses: at least once, never lost). A healthy webhook's claim takes up to twice its slots:
 *   the extra ones wait in memory, leased, and start as its slots free, so that one query
 *   serves several attempts (they are given back at shutdown; a crash lets their lease lapse,
 *   and as they were never sent nothing is sent twice).
 * - New work for a webhook with a free slot and nothing claimed ahead is claimed at once, in a
 *   transaction that only claims and does not wait for the disk (GroupCommit.requestClaim).
 * - Woken by the services (ingest, replay, recovery, test events, webhook changes) and by its
 *   own timers (retries falling due, pauses ending); the poll is only a safety net (work queued
 *   by another process), and an idle poll reads without writing.
 * - Fair (the claim plan, claim-plan.ts): a webhook whose last attempt failed, whose oldest
 *   attempt has been running for `slowAttemptMs`, or that has not answered one yet, gets one
 *   attempt at a time, and all such webhooks together at most half of the slots, so healthy
 *   webhooks always find one; a webhook failing again and again waits longer and longer
 *   between attempts, and a 429 or 503 with Retry-After pauses it.
 *
 * Schedules live in the database (next_attempt_at): nothing here needs to survive a restart.
 */
export function createDispatcher(options: DispatcherOptions) {
  const log = options.log.child({ subsystem: 'dispatch' });
  const { deliveries, clock } = options;
  const perHook = options.perWebhookConcurrency;
  const rules: ClaimRules = {
    perWebhook: perHook,
    limitedCap: limitedCapOf(options.concurrency),
    slowMs: options.slowAttemptMs ?? DEFAULT_SLOW_ATTEMPT_MS,
    sharedDatabase: options.sharedDatabase === true,
  };
  const slowMs = rules.slowMs;
  /** A delivery waiting in a buffer longer than this is given back rather than started: its lease must outlast its attempt. */
  const readyMaxAgeMs = Math.max(1, Math.floor(options.leaseMs / 4));
  const commits: GroupCommit<Attempt> =
    options.groupCommit ?? createGroupCommit<Attempt>({ deliveries, log, groupCommitMs: options.groupCommitMs, health: options.health, lockWaitMs: options.lockWaitMs });

  const table = createWebhookTable(deliveries, commits);
  const { hooks, hookFor, unbuffer, applyDrained, markHoldingBack } = table;
  let rotation = 0;
  let slotsUsed = 0;
  const running = new Set<Attempt>();
  /** The moments of the commit under way (one at a time), read at its start (see prepare). */
  let commitNow = 0;
  let commitMono = 0;

  let started = false;
  let stopping = false;
  let wakeTimer: NodeJS.Timeout | null = null;
  let wakeAt = Infinity;
  /** A look again at webhooks whose turn or slots other instances held at the last commit (a shared database). */
  let contendedTimer: NodeJS.Timeout | null = null;
  let pollTimer: NodeJS.Timeout | null = null;
  let summaryTimer: NodeJS.Timeout | null = null;
  let unsubscribe: (() => void) | null = null;

  /** After the commit that recorded `a` (or gave it back). */
  function freeSlot(a: Attempt): void {
    if (a.hook.attempts.delete(a)) slotsUsed--;
  }

  /**
   * Recording `a` (or giving it back) calls for another look at its webhook: the attempt may
   * have been holding back a later change of its request (`holdsBack`: one seen waiting in its
   * claim, a retry, or one queued since, see onWork), or it did not end delivered (given back,
   * dead, disabled: what follows is decided anew). Otherwise a webhook whose queue was read to
   * its end needs no look, so that a claim queries only the webhooks whose queue may have changed.
   */
  function endCallsForLook(a: Attempt): boolean {
    return a.delivery.holdsBack || a.finished?.outcome.kind !== 'delivered';
  }

  /**
   * Starts buffered deliveries while slots are free: one webhook at a time in a rotating order,
   * each up to its own slots, so that a webhook with a deep queue does not take every slot
   * that frees. Limited webhooks start nothing from a buffer (they have none; see learn()).
   */
  function pump(mono: number): void {
    let free = options.concurrency - slotsUsed;
    if (free <= 0) return;
    const waiting = [...hooks.values()].filter((h) => h.ready.length > 0);
    if (waiting.length === 0) return;
    const first = rotation++ % waiting.length;
    let progress = true;
    while (free > 0 && progress) {
      progress = false;
      for (let i = 0; i < waiting.length && free > 0; i++) {
        const hook = waiting[(first + i) % waiting.length]!;
        if (hook.ready.length === 0 || hook.attempts.size >= perHook || isLimited(hook, mono, slowMs)) continue;
        const next = hook.ready.shift()!;
        if (mono - next.leasedMono > readyMaxAgeMs) {
          commits.giveBack(next.delivery);
          commits.request();
        } else {
          start(next.delivery, hook);
          free--;
        }
        progress = true;
      }
    }
  }

  /** What a finished attempt teaches about its webhook (in memory; the database keeps its own health columns). */
  function learn(hook: Hook, result: AttemptResult, outcome: DeliveryOutcome, url: string, now: number): void {
    if (isSuccess(result)) {
      hook.failing = false;
      hook.proven = true;
      hook.failures = 0;
      hook.pausedUntil = 0;
      return;
    }
    // A request that could not be sent says nothing of the receiver: no pause, no caution.
    if (!concernsReceiver(result)) return;
    // What was claimed ahead goes back: a failing webhook gets one attempt at a time.
    unbuffer(hook);
    if (outcome.kind === 'disable') {
      hook.deliverable = false;
      table.wantRefresh();
      return;
    }
    hook.failing = true;
    hook.failures++;
    const pause = pauseAfterFailure(hook.failures, result.statusCode, result.retryAfterMs, options.policy.maxRetryAfterMs);
    const until = performance.now() + pause;
    if (pause > 0 && until > hook.pausedUntil) {
      hook.pausedUntil = until;
      const throttled = result.statusCode === 429 || result.statusCode === 503;
      log.info(
        { org: hook.orgId, url: loggableUrl(url), until: iso(now + pause), failures: hook.failures, status: result.statusCode },
        throttled ? 'webhook asked to slow down: paused' : 'webhook failing: paused before its next attempt',
      );
    }
  }

  function start(d: ClaimedDelivery, hook: Hook): void {
    const a: Attempt = { delivery: d, hook, startedAt: clock.now(), startedMono: performance.now(), controller: new AbortController(), finished: null, running: null };
    hook.attempts.add(a);
    slotsUsed++;
    running.add(a);
    a.running = run(a).finally(() => running.delete(a));
  }

  /** One attempt: deliver, learn from it, hand the outcome to the group commit. */
  async function run(a: Attempt): Promise<void> {
    const d = a.delivery;
    let result: AttemptResult;
    try {
      result = await options.deliverer.deliver({ orgId: d.orgId, url: d.url, eventId: d.eventId, payload: d.payload, secrets: d.secrets, headers: d.headers }, a.controller.signal);
    } catch (err) {
      // deliver() reports every failure as a result; reaching here is a bug. Give the delivery back uncounted.
      log.error({ err, delivery: d.id }, 'delivery attempt threw; the delivery is given back and will be attempted again');
      commits.aborted(a);
      return;
    }
    if (a.controller.signal.aborted && result.statusCode === null) {
      // Cut short by shutdown: not the receiver's fault, so it does not count.
      commits.aborted(a);
      return;
    }
    const now = clock.now();
    const outcome = decideOutcome(result, d.attempts + 1, options.policy, now, Math.random());
    learn(a.hook, result, outcome, d.url, now);
    a.finished = { delivery: d, result, outcome, startedAt: a.startedAt };
    commits.finished(a);
  }

  /** The claim side of each commit (see group-commit.ts for the order of the calls). */
  const host: CommitHost<Attempt> = {
    claiming: () => started && !stopping,

    refresh: () => (table.refreshWanted && !stopping ? table.refresh() : null),

    prepare(): void {
      const now = (commitNow = clock.now());
      const mono = (commitMono = performance.now());
      for (const hook of hooks.values()) {
        // Buffered deliveries that may not start now go back: their webhook is paused, or they waited too long.
        if (hook.ready.length > 0 && (hook.pausedUntil > mono || mono - hook.ready[0]!.leasedMono > readyMaxAgeMs)) unbuffer(hook);
        if (!stopping && retryFellDue(hook, now, mono)) {
          hook.retryAt = null;
          hook.hasWork = true;
        }
      }
    },

    plan({ done, back }) {
      const mono = commitMono;
      // Webhooks to look at again once this commit has recorded their attempts: in this very
      // commit (recording comes before claiming), or in the next one when they cannot claim yet.
      for (const a of done) if (endCallsForLook(a)) a.hook.hasWork = true;
      for (const a of back) a.hook.hasWork = true;
      if (stopping) return null;
      const troubledUsed = troubledInFlight(hooks.values(), mono, slowMs, back);
      const list = [...hooks.values()];
      const first = list.length === 0 ? 0 : rotation++ % list.length;
      const wanted = planClaims(rules, list, first, mono, options.concurrency - slotsUsed + done.length + back.length, troubledUsed);
      return wanted.length > 0 ? { wanted, leaseMs: options.leaseMs } : null;
    },

    async peek(claim) {
      const peeked = await deliveries.peek(claim.wanted.map((w) => w.orgId));
      applyDrained(peeked.drained);
      const due = new Set(peeked.due);
      const wanted = claim.wanted.filter((w) => due.has(w.orgId));
      return wanted.length > 0 ? { wanted, leaseMs: claim.leaseMs } : null;
    },

    committed(batch: CommitBatch<Attempt>, result: FlushResult | null): void {
      const now = commitNow;
      if (result === null) {
        pump(commitMono);
        armWakeTimer(now);
        return;
      }
      claimed(batch, result);
      pump(performance.now());
      armWakeTimer(now);
      // One that could not claim in this commit (its slot was still taken, say) claims in the next.
      if (!stopping && wantsAnotherLook(batch)) commits.request();
    },

    settled(a: Attempt, givenBack: boolean): void {
      freeSlot(a);
      if (givenBack || endCallsForLook(a)) a.hook.hasWork = true;
    },
  };

  /** A webhook this commit recorded an attempt of, and that was to be looked at again, still has work. */
  function wantsAnotherLook(batch: CommitBatch<Attempt>): boolean {
    for (const a of batch.done) if (endCallsForLook(a) && a.hook.hasWork && a.hook.deliverable) return true;
    for (const a of batch.back) if (a.hook.hasWork && a.hook.deliverable) return true;
    return false;
  }

  /** After a commit: frees the slots of what it recorded, and starts or buffers what it claimed. */
  function claimed(batch: CommitBatch<Attempt>, result: FlushResult): void {
    const mono = commitMono;
    for (const a of batch.done) freeSlot(a);
    for (const a of batch.back) freeSlot(a);
    applyDrained(result.drained);
    if (result.contended.length > 0) lookAgainSoon();
    const leasedMono = performance.now();
    for (const { orgId, waitMs } of result.rateLimited) {
      const hook = hooks.get(orgId);
      if (hook) hook.rateUntil = leasedMono + waitMs;
    }
    for (const d of result.claimed) {
      const hook = hookFor(d.orgId);
      const place = stopping ? 'buffer' : placeClaimed(rules, hook, mono, slotsUsed < options.concurrency);
      if (place === 'start') start(d, hook);
      else if (place === 'buffer') hook.ready.push({ delivery: d, leasedMono });
      else {
        commits.giveBack(d);
        hook.hasWork = true;
        commits.request();
      }
    }
  }

  /**
   * Another instance sharing the database held the turn or every slot of some webhooks at the
   * last commit: they keep their work flag, and a commit looks at them again once a
   * group-commit window has passed (the other instance's commit is over by then, or its
   * attempts have freed slots), rather than at the next poll.
   */
  function lookAgainSoon(): void {
    if (stopping || contendedTimer !== null) return;
    contendedTimer = setTimeout(() => {
      contendedTimer = null;
      commits.request();
    }, Math.max(options.groupCommitMs, MIN_CONTENDED_WAIT_MS));
  }

  /** One timer for the earliest moment something becomes due: a retry (wall clock), or the end of a pause (monotonic). */
  function armWakeTimer(now: number): void {
    if (stopping) return;
    const mono = performance.now();
    const delay = nextWakeDelay(hooks.values(), now, mono);
    if (delay === Infinity || mono + delay >= wakeAt) return;
    if (wakeTimer !== null) clearTimeout(wakeTimer);
    wakeAt = mono + delay;
    wakeTimer = setTimeout(
      () => {
        wakeTimer = null;
        wakeAt = Infinity;
        // Shared database: what falls due (on PostgreSQL, mostly changes the reorder window
        // releases) is claimed at once, as new work is, without waiting for the disk; SQLite's
        // timer keeps its group commit.
        if (options.sharedDatabase) commits.requestClaim();
        else commits.request();
      },
      Math.min(Math.ceil(delay), 2 ** 31 - 1),
    );
  }

  function onWork(orgId: string, kind: WorkKind, keys?: ReadonlySet<number>): void {
    if (stopping) return;
    const hook = hooks.get(orgId);
    if (hook) {
      hook.hasWork = true;
      markHoldingBack(hook, keys);
    }
    if (!hook || kind === 'webhook') table.wantRefresh(kind === 'webhook' ? orgId : undefined);
    // At once when the webhook would start it at once: a free slot, and nothing claimed ahead.
    if (slotsUsed < options.concurrency && (!hook || (hook.ready.length === 0 && hook.attempts.size < perHook))) commits.requestClaim();
    else commits.request();
  }

  function poll(): void {
    table.wantRefresh();
    for (const hook of hooks.values()) {
      hook.hasWork = true;
      // Work another process queued may wait behind what is in flight here.
      markHoldingBack(hook, undefined);
    }
    commits.request();
  }

  return {
    /** Looks at every webhook now, as the poll does (the wake-ups from other instances were lost for a while). */
    poll(): void {
      if (started && !stopping) poll();
    },

    start(): void {
      started = true;
      stopping = false;
      unsubscribe = options.work?.subscribe(onWork) ?? null;
      pollTimer = setInterval(poll, options.pollIntervalMs);
      summaryTimer = setInterval(() => deliveries.logDeliveredSummary(), DELIVERED_SUMMARY_MS);
      summaryTimer.unref();
      log.info({ concurrency: options.concurrency, perWebhook: perHook, groupCommitMs: options.groupCommitMs }, 'dispatcher started');
      commits.start(host);
    },

    /**
     * Stops claiming, lets attempts in flight finish for up to `drainMs`, then aborts the rest
     * (they are given back, not counted, and go out after the next start), and records it all.
     */
    async stop(drainMs = 10_000): Promise<void> {
      if (!started || stopping) return;
      stopping = true;
      unsubscribe?.();
      unsubscribe = null;
      if (pollTimer !== null) clearInterval(pollTimer);
      if (wakeTimer !== null) clearTimeout(wakeTimer);
      if (contendedTimer !== null) clearTimeout(contendedTimer);
      pollTimer = null;
      wakeTimer = null;
      contendedTimer = null;
      wakeAt = Infinity;
      // A commit under way may still claim: what it leases lands in the buffers given back here.
      await commits.settled();
      for (const hook of hooks.values()) unbuffer(hook);
      const all = () => Promise.allSettled([...running].map((a) => a.running));
      if (running.size > 0) {
        let timer: NodeJS.Timeout | undefined;
        await Promise.race([all(), new Promise<void>((resolve) => (timer = setTimeout(resolve, drainMs)))]);
        clearTimeout(timer);
        for (const a of running) a.controller.abort(new Error('the daemon is stopping'));
        await all();
      }
      await commits.close();
      if (summaryTimer !== null) clearInterval(summaryTimer);
      summaryTimer = null;
      deliveries.logDeliveredSummary();
      started = false;
      log.info('dispatcher stopped');
    },
  };
}
export type Dispatcher = ReturnType<typeof createDispatcher>;

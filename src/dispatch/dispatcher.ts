import type { Clock } from '../domain/clock.ts';
import { decideOutcome, isSuccess, type AttemptResult, type DeliveryOutcome, type RetryPolicy } from '../domain/retry-policy.ts';
import { loggableUrl } from '../domain/validation.ts';
import { isTransientStoreError } from '../store/storage-faults.ts';
import type { Logger } from '../log.ts';
import type { ClaimedDelivery, ClaimWanted, FinishedAttempt, FlushResult, FlushWork, OutboxService } from '../services/outbox.ts';
import type { StorageHealth } from '../services/storage-health.ts';
import { isLockWait, lockPollDelayMs } from '../store/sqlite/lock-wait.ts';
import type { WorkKind, WorkSignal } from '../services/work-signal.ts';
import type { Deliverer } from './deliverer.ts';

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
   * A commit that finds the database locked by another process (a CLI command) keeps what it
   * carries and is tried again every few ms (see store/sqlite/lock-wait.ts); a wait longer than this is
   * logged, and at stop the last commit waits this long at most. 5 s by default.
   */
  readonly lockWaitMs?: number;
}

/** After a webhook's second failure in a row, the wait before its next attempt doubles from this... */
export const WEBHOOK_PAUSE_BASE_MS = 500;
/** ...up to this. */
export const WEBHOOK_PAUSE_MAX_MS = 5_000;
const DEFAULT_SLOW_ATTEMPT_MS = 2_000;
/** The shortest wait before a webhook another instance held is looked at again (see lookAgainSoon). */
const MIN_CONTENDED_WAIT_MS = 25;
/** How often the count of successful deliveries is logged (at info; each one is at debug). */
export const DELIVERED_SUMMARY_MS = 10_000;

/** How long a webhook waits before its next attempt after `failures` failed attempts in a row. */
export function webhookPauseMs(failures: number): number {
  if (failures < 2) return 0;
  return Math.min(WEBHOOK_PAUSE_BASE_MS * 2 ** (failures - 2), WEBHOOK_PAUSE_MAX_MS);
}

/** What the dispatcher knows of one webhook; in memory only, rebuilt from the database at start. */
interface Hook {
  readonly orgId: string;
  /** In the last list of webhooks that are not disabled. */
  deliverable: boolean;
  /** Attempts that hold a slot of this webhook: running, or ended and waiting for their group commit. Oldest first. */
  readonly attempts: Set<Attempt>;
  /** It may have due deliveries that were not claimed yet. */
  hasWork: boolean;
  /**
   * Deliveries claimed (leased) ahead for this healthy webhook, oldest first, started as its
   * slots free up: one claim query serves several attempts. At most perWebhookConcurrency.
   */
  readonly ready: Array<{ readonly delivery: ClaimedDelivery; readonly leasedMono: number }>;
  /** When its next known retry falls due (epoch ms), once its queue was read to the end. */
  retryAt: number | null;
  /** Its last attempt failed: one attempt at a time until one succeeds. */
  failing: boolean;
  /** It has answered an attempt with success (in this process, or as the database remembers it): it may have all its slots. */
  proven: boolean;
  /** Failed attempts in a row. */
  failures: number;
  /**
   * No attempt starts before this: a Retry-After, or the pause after failures. In
   * performance.now() ms, so that a step of the wall clock neither shortens nor stretches it.
   */
  pausedUntil: number;
  /**
   * Its rate limit (deliveries per second), as the last list of webhooks said; null: none. A
   * webhook with one claims only what starts at once (nothing ahead), and what it claims
   * starts at once or is given back: the limit counts a delivery when it is claimed.
   */
  rateLimit: number | null;
  /** Its rate limit is reached: nothing of it is claimed before this (performance.now() ms). */
  rateUntil: number;
}

interface Attempt {
  readonly delivery: ClaimedDelivery;
  readonly hook: Hook;
  /** Epoch ms, from the injected clock. */
  readonly startedAt: number;
  /** performance.now() at start, for the slow check (immune to clock steps). */
  readonly startedMono: number;
  readonly controller: AbortController;
  finished: FinishedAttempt | null;
  running: Promise<void> | null;
}

/**
 * Claims due deliveries under a lease and runs their attempts, within a global cap and fair
 * per-webhook slots, recording outcomes in group commits.
 *
 * - One write transaction (see OutboxService.flush) records every attempt that ended since
 *   the last one and leases what the free slots can take, at most every `groupCommitMs`; an
 *   attempt keeps its slot until its outcome is committed, so the attempts whose outcome a
 *   crash could lose are never more than `concurrency` (they are sent again once their lease
 *   lapses: at least once, never lost). A healthy webhook's claim takes up to twice its slots:
 *   the extra ones wait in memory, leased, and start as its slots free, so that one query
 *   serves several attempts (they are given back at shutdown; a crash lets their lease lapse,
 *   and as they were never sent nothing is sent twice).
 * - New work for a webhook with a free slot and nothing claimed ahead is claimed at once, in a
 *   transaction that only claims and does not wait for the disk (see requestClaim).
 * - Woken by the services (ingest, replay, recovery, test events, webhook changes) and by its
 *   own timers (retries falling due, pauses ending); the poll is only a safety net (work queued
 *   by another process), and an idle poll reads without writing.
 * - Fair: a webhook whose last attempt failed, whose oldest attempt has been running for
 *   `slowAttemptMs`, or that has not answered one yet, gets one attempt at a time, and all such
 *   webhooks together at most half of the slots, so healthy webhooks always find one; a webhook
 *   failing again and again waits longer and longer between attempts, and a 429 or 503 with
 *   Retry-After pauses it.
 *
 * Schedules live in the database (next_attempt_at): nothing here needs to survive a restart.
 */
export function createDispatcher(options: DispatcherOptions) {
  const log = options.log.child({ subsystem: 'dispatch' });
  const { deliveries, clock } = options;
  const slowMs = options.slowAttemptMs ?? DEFAULT_SLOW_ATTEMPT_MS;
  const perHook = options.perWebhookConcurrency;
  /** Slots that failing or slow webhooks may take together: the other half is always left to the others. */
  const limitedCap = Math.max(1, Math.floor(options.concurrency / 2));
  /** A delivery waiting in a buffer longer than this is given back rather than started: its lease must outlast its attempt. */
  const readyMaxAgeMs = Math.max(1, Math.floor(options.leaseMs / 4));

  const hooks = new Map<string, Hook>();
  let rotation = 0;
  let slotsUsed = 0;
  /** Attempts that ended, waiting for the next group commit. */
  let finished: Attempt[] = [];
  /** Attempts cut short by shutdown, to give back uncounted. */
  let aborted: Attempt[] = [];
  /** Claimed but never started (buffered for a webhook that then failed, paused or was disabled; shutdown): to give back. */
  let unstarted: ClaimedDelivery[] = [];
  const running = new Set<Attempt>();
  let refreshWanted = true;
  const reset = new Set<string>();

  let started = false;
  let stopping = false;
  let flushTimer: NodeJS.Timeout | null = null;
  let flushImmediate: NodeJS.Immediate | null = null;
  /** A claim asked for by new work while slots are free (see requestClaim). */
  let claimImmediate: NodeJS.Immediate | null = null;
  let lastFlushAt = -Infinity;
  let flushFailures = 0;
  /**
   * The commit under way, if any: one at a time, as each hands over what the one before left
   * (what waits to be recorded, the slots it freed). A commit asked for meanwhile runs once it
   * has ended (`flushWanted`: 'all' wins over 'claim').
   */
  let inFlush: Promise<void> | null = null;
  let flushWanted: 'all' | 'claim' | null = null;
  /** Commits in a row that found the database locked by another process, and since when (performance.now()). */
  let lockTries = 0;
  let lockedSince = 0;
  let lockNoticed = false;
  const lockWaitMs = options.lockWaitMs ?? 5_000;
  let wakeTimer: NodeJS.Timeout | null = null;
  let wakeAt = Infinity;
  /** A look again at webhooks whose turn or slots other instances held at the last commit (a shared database). */
  let contendedTimer: NodeJS.Timeout | null = null;
  let pollTimer: NodeJS.Timeout | null = null;
  let summaryTimer: NodeJS.Timeout | null = null;
  let unsubscribe: (() => void) | null = null;

  function hookFor(orgId: string): Hook {
    let hook = hooks.get(orgId);
    if (!hook) {
      hook = { orgId, deliverable: false, attempts: new Set(), ready: [], hasWork: true, retryAt: null, failing: false, proven: false, failures: 0, pausedUntil: 0, rateLimit: null, rateUntil: 0 };
      hooks.set(orgId, hook);
    }
    return hook;
  }

  /** Gives back the deliveries buffered for `hook` (at the next commit), to be claimed again. */
  function unbuffer(hook: Hook): void {
    for (const r of hook.ready) unstarted.push(r.delivery);
    if (hook.ready.length > 0) {
      hook.hasWork = true;
      requestFlush();
    }
    hook.ready.length = 0;
  }

  /** Reads which webhooks may receive deliveries (a small read, no write). */
  async function refreshHooks(): Promise<void> {
    refreshWanted = false;
    const deliverable = await deliveries.deliverableWebhooks();
    for (const hook of hooks.values()) hook.deliverable = false;
    for (const { orgId, status, lastSuccessAt, rateLimit } of deliverable) {
      const known = hooks.has(orgId);
      const hook = hookFor(orgId);
      hook.deliverable = true;
      if (hook.rateLimit !== rateLimit) {
        // A new limit is judged anew at the next claim; deliveries claimed ahead without one go back.
        if (rateLimit !== null) unbuffer(hook);
        hook.rateLimit = rateLimit;
        hook.rateUntil = 0;
        hook.hasWork = true;
      }
      if (!known || reset.has(orgId)) {
        hook.failing = status === 'failing';
        // A webhook that was re-registered or enabled starts over as unknown.
        hook.proven = status === 'active' && lastSuccessAt !== null && !reset.has(orgId);
        hook.failures = 0;
        hook.pausedUntil = 0;
        hook.hasWork = true;
        unbuffer(hook);
      }
    }
    reset.clear();
    for (const [orgId, hook] of hooks) {
      if (hook.deliverable) continue;
      unbuffer(hook);
      if (hook.attempts.size === 0) hooks.delete(orgId);
    }
  }

  /** Its oldest attempt has been running for `slowMs` or more. */
  function isSlow(hook: Hook, mono: number): boolean {
    for (const a of hook.attempts) return a.finished === null && mono - a.startedMono >= slowMs;
    return false;
  }

  /**
   * Limited to one attempt at a time: failing or slow (these share at most half of the slots),
   * or not yet known to answer (so that a receiver that hangs from its first request holds one
   * slot, not its whole share).
   */
  function isLimited(hook: Hook, mono: number): boolean {
    return hook.failing || !hook.proven || isSlow(hook, mono);
  }

  /**
   * The organizations to claim for now, each with how many deliveries to lease. Limited
   * webhooks come first, one each while slots are free: webhooks not yet known to answer
   * (they may well be healthy), then failing or slow ones while the half of the slots these
   * may hold together lasts; then the healthy ones, whose buffer is topped up to their slots
   * plus as many again once it has run half down. Each group in an order that rotates from one
   * commit to the next, so no webhook always comes last.
   */
  function plan(now: number, mono: number, troubledUsed: number, free: number): ClaimWanted[] {
    const list = [...hooks.values()];
    // A limited webhook's delivery starts as soon as it is claimed: it needs a free slot.
    let freeLeft = free;
    let troubledLeft = limitedCap - troubledUsed;
    const unknown: ClaimWanted[] = [];
    const troubled: ClaimWanted[] = [];
    const healthy: ClaimWanted[] = [];
    const first = list.length === 0 ? 0 : rotation++ % list.length;
    for (let i = 0; i < list.length; i++) {
      const hook = list[(first + i) % list.length]!;
      if (!hook.deliverable || hook.pausedUntil > mono || hook.rateUntil > mono) continue;
      if (hook.retryAt !== null && hook.retryAt <= now) {
        hook.retryAt = null;
        hook.hasWork = true;
      }
      if (!hook.hasWork) continue;
      const rated = hook.rateLimit !== null ? { rateLimited: true } : {};
      if (isLimited(hook, mono)) {
        if (hook.attempts.size === 0 && hook.ready.length === 0) (hook.failing || hook.proven ? troubled : unknown).push({ orgId: hook.orgId, room: 1, cap: 1, ...rated });
        continue;
      }
      const held = hook.attempts.size + hook.ready.length;
      if (hook.rateLimit !== null) {
        // Nothing claimed ahead: a delivery counts against the limit when it is claimed, so it
        // must start then (see the claimed loop in flushNow).
        const room = perHook - held;
        if (room > 0) healthy.push({ orgId: hook.orgId, room, cap: room, rateLimited: true });
        continue;
      }
      const room = 2 * perHook - held;
      if (held === 0 || room >= Math.ceil(perHook / 2)) healthy.push({ orgId: hook.orgId, room, cap: Math.max(0, perHook - held) });
    }
    const wanted: ClaimWanted[] = [];
    // Shared database: each healthy webhook's claim is capped to the slots free here, handed
    // out in the rotating order, what the limited ones take first.
    for (const w of unknown) {
      if (freeLeft <= 0) break;
      freeLeft--;
      wanted.push(w);
    }
    for (const w of troubled) {
      if (freeLeft <= 0 || troubledLeft <= 0) break;
      freeLeft--;
      troubledLeft--;
      wanted.push(w);
    }
    if (options.sharedDatabase) {
      const capped: ClaimWanted[] = [];
      for (const w of healthy) {
        if (freeLeft <= 0) break;
        const cap = Math.min(w.cap ?? w.room, freeLeft);
        if (cap <= 0) continue;
        freeLeft -= cap;
        capped.push({ ...w, cap });
      }
      return wanted.concat(capped);
    }
    // One instance: a healthy webhook claims ahead, but one with a rate limit only what the
    // slots free now can start.
    const rest: ClaimWanted[] = [];
    for (const w of healthy) {
      if (w.rateLimited !== true) rest.push(w);
      else if (freeLeft > 0) {
        const cap = Math.min(w.room, freeLeft);
        freeLeft -= cap;
        rest.push({ ...w, room: cap, cap });
      }
    }
    return wanted.concat(rest);
  }

  function applyDrained(drained: FlushResult['drained']): void {
    for (const { orgId, nextRetryAt } of drained) {
      const hook = hooks.get(orgId);
      if (!hook) continue;
      hook.hasWork = false;
      hook.retryAt = nextRetryAt;
    }
  }

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
   * Work was queued for `hook`: a change of a request with a delivery in flight or claimed
   * ahead waits behind it, so that delivery's end must bring the webhook another look. With
   * the ordering keys queued, only those deliveries; without (replay, recovery, the poll), all.
   */
  function markHoldingBack(hook: Hook, keys: ReadonlySet<number> | undefined): void {
    for (const a of hook.attempts) if (keys === undefined || keys.has(a.delivery.orderingKey)) a.delivery.holdsBack = true;
    for (const r of hook.ready) if (keys === undefined || keys.has(r.delivery.orderingKey)) r.delivery.holdsBack = true;
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
        if (hook.ready.length === 0 || hook.attempts.size >= perHook || isLimited(hook, mono)) continue;
        const next = hook.ready.shift()!;
        if (mono - next.leasedMono > readyMaxAgeMs) {
          unstarted.push(next.delivery);
          requestFlush();
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
    // What was claimed ahead goes back: a failing webhook gets one attempt at a time.
    unbuffer(hook);
    if (outcome.kind === 'disable') {
      hook.deliverable = false;
      refreshWanted = true;
      return;
    }
    hook.failing = true;
    hook.failures++;
    let pause = webhookPauseMs(hook.failures);
    const throttled = result.statusCode === 429 || result.statusCode === 503;
    if (throttled && result.retryAfterMs !== null) pause = Math.max(pause, Math.min(result.retryAfterMs, options.policy.maxRetryAfterMs));
    if (pause > 0) {
      const until = performance.now() + pause;
      if (until > hook.pausedUntil) {
        hook.pausedUntil = until;
        log.info(
          { org: hook.orgId, url: loggableUrl(url), until: new Date(now + pause).toISOString(), failures: hook.failures, status: result.statusCode },
          throttled ? 'webhook asked to slow down: paused' : 'webhook failing: paused before its next attempt',
        );
      }
    }
  }

  function start(d: ClaimedDelivery, hook: Hook): void {
    const a: Attempt = { delivery: d, hook, startedAt: clock.now(), startedMono: performance.now(), controller: new AbortController(), finished: null, running: null };
    hook.attempts.add(a);
    slotsUsed++;
    running.add(a);
    a.running = run(a).finally(() => running.delete(a));
  }

  async function run(a: Attempt): Promise<void> {
    const d = a.delivery;
    let result: AttemptResult;
    try {
      result = await options.deliverer.deliver({ orgId: d.orgId, url: d.url, eventId: d.eventId, payload: d.payload, secrets: d.secrets, headers: d.headers }, a.controller.signal);
    } catch (err) {
      // deliver() reports every failure as a result; reaching here is a bug. Give the delivery back uncounted.
      log.error({ err, delivery: d.id }, 'delivery attempt threw; the delivery is given back and will be attempted again');
      aborted.push(a);
      requestFlush();
      return;
    }
    if (a.controller.signal.aborted && result.statusCode === null) {
      // Cut short by shutdown: not the receiver's fault, so it does not count.
      aborted.push(a);
      requestFlush();
      return;
    }
    const now = clock.now();
    const outcome = decideOutcome(result, d.attempts + 1, options.policy, now, Math.random());
    learn(a.hook, result, outcome, d.url, now);
    a.finished = { delivery: d, result, outcome, startedAt: a.startedAt };
    finished.push(a);
    requestFlush();
  }

  /** Schedules a group commit: at once when the last one is older than the window, else when the window ends. */
  function requestFlush(): void {
    if (flushTimer !== null || flushImmediate !== null) return;
    const wait = lastFlushAt + options.groupCommitMs - performance.now();
    if (wait <= 0) flushImmediate = setImmediate(flush);
    else flushTimer = setTimeout(flush, wait);
  }

  /**
   * New work while slots are free: claims at once, without waiting for the group-commit window,
   * in a transaction that claims only (outcomes wait for their group commit) and does not wait
   * for the disk (see OutboxService.flush's `durable`). Under load, when every slot is taken,
   * new work waits for the next group commit as before.
   */
  function requestClaim(): void {
    // A group commit about to run claims too; after a failed commit, its back-off decides.
    if (claimImmediate !== null || flushImmediate !== null) return;
    if (flushFailures > 0 || lockTries > 0) requestFlush();
    else claimImmediate = setImmediate(claim);
  }

  function claim(): void {
    claimImmediate = null;
    if (options.health?.damaged()) return;
    runFlush('claim');
  }

  function flush(): void {
    flushTimer = null;
    flushImmediate = null;
    if (options.health?.damaged()) return;
    runFlush('all');
  }

  /** Runs flushNow(mode) as the one commit under way (see inFlush). */
  function exclusiveFlush(mode: 'all' | 'claim'): Promise<void> {
    const flushing = flushNow(mode).finally(() => {
      inFlush = null;
    });
    inFlush = flushing;
    return flushing;
  }

  /** A commit for a timer or a wake-up: now, or once the one under way has ended. Never throws. */
  function runFlush(mode: 'all' | 'claim'): void {
    if (inFlush !== null) {
      if (mode === 'all' || flushWanted === null) flushWanted = mode;
      return;
    }
    exclusiveFlush(mode)
      .catch((err: unknown) => {
        // A read that fails on a storage fault (a damaged page, say): logged once by `health`, backed off.
        if (options.health?.failed('dispatch', err) != null) flushFailures++;
        else {
          log.error({ err }, mode === 'claim' ? 'claiming deliveries failed unexpectedly; trying again shortly' : 'dispatcher flush failed unexpectedly; trying again shortly');
          if (mode === 'claim') flushFailures++;
        }
        retryFlushLater();
      })
      .finally(() => {
        const again = flushWanted;
        flushWanted = null;
        if (again === 'all') requestFlush();
        else if (again === 'claim') requestClaim();
      });
  }

  /**
   * The commit found the database locked by another process: nothing was written (the lock is
   * taken before the first statement), what it carries is kept, and it is tried again in a few
   * ms, on a timer, so that the admin API and attempts in flight go on meanwhile.
   */
  function waitForLock(): void {
    if (lockTries++ === 0) lockedSince = performance.now();
    const waitedMs = Math.round(performance.now() - lockedSince);
    if (!lockNoticed && waitedMs >= lockWaitMs) {
      lockNoticed = true;
      log.warn({ waitedMs, outcomes: finished.length }, 'the database has been locked by another process (a hookrelay CLI command, a backup?) for a while; outcomes are kept and recorded once it is released');
    }
    if (flushTimer === null && flushImmediate === null) flushTimer = setTimeout(flush, lockPollDelayMs(lockTries));
  }

  function lockReleased(): void {
    if (lockNoticed) log.info({ waitedMs: Math.round(performance.now() - lockedSince) }, 'the database lock was released: outcomes recorded');
    lockTries = 0;
    lockNoticed = false;
  }

  function retryFlushLater(): void {
    const wait = Math.min(100 * 2 ** Math.min(flushFailures, 6), 5_000);
    if (flushTimer === null && flushImmediate === null) flushTimer = setTimeout(flush, wait);
  }

  /** Takes what waits for the next commit: attempts that ended, attempts cut short, deliveries never started. */
  function takeWaiting(): { done: Attempt[]; back: Attempt[]; unsent: ClaimedDelivery[] } {
    const waiting = { done: finished, back: aborted, unsent: unstarted };
    finished = [];
    aborted = [];
    unstarted = [];
    return waiting;
  }

  /**
   * `all`: the group commit (records what waits, claims for the free slots). `claim`: claims
   * only, for new work (see requestClaim), in a commit that does not wait for the disk; what
   * waits to be recorded is left to the next group commit.
   */
  async function flushNow(mode: 'all' | 'claim'): Promise<void> {
    if (!started || (mode === 'claim' && stopping)) return;
    if (refreshWanted && !stopping) await refreshHooks();
    const now = clock.now();
    const mono = performance.now();
    // Buffered deliveries that may not start now go back: their webhook is paused, or they waited too long.
    for (const hook of hooks.values()) {
      if (hook.ready.length > 0 && (hook.pausedUntil > mono || mono - hook.ready[0]!.leasedMono > readyMaxAgeMs)) unbuffer(hook);
    }
    const claimOnly = mode === 'claim';
    const { done, back, unsent } = claimOnly ? { done: [], back: [], unsent: [] } : takeWaiting();
    // Slots of failing or slow webhooks still taken once this commit has recorded what ended.
    let troubledUsed = 0;
    for (const hook of hooks.values()) {
      if (hook.attempts.size === 0 || !(hook.failing || isSlow(hook, mono))) continue;
      for (const a of hook.attempts) if (a.finished === null && !back.includes(a)) troubledUsed++;
    }
    // Webhooks to look at again once this commit has recorded their attempts: in this very
    // commit (recording comes before claiming), or in the next one when they cannot claim yet.
    const lookAgain = new Set<Hook>();
    for (const a of done) if (endCallsForLook(a)) lookAgain.add(a.hook);
    for (const a of back) lookAgain.add(a.hook);
    for (const hook of lookAgain) hook.hasWork = true;
    let wanted = stopping ? [] : plan(now, mono, troubledUsed, options.concurrency - slotsUsed + done.length + back.length);
    const writes = done.length + back.length + unsent.length;
    // A claim for new work skips the look: the work was just queued, and a claim that finds
    // nothing writes nothing.
    if (wanted.length > 0 && writes === 0 && !claimOnly) {
      // Nothing to record: find out without a write transaction whether anything is due.
      const peeked = await deliveries.peek(wanted.map((w) => w.orgId));
      applyDrained(peeked.drained);
      const due = new Set(peeked.due);
      wanted = wanted.filter((w) => due.has(w.orgId));
    }
    const claim = wanted.length > 0 ? { wanted, leaseMs: options.leaseMs } : null;
    if (writes === 0 && claim === null) {
      pump(mono);
      armWakeTimer(now);
      return;
    }
    let result: FlushResult;
    try {
      result = await deliveries.flush({ finished: done.map((a) => a.finished!), released: [...back.map((a) => a.delivery), ...unsent], claim }, { durable: !claimOnly });
    } catch (err) {
      finished = done.concat(finished);
      aborted = back.concat(aborted);
      unstarted = unsent.concat(unstarted);
      if (isLockWait(err)) {
        waitForLock();
        return;
      }
      flushFailures++;
      if (options.health?.failed('dispatch', err) != null) {
        // Logged once per state change by `health`; what waits is kept and tried again.
      } else if (isTransientStoreError(err)) {
        // A full disk, or a PostgreSQL server out of reach or restarting: nothing is let go.
        if (flushFailures === 1 || flushFailures % 20 === 0) {
          log.error({ err, outcomes: finished.length, failures: flushFailures }, 'recording delivery outcomes failed; they are kept and the commit is tried again');
        }
      } else if (flushFailures >= 3) {
        await isolate();
      } else {
        log.error({ err, outcomes: finished.length }, 'recording delivery outcomes failed; trying again shortly');
      }
      retryFlushLater();
      return;
    }
    flushFailures = 0;
    if (lockTries > 0) lockReleased();
    options.health?.succeeded('dispatch');
    if (!claimOnly) lastFlushAt = performance.now();
    for (const a of done) freeSlot(a);
    for (const a of back) freeSlot(a);
    applyDrained(result.drained);
    if (result.contended.length > 0) lookAgainSoon();
    const leasedMono = performance.now();
    for (const { orgId, waitMs } of result.rateLimited) {
      const hook = hooks.get(orgId);
      if (hook) hook.rateUntil = leasedMono + waitMs;
    }
    for (const d of result.claimed) {
      const hook = hookFor(d.orgId);
      if (stopping) hook.ready.push({ delivery: d, leasedMono });
      else if (isLimited(hook, mono) && hook.attempts.size === 0 && hook.ready.length === 0) start(d, hook);
      else if (hook.rateLimit !== null && !isLimited(hook, mono)) {
        // Counted against its rate limit by this claim: sent now, or given back, never later
        // (a late start would crowd the next second's).
        if (hook.attempts.size < perHook && slotsUsed < options.concurrency) start(d, hook);
        else {
          unstarted.push(d);
          hook.hasWork = true;
          requestFlush();
        }
      } else hook.ready.push({ delivery: d, leasedMono });
    }
    pump(performance.now());
    armWakeTimer(now);
    // One that could not claim in this commit (its slot was still taken, say) claims in the next.
    for (const hook of lookAgain) {
      if (hook.hasWork && hook.deliverable && !stopping) {
        requestFlush();
        break;
      }
    }
  }

  /**
   * After repeated failures that are not about the disk or a lock, records what is waiting one
   * item at a time, so one that cannot be recorded does not hold up the rest: it is logged and
   * let go (its lease lapses and it is attempted again).
   */
  async function isolate(): Promise<void> {
    const { done, back, unsent } = takeWaiting();
    /** Records one item; false (it is kept for the next commit) when the database is locked by another process. */
    const one = async (work: FlushWork, id: number): Promise<boolean> => {
      try {
        await deliveries.flush(work);
      } catch (err) {
        if (isLockWait(err)) return false;
        log.error({ err, delivery: id }, 'this delivery cannot be recorded; it is let go, and will be attempted again when its lease lapses');
      }
      return true;
    };
    let locked = false;
    for (const a of done) {
      if (locked || !(await one({ finished: [a.finished!], released: [], claim: null }, a.delivery.id))) {
        locked = true;
        finished.push(a);
        continue;
      }
      freeSlot(a);
      if (endCallsForLook(a)) a.hook.hasWork = true;
    }
    for (const a of back) {
      if (locked || !(await one({ finished: [], released: [a.delivery], claim: null }, a.delivery.id))) {
        locked = true;
        aborted.push(a);
        continue;
      }
      freeSlot(a);
      a.hook.hasWork = true;
    }
    for (const d of unsent) {
      if (locked || !(await one({ finished: [], released: [d], claim: null }, d.id))) {
        locked = true;
        unstarted.push(d);
      }
    }
    flushFailures = 0;
    if (locked) waitForLock();
    else if (!stopping) requestFlush();
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
      requestFlush();
    }, Math.max(options.groupCommitMs, MIN_CONTENDED_WAIT_MS));
  }

  /** One timer for the earliest moment something becomes due: a retry (wall clock), or the end of a pause (monotonic). */
  function armWakeTimer(now: number): void {
    if (stopping) return;
    const mono = performance.now();
    let delay = Infinity;
    // Only moments still to come: what is due already waits for a slot, and the end of an
    // attempt (which frees one) asks for a commit anyway.
    for (const hook of hooks.values()) {
      if (!hook.deliverable) continue;
      // A pause and a reached rate limit both hold its claims back.
      const paused = Math.max(hook.pausedUntil, hook.rateUntil) - mono;
      if (hook.hasWork && paused > 0) delay = Math.min(delay, paused);
      if (hook.retryAt !== null) {
        const at = Math.max(hook.retryAt - now, paused);
        if (at > 0) delay = Math.min(delay, at);
      }
    }
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
        if (options.sharedDatabase) requestClaim();
        else requestFlush();
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
    if (!hook || kind === 'webhook') {
      refreshWanted = true;
      if (kind === 'webhook') reset.add(orgId);
    }
    // At once when the webhook would start it at once: a free slot, and nothing claimed ahead.
    if (slotsUsed < options.concurrency && (!hook || (hook.ready.length === 0 && hook.attempts.size < perHook))) requestClaim();
    else requestFlush();
  }

  function poll(): void {
    refreshWanted = true;
    for (const hook of hooks.values()) {
      hook.hasWork = true;
      // Work another process queued may wait behind what is in flight here.
      markHoldingBack(hook, undefined);
    }
    requestFlush();
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
      requestFlush();
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
      await inFlush?.catch(() => {});
      for (const hook of hooks.values()) unbuffer(hook);
      const all = () => Promise.allSettled([...running].map((a) => a.running));
      if (running.size > 0) {
        let timer: NodeJS.Timeout | undefined;
        await Promise.race([all(), new Promise<void>((resolve) => (timer = setTimeout(resolve, drainMs)))]);
        clearTimeout(timer);
        for (const a of running) a.controller.abort(new Error('the daemon is stopping'));
        await all();
      }
      const clearFlush = () => {
        if (flushTimer !== null) clearTimeout(flushTimer);
        if (flushImmediate !== null) clearImmediate(flushImmediate);
        if (claimImmediate !== null) clearImmediate(claimImmediate);
        flushTimer = null;
        flushImmediate = null;
        claimImmediate = null;
      };
      clearFlush();
      const left = () => finished.length + aborted.length + unstarted.length;
      // Three tries, and while the database is locked by another process, up to lockWaitMs more.
      const lockDeadline = performance.now() + lockWaitMs;
      for (let i = 0; left() > 0 && !options.health?.damaged() && (i < 3 || (lockTries > 0 && performance.now() < lockDeadline)); i++) {
        await inFlush?.catch(() => {});
        try {
          await exclusiveFlush('all');
        } catch (err) {
          log.error({ err }, 'recording the last outcomes failed');
        }
        clearFlush();
        if (lockTries > 0 && left() > 0) await new Promise((r) => setTimeout(r, lockPollDelayMs(lockTries)));
      }
      clearFlush();
      if (left() > 0) {
        log.error({ outcomes: finished.length, given_back: aborted.length + unstarted.length }, 'some outcomes could not be recorded; those deliveries will be attempted again when their lease lapses');
      }
      if (summaryTimer !== null) clearInterval(summaryTimer);
      summaryTimer = null;
      deliveries.logDeliveredSummary();
      started = false;
      log.info('dispatcher stopped');
    },
  };
}
export type Dispatcher = ReturnType<typeof createDispatcher>;

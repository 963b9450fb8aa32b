import type { Clock } from '../domain/clock.ts';
import { decideOutcome, isSuccess, type AttemptResult, type DeliveryOutcome, type RetryPolicy } from '../domain/retry-policy.ts';
import type { Logger } from '../log.ts';
import type { ClaimedDelivery, ClaimWanted, DeliveryService, FinishedAttempt, FlushResult } from '../services/deliveries.ts';
import type { WorkKind, WorkSignal } from '../services/work-signal.ts';
import type { Deliverer } from './deliverer.ts';

export interface DispatcherOptions {
  readonly deliveries: DeliveryService;
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
}

/** After a webhook's second failure in a row, the wait before its next attempt doubles from this... */
export const WEBHOOK_PAUSE_BASE_MS = 500;
/** ...up to this. */
export const WEBHOOK_PAUSE_MAX_MS = 10_000;
const DEFAULT_SLOW_ATTEMPT_MS = 2_000;
/** SQLite errors that go away by themselves (a lock held by the CLI, a full or failing disk): the commit is tried again as it was. */
const TRANSIENT_SQLITE = /^SQLITE_(BUSY|LOCKED|FULL|IOERR|CANTOPEN|READONLY|PROTOCOL)/;

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
  /** When its next known retry falls due (epoch ms), once its queue was read to the end. */
  retryAt: number | null;
  /** Its last attempt failed: one attempt at a time until one succeeds. */
  failing: boolean;
  /** Failed attempts in a row. */
  failures: number;
  /** No attempt starts before this (epoch ms): a Retry-After, or the pause after failures. */
  pausedUntil: number;
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

export interface DispatcherSnapshot {
  /** Slots taken: attempts running or waiting for their group commit. */
  readonly slotsUsed: number;
  readonly webhooks: ReadonlyArray<{ orgId: string; slots: number; failing: boolean; failures: number; pausedUntil: number | null; hasWork: boolean }>;
}

/**
 * Claims due deliveries under a lease and runs their attempts, within a global cap and fair
 * per-webhook slots, recording outcomes in group commits.
 *
 * - One write transaction (see DeliveryService.flush) records every attempt that ended since
 *   the last one and leases what the free slots can take, at most every `groupCommitMs`; an
 *   attempt keeps its slot until its outcome is committed, so the attempts whose outcome a
 *   crash could lose are never more than `concurrency` (they are sent again once their lease
 *   lapses: at least once, never lost).
 * - Woken by the services (ingest, replay, recovery, test events, webhook changes) and by its
 *   own timers (retries falling due, pauses ending); the poll is only a safety net (work queued
 *   by another process), and an idle poll reads without writing.
 * - Fair: a webhook whose last attempt failed, or whose oldest attempt has been running for
 *   `slowAttemptMs`, gets one attempt at a time, and all such webhooks together at most half
 *   of the slots, so healthy webhooks always find one; a webhook failing again and again waits
 *   longer and longer between attempts, and a 429 or 503 with Retry-After pauses it.
 *
 * Schedules live in the database (next_attempt_at): nothing here needs to survive a restart.
 */
export function createDispatcher(options: DispatcherOptions) {
  const log = options.log.child({ subsystem: 'dispatch' });
  const { deliveries, clock } = options;
  const slowMs = options.slowAttemptMs ?? DEFAULT_SLOW_ATTEMPT_MS;
  /** Slots that webhooks limited to one attempt (failing or slow) may take together. */
  const limitedCap = Math.max(1, Math.floor(options.concurrency / 2));

  const hooks = new Map<string, Hook>();
  let rotation = 0;
  let slotsUsed = 0;
  let finished: Attempt[] = [];
  let released: Attempt[] = [];
  const running = new Set<Attempt>();
  let refreshWanted = true;
  const reset = new Set<string>();

  let started = false;
  let stopping = false;
  let flushTimer: NodeJS.Timeout | null = null;
  let flushImmediate: NodeJS.Immediate | null = null;
  let lastFlushAt = -Infinity;
  let flushFailures = 0;
  let wakeTimer: NodeJS.Timeout | null = null;
  let wakeAt = Infinity;
  let pollTimer: NodeJS.Timeout | null = null;
  let unsubscribe: (() => void) | null = null;

  function hookFor(orgId: string): Hook {
    let hook = hooks.get(orgId);
    if (!hook) {
      hook = { orgId, deliverable: false, attempts: new Set(), hasWork: true, retryAt: null, failing: false, failures: 0, pausedUntil: 0 };
      hooks.set(orgId, hook);
    }
    return hook;
  }

  /** Reads which webhooks may receive deliveries (a small read, no write). */
  function refreshHooks(): void {
    refreshWanted = false;
    for (const hook of hooks.values()) hook.deliverable = false;
    for (const { orgId, status } of deliveries.deliverableWebhooks()) {
      const known = hooks.has(orgId);
      const hook = hookFor(orgId);
      hook.deliverable = true;
      if (!known || reset.has(orgId)) {
        hook.failing = status === 'failing';
        hook.failures = 0;
        hook.pausedUntil = 0;
        hook.hasWork = true;
      }
    }
    reset.clear();
    for (const [orgId, hook] of hooks) if (!hook.deliverable && hook.attempts.size === 0) hooks.delete(orgId);
  }

  /** Limited to one attempt at a time: failing, or its oldest attempt is running long. */
  function isLimited(hook: Hook, mono: number): boolean {
    if (hook.failing) return true;
    for (const a of hook.attempts) return a.finished === null && mono - a.startedMono >= slowMs;
    return false;
  }

  /** The organizations to claim for now, each with the slots it may fill, in a rotating order. */
  function plan(now: number, mono: number): ClaimWanted[] {
    if (options.concurrency - slotsUsed <= 0) return [];
    const list = [...hooks.values()];
    let limitedUsed = 0;
    for (const hook of list) if (hook.attempts.size > 0 && isLimited(hook, mono)) limitedUsed += hook.attempts.size;
    let limitedLeft = limitedCap - limitedUsed;
    const wanted: ClaimWanted[] = [];
    const first = list.length === 0 ? 0 : rotation++ % list.length;
    for (let i = 0; i < list.length; i++) {
      const hook = list[(first + i) % list.length]!;
      if (!hook.deliverable || hook.pausedUntil > now) continue;
      if (hook.retryAt !== null && hook.retryAt <= now) {
        hook.retryAt = null;
        hook.hasWork = true;
      }
      if (!hook.hasWork) continue;
      if (isLimited(hook, mono)) {
        if (hook.attempts.size > 0 || limitedLeft <= 0) continue;
        limitedLeft--;
        wanted.push({ orgId: hook.orgId, room: 1 });
      } else {
        const room = options.perWebhookConcurrency - hook.attempts.size;
        if (room > 0) wanted.push({ orgId: hook.orgId, room });
      }
    }
    return wanted;
  }

  function applyDrained(drained: FlushResult['drained']): void {
    for (const { orgId, nextRetryAt } of drained) {
      const hook = hooks.get(orgId);
      if (!hook) continue;
      hook.hasWork = false;
      hook.retryAt = nextRetryAt;
    }
  }

  function takeSlot(a: Attempt): void {
    a.hook.attempts.add(a);
    slotsUsed++;
  }

  function freeSlot(a: Attempt): void {
    if (a.hook.attempts.delete(a)) slotsUsed--;
    // An ended attempt may unblock the next change of its request, or its webhook's queue.
    a.hook.hasWork = true;
  }

  /** What a finished attempt teaches about its webhook (in memory; the database keeps its own health columns). */
  function learn(hook: Hook, result: AttemptResult, outcome: DeliveryOutcome, now: number): void {
    if (isSuccess(result)) {
      hook.failing = false;
      hook.failures = 0;
      hook.pausedUntil = 0;
      return;
    }
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
      const until = now + pause;
      if (until > hook.pausedUntil) {
        hook.pausedUntil = until;
        log.info({ org: hook.orgId, url: finishedUrl(hook), until: new Date(until).toISOString(), failures: hook.failures, status: result.statusCode }, throttled ? 'webhook asked to slow down: paused' : 'webhook failing: paused before its next attempt');
      }
    }
  }

  function finishedUrl(hook: Hook): string | undefined {
    for (const a of hook.attempts) return a.delivery.url;
    return undefined;
  }

  function start(d: ClaimedDelivery): void {
    const a: Attempt = { delivery: d, hook: hookFor(d.orgId), startedAt: clock.now(), startedMono: performance.now(), controller: new AbortController(), finished: null, running: null };
    takeSlot(a);
    running.add(a);
    a.running = run(a).finally(() => running.delete(a));
  }

  async function run(a: Attempt): Promise<void> {
    const d = a.delivery;
    let result: AttemptResult;
    try {
      result = await options.deliverer.deliver({ url: d.url, eventId: d.eventId, payload: d.payload, secrets: d.secrets }, a.controller.signal);
    } catch (err) {
      // deliver() reports every failure as a result; reaching here is a bug. Give the delivery back uncounted.
      log.error({ err, delivery: d.id }, 'delivery attempt threw; the delivery is given back and will be attempted again');
      released.push(a);
      requestFlush();
      return;
    }
    if (a.controller.signal.aborted && result.statusCode === null) {
      // Cut short by shutdown: not the receiver's fault, so it does not count.
      released.push(a);
      requestFlush();
      return;
    }
    const now = clock.now();
    const outcome = decideOutcome(result, d.attempts + 1, options.policy, now, Math.random());
    learn(a.hook, result, outcome, now);
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

  function flush(): void {
    flushTimer = null;
    flushImmediate = null;
    try {
      flushNow();
    } catch (err) {
      log.error({ err }, 'dispatcher flush failed unexpectedly; trying again shortly');
      retryFlushLater();
    }
  }

  function retryFlushLater(): void {
    const wait = Math.min(100 * 2 ** Math.min(flushFailures, 6), 5_000);
    if (flushTimer === null && flushImmediate === null) flushTimer = setTimeout(flush, wait);
  }

  function flushNow(): void {
    if (!started) return;
    const now = clock.now();
    const mono = performance.now();
    if (refreshWanted && !stopping) refreshHooks();
    const done = finished;
    const back = released;
    finished = [];
    released = [];
    let wanted = stopping ? [] : plan(now, mono);
    if (wanted.length > 0 && done.length === 0 && back.length === 0) {
      // Nothing to record: find out without a write transaction whether anything is due.
      const peeked = deliveries.peek(wanted.map((w) => w.orgId));
      applyDrained(peeked.drained);
      const due = new Set(peeked.due);
      wanted = wanted.filter((w) => due.has(w.orgId));
    }
    const limit = options.concurrency - slotsUsed;
    const claim = wanted.length > 0 && limit > 0 ? { wanted, limit, leaseMs: options.leaseMs } : null;
    if (done.length === 0 && back.length === 0 && claim === null) {
      armWakeTimer(now);
      return;
    }
    let result: FlushResult;
    try {
      result = deliveries.flush({ finished: done.map((a) => a.finished!), released: back.map((a) => a.delivery), claim });
    } catch (err) {
      finished = done.concat(finished);
      released = back.concat(released);
      flushFailures++;
      const code = (err as { code?: unknown }).code;
      if (typeof code === 'string' && TRANSIENT_SQLITE.test(code)) {
        if (flushFailures === 1 || flushFailures % 20 === 0) {
          log.error({ err, outcomes: finished.length, failures: flushFailures }, 'recording delivery outcomes failed; they are kept and the commit is tried again');
        }
      } else if (flushFailures >= 3) {
        isolate();
      } else {
        log.error({ err, outcomes: finished.length }, 'recording delivery outcomes failed; trying again shortly');
      }
      retryFlushLater();
      return;
    }
    flushFailures = 0;
    lastFlushAt = performance.now();
    for (const a of done) freeSlot(a);
    for (const a of back) freeSlot(a);
    applyDrained(result.drained);
    for (const d of result.claimed) start(d);
    armWakeTimer(now);
  }

  /**
   * After repeated failures that are not about the disk or a lock, records what is waiting one
   * item at a time, so one that cannot be recorded does not hold up the rest: it is logged and
   * let go (its lease lapses and it is attempted again).
   */
  function isolate(): void {
    const done = finished;
    const back = released;
    finished = [];
    released = [];
    for (const a of done) {
      try {
        deliveries.flush({ finished: [a.finished!], released: [], claim: null });
      } catch (err) {
        log.error({ err, delivery: a.delivery.id }, 'the outcome of this attempt cannot be recorded; it is dropped, and the delivery will be attempted again when its lease lapses');
      }
      freeSlot(a);
    }
    for (const a of back) {
      try {
        deliveries.flush({ finished: [], released: [a.delivery], claim: null });
      } catch (err) {
        log.error({ err, delivery: a.delivery.id }, 'this delivery cannot be given back; it will be attempted again when its lease lapses');
      }
      freeSlot(a);
    }
    flushFailures = 0;
  }

  /** One timer for the earliest moment something becomes due: a retry, or the end of a pause. */
  function armWakeTimer(now: number): void {
    if (stopping) return;
    let next = Infinity;
    // Only moments still to come: what is due already waits for a slot, and the end of an
    // attempt (which frees one) asks for a commit anyway.
    for (const hook of hooks.values()) {
      if (!hook.deliverable) continue;
      if (hook.hasWork && hook.pausedUntil > now) next = Math.min(next, hook.pausedUntil);
      if (hook.retryAt !== null) {
        const at = Math.max(hook.retryAt, hook.pausedUntil);
        if (at > now) next = Math.min(next, at);
      }
    }
    if (next === Infinity || next >= wakeAt) return;
    if (wakeTimer !== null) clearTimeout(wakeTimer);
    wakeAt = next;
    wakeTimer = setTimeout(
      () => {
        wakeTimer = null;
        wakeAt = Infinity;
        requestFlush();
      },
      Math.min(Math.max(next - now, 0), 2 ** 31 - 1),
    );
  }

  function onWork(orgId: string, kind: WorkKind): void {
    if (stopping) return;
    const hook = hooks.get(orgId);
    if (hook) hook.hasWork = true;
    if (!hook || kind === 'webhook') {
      refreshWanted = true;
      if (kind === 'webhook') reset.add(orgId);
    }
    requestFlush();
  }

  function poll(): void {
    refreshWanted = true;
    for (const hook of hooks.values()) hook.hasWork = true;
    requestFlush();
  }

  return {
    start(): void {
      started = true;
      stopping = false;
      unsubscribe = options.work?.subscribe(onWork) ?? null;
      pollTimer = setInterval(poll, options.pollIntervalMs);
      log.info({ concurrency: options.concurrency, perWebhook: options.perWebhookConcurrency, groupCommitMs: options.groupCommitMs }, 'dispatcher started');
      requestFlush();
    },

    /** Looks at every webhook now, as the poll does. */
    wake: poll,

    /** What the dispatcher holds now (for tests and status). */
    snapshot(): DispatcherSnapshot {
      return {
        slotsUsed,
        webhooks: [...hooks.values()].map((h) => ({
          orgId: h.orgId,
          slots: h.attempts.size,
          failing: h.failing,
          failures: h.failures,
          pausedUntil: h.pausedUntil > clock.now() ? h.pausedUntil : null,
          hasWork: h.hasWork,
        })),
      };
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
      pollTimer = null;
      wakeTimer = null;
      wakeAt = Infinity;
      const all = () => Promise.allSettled([...running].map((a) => a.running));
      if (running.size > 0) {
        let timer: NodeJS.Timeout | undefined;
        await Promise.race([all(), new Promise<void>((resolve) => (timer = setTimeout(resolve, drainMs)))]);
        clearTimeout(timer);
        for (const a of running) a.controller.abort(new Error('the daemon is stopping'));
        await all();
      }
      if (flushTimer !== null) clearTimeout(flushTimer);
      if (flushImmediate !== null) clearImmediate(flushImmediate);
      flushTimer = null;
      flushImmediate = null;
      for (let i = 0; i < 3 && (finished.length > 0 || released.length > 0); i++) {
        try {
          flushNow();
        } catch (err) {
          log.error({ err }, 'recording the last outcomes failed');
        }
      }
      if (flushTimer !== null) clearTimeout(flushTimer);
      flushTimer = null;
      if (finished.length > 0 || released.length > 0) {
        log.error({ outcomes: finished.length, released: released.length }, 'some outcomes could not be recorded; those deliveries will be attempted again when their lease lapses');
      }
      started = false;
      log.info('dispatcher stopped');
    },
  };
}
export type Dispatcher = ReturnType<typeof createDispatcher>;

/**
 * The group commit: what ended since the last commit (attempts with their outcome, attempts cut
 * short, deliveries claimed and never started) is recorded in one write transaction, which also
 * leases what the free slots can take (see OutboxService.flush). One commit at a time, at
 * most one group commit every `groupCommitMs`; a claim for new work may run sooner, alone.
 *
 * Its modes, one at a time, changed only by `to()`, which refuses an illegal change (a bug):
 *
 *   stopped ──start──> idle ──request──> scheduled ──timer──> committing ──end──> idle | scheduled
 *                                                                │ a timer fires meanwhile
 *                                                                v
 *                                                      committing-more-wanted ──end──> idle | scheduled
 *   scheduled ──a timer fires on a damaged database──> idle (nothing more is written)
 *   any but stopped ──close──> closing (the last commits, nothing more scheduled) ──> stopped
 *
 * A timer may be armed during a commit (the window's, counted from the previous group commit; a
 * claim's; a back-off's), as the dispatcher asks: if it fires before the commit ends, the mode
 * becomes committing-more-wanted and the commit it wanted ('all' wins over 'claim') is asked for
 * again at the end; if not, it fires later and finds the mode scheduled. This keeps the timing
 * of the commits as it was before the modes were named (docs/benchmarks.md, "Delivery").
 *
 * The dispatcher hands outcomes in (finished, aborted, giveBack) and supplies the claim side as
 * a CommitHost: the plan before the transaction, what was claimed after it.
 */
import type { Logger } from '../log.ts';
import type { ClaimedDelivery, OutboxService, FinishedAttempt, FlushResult, FlushWork } from '../services/outbox.ts';
import type { StorageHealth } from '../services/storage-health.ts';
import { isTransientStoreError } from '../store/storage-faults.ts';
import { isDatabaseBusy } from '../domain/errors.ts';

/** `all`: the group commit (records what waits, claims for the free slots). `claim`: claims only, for new work, without waiting for the disk. */
export type CommitKind = 'all' | 'claim';

export type CommitMode = 'stopped' | 'idle' | 'scheduled' | 'committing' | 'committing-more-wanted' | 'closing';

const LEGAL: { readonly [M in CommitMode]: readonly CommitMode[] } = {
  stopped: ['idle'],
  idle: ['scheduled', 'closing'],
  scheduled: ['idle', 'committing', 'closing'],
  committing: ['committing-more-wanted', 'idle', 'scheduled', 'closing'],
  'committing-more-wanted': ['idle', 'scheduled', 'closing'],
  closing: ['stopped'],
};

/** An attempt as the group commit carries it: ended (`finished` set), or cut short (null). */
export interface PendingAttempt {
  readonly delivery: ClaimedDelivery;
  readonly finished: FinishedAttempt | null;
}

/** What one commit records: attempts that ended, attempts cut short (given back uncounted), deliveries never started (given back). */
export interface CommitBatch<A extends PendingAttempt> {
  readonly done: readonly A[];
  readonly back: readonly A[];
  readonly unsent: readonly ClaimedDelivery[];
}

/** The dispatcher's side of a commit. One commit at a time: the calls of one commit come in this order. */
export interface CommitHost<A extends PendingAttempt> {
  /** The dispatcher still claims (it runs and is not stopping). */
  claiming(): boolean;
  /** Reads the list of webhooks when it is due (null: not due), before anything else of the commit. */
  refresh(): Promise<void> | null;
  /** Before the batch is taken: gives back stale buffers (they join this commit), notes retries fallen due. */
  prepare(): void;
  /** What this commit claims (null: nothing); `kind` 'claim' comes with an empty batch. */
  plan(batch: CommitBatch<A>, kind: CommitKind): FlushWork['claim'];
  /** A group commit with nothing to record: the part of `claim` that has anything due (a read, no write transaction), or null. */
  peek(claim: NonNullable<FlushWork['claim']>): Promise<FlushWork['claim']>;
  /** After the transaction (its result), or when the commit had nothing to write (null). */
  committed(batch: CommitBatch<A>, result: FlushResult | null): void;
  /** After repeated failures, `a` was recorded (or given back) alone, or let go: its slot is free. */
  settled(a: A, givenBack: boolean): void;
}

export interface GroupCommitOptions {
  readonly deliveries: Pick<OutboxService, 'flush'>;
  readonly log: Logger;
  /** Least time between two group commits (ms). */
  readonly groupCommitMs: number;
  readonly health?: StorageHealth | undefined;
  /** See DispatcherOptions.lockWaitMs. */
  readonly lockWaitMs?: number | undefined;
}

const EMPTY: CommitBatch<never> = { done: [], back: [], unsent: [] };
/** Between a database_busy and the next try. */
const BUSY_PAUSE_MS = 10;

export function createGroupCommit<A extends PendingAttempt>(options: GroupCommitOptions) {
  const { deliveries, log, health } = options;
  let host: CommitHost<A> | null = null;
  let mode: CommitMode = 'stopped';
  /** Attempts that ended, waiting for the next group commit. */
  let finished: A[] = [];
  /** Attempts cut short (shutdown, a bug in deliver), to give back uncounted. */
  let aborted: A[] = [];
  /** Claimed but never started, to give back. */
  let unstarted: ClaimedDelivery[] = [];
  let commitTimer: NodeJS.Timeout | null = null;
  let commitImmediate: NodeJS.Immediate | null = null;
  /** A claim asked for by new work while slots are free (see requestClaim). */
  let claimImmediate: NodeJS.Immediate | null = null;
  /** The commit under way (it never rejects, but for close()'s). */
  let running: Promise<void> | null = null;
  /** In committing-more-wanted: the commit to ask for at its end. */
  let next: CommitKind | null = null;
  let lastCommitAt = -Infinity;
  let failures = 0;

  // Another process (a CLI command, a backup) holding SQLite's write lock: the store waits for
  // it (busyTimeoutMs, see store/sqlite/lock-wait.ts) and answers database_busy if it is not
  // released meanwhile. What the commit carries is kept and the commit asked for again (the store
  // waits again); logged once when it starts and once when it ends.
  const lockWaitMs = options.lockWaitMs ?? 5_000;
  let busySince: number | null = null;
  function stillBusy(): void {
    if (busySince === null) {
      busySince = performance.now() - lockWaitMs;
      log.warn({ waitedMs: lockWaitMs, outcomes: finished.length }, 'the database has been locked by another process (a hookrelay CLI command, a backup?) for a while; outcomes are kept and recorded once it is released');
    }
    // The store has waited already; the pause only matters while the daemon stops, when its
    // wait ends at once.
    retryAfter(BUSY_PAUSE_MS);
  }
  function busyEnded(): void {
    log.info({ waitedMs: Math.round(performance.now() - busySince!) }, 'the database lock was released: outcomes recorded');
    busySince = null;
  }

  function to(target: CommitMode): void {
    if (target === mode) return;
    if (!LEGAL[mode].includes(target)) throw new Error(`group commit: no way from ${mode} to ${target} (a bug)`);
    mode = target;
  }

  const armed = (): boolean => commitTimer !== null || commitImmediate !== null || claimImmediate !== null;
  const committing = (): boolean => mode === 'committing' || mode === 'committing-more-wanted';
  const accepting = (): boolean => mode !== 'stopped' && mode !== 'closing';

  function clearTimers(): void {
    if (commitTimer !== null) clearTimeout(commitTimer);
    if (commitImmediate !== null) clearImmediate(commitImmediate);
    if (claimImmediate !== null) clearImmediate(claimImmediate);
    commitTimer = null;
    commitImmediate = null;
    claimImmediate = null;
  }

  /** Schedules a group commit: at once when the last one is older than the window, else when the window ends. */
  function request(): void {
    if (commitTimer !== null || commitImmediate !== null || !accepting()) return;
    const wait = lastCommitAt + options.groupCommitMs - performance.now();
    if (wait <= 0) commitImmediate = setImmediate(onCommitTimer);
    else commitTimer = setTimeout(onCommitTimer, wait);
    if (mode === 'idle') to('scheduled');
  }

  /**
   * New work while slots are free: claims at once, without waiting for the group-commit window,
   * in a transaction that claims only (outcomes wait for their group commit) and does not wait
   * for the disk (see OutboxService.flush's `durable`). Under load, when every slot is taken,
   * new work waits for the next group commit as before.
   */
  function requestClaim(): void {
    // A group commit about to run claims too; after a failed commit, its back-off decides.
    if (claimImmediate !== null || commitImmediate !== null || !accepting()) return;
    if (failures > 0 || busySince !== null) request();
    else {
      claimImmediate = setImmediate(onClaimTimer);
      if (mode === 'idle') to('scheduled');
    }
  }

  /** A group commit in `ms`, unless one is scheduled already (a back-off after a failure, a lock wait). */
  function retryAfter(ms: number): void {
    if (commitTimer !== null || commitImmediate !== null || !accepting()) return;
    commitTimer = setTimeout(onCommitTimer, ms);
    if (mode === 'idle') to('scheduled');
  }

  function retryLater(): void {
    retryAfter(Math.min(100 * 2 ** Math.min(failures, 6), 5_000));
  }

  function onCommitTimer(): void {
    commitTimer = null;
    commitImmediate = null;
    fire('all');
  }

  function onClaimTimer(): void {
    claimImmediate = null;
    fire('claim');
  }

  /** A timer fired: runs its commit now, or once the one under way has ended. */
  function fire(kind: CommitKind): void {
    if (health?.damaged()) {
      if (mode === 'scheduled' && !armed()) to('idle');
      return;
    }
    if (committing()) {
      if (kind === 'all' || next === null) next = kind;
      to('committing-more-wanted');
      return;
    }
    if (mode !== 'scheduled') return;
    to('committing');
    running = commitNow(kind)
      .catch((err: unknown) => {
        // A read that fails on a storage fault (a damaged page, say): logged once by `health`, backed off.
        if (health?.failed('dispatch', err) != null) failures++;
        else {
          log.error({ err }, kind === 'claim' ? 'claiming deliveries failed unexpectedly; trying again shortly' : 'dispatcher flush failed unexpectedly; trying again shortly');
          if (kind === 'claim') failures++;
        }
        retryLater();
      })
      .finally(ended);
  }

  function ended(): void {
    running = null;
    if (!committing()) return; // closing: close() runs what is left
    const again = next;
    next = null;
    to(armed() ? 'scheduled' : 'idle');
    if (again === 'all') request();
    else if (again === 'claim') requestClaim();
  }

  /** Takes what waits for the next commit. */
  function take(): CommitBatch<A> {
    const batch = { done: finished, back: aborted, unsent: unstarted };
    finished = [];
    aborted = [];
    unstarted = [];
    return batch;
  }

  /** A commit that failed keeps what it carried, ahead of what came since. */
  function putBack(batch: CommitBatch<A>): void {
    finished = batch.done.concat(finished);
    aborted = batch.back.concat(aborted);
    unstarted = batch.unsent.concat(unstarted);
  }

  async function commitNow(kind: CommitKind): Promise<void> {
    const h = host;
    if (h === null || (kind === 'claim' && !h.claiming())) return;
    const reading = h.refresh();
    if (reading !== null) await reading;
    h.prepare();
    const claimOnly = kind === 'claim';
    const batch = claimOnly ? EMPTY : take();
    const writes = batch.done.length + batch.back.length + batch.unsent.length;
    let claim = h.plan(batch, kind);
    // A claim for new work skips the look: the work was just queued, and a claim that finds
    // nothing writes nothing.
    if (claim !== null && writes === 0 && !claimOnly) claim = await h.peek(claim);
    if (writes === 0 && claim === null) {
      h.committed(batch, null);
      return;
    }
    let result: FlushResult;
    try {
      result = await deliveries.flush({ finished: batch.done.map((a) => a.finished!), released: [...batch.back.map((a) => a.delivery), ...batch.unsent], claim }, mode === 'closing' ? { durable: true, lockWait: { maxWaitMs: lockWaitMs } } : { durable: !claimOnly });
    } catch (err) {
      putBack(batch);
      if (isDatabaseBusy(err)) {
        stillBusy();
        return;
      }
      failures++;
      if (health?.failed('dispatch', err) != null) {
        // Logged once per state change by `health`; what waits is kept and tried again.
      } else if (isTransientStoreError(err)) {
        // A full disk, or a PostgreSQL server out of reach or restarting: nothing is let go.
        if (failures === 1 || failures % 20 === 0) {
          log.error({ err, outcomes: finished.length, failures }, 'recording delivery outcomes failed; they are kept and the commit is tried again');
        }
      } else if (failures >= 3) {
        await isolate(h);
        return;
      } else {
        log.error({ err, outcomes: finished.length }, 'recording delivery outcomes failed; trying again shortly');
      }
      retryLater();
      return;
    }
    failures = 0;
    if (busySince !== null) busyEnded();
    health?.succeeded('dispatch');
    if (!claimOnly) lastCommitAt = performance.now();
    h.committed(batch, result);
  }

  /**
   * After repeated failures that are not about the disk or a lock, records what is waiting one
   * item at a time, so one that cannot be recorded does not hold up the rest: it is logged and
   * let go (its lease lapses and it is attempted again).
   */
  async function isolate(h: CommitHost<A>): Promise<void> {
    const { done, back, unsent } = take();
    /** Records one item; false (it is kept for the next commit) when the database is locked by another process. */
    const one = async (work: FlushWork, id: number): Promise<boolean> => {
      try {
        await deliveries.flush(work);
      } catch (err) {
        if (isDatabaseBusy(err)) return false;
        log.error({ err, delivery: id }, 'this delivery cannot be recorded; it is let go, and will be attempted again when its lease lapses');
      }
      return true;
    };
    let locked = false;
    for (const a of done) {
      if (locked || !(await one({ finished: [a.finished!], released: [], claim: null }, a.delivery.id))) {
        locked = true;
        finished.push(a);
      } else h.settled(a, false);
    }
    for (const a of back) {
      if (locked || !(await one({ finished: [], released: [a.delivery], claim: null }, a.delivery.id))) {
        locked = true;
        aborted.push(a);
      } else h.settled(a, true);
    }
    for (const d of unsent) {
      if (locked || !(await one({ finished: [], released: [d], claim: null }, d.id))) {
        locked = true;
        unstarted.push(d);
      }
    }
    failures = 0;
    if (locked) stillBusy();
    else if (h.claiming()) request();
  }

  return {
    /** The current mode (for tests and logs). */
    get mode(): CommitMode {
      return mode;
    },

    request,
    requestClaim,

    /** An attempt ended with its outcome: recorded at the next group commit. */
    finished(a: A): void {
      finished.push(a);
      request();
    },

    /** An attempt cut short: given back uncounted at the next group commit. */
    aborted(a: A): void {
      aborted.push(a);
      request();
    },

    /** A delivery claimed and never started: given back at the next commit (the caller asks for one). */
    giveBack(d: ClaimedDelivery): void {
      unstarted.push(d);
    },

    /** Starts taking outcomes and requests, with `commitHost` the claim side of each commit. One host at a time. */
    start(commitHost: CommitHost<A>): void {
      if (mode !== 'stopped') throw new Error(`group commit: started while ${mode} (a bug: one dispatcher per group commit)`);
      host = commitHost;
      to('idle');
      request();
    },

    /** Resolves once the commit under way, if any, has ended. */
    async settled(): Promise<void> {
      await running?.catch(() => {});
    },

    /**
     * The last commits at stop: three tries, each waiting up to lockWaitMs for a lock another
     * process holds (the daemon's own waits end when it stops). Nothing is scheduled any more;
     * what could not be recorded is logged (those deliveries are attempted again when their lease
     * lapses).
     */
    async close(): Promise<void> {
      if (mode === 'stopped') return;
      to('closing');
      clearTimers();
      const left = () => finished.length + aborted.length + unstarted.length;
      for (let i = 0; i < 3 && left() > 0 && !health?.damaged(); i++) {
        await running?.catch(() => {});
        try {
          running = commitNow('all');
          await running;
        } catch (err) {
          log.error({ err }, 'recording the last outcomes failed');
        }
        running = null;
      }
      if (left() > 0) {
        log.error({ outcomes: finished.length, given_back: aborted.length + unstarted.length }, 'some outcomes could not be recorded; those deliveries will be attempted again when their lease lapses');
      }
      next = null;
      host = null;
      to('stopped');
    },
  };
}
export type GroupCommit<A extends PendingAttempt> = ReturnType<typeof createGroupCommit<A>>;

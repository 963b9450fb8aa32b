/**
 * Waiting for the database's write lock without blocking the event loop.
 *
 * SQLite lets one connection write at a time. A CLI command (`hookrelay ingest`, `deliveries
 * recover`, `db prune`), a backup or an operator's sqlite3 shell may hold the lock while the
 * daemon runs. better-sqlite3 is synchronous, so SQLite's own busy handler would sleep on the
 * daemon's only thread: the admin API, health checks and the dispatcher would all stop until
 * the other writer let go (docs/benchmarks.md, "Lock waits"). The daemon's connection therefore
 * does not wait in SQLite (busy_timeout 0 once it is migrated: see openDatabase's
 * `waitForLocks`): BEGIN IMMEDIATE fails at once, before the transaction ran anything, and the
 * store (store.ts) tries it again after a short pause on a timer, as the transaction's
 * `lockWait` (or the store's default, from database.busyTimeout) says. It does not hold its
 * turn on the connection while it waits: reads and the daemon's other work go on meanwhile.
 * Callers never retry: the transaction's function runs once, when the lock is got, and a wait
 * that ends without it is `database_busy` (the API answers 503 with Retry-After).
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { ErrorCode, HookrelayError, isDatabaseBusy } from '../../domain/errors.ts';
import type { LockWait } from '../repos.ts';
import { isLockWait as isSqliteLockWait } from '../storage-faults.ts';

/**
 * Pause before try number `tries` + 1 of a write that found the lock taken: 1 ms, then 2 ms.
 * Short, because the other writer may only let go for a moment between two of its
 * transactions: the CLI leaves the lock free for CLI_LOCK_GAP_MS after each (a CLI ingest
 * commits a batch every few tens of ms). A failed try costs a few microseconds (one file lock
 * attempt).
 */
export function lockPollDelayMs(tries: number): number {
  return Math.min(tries, LOCK_POLL_MAX_MS);
}
export const LOCK_POLL_MAX_MS = 2;
/** What the CLI leaves between two of its write transactions (see OpenDatabaseOptions.lockGapMs): longer than LOCK_POLL_MAX_MS. */
export const CLI_LOCK_GAP_MS = 3;

/** A write that waited `waitedMs` for the lock without getting it (the API answers 503 with Retry-After). */
export function databaseBusy(waitedMs: number, cause: unknown): HookrelayError {
  return new HookrelayError(
    ErrorCode.databaseBusy,
    `the database has been locked by another process for ${(waitedMs / 1000).toFixed(1)} s (a hookrelay CLI command or a backup, say); nothing was changed: try again shortly`,
    { cause },
  );
}

/**
 * A lock another process holds, as the dispatcher's own lock handling sees it (until it goes:
 * the store waits for it now): a lock error, or the store's `database_busy` after its wait.
 * Either way the transaction changed nothing and can be run again.
 */
export function isLockWait(err: unknown): boolean {
  return isSqliteLockWait(err) || isDatabaseBusy(err);
}

/** What a try returns when its BEGIN IMMEDIATE found the lock taken (nothing ran). */
export class LockedAtBegin {
  readonly cause: unknown;
  constructor(cause: unknown) {
    this.cause = cause;
  }
}

/**
 * Runs `attempt` again, after lockPollDelayMs, for as long as it finds the lock taken
 * (rejects with LockedAtBegin) and `wait` allows; `locked` is the first try's refusal. Pauses at
 * least once before giving up, so that a caller that tries again at once still yields to timers
 * and I/O. Any other error is thrown as it is.
 */
export async function retryWhileLocked<T>(attempt: () => Promise<T>, wait: LockWait, locked: LockedAtBegin): Promise<T> {
  const started = performance.now();
  let last = locked.cause;
  for (let tries = 1; ; tries++) {
    await sleep(lockPollDelayMs(tries), undefined, { signal: wait.signal }).catch(() => {});
    if (wait.signal?.aborted) throw databaseBusy(performance.now() - started, last);
    try {
      return await attempt();
    } catch (err) {
      if (!(err instanceof LockedAtBegin)) throw err;
      last = err.cause;
    }
    const waited = performance.now() - started;
    if (wait.maxWaitMs !== undefined && waited >= wait.maxWaitMs) throw databaseBusy(waited, last);
  }
}

/**
 * Waiting for the database's write lock without blocking the event loop.
 *
 * SQLite lets one connection write at a time. A CLI command (`hookrelay ingest`, `deliveries
 * recover`, `db prune`), a backup or an operator's sqlite3 shell may hold the lock while the
 * daemon runs. better-sqlite3 is synchronous, so SQLite's own busy handler would sleep on the
 * daemon's only thread: the admin API, health checks and the dispatcher would all stop until
 * the other writer let go (measured: stalls of 350 ms to 1 s during a CLI ingest or recover,
 * docs/benchmarks.md, "Lock waits"). The daemon's connection therefore does not wait
 * (busy_timeout 0 once it is migrated: see openDatabase's `waitForLocks`): a write that finds
 * the lock taken fails at once, before it has changed anything, and its caller tries it again
 * after a short pause on a timer (`whenUnlocked`, StorageHealth.retrying, the dispatcher's
 * commit), so everything else keeps running meanwhile.
 *
 * A write transaction that failed this way changed nothing: the lock is taken by BEGIN
 * IMMEDIATE (Store.transaction), before the first statement. So the whole call that ran it can
 * be made again, which is what the callers do.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { ErrorCode, HookrelayError } from '../../domain/errors.ts';
import { isLockWait } from '../storage-faults.ts';

export { isLockWait } from '../storage-faults.ts';

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

/** A write that waited `maxWaitMs` for the lock without getting it (the API answers 503 with Retry-After). */
export function databaseBusy(waitedMs: number, cause: unknown): HookrelayError {
  return new HookrelayError(
    ErrorCode.databaseBusy,
    `the database has been locked by another process for ${(waitedMs / 1000).toFixed(1)} s (a hookrelay CLI command or a backup, say); nothing was changed: try again shortly`,
    { cause },
  );
}

export interface LockWaitOptions {
  /** Longest wait for the lock, in ms; then `database_busy` is thrown. Unlimited by default. */
  readonly maxWaitMs?: number;
  /** Aborting ends the wait: the last lock error is thrown. */
  readonly signal?: AbortSignal | undefined;
  /** Hears once, after `noticeAfterMs` of waiting, that the wait is long (to log it). */
  readonly onLongWait?: (waitedMs: number) => void;
  readonly noticeAfterMs?: number;
}

/**
 * Runs `fn` (whose writes are one transaction, or transactions each of which can be run again:
 * see the module comment); while it fails because another connection holds the lock, runs it
 * again after lockPollDelayMs. Any other error is thrown at once.
 */
export async function whenUnlocked<T>(fn: () => T | Promise<T>, options: LockWaitOptions = {}): Promise<T> {
  const started = performance.now();
  let noticed = false;
  for (let tries = 1; ; tries++) {
    try {
      return await fn();
    } catch (err) {
      if (!isLockWait(err)) throw err;
      const waited = performance.now() - started;
      if (options.maxWaitMs !== undefined && waited >= options.maxWaitMs) throw databaseBusy(waited, err);
      if (options.signal?.aborted) throw err;
      if (!noticed && options.onLongWait !== undefined && waited >= (options.noticeAfterMs ?? 5_000)) {
        noticed = true;
        options.onLongWait(waited);
      }
    }
    await sleep(lockPollDelayMs(tries), undefined, { signal: options.signal }).catch(() => {});
  }
}

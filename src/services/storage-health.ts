import { setTimeout as sleep } from 'node:timers/promises';
import type { Logger } from '../log.ts';
import { ErrorCode, isHookrelayError } from '../domain/errors.ts';
import { FAULT_SEVERITY, StorageFault, storageFaultOf } from '../store/storage-faults.ts';
import { storageRetryDelayMs } from '../store/storage-retry.ts';

export { StorageFault, storageFaultOf } from '../store/storage-faults.ts';

/** Why the daemon cannot write its database now. */
export interface StorageProblem {
  readonly fault: StorageFault;
  /** One sentence for an operator: what is wrong and what to do. */
  readonly detail: string;
  /** When this fault was first seen (epoch ms). */
  readonly since: number;
  /** The writers that hit it: feed, dispatch, retention. */
  readonly parts: readonly string[];
}

export { MAX_STORAGE_RETRY_MS, storageRetryDelayMs } from '../store/storage-retry.ts';

const DETAIL: Record<StorageFault, string> = {
  [StorageFault.damaged]:
    'the database file is damaged; hookrelay stopped writing to it. Run `hookrelay db check`, then restore the last good backup and restart (docs/operations.md, "Backup and restore")',
  [StorageFault.diskFull]: 'the disk holding the database is full; writes are paused and retried, and resume by themselves once space is freed',
  [StorageFault.ioError]: 'the database file cannot be read or written (an I/O error, or its permissions); writes are retried and resume by themselves once the file is usable',
};

/**
 * The daemon's view of its storage: every writer (feed reader, dispatcher, retention) reports
 * what its writes do, and the worst fault any writer is stuck on is what /readyz answers. A
 * disk-full or I/O fault ends when the writer that hit it succeeds again; a damaged database
 * stays damaged until the daemon is restarted (on a restored file), and nothing is written to
 * it meanwhile. State changes are logged once each, never once per retry.
 */
export interface StorageHealth {
  /**
   * `part`'s write (or read) failed with `err`. Returns the storage fault it reports, or null
   * when `err` is no storage fault (then nothing changes: the caller handles the error itself).
   */
  failed(part: string, err: unknown): StorageFault | null;
  /** `part` wrote successfully: whatever fault it was stuck on is over (except damage). */
  succeeded(part: string): void;
  /** The worst fault any writer is stuck on, or null when all is well. */
  problem(): StorageProblem | null;
  /** True once the database was found damaged: nothing may be written to it any more. */
  damaged(): boolean;
  /**
   * Runs the write `fn` until it succeeds: a storage fault is reported and the same write is
   * tried again after a back-off (storageRetryDelayMs), so whatever the write carries (a feed
   * batch and its position) is kept, never dropped. A lock held by another process is no
   * fault, and the store waits for it (on timers, never blocking the event loop): when its
   * wait ends without the lock (`database_busy`, after database.busyTimeout in the daemon),
   * nothing was written and the write is handed to the store again, for as long as it takes;
   * that is logged once, and so is the lock's release. On a damaged database nothing is tried
   * (again): this waits until `signal` aborts, then throws. Any other error is thrown at once,
   * as is the last error once `signal` aborts.
   */
  retrying<T>(part: string, fn: () => T | Promise<T>, signal?: AbortSignal): Promise<T>;
}

export function createStorageHealth(log: Logger, now: () => number = Date.now): StorageHealth {
  return new WritersHealth(log.child({ subsystem: 'storage' }), now);
}

/** StorageHealth: each writer's fault, and the state last logged. */
class WritersHealth implements StorageHealth {
  readonly #log: Logger;
  readonly #now: () => number;
  /** Each writer's current fault, with when it began. */
  readonly #faults = new Map<string, { fault: StorageFault; since: number }>();
  #damagedSince: number | null = null;
  /** The fault last logged (null: all well). */
  #reported: StorageFault | null = null;

  constructor(log: Logger, now: () => number) {
    this.#log = log;
    this.#now = now;
  }

  failed(part: string, err: unknown): StorageFault | null {
    const fault = storageFaultOf(err);
    if (fault === null) return null;
    if (fault === StorageFault.damaged) this.#damagedSince ??= this.#now();
    const existing = this.#faults.get(part);
    if (existing?.fault !== fault) this.#faults.set(part, { fault, since: existing?.since ?? this.#now() });
    this.#reportChange(err);
    return fault;
  }

  succeeded(part: string): void {
    if (this.#faults.size === 0 || !this.#faults.delete(part)) return;
    this.#reportChange();
  }

  problem(): StorageProblem | null {
    if (this.#damagedSince !== null) {
      return { fault: StorageFault.damaged, detail: DETAIL[StorageFault.damaged], since: this.#damagedSince, parts: [...this.#faults.keys()] };
    }
    for (const fault of FAULT_SEVERITY) {
      const parts = [...this.#faults].filter(([, f]) => f.fault === fault);
      if (parts.length === 0) continue;
      return { fault, detail: DETAIL[fault], since: Math.min(...parts.map(([, f]) => f.since)), parts: parts.map(([p]) => p) };
    }
    return null;
  }

  damaged(): boolean {
    return this.#damagedSince !== null;
  }

  async retrying<T>(part: string, fn: () => T | Promise<T>, signal?: AbortSignal): Promise<T> {
    let lastError: unknown = new Error('stopped: the database is damaged, nothing is written to it');
    const started = performance.now();
    let locked = false;
    for (let failures = 0; this.#damagedSince === null; ) {
      try {
        const result = await fn();
        this.succeeded(part);
        if (locked) this.#log.info({ part, waitedMs: Math.round(performance.now() - started) }, 'the database lock was released: writes resumed');
        return result;
      } catch (err) {
        if (isHookrelayError(err) && err.code === ErrorCode.databaseBusy && !signal?.aborted) {
          if (!locked) this.#log.warn({ part, waitedMs: Math.round(performance.now() - started) }, 'the database has been locked by another process (a hookrelay CLI command, a backup?) for a while; this writer waits, nothing is lost');
          locked = true;
          continue;
        }
        if (this.failed(part, err) === null || signal?.aborted) throw err;
        lastError = err;
      }
      failures++;
      if (this.#damagedSince !== null) break;
      await sleep(storageRetryDelayMs(failures), undefined, { signal }).catch(() => {});
      if (signal?.aborted) throw lastError;
    }
    await parked(signal);
    throw lastError;
  }

  /** Logs the state if it changed since it was last logged. */
  #reportChange(err?: unknown): void {
    const current = this.problem();
    const fault = current?.fault ?? null;
    if (fault === this.#reported) return;
    const previous = this.#reported;
    this.#reported = fault;
    if (current === null) {
      this.#log.info({ previous }, 'storage usable again: writes resumed');
    } else if (current.fault === StorageFault.damaged) {
      this.#log.fatal({ fault: current.fault, parts: current.parts, err }, current.detail);
    } else {
      this.#log.error({ fault: current.fault, parts: current.parts, err }, current.detail);
    }
  }
}

/** Resolves when `signal` aborts (never without one). */
function parked(signal: AbortSignal | undefined): Promise<void> {
  return new Promise<void>((resolve) => {
    if (signal?.aborted) resolve();
    else signal?.addEventListener('abort', () => resolve(), { once: true });
  });
}

import type { Clock } from '../../domain/clock.ts';
import { ErrorCode, HookrelayError } from '../../domain/errors.ts';
import type { Logger } from '../../log.ts';
import { startBackgroundCheckpoints } from './checkpointer.ts';
import { openDatabase, type Db, type OpenDatabaseOptions } from './db.ts';
import { createDeliveriesRepo } from './deliveries-repo.ts';
import { createFeedRepo } from './feed-repo.ts';
import { createHeapTrimmer } from './heap-trim.ts';
import { LockedAtBegin, retryWhileLocked } from './lock-wait.ts';
import { createOrgsRepo } from './orgs-repo.ts';
import type { LockWait, Store, TransactionOptions, Tx, Upkeep, WorkSharing } from '../repos.ts';
import { createRetentionRepo } from './retention-repo.ts';
import { createRolesRepo } from './roles-repo.ts';
import { isLockWait, StorageFault, storageFaultOf } from '../storage-faults.ts';
import { asyncRepo } from './sync-repo.ts';
import { createUsersRepo } from './users-repo.ts';
import { createWebhooksRepo } from './webhooks-repo.ts';

export type { Store, Tx } from '../repos.ts';

/**
 * The SQLite store: the Store boundary over one better-sqlite3 connection, plus the connection
 * itself for the SQLite-only parts of store/ (maintenance, checkpoints) and SQLite-only tests.
 * Services never see `db`: they take a Store.
 */
export interface SqliteStore extends Store {
  readonly backend: 'sqlite';
  readonly db: Db;
}

/**
 * Opens the database (see openDatabase) and prepares the repositories. A file that is not a
 * database or whose pages are damaged fails with `database_damaged`: restarting cannot help.
 */
export function openSqliteStore(path: string, clock: Clock, options: OpenDatabaseOptions = {}): SqliteStore {
  let opened: ReturnType<typeof openDatabase> | null = null;
  try {
    opened = openDatabase(path, options);
    return storeOver(opened.db, opened.migrated, clock, options.lockGapMs ?? 0, options.lockWait ?? null);
  } catch (err) {
    if (opened?.db.open) opened.db.close();
    if (storageFaultOf(err) === StorageFault.damaged) {
      throw new HookrelayError(ErrorCode.databaseDamaged, `database ${path} is damaged (${(err as Error).message}); check it with \`hookrelay db check\` and restore the last good backup (docs/operations.md)`, { cause: err });
    }
    throw err;
  }
}

/** Without writes of another process for this long (ms), the CLI leaves its lock gap only every LOCK_GAP_EVERY transactions. */
const OTHERS_WRITING_MS = 2_000;
const LOCK_GAP_EVERY = 10;
/** Sleeps this thread (Atomics.wait on a word nobody changes): the CLI's lock gap. */
const SLEEPER = new Int32Array(new SharedArrayBuffer(4));

function storeOver(db: Db, migrated: { from: number; to: number }, clock: Clock, lockGapMs: number, defaultLockWait: LockWait | null): SqliteStore {
  const select1 = db.prepare('SELECT 1');
  let lastWriteEnded = -Infinity;
  // The CLI's lock gap (see OpenDatabaseOptions.lockGapMs): after each write transaction while
  // another process writes too (PRAGMA data_version moves when another connection commits), and
  // after every LOCK_GAP_EVERY-th otherwise, so that a daemon that was idle and wants to write
  // waits for a few transactions at most, and a CLI alone loses almost nothing to the gaps.
  const dataVersion = db.prepare('PRAGMA data_version').pluck();
  let seenVersion = lockGapMs > 0 ? dataVersion.get() : null;
  let othersWroteAt = -Infinity;
  let withoutGap = 0;
  /** Before a write transaction: leaves the lock free for `lockGapMs` after the previous one when due. */
  const gapBeforeWrite = (): void => {
    const now = performance.now();
    const version = dataVersion.get();
    if (version !== seenVersion) othersWroteAt = now;
    const wait = lastWriteEnded + lockGapMs - now;
    if (wait <= 0) withoutGap = 0;
    else if (now - othersWroteAt < OTHERS_WRITING_MS || withoutGap >= LOCK_GAP_EVERY - 1) {
      Atomics.wait(SLEEPER, 0, 0, wait);
      withoutGap = 0;
    } else withoutGap++;
  };
  const afterWrite = (): void => {
    lastWriteEnded = performance.now();
    seenVersion = dataVersion.get();
  };

  const tx: Tx = {
    orgs: asyncRepo(createOrgsRepo(db)),
    roles: asyncRepo(createRolesRepo(db)),
    users: asyncRepo(createUsersRepo(db)),
    webhooks: asyncRepo(createWebhooksRepo(db)),
    feed: asyncRepo(createFeedRepo(db)),
    deliveries: asyncRepo(createDeliveriesRepo(db)),
    retention: asyncRepo(createRetentionRepo(db)),
  };
  const begin = { immediate: db.prepare('BEGIN IMMEDIATE'), deferred: db.prepare('BEGIN DEFERRED') };
  const commit = db.prepare('COMMIT');
  // Prepared once: db.pragma() prepares its statement on every call, a visible share of the
  // daemon's CPU at moderate rates (docs/benchmarks.md, "At 100 events/s: where the time goes").
  const synchronous = { normal: db.prepare('PRAGMA synchronous = NORMAL'), full: db.prepare('PRAGMA synchronous = FULL') };
  const rollback = db.prepare('ROLLBACK');
  const connectionMutex = createConnectionMutex();
  const trimmer = createHeapTrimmer(db);

  /**
   * Runs `fn` between BEGIN and COMMIT, one transaction at a time: the connection has one
   * transaction, and a second one begun while the first awaits would run inside it. BEGIN runs
   * synchronously when this call holds the connection mutex, so a lock error (busy_timeout 0 in the daemon)
   * surfaces before anything ran, and `fn` starts at once when no other transaction is open.
   * `waiting`: a BEGIN that finds the lock taken rejects with LockedAtBegin (the caller waits
   * for the lock, the mutex given up meanwhile); otherwise with the lock error.
   */
  const run = <T>(write: boolean, durable: boolean, fn: (tx: Tx) => Promise<T>, waiting = false): Promise<T> =>
    connectionMutex.run(() => {
      if (write && lockGapMs > 0) gapBeforeWrite();
      if (!durable) synchronous.normal.run();
      const done = (): void => {
        if (!durable) synchronous.full.run();
        if (write && lockGapMs > 0) afterWrite();
      };
      try {
        (write ? begin.immediate : begin.deferred).run();
      } catch (err) {
        done();
        return Promise.reject(waiting && isLockWait(err) ? new LockedAtBegin(err) : err);
      }
      let running: Promise<T>;
      try {
        running = fn(tx);
      } catch (err) {
        running = Promise.reject(err);
      }
      return running.then(
        (value) => {
          try {
            commit.run();
          } catch (err) {
            if (db.inTransaction) rollback.run();
            done();
            throw err;
          }
          done();
          return value;
        },
        (err: unknown) => {
          if (db.inTransaction) rollback.run();
          done();
          throw err;
        },
      );
    });

  /** A write transaction that waits for a lock another process holds as `wait` says, on timers (lock-wait.ts); without `wait`, it fails at once with the lock error. */
  const write = <T>(fn: (tx: Tx) => Promise<T>, durable: boolean, wait: LockWait | null): Promise<T> => {
    if (wait === null) return run(true, durable, fn);
    const attempt = () => run(true, durable, fn, true);
    return attempt().then(undefined, (err: unknown) => (err instanceof LockedAtBegin ? retryWhileLocked(attempt, wait, err) : Promise.reject(err)));
  };

  /** Background checkpoints and heap trims share nothing but the connection: one handle for both (see Upkeep). */
  const upkeep = async (log: Logger, options: { whileBusy: boolean }): Promise<Upkeep> => {
    const checkpoints = await startBackgroundCheckpoints(db, log, options);
    return {
      busy: () => checkpoints.busy(),
      trimHeap: () => trimmer.trim(),
      get canTrimHeap() {
        return trimmer.available;
      },
      stop: () => checkpoints.stop(),
    };
  };
  /** One daemon per database file (the state directory's lock): nobody to share work with. */
  const noSharing: WorkSharing = { close: () => Promise.resolve() };

  return {
    backend: 'sqlite',
    shared: false,
    db,
    clock,
    migrated,
    transaction: <T>(fn: (tx: Tx) => Promise<T>, options: TransactionOptions = {}): Promise<T> => write(fn, options.durable !== false, options.lockWait ?? defaultLockWait),
    read: <T>(fn: (tx: Tx) => Promise<T>): Promise<T> => run(false, true, fn),
    ping: () =>
      connectionMutex.run(() => {
        select1.get();
        return Promise.resolve();
      }),
    upkeep,
    shareWork: () => Promise.resolve(noSharing),
    close: () => {
      if (db.open) db.close();
      return Promise.resolve();
    },
  };
}

/**
 * The one connection's mutex, first come first served: `run(fn)` runs `fn` (a transaction) at
 * once when nobody holds it (in the caller's tick), else once those before it have settled.
 */
function createConnectionMutex() {
  let busy = false;
  const waiting: Array<() => void> = [];
  const next = (): void => {
    const wake = waiting.shift();
    if (wake === undefined) busy = false;
    else wake();
  };
  const runTurn = <T>(fn: () => Promise<T>): Promise<T> => {
    let p: Promise<T>;
    try {
      p = fn();
    } catch (err) {
      p = Promise.reject(err);
    }
    return p.finally(next);
  };
  return {
    run<T>(fn: () => Promise<T>): Promise<T> {
      if (!busy) {
        busy = true;
        return runTurn(fn);
      }
      return new Promise<void>((resolve) => waiting.push(resolve)).then(() => runTurn(fn));
    },
  };
}

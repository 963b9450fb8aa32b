import { closeSync, fsync, openSync } from 'node:fs';
import type { Clock } from '../domain/clock.ts';
import { ErrorCode, HookrelayError } from '../domain/errors.ts';
import type { Logger } from '../log.ts';
import { startBackgroundCheckpoints } from './checkpointer.ts';
import { openDatabase, type Db, type OpenDatabaseOptions } from './db.ts';
import { createDeliveriesRepo } from './deliveries-repo.ts';
import { createFeedRepo } from './feed-repo.ts';
import { createHeapTrimmer } from './heap-trim.ts';
import { createOrgsRepo } from './orgs-repo.ts';
import type { Store, TransactionOptions, Tx } from './repos.ts';
import { createRetentionRepo } from './retention-repo.ts';
import { createRolesRepo } from './roles-repo.ts';
import { StorageFault, storageFaultOf } from './storage-faults.ts';
import { asyncRepo } from './sync-repo.ts';
import { createUsersRepo } from './users-repo.ts';
import { createWebhooksRepo } from './webhooks-repo.ts';

export type { Store, Tx } from './repos.ts';

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
export function openStore(path: string, clock: Clock, options: OpenDatabaseOptions = {}): SqliteStore {
  let opened: ReturnType<typeof openDatabase> | null = null;
  try {
    opened = openDatabase(path, options);
    return storeOver(opened.db, opened.migrated, clock, options.lockGapMs ?? 0, options.backgroundWalSync === true);
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

function storeOver(db: Db, migrated: { from: number; to: number }, clock: Clock, lockGapMs: number, backgroundWalSync: boolean): SqliteStore {
  const walSync = backgroundWalSync ? openWalSync(db) : null;
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
  // Prepared once: db.pragma() prepares its statement on every call, which cost a claim-only
  // transaction (two switches) about 50 µs, 6 % of the daemon's CPU at 100 events/s (measured).
  const synchronous = { normal: db.prepare('PRAGMA synchronous = NORMAL'), full: db.prepare('PRAGMA synchronous = FULL') };
  const rollback = db.prepare('ROLLBACK');
  const turns = createTurns();
  const trimmer = createHeapTrimmer(db);

  /**
   * Runs `fn` between BEGIN and COMMIT, one transaction at a time: the connection has one
   * transaction, and a second one begun while the first awaits would run inside it. BEGIN runs
   * synchronously when it is this call's turn, so a lock error (busy_timeout 0 in the daemon)
   * surfaces before anything ran, and `fn` starts at once when no other transaction is open.
   */
  const run = <T>(write: boolean, durable: boolean, fn: (tx: Tx) => Promise<T>): Promise<T> => {
    const committed = turns.take(() => {
      if (write && lockGapMs > 0) gapBeforeWrite();
      // Without the WAL synced in the background, a transaction that need not wait for the disk
      // is committed at NORMAL: the WAL is written, not synced, and the next durable commit (or
      // checkpoint) syncs it.
      const switched = !durable && walSync === null;
      if (switched) synchronous.normal.run();
      const done = (): void => {
        if (switched) synchronous.full.run();
        if (write && lockGapMs > 0) afterWrite();
      };
      try {
        (write ? begin.immediate : begin.deferred).run();
      } catch (err) {
        done();
        return Promise.reject(err);
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
    // The connection is free once COMMIT has run; the caller of a durable write hears of it once
    // the WAL holding it is on the disk.
    if (walSync === null || !write || !durable) return committed;
    return committed.then((value) => walSync.sync().then(() => value));
  };

  return {
    backend: 'sqlite',
    db,
    clock,
    migrated,
    transaction: <T>(fn: (tx: Tx) => Promise<T>, options: TransactionOptions = {}): Promise<T> => run(true, options.durable !== false, fn),
    read: <T>(fn: (tx: Tx) => Promise<T>): Promise<T> => run(false, true, fn),
    ping: () =>
      turns.take(() => {
        select1.get();
        return Promise.resolve();
      }),
    startCheckpoints: (log: Logger, options: { whileBusy: boolean }) => startBackgroundCheckpoints(db, log, options),
    trimHeap: () => trimmer.trim(),
    get canTrimHeap() {
      return trimmer.available;
    },
    close: async () => {
      await walSync?.close();
      if (db.open) db.close();
    },
  };
}

/** The WAL synced off the event loop (see OpenDatabaseOptions.backgroundWalSync). */
interface WalSync {
  /** Resolves once everything written to the WAL before the call is on the disk. */
  sync(): Promise<void>;
  /** Waits for the sync under way, then closes the descriptor. */
  close(): Promise<void>;
}

/**
 * Puts the connection at synchronous=NORMAL (a commit writes the WAL and does not sync it) and
 * syncs the WAL from libuv's thread pool instead, through a descriptor of its own (fsync flushes
 * a file whichever descriptor wrote it). Syncs are grouped: one at a time, and every commit that
 * ended while one was under way is covered by the next, so many commits share an fsync and the
 * event loop never waits for the disk (docs/storage.md, "Durable commits off the event loop").
 * The WAL is appended to in commit order and read back at recovery only up to its first frame
 * that was not written whole, so a commit on the disk has every earlier one there too.
 *
 * A failed fsync is fatal, as in PostgreSQL: after one, Linux may have dropped the pages it could
 * not write, and a later fsync would succeed without them. The error is thrown out of the event
 * loop (the daemon logs it at fatal level and exits; systemd restarts it, and SQLite recovers from
 * what is on the disk). Null (commits stay synchronous=FULL) when the WAL file cannot be opened.
 */
function openWalSync(db: Db): WalSync | null {
  let fd: number;
  try {
    fd = openSync(`${db.name}-wal`, 'r');
  } catch {
    return null;
  }
  db.pragma('synchronous = NORMAL');
  let running: Promise<void> | null = null;
  let queued: { promise: Promise<void>; resolve: () => void } | null = null;
  const fsyncOnce = (): Promise<void> =>
    new Promise<void>((resolve) => {
      fsync(fd, (err) => {
        if (err) {
          const fatal = new Error(`fsync of the SQLite WAL ${db.name}-wal failed (${err.code ?? err.message}): what was committed may not be on the disk; exiting so that the database is recovered from what is`, { cause: err });
          setImmediate(() => {
            throw fatal;
          });
          return;
        }
        resolve();
      });
    });
  const start = (): Promise<void> => {
    const p = fsyncOnce().then(() => {
      running = null;
      const next = queued;
      queued = null;
      if (next !== null) {
        running = start();
        void running.then(next.resolve);
      }
    });
    return p;
  };
  return {
    sync(): Promise<void> {
      if (running === null) {
        running = start();
        return running;
      }
      if (queued === null) {
        let resolve!: () => void;
        const promise = new Promise<void>((r) => (resolve = r));
        queued = { promise, resolve };
      }
      return queued.promise;
    },
    async close(): Promise<void> {
      while (running !== null) await running;
      closeSync(fd);
    },
  };
}

/**
 * Turns on the one connection, first come first served: `take(fn)` runs `fn` at once when no
 * turn is under way (in the caller's tick), else once the turns before it have settled.
 */
function createTurns() {
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
    take<T>(fn: () => Promise<T>): Promise<T> {
      if (!busy) {
        busy = true;
        return runTurn(fn);
      }
      return new Promise<void>((resolve) => waiting.push(resolve)).then(() => runTurn(fn));
    },
  };
}

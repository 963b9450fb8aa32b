import type { Statement } from 'better-sqlite3';
import type { Clock } from '../../domain/clock.ts';
import { ErrorCode, HookrelayError } from '../../domain/errors.ts';
import type { Logger } from '../../log.ts';
import { startBackgroundCheckpoints } from './checkpointer.ts';
import { openDatabase, type Db, type Migrated, type OpenDatabaseOptions } from './connection.ts';
import { createSqliteApiKeysRepo } from './api-keys-repo.ts';
import { createSqliteAuditRepo } from './audit-repo.ts';
import { createSqliteDeliveriesRepo } from './deliveries-repo.ts';
import { createSqliteFeedRepo } from './feed-repo.ts';
import { createHeapTrimmer } from './heap-trim.ts';
import { LockedAtBegin, retryWhileLocked } from './lock-wait.ts';
import { createSqliteOrgsRepo } from './orgs-repo.ts';
import type { LockWait, Store, TransactionOptions, Tx, Upkeep, WorkSharing } from '../repos.ts';
import { createSqliteRetentionRepo } from './retention-repo.ts';
import { createSqliteRolesRepo } from './roles-repo.ts';
import { isLockWait, StorageFault, storageFaultOf } from '../storage-faults.ts';
import { asyncRepo } from './sync-repo.ts';
import { createSqliteUsersRepo } from './users-repo.ts';
import { createSqliteWebhooksRepo } from './webhooks-repo.ts';

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
/** One daemon per database file (the state directory's lock): nobody to share work with. */
const NO_SHARING: WorkSharing = Object.freeze({ close: () => Promise.resolve() });

function storeOver(db: Db, migrated: Migrated, clock: Clock, lockGapMs: number, defaultLockWait: LockWait | null): SqliteStore {
  const transactions = new SqliteTransactions(db, sqliteTx(db), lockGapMs > 0 ? new LockGap(db, lockGapMs) : null);
  const trimmer = createHeapTrimmer(db);
  return {
    backend: 'sqlite',
    shared: false,
    db,
    clock,
    migrated,
    transaction: <T>(fn: (tx: Tx) => Promise<T>, options: TransactionOptions = {}): Promise<T> => transactions.write(fn, options.durable !== false, options.lockWait ?? defaultLockWait),
    read: <T>(fn: (tx: Tx) => Promise<T>): Promise<T> => transactions.run(false, true, fn),
    ping: () => transactions.ping(),
    upkeep: (log, options) => startUpkeep(db, trimmer, log, options),
    shareWork: () => Promise.resolve(NO_SHARING),
    close: () => {
      if (db.open) db.close();
      return Promise.resolve();
    },
  };
}

/** The repositories over the connection, prepared once, behind the async boundary (see sync-repo.ts). */
function sqliteTx(db: Db): Tx {
  return {
    orgs: asyncRepo(createSqliteOrgsRepo(db)),
    roles: asyncRepo(createSqliteRolesRepo(db)),
    users: asyncRepo(createSqliteUsersRepo(db)),
    webhooks: asyncRepo(createSqliteWebhooksRepo(db)),
    feed: asyncRepo(createSqliteFeedRepo(db)),
    deliveries: asyncRepo(createSqliteDeliveriesRepo(db)),
    retention: asyncRepo(createSqliteRetentionRepo(db)),
    audit: asyncRepo(createSqliteAuditRepo(db)),
    apiKeys: asyncRepo(createSqliteApiKeysRepo(db)),
  };
}

/** Background checkpoints and heap trims share nothing but the connection: one handle for both (see Upkeep). */
async function startUpkeep(db: Db, trimmer: ReturnType<typeof createHeapTrimmer>, log: Logger, options: { whileBusy: boolean }): Promise<Upkeep> {
  const checkpoints = await startBackgroundCheckpoints(db, log, options);
  return {
    busy: () => checkpoints.busy(),
    trimHeap: () => trimmer.trim(),
    get canTrimHeap() {
      return trimmer.available;
    },
    stop: () => checkpoints.stop(),
  };
}

/**
 * The transactions of the one connection, one at a time: the connection has one transaction,
 * and a second one begun while the first awaits would run inside it.
 */
class SqliteTransactions {
  readonly #db: Db;
  readonly #tx: Tx;
  readonly #lockGap: LockGap | null;
  readonly #mutex = new ConnectionMutex();
  readonly #select1: Statement;
  readonly #begin: { readonly immediate: Statement; readonly deferred: Statement };
  readonly #commit: Statement;
  readonly #rollback: Statement;
  /**
   * Prepared once: db.pragma() prepares its statement on every call, a visible share of the
   * daemon's CPU at moderate rates (docs/benchmarks.md, "At 100 events/s: where the time goes").
   */
  readonly #synchronous: { readonly normal: Statement; readonly full: Statement };

  constructor(db: Db, tx: Tx, lockGap: LockGap | null) {
    this.#db = db;
    this.#tx = tx;
    this.#lockGap = lockGap;
    this.#select1 = db.prepare('SELECT 1');
    this.#begin = { immediate: db.prepare('BEGIN IMMEDIATE'), deferred: db.prepare('BEGIN DEFERRED') };
    this.#commit = db.prepare('COMMIT');
    this.#rollback = db.prepare('ROLLBACK');
    this.#synchronous = { normal: db.prepare('PRAGMA synchronous = NORMAL'), full: db.prepare('PRAGMA synchronous = FULL') };
  }

  /**
   * Runs `fn` between BEGIN and COMMIT once this call holds the connection. BEGIN runs
   * synchronously when it does, so a lock error (busy_timeout 0 in the daemon) surfaces before
   * anything ran, and `fn` starts at once when no other transaction is open. `waiting`: a BEGIN
   * that finds the lock taken rejects with LockedAtBegin (the caller waits for the lock, the
   * mutex given up meanwhile); otherwise with the lock error.
   */
  run<T>(write: boolean, durable: boolean, fn: (tx: Tx) => Promise<T>, waiting = false): Promise<T> {
    return this.#mutex.run(() => {
      const lockGap = write ? this.#lockGap : null;
      lockGap?.beforeWrite();
      if (!durable) this.#synchronous.normal.run();
      const done = (): void => {
        if (!durable) this.#synchronous.full.run();
        lockGap?.afterWrite();
      };
      try {
        (write ? this.#begin.immediate : this.#begin.deferred).run();
      } catch (err) {
        done();
        return Promise.reject(waiting && isLockWait(err) ? new LockedAtBegin(err) : err);
      }
      let running: Promise<T>;
      try {
        running = fn(this.#tx);
      } catch (err) {
        running = Promise.reject(err);
      }
      return running.then(
        (value) => {
          try {
            this.#commit.run();
          } catch (err) {
            this.#rollbackIfOpen();
            done();
            throw err;
          }
          done();
          return value;
        },
        (err: unknown) => {
          this.#rollbackIfOpen();
          done();
          throw err;
        },
      );
    });
  }

  /** A write transaction that waits for a lock another process holds as `wait` says, on timers (lock-wait.ts); without `wait`, it fails at once with the lock error. */
  write<T>(fn: (tx: Tx) => Promise<T>, durable: boolean, wait: LockWait | null): Promise<T> {
    if (wait === null) return this.run(true, durable, fn);
    const attempt = () => this.run(true, durable, fn, true);
    return attempt().then(undefined, (err: unknown) => (err instanceof LockedAtBegin ? retryWhileLocked(attempt, wait, err) : Promise.reject(err)));
  }

  ping(): Promise<void> {
    return this.#mutex.run(() => {
      this.#select1.get();
      return Promise.resolve();
    });
  }

  #rollbackIfOpen(): void {
    if (this.#db.inTransaction) this.#rollback.run();
  }
}

/**
 * The CLI's lock gap (see OpenDatabaseOptions.lockGapMs): after each write transaction while
 * another process writes too (PRAGMA data_version moves when another connection commits), and
 * after every LOCK_GAP_EVERY-th otherwise, so that a daemon that was idle and wants to write
 * waits for a few transactions at most, and a CLI alone loses almost nothing to the gaps.
 */
class LockGap {
  readonly #gapMs: number;
  readonly #dataVersion: Statement<[], number>;
  #seenVersion: number | undefined;
  #lastWriteEnded = -Infinity;
  #othersWroteAt = -Infinity;
  #withoutGap = 0;

  constructor(db: Db, gapMs: number) {
    this.#gapMs = gapMs;
    this.#dataVersion = db.prepare<[], number>('PRAGMA data_version').pluck();
    this.#seenVersion = this.#dataVersion.get();
  }

  /** Before a write transaction: leaves the lock free for the gap after the previous one, when due. */
  beforeWrite(): void {
    const now = performance.now();
    if (this.#dataVersion.get() !== this.#seenVersion) this.#othersWroteAt = now;
    const wait = this.#lastWriteEnded + this.#gapMs - now;
    if (wait <= 0) this.#withoutGap = 0;
    else if (now - this.#othersWroteAt < OTHERS_WRITING_MS || this.#withoutGap >= LOCK_GAP_EVERY - 1) {
      Atomics.wait(SLEEPER, 0, 0, wait);
      this.#withoutGap = 0;
    } else this.#withoutGap++;
  }

  afterWrite(): void {
    this.#lastWriteEnded = performance.now();
    this.#seenVersion = this.#dataVersion.get();
  }
}

/**
 * The one connection's mutex, first come first served: `run(fn)` runs `fn` (a transaction) at
 * once when nobody holds it (in the caller's tick), else once those before it have settled.
 */
class ConnectionMutex {
  #busy = false;
  readonly #waiting: Array<() => void> = [];
  readonly #next = (): void => {
    const wake = this.#waiting.shift();
    if (wake === undefined) this.#busy = false;
    else wake();
  };

  run<T>(fn: () => Promise<T>): Promise<T> {
    if (!this.#busy) {
      this.#busy = true;
      return this.#turn(fn);
    }
    return new Promise<void>((resolve) => this.#waiting.push(resolve)).then(() => this.#turn(fn));
  }

  #turn<T>(fn: () => Promise<T>): Promise<T> {
    let p: Promise<T>;
    try {
      p = fn();
    } catch (err) {
      p = Promise.reject(err);
    }
    return p.finally(this.#next);
  }
}

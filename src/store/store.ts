import type { Clock } from '../domain/clock.ts';
import { ErrorCode, HookrelayError } from '../domain/errors.ts';
import { openDatabase, type Db, type OpenDatabaseOptions } from './db.ts';
import { createDeliveriesRepo, type DeliveriesRepo } from './deliveries-repo.ts';
import { createFeedRepo, type FeedRepo } from './feed-repo.ts';
import { createOrgsRepo, type OrgsRepo } from './orgs-repo.ts';
import { createRetentionRepo, type RetentionRepo } from './retention-repo.ts';
import { StorageFault, storageFaultOf } from './storage-faults.ts';
import { createRolesRepo, type RolesRepo } from './roles-repo.ts';
import { createUsersRepo, type UsersRepo } from './users-repo.ts';
import { createWebhooksRepo, type WebhooksRepo } from './webhooks-repo.ts';

/** The database and its repositories: the only place that holds SQL. */
export interface Store {
  readonly db: Db;
  readonly clock: Clock;
  /** Schema versions before and after the migrations applied when this store was opened. */
  readonly migrated: { readonly from: number; readonly to: number };
  readonly orgs: OrgsRepo;
  readonly roles: RolesRepo;
  readonly users: UsersRepo;
  readonly webhooks: WebhooksRepo;
  readonly feed: FeedRepo;
  readonly deliveries: DeliveriesRepo;
  readonly retention: RetentionRepo;
  /**
   * Runs `fn` in one IMMEDIATE transaction (takes the write lock up front, so read-then-write is
   * safe across processes). With `durable: false` the commit does not wait for the disk
   * (synchronous=NORMAL for this one transaction): a power cut may undo it, never corrupt the
   * file, and the next durable commit makes it durable too. Only for writes that are as good
   * redone as lost (retention).
   */
  transaction<T>(fn: () => T, options?: { durable?: boolean }): T;
  /** Runs `fn` in one read transaction: a consistent snapshot that never blocks the writer (WAL). */
  read<T>(fn: () => T): T;
  /** Throws if the database cannot answer a trivial query (readiness probe). */
  ping(): void;
  close(): void;
}

/**
 * Opens the database (see openDatabase) and prepares the repositories. A file that is not a
 * database or whose pages are damaged fails with `database_damaged`: restarting cannot help.
 */
export function openStore(path: string, clock: Clock, options: OpenDatabaseOptions = {}): Store {
  let opened: ReturnType<typeof openDatabase> | null = null;
  try {
    opened = openDatabase(path, options);
    return storeOver(opened.db, opened.migrated, clock, options.lockGapMs ?? 0);
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

function storeOver(db: Db, migrated: { from: number; to: number }, clock: Clock, lockGapMs: number): Store {
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
  /** Runs the write transaction `run`, first leaving the lock free for `lockGapMs` after the previous one when due. */
  const write = <T>(run: () => T): T => {
    if (lockGapMs <= 0) return run();
    const now = performance.now();
    const version = dataVersion.get();
    if (version !== seenVersion) othersWroteAt = now;
    const wait = lastWriteEnded + lockGapMs - now;
    if (wait <= 0) withoutGap = 0;
    else if (now - othersWroteAt < OTHERS_WRITING_MS || withoutGap >= LOCK_GAP_EVERY - 1) {
      Atomics.wait(SLEEPER, 0, 0, wait);
      withoutGap = 0;
    } else withoutGap++;
    try {
      return run();
    } finally {
      lastWriteEnded = performance.now();
      seenVersion = dataVersion.get();
    }
  };

  return {
    db,
    clock,
    migrated,
    orgs: createOrgsRepo(db),
    roles: createRolesRepo(db),
    users: createUsersRepo(db),
    webhooks: createWebhooksRepo(db),
    feed: createFeedRepo(db),
    deliveries: createDeliveriesRepo(db),
    retention: createRetentionRepo(db),
    transaction: <T>(fn: () => T, options: { durable?: boolean } = {}): T =>
      write(() => {
        if (options.durable !== false) return db.transaction(fn).immediate();
        db.pragma('synchronous = NORMAL');
        try {
          return db.transaction(fn).immediate();
        } finally {
          db.pragma('synchronous = FULL');
        }
      }),
    read: <T>(fn: () => T): T => db.transaction(fn).deferred(),
    ping: () => {
      select1.get();
    },
    close: () => {
      if (db.open) db.close();
    },
  };
}

import Database from 'better-sqlite3';
import { closeSync, openSync } from 'node:fs';
import { dirname } from 'node:path';
import { ErrorCode, HookrelayError } from '../../domain/errors.ts';
import { emailKey } from '../../domain/validation.ts';
import { databaseOpenError, ensureDirectory, pathError } from '../directories.ts';
import { MIGRATIONS } from './migrations.ts';
import type { LockWait } from '../repos.ts';
import { DEFAULT_PRE_UPGRADE_BACKUPS, isUpgrade, recordedVersion, recordVersion, tooNewError, writePreUpgradeBackup } from './upgrade-backup.ts';
import { VERSION } from '../../version.ts';

export type Db = Database.Database;

/** WAL pages after which a connection checkpoints on its own (unless background checkpoints raise it: see checkpointer.ts). */
/**
 * Page cache while large batches are ingested (KiB): as fast as a larger cache, and less held
 * during a burst (docs/benchmarks.md, "Memory").
 */
export const BURST_CACHE_KIB = 16 * 1024;
/**
 * Page cache otherwise (KiB): delivery reads the heads of its indexes and the rows it sends,
 * which fit in far less.
 */
export const QUIET_CACHE_KIB = 8 * 1024;

export const AUTOCHECKPOINT_PAGES = 4096;

export interface OpenDatabaseOptions {
  /** How long a statement waits for a lock another connection holds (SQLite's busy timeout); 5 s by default. */
  readonly busyTimeoutMs?: number;
  /**
   * False for the daemon: once migrated (which waits up to `busyTimeoutMs`, as nothing else can
   * run before it), a statement that finds a lock taken fails at once with SQLITE_BUSY instead
   * of sleeping on the event loop; the store waits for it on timers instead (`lockWait`, lock-wait.ts).
   */
  readonly waitForLocks?: boolean;
  /**
   * For the CLI: after each of its write transactions, the lock is left free for at least this
   * long (ms) before the next one, so that the daemon, which polls for it every few ms instead
   * of queueing in SQLite (lock-wait.ts), gets its turn during a long ingest or recovery.
   */
  readonly lockGapMs?: number;
  /**
   * With `waitForLocks: false`: how a write transaction that does not say otherwise
   * (TransactionOptions.lockWait) waits for a lock another process holds, on timers
   * (lock-wait.ts). Without it such a write fails at once with the lock error.
   */
  readonly lockWait?: LockWait;
  /**
   * Copies of the database taken before an upgrade migrates it (or a newer hookrelay first opens
   * it), kept in <database directory>/backups: the last this many (upgrade-backup.ts). 0 takes
   * none. Default 3.
   */
  readonly preUpgradeBackups?: number;
}

/** What opening did to the schema: versions before and after, and the pre-upgrade copy taken first (null: none). */
export interface Migrated {
  readonly from: number;
  readonly to: number;
  readonly backup: string | null;
}

/**
 * The Node-API version better-sqlite3 13 is built for. A Node.js without it (Node 20, Node 22
 * before 22.14) does not throw when the driver loads: the process dies with SIGSEGV.
 */
const DRIVER_NODE_API = 10;

/**
 * Refuses, with one line that says what to do, to load the SQLite driver on a Node.js that
 * would crash on it (see DRIVER_NODE_API). `versions` is `process.versions` but for tests.
 */
export function assertSupportedNode(versions: { readonly node: string; readonly napi?: string } = process.versions): void {
  if (Number(versions.napi ?? 0) >= DRIVER_NODE_API) return;
  throw new HookrelayError(
    ErrorCode.config,
    `Node.js ${versions.node} is too old: hookrelay needs Node.js 22.14 or newer (its SQLite driver needs Node-API ${DRIVER_NODE_API}); install a supported Node.js (README, Requirements)`,
  );
}

/** The schema version this code writes and understands. */
export const SCHEMA_VERSION = MIGRATIONS.length;

/**
 * Opens (creating if needed) the SQLite database with the pragmas hookrelay relies on:
 * WAL, synchronous=FULL (better-sqlite3 would leave WAL at NORMAL), foreign keys, a busy
 * timeout so the CLI and the daemon can share the file; then applies pending migrations.
 */
export function openDatabase(path: string, options: OpenDatabaseOptions = {}): { db: Db; migrated: Migrated } {
  assertSupportedNode();
  ensureDirectory(dirname(path), 0o700, 'the database directory');
  // The database holds signing secrets: create it private (SQLite gives -wal/-shm the same mode).
  try {
    closeSync(openSync(path, 'a', 0o600));
  } catch (err) {
    throw pathError(err, 'the database', path);
  }
  let db: Db;
  try {
    db = new Database(path);
  } catch (err) {
    throw databaseOpenError(err, path);
  }
  try {
    db.pragma(`busy_timeout = ${Math.trunc(options.busyTimeoutMs ?? 5000)}`);
    // Larger pages make the random index inserts of ingestion markedly cheaper (docs/benchmarks.md,
    // "Figures behind the code's choices"); it only takes effect when the database is created.
    db.pragma('page_size = 16384');
    db.pragma('journal_mode = WAL');
    db.pragma('synchronous = FULL');
    db.pragma('foreign_keys = ON');
    // 16 MiB of page cache (the default is 2 MB) keeps the hot index pages in memory as the
    // database grows. The daemon keeps it only while it ingests large batches (see
    // startBackgroundCheckpoints), 8 MiB otherwise.
    db.pragma(`cache_size = -${BURST_CACHE_KIB}`);
    // Checkpoint every 4096 pages (64 MiB of WAL) instead of every 1000: pages that ingestion
    // rewrites often are copied into the database once per checkpoint, not once per batch
    // (a few % of ingest rate: docs/benchmarks.md, "Figures behind the code's choices"); the WAL
    // file is trimmed back to 64 MiB afterwards.
    db.pragma(`wal_autocheckpoint = ${AUTOCHECKPOINT_PAGES}`);
    db.pragma(`journal_size_limit = ${64 * 1024 * 1024}`);
    const migrated = migrate(db, { preUpgradeBackups: options.preUpgradeBackups ?? DEFAULT_PRE_UPGRADE_BACKUPS });
    if (options.waitForLocks === false) db.pragma('busy_timeout = 0');
    return { db, migrated };
  } catch (err) {
    db.close();
    throw err instanceof HookrelayError ? err : databaseOpenError(err, path);
  }
}

export function schemaVersion(db: Db): number {
  return db.pragma('user_version', { simple: true }) as number;
}

/**
 * Applies every pending migration in one IMMEDIATE transaction, so a crash leaves the
 * database at the old version and two processes never migrate at once. Foreign keys are off
 * while migrations run (SQLite's procedure for rebuilding a table that others reference) and
 * checked before the transaction commits: a migration that would break one rolls back.
 * Returns the versions before and after.
 */
export function migrate(db: Db, options: { readonly preUpgradeBackups?: number; readonly version?: string } = {}): Migrated {
  const version = options.version ?? VERSION;
  const keep = options.preUpgradeBackups ?? 0;
  // Migration 7 recomputes the users' e-mail keys with the function the code uses.
  db.function('hookrelay_email_key', { deterministic: true }, (email: unknown) => emailKey(String(email)));
  const before = schemaVersion(db);
  if (before > SCHEMA_VERSION) throw tooNewError(db, before, SCHEMA_VERSION, version);
  // Outside the transaction (VACUUM INTO cannot run in one), before anything is changed.
  const recorded = recordedVersion(db, before);
  const backup = keep > 0 && isUpgrade(before, SCHEMA_VERSION, recorded, version) ? writePreUpgradeBackup(db, before, recorded, keep) : null;
  const run = db.transaction(() => {
    const from = schemaVersion(db);
    if (from > SCHEMA_VERSION) throw tooNewError(db, from, SCHEMA_VERSION, version);
    for (let v = from; v < SCHEMA_VERSION; v++) db.exec(MIGRATIONS[v]!);
    if (from !== SCHEMA_VERSION) {
      const broken = db.pragma('foreign_key_check') as unknown[];
      if (broken.length > 0) throw new Error(`migrating ${db.name} from ${from} to ${SCHEMA_VERSION} would leave ${broken.length} broken foreign key(s); nothing was changed`);
      db.pragma(`user_version = ${SCHEMA_VERSION}`);
    }
    recordVersion(db, version);
    return { from, to: SCHEMA_VERSION, backup };
  });
  // The pragma is a no-op inside a transaction, so it is switched around it.
  const foreignKeys = db.pragma('foreign_keys', { simple: true }) === 1;
  db.pragma('foreign_keys = OFF');
  try {
    return run.immediate();
  } finally {
    if (foreignKeys) db.pragma('foreign_keys = ON');
  }
}

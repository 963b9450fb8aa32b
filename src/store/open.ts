/**
 * Opening the store the configuration names: PostgreSQL when database.url is set (pg/store.ts),
 * the SQLite file database.path otherwise (sqlite/store.ts). The one place that chooses: the
 * daemon (relay.ts) and the CLI (cli/shared.ts) get a Store and never look at the backend.
 *
 * - A one-shot command opens once (openStoreFor): what fails is its error.
 * - The daemon (openStoreWhenReachable) waits for a database it cannot reach yet, a full disk
 *   (SQLite) or a server that is not up (PostgreSQL), in one loop: logged once, tried again
 *   after a back-off until it opens or the daemon stops. Its store waits for locks another
 *   process holds on timers, up to database.busyTimeout (sqlite/lock-wait.ts).
 */
import { dirname } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Config } from '../config/load.ts';
import type { Clock } from '../domain/clock.ts';
import type { Logger } from '../log.ts';
import { availableBytes } from './directories.ts';
import { isTransientPgError } from './pg/transient-errors.ts';
import { openPgStore } from './pg/store.ts';
import { loggableDatabaseUrl } from './pg/pool.ts';
import type { Store } from './repos.ts';
import { storageRetryDelayMs } from './storage-retry.ts';
import { StorageFault, storageFaultOf } from './storage-faults.ts';
import { acquireDaemonLock, type DaemonLock } from './sqlite/daemon-lock.ts';
import { CLI_LOCK_GAP_MS } from './sqlite/lock-wait.ts';
import { openSqliteStore } from './sqlite/store.ts';
import { MIGRATIONS } from './sqlite/migrations.ts';
import { PG_SCHEMA_VERSION } from './pg/migrations.ts';

/** The schema version each backend's migrations bring a database to (`hookrelay --version`). */
export const SCHEMA_VERSIONS = { sqlite: MIGRATIONS.length, postgres: PG_SCHEMA_VERSION } as const;

export type { DaemonLock } from './sqlite/daemon-lock.ts';

/** The database, as it may be logged or printed: the SQLite file's path, or the URL without its password. */
export function databaseName(config: Config): string {
  return config.database.url === null ? config.database.path : loggableDatabaseUrl(config.database.url);
}

/** The file that holds the database (SQLite), or null when a server holds it (PostgreSQL): nothing to create by accident there. */
export function databaseFile(config: Config): string | null {
  return config.database.url === null ? config.database.path : null;
}

/**
 * One daemon per state directory (sqlite/daemon-lock.ts): a second `hookrelay serve` on it
 * would read the same feed. Whatever the backend: the feed's state lives there.
 */
export function lockStateDirectory(config: Config): DaemonLock {
  return acquireDaemonLock(config.stateDir);
}

/** Connections a one-shot command opens at most on PostgreSQL: it runs one transaction at a time. */
const CLI_POOL_SIZE = 2;

/**
 * Opens (and migrates) the configured database for a one-shot command. On SQLite its
 * connection waits for locks in SQLite (database.busyTimeout), and leaves the lock free for
 * CLI_LOCK_GAP_MS between two of its write transactions, for a daemon that may be waiting for it.
 */
export async function openStoreFor(config: Config, clock: Clock, o: { log?: Logger } = {}): Promise<Store> {
  if (config.database.url === null) return openSqliteStore(config.database.path, clock, { busyTimeoutMs: config.database.busyTimeout, preUpgradeBackups: config.database.preUpgradeBackups, lockGapMs: CLI_LOCK_GAP_MS });
  return openPgStore(config.database.url, clock, { instance: config.instance.name, poolSize: CLI_POOL_SIZE, log: o.log });
}

/** Less room than this (bytes) on the database's file system counts as a full disk when the database cannot be opened. */
const FULL_DISK_BYTES = 1 << 20;

export interface DaemonOpenOptions {
  readonly log: Logger;
  /**
   * Aborted when the daemon stops: ends the wait to open (then null), and any write's wait for a
   * lock another process holds (`database_busy` at once).
   */
  readonly signal: AbortSignal;
  /** Replaces openSqliteStore (tests: a fault-injected store, SQLITE_FULL where no file system can be mounted). */
  readonly openSqliteStore?: typeof openSqliteStore;
}

/** What the wait for the database says, per backend: which failures waiting can mend, and the log lines. */
interface Opener {
  open(): Store | Promise<Store>;
  /** Whether `err` goes away by itself (then it is waited for); `undefined` fields in the log line are left out. */
  transient(err: unknown): { fields: Record<string, unknown> } | null;
  readonly waiting: string;
  readonly opened: string;
  readonly where: Record<string, unknown>;
}

function daemonOpener(config: Config, clock: Clock, o: DaemonOpenOptions): Opener {
  const { url, path, busyTimeout: busyTimeoutMs } = config.database;
  if (url !== null) {
    return {
      open: () => openPgStore(url, clock, { instance: config.instance.name, poolSize: config.database.poolSize, log: o.log }),
      transient: (err) => (isTransientPgError(err) ? { fields: {} } : null),
      waiting: 'cannot reach the PostgreSQL database; trying again every few seconds (nothing is read or sent meanwhile)',
      opened: 'database reachable again: opened',
      where: { database: loggableDatabaseUrl(url), instance: config.instance.name },
    };
  }
  return {
    // The daemon never sleeps on a lock another process holds: the store waits on timers (sqlite/lock-wait.ts).
    open: () => (o.openSqliteStore ?? openSqliteStore)(path, clock, { busyTimeoutMs, preUpgradeBackups: config.database.preUpgradeBackups, waitForLocks: false, lockWait: { maxWaitMs: busyTimeoutMs, signal: o.signal } }),
    // On a full disk SQLite cannot even size its -shm file: the daemon does not exit (under
    // systemd that ends in its start limit while the disk stays full), it waits for space.
    transient: (err) => {
      const fault = storageFaultOf(err);
      const left = availableBytes(dirname(path));
      const full = fault === StorageFault.diskFull || (fault === StorageFault.ioError && left !== null && left < FULL_DISK_BYTES);
      return full ? { fields: { availableBytes: left } } : null;
    },
    waiting: 'cannot open the database: the disk holding it is full; trying again every few seconds until space is freed (nothing is read or sent meanwhile)',
    opened: 'database opened: the disk has room again',
    where: { database: path },
  };
}

/**
 * Opens (and migrates) the configured database for the daemon, waiting while it cannot be
 * reached (see the module comment): the first failure is logged, then it is tried again after
 * storageRetryDelayMs (up to 10 s) until it opens, or `signal` aborts (then null). What waiting
 * cannot mend (a refused password, a missing database, a schema newer than this code, a
 * damaged file) is thrown.
 */
export async function openStoreWhenReachable(config: Config, clock: Clock, o: DaemonOpenOptions): Promise<Store | null> {
  const opener = daemonOpener(config, clock, o);
  for (let failures = 0; ; ) {
    try {
      const store = await opener.open();
      if (failures > 0) o.log.info({ ...opener.where, tries: failures + 1 }, opener.opened);
      const { from, to, backup } = store.migrated;
      if (backup) o.log.warn({ ...opener.where, backup, from, to }, `upgrade: copied the database to ${backup} before opening it with this version (restore it to go back: docs/operations.md, "Roll back")`);
      o.log.info({ ...opener.where, schema: to, ...(from !== to ? { migratedFrom: from } : {}) }, 'database open');
      return store;
    } catch (err) {
      const transient = opener.transient(err);
      if (transient === null || o.signal.aborted) throw err;
      if (failures++ === 0) o.log.error({ err, ...opener.where, ...transient.fields }, opener.waiting);
    }
    await sleep(storageRetryDelayMs(failures), undefined, { signal: o.signal }).catch(() => {});
    if (o.signal.aborted) return null;
  }
}

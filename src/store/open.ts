/**
 * The store the configuration names: PostgreSQL when database.url is set (pg/store.ts), the
 * SQLite file database.path otherwise (store.ts). The one place that chooses, for the CLI; the
 * daemon (relay.ts) opens each with its own waiting (a full disk, a server not up yet).
 */
import type { Config } from '../config/load.ts';
import type { Clock } from '../domain/clock.ts';
import type { Logger } from '../log.ts';
import { openPgStore } from './pg/store.ts';
import { loggableDatabaseUrl } from './pg/pool.ts';
import type { Store } from './repos.ts';
import { openSqliteStore } from './sqlite/store.ts';
import type { OpenDatabaseOptions } from './sqlite/db.ts';

/** The database, as it may be logged or printed: the SQLite file's path, or the URL without its password. */
export function databaseName(config: Config): string {
  return config.database.url === null ? config.database.path : loggableDatabaseUrl(config.database.url);
}

/** Connections a one-shot command opens at most on PostgreSQL: it runs one transaction at a time. */
const CLI_POOL_SIZE = 2;

/** Opens (and migrates) the configured database for a one-shot command. */
export async function openStoreFor(config: Config, clock: Clock, o: { sqlite: OpenDatabaseOptions; log?: Logger }): Promise<Store> {
  if (config.database.url === null) return openSqliteStore(config.database.path, clock, o.sqlite);
  return openPgStore(config.database.url, clock, { instance: config.instance.name, poolSize: CLI_POOL_SIZE, log: o.log });
}

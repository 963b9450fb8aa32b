/**
 * `hookrelay db copy --from FILE.db --to postgres://...`: moves a SQLite install to PostgreSQL.
 *
 * - **The source** must exist (a missing file is refused rather than created empty). It is
 *   opened as the daemon opens it, which brings it to the latest SQLite schema, then set
 *   query-only, and everything is read inside ONE read transaction: a consistent snapshot,
 *   even if a daemon goes on writing to the file (the docs say to stop it first all the same,
 *   or what it writes after the snapshot stays behind). Rows are read with `.iterate()` and sent
 *   in chunks (CHUNK_ROWS rows or CHUNK_CHARS characters, whichever comes first), so a database
 *   of millions of events is never in memory at once. Integers are read as BigInt (exact
 *   64-bit values, which PostgreSQL's bigint holds as SQLite's INTEGER does).
 * - **The target** is migrated (migratePostgres), then must be empty: no organizations, users,
 *   webhooks, custom roles, events, deliveries, attempts, feed rows or legacy ids (the built-in
 *   roles its migration made are expected). Everything is written in ONE transaction, with the
 *   tables locked against other writers (EXCLUSIVE: readers go on): a failure leaves the target
 *   as it was, and an instance started against it meanwhile cannot slip rows in between.
 * - **What changes on the way** (see pg/migrations.ts for why the schemas differ):
 *   - feed_sources, feed_positions and feed_stats get `instance` (the instance that will tail
 *     those files; SQLite's 'api' row becomes that instance's). Every id is kept: users,
 *     feed sources, event seqs, deliveries, attempts, quarantined lines.
 *   - Flags 0/1 become booleans; a quarantined line's raw bytes become bytea.
 *   - Leases are cleared (lease_expires_at NULL, leased_by NULL): nobody holds them after the
 *     move. A leased delivery was due when it was leased (a lease never moves next_attempt_at),
 *     so it is due again: a fresh one (never attempted) goes back to the queue in its order,
 *     a retried one by its due time.
 *   - Only custom roles are copied: a built-in role's row in PostgreSQL stays (its migration
 *     made it, with the same name); every built-in SQLite names must exist there.
 *   - Text holding U+0000, which PostgreSQL text cannot, gets U+FFFD instead (withoutNul);
 *     the values changed are counted and reported.
 * - **Afterwards** each identity column is moved past the largest id copied (setval), so the
 *   next row PostgreSQL numbers does not collide with a copied one; then each table's rows in
 *   PostgreSQL are counted against SQLite's snapshot, and a mismatch fails the copy (and rolls
 *   it back), naming the table and both counts.
 */
import { statSync } from 'node:fs';
import type { Pool, PoolClient } from 'pg';
import { systemClock } from '../domain/clock.ts';
import { ErrorCode, HookrelayError } from '../domain/errors.ts';
import type { Logger } from '../log.ts';
import type { Db } from './sqlite/connection.ts';
import { inPgTransaction } from './pg/connection.ts';
import { BACKFILL_DELIVERY_ORDER, migratePostgres } from './pg/migrations.ts';
import { createPgPool, loggableDatabaseUrl } from './pg/pool.ts';
import { withoutNul } from './pg/text.ts';
import { openSqliteStore, type SqliteStore } from './sqlite/store.ts';
import { insertSql, quoted, TABLES, WHAT_IS_THERE, type ColumnType, type TableSpec } from './copy-tables.ts';

export interface CopyOptions {
  /** The SQLite database file to copy (it must exist). */
  readonly from: string;
  /** The PostgreSQL database to copy into: a postgres:// URL (see pg/pool.ts). Must hold no data. */
  readonly to: string;
  /** The instance (its `instance.name`) that will own the copied feed sources, positions and statistics. */
  readonly instance: string;
  /** Receives progress (info) and the migrations applied. */
  readonly log?: Logger | undefined;
  /** How long SQLite waits for a lock another process holds (while migrating the file); 5 s by default. */
  readonly busyTimeoutMs?: number | undefined;
  /** Rows per insert statement at most; CHUNK_ROWS by default (smaller in tests, to go through several chunks). */
  readonly chunkRows?: number | undefined;
}

export interface CopiedTable {
  readonly table: string;
  /** Rows copied (for roles: the custom ones). */
  readonly rows: number;
  /** Text values of this table in which U+0000 became U+FFFD. */
  readonly replacedNul: number;
}

export interface CopyResult {
  /** Each table, in the order copied. */
  readonly tables: ReadonlyArray<CopiedTable>;
  /** Text values in which U+0000 became U+FFFD, all tables together. */
  readonly replacedNul: number;
  /** Deliveries that were leased in SQLite and are due again in PostgreSQL. */
  readonly leasesCleared: number;
  /** The instance that owns the copied feed sources, positions and statistics. */
  readonly instance: string;
  /** SQLite schema versions before and after opening the file (it is migrated to the latest). */
  readonly sqliteSchema: { readonly from: number; readonly to: number };
  /** PostgreSQL schema versions before and after migrating the target. */
  readonly postgresSchema: { readonly from: number; readonly to: number };
  /** Each identity column's next value after the copy (for tables that had rows). */
  readonly nextIds: ReadonlyArray<{ readonly table: string; readonly column: string; readonly next: number }>;
  readonly durationMs: number;
}

/** Rows per insert statement at most. */
export const CHUNK_ROWS = 5000;
/** Characters (text, and bytes of bytea) per insert statement, roughly, beyond which a chunk is sent early (large payloads or response bodies). */
export const CHUNK_CHARS = 8 * 1024 * 1024;
/** Rows between two progress lines of one table. */
const PROGRESS_EVERY = 100_000;

/**
 * Copies the SQLite database `from` into the empty PostgreSQL database `to`, for `instance`
 * (see the top of this file). Throws `invalid_config` when the file does not exist, the
 * instance name is empty or the target holds data; the target is then unchanged, as it is
 * after any failure.
 */
export async function copySqliteToPostgres(o: CopyOptions): Promise<CopyResult> {
  const started = performance.now();
  const log = o.log;
  if (o.instance === '') throw new HookrelayError(ErrorCode.config, 'the instance name is empty: name the instance that will own the copied feed positions and statistics (its instance.name)');
  assertSourceExists(o.from);
  const chunkRows = Math.max(1, Math.trunc(o.chunkRows ?? CHUNK_ROWS));
  const shown = loggableDatabaseUrl(o.to);

  const pool = createPgPool(o.to, { max: 1, ...(log === undefined ? {} : { log }) });
  let store: SqliteStore | null = null;
  try {
    const postgresSchema = await migratePostgres(pool, log);
    // Refused before the SQLite file is even opened (and migrated); checked again under the lock.
    await assertEmpty(pool, shown);

    const openOptions = o.busyTimeoutMs === undefined ? {} : { busyTimeoutMs: o.busyTimeoutMs };
    store = openSqliteStore(o.from, systemClock, openOptions);
    const db = store.db;
    const sqliteSchema = { from: store.migrated.from, to: store.migrated.to };
    db.pragma('query_only = ON');
    log?.info({ from: o.from, to: shown, instance: o.instance, sqliteSchema, postgresSchema }, 'db copy: copying the SQLite database into PostgreSQL');

    // The snapshot: it begins with the first read (the counts) and ends after the last row sent.
    db.prepare('BEGIN DEFERRED').run();
    try {
      for (const spec of TABLES) assertSqliteColumns(db, spec);
      const expected = new Map(TABLES.map((spec) => [spec.table, countSqlite(db, spec)]));
      const leasesCleared = db.prepare("SELECT count(*) FROM deliveries WHERE lease_expires_at IS NOT NULL").pluck().get() as number;
      const builtins = db.prepare('SELECT name FROM roles WHERE builtin = 1 ORDER BY name').pluck().all() as string[];

      const copied = await inPgTransaction(pool, 'BEGIN ISOLATION LEVEL READ COMMITTED', async (client) => {
        await client.query('SET LOCAL statement_timeout = 0');
        await client.query(`LOCK TABLE ${TABLES.map((t) => quoted(t.table)).join(', ')} IN EXCLUSIVE MODE`);
        await assertEmpty(client, shown);
        await assertPgColumns(client);
        await assertBuiltinsExist(client, builtins);

        const tables: CopiedTable[] = [];
        for (const spec of TABLES) tables.push(await copyTable(db, client, spec, o.instance, chunkRows, log));
        await client.query(BACKFILL_DELIVERY_ORDER);

        const nextIds: Array<{ table: string; column: string; next: number }> = [];
        for (const spec of TABLES) {
          if (spec.identity === undefined) continue;
          const next = await moveIdentity(client, spec.table, spec.identity);
          if (next !== null) nextIds.push({ table: spec.table, column: spec.identity, next });
        }

        for (const spec of TABLES) {
          const want = expected.get(spec.table)!;
          const { rows } = await client.query<{ n: number }>(`SELECT count(*) AS n FROM ${quoted(spec.table)}${spec.where ? ` WHERE ${spec.where.pg}` : ''}`);
          const have = rows[0]!.n;
          const sent = tables.find((t) => t.table === spec.table)!.rows;
          if (have !== want || sent !== want) {
            throw new Error(
              `db copy: table ${spec.table} has ${want} row(s)${spec.where ? ` (${spec.where.sqlite})` : ''} in the SQLite snapshot but ${have} in PostgreSQL after the copy (${sent} inserted); nothing was copied (the transaction was rolled back)`,
            );
          }
        }
        return { tables, nextIds };
      });

      const replacedNul = copied.tables.reduce((sum, t) => sum + t.replacedNul, 0);
      const result: CopyResult = {
        tables: copied.tables,
        replacedNul,
        leasesCleared,
        instance: o.instance,
        sqliteSchema,
        postgresSchema,
        nextIds: copied.nextIds,
        durationMs: Math.round(performance.now() - started),
      };
      log?.info(
        { tables: copied.tables.length, rows: copied.tables.reduce((sum, t) => sum + t.rows, 0), replacedNul, leasesCleared, durationMs: result.durationMs },
        'db copy: done; the PostgreSQL database holds the copy',
      );
      return result;
    } finally {
      if (db.inTransaction) db.prepare('ROLLBACK').run();
    }
  } finally {
    await store?.close();
    await pool.end();
  }
}

/** The SQLite file must be there: opening it would otherwise create an empty database, and copy nothing. */
function assertSourceExists(path: string): void {
  let isFile: boolean;
  try {
    isFile = statSync(path).isFile();
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code === 'ENOENT' || code === 'ENOTDIR') {
      throw new HookrelayError(
        ErrorCode.config,
        `SQLite database ${path} does not exist: give --from the path of the hookrelay.db to copy (database.path of the SQLite install; by default <stateDir>/hookrelay.db)`,
        { cause: err },
      );
    }
    throw new HookrelayError(ErrorCode.config, `cannot read SQLite database ${path} (${code ?? (err as Error).message}): run the copy as a user that may read it (the service user)`, {
      cause: err,
    });
  }
  if (!isFile) throw new HookrelayError(ErrorCode.config, `SQLite database ${path} is not a file: give --from the path of the hookrelay.db to copy`);
}

/** Refuses a target that holds any data (`invalid_config`), saying what it holds and what to do. */
async function assertEmpty(db: Pick<Pool | PoolClient, 'query'>, shown: string): Promise<void> {
  const { rows } = await db.query<{ what: string }>(WHAT_IS_THERE);
  if (rows.length === 0) return;
  throw new HookrelayError(
    ErrorCode.config,
    `PostgreSQL database ${shown} is not empty: it holds ${rows.map((r) => r.what).join(', ')}. hookrelay db copy only copies into a database without data, so that nothing is mixed or overwritten; copy into a new database (CREATE DATABASE ... ENCODING 'UTF8' TEMPLATE template0), or empty this one first if what it holds is not needed (drop its tables, or drop and create it again). Nothing was copied`,
  );
}

/** SQLite's table must have exactly the columns this code copies: a column it does not know would be lost without a word. */
function assertSqliteColumns(db: Db, spec: TableSpec): void {
  const have = (db.pragma(`table_info(${quoted(spec.table)})`) as Array<{ name: string }>).map((c) => c.name);
  const want = [...spec.columns.map((c) => c.name), ...(spec.notCopied ?? [])];
  // The same columns, in any order: a column added by a later migration comes after those not copied.
  if ([...have].sort().join(',') !== [...want].sort().join(',')) {
    throw new Error(`db copy: SQLite table ${spec.table} has columns (${have.join(', ')}), this code copies (${want.join(', ')}): update src/store/copy.ts for the schema`);
  }
}

/** PostgreSQL's tables must have the columns copied into, and no other but those this code leaves to their defaults. */
async function assertPgColumns(client: PoolClient): Promise<void> {
  const { rows } = await client.query<{ table_name: string; column_name: string }>(
    `SELECT table_name, column_name FROM information_schema.columns
     WHERE table_schema = current_schema() AND table_name = ANY($1::text[]) ORDER BY table_name, ordinal_position`,
    [TABLES.map((t) => t.table)],
  );
  for (const spec of TABLES) {
    const have = new Set(rows.filter((r) => r.table_name === spec.table).map((r) => r.column_name));
    const want = new Set([...spec.columns.map((c) => c.name), ...(spec.instance ? ['instance'] : []), ...(spec.pgOnly ?? []), ...(spec.notCopied ?? [])]);
    const missing = [...want].filter((c) => !have.has(c));
    const unknown = [...have].filter((c) => !want.has(c));
    if (missing.length > 0 || unknown.length > 0) {
      throw new Error(
        `db copy: PostgreSQL table ${spec.table} ${missing.length > 0 ? `lacks (${missing.join(', ')})` : ''}${missing.length > 0 && unknown.length > 0 ? ' and ' : ''}${unknown.length > 0 ? `has columns this code does not copy (${unknown.join(', ')})` : ''}: update src/store/copy.ts for the schema`,
      );
    }
  }
}

/** Users may name a built-in role: each one SQLite has must be in PostgreSQL, where its migration made it. */
async function assertBuiltinsExist(client: PoolClient, builtins: readonly string[]): Promise<void> {
  const { rows } = await client.query<{ name: string }>('SELECT name FROM roles WHERE builtin AND name = ANY($1::text[])', [builtins]);
  const there = new Set(rows.map((r) => r.name));
  const missing = builtins.filter((b) => !there.has(b));
  if (missing.length > 0) throw new Error(`db copy: built-in role(s) ${missing.join(', ')} of the SQLite database are not built-in roles of the PostgreSQL schema`);
}

function countSqlite(db: Db, spec: TableSpec): number {
  return db.prepare(`SELECT count(*) FROM ${quoted(spec.table)}${spec.where ? ` WHERE ${spec.where.sqlite}` : ''}`).pluck().get() as number;
}

/**
 * Copies one table: reads it in key order with .iterate() (integers as BigInt, rows as
 * arrays), and inserts CHUNK_ROWS rows at a time (fewer when they are large). The iterator
 * is paused while a chunk is sent; nothing else runs on the SQLite connection meanwhile.
 */
async function copyTable(db: Db, client: PoolClient, spec: TableSpec, instance: string, chunkRows: number, log: Logger | undefined): Promise<CopiedTable> {
  const select = spec.columns.map((c) => (c.select === undefined ? quoted(c.name) : `${c.select} AS ${quoted(c.name)}`)).join(', ');
  const read = db.prepare(`SELECT ${select} FROM ${quoted(spec.table)}${spec.where ? ` WHERE ${spec.where.sqlite}` : ''} ORDER BY ${spec.orderBy}`);
  read.raw(true).safeIntegers(true);
  const sql = insertSql(spec);
  const types = spec.columns.map((c) => c.type);
  const width = types.length;

  let replacedNul = 0;
  let rows = 0;
  let nextProgress = PROGRESS_EVERY;
  let chunk: unknown[][] = types.map(() => []);
  let chunkLength = 0;
  let chunkChars = 0;

  const convert = (value: unknown, type: ColumnType): unknown => {
    if (value === null) return null;
    switch (type) {
      case 'text':
      case 'jsonb': {
        const s = value as string;
        chunkChars += s.length;
        if (!s.includes('\u0000')) return s;
        replacedNul++;
        return withoutNul(s);
      }
      case 'boolean':
        return value === 1n || value === 1;
      case 'bytea':
        chunkChars += (value as Buffer).length * 2;
        return value;
      default:
        // bigint and integer: a BigInt, sent as its decimal digits, exactly.
        chunkChars += 8;
        return value;
    }
  };

  const send = async (): Promise<void> => {
    if (chunkLength === 0) return;
    const params: unknown[] = spec.instance ? [...chunk, instance] : chunk;
    let inserted: number;
    try {
      inserted = (await client.query(sql, params)).rowCount ?? 0;
    } catch (err) {
      throw new Error(`db copy: inserting rows ${rows + 1} to ${rows + chunkLength} of ${spec.table} into PostgreSQL failed (${(err as Error).message}); nothing was copied (the transaction was rolled back)`, {
        cause: err,
      });
    }
    if (inserted !== chunkLength) throw new Error(`db copy: ${spec.table}: PostgreSQL inserted ${inserted} of ${chunkLength} rows sent; nothing was copied (the transaction was rolled back)`);
    rows += chunkLength;
    chunk = types.map(() => []);
    chunkLength = 0;
    chunkChars = 0;
    if (rows >= nextProgress) {
      log?.info({ table: spec.table, rows }, 'db copy: copying');
      nextProgress = rows + PROGRESS_EVERY;
    }
  };

  for (const row of read.iterate() as IterableIterator<unknown[]>) {
    for (let i = 0; i < width; i++) chunk[i]!.push(convert(row[i], types[i]!));
    chunkLength++;
    if (chunkLength >= chunkRows || chunkChars >= CHUNK_CHARS) await send();
  }
  await send();
  log?.info({ table: spec.table, rows, ...(replacedNul > 0 ? { replacedNul } : {}) }, 'db copy: table copied');
  return { table: spec.table, rows, replacedNul };
}

/**
 * Moves the identity of `table`.`column` past the largest value copied: the next row PostgreSQL
 * numbers gets max + 1, as SQLite's rowid would. Returns that next value; null for an empty
 * table (the identity stays at its start). A largest value below 1 (SQLite allows such rowids)
 * leaves the identity at 1, which collides with nothing.
 */
async function moveIdentity(client: PoolClient, table: string, column: string): Promise<number | null> {
  const { rows } = await client.query<{ next: number }>(
    `SELECT CASE WHEN m.top >= 1 THEN setval(pg_get_serial_sequence($1, $2), m.top, true) + 1
                 ELSE setval(pg_get_serial_sequence($1, $2), 1, false) END AS next
     FROM (SELECT max(${quoted(column)}) AS top FROM ${quoted(table)}) m
     WHERE m.top IS NOT NULL`,
    [table, column],
  );
  return rows[0]?.next ?? null;
}


/**
 * The backends the repository contract runs on (store-contract.test.ts,
 * deliveries-contract.test.ts): a fresh SQLite file, and a fresh PostgreSQL database on the
 * test server (pg-harness.ts), each with that backend's own SQL for what the boundary cannot
 * seed or show. A file that uses them calls `after(stopPgServer)`.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { TestContext } from 'node:test';
import { systemClock, type Clock } from '../../src/domain/clock.ts';
import { createPgPool } from '../../src/store/pg/pool.ts';
import { openPgStore } from '../../src/store/pg/store.ts';
import type { Store } from '../../src/store/repos.ts';
import { openSqliteStore } from '../../src/store/sqlite/store.ts';
import { pgServer } from './pg-harness.ts';

/** The instance name the PostgreSQL store is opened for. */
export const CONTRACT_INSTANCE = 'contract-test';

/** A fresh store of one backend, and that backend's own SQL for what the boundary cannot seed or show. */
export interface Opened {
  readonly store: Store;
  /** Runs statements (several, separated by semicolons) outside any transaction of the store. */
  exec(sql: string): Promise<void>;
  /** The first column of each row of a query. */
  column(sql: string): Promise<unknown[]>;
  /** The SQL literal of a byte string given in hex. */
  bytes(hex: string): string;
  /** SQL that creates feed source 1, which events name. */
  readonly feedSource: string;
}

export interface Backend {
  readonly name: 'sqlite' | 'postgres';
  /** A store over a fresh, empty database on `clock` (the system's by default), closed when the test ends. */
  open(t: TestContext, clock?: Clock): Promise<Opened>;
}

export const STORE_BACKENDS: readonly Backend[] = [
  {
    name: 'sqlite',
    async open(t, clock = systemClock) {
      const dir = mkdtempSync(join(tmpdir(), 'hookrelay-contract-'));
      const store = openSqliteStore(join(dir, 'hookrelay.db'), clock);
      t.after(async () => {
        await store.close();
        rmSync(dir, { recursive: true, force: true });
      });
      return {
        store,
        exec: async (sql) => void store.db.exec(sql),
        column: async (sql) => store.db.prepare(sql).pluck().all(),
        bytes: (hex) => `X'${hex}'`,
        // Schema 5 created the source 'api' as number 1.
        feedSource: 'SELECT 1',
      };
    },
  },
  {
    name: 'postgres',
    async open(t, clock = systemClock) {
      const url = await (await pgServer()).createDatabase();
      const store = await openPgStore(url, clock, { instance: CONTRACT_INSTANCE, poolSize: 4 });
      const pool = createPgPool(url, { max: 1 });
      t.after(async () => {
        await pool.end();
        await store.close();
      });
      return {
        store,
        exec: async (sql) => void (await pool.query(sql)),
        column: async (sql) => (await pool.query<Record<string, unknown>>(sql)).rows.map((r) => Object.values(r)[0]),
        bytes: (hex) => `'\\x${hex}'::bytea`,
        feedSource: `INSERT INTO feed_sources (id, instance, name) VALUES (1, '${CONTRACT_INSTANCE}', 'api')`,
      };
    },
  },
];

import type { ApiKey, StoredApiKey } from '../../domain/api-keys.ts';
import { API_KEY_SQL, toApiKey, toStoredApiKey, type ApiKeyRow } from '../api-keys-sql.ts';
import type { ApiKeysRepo } from '../repos.ts';
import { numbered } from '../sql.ts';
import type { PgConnection } from './connection.ts';

const INSERT = API_KEY_SQL.insert(numbered('org', 'name', 'role', 'prefix', 'hash', 'now', 'by', 'expires'));
const BY_PREFIX = API_KEY_SQL.byPrefix(numbered('prefix'));
const BY_ORG = API_KEY_SQL.byOrg(numbered('org'));
const BY_NAME = API_KEY_SQL.byName(numbered('org', 'name'));
const COUNT_LIVE = API_KEY_SQL.countLive(numbered('org', 'now'));
const REVOKE = API_KEY_SQL.revoke(numbered('id', 'now'));
const TOUCH = API_KEY_SQL.touch(numbered('id', 'now', 'since'));

/** API keys on PostgreSQL: the statements of ../api-keys-sql.ts, as on SQLite. */
export function createPgApiKeysRepo(db: PgConnection): ApiKeysRepo {
  return {
    async insert(key, now): Promise<ApiKey | null> {
      const { rows } = await db.query<ApiKeyRow>(INSERT, [key.orgId, key.name, key.roleName, key.prefix, key.hash, now, key.createdBy, key.expiresAt]);
      return rows[0] === undefined ? null : toApiKey(rows[0]);
    },
    async byPrefix(prefix: string): Promise<StoredApiKey | null> {
      const { rows } = await db.query<ApiKeyRow>(BY_PREFIX, [prefix]);
      return rows[0] === undefined ? null : toStoredApiKey(rows[0]);
    },
    async listByOrg(orgId: string): Promise<ApiKey[]> {
      const { rows } = await db.query<ApiKeyRow>(BY_ORG, [orgId]);
      return rows.map(toApiKey);
    },
    async findByName(orgId: string, name: string): Promise<ApiKey | null> {
      const { rows } = await db.query<ApiKeyRow>(BY_NAME, [orgId, name]);
      return rows[0] === undefined ? null : toApiKey(rows[0]);
    },
    async countLive(orgId: string, now: number): Promise<number> {
      const { rows } = await db.query<{ n: number | string }>(COUNT_LIVE, [orgId, now]);
      return Number(rows[0]?.n ?? 0);
    },
    async revoke(id: number, now: number): Promise<void> {
      await db.query(REVOKE, [id, now]);
    },
    async touch(id: number, now: number, granularityMs: number): Promise<void> {
      await db.query(TOUCH, [id, now, now - granularityMs]);
    },
  };
}

import type { ApiKey, StoredApiKey } from '../../domain/api-keys.ts';
import { API_KEY_SQL, toApiKey, toStoredApiKey, type ApiKeyRow } from '../api-keys-sql.ts';
import type { ApiKeysRepo } from '../repos.ts';
import { positional } from '../sql.ts';
import type { Db } from './connection.ts';
import type { Sync } from './sync-repo.ts';

export function createSqliteApiKeysRepo(db: Db): Sync<ApiKeysRepo> {
  const insert = db.prepare<[string, string, string, string, string, number, string | null, number | null], ApiKeyRow>(
    API_KEY_SQL.insert(positional('org', 'name', 'role', 'prefix', 'hash', 'now', 'by', 'expires')),
  );
  const byPrefix = db.prepare<[string], ApiKeyRow>(API_KEY_SQL.byPrefix(positional('prefix')));
  const byOrg = db.prepare<[string], ApiKeyRow>(API_KEY_SQL.byOrg(positional('org')));
  const byName = db.prepare<[string, string], ApiKeyRow>(API_KEY_SQL.byName(positional('org', 'name')));
  const countLive = db.prepare<[string, number], { n: number }>(API_KEY_SQL.countLive(positional('org', 'now')));
  const revoke = db.prepare<[number, number]>(API_KEY_SQL.revoke(positional('id', 'now')));
  const touch = db.prepare<[number, number, number]>(API_KEY_SQL.touch(positional('id', 'now', 'since')));

  return {
    insert(key, now): ApiKey | null {
      const row = insert.get(key.orgId, key.name, key.roleName, key.prefix, key.hash, now, key.createdBy, key.expiresAt);
      return row === undefined ? null : toApiKey(row);
    },
    byPrefix(prefix: string): StoredApiKey | null {
      const row = byPrefix.get(prefix);
      return row === undefined ? null : toStoredApiKey(row);
    },
    listByOrg(orgId: string): ApiKey[] {
      return byOrg.all(orgId).map(toApiKey);
    },
    findByName(orgId: string, name: string): ApiKey | null {
      const row = byName.get(orgId, name);
      return row === undefined ? null : toApiKey(row);
    },
    countLive(orgId: string, now: number): number {
      return countLive.get(orgId, now)?.n ?? 0;
    },
    revoke(id: number, now: number): void {
      revoke.run(now, id);
    },
    touch(id: number, now: number, granularityMs: number): void {
      touch.run(now, id, now - granularityMs);
    },
  };
}

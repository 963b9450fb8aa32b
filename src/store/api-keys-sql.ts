/**
 * The API keys' statements, written once for both backends (sqlite/api-keys-repo.ts,
 * pg/api-keys-repo.ts), and their row mapping.
 */
import type { ApiKey, StoredApiKey } from '../domain/api-keys.ts';

const COLUMNS = 'id, org_id, name, role_name, prefix, hash, created_at, created_by, expires_at, last_used_at, revoked_at';

/** A row of api_keys; PostgreSQL's bigints may come as strings. */
export interface ApiKeyRow {
  readonly id: number | string;
  readonly org_id: string;
  readonly name: string;
  readonly role_name: string;
  readonly prefix: string;
  readonly hash: string;
  readonly created_at: number | string;
  readonly created_by: string | null;
  readonly expires_at: number | string | null;
  readonly last_used_at: number | string | null;
  readonly revoked_at: number | string | null;
}

const orNull = (v: number | string | null): number | null => (v === null ? null : Number(v));

export function toStoredApiKey(r: ApiKeyRow): StoredApiKey {
  return {
    id: Number(r.id),
    orgId: r.org_id,
    name: r.name,
    roleName: r.role_name,
    prefix: r.prefix,
    hash: r.hash,
    createdAt: Number(r.created_at),
    createdBy: r.created_by,
    expiresAt: orNull(r.expires_at),
    lastUsedAt: orNull(r.last_used_at),
    revokedAt: orNull(r.revoked_at),
  };
}

/** The key without its hash. */
export function toApiKey(r: ApiKeyRow): ApiKey {
  const { hash: _hash, ...key } = toStoredApiKey(r);
  return key;
}

/** A key not revoked, and not expired at `now`. */
const LIVE = (now: string) => `revoked_at IS NULL AND (expires_at IS NULL OR expires_at > ${now})`;

export const API_KEY_SQL = {
  /** Answers the new row, or none when the name (among keys not revoked) or the prefix is taken. */
  insert: (p: Record<'org' | 'name' | 'role' | 'prefix' | 'hash' | 'now' | 'by' | 'expires', string>): string =>
    `INSERT INTO api_keys (org_id, name, role_name, prefix, hash, created_at, created_by, expires_at)
    VALUES (${p.org}, ${p.name}, ${p.role}, ${p.prefix}, ${p.hash}, ${p.now}, ${p.by}, ${p.expires})
    ON CONFLICT DO NOTHING RETURNING ${COLUMNS}`,
  byPrefix: (p: { prefix: string }): string => `SELECT ${COLUMNS} FROM api_keys WHERE prefix = ${p.prefix}`,
  /** The keys not revoked (expired ones too, so that they can be seen and revoked), by name. */
  byOrg: (p: { org: string }): string => `SELECT ${COLUMNS} FROM api_keys WHERE org_id = ${p.org} AND revoked_at IS NULL ORDER BY name`,
  byName: (p: { org: string; name: string }): string => `SELECT ${COLUMNS} FROM api_keys WHERE org_id = ${p.org} AND name = ${p.name} AND revoked_at IS NULL`,
  countLive: (p: { org: string; now: string }): string => `SELECT count(*) AS n FROM api_keys WHERE org_id = ${p.org} AND ${LIVE(p.now)}`,
  revoke: (p: { id: string; now: string }): string => `UPDATE api_keys SET revoked_at = ${p.now} WHERE id = ${p.id} AND revoked_at IS NULL`,
  /** Sets the last use unless one was written since `since`: at most one write per key and interval. */
  touch: (p: { id: string; now: string; since: string }): string =>
    `UPDATE api_keys SET last_used_at = ${p.now} WHERE id = ${p.id} AND (last_used_at IS NULL OR last_used_at <= ${p.since})`,
} as const;

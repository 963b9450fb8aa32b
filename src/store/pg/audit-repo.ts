import { chainEntry, type AuditDraft, type AuditEntry } from '../../domain/audit.ts';
import { AUDIT_SQL, auditListSql, auditValues, toAuditEntry, type AuditRow } from '../audit-sql.ts';
import type { AuditRepo } from '../repos.ts';
import type { AuditFilter } from '../values.ts';
import type { PgConnection } from './connection.ts';
import { withoutNul as pgText } from './text.ts';

/**
 * The key of the transaction-level advisory lock that serializes appends to the audit chain:
 * the ASCII bytes of "hookaudt" as a bigint (0x686f6f6b61756474). Distinct from the migration
 * and event-insert keys. Fixed forever: instances of different versions must take the same lock.
 */
export const AUDIT_LOCK_KEY = '7525356009346655348';

const p = (n: number) => `$${n}`;
const LOCK = `SELECT pg_advisory_xact_lock(${AUDIT_LOCK_KEY})`;
const INSERT = AUDIT_SQL.insert(p);
const AFTER = AUDIT_SQL.after(p);
const FIRST_AT = AUDIT_SQL.firstAt(p);
const REMOVE_BEFORE = AUDIT_SQL.removeBefore(p);
const LOGGED_THROUGH = AUDIT_SQL.loggedThrough(p);
const SET_LOGGED_THROUGH = AUDIT_SQL.setLoggedThrough(p);

/**
 * The audit trail on PostgreSQL. Several instances append to one chain: an append takes the
 * chain's lock (held until its transaction ends), then reads the head in a statement of its
 * own (under READ COMMITTED a statement's snapshot is taken when it starts: a read in the
 * statement that waited would not see the entry of the transaction that held the lock).
 */
export function createPgAuditRepo(db: PgConnection, instance: string): AuditRepo {
  return {
    async append(draft: AuditDraft, now: number): Promise<AuditEntry> {
      await db.query(LOCK);
      const { rows } = await db.query<{ id: number; at: number; hash: string }>(AUDIT_SQL.head);
      const entry = chainEntry(rows[0] ?? null, storable(draft), now);
      await db.query(INSERT, auditValues(entry));
      return entry;
    },
    async after(afterId: number, limit: number): Promise<AuditEntry[]> {
      return (await db.query<AuditRow>(AFTER, [afterId, limit])).rows.map(toAuditEntry);
    },
    async list(filter: AuditFilter): Promise<AuditEntry[]> {
      const { sql, values } = auditListSql(filter, p);
      return (await db.query<AuditRow>(sql, values)).rows.map(toAuditEntry);
    },
    async latestAnchor(): Promise<AuditEntry | null> {
      const { rows } = await db.query<AuditRow>(AUDIT_SQL.latestAnchor);
      return rows[0] === undefined ? null : toAuditEntry(rows[0]);
    },
    async firstAt(at: number): Promise<number | null> {
      const { rows } = await db.query<{ id: number }>(FIRST_AT, [at]);
      return rows[0] === undefined ? null : Number(rows[0].id);
    },
    async removeBefore(beforeId: number, limit: number): Promise<number> {
      return (await db.query(REMOVE_BEFORE, [beforeId, limit])).rowCount ?? 0;
    },
    async loggedThrough(): Promise<number> {
      const { rows } = await db.query<{ logged_through: number }>(LOGGED_THROUGH, [instance]);
      return rows[0] === undefined ? 0 : Number(rows[0].logged_through);
    },
    async setLoggedThrough(id: number): Promise<void> {
      await db.query(SET_LOGGED_THROUGH, [instance, id]);
    },
  };
}

/** PostgreSQL text cannot hold U+0000: the fields of an entry are stored (and hashed) with it replaced. */
function storable(d: AuditDraft): AuditDraft {
  const t = (s: string | null) => (s === null ? null : pgText(s));
  return { ...d, actor: { ...d.actor, name: t(d.actor.name), orgId: t(d.actor.orgId) }, orgId: t(d.orgId), target: t(d.target), requestId: t(d.requestId), source: t(d.source) };
}

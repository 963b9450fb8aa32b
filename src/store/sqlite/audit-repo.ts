import type { Statement } from 'better-sqlite3';
import { chainEntry, type AuditDraft, type AuditEntry } from '../../domain/audit.ts';
import { AUDIT_SQL, auditListSql, auditValues, toAuditEntry, type AuditRow } from '../audit-sql.ts';
import type { AuditRepo } from '../repos.ts';
import type { AuditFilter } from '../values.ts';
import type { Db } from './connection.ts';
import type { Sync } from './sync-repo.ts';

const q = () => '?';
/** The one daemon of a SQLite file keeps its journal watermark under this name. */
const LOCAL_INSTANCE = 'local';

/**
 * The audit trail on SQLite: the write transaction holds the whole database, so the head read
 * before an append is the head the append follows.
 */
export function createSqliteAuditRepo(db: Db): Sync<AuditRepo> {
  const head = db.prepare<[], { id: number; at: number; hash: string }>(AUDIT_SQL.head);
  const insert = db.prepare(AUDIT_SQL.insert(q));
  const after = db.prepare<[number, number], AuditRow>(AUDIT_SQL.after(q));
  const latestAnchor = db.prepare<[], AuditRow>(AUDIT_SQL.latestAnchor);
  const firstAt = db.prepare<[number], { id: number }>(AUDIT_SQL.firstAt(q));
  const removeBefore = db.prepare<[number, number]>(AUDIT_SQL.removeBefore(q));
  const loggedThrough = db.prepare<[string], { logged_through: number }>(AUDIT_SQL.loggedThrough(q));
  const setLoggedThrough = db.prepare<[string, number]>(AUDIT_SQL.setLoggedThrough(q));
  const lists = new Map<string, Statement<Array<string | number>, AuditRow>>();

  return {
    append(draft: AuditDraft, now: number): AuditEntry {
      const entry = chainEntry(head.get() ?? null, draft, now);
      insert.run(...auditValues(entry));
      return entry;
    },
    after(afterId: number, limit: number): AuditEntry[] {
      return after.all(afterId, limit).map(toAuditEntry);
    },
    list(filter: AuditFilter): AuditEntry[] {
      const { sql, values } = auditListSql(filter, q);
      let statement = lists.get(sql);
      if (statement === undefined) lists.set(sql, (statement = db.prepare<Array<string | number>, AuditRow>(sql)));
      return statement.all(...values).map(toAuditEntry);
    },
    latestAnchor(): AuditEntry | null {
      const row = latestAnchor.get();
      return row === undefined ? null : toAuditEntry(row);
    },
    firstAt(at: number): number | null {
      return firstAt.get(at)?.id ?? null;
    },
    removeBefore(beforeId: number, limit: number): number {
      return removeBefore.run(beforeId, limit).changes;
    },
    loggedThrough(): number {
      return loggedThrough.get(LOCAL_INSTANCE)?.logged_through ?? 0;
    },
    setLoggedThrough(id: number): void {
      setLoggedThrough.run(LOCAL_INSTANCE, id);
    },
  };
}

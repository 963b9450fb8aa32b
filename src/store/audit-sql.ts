/**
 * The audit trail's statements, written once for both backends (sqlite/audit-repo.ts,
 * pg/audit-repo.ts), and its row mapping. The chain is made in domain/audit.ts; here it is
 * only stored and read, in id order.
 */
import type { ActorKind, AuditEntry, AuditOutcome } from '../domain/audit.ts';
import type { AuditFilter } from './values.ts';

export const AUDIT_COLUMNS = 'id, at, actor_kind, actor_name, actor_org, action, org_id, target, changes, request_id, source, outcome, code, prev_hash, hash';

export interface AuditRow {
  readonly id: number;
  readonly at: number;
  readonly actor_kind: string;
  readonly actor_name: string | null;
  readonly actor_org: string | null;
  readonly action: string;
  readonly org_id: string | null;
  readonly target: string | null;
  readonly changes: string | null;
  readonly request_id: string | null;
  readonly source: string | null;
  readonly outcome: string;
  readonly code: string | null;
  readonly prev_hash: string;
  readonly hash: string;
}

export function toAuditEntry(r: AuditRow): AuditEntry {
  return {
    id: Number(r.id),
    at: Number(r.at),
    actorKind: r.actor_kind as ActorKind,
    actorName: r.actor_name,
    actorOrg: r.actor_org,
    action: r.action,
    orgId: r.org_id,
    target: r.target,
    changes: r.changes,
    requestId: r.request_id,
    source: r.source,
    outcome: r.outcome as AuditOutcome,
    code: r.code,
    prevHash: r.prev_hash,
    hash: r.hash,
  };
}

/** An entry's values in AUDIT_COLUMNS' order. */
export function auditValues(e: AuditEntry): Array<string | number | null> {
  return [e.id, e.at, e.actorKind, e.actorName, e.actorOrg, e.action, e.orgId, e.target, e.changes, e.requestId, e.source, e.outcome, e.code, e.prevHash, e.hash];
}

/** Spells the n-th parameter (1-based) as the backend does. */
export type Param = (n: number) => string;

export const AUDIT_SQL = {
  head: `SELECT id, at, hash FROM audit_entries ORDER BY id DESC LIMIT 1`,
  insert: (p: Param): string => `INSERT INTO audit_entries (${AUDIT_COLUMNS}) VALUES (${Array.from({ length: 15 }, (_, i) => p(i + 1)).join(', ')})`,
  after: (p: Param): string => `SELECT ${AUDIT_COLUMNS} FROM audit_entries WHERE id > ${p(1)} ORDER BY id LIMIT ${p(2)}`,
  latestAnchor: `SELECT ${AUDIT_COLUMNS} FROM audit_entries WHERE action = 'audit.prune' ORDER BY id DESC LIMIT 1`,
  firstAt: (p: Param): string => `SELECT id FROM audit_entries WHERE at >= ${p(1)} ORDER BY at, id LIMIT 1`,
  /** The ids of up to `limit` entries before an id, oldest first (a batch for removeBefore). */
  removeBefore: (p: Param): string => `DELETE FROM audit_entries WHERE id IN (SELECT id FROM audit_entries WHERE id < ${p(1)} ORDER BY id LIMIT ${p(2)})`,
  loggedThrough: (p: Param): string => `SELECT logged_through FROM audit_journal WHERE instance = ${p(1)}`,
  setLoggedThrough: (p: Param): string =>
    `INSERT INTO audit_journal (instance, logged_through) VALUES (${p(1)}, ${p(2)}) ON CONFLICT (instance) DO UPDATE SET logged_through = excluded.logged_through`,
} as const;

/**
 * A page of the trail, newest first, filtered (AuditRepo.list): the statement and its values.
 * The organization's entries are read through audit_entries_org, the others by id.
 */
export function auditListSql(f: AuditFilter, p: Param): { sql: string; values: Array<string | number> } {
  const where: string[] = [];
  const values: Array<string | number> = [];
  const add = (condition: (param: string) => string, value: string | number) => {
    values.push(value);
    where.push(condition(p(values.length)));
  };
  if (f.orgId !== undefined) add((x) => `org_id = ${x}`, f.orgId);
  if (f.actor !== undefined) add((x) => `actor_name = ${x}`, f.actor);
  if (f.action !== undefined) add((x) => `action = ${x}`, f.action);
  if (f.outcome !== undefined) add((x) => `outcome = ${x}`, f.outcome);
  if (f.fromId !== undefined) add((x) => `id >= ${x}`, f.fromId);
  if (f.beforeId !== undefined) add((x) => `id < ${x}`, f.beforeId);
  values.push(f.limit);
  const condition = where.length === 0 ? '' : `WHERE ${where.join(' AND ')}`;
  return { sql: `SELECT ${AUDIT_COLUMNS} FROM audit_entries ${condition} ORDER BY id DESC LIMIT ${p(values.length)}`, values };
}

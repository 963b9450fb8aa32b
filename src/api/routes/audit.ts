import { iso } from '../../domain/iso.ts';
import { Permission } from '../../domain/permissions.ts';
import type { AuditEntry as Entry } from '../../domain/audit.ts';
import type { AuditTrail } from '../../services/audit.ts';
import { firstValues, parseRequest } from '../request-validation.ts';
import type { Answer } from '../schemas/answers.ts';
import { AuditQuery, encodeCursor, type AuditEntry, type AuditPage } from '../schemas/audit.ts';
import type { SecuredRouter } from '../secured-router.ts';

/** An entry as the API answers it (the schema's AuditEntry). */
export function auditEntryView(e: Entry): Answer<typeof AuditEntry> {
  return {
    id: e.id,
    at: iso(e.at),
    actor: { kind: e.actorKind, name: e.actorName, organization_id: e.actorOrg },
    action: e.action,
    organization_id: e.orgId,
    target: e.target,
    changes: e.changes === null ? null : (JSON.parse(e.changes) as Record<string, unknown>),
    request_id: e.requestId,
    source: e.source,
    outcome: e.outcome,
    code: e.code,
    hash: e.hash,
  };
}

/** GET /audit/list: the trail of the caller's organization only, newest first. */
export function registerAuditRoutes(router: SecuredRouter, services: { audit: AuditTrail }): void {
  router.route(['GET'], '/audit/list', Permission.auditRead, async (ctx, principal) => {
    const q = parseRequest(AuditQuery, firstValues(ctx.query), 'the query is invalid');
    const rows = await services.audit.list({ orgId: principal.orgId, since: q.since, actor: q.actor, action: q.action, outcome: q.outcome, beforeId: q.cursor, limit: q.limit + 1 });
    const page = rows.slice(0, q.limit);
    ctx.body = {
      data: page.map(auditEntryView),
      next_cursor: rows.length > q.limit ? encodeCursor(page[page.length - 1]!.id) : null,
    } satisfies Answer<typeof AuditPage>;
  });
}

/**
 * The delivery log's statements (GET /webhook/deliveries, the console's table), written once
 * for both backends: DeliveriesRepo.list on SQLite (deliveries-repo.ts) and PostgreSQL
 * (pg/deliveries-repo.ts) runs the statement of listSql for its shape of filter.
 */
import { orderingKey } from '../domain/ordering.ts';
import { inStatusIndex, isFresh } from './sql.ts';
import type { ListFilter } from './values.ts';

/** deliveries_org_status's condition, spelt as the index has it: without it SQLite would not use that partial index. */
const IN_STATUS_INDEX = inStatusIndex('d.');
/**
 * The parts of the delivery log, each held by one index in id order (see listSql): fresh
 * deliveries (deliveries_org_fresh), and the pending-and-tried, delivered and dead ones
 * (deliveries_org_status, one status each).
 */
const LOG_PARTS = {
  fresh: isFresh('d.'),
  tried: `d.status = 'pending' AND ${IN_STATUS_INDEX}`,
  delivered: `d.status = 'delivered' AND ${IN_STATUS_INDEX}`,
  dead: `d.status = 'dead' AND ${IN_STATUS_INDEX}`,
} as const;

/**
 * The parts of the log a public status reads (a pending delivery leased before its first
 * attempt is `pending` too, and sits with the tried ones), or, for a search by request, the
 * condition on its rows.
 */
function statusParts(status: ListFilter['status']): { parts: string[]; condition: string } {
  const { fresh, tried, delivered, dead } = LOG_PARTS;
  switch (status) {
    case undefined:
      return { parts: [fresh, tried, delivered, dead], condition: '' };
    case 'pending':
      return { parts: [fresh, `${tried} AND d.attempts = 0`], condition: ` AND d.status = 'pending' AND d.attempts = 0` };
    case 'failed':
      return { parts: [`${tried} AND d.attempts > 0`], condition: ` AND d.status = 'pending' AND d.attempts > 0` };
    case 'delivered':
      return { parts: [delivered], condition: ` AND d.status = 'delivered'` };
    case 'dead':
      return { parts: [dead], condition: ` AND d.status = 'dead'` };
  }
}

/** The named parameters of a list statement (listSql). */
export interface ListParams {
  org: string;
  from: number;
  before: number;
  since: number;
  until: number;
  key: number;
  request: string;
  limit: number;
}

/** The parameters of list(): no bound is a bound that keeps everything. */
export function listParams(orgId: string, f: ListFilter): ListParams {
  return {
    org: orgId,
    from: f.fromId ?? 0,
    before: f.beforeId ?? Number.MAX_SAFE_INTEGER,
    since: f.since ?? -Number.MAX_SAFE_INTEGER,
    until: f.until ?? Number.MAX_SAFE_INTEGER,
    key: f.requestId === undefined ? 0 : orderingKey(orgId, f.requestId),
    request: f.requestId ?? '',
    limit: f.limit,
  };
}

/**
 * The delivery log's statement for a shape of filter, in the backend's words: `param` spells a
 * parameter (`@org` on SQLite, `$1` on PostgreSQL; see ListParams), `columns` the row's columns
 * (the event type is read from JSON, which each backend spells its own way). Written out for the
 * shape, so that each part reads its index's range and stops at the page's end: with conditions
 * of the form `(@status IS NULL OR d.status = @status)` a planner cannot know which index a
 * call needs, and SQLite would read the organization's whole log (all its tried deliveries) for every
 * page.
 *
 * - The log: each part of it the status reads (statusParts), newest first within
 *   [from, before), up to the page's size, then merged. A time window is also a range of ids
 *   (DeliveriesRepo.idsCreated); its times are compared too, for deliveries whose queue times
 *   are out of id order (queued under a clock that stepped back, by a version without
 *   FeedRepo.receivedAt, which keeps them in order).
 * - A search by request (`key`: the request's ordering key, which every delivery of it carries;
 *   the request id itself is compared on the event, as keys of two requests may collide): the
 *   deliveries of every organization with ids in [from, before), newest first, read by id; the
 *   caller bounds the range.
 */
export function listSql(f: ListFilter, param: (name: keyof ListParams) => string, columns: string): string {
  const { parts, condition } = statusParts(f.status);
  const window = f.since !== undefined || f.until !== undefined ? ` AND d.created_at >= ${param('since')} AND d.created_at < ${param('until')}` : '';
  const range = `d.id >= ${param('from')} AND d.id < ${param('before')}`;
  if (f.requestId !== undefined) {
    return `SELECT ${columns} FROM deliveries d JOIN events e ON e.seq = d.event_seq
      WHERE ${range} AND d.ordering_key = ${param('key')} AND d.org_id = ${param('org')} AND e.anticipation_request_id = ${param('request')}${condition}${window}
      ORDER BY d.id DESC LIMIT ${param('limit')}`;
  }
  const selects = parts.map(
    (part, i) => `SELECT id FROM (SELECT d.id FROM deliveries d WHERE d.org_id = ${param('org')} AND ${part} AND ${range}${window} ORDER BY d.id DESC LIMIT ${param('limit')}) p${i}`,
  );
  return `SELECT ${columns} FROM (${selects.join(' UNION ALL ')}) c
    JOIN deliveries d ON d.id = c.id JOIN events e ON e.seq = d.event_seq
    ORDER BY d.id DESC LIMIT ${param('limit')}`;
}

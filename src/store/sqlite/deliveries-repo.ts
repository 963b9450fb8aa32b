import type { Statement } from 'better-sqlite3';
import type { Db } from './connection.ts';
import { keyRange } from './key-range.ts';
import type { DeliveriesRepo } from '../repos.ts';
import {
  ATTEMPT_INSERT,
  attemptsOfSql,
  deliveryByIdSql,
  deliveryRowColumns,
  dueJoinSql,
  dueRetriesSql,
  eventOfSql,
  hasPendingDeliverySql,
  insertRowsSql,
  insertTestEventSql,
  isFresh,
  latestFailure,
  markUnsendableSql,
  named,
  nextRetrySql,
  oldestDue,
  positional,
  QUEUE_GAUGES,
  RECENT_FAILURE_STATUSES,
  RECENT_FAILURE_WINDOW,
  recoverableSql,
  retryFailedNowSql,
  retryNowSql,
  settleSet,
  waitStateSql,
} from '../sql.ts';
import type { AttemptCount, AttemptRow, AttemptToStore, ClaimTurn, DeliveryRow, DeliveryStatus, DeliveryToQueue, DeliveryWaitState, Leased, ListFilter, Settlement } from '../values.ts';
import { listParams, listSql, type ListParams } from '../delivery-log-sql.ts';
import { rateWindowOf, toAttempt, toDeliveryRow, toRecoverable, toWaitState, type AttemptLogRow, type DeliveryLogRow, type DueRow, type RecoverableRow, type WaitStateRow } from '../row-mappers.ts';
import type { Sync } from './sync-repo.ts';

const DUE_COLUMNS = `d.id, d.org_id, d.ordering_key, d.attempts, e.id AS event_id, e.anticipation_request_id, e.occurred_at, e.payload, w.url, w.headers, w.client_certificate, w.oauth2, w.active_hmac, w.secret, w.previous_secret, w.previous_secret_expires_at, e.traceparent, e.tracestate`;
const ROW_COLUMNS = deliveryRowColumns('sqlite');
/**
 * What holds `d` back: another pending delivery of the same request (ordering key, within the
 * organization) that is being attempted (leased), whenever it was queued, or that was queued
 * before `d` and was tried (waiting for its retry). So a request never has two deliveries in
 * flight, and a later change waits for an earlier one that is failing. Served by the partial
 * index deliveries_ordering, which holds exactly the tried and leased pending deliveries. The
 * `+` keeps SQLite from reading it through deliveries_org_due instead (its choice without
 * statistics): that visits every delivery of the organization in flight, for each candidate,
 * which costs the claim a good part of its time (docs/benchmarks.md, "Figures behind the code's choices").
 */
const HELD_BACK_WHERE = `p.ordering_key = d.ordering_key AND +p.org_id = d.org_id AND p.status = 'pending' AND (p.attempts > 0 OR p.lease_expires_at IS NOT NULL)
    AND p.id <> d.id AND (p.lease_expires_at IS NOT NULL OR p.id < d.id)`;
const HELD_BACK = `SELECT 1 FROM deliveries p
  WHERE ${HELD_BACK_WHERE}`;
/** lease()'s answer on SQLite (see DeliveriesRepo.lease): no epochs (nothing to fence), none late; shared, never changed. */
const LEASED_UNFENCED: Leased = Object.freeze({ epochs: null, late: Object.freeze([]) });
const ONLY_CLAIMER: ClaimTurn = Object.freeze({ leasedElsewhere: 0, failing: false, shared: false });
/**
 * The reads behind the queue gauges (metrics, `hookrelay status`; see ../sql.ts's QUEUE_GAUGES),
 * exported so that a test can check their query plans (PG_QUEUE_GAUGE_SQL on PostgreSQL). The
 * oldest fresh delivery is the first in deliveries_org_fresh (queue times never decrease along
 * id). The two lookups of one row spell the organization `+@org`, as the claim does: with a bare
 * parameter SQLite would plan the statement again at every run (docs/benchmarks.md, "The claim
 * planned once").
 */
export const SQLITE_QUEUE_GAUGE_SQL = {
  countFreshChunk: QUEUE_GAUGES.countFreshChunk(named('org', 'after', 'limit')),
  countTriedChunk: QUEUE_GAUGES.countTriedChunk(named('org', 'after', 'limit')),
  oldestFresh: `
    SELECT next_attempt_at AS at FROM deliveries
    WHERE org_id = +@org AND ${isFresh()}
    ORDER BY id LIMIT 1`,
  countDueRetries: QUEUE_GAUGES.countDueRetries(named('org', 'now', 'limit')),
  earliestRetry: QUEUE_GAUGES.earliestRetry({ ...named('now'), org: '+@org' }),
  recentFailure: QUEUE_GAUGES.recentFailure(named('org', 'status', 'limit')),
} as const;

/**
 * An organization's attempts that started in [@from, @to), per bucket of @bucket ms from
 * @from (the cast: better-sqlite3 passes numbers as REAL, whose division is not whole). Read
 * from delivery_attempts_started alone, each attempt's delivery looked up by its id for the
 * organization.
 */
const ATTEMPT_COUNTS_SQL = `
  SELECT CAST((a.started_at - @from) / @bucket AS INTEGER) AS bucket,
    sum(CASE WHEN a.outcome = 'delivered' THEN 1 ELSE 0 END) AS succeeded,
    sum(CASE WHEN a.outcome = 'delivered' THEN 0 ELSE 1 END) AS failed
  FROM delivery_attempts a JOIN deliveries d ON d.id = a.delivery_id
  WHERE a.started_at >= @from AND a.started_at < @to AND d.org_id = @org
  GROUP BY 1 ORDER BY 1`;

/** The source of the events the API stores (test events): schema 5 made it, once for the file. */
const API_SOURCE_ID = "(SELECT id FROM feed_sources WHERE name = 'api')";

/** The SQLite deliveries repository (synchronous: see sync-repo.ts). */
export function createSqliteDeliveriesRepo(db: Db): Sync<DeliveriesRepo> {
  // Due, unleased, its webhook not disabled (held deliveries stay pending), and not held back
  // by another delivery of its request (see HELD_BACK: per-request ordering, a later change
  // waits until the earlier one is delivered or dead, and never two in flight at once, even
  // when a replay or a recovery queued an old event of the request anew).
  // Two queues per organization, each read through its own index, so neither a disabled
  // webhook's held backlog nor a busy webhook's queue is scanned while claiming for the others:
  // fresh deliveries (never tried, not leased; deliveries_org_fresh) in queue order, and tried
  // ones (deliveries_org_due) by due time. A fresh delivery is due from the moment it is queued,
  // whatever the clock says (its next_attempt_at is the queue time, which never goes back, so a
  // clock that was once ahead would otherwise hold every later one back until it caught up);
  // only retries wait for their time. The result merges the two by (due time, id), a fresh
  // delivery counting as due now at the latest; the caller takes at most one delivery per
  // ordering key from it.
  //
  // The limit is written into the SQL, one prepared statement per limit (few distinct values
  // are used): with `LIMIT ?` SQLite runs this query many times slower (docs/benchmarks.md,
  // "Figures behind the code's choices"), and the dispatcher runs it for every claim.
  const dueSql = (limit: number) => `
    SELECT ${DUE_COLUMNS}
    FROM (
      SELECT id FROM (SELECT d.id FROM deliveries d
        WHERE d.org_id = +@org AND ${isFresh('d.')}
          AND NOT EXISTS (${HELD_BACK})
        ORDER BY d.id LIMIT ${limit})
      UNION ALL
      SELECT id FROM (${dueRetriesSql({ org: '+@org', now: '@now', limit: String(limit) }, HELD_BACK)})
    ) c${dueJoinSql('sqlite', { now: '@now', limit: String(limit) })}`;
  const dueByLimit = new Map<number, Statement<{ org: string; now: number }, DueRow>>();
  const dueStatement = (limit: number) => {
    const n = Math.max(1, Math.trunc(limit));
    let statement = dueByLimit.get(n);
    if (!statement) dueByLimit.set(n, (statement = db.prepare<{ org: string; now: number }, DueRow>(dueSql(n))));
    return statement;
  };
  // The earliest retry of the organization still to come (tried, not leased, due after @now),
  // read from the front of deliveries_org_due: when the dispatcher should look at it again.
  const nextRetry = db.prepare<{ org: string; now: number }, { at: number }>(nextRetrySql({ ...named('now'), org: '+@org' }));
  const rateOf = db.prepare<[string], { rate_limit: number | null; rate_window: string | null }>('SELECT rate_limit, rate_window FROM webhooks WHERE org_id = ?');
  const markUnsendable = db.prepare<{ id: number; error: string; now: number }>(markUnsendableSql(named('id', 'error', 'now')));
  const insertDelivery = db.prepare<[number, string, number, number, number, number]>(`
    INSERT INTO deliveries (event_seq, org_id, ordering_key, status, next_attempt_at, created_at, updated_at)
    VALUES (?, ?, ?, 'pending', ?, ?, ?)`);
  const lease = db.prepare<[number, number, number]>('UPDATE deliveries SET lease_expires_at = ?, updated_at = ? WHERE id = ?');
  const insertAttempt = db.prepare<[number, number, number, number, string, number | null, string | null, string | null, string | null, string, number | null, string | null]>(
    insertRowsSql('sqlite', ATTEMPT_INSERT),
  );
  const settle = db.prepare<{ id: number; status: DeliveryStatus; attempts: number; next: number; at: number; code: number | null; error: string | null }>(
    `UPDATE deliveries SET ${settleSet(named('status', 'attempts', 'next', 'at', 'code', 'error'))} WHERE id = @id`,
  );
  const release = db.prepare<[number, number]>('UPDATE deliveries SET lease_expires_at = NULL, updated_at = ? WHERE id = ?');
  const byId = db.prepare<[string, number], DeliveryLogRow>(deliveryByIdSql('sqlite', positional('org', 'id')));
  const attemptsOf = db.prepare<[number], AttemptLogRow>(attemptsOfSql(positional('delivery')));
  const listStatements = new Map<string, Statement<ListParams, DeliveryLogRow>>();
  const listStatement = (f: ListFilter) => {
    const key = `${f.status ?? 'all'}|${f.requestId === undefined ? 'log' : 'request'}|${f.since !== undefined || f.until !== undefined ? 'window' : 'all'}`;
    let statement = listStatements.get(key);
    if (!statement) listStatements.set(key, (statement = db.prepare<ListParams, DeliveryLogRow>(listSql(f, (name) => `@${name}`, ROW_COLUMNS))));
    return statement;
  };
  const firstIdAtOrAfter = db.prepare<[number], { id: number; created_at: number }>('SELECT id, created_at FROM deliveries WHERE id >= ? ORDER BY id LIMIT 1');
  // Two subqueries: SQLite reads min() or max() from the end of the primary key only when it is
  // the query's one aggregate; `SELECT min(id), max(id)` reads the whole table.
  const idBounds = db.prepare<[], { lo: number | null; hi: number | null }>('SELECT (SELECT min(id) FROM deliveries) AS lo, (SELECT max(id) FROM deliveries) AS hi');
  const attemptCounts = db.prepare<{ org: string; from: number; to: number; bucket: number }, { bucket: number; succeeded: number; failed: number }>(ATTEMPT_COUNTS_SQL);
  const eventOf = db.prepare<[number], { event_seq: number; ordering_key: number }>(eventOfSql(positional('id')));
  const hasPendingDelivery = db.prepare<[number], unknown>(hasPendingDeliverySql(positional('seq')));
  const recoverable = db.prepare<{ from: number; to: number; org: string }, RecoverableRow>(recoverableSql('sqlite', named('from', 'to', 'org')));
  const retryFailedNow = db.prepare<{ now: number; org: string; from: number; to: number }>(retryFailedNowSql(named('now', 'org', 'from', 'to')));
  const countFreshChunk = db.prepare<{ org: string; after: number; limit: number }, { n: number; last: number | null }>(SQLITE_QUEUE_GAUGE_SQL.countFreshChunk);
  const countTriedChunk = db.prepare<{ org: string; after: number; limit: number }, { n: number; last: number | null }>(SQLITE_QUEUE_GAUGE_SQL.countTriedChunk);
  const oldestFresh = db.prepare<{ org: string }, { at: number }>(SQLITE_QUEUE_GAUGE_SQL.oldestFresh);
  const earliestRetry = db.prepare<{ org: string; now: number }, { at: number }>(SQLITE_QUEUE_GAUGE_SQL.earliestRetry);
  const countDueRetries = db.prepare<{ org: string; now: number; limit: number }, { n: number }>(SQLITE_QUEUE_GAUGE_SQL.countDueRetries);
  const recentFailure = db.prepare<{ org: string; status: DeliveryStatus; limit: number }, { at: number; code: number | null; error: string }>(SQLITE_QUEUE_GAUGE_SQL.recentFailure);
  const insertTestEvent = db.prepare<{ id: string; org: string; request: string; payload: string; now: number }, { seq: number }>(
    insertTestEventSql({ ...named('id', 'org', 'request', 'payload', 'now'), source: API_SOURCE_ID }),
  );
  const waitState = db.prepare<{ org: string; id: number }, WaitStateRow>(waitStateSql(named('org', 'id'), HELD_BACK_WHERE));
  const retryNow = db.prepare<{ now: number; org: string; id: number }>(retryNowSql(named('now', 'org', 'id')));

  return {
    insert(eventSeq: number, orgId: string, orderingKey: number, now: number): number {
      return Number(insertDelivery.run(eventSeq, orgId, orderingKey, now, now, now).lastInsertRowid);
    },
    insertMany(rows: readonly DeliveryToQueue[], now: number): void {
      for (const r of rows) insertDelivery.run(r.eventSeq, r.orgId, r.orderingKey, now, now, now);
    },
    /** One daemon per file, whose write transaction is the turn; the rate limits of `rateLimited` only, in the dispatcher's clock (`now`). */
    claimTurns(orgIds: readonly string[], now: number, rateLimited?: ReadonlySet<string>): Map<string, ClaimTurn> {
      const turns = new Map<string, ClaimTurn>();
      for (const id of orgIds) {
        const row = rateLimited?.has(id) ? rateOf.get(id) : undefined;
        turns.set(id, row === undefined || row.rate_limit === null ? ONLY_CLAIMER : { ...ONLY_CLAIMER, rate: { orgId: id, limit: row.rate_limit, window: rateWindowOf(row.rate_window), now } });
      }
      return turns;
    },
    dueRows(orgId: string, now: number, limit: number): DueRow[] {
      return dueStatement(limit).all({ org: orgId, now });
    },
    nextRetryAt(orgId: string, now: number): number | null {
      return nextRetry.get({ org: orgId, now })?.at ?? null;
    },
    markUnsendable(id: number, error: string, now: number): void {
      markUnsendable.run({ id, error, now });
    },
    /** One feed, in storage order: none is ever late; one daemon per file: nothing to fence. */
    lease(ids: readonly number[], until: number, now: number): Leased {
      for (const id of ids) lease.run(until, now, id);
      return LEASED_UNFENCED;
    },
    insertAttempts(attempts: readonly AttemptToStore[]): void {
      for (const a of attempts) insertAttempt.run(a.deliveryId, a.attempt, a.startedAt, a.durationMs, a.url, a.statusCode, a.errorClass, a.errorDetail, a.responseBody, a.outcome, a.sentTimestamp, a.sentSignature);
    },
    settle(id: number, s: Settlement): boolean {
      settle.run({ id, status: s.status, attempts: s.attempts, next: s.nextAttemptAt, at: s.at, code: s.statusCode, error: s.error });
      return true;
    },
    /** A prepared statement per delivery, as cheap as a batch here; none is ever superseded (one daemon per file). */
    settleMany(items: ReadonlyArray<{ readonly id: number; readonly settlement: Settlement }>): number[] {
      for (const { id, settlement: s } of items) settle.run({ id, status: s.status, attempts: s.attempts, next: s.nextAttemptAt, at: s.at, code: s.statusCode, error: s.error });
      return [];
    },
    release(ids: readonly number[], now: number): void {
      for (const id of ids) release.run(now, id);
    },
    get(orgId: string, id: number): DeliveryRow | null {
      const row = byId.get(orgId, id);
      return row ? toDeliveryRow(row) : null;
    },
    attempts(deliveryId: number): AttemptRow[] {
      return attemptsOf.all(deliveryId).map(toAttempt);
    },
    /** One statement per shape of filter (see listSql), prepared on first use. */
    list(orgId: string, f: ListFilter): DeliveryRow[] {
      return listStatement(f).all(listParams(orgId, f)).map(toDeliveryRow);
    },
    idsCreated(since: number | null, until: number | null): { from: number; to: number } {
      return keyRange(idBounds.get(), since, until, (id) => {
        const row = firstIdAtOrAfter.get(id);
        return row && { key: row.id, at: row.created_at };
      });
    },
    attemptCounts(orgId: string, from: number, to: number, bucketMs: number): AttemptCount[] {
      return attemptCounts.all({ org: orgId, from, to, bucket: bucketMs });
    },
    eventOf(deliveryId: number): { eventSeq: number; orderingKey: number } | null {
      const r = eventOf.get(deliveryId);
      return r ? { eventSeq: r.event_seq, orderingKey: r.ordering_key } : null;
    },
    hasPendingDelivery(eventSeq: number): boolean {
      return hasPendingDelivery.get(eventSeq) !== undefined;
    },
    recoverable(orgId: string, from: number, to: number) {
      return recoverable.all({ from, to, org: orgId }).map(toRecoverable);
    },
    retryFailedNow(orgId: string, from: number, to: number, now: number): number {
      return retryFailedNow.run({ now, org: orgId, from, to }).changes;
    },
    countDueRetries(orgId: string, now: number, max: number): number {
      return countDueRetries.get({ org: orgId, now, limit: max })?.n ?? 0;
    },
    countPendingChunk(orgId: string, kind: 'fresh' | 'tried', after: number, limit: number): { n: number; last: number } {
      const row = (kind === 'fresh' ? countFreshChunk : countTriedChunk).get({ org: orgId, after, limit });
      return { n: row?.n ?? 0, last: row?.last ?? after };
    },
    /** Two index lookups; a fresh delivery is due since it was queued. */
    oldestDueAt(orgId: string, now: number): number | null {
      return oldestDue(oldestFresh.get({ org: orgId })?.at ?? null, earliestRetry.get({ org: orgId, now })?.at ?? null, now);
    },
    recentFailure(orgId: string, window = RECENT_FAILURE_WINDOW): { at: number; statusCode: number | null; error: string } | null {
      return latestFailure(RECENT_FAILURE_STATUSES.map((status) => recentFailure.get({ org: orgId, status, limit: window })));
    },
    insertTestEvent(id: string, orgId: string, payload: string, now: number, requestId = ''): number {
      return insertTestEvent.get({ id, org: orgId, request: requestId, payload, now })!.seq;
    },
    waitState(orgId: string, id: number): DeliveryWaitState | null {
      const row = waitState.get({ org: orgId, id });
      return row ? toWaitState(row) : null;
    },
    retryNow(orgId: string, id: number, now: number): boolean {
      return retryNow.run({ now, org: orgId, id }).changes > 0;
    },
  };
}

import { keyRangeOf, keyRangeSql } from './key-range-sql.ts';
import { decodeRateWindow } from '../../domain/rate-window.ts';
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
  nextRetrySql,
  numbered,
  oldestDue,
  QUEUE_GAUGES,
  RECENT_FAILURE_STATUSES,
  RECENT_FAILURE_WINDOW,
  recoverableSql,
  retryFailedNowSql,
  retryNowSql,
  settleSet,
  waitStateSql,
} from '../sql.ts';
import type { AttemptCount, AttemptRow, AttemptToStore, ClaimTurn, DeliveryRow, DeliveryToQueue, DeliveryWaitState, Leased, ListFilter, Settlement } from '../values.ts';
import { listParams, listSql, type ListParams } from '../delivery-log-sql.ts';
import { toAttempt, toDeliveryRow, toRecoverable, toWaitState, type AttemptLogRow, type DeliveryLogRow, type DueRow, type RecoverableRow, type WaitStateRow } from '../row-mappers.ts';
import type { PgConnection } from './connection.ts';
import { createPgFeedRepo } from './feed-repo.ts';
import { PG_CLOCK_MS } from './webhooks-repo.ts';
import { withoutNul } from './text.ts';

/**
 * The deliveries repository on PostgreSQL, as ../sqlite/deliveries-repo.ts on SQLite: the same
 * queries (the same partial indexes, see migrations.ts), the same rows and answers, for a
 * database that several instances share. What the sharing adds:
 *
 * - **The claim turn.** SQLite's write lock made one claim at a time for the whole database;
 *   here each webhook is its own turn: claimTurns locks the organization's webhook row FOR
 *   UPDATE SKIP LOCKED, so instances claim for different webhooks side by side, and one that
 *   finds the row locked (another instance claiming, or recording that webhook's attempts)
 *   skips the webhook for this commit instead of waiting. Per-request ordering rests on it:
 *   the held-back rule (HELD_BACK) reads committed leases and retries, and two claims for one
 *   organization never run at once, so a request's later change is never leased while an
 *   earlier one is leased or failing, whichever instance holds it.
 * - **The per-webhook cap across instances.** claimTurns counts the organization's unexpired
 *   leases held by other instances (deliveries_org_leased: only leased rows), read in a
 *   statement after the lock was taken, so it sees every claim committed before ours.
 * - **Fencing.** lease() records the instance (leased_by) and adds one to the delivery's
 *   lease_epoch, whichever instance leases it; the epoch comes back with the lease and goes
 *   with the attempt. settle(), settleMany() and release() touch a delivery only in a
 *   statement that finds this instance its holder and, given the epoch (the dispatcher always
 *   gives it), the very lease the attempt ran under: an instance whose lease lapsed (it
 *   stalled, or lost the database for longer than the lease) and that ends its attempt after
 *   the delivery was leased again records its attempt in the log, but leaves the delivery's
 *   state to the newer lease, even when that newer lease is its own (the same instance.name
 *   after a restart, or its own claim of the lapsed lease). An outcome whose lease lapsed but
 *   that nobody leased since is applied: nobody else sent the delivery meanwhile. The checks
 *   are in the writing statement itself, so no claim can come between a check and its write.
 *   (Not sending on a lapsed lease in the first place is the dispatcher's side: see
 *   AttemptRunner.start.)
 */

/**
 * A change of the same request, in the same organization, that holds `d` back: one in flight
 * (leased), whenever it happened, or a pending one that happened earlier, by (order_at, id),
 * whether tried (waiting for its retry) or fresh (not sent yet, or held by the reorder window).
 * So a request never has two deliveries in flight, and its changes go out in the order they
 * happened, whichever instance's feed stored them first (on SQLite "earlier" is the
 * storage order, see ../sqlite/deliveries-repo.ts). Served by deliveries_request_pending (every
 * pending delivery of the request: a handful).
 */
const HELD_BACK_WHERE = `p.ordering_key = d.ordering_key AND p.org_id = d.org_id AND p.status = 'pending' AND p.id <> d.id
    AND (p.lease_expires_at IS NOT NULL OR (p.order_at, p.id) < (d.order_at, d.id))`;
const HELD_BACK = `SELECT 1 FROM deliveries p
  WHERE ${HELD_BACK_WHERE}`;
/**
 * The time a fresh delivery's release is compared with: the clock ($2), or the newest queue
 * time if the clock is behind it (stepped back, or another instance's clock ahead). A delivery
 * queued without a hold (a replay, a recovery, a test event; any with a window of 0) has its
 * queue time as release_at, so it is due at once whatever the clock says, as on SQLite; and a
 * clock stepped back holds nothing already released. One primary-key probe (the newest
 * delivery: created_at never decreases along the id, see FeedRepo.receivedAt), once per statement.
 */
const QUEUE_NOW = 'greatest($2::bigint, (SELECT n.created_at FROM deliveries n ORDER BY n.id DESC LIMIT 1))';
/**
 * Whether a due delivery holds back a later pending change of its request (those are left out
 * of the due rows): its end must bring its webhook another look (ClaimedDelivery.holdsBack).
 */
const HOLDS_BACK = `EXISTS (SELECT 1 FROM deliveries q
  WHERE q.ordering_key = d.ordering_key AND q.org_id = d.org_id AND q.status = 'pending' AND (q.order_at, q.id) > (d.order_at, d.id))`;
const ROW_COLUMNS = deliveryRowColumns('postgres');
/**
 * delivery.orderHold: a fresh change with a wait for its predecessor (hold_until, set at ingest
 * when its line names a previous_status and the hold is on) is due once the wait is over, or
 * once its request's latest change sent before it (by order_at, then id) has the status its
 * line names before it: its predecessor has gone out. Earlier changes still pending hold it
 * back anyway (HELD_BACK), so the latest one sent is the one to look at: one probe of
 * deliveries_request_sent, backwards, and only for the rare change whose wait is armed.
 */
const PREDECESSOR_SHOWN = `(d.hold_until IS NULL OR d.hold_until <= $2 OR d.previous_status = (SELECT s.change_status FROM deliveries s
        WHERE s.ordering_key = d.ordering_key AND s.org_id = d.org_id AND s.attempts > 0 AND (s.order_at, s.id) < (d.order_at, d.id)
        ORDER BY s.order_at DESC, s.id DESC LIMIT 1))`;

/**
 * The due rows of an organization ($1) at $2, at most $3: ../sqlite/deliveries-repo.ts's dueSql, in
 * PostgreSQL's words (exported for the EXPLAIN checks), but for two things: a fresh delivery
 * is due once released (release_at, the reorder window), read by release time through
 * deliveries_org_release, so that the window's held changes are never visited; and HELD_BACK
 * orders a request's changes by when they happened.
 */
export const PG_DUE_SQL = `
  SELECT d.id, d.org_id, d.ordering_key, d.attempts, e.id AS event_id, e.anticipation_request_id, e.occurred_at, e.payload,
    w.url, w.headers, w.client_certificate, w.oauth2, w.active_hmac::int AS active_hmac, w.secret, w.previous_secret, w.previous_secret_expires_at, e.traceparent, e.tracestate, ${HOLDS_BACK} AS holds_back
  FROM (
    (SELECT d.id FROM deliveries d
      WHERE d.org_id = $1 AND ${isFresh('d.')} AND d.release_at <= ${QUEUE_NOW}
        AND NOT EXISTS (${HELD_BACK}) AND ${PREDECESSOR_SHOWN}
      ORDER BY d.release_at, d.id LIMIT $3)
    UNION ALL
    (${dueRetriesSql(numbered('org', 'now', 'limit'), HELD_BACK)})
  ) c${dueJoinSql('postgres', numbered('org', 'now', 'limit'))}`;

/** The queue gauges' reads (see ../sql.ts's QUEUE_GAUGES), exported for the EXPLAIN checks. */
export const PG_QUEUE_GAUGE_SQL = {
  countFreshChunk: QUEUE_GAUGES.countFreshChunk(numbered('org', 'after', 'limit')),
  countTriedChunk: QUEUE_GAUGES.countTriedChunk(numbered('org', 'after', 'limit')),
  /** A fresh delivery is due once released (the reorder window): the first released one, by release time. */
  oldestFresh: `
    SELECT release_at AS at FROM deliveries
    WHERE org_id = $1 AND ${isFresh()} AND release_at <= ${QUEUE_NOW}
    ORDER BY release_at LIMIT 1`,
  /** The next release of a fresh delivery held by the reorder window (nextRetryAt). */
  nextRelease: `
    SELECT release_at AS at FROM deliveries
    WHERE org_id = $1 AND ${isFresh()} AND release_at > ${QUEUE_NOW}
    ORDER BY release_at LIMIT 1`,
  countDueRetries: QUEUE_GAUGES.countDueRetries(numbered('org', 'now', 'limit')),
  earliestRetry: QUEUE_GAUGES.earliestRetry(numbered('org', 'now')),
  recentFailure: QUEUE_GAUGES.recentFailure(numbered('org', 'status', 'limit')),
  /** claimTurns' counts: each organization's unexpired leases held by other instances. */
  leasedElsewhere: `
    SELECT org_id, count(*) AS n FROM deliveries
    WHERE org_id = ANY($1::text[]) AND status = 'pending' AND lease_expires_at IS NOT NULL AND lease_expires_at > $2 AND leased_by IS DISTINCT FROM $3
    GROUP BY org_id`,
} as const;

/**
 * claimTurns' locks: the webhooks' rows, in organization id order, skipping those another
 * transaction holds; with each, its rate limit, the deliveries it started lately (only when it
 * has a limit: null costs nothing to read) and the server's clock, which the rate windows are
 * kept in. Exported for the EXPLAIN checks.
 */
export const PG_CLAIM_TURNS_SQL = `
  SELECT org_id, status, rate_limit, CASE WHEN rate_limit IS NULL THEN NULL ELSE rate_window END AS rate_window, ${PG_CLOCK_MS} AS now
  FROM webhooks WHERE org_id = ANY($1::text[]) ORDER BY org_id FOR UPDATE SKIP LOCKED`;

interface PgTurnRow {
  org_id: string;
  status: string;
  rate_limit: number | null;
  rate_window: unknown[] | null;
  now: number;
}

/**
 * lease(): leases $1 until $2 at $3 for instance $4, one more epoch each, and returns each
 * delivery's new epoch with whether it is a first lease that comes after a later change of
 * its request was sent (exported for the EXPLAIN checks).
 */
export const PG_LEASE_SQL = `
  WITH late AS (
    SELECT d.id FROM deliveries d
    WHERE d.id = ANY($1::bigint[]) AND d.attempts = 0 AND d.leased_by IS NULL
      AND EXISTS (SELECT 1 FROM deliveries s
        WHERE s.ordering_key = d.ordering_key AND s.org_id = d.org_id AND s.attempts > 0 AND (s.order_at, s.id) > (d.order_at, d.id))
  ), leased AS (
    UPDATE deliveries SET lease_expires_at = $2, leased_by = $4, updated_at = $3, lease_epoch = lease_epoch + 1 WHERE id = ANY($1::bigint[])
    RETURNING id, lease_epoch
  )
  SELECT l.id, l.lease_epoch AS epoch, l.id IN (SELECT id FROM late) AS late FROM leased l`;

/** idsCreated's binary search over the delivery id, run by the server in one statement (see key-range-sql.ts). */
const ID_RANGE = keyRangeSql('deliveries', 'id', 'created_at');

/** attemptCounts, as on SQLite (see ../sqlite/deliveries-repo.ts) in PostgreSQL's words (FILTER, integer division), exported for the EXPLAIN checks. */
export const PG_ATTEMPT_COUNTS_SQL = `
  SELECT ((a.started_at - $2::bigint) / $4::bigint)::int AS bucket,
    count(*) FILTER (WHERE a.outcome = 'delivered')::int AS succeeded,
    count(*) FILTER (WHERE a.outcome <> 'delivered')::int AS failed
  FROM delivery_attempts a JOIN deliveries d ON d.id = a.delivery_id
  WHERE a.started_at >= $2::bigint AND a.started_at < $3::bigint AND d.org_id = $1
  GROUP BY 1 ORDER BY 1`;

/**
 * The delivery log's statement for a filter, as on SQLite (listSql), with its parameters
 * numbered in the order they first appear, and their values (exported for the EXPLAIN checks).
 */
export function pgListStatement(orgId: string, f: ListFilter): { sql: string; values: unknown[] } {
  const params = listParams(orgId, f);
  const used: Array<keyof ListParams> = [];
  const sql = listSql(f, (name) => `$${(used.includes(name) ? used.indexOf(name) : used.push(name) - 1) + 1}`, ROW_COLUMNS);
  return { sql, values: used.map((name) => params[name]) };
}

/**
 * settleMany: the batch's settlements as arrays unnested side by side ($1 to $7, and the
 * epochs their attempts were leased under, $9), each applied only while this instance ($8)
 * holds the delivery under that epoch (a null epoch: under any); answers the ids applied.
 */
const SETTLE_MANY = `UPDATE deliveries d SET ${settleSet({ status: 'u.status', attempts: 'u.attempts', next: 'u.next', at: 'u.at', code: 'u.code', error: 'u.error' })}
  FROM unnest($1::bigint[], $2::text[], $3::int[], $4::bigint[], $5::bigint[], $6::int[], $7::text[], $9::bigint[]) AS u (id, status, attempts, next, at, code, error, epoch)
  WHERE d.id = u.id AND d.leased_by = $8 AND (u.epoch IS NULL OR d.lease_epoch = u.epoch)
  RETURNING d.id`;
/** release(): the ids ($1) given back at $2, each only while this instance ($3) holds it under the epoch beside it ($4; null: any). */
const RELEASE = `UPDATE deliveries d SET lease_expires_at = NULL, updated_at = $2
  FROM unnest($1::bigint[], $4::bigint[]) AS u (id, epoch)
  WHERE d.id = u.id AND d.leased_by = $3 AND (u.epoch IS NULL OR d.lease_epoch = u.epoch)`;
const INSERT_ATTEMPTS = insertRowsSql('postgres', ATTEMPT_INSERT);
const ATTEMPTS_OF = attemptsOfSql(numbered('delivery'));
const EVENT_OF = eventOfSql(numbered('id'));
const HAS_PENDING_DELIVERY = hasPendingDeliverySql(numbered('seq'));
const INSERT_TEST_EVENT = insertTestEventSql(numbered('id', 'org', 'payload', 'now', 'source', 'request'));
const WAIT_STATE = waitStateSql(numbered('org', 'id'), HELD_BACK_WHERE);
const RETRY_NOW = retryNowSql(numbered('now', 'org', 'id'));

const nullableText = (text: string | null): string | null => (text === null ? null : withoutNul(text));

/** The deliveries repository of one transaction, for `instance` (its instance.name: the lease holder it writes and checks). */
export function createPgDeliveriesRepo(db: PgConnection, instance: string): DeliveriesRepo {
  const feed = createPgFeedRepo(db, instance);
  /** One statement for all; the rows not updated are those leased again since (see the fencing note above). */
  async function settleMany(items: ReadonlyArray<{ readonly id: number; readonly settlement: Settlement; readonly epoch?: number | null }>): Promise<number[]> {
    if (items.length === 0) return [];
    const { rows } = await db.query<{ id: number }>(
      SETTLE_MANY,
      [
        items.map((i) => i.id),
        items.map((i) => i.settlement.status),
        items.map((i) => i.settlement.attempts),
        items.map((i) => i.settlement.nextAttemptAt),
        items.map((i) => i.settlement.at),
        items.map((i) => i.settlement.statusCode),
        items.map((i) => nullableText(i.settlement.error)),
        instance,
        items.map((i) => i.epoch ?? null),
      ],
    );
    const applied = new Set(rows.map((r) => r.id));
    return items.filter((i) => !applied.has(i.id)).map((i) => i.id);
  }

  return {
    /** A replay or a test event: ordered by its queue time, due at once (see DeliveryToQueue). */
    async insert(eventSeq: number, orgId: string, orderingKey: number, now: number): Promise<number> {
      const { rows } = await db.query<{ id: number }>(
        `INSERT INTO deliveries (event_seq, org_id, ordering_key, status, next_attempt_at, created_at, updated_at, order_at, release_at)
         VALUES ($1, $2, $3, 'pending', $4, $4, $4, $4, $4) RETURNING id`,
        [eventSeq, orgId, orderingKey, now],
      );
      return rows[0]!.id;
    },
    /** One statement for the batch, ids handed out in its order. */
    async insertMany(list: readonly DeliveryToQueue[], now: number): Promise<void> {
      if (list.length === 0) return;
      await db.query(
        `INSERT INTO deliveries (event_seq, org_id, ordering_key, status, next_attempt_at, created_at, updated_at, order_at, release_at, change_status, previous_status, hold_until)
         SELECT u.seq, u.org, u.key, 'pending', $4::bigint, $4::bigint, $4::bigint, coalesce(u.order_at, $4::bigint), coalesce(u.release_at, $4::bigint), u.status, u.previous, u.hold_until
         FROM unnest($1::bigint[], $2::text[], $3::bigint[], $5::bigint[], $6::bigint[], $7::text[], $8::text[], $9::bigint[])
           WITH ORDINALITY AS u (seq, org, key, order_at, release_at, status, previous, hold_until, ordinality)
         ORDER BY u.ordinality`,
        [
          list.map((r) => r.eventSeq),
          list.map((r) => r.orgId),
          list.map((r) => r.orderingKey),
          now,
          list.map((r) => r.orderAt ?? null),
          list.map((r) => r.releaseAt ?? null),
          list.map((r) => (r.statuses ? withoutNul(r.statuses.status) : null)),
          list.map((r) => (r.statuses?.previous == null ? null : withoutNul(r.statuses.previous))),
          list.map((r) => r.holdUntil ?? null),
        ],
      );
    },
    /**
     * Two statements for all the organizations: the locks (in organization id order, so that
     * two instances' claims meet in one order), then the counts, which must be a statement of
     * their own (under READ COMMITTED a statement reads the snapshot taken when it starts; the
     * counts must see the claims committed by the transactions that held the locks just before).
     */
    async claimTurns(orgIds: readonly string[], now: number): Promise<Map<string, ClaimTurn>> {
      const turns = new Map<string, ClaimTurn>();
      if (orgIds.length === 0) return turns;
      const locked = await db.query<PgTurnRow>(PG_CLAIM_TURNS_SQL, [orgIds]);
      if (locked.rows.length > 0) {
        const { rows } = await db.query<{ org_id: string; n: number }>(PG_QUEUE_GAUGE_SQL.leasedElsewhere, [locked.rows.map((r) => r.org_id), now, instance]);
        const counts = new Map(rows.map((r) => [r.org_id, r.n]));
        for (const r of locked.rows) {
          const rate = r.rate_limit === null ? null : { orgId: r.org_id, limit: r.rate_limit, window: decodeRateWindow(r.rate_window ?? []), now: Number(r.now) };
          turns.set(r.org_id, { leasedElsewhere: counts.get(r.org_id) ?? 0, failing: r.status === 'failing', shared: true, ...(rate === null ? {} : { rate }) });
        }
      }
      // An organization left out is either held by another transaction or has no webhook at
      // all: the latter has nothing to claim, and gets its turn (its due rows are none), so that
      // it is reported drained rather than contended again and again.
      const missing = orgIds.filter((id) => !turns.has(id));
      if (missing.length > 0) {
        const { rows } = await db.query<{ org_id: string }>('SELECT org_id FROM webhooks WHERE org_id = ANY($1::text[])', [missing]);
        const exists = new Set(rows.map((r) => r.org_id));
        for (const id of missing) if (!exists.has(id)) turns.set(id, { leasedElsewhere: 0, failing: false, shared: true });
      }
      return turns;
    },
    async dueRows(orgId: string, now: number, limit: number): Promise<DueRow[]> {
      const { rows } = await db.query<DueRow>(PG_DUE_SQL, [orgId, now, Math.max(1, Math.trunc(limit))]);
      return rows;
    },
    /** The next retry or the next release of a change held by the reorder window, whichever comes first, in one statement. */
    async nextRetryAt(orgId: string, now: number): Promise<number | null> {
      const { rows } = await db.query<{ at: number | null }>(
        `SELECT least((${nextRetrySql(numbered('org', 'now'))}), (${PG_QUEUE_GAUGE_SQL.nextRelease})) AS at`,
        [orgId, now],
      );
      return rows[0]?.at ?? null;
    },
    async markUnsendable(id: number, error: string, now: number): Promise<void> {
      await db.query(markUnsendableSql(numbered('id', 'error', 'now')), [id, withoutNul(error), now]);
    },
    /**
     * One statement: the lease, and which of the deliveries leased for the first time (never
     * leased by anyone: leased_by is NULL) have a later change of their request that was already
     * sent (attempted at least once; deliveries_request_sent). Both read the rows as they were
     * before the statement (one snapshot), so the check sees no lease of its own.
     */
    async lease(ids: readonly number[], until: number, now: number): Promise<Leased> {
      if (ids.length === 0) return { epochs: new Map(), late: [] };
      const { rows } = await db.query<{ id: number; epoch: number; late: boolean }>(PG_LEASE_SQL, [ids, until, now, instance]);
      return { epochs: new Map(rows.map((r) => [r.id, r.epoch])), late: rows.filter((r) => r.late).map((r) => r.id) };
    },
    /** One statement for the batch; a NUL in a response body or an error becomes U+FFFD (PostgreSQL text cannot hold it). */
    async insertAttempts(attempts: readonly AttemptToStore[]): Promise<void> {
      if (attempts.length === 0) return;
      await db.query(
        INSERT_ATTEMPTS,
        [
          attempts.map((a) => a.deliveryId),
          attempts.map((a) => a.attempt),
          attempts.map((a) => a.startedAt),
          attempts.map((a) => a.durationMs),
          attempts.map((a) => withoutNul(a.url)),
          attempts.map((a) => a.statusCode),
          attempts.map((a) => nullableText(a.errorClass)),
          attempts.map((a) => nullableText(a.errorDetail)),
          attempts.map((a) => nullableText(a.responseBody)),
          attempts.map((a) => a.outcome),
          attempts.map((a) => a.sentTimestamp),
          attempts.map((a) => nullableText(a.sentSignature)),
        ],
      );
    },
    /** Only while this instance holds the lease (leased_by), under `epoch` when given: see the fencing note above. */
    async settle(id: number, s: Settlement, epoch: number | null = null): Promise<boolean> {
      return (await settleMany([{ id, settlement: s, epoch }])).length === 0;
    },
    settleMany,
    async release(ids: readonly number[], now: number, epochs?: ReadonlyArray<number | null>): Promise<void> {
      if (ids.length === 0) return;
      await db.query(RELEASE, [ids, now, instance, ids.map((_, i) => epochs?.[i] ?? null)]);
    },
    async get(orgId: string, id: number): Promise<DeliveryRow | null> {
      const { rows } = await db.query<DeliveryLogRow>(deliveryByIdSql('postgres', numbered('org', 'id')), [orgId, id]);
      return rows[0] === undefined ? null : toDeliveryRow(rows[0]);
    },
    async attempts(deliveryId: number): Promise<AttemptRow[]> {
      const { rows } = await db.query<AttemptLogRow>(ATTEMPTS_OF, [deliveryId]);
      return rows.map(toAttempt);
    },
    async list(orgId: string, f: ListFilter): Promise<DeliveryRow[]> {
      const { sql, values } = pgListStatement(orgId, f);
      const { rows } = await db.query<DeliveryLogRow>(sql, values);
      return rows.map(toDeliveryRow);
    },
    /** The binary search in one statement on the server (ID_RANGE). */
    async idsCreated(since: number | null, until: number | null): Promise<{ from: number; to: number }> {
      const { rows } = await db.query<{ k: number; low: number }>(ID_RANGE, [since ?? '-Infinity', until ?? 'Infinity']);
      return keyRangeOf(rows, 'idsCreated');
    },
    async attemptCounts(orgId: string, from: number, to: number, bucketMs: number): Promise<AttemptCount[]> {
      const { rows } = await db.query<AttemptCount>(PG_ATTEMPT_COUNTS_SQL, [orgId, from, to, bucketMs]);
      return rows;
    },
    async eventOf(deliveryId: number): Promise<{ eventSeq: number; orderingKey: number } | null> {
      const { rows } = await db.query<{ event_seq: number; ordering_key: number }>(EVENT_OF, [deliveryId]);
      return rows[0] === undefined ? null : { eventSeq: rows[0].event_seq, orderingKey: rows[0].ordering_key };
    },
    async hasPendingDelivery(eventSeq: number): Promise<boolean> {
      const { rows } = await db.query(HAS_PENDING_DELIVERY, [eventSeq]);
      return rows.length > 0;
    },
    async recoverable(orgId: string, from: number, to: number) {
      const { rows } = await db.query<RecoverableRow>(recoverableSql('postgres', numbered('from', 'to', 'org')), [from, to, orgId]);
      return rows.map(toRecoverable);
    },
    async retryFailedNow(orgId: string, from: number, to: number, now: number): Promise<number> {
      const { rowCount } = await db.query(retryFailedNowSql(numbered('now', 'org', 'from', 'to')), [now, orgId, from, to]);
      return rowCount ?? 0;
    },
    async countDueRetries(orgId: string, now: number, max: number): Promise<number> {
      const { rows } = await db.query<{ n: number }>(PG_QUEUE_GAUGE_SQL.countDueRetries, [orgId, now, max]);
      return rows[0]?.n ?? 0;
    },
    async countPendingChunk(orgId: string, kind: 'fresh' | 'tried', after: number, limit: number): Promise<{ n: number; last: number }> {
      const { rows } = await db.query<{ n: number; last: number | null }>(kind === 'fresh' ? PG_QUEUE_GAUGE_SQL.countFreshChunk : PG_QUEUE_GAUGE_SQL.countTriedChunk, [orgId, after, limit]);
      return { n: rows[0]?.n ?? 0, last: rows[0]?.last ?? after };
    },
    async oldestDueAt(orgId: string, now: number): Promise<number | null> {
      const fresh = (await db.query<{ at: number }>(PG_QUEUE_GAUGE_SQL.oldestFresh, [orgId, now])).rows[0]?.at ?? null;
      const retry = (await db.query<{ at: number }>(PG_QUEUE_GAUGE_SQL.earliestRetry, [orgId, now])).rows[0]?.at ?? null;
      return oldestDue(fresh, retry, now);
    },
    async recentFailure(orgId: string, window = RECENT_FAILURE_WINDOW): Promise<{ at: number; statusCode: number | null; error: string } | null> {
      const rows: Array<{ at: number; code: number | null; error: string } | undefined> = [];
      for (const status of RECENT_FAILURE_STATUSES) rows.push((await db.query<{ at: number; code: number | null; error: string }>(PG_QUEUE_GAUGE_SQL.recentFailure, [orgId, status, window])).rows[0]);
      return latestFailure(rows);
    },
    /**
     * The event's source is this instance's 'api' row (see migrations.ts: each instance makes
     * its own on first use, as the feed repository makes its sources: FeedRepo.sourceId).
     */
    async insertTestEvent(id: string, orgId: string, payload: string, now: number, requestId = ''): Promise<number> {
      const source = await feed.sourceId('api');
      const { rows } = await db.query<{ seq: number }>(INSERT_TEST_EVENT, [id, orgId, payload, now, source, withoutNul(requestId)]);
      return rows[0]!.seq;
    },
    async waitState(orgId: string, id: number): Promise<DeliveryWaitState | null> {
      const { rows } = await db.query<WaitStateRow>(WAIT_STATE, [orgId, id]);
      return rows[0] === undefined ? null : toWaitState(rows[0]);
    },
    async retryNow(orgId: string, id: number, now: number): Promise<boolean> {
      const { rowCount } = await db.query(RETRY_NOW, [now, orgId, id]);
      return (rowCount ?? 0) > 0;
    },
  };
}

/**
 * SQL written once for both backends: every statement that SQLite (sqlite/*-repo.ts) and
 * PostgreSQL (pg/*-repo.ts) say in the same words, as small functions of how each backend
 * spells a parameter (`?` or `@name` on SQLite, `$1` on PostgreSQL; see positional, named and
 * numbered). Where the backends part on one clause only, the function takes that clause from
 * the caller, or from a `Dialect` (as Kysely's dialects override only what differs). What only
 * one backend says, or says its own way, stays in its repository: the claim's held-back rule
 * (SQLite orders a request's changes by storage, PostgreSQL by when they happened), the order of
 * the fresh deliveries (queue order, release order), the locks and the lease holder, the feed's
 * per-instance rows, the batch reads and deletes.
 *
 * A parameter's spelling is the caller's, whole: SQLite's claim reads spell the organization
 * `+@org`, whose unary plus is deliberate (docs/benchmarks.md, "The claim planned once"), and
 * PostgreSQL adds a cast where a bare parameter would leave its type unknown (`$2::bigint`).
 * The plans are checked by test/store/delivery-queues.test.ts, test/services/status.test.ts and
 * test/store/pg-query-plans.test.ts.
 */
import { EVENT_TYPE } from '../domain/feed-event.ts';
import { ATTEMPT_COLUMNS, ORG_COLUMNS, REJECT_COLUMNS, ROLE_COLUMNS, USER_COLUMNS } from './row-mappers.ts';
import { DeliveryStatus } from './values.ts';

/** The backends, as the SQL they need differs. */
export type Dialect = 'sqlite' | 'postgres';

/** SQLite's named parameters: `named('org', 'now')` is `{ org: '@org', now: '@now' }`. */
export function named<K extends string>(...names: K[]): Record<K, string> {
  return Object.fromEntries(names.map((name) => [name, `@${name}`])) as Record<K, string>;
}

/** PostgreSQL's numbered parameters, in the order the values are passed: `numbered('org', 'now')` is `{ org: '$1', now: '$2' }`. */
export function numbered<K extends string>(...names: K[]): Record<K, string> {
  return Object.fromEntries(names.map((name, i) => [name, `$${i + 1}`])) as Record<K, string>;
}

/**
 * SQLite's positional parameters: `positional('org', 'id')` is `{ org: '?', id: '?' }`. The
 * values are passed in the order the statement's text names them (each statement's comment
 * says it where that is not the order of its parameters): no object to build per call, which
 * matters for the statements run per event.
 */
export function positional<K extends string>(...names: K[]): Record<K, string> {
  return Object.fromEntries(names.map((name) => [name, '?'])) as Record<K, string>;
}

// ---------------------------------------------------------------------------------------------
// Rows inserted in order: one prepared statement per row on SQLite (microseconds each, in
// process), one statement per batch on PostgreSQL (a round trip whatever the batch's size).

/** A column a row insert fills, with PostgreSQL's type; `perBatch`: one value for every row of the batch. */
export interface InsertColumn {
  readonly name: string;
  readonly type: 'text' | 'bigint' | 'int' | 'bytea';
  readonly perBatch?: true;
}

/** An INSERT of rows into `table` (see insertRowsSql). */
export interface RowsInsert {
  readonly table: string;
  readonly columns: readonly InsertColumn[];
  /** What a row that conflicts does (the rows inserted before it in the batch stay). */
  readonly onConflict?: string;
}

/**
 * The statement that inserts rows, written once for both backends. SQLite runs it per row, its
 * values `?` in column order. PostgreSQL runs it per batch: each column is passed as an array
 * ($1, $2, ... in column order; then the per-batch values, each once), the arrays unnested side
 * by side and inserted in the order given (WITH ORDINALITY), so that ids and seqs are handed
 * out in it, and a row conflicts with one inserted earlier in the same batch.
 */
export function insertRowsSql(dialect: Dialect, insert: RowsInsert): string {
  const names = insert.columns.map((c) => c.name).join(', ');
  const conflict = insert.onConflict === undefined ? '' : `\n  ${insert.onConflict}`;
  if (dialect === 'sqlite') return `INSERT INTO ${insert.table} (${names})\n  VALUES (${insert.columns.map(() => '?').join(', ')})${conflict}`;
  const arrays = insert.columns.filter((c) => c.perBatch !== true);
  const perBatch = insert.columns.filter((c) => c.perBatch === true);
  const values = insert.columns.map((c) => (c.perBatch === true ? `$${arrays.length + perBatch.indexOf(c) + 1}::${c.type}` : `u.${c.name}`));
  return `INSERT INTO ${insert.table} (${names})
  SELECT ${values.join(', ')}
  FROM unnest(${arrays.map((c, i) => `$${i + 1}::${c.type}[]`).join(', ')}) WITH ORDINALITY AS u (${arrays.map((c) => c.name).join(', ')}, ordinality)
  ORDER BY u.ordinality${conflict}`;
}

const text = (name: string): InsertColumn => ({ name, type: 'text' });
const bigint = (name: string): InsertColumn => ({ name, type: 'bigint' });
const int = (name: string): InsertColumn => ({ name, type: 'int' });

/** Events of a feed batch: the source and the time received are the batch's. An id stored before (or earlier in the batch) is skipped. */
export const EVENT_INSERT: RowsInsert = {
  table: 'events',
  columns: [
    text('id'),
    text('org_id'),
    text('anticipation_request_id'),
    bigint('occurred_at'),
    text('payload'),
    { name: 'source_id', type: 'bigint', perBatch: true },
    bigint('source_position'),
    { name: 'received_at', type: 'bigint', perBatch: true },
    text('traceparent'),
    text('tracestate'),
  ],
  onConflict: 'ON CONFLICT (id) DO NOTHING',
};

/** Quarantined lines, in line order (their ids are what `feed rejects` pages by). */
export const REJECT_INSERT: RowsInsert = {
  table: 'feed_rejects',
  columns: [text('source'), bigint('position'), bigint('line_bytes'), { name: 'raw', type: 'bytea' }, text('reason'), text('detail'), text('event_id'), bigint('received_at')],
};

/** The log rows of a group commit's attempts (AttemptToStore). */
export const ATTEMPT_INSERT: RowsInsert = {
  table: 'delivery_attempts',
  columns: [
    bigint('delivery_id'),
    int('attempt'),
    bigint('started_at'),
    bigint('duration_ms'),
    text('url'),
    int('status_code'),
    text('error_class'),
    text('error_detail'),
    text('response_body'),
    text('outcome'),
    bigint('sent_timestamp'),
    text('sent_signature'),
  ],
};

// ---------------------------------------------------------------------------------------------
// Organizations, roles and users: every statement the same in both backends. Ids and names are
// COLLATE "C" on PostgreSQL, so lists sort by bytes, as in SQLite.

export const ORG_SQL = {
  insert: (p: { id: string; name: string; createdAt: string }): string =>
    `INSERT INTO organizations (id, name, created_at) VALUES (${p.id}, ${p.name}, ${p.createdAt}) ON CONFLICT (id) DO NOTHING`,
  byId: (p: { id: string }): string => `SELECT ${ORG_COLUMNS} FROM organizations WHERE id = ${p.id}`,
  all: `SELECT ${ORG_COLUMNS} FROM organizations ORDER BY id`,
} as const;

export const ROLE_SQL = {
  all: `SELECT ${ROLE_COLUMNS} FROM roles ORDER BY name`,
  byName: (p: { name: string }): string => `SELECT ${ROLE_COLUMNS} FROM roles WHERE name = ${p.name}`,
  /** A custom role (`builtin` false: SQLite stores it as 0). */
  insert: (p: { name: string; description: string; permissions: string; now: string }): string =>
    `INSERT INTO roles (name, description, permissions, builtin, created_at) VALUES (${p.name}, ${p.description}, ${p.permissions}, false, ${p.now}) ON CONFLICT (name) DO NOTHING`,
} as const;

export const USER_SQL = {
  /** Answers the new user's id, or no row when the e-mail is taken in that organization. */
  insert: (p: { org: string; email: string; emailKey: string; role: string; createdAt: string; updatedAt: string }): string =>
    `INSERT INTO users (org_id, email, email_key, role_name, created_at, updated_at) VALUES (${p.org}, ${p.email}, ${p.emailKey}, ${p.role}, ${p.createdAt}, ${p.updatedAt})
    ON CONFLICT (org_id, email_key) DO NOTHING RETURNING id`,
  byEmail: (p: { org: string; emailKey: string }): string => `SELECT ${USER_COLUMNS} FROM users WHERE org_id = ${p.org} AND email_key = ${p.emailKey}`,
  byOrg: (p: { org: string }): string => `SELECT ${USER_COLUMNS} FROM users WHERE org_id = ${p.org} ORDER BY email_key`,
  setRole: (p: { role: string; now: string; id: string }): string => `UPDATE users SET role_name = ${p.role}, updated_at = ${p.now} WHERE id = ${p.id}`,
  remove: (p: { id: string }): string => `DELETE FROM users WHERE id = ${p.id}`,
  /**
   * Users of the organization, other than one, whose role grants the permission: an element of
   * the role's JSON array, which each backend reads its own way.
   */
  countOthersWithPermission: (dialect: Dialect, p: { org: string; except: string; permission: string }): string =>
    `SELECT count(*) AS n FROM users u JOIN roles r ON r.name = u.role_name
    WHERE u.org_id = ${p.org} AND u.id <> ${p.except} AND ${dialect === 'sqlite' ? `EXISTS (SELECT 1 FROM json_each(r.permissions) WHERE value = ${p.permission})` : `r.permissions::jsonb ? ${p.permission}`}`,
} as const;

// ---------------------------------------------------------------------------------------------
// Deliveries: the conditions of the partial indexes (see the migrations), which a query must
// repeat for SQLite to use the index. `t` is the table's alias with its dot ('d.'), or ''.

/** A pending delivery never tried and not leased: deliveries_org_fresh's condition. */
export const isFresh = (t = ''): string => `${t}status = 'pending' AND ${t}attempts = 0 AND ${t}lease_expires_at IS NULL`;
/** A pending delivery tried, or leased now: deliveries_org_due's condition. */
export const isTried = (t = ''): string => `${t}status = 'pending' AND (${t}attempts > 0 OR ${t}lease_expires_at IS NOT NULL)`;
/** deliveries_org_status's condition, written as the index has it (every delivery but the fresh ones). */
export const inStatusIndex = (t = ''): string => `(${t}status <> 'pending' OR ${t}attempts > 0 OR ${t}lease_expires_at IS NOT NULL)`;

/**
 * An event's type (`e`): a whole stored body names it; stored details are a status change's
 * (see storedBody). PostgreSQL casts to jsonb only for a whole body (CASE evaluates the branch
 * it takes).
 */
export const EVENT_TYPE_SQL: Readonly<Record<Dialect, string>> = {
  sqlite: `CASE WHEN substr(e.payload, 1, 1) = '{' THEN e.payload ->> '$.type' ELSE '${EVENT_TYPE}' END`,
  postgres: `CASE WHEN left(e.payload, 1) = '{' THEN e.payload::jsonb ->> 'type' ELSE '${EVENT_TYPE}' END`,
};

/** A delivery with its event's columns (`d`, `e`): the delivery log's row (rows.ts's DeliveryLogRow). */
export const deliveryRowColumns = (dialect: Dialect): string => `d.id, d.org_id, e.id AS event_id, ${EVENT_TYPE_SQL[dialect]} AS event_type, e.anticipation_request_id, d.status, d.attempts, d.next_attempt_at,
  d.last_attempt_at, d.last_status_code, d.last_error, d.created_at, d.updated_at, e.traceparent`;

/** One delivery of the organization, with its event's columns. */
export const deliveryByIdSql = (dialect: Dialect, p: { org: string; id: string }): string =>
  `SELECT ${deliveryRowColumns(dialect)} FROM deliveries d JOIN events e ON e.seq = d.event_seq WHERE d.org_id = ${p.org} AND d.id = ${p.id}`;

/**
 * The due query's second queue (DeliveriesRepo.dueRows): the organization's tried deliveries
 * due by `now` and not leased (or their lease lapsed), not held back (`heldBack`: each
 * backend's rule, a correlated subquery on `d`), by due time, read through deliveries_org_due.
 */
export const dueRetriesSql = (p: { org: string; now: string; limit: string }, heldBack: string): string => `SELECT d.id FROM deliveries d
        WHERE d.org_id = ${p.org} AND ${isTried('d.')} AND d.next_attempt_at <= ${p.now}
          AND (d.lease_expires_at IS NULL OR d.lease_expires_at <= ${p.now})
          AND NOT EXISTS (${heldBack})
        ORDER BY d.next_attempt_at, d.id LIMIT ${p.limit}`;

/**
 * The due query's end: the candidates' ids (`c`) joined to their event and webhook, the
 * disabled webhooks' left out (their deliveries stay pending), merged by (due time, id), a
 * fresh delivery counting as due now at the latest (`least`: SQLite's min, PostgreSQL's least).
 */
export const dueJoinSql = (dialect: Dialect, p: { now: string; limit: string }): string => `
  JOIN deliveries d ON d.id = c.id JOIN events e ON e.seq = d.event_seq JOIN webhooks w ON w.org_id = d.org_id
  WHERE w.status <> 'disabled'
  ORDER BY ${dialect === 'sqlite' ? 'min' : 'least'}(d.next_attempt_at, ${p.now}), d.id
  LIMIT ${p.limit}`;

/** The organization's earliest retry still to come (tried, not leased, due after `now`), from the front of deliveries_org_due. */
export const nextRetrySql = (p: { org: string; now: string }): string => `SELECT d.next_attempt_at AS at FROM deliveries d
    WHERE d.org_id = ${p.org} AND ${isTried('d.')} AND d.next_attempt_at > ${p.now}
      AND d.lease_expires_at IS NULL
    ORDER BY d.next_attempt_at LIMIT 1`;

/** A pending delivery that can never be sent becomes dead, with the reason. */
export const markUnsendableSql = (p: { id: string; error: string; now: string }): string => `
    UPDATE deliveries SET status = 'dead', lease_expires_at = NULL, last_error = ${p.error}, updated_at = ${p.now}
    WHERE id = ${p.id} AND status = 'pending'`;

/**
 * An attempt's outcome on its delivery (Settlement): the SET list of settle, whose rows each
 * backend names its own way (SQLite: a statement per delivery; PostgreSQL: the rows of a batch,
 * fenced by the lease holder). The lease ends with the attempt.
 */
export const settleSet = (p: { status: string; attempts: string; next: string; at: string; code: string; error: string }): string =>
  `status = ${p.status}, attempts = ${p.attempts}, next_attempt_at = ${p.next}, lease_expires_at = NULL,
      last_attempt_at = ${p.at}, last_status_code = ${p.code}, last_error = ${p.error}, updated_at = ${p.at}`;

/** A delivery's attempts, oldest first (delivery_attempts_delivery). */
export const attemptsOfSql = (p: { delivery: string }): string => `SELECT ${ATTEMPT_COLUMNS} FROM delivery_attempts WHERE delivery_id = ${p.delivery} ORDER BY id`;

/** The event a delivery sends, and its ordering key. */
export const eventOfSql = (p: { id: string }): string => `SELECT event_seq, ordering_key FROM deliveries WHERE id = ${p.id}`;

/** Whether the event has a pending delivery (deliveries_event). */
export const hasPendingDeliverySql = (p: { seq: string }): string => `SELECT 1 FROM deliveries WHERE event_seq = ${p.seq} AND status = 'pending' LIMIT 1`;

/**
 * A `webhook.test` event, from the source `api` (`source`: its id; SQLite has one, PostgreSQL
 * one per instance), occurred and received at `now`, part of no request. Answers its seq.
 */
export const insertTestEventSql = (p: { id: string; org: string; request: string; payload: string; now: string; source: string }): string => `
    INSERT INTO events (id, org_id, anticipation_request_id, occurred_at, payload, source_id, received_at)
    VALUES (${p.id}, ${p.org}, ${p.request}, ${p.now}, ${p.payload}, ${p.source}, ${p.now}) RETURNING seq`;

/**
 * Where a delivery (`d`) stands in its queue (DeliveriesRepo.waitState): its state, its lease,
 * the first delivery holding it back by the backend's rule (`heldBackWhere`, a condition on
 * `p` and `d`), and its webhook's status.
 */
export const waitStateSql = (p: { org: string; id: string }, heldBackWhere: string): string => `
    SELECT d.status, d.attempts, d.next_attempt_at, CASE WHEN d.lease_expires_at IS NULL THEN 0 ELSE 1 END AS leased, d.ordering_key,
      (SELECT p.id FROM deliveries p WHERE ${heldBackWhere} ORDER BY p.id LIMIT 1) AS held_by,
      (SELECT w.status FROM webhooks w WHERE w.org_id = d.org_id) AS webhook_status
    FROM deliveries d WHERE d.org_id = ${p.org} AND d.id = ${p.id}`;

/** Retry-now: a failed delivery (pending, attempted, not leased) becomes due now. */
export const retryNowSql = (p: { now: string; org: string; id: string }): string => `
    UPDATE deliveries SET next_attempt_at = ${p.now}, updated_at = ${p.now}
    WHERE id = ${p.id} AND org_id = ${p.org} AND status = 'pending' AND attempts > 0 AND lease_expires_at IS NULL`;

/**
 * Events of the organization in a seq range (a time window, see FeedRepo.seqRange) that were
 * never delivered and have no pending delivery: dead ones and undeliverable ones (no delivery at all).
 */
export const recoverableSql = (dialect: Dialect, p: { from: string; to: string; org: string }): string => `
    SELECT e.seq, e.id, e.org_id, e.anticipation_request_id, ${EVENT_TYPE_SQL[dialect]} AS type FROM events e
    WHERE e.seq >= ${p.from} AND e.seq < ${p.to} AND e.org_id = ${p.org}
      AND NOT EXISTS (SELECT 1 FROM deliveries d WHERE d.event_seq = e.seq AND d.status IN ('pending', 'delivered'))
    ORDER BY e.seq`;

/** Failed deliveries (pending, attempted) of events with seq in [from, to) become due now. */
export const retryFailedNowSql = (p: { now: string; org: string; from: string; to: string }): string => `
    UPDATE deliveries SET next_attempt_at = ${p.now}, updated_at = ${p.now}
    WHERE event_seq >= ${p.from} AND event_seq < ${p.to} AND org_id = ${p.org} AND status = 'pending' AND attempts > 0`;

/** How many of an organization's newest tried deliveries recentFailure() looks at, per status. */
export const RECENT_FAILURE_WINDOW = 2000;

/**
 * The reads behind the queue gauges (metrics, `hookrelay status`). Each reads one organization's
 * part of a partial index: the counts a chunk at a time (keyset on id), so that counting a
 * backlog of a million never holds the event loop for longer than one chunk (see
 * services/status.ts). The tried ones spell out deliveries_org_status's own condition: SQLite
 * uses a partial index only when the query repeats it, and would scan the table otherwise. The
 * earliest retry is the first unleased entry of deliveries_org_due. The latest failure is
 * looked for among the newest deliveries of one status, from the end of deliveries_org_status.
 * The oldest fresh delivery is each backend's own (SQLite: queue order; PostgreSQL: release).
 */
export const QUEUE_GAUGES = {
  countFreshChunk: (p: { org: string; after: string; limit: string }): string => `
    SELECT count(*) AS n, max(id) AS last FROM (SELECT id FROM deliveries
      WHERE org_id = ${p.org} AND ${isFresh()} AND id > ${p.after}
      ORDER BY id LIMIT ${p.limit}) c`,
  countTriedChunk: (p: { org: string; after: string; limit: string }): string => `
    SELECT count(*) AS n, max(id) AS last FROM (SELECT id FROM deliveries
      WHERE org_id = ${p.org} AND status = 'pending' AND ${inStatusIndex()} AND id > ${p.after}
      ORDER BY id LIMIT ${p.limit}) c`,
  /** Retries due and not leased, up to `limit`, from deliveries_org_due (whose condition it repeats). */
  countDueRetries: (p: { org: string; now: string; limit: string }): string => `
    SELECT count(*) AS n FROM (SELECT 1 FROM deliveries
      WHERE org_id = ${p.org} AND ${isTried()} AND next_attempt_at <= ${p.now}
        AND lease_expires_at IS NULL
      LIMIT ${p.limit}) c`,
  earliestRetry: (p: { org: string; now: string }): string => `
    SELECT next_attempt_at AS at FROM deliveries
    WHERE org_id = ${p.org} AND ${isTried()}
      AND (lease_expires_at IS NULL OR lease_expires_at <= ${p.now})
    ORDER BY next_attempt_at LIMIT 1`,
  recentFailure: (p: { org: string; status: string; limit: string }): string => `
    SELECT at, code, error FROM (SELECT last_attempt_at AS at, last_status_code AS code, last_error AS error FROM deliveries
      WHERE org_id = ${p.org} AND status = ${p.status} AND ${inStatusIndex()} AND last_error IS NOT NULL AND last_attempt_at IS NOT NULL
      ORDER BY id DESC LIMIT ${p.limit}) c
    ORDER BY at DESC LIMIT 1`,
} as const;

/**
 * When the organization's oldest due delivery became due (epoch ms), from the two gauge reads:
 * its oldest fresh one (due since queued, or released), or its earliest retry if that is due
 * by `now`; null when none is due.
 */
export function oldestDue(fresh: number | null, retry: number | null, now: number): number | null {
  const due = retry !== null && retry <= now ? retry : null;
  if (fresh === null) return due;
  return due === null ? fresh : Math.min(fresh, due);
}

/** The statuses recentFailure reads (QUEUE_GAUGES.recentFailure once for each): tried pending deliveries, then dead ones. */
export const RECENT_FAILURE_STATUSES: readonly DeliveryStatus[] = [DeliveryStatus.pending, DeliveryStatus.dead];

/** The latest of the failures read for each status (see RECENT_FAILURE_STATUSES), or null when none was found. */
export function latestFailure(rows: ReadonlyArray<{ at: number; code: number | null; error: string } | undefined>): { at: number; statusCode: number | null; error: string } | null {
  let best: { at: number; code: number | null; error: string } | undefined;
  for (const row of rows) if (row && (best === undefined || row.at > best.at)) best = row;
  return best ? { at: best.at, statusCode: best.code, error: best.error } : null;
}

// ---------------------------------------------------------------------------------------------
// Webhooks: how an attempt's outcome moves a webhook's status. `t` is the table's alias with its
// dot ('w.': PostgreSQL's UPDATE joins the row as it was, whose columns have the same names).

/** A successful attempt: the failure count starts again, and a failing webhook is active again (a disabled one stays disabled). */
export const recordSuccessSet = (t: string, p: { now: string }): string => `consecutive_failures = 0, failing_since = NULL, last_success_at = ${p.now},
      status = CASE WHEN ${t}status = 'disabled' THEN ${t}status ELSE 'active' END`;

/**
 * The failing/disabled rule, for a failed attempt: `failing` after `failingAfter` failures in a
 * row, `disabled` (why: failing_too_long) once failing for `disableAfter` ms.
 */
export const recordFailureSet = (t: string, p: { now: string; failingAfter: string; disableAfter: string }): string => `consecutive_failures = ${t}consecutive_failures + 1, failing_since = coalesce(${t}failing_since, ${p.now}),
      status = CASE
        WHEN ${t}status = 'disabled' THEN ${t}status
        WHEN ${p.now} - coalesce(${t}failing_since, ${p.now}) >= ${p.disableAfter} THEN 'disabled'
        WHEN ${t}consecutive_failures + 1 >= ${p.failingAfter} THEN 'failing'
        ELSE ${t}status END,
      disabled_reason = CASE
        WHEN ${t}status <> 'disabled' AND ${p.now} - coalesce(${t}failing_since, ${p.now}) >= ${p.disableAfter} THEN 'failing_too_long'
        ELSE ${t}disabled_reason END`;

/** A status set by hand (and why it is disabled): back to active clears the failure count. */
export const setStatusSet = (t: string, p: { status: string; reason: string; now: string }): string => `status = ${p.status}, disabled_reason = ${p.reason}, updated_at = ${p.now},
      consecutive_failures = CASE WHEN ${p.status} = 'active' THEN 0 ELSE ${t}consecutive_failures END,
      failing_since = CASE WHEN ${p.status} = 'active' THEN NULL ELSE ${t}failing_since END`;

/**
 * Creates or replaces the organization's one webhook (`values`: org_id, url, active_hmac,
 * headers, secret, status, rate_limit, created_at, updated_at, client_certificate,
 * client_certificate_sealed, oauth2, oauth2_secret_sealed).
 */
export const upsertWebhookSql = (values: string): string => `
    INSERT INTO webhooks (org_id, url, active_hmac, headers, secret, status, rate_limit, created_at, updated_at,
      client_certificate, client_certificate_sealed, oauth2, oauth2_secret_sealed)
    VALUES (${values})
    ON CONFLICT (org_id) DO UPDATE SET
      url = excluded.url, active_hmac = excluded.active_hmac, headers = excluded.headers, secret = excluded.secret, rate_limit = excluded.rate_limit,
      client_certificate = excluded.client_certificate, client_certificate_sealed = excluded.client_certificate_sealed,
      oauth2 = excluded.oauth2, oauth2_secret_sealed = excluded.oauth2_secret_sealed,
      status = 'active', disabled_reason = NULL, consecutive_failures = 0, failing_since = NULL,
      updated_at = excluded.updated_at`;

/** The current secret becomes the previous one (SET reads the row as it was: previous_secret takes the secret being replaced). */
export const rotateSecretSql = (p: { org: string; secret: string; expires: string; now: string }): string => `
    UPDATE webhooks SET previous_secret = secret, previous_secret_expires_at = ${p.expires}, secret = ${p.secret}, updated_at = ${p.now}
    WHERE org_id = ${p.org}`;

/** The webhooks that may receive deliveries now (rows.ts's toDeliverable). */
export const DELIVERABLE_SQL = "SELECT org_id, status, last_success_at, rate_limit FROM webhooks WHERE status <> 'disabled' ORDER BY org_id";

/** The rate limit's state (RateWindow, in each backend's form: JSON text in SQLite, bigint[] in PostgreSQL). */
export const setRateWindowSql = (p: { window: string; org: string }): string => `UPDATE webhooks SET rate_window = ${p.window} WHERE org_id = ${p.org}`;

/** Until when the previous secret keeps signing (null: never rotated). */
export const previousSecretExpiresAtSql = (p: { org: string }): string =>
  `SELECT previous_secret_expires_at AS at FROM webhooks WHERE org_id = ${p.org} AND previous_secret IS NOT NULL`;

// ---------------------------------------------------------------------------------------------
// Feed and retention.

/** Events never queued for delivery (their organization had no webhook), per organization. */
export const UNDELIVERABLE_SQL = `
    SELECT org_id, count(*) AS events FROM events e
    WHERE NOT EXISTS (SELECT 1 FROM deliveries d WHERE d.event_seq = e.seq)
    GROUP BY org_id ORDER BY org_id`;

/** The newest row of each table a prune may touch, and the oldest event (rows.ts's toNewest). */
export const NEWEST_SQL = `
    SELECT (SELECT min(seq) FROM events) AS oldest_seq, (SELECT max(seq) FROM events) AS seq, (SELECT max(id) FROM deliveries) AS delivery_id,
      (SELECT max(id) FROM delivery_attempts) AS attempt_id, (SELECT max(id) FROM feed_rejects) AS reject_id`;

/**
 * Whether event `e` may go: every delivery of it was delivered before the cutoff (none pending:
 * fresh, failing, leased or held behind a disabled webhook; none dead), none is the newest
 * delivery or holds the newest attempt (see PruneBounds), and there is at least one (an event without
 * a delivery is kept: `deliveries recover` can still queue it).
 */
export const prunableSql = (p: { cutoff: string; newestDelivery: string; newestAttempt: string }): string => `EXISTS (SELECT 1 FROM deliveries d WHERE d.event_seq = e.seq)
  AND NOT EXISTS (SELECT 1 FROM deliveries d WHERE d.event_seq = e.seq
    AND (d.status <> 'delivered' OR d.updated_at >= ${p.cutoff} OR d.id >= ${p.newestDelivery}
      OR EXISTS (SELECT 1 FROM delivery_attempts a WHERE a.delivery_id = d.id AND a.id >= ${p.newestAttempt})))`;

/**
 * A window of up to `limit` events in seq order (a primary-key range), each with whether it may
 * go (prunableSql): a batch reads at most `limit` events, however many of them are kept.
 */
export const pruneWindowSql = (p: { after: string; before: string; cutoff: string; newestDelivery: string; newestAttempt: string; limit: string }): string => `
    SELECT e.seq, ${prunableSql(p)} AS prunable FROM events e
    WHERE e.seq > ${p.after} AND e.seq < ${p.before}
    ORDER BY e.seq LIMIT ${p.limit}`;

/** A page of quarantined lines after an id, oldest first. */
export const listRejectsSql = (p: { after: string; limit: string }): string => `SELECT ${REJECT_COLUMNS} FROM feed_rejects WHERE id > ${p.after} ORDER BY id LIMIT ${p.limit}`;

/**
 * Removes up to `limit` quarantined lines received before the cutoff, never the newest one:
 * oldest first, ties by id, the order of feed_rejects_received (whose entries end with the id).
 */
export const pruneRejectsSql = (p: { cutoff: string; newest: string; limit: string }): string => `
    DELETE FROM feed_rejects WHERE id IN (
      SELECT id FROM feed_rejects WHERE received_at < ${p.cutoff} AND id < ${p.newest} ORDER BY received_at, id LIMIT ${p.limit})`;

/** How many quarantined lines a prune would remove: received before the cutoff, never the newest one. */
export const countRejectsSql = (p: { cutoff: string; newest: string }): string => `SELECT count(*) AS n FROM feed_rejects WHERE received_at < ${p.cutoff} AND id < ${p.newest}`;

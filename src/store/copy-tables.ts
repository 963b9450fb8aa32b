/**
 * What `hookrelay db copy` copies (copy.ts): each table with SQLite's columns and PostgreSQL's
 * types, what the target must not hold, and the statement that inserts a chunk of rows.
 */
export type ColumnType = 'text' | 'bigint' | 'integer' | 'boolean' | 'bytea' | 'jsonb';

export interface Column {
  readonly name: string;
  readonly type: ColumnType;
  /** What SQLite's SELECT reads for it instead of the column (deliveries' lease: NULL). */
  readonly select?: string;
}

export interface TableSpec {
  readonly table: string;
  /** Every column of SQLite's table, in the order of its schema (checked against PRAGMA table_info). */
  readonly columns: readonly Column[];
  /** SQLite's order of reading (the key): rows are inserted in it. */
  readonly orderBy: string;
  /** Which of SQLite's rows are copied (roles: the custom ones), as a condition for both databases. */
  readonly where?: { readonly sqlite: string; readonly pg: string };
  /** PostgreSQL's table has `instance`, set to the instance copied for. */
  readonly instance?: boolean;
  /** Columns PostgreSQL has and SQLite has not, besides `instance`, left to their default. */
  readonly pgOnly?: readonly string[];
  /**
   * Columns both have that are not copied, left to PostgreSQL's default: passing state that
   * means nothing once copied (the rate limit's window, the starts of the last second).
   */
  readonly notCopied?: readonly string[];
  /** The identity column, moved past the largest value copied. */
  readonly identity?: string;
}

const text = (name: string): Column => ({ name, type: 'text' });
const bigint = (name: string): Column => ({ name, type: 'bigint' });
const integer = (name: string): Column => ({ name, type: 'integer' });

/**
 * The tables, in the order their foreign keys need, with SQLite's columns as its latest schema
 * (sqlite/migrations.ts, version 8) has them and PostgreSQL's types (pg/migrations.ts).
 */
export const TABLES: readonly TableSpec[] = [
  { table: 'organizations', columns: [text('id'), text('name'), bigint('created_at')], orderBy: 'id' },
  {
    table: 'roles',
    columns: [text('name'), text('description'), text('permissions'), { name: 'builtin', type: 'boolean' }, bigint('created_at')],
    orderBy: 'name',
    where: { sqlite: 'builtin = 0', pg: 'NOT builtin' },
  },
  {
    table: 'users',
    columns: [bigint('id'), text('org_id'), text('email'), text('email_key'), text('role_name'), bigint('created_at'), bigint('updated_at')],
    orderBy: 'id',
    identity: 'id',
  },
  {
    table: 'webhooks',
    columns: [
      text('org_id'),
      text('url'),
      { name: 'active_hmac', type: 'boolean' },
      text('secret'),
      text('status'),
      bigint('created_at'),
      bigint('updated_at'),
      text('previous_secret'),
      bigint('previous_secret_expires_at'),
      integer('consecutive_failures'),
      bigint('failing_since'),
      bigint('last_success_at'),
      text('disabled_reason'),
      integer('rate_limit'),
      // JSON text in SQLite, jsonb in PostgreSQL: sent as text, parsed by the cast.
      { name: 'headers', type: 'jsonb' },
      // Receiver authentication: copied as they are, sealed secrets included (they open with
      // the same key-encryption key, which goes with the database: docs/operations.md).
      text('client_certificate'),
      text('client_certificate_sealed'),
      text('oauth2'),
      text('oauth2_secret_sealed'),
    ],
    notCopied: ['rate_window'],
    orderBy: 'org_id',
    // Counted from the copy on (SQLite never sends a change out of order).
    pgOnly: ['out_of_order_deliveries'],
  },
  { table: 'feed_sources', columns: [bigint('id'), text('name')], orderBy: 'id', instance: true, identity: 'id' },
  {
    table: 'events',
    columns: [
      bigint('seq'),
      text('id'),
      text('org_id'),
      text('anticipation_request_id'),
      bigint('occurred_at'),
      text('payload'),
      bigint('source_id'),
      bigint('source_position'),
      bigint('received_at'),
      text('traceparent'),
      text('tracestate'),
    ],
    orderBy: 'seq',
    identity: 'seq',
  },
  { table: 'legacy_event_ids', columns: [bigint('before_seq')], orderBy: 'rowid' },
  {
    table: 'deliveries',
    columns: [
      bigint('id'),
      bigint('event_seq'),
      text('org_id'),
      bigint('ordering_key'),
      text('status'),
      integer('attempts'),
      bigint('next_attempt_at'),
      { name: 'lease_expires_at', type: 'bigint', select: 'NULL' },
      bigint('last_attempt_at'),
      integer('last_status_code'),
      text('last_error'),
      bigint('created_at'),
      bigint('updated_at'),
    ],
    orderBy: 'id',
    // The lease holder and the lease's epoch (0: never leased here); the place in the
    // request's order and the release time, which BACKFILL_DELIVERY_ORDER gives the pending
    // rows once copied; the statuses and the wait for a predecessor, none (see pg/migrations.ts,
    // 7 and 10).
    pgOnly: ['leased_by', 'lease_epoch', 'order_at', 'release_at', 'change_status', 'previous_status', 'hold_until'],
    identity: 'id',
  },
  {
    table: 'delivery_attempts',
    columns: [
      bigint('id'),
      bigint('delivery_id'),
      integer('attempt'),
      bigint('started_at'),
      bigint('duration_ms'),
      text('url'),
      integer('status_code'),
      text('error_class'),
      text('error_detail'),
      text('response_body'),
      text('outcome'),
      bigint('sent_timestamp'),
      text('sent_signature'),
    ],
    orderBy: 'id',
    identity: 'id',
  },
  {
    table: 'feed_rejects',
    columns: [
      bigint('id'),
      text('source'),
      bigint('position'),
      bigint('line_bytes'),
      { name: 'raw', type: 'bytea' },
      text('reason'),
      text('detail'),
      text('event_id'),
      bigint('received_at'),
    ],
    orderBy: 'id',
    identity: 'id',
  },
  {
    table: 'feed_positions',
    columns: [
      text('source'),
      text('dev'),
      text('ino'),
      text('fingerprint'),
      integer('fingerprint_bytes'),
      bigint('position'),
      bigint('updated_at'),
      text('tail_fingerprint'),
    ],
    orderBy: 'source',
    instance: true,
  },
  {
    table: 'feed_stats',
    columns: [text('source'), bigint('accepted'), bigint('duplicates'), bigint('quarantined'), bigint('updated_at')],
    orderBy: 'source',
    instance: true,
  },
  {
    // The audit chain, its ids and hashes as they are (the copy appends its own db.copy entry
    // after them). audit_journal is not copied: each instance logs the entries itself.
    table: 'audit_entries',
    columns: [
      bigint('id'),
      bigint('at'),
      ...['actor_kind', 'actor_name', 'actor_org', 'action', 'org_id', 'target', 'changes', 'request_id', 'source', 'outcome', 'code', 'prev_hash', 'hash'].map(text),
    ],
    orderBy: 'id',
  },
  {
    // API keys (SQLite 15, PostgreSQL 9): hashes and public prefixes only, as stored.
    table: 'api_keys',
    columns: [
      bigint('id'),
      ...['org_id', 'name', 'role_name', 'prefix', 'hash'].map(text),
      bigint('created_at'),
      text('created_by'),
      ...['expires_at', 'last_used_at', 'revoked_at'].map(bigint),
    ],
    orderBy: 'id',
    identity: 'id',
  },
];

/** What the target must not hold (the built-in roles its migration made are expected). */
const MUST_BE_EMPTY: ReadonlyArray<readonly [what: string, rows: string]> = [
  ['organizations', 'SELECT 1 FROM organizations'],
  ['users', 'SELECT 1 FROM users'],
  ['webhooks', 'SELECT 1 FROM webhooks'],
  ['custom roles', 'SELECT 1 FROM roles WHERE NOT builtin'],
  ['events', 'SELECT 1 FROM events'],
  ['legacy event ids', 'SELECT 1 FROM legacy_event_ids'],
  ['deliveries', 'SELECT 1 FROM deliveries'],
  ['delivery attempts', 'SELECT 1 FROM delivery_attempts'],
  ['feed sources', 'SELECT 1 FROM feed_sources'],
  ['quarantined lines', 'SELECT 1 FROM feed_rejects'],
  ['feed positions', 'SELECT 1 FROM feed_positions'],
  ['feed statistics', 'SELECT 1 FROM feed_stats'],
  ['audit entries', 'SELECT 1 FROM audit_entries'],
  ['API keys', 'SELECT 1 FROM api_keys'],
];
export const WHAT_IS_THERE = MUST_BE_EMPTY.map(([what, rows]) => `SELECT '${what}' AS what WHERE EXISTS (${rows})`).join('\nUNION ALL ');

const PG_ARRAY_TYPE: Readonly<Record<ColumnType, string>> = { text: 'text[]', bigint: 'bigint[]', integer: 'int[]', boolean: 'boolean[]', bytea: 'bytea[]', jsonb: 'jsonb[]' };
export const quoted = (name: string): string => `"${name}"`;

/** The insert of one chunk: the columns as arrays, unnested side by side, inserted in their order; `instance` last, when the table has it. */
export function insertSql(spec: TableSpec): string {
  const names = spec.columns.map((c) => quoted(c.name));
  const arrays = spec.columns.map((c, i) => `$${i + 1}::${PG_ARRAY_TYPE[c.type]}`);
  const targets = spec.instance ? [...names, 'instance'] : names;
  const values = names.map((n) => `u.${n}`);
  if (spec.instance) values.push(`$${spec.columns.length + 1}::text`);
  return `INSERT INTO ${quoted(spec.table)} (${targets.join(', ')})
    SELECT ${values.join(', ')}
    FROM unnest(${arrays.join(', ')}) WITH ORDINALITY AS u (${names.join(', ')}, copy_order)
    ORDER BY u.copy_order`;
}

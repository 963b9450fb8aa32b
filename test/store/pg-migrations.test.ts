/**
 * The PostgreSQL backend's foundations against a real server (test/helpers/pg-harness.ts): the pool
 * (how a database URL is read, TLS as the URL asks, bigint as numbers, no password in
 * anything shown) and the migrations (the schema of SQLite version 8 for several instances,
 * applied once under an advisory lock, refused on a database newer than the code).
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer, connect as connectTcp, type AddressInfo, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, test, type TestContext } from 'node:test';
import { TLSSocket } from 'node:tls';
import { inspect } from 'node:util';
import pg, { type Pool } from 'pg';
import { createTls } from '../../scripts/receiver-control.ts';
import { ErrorCode, HookrelayError } from '../../src/domain/errors.ts';
import { PG_ATTEMPT_COUNTS_SQL } from '../../src/store/pg/deliveries-repo.ts';
import { PG_MIGRATIONS, PG_SCHEMA_VERSION, migratePostgres } from '../../src/store/pg/migrations.ts';
import { bigintAsNumber, createPgPool, loggableDatabaseUrl, parseDatabaseUrl, SslMode, tlsPlan, type PgPoolOptions } from '../../src/store/pg/pool.ts';
import { pgServer, stopPgServer, type PgTestServer } from '../helpers/pg-harness.ts';

after(stopPgServer);

/** A pool on `url`, ended when the test ends. */
function poolFor(t: TestContext, url: string, options: PgPoolOptions = {}): Pool {
  const pool = createPgPool(url, options);
  t.after(() => pool.end());
  return pool;
}

/** A pool on a fresh, empty database. */
async function freshDatabase(t: TestContext): Promise<{ server: PgTestServer; url: string; pool: Pool }> {
  const server = await pgServer();
  const url = await server.createDatabase();
  return { server, url, pool: poolFor(t, url) };
}

/** The password in a URL of the test server, as given there and as it would appear encoded. */
/** Brings an empty database to schema `version` as the hookrelay of that version left it (its first migrations, recorded). */
async function migrateTo(pool: Pool, version: number): Promise<void> {
  await pool.query('CREATE TABLE hookrelay_schema (version integer PRIMARY KEY, applied_at bigint NOT NULL)');
  for (const [i, sql] of PG_MIGRATIONS.slice(0, version).entries()) {
    await pool.query(sql);
    await pool.query('INSERT INTO hookrelay_schema (version, applied_at) VALUES ($1, 0)', [i + 1]);
  }
}

function passwordForms(url: string): string[] {
  const encoded = new URL(url).password;
  return [decodeURIComponent(encoded), encoded];
}

function assertNoPassword(text: string, url: string): void {
  for (const form of passwordForms(url)) assert.ok(!text.includes(form), `${text} shows the password`);
}

/** The SQLSTATE (and constraint) a rejected statement failed with. */
async function sqlState(promise: Promise<unknown>): Promise<{ code: string | undefined; constraint: string | undefined }> {
  try {
    await promise;
  } catch (err) {
    const e = err as pg.DatabaseError;
    return { code: e.code, constraint: e.constraint };
  }
  assert.fail('the statement was accepted');
}

describe('database URLs (pure)', () => {
  const configError = (url: string, message: RegExp) =>
    assert.throws(
      () => parseDatabaseUrl(url),
      (err: unknown) => {
        assert.ok(err instanceof HookrelayError);
        assert.equal(err.code, ErrorCode.config);
        assert.match(err.message, message);
        assert.ok(!err.message.includes('s3cret'), err.message);
        return true;
      },
    );

  test('every part is read and percent-decoded; the password is behind a function that nothing prints', () => {
    const settings = parseDatabaseUrl(
      'postgresql://hook%40relay:s3cret%3A%40%2F@db.example.com:6543/hook%20db?sslmode=verify-full&sslrootcert=/etc/hookrelay/ca.pem&connect_timeout=7&options=-c%20search_path%3Dhookrelay',
    );
    assert.deepEqual(
      { ...settings, password: settings.password?.() },
      {
        host: 'db.example.com',
        port: 6543,
        user: 'hook@relay',
        database: 'hook db',
        sslmode: SslMode.verifyFull,
        sslrootcert: '/etc/hookrelay/ca.pem',
        connectTimeoutMs: 7000,
        options: '-c search_path=hookrelay',
        password: 's3cret:@/',
      },
    );
    assert.ok(!JSON.stringify(settings).includes('s3cret'));
    assert.ok(!inspect(settings, { depth: 5 }).includes('s3cret'));
  });

  test('missing parts default as libpq (but localhost over TCP): port 5432, database named after the user, sslmode=prefer', () => {
    const settings = parseDatabaseUrl('postgres://relay@db');
    assert.equal(settings.host, 'db');
    assert.equal(settings.port, 5432);
    assert.equal(settings.database, 'relay');
    assert.equal(settings.sslmode, SslMode.prefer);
    assert.equal(settings.sslrootcert, null);
    assert.equal(settings.connectTimeoutMs, null);
    assert.equal(settings.password, undefined);
    assert.equal(parseDatabaseUrl('postgres://relay@/hookrelay').host, 'localhost');
    assert.equal(parseDatabaseUrl('postgres:///hookrelay').host, 'localhost');
    assert.equal(loggableDatabaseUrl('postgres://relay:s3cret@/hookrelay'), 'postgres://relay@localhost/hookrelay');
    assert.equal(parseDatabaseUrl('postgres://relay@[::1]:5433/hookrelay').host, '::1');
    // connect_timeout as libpq: 0 waits forever, 1 counts as 2 seconds.
    assert.equal(parseDatabaseUrl('postgres://relay@db/h?connect_timeout=0').connectTimeoutMs, 0);
    assert.equal(parseDatabaseUrl('postgres://relay@db/h?connect_timeout=1').connectTimeoutMs, 2000);
    // sslrootcert=system means verify-full unless said otherwise (libpq 16).
    assert.equal(parseDatabaseUrl('postgres://relay@db/h?sslrootcert=system').sslmode, SslMode.verifyFull);
  });

  test('a Unix socket directory (host=) never uses TLS, whatever sslmode says', () => {
    const settings = parseDatabaseUrl('postgres://relay@/hookrelay?host=/var/run/postgresql&sslmode=require');
    assert.equal(settings.host, '/var/run/postgresql');
    assert.deepEqual(tlsPlan(settings), { tls: false, fallbackToPlain: false });
  });

  test('what cannot be honoured is refused with invalid_config, naming the URL without its password', () => {
    configError('mysql://relay:s3cret@db/hookrelay', /scheme mysql: is not postgres: or postgresql:/);
    configError('postgres://relay:s3cret@db/hookrelay?sslcert=/etc/client.pem', /parameter sslcert is not supported/);
    configError('postgres://relay:s3cret@db/hookrelay?sslmode=allow', /sslmode=allow is not supported/);
    configError('postgres://relay:s3cret@db/hookrelay?sslmode=verify', /sslmode verify is not one of disable, prefer, require, verify-ca, verify-full/);
    configError('postgres://relay:s3cret@db/hookrelay?sslmode=require&sslmode=disable', /parameter sslmode is given 2 times/);
    configError('postgres://relay:s3cret@db1,db2/hookrelay', /several hosts are not supported/);
    configError('postgres://relay:s3cret@db:70000/hookrelay', /./);
    configError('postgres://relay:s3cret@db/hookrelay/more', /not a database name/);
    configError('postgres://relay:s3cret@db/hookrelay?sslrootcert=system&sslmode=require', /sslrootcert=system needs sslmode=verify-full/);
    configError('postgres://relay:s3cret@db/hookrelay?connect_timeout=soon', /connect_timeout soon is not a whole number of seconds/);
    configError('host=db user=relay password=s3cret', /database URL \(a database URL that does not parse\): not a URL/);
  });

  test('TLS follows sslmode as libpq does, with the CA file of sslrootcert when there is one', () => {
    const plan = (query: string) => tlsPlan(parseDatabaseUrl(`postgres://relay@db.example.com/h?${query}`), (path) => `PEM of ${path}`);
    assert.deepEqual(plan('sslmode=disable'), { tls: false, fallbackToPlain: false });
    assert.deepEqual(plan('sslmode=prefer'), { tls: { rejectUnauthorized: false }, fallbackToPlain: true });
    assert.deepEqual(plan(''), { tls: { rejectUnauthorized: false }, fallbackToPlain: true });
    // require: encrypted, not verified; with a CA file, verified as verify-ca (libpq).
    assert.deepEqual(plan('sslmode=require'), { tls: { rejectUnauthorized: false }, fallbackToPlain: false });
    for (const query of ['sslmode=require&sslrootcert=/ca.pem', 'sslmode=verify-ca&sslrootcert=/ca.pem']) {
      const { tls, fallbackToPlain } = plan(query);
      assert.ok(tls !== false);
      assert.equal(fallbackToPlain, false);
      assert.equal(tls.rejectUnauthorized, true);
      assert.equal(tls.ca, 'PEM of /ca.pem');
      // Any host name is accepted: only the chain is checked.
      assert.equal(tls.checkServerIdentity?.('elsewhere.example', {} as never), undefined);
    }
    assert.deepEqual(plan('sslmode=verify-full&sslrootcert=/ca.pem'), { tls: { rejectUnauthorized: true, ca: 'PEM of /ca.pem' }, fallbackToPlain: false });
    // Without sslrootcert (or with sslrootcert=system): Node.js's bundled CAs.
    assert.deepEqual(plan('sslmode=verify-full'), { tls: { rejectUnauthorized: true }, fallbackToPlain: false });
    assert.deepEqual(plan('sslrootcert=system'), { tls: { rejectUnauthorized: true }, fallbackToPlain: false });
    assert.throws(
      () => tlsPlan(parseDatabaseUrl('postgres://relay@db/h?sslmode=verify-full&sslrootcert=/nowhere/ca.pem')),
      (err: unknown) => err instanceof HookrelayError && err.code === ErrorCode.config && /sslrootcert \/nowhere\/ca.pem cannot be read \(ENOENT\)/.test(err.message),
    );
  });

  test('the loggable form of a URL has no password, wherever the URL put it', () => {
    assert.equal(loggableDatabaseUrl('postgres://relay:s3cret@db:5432/hookrelay?sslmode=require'), 'postgres://relay@db:5432/hookrelay?sslmode=require');
    assert.equal(loggableDatabaseUrl('postgres://relay@db/hookrelay?password=s3cret&sslmode=require'), 'postgres://relay@db/hookrelay?sslmode=require');
    assert.equal(loggableDatabaseUrl('postgres://:s3cret@db/hookrelay'), 'postgres://db/hookrelay');
    assert.equal(loggableDatabaseUrl('postgres://relay:s3%63ret@db/hookrelay'), 'postgres://relay@db/hookrelay');
    assert.equal(loggableDatabaseUrl('host=db password=s3cret'), '(a database URL that does not parse)');
    // A password that also appears elsewhere in the URL takes nothing else with it.
    assert.equal(loggableDatabaseUrl('postgres://postgres:postgres@localhost/postgres'), 'postgres://postgres@localhost/postgres');
  });

  test('bigint becomes a number only while it is exact', () => {
    assert.equal(bigintAsNumber('1795580236000'), 1_795_580_236_000);
    assert.equal(bigintAsNumber('-9007199254740991'), -9_007_199_254_740_991);
    assert.throws(() => bigintAsNumber('9007199254740993'), RangeError);
  });
});

describe('migrations', () => {
  const TABLES = [
    'api_keys',
    'audit_entries',
    'audit_journal',
    'deliveries',
    'delivery_attempts',
    'events',
    'feed_positions',
    'feed_rejects',
    'feed_sources',
    'feed_stats',
    'hookrelay_schema',
    'legacy_event_ids',
    'organizations',
    'roles',
    'users',
    'webhooks',
  ];

  test('a fresh database gets the whole schema: tables, types, keys, indexes with their partial conditions, the builtin roles', async (t) => {
    const { pool } = await freshDatabase(t);
    const before = Date.now();
    assert.deepEqual(await migratePostgres(pool), { from: 0, to: PG_SCHEMA_VERSION });
    assert.equal(PG_SCHEMA_VERSION, PG_MIGRATIONS.length);

    const tables = await pool.query<{ table_name: string }>(
      "SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema() AND table_type = 'BASE TABLE' ORDER BY table_name",
    );
    assert.deepEqual(tables.rows.map((r) => r.table_name), TABLES);
    const versions = await pool.query<{ version: number; applied_at: number }>('SELECT version, applied_at FROM hookrelay_schema ORDER BY version');
    assert.deepEqual(versions.rows.map((r) => r.version), Array.from({ length: PG_SCHEMA_VERSION }, (_, i) => i + 1));
    assert.ok(versions.rows.every((r) => r.applied_at >= before && r.applied_at <= Date.now()));

    // The columns whose types differ from a plain reading of SQLite's.
    const types = await pool.query<{ column: string; type: string; identity: string }>(`
      SELECT table_name || '.' || column_name AS column, data_type AS type, is_identity AS identity
      FROM information_schema.columns WHERE table_schema = current_schema()
        AND (table_name, column_name) IN (('events', 'seq'), ('events', 'payload'), ('events', 'received_at'), ('deliveries', 'id'),
          ('deliveries', 'ordering_key'), ('delivery_attempts', 'id'), ('users', 'id'), ('feed_rejects', 'id'), ('feed_rejects', 'raw'),
          ('feed_sources', 'id'), ('webhooks', 'active_hmac'), ('roles', 'builtin'), ('roles', 'permissions'), ('feed_positions', 'position'))
      ORDER BY 1`);
    assert.deepEqual(
      Object.fromEntries(types.rows.map((r) => [r.column, `${r.type}${r.identity === 'YES' ? ' identity' : ''}`])),
      {
        'deliveries.id': 'bigint identity',
        'deliveries.ordering_key': 'bigint',
        'delivery_attempts.id': 'bigint identity',
        'events.payload': 'text',
        'events.received_at': 'bigint',
        'events.seq': 'bigint identity',
        'feed_positions.position': 'bigint',
        'feed_rejects.id': 'bigint identity',
        'feed_rejects.raw': 'bytea',
        'feed_sources.id': 'bigint identity',
        'roles.builtin': 'boolean',
        'roles.permissions': 'text',
        'users.id': 'bigint identity',
        'webhooks.active_hmac': 'boolean',
      },
    );

    // The keys of the per-instance tables include the instance.
    const keys = await pool.query<{ name: string; columns: string }>(`
      SELECT c.conname AS name, string_agg(a.attname, ', ' ORDER BY k.ord) AS columns
      FROM pg_constraint c
      CROSS JOIN LATERAL unnest(c.conkey) WITH ORDINALITY AS k(attnum, ord)
      JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = k.attnum
      WHERE c.contype IN ('p', 'u') AND c.conrelid::regclass::text IN ('feed_sources', 'feed_positions', 'feed_stats', 'users', 'events')
      GROUP BY c.conname ORDER BY 1`);
    assert.deepEqual(
      keys.rows.map((r) => `${r.name} (${r.columns})`),
      [
        'events_id_key (id)',
        'events_pkey (seq)',
        'feed_positions_pkey (instance, source)',
        'feed_sources_instance_name_key (instance, name)',
        'feed_sources_pkey (id)',
        'feed_stats_pkey (instance, source)',
        'users_org_id_email_key_key (org_id, email_key)',
        'users_pkey (id)',
      ],
    );

    // SQLite's indexes, by name, on the same columns, with the same partial conditions (as
    // PostgreSQL prints them), and deliveries_org_leased, for the leases of several instances;
    // for per-request order across feeds (migration 7), deliveries_request_pending,
    // deliveries_request_sent and deliveries_org_release in place of deliveries_ordering.
    const indexes = await pool.query<{ name: string; columns: string; predicate: string | null }>(`
      SELECT c.relname AS name, pg_get_indexdef(i.indexrelid, 0, true) AS columns, pg_get_expr(i.indpred, i.indrelid, true) AS predicate
      FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid JOIN pg_namespace n ON n.oid = c.relnamespace
      WHERE n.nspname = current_schema() AND NOT i.indisprimary AND NOT i.indisunique ORDER BY 1`);
    assert.deepEqual(
      indexes.rows.map((r) => [r.name, r.columns.replace(/^.* USING btree /, '').replace(/ WHERE .*$/, ''), r.predicate]),
      [
        ['audit_entries_action', '(action, id)', null],
        ['audit_entries_at', '(at)', null],
        ['audit_entries_org', '(org_id, id)', null],
        ['deliveries_event', '(event_seq)', null],
        ['deliveries_org_due', '(org_id, next_attempt_at)', "status = 'pending'::text AND (attempts > 0 OR lease_expires_at IS NOT NULL)"],
        ['deliveries_org_fresh', '(org_id, id)', "status = 'pending'::text AND attempts = 0 AND lease_expires_at IS NULL"],
        ['deliveries_org_leased', '(org_id)', "status = 'pending'::text AND lease_expires_at IS NOT NULL"],
        ['deliveries_org_release', '(org_id, release_at, id)', "status = 'pending'::text AND attempts = 0 AND lease_expires_at IS NULL"],
        ['deliveries_org_status', '(org_id, status, id)', "status <> 'pending'::text OR attempts > 0 OR lease_expires_at IS NOT NULL"],
        ['deliveries_request_pending', '(ordering_key, order_at, id)', "status = 'pending'::text"],
        ['deliveries_request_sent', '(ordering_key, order_at, id)', 'attempts > 0'],
        ['delivery_attempts_delivery', '(delivery_id, id)', null],
        ['delivery_attempts_started', '(started_at, delivery_id, outcome)', null],
        ['feed_rejects_received', '(received_at)', null],
        ['users_role_name', '(role_name)', null],
      ],
    );

    // The builtin roles, as SQLite's migration 1 seeds them (saas_admin with audit:read since migration 8); no feed source (each instance registers its own).
    const roles = await pool.query<{ name: string; permissions: string; builtin: boolean; created_at: number }>('SELECT name, permissions, builtin, created_at FROM roles ORDER BY name');
    assert.deepEqual(
      roles.rows.map((r) => [r.name, r.permissions, r.builtin]),
      [
        ['saas_admin', '["roles:read","users:manage","webhook:read","webhook:manage","audit:read","api_keys:manage"]', true],
        ['saas_viewer', '["roles:read","webhook:read"]', true],
      ],
    );
    assert.ok(roles.rows.every((r) => typeof r.created_at === 'number' && Math.abs(r.created_at - Date.now()) < 60_000));
    assert.equal((await pool.query('SELECT count(*) AS n FROM feed_sources')).rows[0].n, 0);
  });

  test('bigint reads as a number through the pool, and the process-wide pg.types is left alone', async (t) => {
    const { pool } = await freshDatabase(t);
    const { rows } = await pool.query('SELECT 9007199254740991::bigint AS big, count(*) AS n FROM pg_class WHERE false');
    assert.deepEqual(rows[0], { big: 9_007_199_254_740_991, n: 0 });
    await assert.rejects(pool.query('SELECT 9007199254740993::bigint AS big'), RangeError);
    assert.equal(pg.types.getTypeParser(20, 'text')('12'), '12');
    // The pool is still usable after a value it refused.
    assert.equal((await pool.query('SELECT 1::bigint AS one')).rows[0].one, 1);
  });

  test('migrating an up-to-date database does nothing', async (t) => {
    const { pool } = await freshDatabase(t);
    await migratePostgres(pool);
    assert.deepEqual(await migratePostgres(pool), { from: PG_SCHEMA_VERSION, to: PG_SCHEMA_VERSION });
    assert.equal((await pool.query('SELECT count(*) AS n FROM hookrelay_schema')).rows[0].n, PG_SCHEMA_VERSION);
    assert.equal((await pool.query('SELECT count(*) AS n FROM roles')).rows[0].n, 2);
  });

  test('a database at version 2 migrates to 3: its attempt log is indexed by start time, the attempts already in it counted', async (t) => {
    const { pool } = await freshDatabase(t);
    // Version 2 as an earlier hookrelay left it, with an attempt in the log.
    await migrateTo(pool, 2);
    await pool.query(`
      INSERT INTO organizations (id, name, created_at) VALUES ('acme', 'Acme', 1);
      INSERT INTO feed_sources (id, instance, name) VALUES (1, 'host-a', 'api');
      INSERT INTO events (seq, id, org_id, anticipation_request_id, occurred_at, payload, source_id, received_at) VALUES (1, 'evt_1', 'acme', 'ar_1', 1, '"status":"approved"', 1, 1000);
      INSERT INTO deliveries (id, event_seq, org_id, ordering_key, status, attempts, next_attempt_at, created_at, updated_at) VALUES (1, 1, 'acme', 7, 'delivered', 1, 1000, 1000, 2000);
      INSERT INTO delivery_attempts (delivery_id, attempt, started_at, duration_ms, url, status_code, outcome) VALUES (1, 1, 1500, 9, 'https://hooks.example/', 200, 'delivered')`);
    assert.equal((await pool.query("SELECT to_regclass('delivery_attempts_started') AS i")).rows[0].i, null);
    assert.deepEqual(await migratePostgres(pool), { from: 2, to: PG_SCHEMA_VERSION });
    assert.equal(
      (await pool.query("SELECT pg_get_indexdef('delivery_attempts_started'::regclass) AS def")).rows[0].def,
      'CREATE INDEX delivery_attempts_started ON public.delivery_attempts USING btree (started_at, delivery_id, outcome)',
    );
    // Which plan reads it on a realistic table: pg-query-plans.test.ts.
    const { rows } = await pool.query(PG_ATTEMPT_COUNTS_SQL, ['acme', 0, 60_000, 60_000]);
    assert.deepEqual(rows, [{ bucket: 0, succeeded: 1, failed: 0 }]);
  });

  test('a database at version 3 migrates to 4: its attempts keep their rows, with no request as sent recorded, and new ones record theirs', async (t) => {
    const { pool } = await freshDatabase(t);
    await migrateTo(pool, 3);
    await pool.query(`
      INSERT INTO organizations (id, name, created_at) VALUES ('acme', 'Acme', 1);
      INSERT INTO feed_sources (id, instance, name) VALUES (1, 'host-a', 'api');
      INSERT INTO events (seq, id, org_id, anticipation_request_id, occurred_at, payload, source_id, received_at) VALUES (1, 'evt_1', 'acme', 'ar_1', 1, '"status":"approved"', 1, 1000);
      INSERT INTO deliveries (id, event_seq, org_id, ordering_key, status, attempts, next_attempt_at, created_at, updated_at) VALUES (1, 1, 'acme', 7, 'pending', 1, 1000, 1000, 2000);
      INSERT INTO delivery_attempts (delivery_id, attempt, started_at, duration_ms, url, status_code, outcome) VALUES (1, 1, 1500, 9, 'https://hooks.example/', 500, 'retry')`);
    const sentColumns = "SELECT column_name, data_type, is_nullable FROM information_schema.columns WHERE table_name = 'delivery_attempts' AND column_name LIKE 'sent\\_%' ORDER BY ordinal_position";
    assert.deepEqual((await pool.query(sentColumns)).rows, []);
    assert.deepEqual(await migratePostgres(pool), { from: 3, to: PG_SCHEMA_VERSION });
    assert.deepEqual((await pool.query(sentColumns)).rows, [
      { column_name: 'sent_timestamp', data_type: 'bigint', is_nullable: 'YES' },
      { column_name: 'sent_signature', data_type: 'text', is_nullable: 'YES' },
    ]);
    await pool.query("INSERT INTO delivery_attempts (delivery_id, attempt, started_at, duration_ms, url, status_code, outcome, sent_timestamp, sent_signature) VALUES (1, 2, 3500, 9, 'https://hooks.example/', 200, 'delivered', 3, 'v1,abc=')");
    const { rows } = await pool.query('SELECT attempt, sent_timestamp, sent_signature FROM delivery_attempts ORDER BY id');
    assert.deepEqual(rows, [
      { attempt: 1, sent_timestamp: null, sent_signature: null },
      { attempt: 2, sent_timestamp: 3, sent_signature: 'v1,abc=' },
    ]);
  });

  test('a database at version 5 migrates to 7: its pending deliveries take their place in their request\'s order (occurred_at) and are due as they were; the others are left as they are', async (t) => {
    const { pool } = await freshDatabase(t);
    await migrateTo(pool, 5);
    await pool.query(`
      INSERT INTO organizations (id, name, created_at) VALUES ('acme', 'Acme', 1);
      INSERT INTO webhooks (org_id, url, active_hmac, created_at, updated_at) VALUES ('acme', 'https://hooks.example/', true, 1, 1);
      INSERT INTO feed_sources (id, instance, name) VALUES (1, 'host-a', 'api');
      INSERT INTO events (seq, id, org_id, anticipation_request_id, occurred_at, payload, source_id, received_at) VALUES
        (1, 'evt_1', 'acme', 'ar_1', 100, '"status":"approved"', 1, 1000), (2, 'evt_2', 'acme', 'ar_1', 200, '"status":"approved"', 1, 1000),
        (3, 'evt_3', 'acme', 'ar_1', 300, '"status":"approved"', 1, 1000);
      INSERT INTO deliveries (id, event_seq, org_id, ordering_key, status, attempts, next_attempt_at, created_at, updated_at) VALUES
        (1, 1, 'acme', 7, 'delivered', 1, 1000, 1000, 2000), (2, 2, 'acme', 7, 'pending', 1, 5000, 1100, 2000), (3, 3, 'acme', 7, 'pending', 0, 1200, 1200, 1200)`);
    assert.deepEqual(await migratePostgres(pool), { from: 5, to: PG_SCHEMA_VERSION });
    const { rows } = await pool.query('SELECT id, order_at, release_at FROM deliveries ORDER BY id');
    assert.deepEqual(rows, [
      { id: 1, order_at: null, release_at: null },
      { id: 2, order_at: 200, release_at: 1100 },
      { id: 3, order_at: 300, release_at: 1200 },
    ]);
    assert.deepEqual((await pool.query('SELECT out_of_order_deliveries FROM webhooks')).rows, [{ out_of_order_deliveries: 0 }]);
  });

  test('four instances migrating a fresh database at the same moment: it is migrated exactly once, without an error', async (t) => {
    const { url } = await freshDatabase(t);
    const pools = Array.from({ length: 4 }, () => poolFor(t, url, { max: 2 }));
    const results = await Promise.all(pools.map((pool) => migratePostgres(pool)));
    assert.deepEqual(
      results.map((r) => r.from).sort((a, b) => a - b),
      [0, PG_SCHEMA_VERSION, PG_SCHEMA_VERSION, PG_SCHEMA_VERSION],
    );
    assert.ok(results.every((r) => r.to === PG_SCHEMA_VERSION));
    const { rows } = await pools[0]!.query<{ version: number; n: number }>('SELECT version, count(*) AS n FROM hookrelay_schema GROUP BY version ORDER BY version');
    assert.deepEqual(rows, Array.from({ length: PG_SCHEMA_VERSION }, (_, i) => ({ version: i + 1, n: 1 })));
    assert.equal((await pools[0]!.query('SELECT count(*) AS n FROM roles')).rows[0].n, 2);
  });

  test('a database newer than the code is refused, and left as it was', async (t) => {
    const { pool } = await freshDatabase(t);
    await migratePostgres(pool);
    await pool.query('INSERT INTO hookrelay_schema (version, applied_at) VALUES ($1, 0)', [PG_SCHEMA_VERSION + 1]);
    await assert.rejects(migratePostgres(pool), (err: unknown) => {
      assert.ok(err instanceof HookrelayError);
      assert.equal(err.code, ErrorCode.databaseTooNew);
      assert.match(err.message, new RegExp(`has schema version ${PG_SCHEMA_VERSION + 1}, newer than this hookrelay understands \\(${PG_SCHEMA_VERSION}\\); run a newer hookrelay or restore a backup`));
      return true;
    });
    assert.equal((await pool.query('SELECT max(version) AS v FROM hookrelay_schema')).rows[0].v, PG_SCHEMA_VERSION + 1);
    // The connection went back to the pool outside any transaction.
    assert.equal((await pool.query('SELECT 1 AS one')).rows[0].one, 1);
  });

  test('the constraints hold: statuses, keys, references, JSON permissions, per-instance feed state', async (t) => {
    const { pool } = await freshDatabase(t);
    await migratePostgres(pool);
    const q = (sql: string, values: unknown[] = []) => pool.query(sql, values);
    await q("INSERT INTO organizations (id, name, created_at) VALUES ('acme', 'Acme', 1), ('globex', 'Globex', 1)");
    const source = (await q("INSERT INTO feed_sources (instance, name) VALUES ('host-a', '/var/log/feed.jsonl') RETURNING id")).rows[0].id as number;
    const event = (await q("INSERT INTO events (id, org_id, anticipation_request_id, occurred_at, payload, source_id, received_at) VALUES ('evt_1', 'acme', 'ar_1', 1, '{}', $1, 1) RETURNING seq", [source])).rows[0].seq as number;
    assert.equal(typeof event, 'number');
    const delivery = (sql: string, values: unknown[]) => q(`INSERT INTO deliveries (event_seq, org_id, ordering_key, status, next_attempt_at, created_at, updated_at) VALUES (${sql})`, values);

    await delivery("$1, 'acme', 9007199254740991, 'pending', 1, 1, 1", [event]);
    assert.deepEqual(await sqlState(delivery("$1, 'acme', 1, 'lost', 1, 1, 1", [event])), { code: '23514', constraint: 'deliveries_status_check' });
    assert.equal((await sqlState(delivery("999, 'acme', 1, 'pending', 1, 1, 1", []))).code, '23503');
    assert.equal((await sqlState(q("INSERT INTO delivery_attempts (delivery_id, attempt, started_at, duration_ms, url, outcome) VALUES (999, 1, 0, 0, 'x', 'dead')"))).code, '23503');
    assert.equal((await sqlState(q("INSERT INTO events (id, org_id, anticipation_request_id, occurred_at, payload, source_id, received_at) VALUES ('evt_1', 'acme', 'ar_1', 1, '{}', $1, 1)", [source]))).code, '23505');

    const user = "INSERT INTO users (org_id, email, email_key, role_name, created_at, updated_at) VALUES ($1, $2, $3, 'saas_admin', 1, 1)";
    await q(user, ['acme', 'Ann@Example.com', 'ann@example.com']);
    assert.deepEqual(await sqlState(q(user, ['acme', 'ann@example.com', 'ann@example.com'])), { code: '23505', constraint: 'users_org_id_email_key_key' });
    await q(user, ['globex', 'ann@example.com', 'ann@example.com']);
    assert.equal((await sqlState(q("INSERT INTO users (org_id, email, email_key, role_name, created_at, updated_at) VALUES ('acme', 'b@x', 'b@x', 'nobody', 1, 1)"))).code, '23503');

    assert.deepEqual(await sqlState(q("INSERT INTO roles (name, description, permissions, created_at) VALUES ('r', '', '{\"a\":1}', 1)")), { code: '23514', constraint: 'roles_permissions_check' });
    assert.equal((await sqlState(q("INSERT INTO roles (name, description, permissions, created_at) VALUES ('r', '', 'not json', 1)"))).code, '22P02');
    await q("INSERT INTO roles (name, description, permissions, created_at) VALUES ('r', '', '[]', 1)");
    assert.equal((await q("SELECT builtin FROM roles WHERE name = 'r'")).rows[0].builtin, false);

    assert.deepEqual(await sqlState(q("INSERT INTO webhooks (org_id, url, active_hmac, status, created_at, updated_at) VALUES ('acme', 'https://x', true, 'paused', 1, 1)")), { code: '23514', constraint: 'webhooks_status_check' });
    await q("INSERT INTO webhooks (org_id, url, active_hmac, created_at, updated_at) VALUES ('globex', 'https://x', true, 1, 1)");

    // Feed state belongs to an instance: the same file on two hosts is two sources, two positions.
    await q("INSERT INTO feed_sources (instance, name) VALUES ('host-b', '/var/log/feed.jsonl')");
    assert.deepEqual(await sqlState(q("INSERT INTO feed_sources (instance, name) VALUES ('host-a', '/var/log/feed.jsonl')")), { code: '23505', constraint: 'feed_sources_instance_name_key' });
    const position = "INSERT INTO feed_positions (instance, source, dev, ino, fingerprint, fingerprint_bytes, position, updated_at) VALUES ($1, '/var/log/feed.jsonl', '1', '2', 'f', 10, 5000000000, 1)";
    await q(position, ['host-a']);
    await q(position, ['host-b']);
    assert.deepEqual(await sqlState(q(position, ['host-a'])), { code: '23505', constraint: 'feed_positions_pkey' });
    assert.equal((await sqlState(q(position, ['']))).code, '23514');
    await q("INSERT INTO feed_stats (instance, source, updated_at) VALUES ('host-a', 'stdin', 1), ('host-b', 'stdin', 1)");
    assert.deepEqual(await sqlState(q("INSERT INTO feed_stats (instance, source, updated_at) VALUES ('host-a', 'stdin', 1)")), { code: '23505', constraint: 'feed_stats_pkey' });
    assert.deepEqual((await q('SELECT position FROM feed_positions ORDER BY instance')).rows, [{ position: 5_000_000_000 }, { position: 5_000_000_000 }]);

    // Raw quarantined bytes come back exactly; the stored payload too (text, not jsonb).
    const raw = Buffer.from([0x00, 0xff, 0x0a, 0x7b]);
    await q("INSERT INTO feed_rejects (source, line_bytes, raw, reason, detail, received_at) VALUES ('stdin', 4, $1, 'invalid_json', 'x', 1)", [raw]);
    assert.deepEqual((await q('SELECT raw FROM feed_rejects')).rows[0].raw, raw);
    const payload = '{"b": 1,  "a":1.0,"a":2}';
    await q("INSERT INTO events (id, org_id, anticipation_request_id, occurred_at, payload, source_id, received_at) VALUES ('evt_2', 'acme', 'ar_1', 1, $1, $2, 1)", [payload, source]);
    assert.equal((await q("SELECT payload FROM events WHERE id = 'evt_2'")).rows[0].payload, payload);

    // Deleting an organization takes its users and webhook with it.
    await q("DELETE FROM organizations WHERE id = 'globex'");
    assert.equal((await q("SELECT count(*) AS n FROM users WHERE org_id = 'globex'")).rows[0].n, 0);
    assert.equal((await q('SELECT count(*) AS n FROM webhooks')).rows[0].n, 0);
  });

  test('identifiers sort by their bytes as in SQLite, though the database collates by locale', async (t) => {
    const { pool } = await freshDatabase(t);
    await migratePostgres(pool);
    // The test cluster's default collation is ICU en-US: 'a' sorts before 'B' there, after it in SQLite.
    assert.equal((await pool.query("SELECT 'a' < 'B' AS locale_order")).rows[0].locale_order, true);
    await pool.query("INSERT INTO organizations (id, name, created_at) VALUES ('b', 'b', 1), ('B', 'B', 1), ('a', 'a', 1), ('_z', '_z', 1)");
    const { rows } = await pool.query<{ id: string }>('SELECT id FROM organizations ORDER BY id');
    assert.deepEqual(rows.map((r) => r.id), ['B', '_z', 'a', 'b']);
  });

  test('a database that is not UTF8 is refused before anything is created', async (t) => {
    const server = await pgServer();
    const admin = poolFor(t, server.url('postgres'));
    const name = `hr_latin1_${process.pid}_${Date.now()}`;
    await admin.query(`CREATE DATABASE ${name} ENCODING 'LATIN1' LC_COLLATE 'C' LC_CTYPE 'C' LOCALE_PROVIDER libc TEMPLATE template0`);
    const pool = poolFor(t, server.url(name));
    await assert.rejects(migratePostgres(pool), (err: unknown) => err instanceof HookrelayError && err.code === ErrorCode.config && /uses encoding LATIN1; hookrelay needs UTF8/.test(err.message));
    assert.equal((await pool.query("SELECT to_regclass('hookrelay_schema') AS t")).rows[0].t, null);
  });
});

describe('TLS', () => {
  test('sslmode=require against a server without TLS fails with an error that says so, and shows no password', async (t) => {
    const server = await pgServer();
    const url = server.url('postgres', { sslmode: 'require' });
    const pool = poolFor(t, url);
    await assert.rejects(pool.query('SELECT 1'), (err: unknown) => {
      assert.ok(err instanceof HookrelayError);
      assert.equal(err.code, ErrorCode.config);
      assert.match(err.message, /the server does not accept TLS connections, which sslmode=require requires/);
      assert.match(err.message, new RegExp(`postgres://postgres@127\\.0\\.0\\.1:${server.port}/postgres\\?sslmode=require`));
      assertNoPassword(err.message, url);
      return true;
    });
    const shown = loggableDatabaseUrl(url);
    assert.equal(shown, `postgres://postgres@127.0.0.1:${server.port}/postgres?sslmode=require`);
    assertNoPassword(shown, url);
    assertNoPassword(inspect(pool.options, { depth: 5 }), url);
    assertNoPassword(JSON.stringify(parseDatabaseUrl(url)), url);
  });

  test('sslmode=prefer falls back to plaintext when the server has no TLS', async (t) => {
    const server = await pgServer();
    const pool = poolFor(t, server.url('postgres', { sslmode: 'prefer' }));
    const { rows } = await pool.query('SELECT ssl, current_setting($1) AS app FROM pg_stat_ssl WHERE pid = pg_backend_pid()', ['application_name']);
    assert.deepEqual(rows, [{ ssl: false, app: 'hookrelay' }]);
  });

  test('statement_timeout is the pool option, enforced by the server', async (t) => {
    const server = await pgServer();
    const pool = poolFor(t, server.url('postgres'), { statementTimeoutMs: 50 });
    assert.equal((await pool.query('SHOW statement_timeout')).rows[0].statement_timeout, '50ms');
    assert.equal((await sqlState(pool.query('SELECT pg_sleep(1)'))).code, '57014');
  });

  describe('through a TLS-terminating proxy (a server that offers TLS)', () => {
    let dir = '';
    let tls: ReturnType<typeof createTls>;
    let otherCa = '';
    let server: PgTestServer;

    const setup = async (t: TestContext) => {
      if (dir === '') {
        dir = mkdtempSync(join(tmpdir(), 'hookrelay-pg-tls-'));
        tls = createTls(join(dir, 'server'), 'hookrelay pg test CA');
        otherCa = createTls(join(dir, 'other'), 'another CA').caFile;
        server = await pgServer();
      }
      return startTlsProxy(t, server, tls);
    };
    after(() => {
      if (dir !== '') rmSync(dir, { recursive: true, force: true });
    });

    /** Runs one query through a fresh pool on the proxy (at `host`) with `params`; resolves to whether the session was TLS. */
    const connectThrough = async (t: TestContext, proxy: TlsProxy, host: string, params: Record<string, string>) => {
      const url = new URL(server.url('postgres', params));
      url.hostname = host;
      url.port = String(proxy.port(host));
      const pool = poolFor(t, url.href, { max: 1 });
      const before = proxy.sessions.tls;
      assert.equal((await pool.query('SELECT 1 AS one')).rows[0].one, 1);
      return proxy.sessions.tls > before;
    };

    const certificateRefused = (pattern: RegExp) => (err: unknown) => {
      assert.ok(err instanceof HookrelayError, String(err));
      assert.equal(err.code, ErrorCode.config);
      assert.match(err.message, /the server's TLS certificate was not accepted/);
      assert.match(err.message, pattern);
      return true;
    };

    test('require encrypts without verifying; prefer uses TLS when offered; disable does not', async (t) => {
      const proxy = await setup(t);
      assert.equal(await connectThrough(t, proxy, '127.0.0.1', { sslmode: 'require' }), true);
      assert.equal(await connectThrough(t, proxy, '127.0.0.1', { sslmode: 'prefer' }), true);
      assert.equal(await connectThrough(t, proxy, '127.0.0.1', {}), true);
      assert.equal(await connectThrough(t, proxy, '127.0.0.1', { sslmode: 'disable' }), false);
      assert.ok(proxy.sessions.plain >= 1);
    });

    test('verify-full checks the chain against sslrootcert and the host name against the certificate', async (t) => {
      const proxy = await setup(t);
      assert.equal(await connectThrough(t, proxy, '127.0.0.1', { sslmode: 'verify-full', sslrootcert: tls.caFile }), true);
      assert.equal(await connectThrough(t, proxy, 'localhost', { sslmode: 'verify-full', sslrootcert: tls.caFile }), true);
      // Another CA, or none given (Node.js's bundled ones): the chain is refused.
      await assert.rejects(connectThrough(t, proxy, '127.0.0.1', { sslmode: 'verify-full', sslrootcert: otherCa }), certificateRefused(/checks it against the CA in sslrootcert/));
      await assert.rejects(connectThrough(t, proxy, '127.0.0.1', { sslmode: 'verify-full' }), certificateRefused(/Node\.js's bundled CA certificates/));
      await assert.rejects(connectThrough(t, proxy, '127.0.0.1', { sslmode: 'verify-ca' }), certificateRefused(/Node\.js's bundled CA certificates/));
      await assert.rejects(connectThrough(t, proxy, '127.0.0.1', { sslmode: 'require', sslrootcert: otherCa }), certificateRefused(/sslmode=require checks it against the CA in sslrootcert/));
    });

    test('verify-ca (and require with a CA file) accept the right chain under a name the certificate does not carry; verify-full does not', async (t) => {
      const proxy = await setup(t);
      if (!proxy.hosts.includes('127.0.0.2')) {
        t.skip('127.0.0.2 cannot be bound here');
        return;
      }
      assert.equal(await connectThrough(t, proxy, '127.0.0.2', { sslmode: 'verify-ca', sslrootcert: tls.caFile }), true);
      assert.equal(await connectThrough(t, proxy, '127.0.0.2', { sslmode: 'require', sslrootcert: tls.caFile }), true);
      await assert.rejects(
        connectThrough(t, proxy, '127.0.0.2', { sslmode: 'verify-full', sslrootcert: tls.caFile }),
        certificateRefused(/ERR_TLS_CERT_ALTNAME_INVALID.*and checks that it names the host/),
      );
    });
  });
});

interface TlsProxy {
  /** The addresses it listens on (127.0.0.1, and 127.0.0.2 where that can be bound). */
  readonly hosts: readonly string[];
  port(host: string): number;
  /** Sessions that reached the server: through TLS, and in the clear. */
  readonly sessions: { tls: number; plain: number };
}

/** The protocol's SSLRequest code. */
const SSL_REQUEST_CODE = 80877103;

/**
 * A PostgreSQL server that offers TLS, made of the test server (which has none) and a proxy
 * in front of it: it answers an SSLRequest with 'S', completes the handshake with the test
 * certificate (subjectAltName 127.0.0.1 and localhost), and relays the decrypted stream; a
 * client that starts in the clear is relayed as it is.
 */
async function startTlsProxy(t: TestContext, server: PgTestServer, tls: { certPem: string; keyPem: string }): Promise<TlsProxy> {
  const sessions = { tls: 0, plain: 0 };
  const sockets = new Set<Socket>();
  const track = (socket: Socket) => {
    sockets.add(socket);
    socket.on('close', () => sockets.delete(socket));
    socket.on('error', () => socket.destroy());
    return socket;
  };
  /** Relays `client` to the server; `first` is what the client already sent (null: nothing yet). */
  const relay = (client: Socket, first: Buffer | null, kind: 'tls' | 'plain') => {
    const upstream = track(connectTcp(server.port, server.host));
    client.pipe(upstream).pipe(client);
    if (first === null) client.once('data', () => sessions[kind]++);
    else {
      sessions[kind]++;
      upstream.write(first);
    }
    client.on('close', () => upstream.destroy());
    upstream.on('close', () => client.destroy());
  };
  const listeners = new Map<string, number>();
  const servers: ReturnType<typeof createServer>[] = [];
  for (const host of ['127.0.0.1', '127.0.0.2']) {
    const proxy = createServer((raw) => {
      track(raw);
      raw.once('data', (first: Buffer) => {
        if (first.length >= 8 && first.readUInt32BE(4) === SSL_REQUEST_CODE) {
          raw.write('S');
          const secure = new TLSSocket(raw, { isServer: true, cert: tls.certPem, key: tls.keyPem });
          track(secure);
          relay(secure, null, 'tls');
        } else {
          relay(raw, first, 'plain');
        }
      });
    });
    try {
      await new Promise<void>((resolve, reject) => {
        proxy.once('error', reject);
        proxy.listen(0, host, () => resolve());
      });
    } catch {
      continue;
    }
    servers.push(proxy);
    listeners.set(host, (proxy.address() as AddressInfo).port);
  }
  t.after(async () => {
    for (const socket of sockets) socket.destroy();
    await Promise.all(servers.map((s) => new Promise((resolve) => s.close(resolve))));
  });
  return {
    hosts: [...listeners.keys()],
    port: (host) => listeners.get(host === 'localhost' ? '127.0.0.1' : host)!,
    sessions,
  };
}

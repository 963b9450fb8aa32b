/**
 * `hookrelay db copy` behind the CLI (src/store/copy.ts): a real SQLite file, seeded through
 * its repositories (and raw SQL for what they cannot make), copied into a real PostgreSQL
 * database (test/helpers/pg-harness.ts), then read back through the PostgreSQL store's repositories
 * and compared with what the SQLite ones answer.
 */
import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, test, type TestContext } from 'node:test';
import { systemClock } from '../../src/domain/clock.ts';
import { ErrorCode, HookrelayError } from '../../src/domain/errors.ts';
import { Permission } from '../../src/domain/permissions.ts';
import { emailKey } from '../../src/domain/validation.ts';
import { createLogger } from '../../src/log.ts';
import { copySqliteToPostgres } from '../../src/store/copy.ts';
import { SCHEMA_VERSION } from '../../src/store/sqlite/connection.ts';
import { PG_SCHEMA_VERSION } from '../../src/store/pg/migrations.ts';
import { createPgPool } from '../../src/store/pg/pool.ts';
import { openPgStore } from '../../src/store/pg/store.ts';
import type { Tx } from '../../src/store/repos.ts';
import { openSqliteStore, type SqliteStore } from '../../src/store/sqlite/store.ts';
import { assertBuilt, migrateCli, runCli } from '../helpers/feed-helpers.ts';
import { pgServer, stopPgServer } from '../helpers/pg-harness.ts';

after(stopPgServer);

const INSTANCE = 'host-a';
const FEED = '/var/log/anticipation/feed.jsonl';
const DETAILS = '"status":"approved","previous_status":null';
/** A receiver's response body with a NUL in it: SQLite keeps it, PostgreSQL text cannot. */
const NUL_BODY = 'upstream said: \u0000 oops';
/** A quarantined line that is not UTF-8 (and holds a NUL byte, which bytea keeps). */
const RAW_LINE = Buffer.from([0x7b, 0xff, 0xfe, 0x00, 0x22, 0xc3, 0x28, 0x7d]);

function tempDir(t: TestContext): string {
  const dir = mkdtempSync(join(tmpdir(), 'hookrelay-copy-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

/** A SQLite store over a fresh file, closed when the test ends (closing twice is harmless). */
function sqliteStore(t: TestContext): { path: string; store: SqliteStore } {
  const path = join(tempDir(t), 'hookrelay.db');
  const store = openSqliteStore(path, systemClock);
  t.after(() => store.close());
  return { path, store };
}

/** A pool on `url` for the checks no repository shows, ended when the test ends. */
function rawPool(t: TestContext, url: string) {
  const pool = createPgPool(url, { max: 1 });
  t.after(() => pool.end());
  return pool;
}

interface Seeded {
  readonly now: number;
  /** Deliveries by what they are. */
  readonly d: {
    fresh: number;
    failed: number;
    leasedFresh: number;
    leasedRetried: number;
    delivered: number;
    dead: number;
    testDelivery: number;
    globexFresh: number;
  };
  readonly testSeq: number;
  readonly eventIds: string[];
}

/**
 * Organizations, a custom role, users, webhooks (HMAC, a rotated secret, health), feed events
 * and a test event, deliveries in every state with their attempts, a quarantined line, a feed
 * position and statistics, and a legacy id boundary.
 */
async function seed(store: SqliteStore): Promise<Seeded> {
  const now = Date.now();
  const seeded = await store.transaction(async (tx) => {
    await tx.orgs.insert({ id: 'acme', name: 'Acme Corp', createdAt: now - 10_000 });
    await tx.orgs.insert({ id: 'globex', name: 'Globex', createdAt: now - 9_000 });
    assert.equal(await tx.roles.insert({ name: 'auditor', description: 'reads webhooks', permissions: [Permission.rolesRead, Permission.webhookRead] }, now - 8_000), true);
    const user = async (orgId: string, email: string, roleName: string) => {
      const u = await tx.users.insert({ orgId, email, emailKey: emailKey(email), roleName }, now - 7_000);
      assert.ok(u !== null);
    };
    await user('acme', 'Admin@Acme.example', 'saas_admin');
    await user('acme', 'auditor@acme.example', 'auditor');
    await user('globex', 'viewer@globex.example', 'saas_viewer');

    await tx.webhooks.upsert('acme', 'https://hooks.acme.example/in', true, 'whsec_old_secret', now - 6_000, { headers: [['X-Environment', 'prod'], ['Authorization', 'Bearer x']] });
    await tx.webhooks.rotateSecret('acme', 'whsec_new_secret', now + 86_400_000, now - 5_500);
    await tx.webhooks.recordSuccess('acme', now - 5_000);
    await tx.webhooks.recordFailure('acme', now - 4_000, 5, 3_600_000);
    await tx.webhooks.upsert('globex', 'https://globex.example/webhook', false, null, now - 6_000);

    const at = await tx.feed.receivedAt(now - 3_000);
    const source = await tx.feed.sourceId(FEED);
    const eventIds = ['evt_1', 'evt_2', 'evt_3', 'evt_4', 'evt_5', 'evt_6', 'evt_7'];
    const seqs = await tx.feed.insertEvents(
      eventIds.map((id, i) => ({
        event: { id, orgId: i === 6 ? 'globex' : 'acme', anticipationRequestId: `ar_${i}`, occurredAt: now - 20_000 + i, details: DETAILS, legacyId: null },
        position: 100 * (i + 1),
      })),
      source,
      at,
    );
    const seq = (i: number): number => {
      const s = seqs[i];
      assert.ok(typeof s === 'number');
      return s;
    };
    const testSeq = await tx.deliveries.insertTestEvent('evt_test', 'acme', '{"type":"webhook.test","id":"evt_test","data":{}}', now - 2_500);

    const q = (i: number, key: number, orgId = 'acme') => tx.deliveries.insert(seq(i), orgId, key, now - 2_000);
    const d = {
      fresh: await q(0, 1001),
      failed: await q(1, 1002),
      leasedFresh: await q(2, 1003),
      leasedRetried: await q(3, 1004),
      delivered: await q(4, 1005),
      dead: await q(5, 1006),
      testDelivery: await tx.deliveries.insert(testSeq, 'acme', 1007, now - 2_000),
      globexFresh: await q(6, 2001, 'globex'),
    };
    const attempt = (deliveryId: number, n: number, outcome: string, statusCode: number | null, responseBody: string | null, error: string | null) => ({
      deliveryId,
      attempt: n,
      startedAt: now - 1_900 + n,
      durationMs: 25 + n,
      url: 'https://hooks.acme.example/in',
      statusCode,
      errorClass: error === null ? null : 'http_status',
      errorDetail: error,
      responseBody,
      outcome,
      sentTimestamp: statusCode === null ? null : Math.floor((now - 1_900 + n) / 1000),
      sentSignature: statusCode === null ? null : `v1,c2lnbmF0dXJlIG9mIGF0dGVtcHQg${n}${deliveryId}=`,
    });
    await tx.deliveries.lease([d.failed, d.leasedRetried, d.delivered, d.dead, d.testDelivery], now + 60_000, now - 1_950);
    await tx.deliveries.insertAttempts([
      attempt(d.failed, 1, 'retry', 502, NUL_BODY, 'HTTP 502'),
      attempt(d.leasedRetried, 1, 'retry', 500, 'busy', 'HTTP 500'),
      attempt(d.delivered, 1, 'delivered', 200, 'ok', null),
      attempt(d.dead, 1, 'retry', 503, null, 'HTTP 503'),
      attempt(d.dead, 2, 'dead', 410, 'gone', 'HTTP 410'),
      attempt(d.testDelivery, 1, 'delivered', 204, '', null),
    ]);
    const settle = (id: number, status: 'pending' | 'delivered' | 'dead', attempts: number, next: number, code: number, error: string | null) =>
      tx.deliveries.settle(id, { status, attempts, nextAttemptAt: next, at: now - 1_800, statusCode: code, error });
    await settle(d.failed, 'pending', 1, now + 3_600_000, 502, 'HTTP 502');
    await settle(d.leasedRetried, 'pending', 1, now - 1_000, 500, 'HTTP 500');
    await settle(d.delivered, 'delivered', 1, now - 1_800, 200, null);
    await settle(d.dead, 'dead', 2, now - 1_800, 410, 'HTTP 410');
    await settle(d.testDelivery, 'delivered', 1, now - 1_800, 204, null);
    // Leased now (a daemon stopped mid-attempt): one never attempted, one being retried.
    await tx.deliveries.lease([d.leasedFresh, d.leasedRetried], now + 60_000, now - 500);

    await tx.feed.insertRejects([
      { source: FEED, position: 800, lineBytes: RAW_LINE.length, raw: RAW_LINE, reason: 'invalid_utf8', detail: 'the line is not valid UTF-8 (byte 2)', eventId: null, receivedAt: now - 400 },
    ]);
    await tx.feed.savePosition(
      { source: FEED, dev: '2049', ino: '131072', fingerprint: 'ab'.repeat(32), fingerprintBytes: 256, position: 900, tailFingerprint: 'cd'.repeat(32) },
      now - 300,
    );
    await tx.feed.addStats(FEED, 7, 2, 1, now - 300);
    return { now, d, testSeq, eventIds: [...eventIds, 'evt_test'] };
  });
  // What the repositories cannot make: the end of legacy event ids (a database from before schema 5).
  store.db.prepare('INSERT INTO legacy_event_ids (before_seq) VALUES (?)').run(3);
  return seeded;
}

/** Everything the repositories answer for the seeded data, read through one transaction (one call at a time: a PostgreSQL transaction is one connection). */
async function snapshot(tx: Tx, s: Seeded) {
  const each = async <A, B>(items: readonly A[], fn: (item: A) => Promise<B>): Promise<B[]> => {
    const out: B[] = [];
    for (const item of items) out.push(await fn(item));
    return out;
  };
  const orgs = await tx.orgs.list();
  const ids = Object.values(s.d);
  return {
    orgs,
    roles: await tx.roles.list(),
    users: await each(orgs, (o) => tx.users.listByOrg(o.id)),
    webhooks: await each(orgs, (o) => tx.webhooks.getWithSecret(o.id)),
    health: await tx.webhooks.listWithHealth(),
    deliveries: await each(ids, async (id) => (await tx.deliveries.get('acme', id)) ?? (await tx.deliveries.get('globex', id))),
    lists: await each(orgs, (o) => tx.deliveries.list(o.id, { limit: 100 })),
    failed: await tx.deliveries.list('acme', { status: 'failed', limit: 100 }),
    attempts: await each(ids, (id) => tx.deliveries.attempts(id)),
    events: await tx.feed.storedEvents(s.eventIds),
    position: await tx.feed.getPosition(FEED),
    stats: await tx.feed.stats(),
    rejects: await tx.feed.listRejects(0, 100),
    undeliverable: await tx.feed.undeliverableByOrg(),
    legacy: await tx.feed.legacyEvents(['evt_1', 'evt_5']),
  };
}

describe('db copy: SQLite to PostgreSQL', () => {
  test('copies every table, keeps ids, clears leases, replaces NUL, and moves identities past the copied ids', async (t) => {
    const { path, store: seeding } = sqliteStore(t);
    const s = await seed(seeding);
    await seeding.close();
    // Opened again: the SQLite feed repository reads legacy_event_ids when it is made.
    const store = openSqliteStore(path, systemClock);
    t.after(() => store.close());
    const before = await store.read((tx) => snapshot(tx, s));
    const counts = Object.fromEntries(
      ['organizations', 'users', 'webhooks', 'feed_sources', 'events', 'legacy_event_ids', 'deliveries', 'delivery_attempts', 'feed_rejects', 'feed_positions', 'feed_stats', 'audit_entries', 'api_keys'].map((table) => [
        table,
        store.db.prepare(`SELECT count(*) FROM ${table}`).pluck().get() as number,
      ]),
    );
    const sqliteSources = store.db.prepare('SELECT id, name FROM feed_sources ORDER BY id').all() as Array<{ id: number; name: string }>;
    const max = (sql: string) => store.db.prepare(sql).pluck().get() as number;
    const maxSeq = max('SELECT max(seq) FROM events');
    const maxDelivery = max('SELECT max(id) FROM deliveries');
    const maxAttempt = max('SELECT max(id) FROM delivery_attempts');
    const maxUser = max('SELECT max(id) FROM users');
    const maxReject = max('SELECT max(id) FROM feed_rejects');
    const maxSource = max('SELECT max(id) FROM feed_sources');
    // Before the copy, the two leased deliveries are not due (their leases stand).
    const dueInSqlite = (await store.read((tx) => tx.deliveries.dueRows('acme', s.now, 100))).map((r) => r.id);
    assert.deepEqual(dueInSqlite, [s.d.fresh]);
    await store.close();

    const url = await (await pgServer()).createDatabase();
    const records: Array<Record<string, unknown>> = [];
    const log = createLogger('info', { write: (line: string) => void records.push(JSON.parse(line) as Record<string, unknown>) });
    // Two rows per statement: every table of more than two rows goes through several chunks.
    const result = await copySqliteToPostgres({ from: path, to: url, instance: INSTANCE, log, chunkRows: 2 });

    assert.equal(result.replacedNul, 1);
    assert.equal(result.leasesCleared, 2);
    assert.equal(result.instance, INSTANCE);
    assert.deepEqual(result.sqliteSchema, { from: SCHEMA_VERSION, to: SCHEMA_VERSION });
    assert.deepEqual(result.postgresSchema, { from: 0, to: PG_SCHEMA_VERSION });
    const rowsOf = Object.fromEntries(result.tables.map((r) => [r.table, r.rows]));
    assert.deepEqual(rowsOf, { ...counts, roles: 1 });
    assert.deepEqual(
      result.tables.map((r) => r.table),
      ['organizations', 'roles', 'users', 'webhooks', 'feed_sources', 'events', 'legacy_event_ids', 'deliveries', 'delivery_attempts', 'feed_rejects', 'feed_positions', 'feed_stats', 'audit_entries', 'api_keys'],
    );
    assert.equal(result.tables.find((r) => r.table === 'delivery_attempts')?.replacedNul, 1);
    // Progress: one line per table, naming it and its rows.
    for (const r of result.tables) {
      assert.ok(
        records.some((l) => l.msg === 'db copy: table copied' && l.table === r.table && l.rows === r.rows && l.level === 30),
        `a progress line for ${r.table}`,
      );
    }
    assert.ok(!JSON.stringify(records).includes(decodeURIComponent(new URL(url).password)), 'the password is never logged');

    const pg = await openPgStore(url, systemClock, { instance: INSTANCE, poolSize: 2 });
    t.after(() => pg.close());
    const copied = await pg.read((tx) => snapshot(tx, s));

    // Everything the repositories show came over unchanged, but the NUL of the response body.
    const expectedAttempts = before.attempts.map((list) => list.map((a) => (a.responseBody === NUL_BODY ? { ...a, responseBody: 'upstream said: \uFFFD oops' } : a)));
    assert.deepEqual(copied, { ...before, attempts: expectedAttempts });
    // Spot checks of what that covers, so that a failure says what went wrong.
    assert.equal(copied.roles.find((r) => r.name === 'auditor')?.builtin, false);
    assert.deepEqual(copied.webhooks[0], { ...before.webhooks[0], activeHmac: true, secret: 'whsec_new_secret' });
    assert.equal(copied.webhooks[1]?.activeHmac, false);
    assert.equal(copied.attempts[Object.keys(s.d).indexOf('failed')]?.[0]?.responseBody, 'upstream said: \uFFFD oops');
    assert.deepEqual(copied.rejects[0]?.raw, RAW_LINE);
    assert.deepEqual([...copied.legacy], ['evt_1']);
    assert.equal(copied.health.find((h) => h.orgId === 'acme')?.consecutiveFailures, 1);

    const raw = rawPool(t, url);
    // The rotated secret (no repository reads it but the claim).
    const hook = (await raw.query('SELECT previous_secret, previous_secret_expires_at, last_success_at FROM webhooks WHERE org_id = $1', ['acme'])).rows[0];
    assert.deepEqual(hook, { previous_secret: 'whsec_old_secret', previous_secret_expires_at: s.now + 86_400_000, last_success_at: s.now - 5_000 });
    // Feed sources keep their ids and belong to the instance, 'api' included.
    const pgSources = (await raw.query('SELECT id, instance, name FROM feed_sources ORDER BY id')).rows;
    assert.deepEqual(
      pgSources,
      sqliteSources.map((r) => ({ ...r, instance: INSTANCE })),
    );
    assert.ok(sqliteSources.some((r) => r.name === 'api'));
    assert.deepEqual((await raw.query('SELECT DISTINCT instance FROM feed_positions UNION SELECT DISTINCT instance FROM feed_stats')).rows, [{ instance: INSTANCE }]);
    // Nobody holds a lease after the move.
    assert.deepEqual((await raw.query('SELECT count(*) AS n FROM deliveries WHERE lease_expires_at IS NOT NULL OR leased_by IS NOT NULL')).rows, [{ n: 0 }]);

    // The leased deliveries are due again, with the fresh one; the failed one waits for its retry.
    const due = await pg.transaction((tx) => tx.deliveries.dueRows('acme', s.now, 100));
    assert.deepEqual(due.map((r) => r.id).sort((a, b) => a - b), [s.d.fresh, s.d.leasedFresh, s.d.leasedRetried].sort((a, b) => a - b));
    const dueRow = due.find((r) => r.id === s.d.fresh)!;
    assert.equal(dueRow.previous_secret, 'whsec_old_secret');
    assert.equal(dueRow.secret, 'whsec_new_secret');
    assert.equal(dueRow.active_hmac, 1);
    assert.deepEqual(
      (await pg.transaction((tx) => tx.deliveries.dueRows('globex', s.now, 100))).map((r) => r.id),
      [s.d.globexFresh],
    );

    // New rows get ids above the copied ones; the instance's sources are found, not made again.
    const fresh = await pg.transaction(async (tx) => {
      const source = await tx.feed.sourceId(FEED);
      const at = await tx.feed.receivedAt(Date.now());
      const [seq] = await tx.feed.insertEvents([{ event: { id: 'evt_after', orgId: 'acme', anticipationRequestId: 'ar_after', occurredAt: at, details: DETAILS, legacyId: null }, position: 1000 }], source, at);
      assert.ok(typeof seq === 'number');
      const delivery = await tx.deliveries.insert(seq, 'acme', 3001, at);
      await tx.deliveries.insertAttempts([
        { deliveryId: delivery, attempt: 1, startedAt: at, durationMs: 1, url: 'https://hooks.acme.example/in', statusCode: 200, errorClass: null, errorDetail: null, responseBody: null, outcome: 'delivered', sentTimestamp: null, sentSignature: null },
      ]);
      // Before the test event: its insert of the 'api' row, which conflicts, still takes a number.
      const otherSource = await tx.feed.sourceId('/var/log/other.jsonl');
      const testSeq = await tx.deliveries.insertTestEvent('evt_test_after', 'acme', '{"type":"webhook.test"}', at);
      const user = await tx.users.insert({ orgId: 'globex', email: 'new@globex.example', emailKey: emailKey('new@globex.example'), roleName: 'auditor' }, at);
      await tx.feed.insertRejects([{ source: FEED, position: 1100, lineBytes: 1, raw: Buffer.from('x'), reason: 'invalid_json', detail: 'x', eventId: null, receivedAt: at }]);
      return { source, seq, delivery, testSeq, user, otherSource, attempts: await tx.deliveries.attempts(delivery), rejects: await tx.feed.listRejects(maxReject, 10) };
    });
    assert.equal(fresh.source, sqliteSources.find((r) => r.name === FEED)?.id);
    assert.equal(fresh.seq, maxSeq + 1);
    assert.equal(fresh.testSeq, maxSeq + 2);
    assert.equal(fresh.delivery, maxDelivery + 1);
    assert.equal(fresh.attempts[0]?.id, maxAttempt + 1);
    assert.equal(fresh.user?.id, maxUser + 1);
    assert.equal(fresh.rejects[0]?.id, maxReject + 1);
    assert.equal(fresh.otherSource, maxSource + 1);
    assert.deepEqual(
      (await raw.query("SELECT count(*) AS n FROM feed_sources WHERE name = 'api'")).rows,
      [{ n: 1 }],
      'the test event used the copied api row',
    );
    assert.deepEqual(result.nextIds.find((n) => n.table === 'events'), { table: 'events', column: 'seq', next: maxSeq + 1 });
  });

  test('copies one snapshot: what another process writes during the copy stays behind', async (t) => {
    const { path, store } = sqliteStore(t);
    const s = await seed(store);
    await store.close();
    const url = await (await pgServer()).createDatabase();
    // A daemon still running: it writes once the copy has read the organizations.
    const daemon = openSqliteStore(path, systemClock);
    t.after(() => daemon.close());
    let wrote = false;
    const log = createLogger('info', {
      write: (line: string) => {
        const record = JSON.parse(line) as Record<string, unknown>;
        if (record.msg !== 'db copy: table copied' || record.table !== 'organizations') return;
        daemon.db.exec(`INSERT INTO organizations (id, name, created_at) VALUES ('late', 'Late', 1);
          INSERT INTO events (id, org_id, anticipation_request_id, occurred_at, payload, source_id, received_at) VALUES ('evt_late', 'acme', 'ar', 1, '{}', 1, ${s.now})`);
        wrote = true;
      },
    });
    const result = await copySqliteToPostgres({ from: path, to: url, instance: INSTANCE, log, chunkRows: 3 });
    assert.equal(wrote, true);
    assert.equal(result.tables.find((r) => r.table === 'organizations')?.rows, 2);
    assert.equal(result.tables.find((r) => r.table === 'events')?.rows, s.eventIds.length);
    const raw = rawPool(t, url);
    assert.deepEqual((await raw.query('SELECT (SELECT count(*) FROM organizations) AS orgs, (SELECT count(*) FROM events) AS events')).rows, [{ orgs: 2, events: s.eventIds.length }]);
    assert.equal(daemon.db.prepare('SELECT count(*) FROM events').pluck().get(), s.eventIds.length + 1);
  });

  test('refuses a target that holds data, and leaves it as it was', async (t) => {
    const { path, store } = sqliteStore(t);
    await seed(store);
    await store.close();
    const url = await (await pgServer()).createDatabase();
    const pg = await openPgStore(url, systemClock, { instance: INSTANCE, poolSize: 1 });
    t.after(() => pg.close());
    await pg.transaction(async (tx) => {
      await tx.orgs.insert({ id: 'initech', name: 'Initech', createdAt: 1 });
      await tx.roles.insert({ name: 'ops', description: 'ops', permissions: [Permission.webhookRead] }, 1);
    });
    const before = await pg.read(async (tx) => ({ orgs: await tx.orgs.list(), roles: await tx.roles.list(), stats: await tx.feed.stats() }));

    await assert.rejects(copySqliteToPostgres({ from: path, to: url, instance: INSTANCE }), (err: unknown) => {
      assert.ok(err instanceof HookrelayError);
      assert.equal(err.code, ErrorCode.config);
      assert.match(err.message, /is not empty: it holds organizations, custom roles\./);
      assert.match(err.message, /copy into a new database/);
      assert.ok(!err.message.includes(decodeURIComponent(new URL(url).password)), 'the password is never shown');
      return true;
    });
    const afterRefusal = await pg.read(async (tx) => ({ orgs: await tx.orgs.list(), roles: await tx.roles.list(), stats: await tx.feed.stats() }));
    assert.deepEqual(afterRefusal, before);
    const raw = rawPool(t, url);
    assert.deepEqual((await raw.query('SELECT (SELECT count(*) FROM events) + (SELECT count(*) FROM users) + (SELECT count(*) FROM feed_sources) AS n')).rows, [{ n: 0 }]);
  });

  test('refuses a target with only a custom role or feed rows', async (t) => {
    const { path, store } = sqliteStore(t);
    await store.close();
    for (const [what, sql] of [
      ['custom roles', `INSERT INTO roles (name, description, permissions, builtin, created_at) VALUES ('ops', 'ops', '[]', false, 1)`],
      ['feed statistics', `INSERT INTO feed_stats (instance, source, updated_at) VALUES ('elsewhere', '-', 1)`],
    ] as const) {
      const url = await (await pgServer()).createDatabase();
      const pg = await openPgStore(url, systemClock, { instance: INSTANCE, poolSize: 1 });
      await pg.close();
      const raw = rawPool(t, url);
      await raw.query(sql);
      await assert.rejects(copySqliteToPostgres({ from: path, to: url, instance: INSTANCE }), (err: unknown) => {
        assert.ok(err instanceof HookrelayError);
        assert.equal(err.code, ErrorCode.config);
        assert.match(err.message, new RegExp(`is not empty: it holds ${what}\\.`));
        return true;
      });
    }
  });

  test('an empty SQLite database copies into an empty target', async (t) => {
    const { path, store } = sqliteStore(t);
    await store.close();
    const url = await (await pgServer()).createDatabase();
    const result = await copySqliteToPostgres({ from: path, to: url, instance: INSTANCE });
    assert.equal(result.replacedNul, 0);
    assert.deepEqual(
      result.tables.filter((r) => r.rows > 0).map((r) => [r.table, r.rows]),
      [['feed_sources', 1]],
      "only SQLite's 'api' source",
    );
    assert.deepEqual(result.nextIds, [{ table: 'feed_sources', column: 'id', next: 2 }]);
    const pg = await openPgStore(url, systemClock, { instance: INSTANCE, poolSize: 1 });
    t.after(() => pg.close());
    await pg.transaction(async (tx) => {
      await tx.orgs.insert({ id: 'acme', name: 'Acme', createdAt: 1 });
      assert.equal(await tx.feed.sourceId('feed.jsonl'), 2);
      assert.equal(await tx.deliveries.insertTestEvent('evt_t', 'acme', '{}', 1), 1);
    });
  });

  test('a failure while copying rolls everything back', async (t) => {
    const { path, store } = sqliteStore(t);
    await seed(store);
    // An attempt whose delivery is gone (written with foreign keys off): PostgreSQL refuses it.
    store.db.pragma('foreign_keys = OFF');
    store.db
      .prepare(`INSERT INTO delivery_attempts (id, delivery_id, attempt, started_at, duration_ms, url, outcome) VALUES (900, 12345, 1, 1, 1, 'https://x.example', 'retry')`)
      .run();
    await store.close();
    const url = await (await pgServer()).createDatabase();

    await assert.rejects(copySqliteToPostgres({ from: path, to: url, instance: INSTANCE }), /inserting rows .* of delivery_attempts into PostgreSQL failed .*foreign key/);
    const raw = rawPool(t, url);
    const { rows } = await raw.query(
      `SELECT (SELECT count(*) FROM organizations) AS orgs, (SELECT count(*) FROM roles WHERE NOT builtin) AS roles, (SELECT count(*) FROM events) AS events,
         (SELECT count(*) FROM deliveries) AS deliveries, (SELECT count(*) FROM feed_sources) AS sources, (SELECT count(*) FROM roles WHERE builtin) AS builtins`,
    );
    assert.deepEqual(rows, [{ orgs: 0, roles: 0, events: 0, deliveries: 0, sources: 0, builtins: 2 }]);
    // The identities were not moved either: the target is as a fresh one.
    const pg = await openPgStore(url, systemClock, { instance: INSTANCE, poolSize: 1 });
    t.after(() => pg.close());
    await pg.transaction(async (tx) => {
      await tx.orgs.insert({ id: 'acme', name: 'Acme', createdAt: 1 });
      assert.equal(await tx.deliveries.insertTestEvent('evt_t', 'acme', '{}', 1), 1);
    });
  });

  test('refuses a SQLite file that does not exist, without creating it or touching the target', async (t) => {
    const path = join(tempDir(t), 'nope', 'hookrelay.db');
    const url = await (await pgServer()).createDatabase();
    await assert.rejects(copySqliteToPostgres({ from: path, to: url, instance: INSTANCE }), (err: unknown) => {
      assert.ok(err instanceof HookrelayError);
      assert.equal(err.code, ErrorCode.config);
      assert.equal(err.message.startsWith(`SQLite database ${path} does not exist: give --from the path of the hookrelay.db to copy`), true, err.message);
      return true;
    });
    assert.equal(existsSync(path), false);
    assert.equal(existsSync(join(path, '..')), false);
    const raw = rawPool(t, url);
    assert.deepEqual((await raw.query("SELECT to_regclass('hookrelay_schema') IS NULL AS untouched")).rows, [{ untouched: true }]);
  });

  test('refuses a directory as the SQLite file, and an empty instance name', async (t) => {
    const dir = tempDir(t);
    const url = await (await pgServer()).createDatabase();
    await assert.rejects(copySqliteToPostgres({ from: dir, to: url, instance: INSTANCE }), (err: unknown) => err instanceof HookrelayError && err.code === ErrorCode.config && /is not a file/.test(err.message));
    const { path, store } = sqliteStore(t);
    await store.close();
    await assert.rejects(copySqliteToPostgres({ from: path, to: url, instance: '' }), (err: unknown) => err instanceof HookrelayError && err.code === ErrorCode.config && /instance name is empty/.test(err.message));
  });

  test('the CLI takes the target from --to-env NAME or --to-file PATH, or --to without a password; a password on the command line is refused, saying why', async (t) => {
    assertBuilt();
    const dir = tempDir(t);
    const stateDir = join(dir, 'state');
    await migrateCli(t, ['--state-dir', stateDir]);
    assert.equal((await runCli(t, ['orgs', 'add', 'acme', '--state-dir', stateDir])).code, 0);
    const from = join(stateDir, 'hookrelay.db');
    const server = await pgServer();
    const copy = (args: readonly string[], env: Record<string, string> = {}) => runCli(t, ['db', 'copy', '--from', from, '--instance', INSTANCE, '--json', ...args, '--state-dir', stateDir], { env });
    const copied = (r: { code: number | null; stdout: string; stderr: string }) => {
      assert.equal(r.code, 0, r.stderr);
      return (JSON.parse(r.stdout) as { tables: Array<{ table: string; rows: number }> }).tables.find((x) => x.table === 'organizations')?.rows;
    };

    const withPassword = await server.createDatabase();
    const password = decodeURIComponent(new URL(withPassword).password);
    assert.notEqual(password, '');
    const refused = await copy(['--to', withPassword]);
    assert.equal(refused.code, 2, refused.stderr);
    assert.match(refused.stderr, /^hookrelay: --to must not carry a password \(postgres:\/\/.*\): a command line is visible to every user of this machine \(ps, \/proc\) and stays in the shell's history\. Give the URL in an environment variable \(--to-env NAME\) or a file \(--to-file PATH\), or keep the password in ~\/\.pgpass or PGPASSWORD\n$/);
    assert.ok(!refused.stderr.includes(password), 'the refusal shows the password');
    const asParameter = new URL(withPassword);
    asParameter.password = '';
    asParameter.searchParams.set('password', password);
    assert.equal((await copy(['--to', asParameter.href])).code, 2);

    // --to-env: the URL in a variable of the command's environment.
    const unset = await copy(['--to-env', 'HR_COPY_TARGET']);
    assert.equal(unset.code, 2);
    assert.match(unset.stderr, /--to-env HR_COPY_TARGET: the environment variable HR_COPY_TARGET is not set/);
    assert.equal(copied(await copy(['--to-env', 'HR_COPY_TARGET'], { HR_COPY_TARGET: withPassword })), 1);

    // --to-file: the URL on the first line of a file.
    const file = join(dir, 'target-url');
    writeFileSync(file, `${await server.createDatabase()}\n`, { mode: 0o600 });
    assert.equal(copied(await copy(['--to-file', file])), 1);
    const missing = await copy(['--to-file', join(dir, 'nope')]);
    assert.equal(missing.code, 2);
    assert.match(missing.stderr, /--to-file: cannot read .*nope \(ENOENT\)/);

    // --to without a password: libpq's ways of giving it (PGPASSWORD here, ~/.pgpass) work.
    const bare = new URL(await server.createDatabase());
    bare.password = '';
    assert.equal(copied(await copy(['--to', bare.href], { PGPASSWORD: password })), 1);

    const twice = await copy(['--to', bare.href, '--to-env', 'HR_COPY_TARGET']);
    assert.equal(twice.code, 2);
    assert.match(twice.stderr, /give the target database once: --to and --to-env were both given/);
  });
});

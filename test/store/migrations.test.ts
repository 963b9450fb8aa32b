/**
 * Upgrading a database written by an earlier hookrelay: the data survives each migration and
 * reads back the same through the current code.
 */
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { test } from 'node:test';
import Database from 'better-sqlite3';
import { SCHEMA_VERSION } from '../../src/store/sqlite/connection.ts';
import { openSqliteStore } from '../../src/store/sqlite/store.ts';
import { createDeliveryLogService } from '../../src/services/delivery-log.ts';
import { databaseAtVersion, tempDir } from '../helpers/helpers.ts';
import { repos } from '../helpers/sqlite-repos.ts';
import { BY_TEST, testAudit } from '../helpers/audit-helpers.ts';

/** A database at schema version 3 (the delivery engine, before leaner ingestion), with one organization, its webhook, two events and their deliveries. */
function version3Database(path: string): void {
  const db = databaseAtVersion(path, 3, 'whsec_x');
  db.exec(`
    INSERT INTO events (id, org_id, anticipation_request_id, status, previous_status, occurred_at, payload, source, source_position, received_at)
      VALUES ('evt_1', 'acme', 'ar_1', 'approved', 'submitted', 1000,
        '{"type":"anticipation_request.status_changed","timestamp":"1970-01-01T00:00:01.000Z","data":{"event_id":"evt_1"}}', '/feed.jsonl', 0, 5000);
    INSERT INTO events (id, org_id, anticipation_request_id, status, occurred_at, payload, source, received_at, type)
      VALUES ('evt_test_1', 'acme', '', 'test', 2000, '{"type":"webhook.test","timestamp":"1970-01-01T00:00:02.000Z","data":{"event_id":"evt_test_1"}}', 'api', 6000, 'webhook.test');
    INSERT INTO deliveries (event_seq, org_id, ordering_key, status, next_attempt_at, created_at, updated_at) VALUES (1, 'acme', 7, 'dead', 5000, 5000, 5000);
    INSERT INTO deliveries (event_seq, org_id, ordering_key, status, next_attempt_at, created_at, updated_at) VALUES (2, 'acme', 8, 'pending', 6000, 6000, 6000);
    INSERT INTO delivery_attempts (delivery_id, attempt, started_at, duration_ms, url, status_code, outcome) VALUES (1, 1, 5000, 12, 'https://hooks.example/acme', 500, 'dead');
  `);
  db.close();
}

test('a version 3 database upgrades to the current schema with its events and deliveries intact', async (t) => {
  const path = join(tempDir(t), 'hookrelay.db');
  version3Database(path);

  const store = openSqliteStore(path, { now: () => 10_000 });
  t.after(() => store.close());
  assert.deepEqual({ from: store.migrated.from, to: store.migrated.to }, { from: 3, to: SCHEMA_VERSION });
  assert.match(store.migrated.backup ?? '', /pre-upgrade-.*-schema3-unknown\.db$/, 'copied before it was migrated');

  const columns = store.db.prepare("SELECT name FROM pragma_table_info('events')").pluck().all();
  assert.deepEqual(columns, ['seq', 'id', 'org_id', 'anticipation_request_id', 'occurred_at', 'payload', 'source_id', 'source_position', 'received_at', 'traceparent', 'tracestate']);
  // Each event still names where it came from, now through feed_sources.
  assert.deepEqual(
    store.db.prepare('SELECT e.id, s.name, e.source_position FROM events e JOIN feed_sources s ON s.id = e.source_id ORDER BY e.seq').raw().all(),
    [
      ['evt_1', '/feed.jsonl', 0],
      ['evt_test_1', 'api', null],
    ],
  );
  assert.equal(store.db.prepare("SELECT count(*) FROM sqlite_schema WHERE name = 'events_org_received'").pluck().get(), 0);
  assert.deepEqual(store.db.pragma('foreign_key_check'), []);

  // Deliveries were rebuilt (cheaper status check): rows, attempts and constraints are all still there.
  assert.deepEqual(repos(store).deliveries.attempts(1).map((a) => [a.attempt, a.statusCode, a.outcome]), [[1, 500, 'dead']]);
  assert.throws(() => store.db.prepare("UPDATE deliveries SET status = 'lost' WHERE id = 1").run(), /CHECK constraint failed/);
  assert.throws(
    () => store.db.prepare("INSERT INTO delivery_attempts (delivery_id, attempt, started_at, duration_ms, url, outcome) VALUES (99, 1, 0, 0, 'x', 'dead')").run(),
    /FOREIGN KEY constraint failed/,
  );
  assert.throws(
    () => store.db.prepare("INSERT INTO deliveries (event_seq, org_id, ordering_key, next_attempt_at, created_at, updated_at) VALUES (99, 'acme', 1, 0, 0, 0)").run(),
    /FOREIGN KEY constraint failed/,
  );
  assert.equal(store.db.pragma('foreign_keys', { simple: true }), 1);

  // The event type now comes from the payload: the delivery log shows the same as before.
  const deliveries = repos(store).deliveries.list('acme', { limit: 10 });
  assert.deepEqual(
    deliveries.map((d) => [d.eventId, d.eventType, d.status]),
    [
      ['evt_test_1', 'webhook.test', 'pending'],
      ['evt_1', 'anticipation_request.status_changed', 'dead'],
    ],
  );

  // Recovery finds the dead event of the window through the seq range, and requeues only it.
  const service = createDeliveryLogService(store, { userAgent: 'test' }, testAudit(store));
  assert.deepEqual(await service.recover(BY_TEST, 'acme', 4000, 5500), { requeued: 1, retriedNow: 0 });
  assert.deepEqual(await service.recover(BY_TEST, 'acme', 5500, 7000), { requeued: 0, retriedNow: 0 });
});

test('a migration that would leave a broken foreign key rolls back and leaves the database as it was', (t) => {
  const path = join(tempDir(t), 'hookrelay.db');
  version3Database(path);
  // An outbox row whose event is gone, as a database edited by hand (foreign keys off) could hold.
  const raw = new Database(path);
  raw.pragma('foreign_keys = OFF');
  raw.exec("INSERT INTO deliveries (event_seq, org_id, ordering_key, status, next_attempt_at, created_at, updated_at) VALUES (404, 'acme', 9, 'pending', 1, 1, 1)");
  raw.close();

  assert.throws(() => openSqliteStore(path, { now: () => 10_000 }), /would leave 1 broken foreign key\(s\); nothing was changed/);
  const after = new Database(path, { readonly: true });
  t.after(() => after.close());
  assert.equal(after.pragma('user_version', { simple: true }), 3);
  assert.equal(after.prepare("SELECT count(*) FROM sqlite_schema WHERE name = 'events_org_received'").pluck().get(), 1);
});

test('a version 8 database upgrades to 9: its attempt log is indexed by start time, and the attempts already in it are counted through that index', (t) => {
  const path = join(tempDir(t), 'hookrelay.db');
  const db = databaseAtVersion(path, 8, 'whsec_x');
  db.exec(`
    INSERT INTO events (id, org_id, anticipation_request_id, occurred_at, payload, source_id, received_at) VALUES ('evt_1', 'acme', 'ar_1', 1000, '"status":"approved"', 1, 5000);
    INSERT INTO deliveries (event_seq, org_id, ordering_key, status, attempts, next_attempt_at, created_at, updated_at) VALUES (1, 'acme', 7, 'delivered', 2, 5000, 5000, 5000);
    INSERT INTO delivery_attempts (delivery_id, attempt, started_at, duration_ms, url, status_code, outcome) VALUES (1, 1, 61000, 12, 'https://hooks.example/acme', 500, 'retry');
    INSERT INTO delivery_attempts (delivery_id, attempt, started_at, duration_ms, url, status_code, outcome) VALUES (1, 2, 62000, 12, 'https://hooks.example/acme', 200, 'delivered');
  `);
  assert.equal(db.prepare("SELECT count(*) FROM sqlite_schema WHERE name = 'delivery_attempts_started'").pluck().get(), 0);
  db.close();

  const store = openSqliteStore(path, { now: () => 100_000 });
  t.after(() => store.close());
  assert.deepEqual({ from: store.migrated.from, to: store.migrated.to }, { from: 8, to: SCHEMA_VERSION });
  assert.match(store.migrated.backup ?? '', /pre-upgrade-.*-schema8-unknown\.db$/, 'copied before it was migrated');
  assert.equal(
    store.db.prepare("SELECT sql FROM sqlite_schema WHERE name = 'delivery_attempts_started'").pluck().get(),
    'CREATE INDEX delivery_attempts_started ON delivery_attempts (started_at, delivery_id, outcome)',
  );
  assert.deepEqual(repos(store).deliveries.attemptCounts('acme', 60_000, 120_000, 60_000), [{ bucket: 0, succeeded: 1, failed: 1 }]);
});

test('a version 9 database upgrades to 10: its attempts keep their rows, with no request as sent recorded, and new attempts record theirs', (t) => {
  const path = join(tempDir(t), 'hookrelay.db');
  const db = databaseAtVersion(path, 9, 'whsec_x');
  db.exec(`
    INSERT INTO events (id, org_id, anticipation_request_id, occurred_at, payload, source_id, received_at) VALUES ('evt_1', 'acme', 'ar_1', 1000, '"status":"approved"', 1, 5000);
    INSERT INTO deliveries (event_seq, org_id, ordering_key, status, attempts, next_attempt_at, created_at, updated_at) VALUES (1, 'acme', 7, 'pending', 1, 5000, 5000, 5000);
    INSERT INTO delivery_attempts (delivery_id, attempt, started_at, duration_ms, url, status_code, outcome) VALUES (1, 1, 61000, 12, 'https://hooks.example/acme', 500, 'retry');
  `);
  assert.equal(db.prepare("SELECT count(*) FROM pragma_table_info('delivery_attempts') WHERE name LIKE 'sent_%'").pluck().get(), 0);
  db.close();

  const store = openSqliteStore(path, { now: () => 100_000 });
  t.after(() => store.close());
  assert.deepEqual({ from: store.migrated.from, to: store.migrated.to }, { from: 9, to: SCHEMA_VERSION });
  assert.match(store.migrated.backup ?? '', /pre-upgrade-.*-schema9-unknown\.db$/, 'copied before it was migrated');
  assert.deepEqual(
    store.db.prepare("SELECT name, type, \"notnull\" FROM pragma_table_info('delivery_attempts') WHERE name LIKE 'sent_%' ORDER BY cid").all(),
    [
      { name: 'sent_timestamp', type: 'INTEGER', notnull: 0 },
      { name: 'sent_signature', type: 'TEXT', notnull: 0 },
    ],
  );
  const r = repos(store);
  r.deliveries.insertAttempts([{ deliveryId: 1, attempt: 2, startedAt: 90_000, durationMs: 8, url: 'https://hooks.example/acme', statusCode: 200, errorClass: null, errorDetail: null, responseBody: 'ok', outcome: 'delivered', sentTimestamp: 90, sentSignature: 'v1,abc=' }]);
  assert.deepEqual(
    r.deliveries.attempts(1).map((a) => [a.attempt, a.statusCode, a.sentTimestamp, a.sentSignature]),
    [
      [1, 500, null, null],
      [2, 200, 90, 'v1,abc='],
    ],
  );
});

/**
 * The webhook body of a stored event (storedBody / statusChangeBody in
 * src/domain/feed-event.ts). Since schema version 5 a status change stores only its details
 * and its body is put together again on every read; a whole body (a test notification, any
 * event stored before version 5) is sent as stored. What receivers and signatures rely on:
 * the documented body, ids quoted as JSON.stringify quotes them, the same bytes on every read,
 * and duplicates still recognised against events stored before the change.
 */
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { join } from 'node:path';
import { describe, test, type TestContext } from 'node:test';
import type { Clock } from '../../src/domain/clock.ts';
import { EVENT_TYPE, statusChangeBody, storedBody, type StoredEvent } from '../../src/domain/feed-event.ts';
import { orderingKey } from '../../src/domain/ordering.ts';
import { createIngestService, type RawLine } from '../../src/services/ingest.ts';
import { dueDeliveryOf } from '../../src/store/row-mappers.ts';
import { DeliveryStatus, type DueDelivery } from '../../src/store/values.ts';
import { MIGRATIONS } from '../../src/store/sqlite/migrations.ts';
import { openSqliteStore, type SqliteStore as Store } from '../../src/store/sqlite/store.ts';
import { databaseAtVersion, silentLog, tempDir } from '../helpers/helpers.ts';
import { repos } from '../helpers/sqlite-repos.ts';

const OCCURRED_AT = Date.UTC(2026, 10, 22, 8, 30, 0, 5);
const OCCURRED_ISO = '2026-11-22T08:30:00.005Z';

/** Ids and statuses that JSON must escape or that are not ASCII. */
const AWKWARD = ['chg_"quoted"', 'chg_back\\slash', 'chg_\\"both\\"', 'chg_é', 'chg_😀', 'ünï"cödé\\😀', 'x\u2028y\u2029z', 'chg_plain'];

/** The documented body of a status change, by JSON.stringify: keys in the documented order. */
function documentedBody(event: { id: string; orgId: string; anticipationRequestId: string; iso: string }, details: Record<string, unknown>): string {
  const { id, orgId, anticipationRequestId, iso } = event;
  return JSON.stringify({
    type: EVENT_TYPE,
    timestamp: iso,
    data: { event_id: id, organization_id: orgId, anticipation_request_id: anticipationRequestId, occurred_at: iso, ...details },
  });
}

describe('storedBody', () => {
  test('a whole body (a test notification, an event stored before version 5) is returned byte for byte, whatever the columns say', () => {
    const bodies = [
      '{"type":"webhook.test","timestamp":"2026-11-22T08:30:00.000Z","data":{"event_id":"evt_test_1","organization_id":"acme","message":"Test notification from hookrelay"}}',
      // As version 4 stored a status change: the status fields before occurred_at.
      '{"type":"anticipation_request.status_changed","timestamp":"2026-11-22T08:30:00.000Z","data":{"event_id":"chg_1","organization_id":"acme",' +
        '"anticipation_request_id":"ar_1","status":"approved","previous_status":null,"occurred_at":"2026-11-22T08:30:00.000Z"}}',
      // Spacing and escapes that re-serialising would change.
      '{ "type" : "x" , "data" : { "s" : "\\u00e9\\/" , "n" : 1.50 } }',
    ];
    for (const payload of bodies) {
      const event: StoredEvent = { id: 'chg_other', orgId: 'other', anticipationRequestId: 'ar_other', occurredAt: 0, payload };
      assert.equal(storedBody(event), payload);
    }
  });

  test("stored details expand to the documented body: type, timestamp, then data with the event's columns, its status fields and the line's data", () => {
    const event = { id: 'chg_77812', orgId: 'acme', anticipationRequestId: 'ar_1842', occurredAt: OCCURRED_AT };
    const details = '"status":"approved","previous_status":null,"note":"x"';
    const expected =
      '{"type":"anticipation_request.status_changed","timestamp":"2026-11-22T08:30:00.005Z","data":{"event_id":"chg_77812","organization_id":"acme",' +
      '"anticipation_request_id":"ar_1842","occurred_at":"2026-11-22T08:30:00.005Z","status":"approved","previous_status":null,"note":"x"}}';
    assert.equal(storedBody({ ...event, payload: details }), expected);
    assert.equal(statusChangeBody({ ...event, details }), expected);
    assert.equal(storedBody({ ...event, payload: details }), storedBody({ ...event, payload: details }), 'the same row gives the same bytes');
  });

  test('ids with quotes, backslashes and non-ASCII characters are quoted exactly as JSON.stringify quotes them', () => {
    for (const value of AWKWARD) {
      const event = { id: value, orgId: 'acme', anticipationRequestId: `ar_${value}`, occurredAt: OCCURRED_AT };
      const details = `"status":${JSON.stringify(`st_${value}`)},"previous_status":${JSON.stringify(`prev_${value}`)}`;
      const expected = documentedBody({ ...event, iso: OCCURRED_ISO }, { status: `st_${value}`, previous_status: `prev_${value}` });
      assert.equal(storedBody({ ...event, payload: details }), expected, value);
    }
  });
});

/** A clock that says what the test last set. */
interface ManualClock extends Clock {
  at: number;
}

function line(value: unknown): RawLine {
  return { bytes: Buffer.from(typeof value === 'string' ? value : JSON.stringify(value)), position: null };
}

/** The deliveries the dispatcher would take now, with their request bodies (dueRows, then dueDeliveryOf). */
function due(store: Store, orgId: string, now: number, limit: number): DueDelivery[] {
  return repos(store).deliveries.dueRows(orgId, now, limit).map(dueDeliveryOf);
}

function openTestStore(t: TestContext, path: string, clock: Clock): Store {
  const store = openSqliteStore(path, clock);
  t.after(() => store.close());
  return store;
}

describe('stored events read back', () => {
  test('a line ingested and read back through due() gives the body the line describes, with the same bytes on every read', async (t) => {
    const path = join(tempDir(t, 'hookrelay-body-'), 'hookrelay.db');
    const clock: ManualClock = { at: 1_000_000, now: () => clock.at };
    const store = openTestStore(t, path, clock);
    repos(store).orgs.insert({ id: 'acme', name: 'Acme', createdAt: 0 });
    repos(store).webhooks.upsert('acme', 'https://hooks.example/acme', false, null, 0);

    const data = { amount_cents: 125000, note: 'açaí "quoted" \\ ✓', nested: { list: [1, 'two', null], ok: true } };
    type Line = { event_id: string; organization_id: string; anticipation_request_id: string; status: string; previous_status?: string; occurred_at: string; data: typeof data };
    const lines = AWKWARD.map((value, i): Line => ({
      // An event id is sent as a header: the values no header can carry go in the other fields only.
      event_id: /^[\x20-\x7e\u00a0-\u00ff]+$/.test(value) ? value : `chg_${i}`,
      organization_id: 'acme',
      anticipation_request_id: `ar_${value}`,
      status: `st_${value}`,
      // Every other line: no previous_status, and occurred_at with an offset (normalised to UTC).
      ...(i % 2 === 0 ? { previous_status: `prev_${value}`, occurred_at: '2026-11-22T08:30:00.005Z' } : { occurred_at: '2026-11-22T10:30:00.005+02:00' }),
      data,
    }));
    const ingest = createIngestService(store, silentLog);
    assert.deepEqual(await ingest.ingest('feed', lines.map(line), null), { accepted: lines.length, duplicates: 0, quarantined: 0, undeliverable: 0 });

    const expected = lines.map((l) =>
      documentedBody(
        { id: l.event_id, orgId: l.organization_id, anticipationRequestId: l.anticipation_request_id, iso: OCCURRED_ISO },
        { status: l.status, previous_status: l.previous_status ?? null, ...l.data },
      ),
    );
    const dueNow = due(store, 'acme', clock.at, 100);
    assert.deepEqual(
      dueNow.map((d) => d.eventId),
      lines.map((l) => l.event_id),
    );
    assert.deepEqual(
      dueNow.map((d) => d.payload),
      expected,
    );
    for (const [i, d] of dueNow.entries()) assert.deepEqual(JSON.parse(d.payload), JSON.parse(expected[i]!));

    // A failed attempt and its retry, another connection, the duplicate check: always the same bytes.
    const first = dueNow[0]!;
    repos(store).deliveries.lease([first.id], clock.at + 30_000, clock.at);
    repos(store).deliveries.settle(first.id, { status: DeliveryStatus.pending, attempts: 1, nextAttemptAt: clock.at + 60_000, at: clock.at, statusCode: 500, error: 'HTTP 500' });
    const retried = due(store, 'acme', clock.at + 60_000, 100).find((d) => d.id === first.id);
    assert.equal(retried?.payload, first.payload);
    const other = openTestStore(t, path, clock);
    assert.deepEqual(
      due(other, 'acme', clock.at + 60_000, 100).map((d) => d.payload),
      [...expected.slice(1), expected[0]],
    );
    const storedFirst = repos(store).feed.storedEvents([first.eventId]).get(first.eventId);
    assert.ok(storedFirst !== undefined, 'the event is stored under its id');
    assert.equal(storedBody(storedFirst), first.payload);
  });

  /** A database at schema version 4 holding two status changes as version 4 stored them (whole bodies), each with a fresh delivery. */
  function version4Database(path: string, rows: ReadonlyArray<{ id: string; request: string; occurredAt: number; body: string }>): void {
    const db = databaseAtVersion(path, 4);
    const event = db.prepare(`INSERT INTO events (id, org_id, anticipation_request_id, occurred_at, payload, source, source_position, received_at)
      VALUES (?, 'acme', ?, ?, ?, '/var/log/feed.jsonl', NULL, 5000)`);
    const delivery = db.prepare(`INSERT INTO deliveries (event_seq, org_id, ordering_key, status, next_attempt_at, created_at, updated_at)
      VALUES (?, 'acme', ?, 'pending', 5000, 5000, 5000)`);
    for (const row of rows) {
      const seq = Number(event.run(row.id, row.request, row.occurredAt, row.body).lastInsertRowid);
      delivery.run(seq, orderingKey('acme', row.request));
    }
    db.close();
  }

  test('events stored whole before version 5 are sent unchanged; the same line again is a duplicate, the same event_id with other content an event_id_conflict', async (t) => {
    const path = join(tempDir(t, 'hookrelay-body-'), 'hookrelay.db');
    const withTime = {
      event_id: 'chg_"legacy"_1',
      organization_id: 'acme',
      anticipation_request_id: 'ar_é_1',
      status: 'approved',
      previous_status: 'submitted',
      occurred_at: '2026-11-22T08:30:00.000Z',
      data: { amount_cents: 125000 },
    };
    // Without occurred_at: it was stored with the time the line was read (5000), which stands in again.
    const withoutTime = { event_id: 'chg_legacy_2', organization_id: 'acme', anticipation_request_id: 'ar_2', status: 'approved' };
    // The bodies as version 4 wrote them: status fields before occurred_at.
    const legacy = [
      {
        id: withTime.event_id,
        request: withTime.anticipation_request_id,
        occurredAt: Date.parse(withTime.occurred_at),
        body: JSON.stringify({
          type: EVENT_TYPE,
          timestamp: withTime.occurred_at,
          data: { event_id: withTime.event_id, organization_id: 'acme', anticipation_request_id: withTime.anticipation_request_id, status: 'approved', previous_status: 'submitted', occurred_at: withTime.occurred_at, amount_cents: 125000 },
        }),
      },
      {
        id: withoutTime.event_id,
        request: withoutTime.anticipation_request_id,
        occurredAt: 5000,
        body: JSON.stringify({
          type: EVENT_TYPE,
          timestamp: '1970-01-01T00:00:05.000Z',
          data: { event_id: withoutTime.event_id, organization_id: 'acme', anticipation_request_id: 'ar_2', status: 'approved', previous_status: null, occurred_at: '1970-01-01T00:00:05.000Z' },
        }),
      },
    ];
    version4Database(path, legacy);
    const clock: ManualClock = { at: 1_000_000, now: () => clock.at };
    const store = openTestStore(t, path, clock);
    assert.deepEqual({ from: store.migrated.from, to: store.migrated.to }, { from: 4, to: MIGRATIONS.length });
    // Their ids were the producer's, none derived: nothing to look up under old ids.
    assert.deepEqual(store.db.prepare('SELECT before_seq FROM legacy_event_ids').pluck().all(), []);

    // Sent as stored, byte for byte (what was signed before the upgrade is signed again).
    assert.deepEqual(
      due(store, 'acme', clock.at, 10).map((d) => d.payload),
      legacy.map((l) => l.body),
    );

    const ingest = createIngestService(store, silentLog);
    const counts = await ingest.ingest(
      'feed',
      [
        line(withTime),
        line(`{"data":{"amount_cents":125000},"occurred_at":"2026-11-22T10:30:00+02:00","previous_status":"submitted","status":"approved",` +
          `"anticipation_request_id":"ar_é_1","organization_id":"acme","event_id":"chg_\\"legacy\\"_1"}`),
        line(withoutTime),
        line({ ...withTime, status: 'rejected' }),
        line({ ...withoutTime, data: { extra: 1 } }),
      ],
      null,
    );
    assert.deepEqual(counts, { accepted: 0, duplicates: 3, quarantined: 2, undeliverable: 0 });
    assert.deepEqual(
      (await ingest.rejects(0, 10)).map((r) => [r.reason, r.eventId]),
      [
        ['event_id_conflict', withTime.event_id],
        ['event_id_conflict', withoutTime.event_id],
      ],
    );
    assert.equal(store.db.prepare('SELECT count(*) FROM events').pluck().get(), 2);
    assert.equal(store.db.prepare('SELECT count(*) FROM deliveries').pluck().get(), 2);
  });

  test('a line without event_id stored before version 5 under the id derived then is still a duplicate when read again; a new line gets the time-first id', async (t) => {
    const path = join(tempDir(t, 'hookrelay-body-'), 'hookrelay.db');
    const old = { organization_id: 'acme', anticipation_request_id: 'ar_7', status: 'approved', occurred_at: '2026-11-22T08:30:00.000Z' };
    const oldBytes = Buffer.from(JSON.stringify(old));
    const hash = createHash('sha256').update(oldBytes).digest('hex').slice(0, 32);
    // Version 4 derived evt_ + the hash, whether or not the line had a time.
    version4Database(path, [
      {
        id: `evt_${hash}`,
        request: 'ar_7',
        occurredAt: Date.parse(old.occurred_at),
        body: JSON.stringify({ type: EVENT_TYPE, timestamp: old.occurred_at, data: { event_id: `evt_${hash}`, organization_id: 'acme', anticipation_request_id: 'ar_7', status: 'approved', previous_status: null, occurred_at: old.occurred_at } }),
      },
    ]);
    const clock: ManualClock = { at: 1_000_000, now: () => clock.at };
    const store = openTestStore(t, path, clock);
    const ingest = createIngestService(store, silentLog);
    // The upgrade noted where the events with ids derived before end.
    assert.deepEqual(store.db.prepare('SELECT before_seq FROM legacy_event_ids').pluck().all(), [2]);

    // Read again (hookrelay ingest of the same file, say): one event still.
    assert.deepEqual(await ingest.ingest('feed', [line(JSON.stringify(old))], null), { accepted: 0, duplicates: 1, quarantined: 0, undeliverable: 0 });
    // A new line: stored under the time-first id; and it too is a duplicate the second time.
    const fresh = { ...old, anticipation_request_id: 'ar_8' };
    assert.deepEqual(await ingest.ingest('feed', [line(fresh), line(fresh)], null), { accepted: 1, duplicates: 1, quarantined: 0, undeliverable: 0 });
    const freshHash = createHash('sha256').update(Buffer.from(JSON.stringify(fresh))).digest('hex').slice(0, 32);
    assert.deepEqual(store.db.prepare('SELECT id FROM events ORDER BY seq').pluck().all(), [`evt_${hash}`, `evt_20261122T083000000Z_${freshHash}`]);
  });

  test('in a database created at version 5 or later nothing is looked up under an old id: an event_id equal to one is an ordinary event', async (t) => {
    const store = openTestStore(t, join(tempDir(t, 'hookrelay-body-'), 'hookrelay.db'), { now: () => 1_000_000 });
    const ingest = createIngestService(store, silentLog);
    const timed = { organization_id: 'acme', anticipation_request_id: 'ar_7', status: 'approved', occurred_at: '2026-11-22T08:30:00.000Z' };
    const hash = createHash('sha256').update(Buffer.from(JSON.stringify(timed))).digest('hex').slice(0, 32);
    // A producer's own event_id that happens to look like an old derived id, then the line whose old id it is.
    const counts = await ingest.ingest('feed', [line({ ...timed, anticipation_request_id: 'ar_other', event_id: `evt_${hash}` }), line(timed)], null);
    assert.deepEqual(counts, { accepted: 2, duplicates: 0, quarantined: 0, undeliverable: 2 });
  });
});

/**
 * Tests of the time-window lookup that replaced the per-organization time index (migration 4):
 * ingestion keeps received_at non-decreasing along seq even when the clock steps back
 * (feed-repo's receivedAt), and seqRange maps a window [since, until) to exactly the seqs of
 * the events received in it. Real SQLite files in temp directories, a clock the test sets.
 */
import assert from 'node:assert/strict';
import Database from 'better-sqlite3';
import { join } from 'node:path';
import { describe, test, type TestContext } from 'node:test';
import type { Clock } from '../../src/domain/clock.ts';
import { createDeliveryLogService } from '../../src/services/delivery-log.ts';
import { createIngestService, type RawLine } from '../../src/services/ingest.ts';
import { SCHEMA_VERSION } from '../../src/store/sqlite/connection.ts';
import { MIGRATIONS } from '../../src/store/sqlite/migrations.ts';
import { openSqliteStore, type SqliteStore as Store } from '../../src/store/sqlite/store.ts';
import { silentLog, tempDir } from '../helpers/helpers.ts';
import { repos } from '../helpers/sqlite-repos.ts';
import { BY_TEST, testAudit } from '../helpers/audit-helpers.ts';

/** A clock that says what the test last set. */
interface ManualClock extends Clock {
  at: number;
}

function manualClock(at: number): ManualClock {
  const clock: ManualClock = { at, now: () => clock.at };
  return clock;
}

function openTestStore(t: TestContext, clock: Clock): Store {
  const store = openSqliteStore(join(tempDir(t, 'hookrelay-seq-range-'), 'hookrelay.db'), clock);
  t.after(() => store.close());
  return store;
}

let lineNumber = 0;

/** `count` distinct valid feed lines (no occurred_at, so each takes its batch's time). */
function lines(count: number, orgId = 'org-a'): RawLine[] {
  return Array.from({ length: count }, () => {
    const n = lineNumber++;
    return { bytes: Buffer.from(JSON.stringify({ organization_id: orgId, anticipation_request_id: `ar_${n}`, status: 'approved', event_id: `chg_${n}` })), position: null };
  });
}

/** Every event's seq and received_at, in seq order, read straight from the table. */
function eventTimes(store: Store): Array<{ seq: number; received_at: number }> {
  return store.db.prepare('SELECT seq, received_at FROM events ORDER BY seq').all() as Array<{ seq: number; received_at: number }>;
}

/** The seqs of the events received in [since, until), by a full scan: what seqRange must match. */
function seqsReceivedIn(store: Store, since: number, until: number): number[] {
  return store.db.prepare('SELECT seq FROM events WHERE received_at >= ? AND received_at < ? ORDER BY seq').pluck().all(since, until) as number[];
}

/** The seqs of the events that exist in the half-open seq range [from, to). */
function seqsInRange(store: Store, range: { from: number; to: number }): number[] {
  return store.db.prepare('SELECT seq FROM events WHERE seq >= ? AND seq < ? ORDER BY seq').pluck().all(range.from, range.to) as number[];
}

/** seqRange(since, until) covers exactly the events received in the window: tight when there are any, empty otherwise. */
async function assertWindow(store: Store, since: number, until: number): Promise<{ from: number; to: number }> {
  const range = await store.read((tx) => tx.feed.seqRange(since, until));
  const expected = seqsReceivedIn(store, since, until);
  const what = `[${since}, ${until}) -> ${JSON.stringify(range)}`;
  assert.ok(range.from <= range.to, what);
  assert.deepEqual(seqsInRange(store, range), expected, what);
  if (expected.length > 0) assert.deepEqual(range, { from: expected[0]!, to: expected.at(-1)! + 1 }, what);
  return range;
}

/**
 * Batches at 1000 (3 events), 2000 (2), then the clock steps back to 1500 (2, stored at 2000),
 * 2500 (1), 2500 again (2), back to 100 (1, stored at 2500), then 4000 (1).
 */
async function ingestSteppingClock(t: TestContext): Promise<{ store: Store; clock: ManualClock }> {
  const clock = manualClock(1000);
  const store = openTestStore(t, clock);
  const ingest = createIngestService(store, silentLog);
  const batches: Array<[number, number]> = [
    [1000, 3],
    [2000, 2],
    [1500, 2],
    [2500, 1],
    [2500, 2],
    [100, 1],
    [4000, 1],
  ];
  for (const [at, count] of batches) {
    clock.at = at;
    const counts = await ingest.ingest('test-source', lines(count), null);
    assert.equal(counts.accepted, count);
  }
  return { store, clock };
}

describe('received_at along seq', () => {
  test('a clock that steps back between batches does not make received_at decrease: the batch takes the newest stored time', async (t) => {
    const { store } = await ingestSteppingClock(t);
    const times = eventTimes(store);
    assert.deepEqual(
      times.map((e) => e.received_at),
      [1000, 1000, 1000, 2000, 2000, 2000, 2000, 2500, 2500, 2500, 2500, 4000],
    );
    for (let i = 1; i < times.length; i++) assert.ok(times[i]!.received_at >= times[i - 1]!.received_at, `seq ${times[i]!.seq}`);
    assert.deepEqual(
      times.map((e) => e.seq),
      Array.from({ length: 12 }, (_, i) => i + 1),
    );
  });

  test('the rows written with an event (outbox, quarantine, stats) use the same adjusted time', async (t) => {
    const clock = manualClock(5000);
    const store = openTestStore(t, clock);
    repos(store).orgs.insert({ id: 'org-hooked', name: 'Hooked', createdAt: 0 });
    repos(store).webhooks.upsert('org-hooked', 'https://hooks.example.com/hookrelay', false, null, 0);
    const ingest = createIngestService(store, silentLog);
    await ingest.ingest('test-source', lines(1, 'org-hooked'), null);
    clock.at = 3000;
    await ingest.ingest('test-source', [...lines(1, 'org-hooked'), { bytes: Buffer.from('not json'), position: null }], null);
    assert.deepEqual(store.db.prepare('SELECT received_at FROM events ORDER BY seq').pluck().all(), [5000, 5000]);
    assert.deepEqual(store.db.prepare('SELECT received_at FROM feed_rejects').pluck().all(), [5000]);
    // Fresh deliveries go out in (next_attempt_at, id) order: the later one must not be due before the earlier one.
    assert.deepEqual(store.db.prepare('SELECT next_attempt_at, created_at FROM deliveries ORDER BY id').all(), [
      { next_attempt_at: 5000, created_at: 5000 },
      { next_attempt_at: 5000, created_at: 5000 },
    ]);
    assert.equal(store.db.prepare("SELECT updated_at FROM feed_stats WHERE source = 'test-source'").pluck().get(), 5000);
    // The raw clock is still what it says for anything else: only stored event times are held back.
    assert.equal(await store.read((tx) => tx.feed.receivedAt(clock.now())), 5000);
    assert.equal(await store.read((tx) => tx.feed.receivedAt(6000)), 6000);
  });

  test('receivedAt on an empty table is the time the clock gives', async (t) => {
    const store = openTestStore(t, manualClock(0));
    assert.equal(await store.read((tx) => tx.feed.receivedAt(1234)), 1234);
    assert.equal(await store.read((tx) => tx.feed.receivedAt(0)), 0);
  });
});

describe('seqRange', () => {
  test('with no events the range is empty', async (t) => {
    const store = openTestStore(t, manualClock(1000));
    for (const [since, until] of [
      [0, 1],
      [0, Number.MAX_SAFE_INTEGER],
      [1000, 2000],
    ] as const) {
      const range = await store.read((tx) => tx.feed.seqRange(since, until));
      assert.deepEqual(range, { from: 0, to: 0 });
      assert.deepEqual(seqsInRange(store, range), []);
    }
  });

  test('windows before, after, around and between the batches, and edges exactly on a batch time', async (t) => {
    const { store } = await ingestSteppingClock(t);
    // Before every event, and ending exactly where the first batch starts (until is exclusive).
    assert.deepEqual(seqsInRange(store, await assertWindow(store, 0, 999)), []);
    assert.deepEqual(seqsInRange(store, await assertWindow(store, 0, 1000)), []);
    // After every event, and starting just past the last one.
    assert.deepEqual(seqsInRange(store, await assertWindow(store, 4001, 10_000)), []);
    assert.deepEqual(seqsInRange(store, await assertWindow(store, 5000, Number.MAX_SAFE_INTEGER)), []);
    // Everything.
    assert.deepEqual(await assertWindow(store, 0, Number.MAX_SAFE_INTEGER), { from: 1, to: 13 });
    assert.deepEqual(await assertWindow(store, 1000, 4001), { from: 1, to: 13 });
    // The last event alone: since exactly on its time.
    assert.deepEqual(await assertWindow(store, 4000, 4001), { from: 12, to: 13 });
    // Up to the last event, excluded.
    assert.deepEqual(await assertWindow(store, 0, 4000), { from: 1, to: 12 });
    // Edges exactly on batch times: since includes the batch, until excludes it.
    assert.deepEqual(await assertWindow(store, 1000, 2000), { from: 1, to: 4 });
    assert.deepEqual(await assertWindow(store, 2000, 2500), { from: 4, to: 8 });
    assert.deepEqual(await assertWindow(store, 2000, 2501), { from: 4, to: 12 });
    assert.deepEqual(await assertWindow(store, 1001, 2001), { from: 4, to: 8 });
    // The batches stored under a stepped-back clock are found at the time they were stored with, not the clock's.
    assert.deepEqual(seqsInRange(store, await assertWindow(store, 1500, 1501)), []);
    assert.deepEqual(seqsInRange(store, await assertWindow(store, 100, 101)), []);
    // Empty windows between batches, and a zero-width window on a batch time.
    assert.deepEqual(seqsInRange(store, await assertWindow(store, 1001, 2000)), []);
    assert.deepEqual(seqsInRange(store, await assertWindow(store, 2501, 4000)), []);
    assert.deepEqual(seqsInRange(store, await assertWindow(store, 2000, 2000)), []);
  });

  test('every window whose edges are on, just before or just after a batch time', async (t) => {
    const { store } = await ingestSteppingClock(t);
    const times = [...new Set(eventTimes(store).map((e) => e.received_at))];
    const edges = [0, Number.MAX_SAFE_INTEGER, ...times.flatMap((at) => [at - 1, at, at + 1])].sort((a, b) => a - b);
    let nonEmpty = 0;
    for (const since of edges) {
      for (const until of edges) {
        if (since >= until) continue;
        await assertWindow(store, since, until);
        if (seqsReceivedIn(store, since, until).length > 0) nonEmpty++;
      }
    }
    assert.ok(nonEmpty > 50, `only ${nonEmpty} windows held events`);
  });

  test('a long history under a clock that wanders back and forth: every window matches a full scan', async (t) => {
    const clock = manualClock(1_000_000);
    const store = openTestStore(t, clock);
    const ingest = createIngestService(store, silentLog);
    // A deterministic walk: mostly forward, sometimes standing still, sometimes back by up to 3 s.
    let state = 42;
    const random = () => {
      state = (state * 1_103_515_245 + 12_345) % 2_147_483_648;
      return state / 2_147_483_648;
    };
    for (let batch = 0; batch < 60; batch++) {
      clock.at += Math.floor(random() * 5000) - 3000;
      await ingest.ingest('test-source', lines(1 + Math.floor(random() * 4), batch % 2 === 0 ? 'org-a' : 'org-b'), null);
    }
    const times = eventTimes(store);
    for (let i = 1; i < times.length; i++) assert.ok(times[i]!.received_at >= times[i - 1]!.received_at, `seq ${times[i]!.seq}`);
    const first = times[0]!.received_at;
    const last = times.at(-1)!.received_at;
    for (let i = 0; i < 400; i++) {
      const a = first - 2000 + Math.floor(random() * (last - first + 4000));
      const b = first - 2000 + Math.floor(random() * (last - first + 4000));
      if (a !== b) await assertWindow(store, Math.min(a, b), Math.max(a, b));
    }
    for (const { received_at: at } of times) await assertWindow(store, at, at + 1);
  });
});

describe('migration 4', () => {
  test('a new database is at the latest version without the per-organization time index on events', (t) => {
    const store = openTestStore(t, manualClock(0));
    assert.ok(SCHEMA_VERSION >= 4);
    assert.deepEqual(store.migrated, { from: 0, to: SCHEMA_VERSION, backup: null });
    assert.equal(store.db.pragma('user_version', { simple: true }), SCHEMA_VERSION);
    assert.equal(store.db.prepare("SELECT 1 FROM sqlite_schema WHERE name = 'events_org_received'").get(), undefined);
  });

  test('a version 3 database with events is migrated: the index is dropped, the events kept, and windows work on them', async (t) => {
    const path = join(tempDir(t, 'hookrelay-seq-range-'), 'hookrelay.db');
    const v3 = new Database(path);
    v3.pragma('journal_mode = WAL');
    v3.transaction(() => {
      for (const migration of MIGRATIONS.slice(0, 3)) v3.exec(migration);
      v3.pragma('user_version = 3');
      const insert = v3.prepare("INSERT INTO events (id, org_id, anticipation_request_id, status, occurred_at, payload, source, received_at) VALUES (?, 'org-a', 'ar_1', 'approved', 0, '{}', 'old', ?)");
      for (const [i, at] of [100, 200, 200, 300].entries()) insert.run(`old_${i}`, at);
    })();
    assert.ok(v3.prepare("SELECT 1 FROM sqlite_schema WHERE name = 'events_org_received'").get(), 'the version 3 schema has the index');
    v3.close();

    const clock = manualClock(250);
    const store = openSqliteStore(path, clock);
    t.after(() => store.close());
    assert.deepEqual({ from: store.migrated.from, to: store.migrated.to }, { from: 3, to: SCHEMA_VERSION });
    assert.equal(store.db.prepare("SELECT 1 FROM sqlite_schema WHERE name = 'events_org_received'").get(), undefined);
    assert.equal(store.db.prepare('SELECT count(*) FROM events').pluck().get(), 4);
    // A new batch under a clock behind the newest old event takes that event's time.
    await createIngestService(store, silentLog).ingest('test-source', lines(2), null);
    assert.deepEqual(
      eventTimes(store).map((e) => e.received_at),
      [100, 200, 200, 300, 300, 300],
    );
    assert.deepEqual(await assertWindow(store, 200, 300), { from: 2, to: 4 });
    assert.deepEqual(await assertWindow(store, 300, 301), { from: 4, to: 7 });
  });
});

test('recovery without an end covers the events received after the clock stepped back', async (t) => {
  const clock = manualClock(1_000_000);
  const store = openTestStore(t, clock);
  const ingest = createIngestService(store, silentLog);
  repos(store).orgs.insert({ id: 'org-a', name: 'A', createdAt: 0 });
  await ingest.ingest('/feed.jsonl', lines(1), null);
  clock.at = 990_000;
  await ingest.ingest('/feed.jsonl', lines(1), null);
  // Both stored at 1,000,000 (the second batch does not go back in time), neither queued (no webhook yet).
  repos(store).webhooks.upsert('org-a', 'https://hooks.example/a', false, null, clock.at);
  const deliveries = createDeliveryLogService(store, { userAgent: 'test' }, testAudit(store));
  assert.deepEqual(await deliveries.recover(BY_TEST, 'org-a', 0), { requeued: 2, retriedNow: 0 });
});

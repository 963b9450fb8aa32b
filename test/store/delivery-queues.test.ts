/**
 * The two queues of deliveries (migration 5): fresh ones (never tried, not leased) and the
 * others are indexed apart, and due() (dueRows(), each row through dueDeliveryOf) and list() each read
 * both and merge them. These tests pin what the dispatcher and the delivery log rely on,
 * whichever queue a row sits in: which
 * deliveries are offered, in what order, per-request ordering, leases, statuses, paging and
 * time filters, organizations kept apart, and the partial indexes themselves. Real SQLite
 * files; each row is put in its state through the repository, as the dispatcher would.
 */
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { describe, test, type TestContext } from 'node:test';
import type { Clock } from '../../src/domain/clock.ts';
import { orderingKey } from '../../src/domain/ordering.ts';
import { WebhookStatus } from '../../src/domain/types.ts';
import { publicStatus } from '../../src/services/delivery-log.ts';
import { createIngestService } from '../../src/services/ingest.ts';
import type { Db } from '../../src/store/sqlite/connection.ts';
import { createSqliteDeliveriesRepo } from '../../src/store/sqlite/deliveries-repo.ts';
import { dueDeliveryOf } from '../../src/store/row-mappers.ts';
import { DeliveryStatus, type ListFilter } from '../../src/store/values.ts';
import { MIGRATIONS } from '../../src/store/sqlite/migrations.ts';
import { openSqliteStore, type SqliteStore as Store } from '../../src/store/sqlite/store.ts';
import { databaseAtVersion, silentLog, tempDir } from '../helpers/helpers.ts';
import { repos } from '../helpers/sqlite-repos.ts';

const ORG = 'org-a';
const OTHER = 'org-b';
const LEASE_MS = 30_000;

/** A clock that says what the test last set. */
interface ManualClock extends Clock {
  at: number;
}

/** A new database with two organizations, each with an active webhook, and a clock the test sets. */
function openTestStore(t: TestContext): Store {
  const clock: ManualClock = { at: 0, now: () => clock.at };
  const store = openSqliteStore(join(tempDir(t, 'hookrelay-queues-'), 'hookrelay.db'), clock);
  t.after(() => store.close());
  for (const org of [ORG, OTHER]) {
    repos(store).orgs.insert({ id: org, name: org, createdAt: 0 });
    repos(store).webhooks.upsert(org, `https://hooks.example/${org}`, false, null, 0);
  }
  return store;
}

/** Ingests a status change of `request` at `now` (not before the last one), which queues it: a fresh delivery, due at `now`. Returns the delivery id. */
async function queue(store: Store, request: string, now: number, orgId = ORG): Promise<number> {
  (store.clock as ManualClock).at = now;
  const eventId = `chg_${store.db.prepare('SELECT count(*) FROM events').pluck().get() as number}`;
  const line = { bytes: Buffer.from(JSON.stringify({ organization_id: orgId, anticipation_request_id: request, status: 'approved', event_id: eventId })), position: null };
  assert.deepEqual(await createIngestService(store, silentLog).ingest('test', [line], null), { accepted: 1, duplicates: 0, quarantined: 0, undeliverable: 0 });
  const delivery = store.db.prepare('SELECT d.id, d.next_attempt_at, d.ordering_key FROM deliveries d JOIN events e ON e.seq = d.event_seq WHERE e.id = ?').get(eventId);
  const { id, ...rest } = delivery as { id: number; next_attempt_at: number; ordering_key: number };
  assert.deepEqual(rest, { next_attempt_at: now, ordering_key: orderingKey(orgId, request) });
  return id;
}

/** An attempt at `at` that failed: leased, then settled pending with a retry at `retryAt`. */
function fail(store: Store, id: number, at: number, retryAt: number, attempts = 1): void {
  repos(store).deliveries.lease([id], at + LEASE_MS, at);
  repos(store).deliveries.settle(id, { status: DeliveryStatus.pending, attempts, nextAttemptAt: retryAt, at, statusCode: 500, error: 'HTTP 500' });
}

/** A last attempt at `at`: leased, then settled delivered or dead. */
function finish(store: Store, id: number, at: number, status: 'delivered' | 'dead'): void {
  repos(store).deliveries.lease([id], at + LEASE_MS, at);
  repos(store).deliveries.settle(id, { status, attempts: 1, nextAttemptAt: at, at, statusCode: status === 'delivered' ? 200 : 500, error: status === 'dead' ? 'HTTP 500' : null });
}

/** The ids due() (dueRows, each through dueDeliveryOf as the dispatcher does) offers, in its order. */
function dueIds(store: Store, now: number, limit = 100, orgId = ORG): number[] {
  return repos(store).deliveries.dueRows(orgId, now, limit).map(dueDeliveryOf).map((d) => d.id);
}

describe('due(): what the dispatcher is offered', () => {
  test('fresh deliveries in queue order and due retries merged by (next_attempt_at, id); a retry not yet due is left out', async (t) => {
    const store = openTestStore(t);
    const d1 = await queue(store, 'ar_1', 1000);
    const d2 = await queue(store, 'ar_2', 1100);
    const d3 = await queue(store, 'ar_3', 1200);
    const d4 = await queue(store, 'ar_4', 1300);
    const d5 = await queue(store, 'ar_5', 1400);
    const d6 = await queue(store, 'ar_6', 1500);
    fail(store, d1, 1001, 1250);
    fail(store, d2, 1101, 5000);
    fail(store, d4, 1301, 1400); // due at the same time as fresh d5: the lower id first

    const merged = [d3, d1, d4, d5, d6];
    assert.deepEqual(dueIds(store, 2000), merged);
    // The limit takes the first of the merged order, not the first of either queue.
    for (let limit = 1; limit <= merged.length; limit++) assert.deepEqual(dueIds(store, 2000, limit), merged.slice(0, limit), `limit ${limit}`);
    // A retry is not offered before it is due; a fresh delivery is due from the moment it is
    // queued, whatever the clock says (a clock behind the queue time counts it as due now).
    assert.deepEqual(dueIds(store, 1250), [d3, d1, d5, d6]);
    assert.deepEqual(dueIds(store, 999), [d3, d5, d6]);
    assert.deepEqual(dueIds(store, 5000), [d3, d1, d4, d5, d6, d2]);
  });

  test('retries come by due time, not queue order: a later delivery whose retry is due sooner goes first', async (t) => {
    const store = openTestStore(t);
    const early = await queue(store, 'ar_1', 1000);
    const late = await queue(store, 'ar_2', 1100);
    fail(store, early, 1001, 9000);
    fail(store, late, 1101, 3000);
    assert.deepEqual(dueIds(store, 10_000, 1), [late]);
    assert.deepEqual(dueIds(store, 10_000), [late, early]);
  });

  test('a leased delivery is not offered until its lease expires, then it is again; released, it is back in the queue', async (t) => {
    const store = openTestStore(t);
    const fresh = await queue(store, 'ar_1', 1000);
    const retry = await queue(store, 'ar_2', 1000);
    const other = await queue(store, 'ar_3', 1000);
    fail(store, retry, 1000, 2000);

    repos(store).deliveries.lease([fresh], 2000 + LEASE_MS, 2000);
    repos(store).deliveries.lease([retry], 2000 + LEASE_MS, 2000);
    assert.deepEqual(dueIds(store, 2000), [other]);
    assert.deepEqual(dueIds(store, 2000 + LEASE_MS - 1), [other]);
    // The attempts never ended (a crash): both are offered again once their leases run out.
    assert.deepEqual(dueIds(store, 2000 + LEASE_MS), [fresh, other, retry]);

    repos(store).deliveries.lease([fresh], 40_000 + LEASE_MS, 40_000);
    repos(store).deliveries.lease([retry], 40_000 + LEASE_MS, 40_000);
    assert.deepEqual(dueIds(store, 40_000), [other]);
    // Given back without an attempt (the daemon stopping): offered at once, in their old places.
    repos(store).deliveries.release([fresh], 40_001);
    repos(store).deliveries.release([retry], 40_001);
    assert.deepEqual(dueIds(store, 40_001), [fresh, other, retry]);
  });

  test('delivered and dead deliveries are never offered', async (t) => {
    const store = openTestStore(t);
    const delivered = await queue(store, 'ar_1', 1000);
    const dead = await queue(store, 'ar_2', 1000);
    const deadAfterRetries = await queue(store, 'ar_3', 1000);
    const pending = await queue(store, 'ar_4', 1000);
    finish(store, delivered, 1001, 'delivered');
    finish(store, dead, 1001, 'dead');
    fail(store, deadAfterRetries, 1001, 1500);
    finish(store, deadAfterRetries, 1500, 'dead');
    for (const now of [1001, 2000, 10_000_000]) assert.deepEqual(dueIds(store, now), [pending], `at ${now}`);
  });

  test("another organization's deliveries are never offered, and a disabled webhook's are held until it is enabled again", async (t) => {
    const store = openTestStore(t);
    const a1 = await queue(store, 'ar_1', 1000);
    const b1 = await queue(store, 'ar_1', 1000, OTHER);
    const a2 = await queue(store, 'ar_2', 1100);
    const b2 = await queue(store, 'ar_2', 1100, OTHER);
    const a3 = await queue(store, 'ar_3', 1200);
    fail(store, a2, 1101, 1500);
    fail(store, b2, 1101, 1500);

    assert.deepEqual(dueIds(store, 2000), [a1, a3, a2]);
    assert.deepEqual(dueIds(store, 2000, 100, OTHER), [b1, b2]);
    assert.deepEqual(dueIds(store, 2000, 100, 'org-without-webhook'), []);

    repos(store).webhooks.setStatus(ORG, WebhookStatus.disabled, 'operator', 2000);
    assert.deepEqual(dueIds(store, 2000), [], 'fresh and failed deliveries of a disabled webhook are held');
    assert.deepEqual(dueIds(store, 2000, 100, OTHER), [b1, b2]);
    repos(store).webhooks.setStatus(ORG, WebhookStatus.failing, null, 2000);
    assert.deepEqual(dueIds(store, 2000), [a1, a3, a2], 'a failing webhook still gets its deliveries');
    repos(store).webhooks.setStatus(ORG, WebhookStatus.active, null, 2000);
    assert.deepEqual(dueIds(store, 2000), [a1, a3, a2]);
  });
});

describe('due(): per-request ordering', () => {
  test('a change waits while an earlier change of its request awaits a retry, and later changes of other requests still fill the limit', async (t) => {
    const store = openTestStore(t);
    const a1 = await queue(store, 'ar_A', 1000);
    const a2 = await queue(store, 'ar_A', 1100);
    const b1 = await queue(store, 'ar_B', 1200);
    const c1 = await queue(store, 'ar_C', 1300);
    const e1 = await queue(store, 'ar_E', 1400);
    const e2 = await queue(store, 'ar_E', 1500);
    fail(store, a1, 1001, 60_000);
    fail(store, e1, 1401, 60_000);

    // a2 and e2 wait; the limit counts only what may go: b1 and c1 both fit in two.
    assert.deepEqual(dueIds(store, 2000, 2), [b1, c1]);
    assert.deepEqual(dueIds(store, 2000), [b1, c1]);
    // At its retry time the earlier change is offered; the later one still waits for its outcome.
    assert.deepEqual(dueIds(store, 60_000), [b1, c1, a1, e1]);

    finish(store, a1, 60_000, 'delivered');
    finish(store, e1, 60_000, 'dead');
    assert.deepEqual(dueIds(store, 60_000), [a2, b1, c1, e2], 'after the earlier change is delivered or dead, the later one goes');
  });

  test('a change waits while an earlier change of its request is leased, whether it is fresh or a due retry; two fresh changes are both offered, oldest first', async (t) => {
    const store = openTestStore(t);
    const a1 = await queue(store, 'ar_A', 1000);
    const a2 = await queue(store, 'ar_A', 1100);
    const b1 = await queue(store, 'ar_B', 1200);
    const b2 = await queue(store, 'ar_B', 1300);
    // Both changes of ar_A are fresh: both are offered (the claimer takes one per request).
    assert.deepEqual(dueIds(store, 2000), [a1, a2, b1, b2]);

    repos(store).deliveries.lease([a1], 2000 + LEASE_MS, 2000);
    assert.deepEqual(dueIds(store, 2000, 1), [b1], 'the fresh a2 waits behind the leased a1');
    // A retry of b2 that is due while the earlier b1 is being attempted waits too (a state the
    // dispatcher does not make itself, which the rule still covers).
    fail(store, b2, 1301, 1500);
    repos(store).deliveries.lease([b1], 2000 + LEASE_MS, 2000);
    assert.deepEqual(dueIds(store, 2000), []);

    repos(store).deliveries.release([b1], 2001);
    assert.deepEqual(dueIds(store, 2001), [b1, b2]);
    // Whichever of them is leased holds the other back, the earlier one too: a request never
    // has two deliveries in flight.
    repos(store).deliveries.lease([b2], 2002 + LEASE_MS, 2002);
    assert.deepEqual(dueIds(store, 2002), [], 'the earlier change was offered while a later one of its request is being attempted');
  });
});

/**
 * Deliveries of ORG in every state, created at 1000 * n for the n-th, with OTHER's rows in
 * between; and the ids each status filter must list, newest first.
 */
async function deliveryLog(t: TestContext) {
  const store = openTestStore(t);
  const d1 = await queue(store, 'ar_1', 1000);
  const b1 = await queue(store, 'ar_1', 1500, OTHER);
  const d2 = await queue(store, 'ar_2', 2000);
  const d3 = await queue(store, 'ar_3', 3000);
  const b2 = await queue(store, 'ar_2', 3500, OTHER);
  const d4 = await queue(store, 'ar_4', 4000);
  const d5 = await queue(store, 'ar_5', 5000);
  const d6 = await queue(store, 'ar_6', 6000);
  const d7 = await queue(store, 'ar_7', 7000);
  const d8 = await queue(store, 'ar_8', 8000);
  const b3 = await queue(store, 'ar_3', 8500, OTHER);
  finish(store, d1, 8600, 'delivered');
  fail(store, d3, 8600, 99_000);
  fail(store, b2, 8600, 99_000);
  finish(store, d4, 8600, 'dead');
  repos(store).deliveries.lease([d5], 8600 + LEASE_MS, 8600); // being attempted for the first time: still pending
  fail(store, d7, 8600, 99_000, 3);
  finish(store, b3, 8600, 'delivered');
  // d2, d6, d8 and b1 are fresh.
  const expected = {
    all: [d8, d7, d6, d5, d4, d3, d2, d1],
    pending: [d8, d6, d5, d2],
    failed: [d7, d3],
    delivered: [d1],
    dead: [d4],
  };
  const other = { all: [b3, b2, b1], pending: [b1], failed: [b2], delivered: [b3], dead: [] };
  return { store, expected, other };
}

const FILTERS = ['all', 'pending', 'failed', 'delivered', 'dead'] as const;
const statusOf = (name: (typeof FILTERS)[number]): ListFilter['status'] => (name === 'all' ? undefined : name);

/** Every page of list(), following the beforeId cursor from the last row of each full page. */
function allPages(store: Store, orgId: string, filter: Omit<ListFilter, 'limit' | 'beforeId'>, limit: number): number[][] {
  const pages: number[][] = [];
  let beforeId: number | undefined;
  for (;;) {
    const page = repos(store).deliveries.list(orgId, { ...filter, limit, beforeId }).map((d) => d.id);
    assert.ok(page.length <= limit);
    pages.push(page);
    if (page.length < limit) return pages;
    beforeId = page.at(-1);
    assert.ok(pages.length < 100, 'paging does not end');
  }
}

describe('list(): the delivery log', () => {
  test('each status filter lists its rows, fresh or not, newest first: pending (never attempted, leased or not), failed, delivered, dead, and all', async (t) => {
    const { store, expected } = await deliveryLog(t);
    for (const name of FILTERS) {
      const rows = repos(store).deliveries.list(ORG, { status: statusOf(name), limit: 100 });
      assert.deepEqual(
        rows.map((d) => d.id),
        expected[name],
        name,
      );
      for (const row of rows) {
        assert.equal(row.orgId, ORG);
        if (name !== 'all') assert.equal(publicStatus(row), name, `delivery ${row.id} listed under ${name}`);
      }
    }
    // Ending in a fresh row and ending in a tried one: the limit cuts the merged list.
    assert.deepEqual(
      repos(store).deliveries.list(ORG, { limit: 3 }).map((d) => d.id),
      expected.all.slice(0, 3),
    );
    assert.deepEqual(
      repos(store).deliveries.list(ORG, { limit: 4 }).map((d) => d.id),
      expected.all.slice(0, 4),
    );
  });

  test('paging with beforeId gives every row exactly once, newest first, for every filter and page size', async (t) => {
    const { store, expected } = await deliveryLog(t);
    for (const name of FILTERS) {
      for (let limit = 1; limit <= 9; limit++) {
        const pages = allPages(store, ORG, { status: statusOf(name) }, limit);
        assert.deepEqual(pages.flat(), expected[name], `${name}, ${limit} per page`);
        for (const page of pages.slice(0, -1)) assert.equal(page.length, limit, `${name}, ${limit} per page: a short page before the last`);
      }
    }
    // A cursor between rows: only older rows, of both queues.
    assert.deepEqual(
      repos(store).deliveries.list(ORG, { beforeId: expected.all[2]!, limit: 100 }).map((d) => d.id),
      expected.all.slice(3),
    );
  });

  test('since and until select by creation time, since included and until excluded, with filters and paging', async (t) => {
    const { store, expected } = await deliveryLog(t);
    const [d8, d7, d6, d5, d4, d3, d2, d1] = expected.all;
    const ids = (filter: Omit<ListFilter, 'limit'>) => repos(store).deliveries.list(ORG, { ...filter, limit: 100 }).map((d) => d.id);
    assert.deepEqual(ids({ since: 3000, until: 7000 }), [d6, d5, d4, d3]);
    assert.deepEqual(ids({ since: 2001, until: 6000 }), [d5, d4, d3]);
    assert.deepEqual(ids({ since: 6000 }), [d8, d7, d6]);
    assert.deepEqual(ids({ until: 3000 }), [d2, d1]);
    assert.deepEqual(ids({ since: 8001 }), []);
    assert.deepEqual(ids({ status: 'pending', since: 2000, until: 8000 }), [d6, d5, d2]);
    assert.deepEqual(ids({ status: 'failed', since: 3001 }), [d7]);
    assert.deepEqual(ids({ status: 'delivered', until: 1000 }), []);
    assert.deepEqual(ids({ status: 'dead', since: 4000, until: 4001 }), [d4]);
    assert.deepEqual(allPages(store, ORG, { since: 2000, until: 8000 }, 2).flat(), [d7, d6, d5, d4, d3, d2]);
  });

  test("another organization's rows never appear, under any filter", async (t) => {
    const { store, expected, other } = await deliveryLog(t);
    for (const name of FILTERS) {
      assert.deepEqual(
        repos(store).deliveries.list(OTHER, { status: statusOf(name), limit: 100 }).map((d) => d.id),
        other[name],
        name,
      );
      assert.deepEqual(allPages(store, ORG, { status: statusOf(name) }, 2).flat(), expected[name], name);
    }
    assert.deepEqual(repos(store).deliveries.list('org-without-deliveries', { limit: 100 }), []);
    assert.equal(repos(store).deliveries.get(OTHER, expected.all[0]!), null);
  });

  test('the log names the event type of a status change (stored as details) and of a test notification (stored whole)', async (t) => {
    const store = openTestStore(t);
    const change = await queue(store, 'ar_1', 1000);
    const body = JSON.stringify({ type: 'webhook.test', timestamp: '1970-01-01T00:00:02.000Z', data: { event_id: 'evt_test_1', organization_id: ORG } });
    const test = repos(store).deliveries.insert(repos(store).deliveries.insertTestEvent('evt_test_1', ORG, body, 2000), ORG, 7, 2000);
    const failedTest = repos(store).deliveries.insert(repos(store).deliveries.insertTestEvent('evt_test_2', ORG, body.replace('evt_test_1', 'evt_test_2'), 2000), ORG, 8, 2000);
    fail(store, failedTest, 2001, 99_000);
    assert.deepEqual(
      repos(store).deliveries.list(ORG, { limit: 10 }).map((d) => [d.id, d.eventType]),
      [
        [failedTest, 'webhook.test'],
        [test, 'webhook.test'],
        [change, 'anticipation_request.status_changed'],
      ],
    );
    assert.equal(repos(store).deliveries.get(ORG, change)?.eventType, 'anticipation_request.status_changed');
    assert.equal(repos(store).deliveries.get(ORG, test)?.eventType, 'webhook.test');
  });
});

/** A database at schema version 4 with deliveries of acme in every state (ids 1-5: fresh, leased never attempted, failed, delivered, dead). */
function version4Database(path: string): void {
  const db = databaseAtVersion(path, 4);
  const event = db.prepare(`INSERT INTO events (id, org_id, anticipation_request_id, occurred_at, payload, source, received_at) VALUES (?, 'acme', ?, 1000, ?, 'feed', 1000)`);
  const delivery = db.prepare(`INSERT INTO deliveries (event_seq, org_id, ordering_key, status, attempts, next_attempt_at, lease_expires_at, created_at, updated_at)
    VALUES (?, 'acme', ?, ?, ?, 1000, ?, 1000, 1000)`);
  const states: Array<[status: string, attempts: number, lease: number | null]> = [
    ['pending', 0, null],
    ['pending', 0, 50_000],
    ['pending', 2, null],
    ['delivered', 1, null],
    ['dead', 5, null],
  ];
  for (const [i, [status, attempts, lease]] of states.entries()) {
    const seq = Number(event.run(`evt_${i}`, `ar_${i}`, `{"type":"anticipation_request.status_changed","data":{"event_id":"evt_${i}"}}`).lastInsertRowid);
    delivery.run(seq, i, status, attempts, lease);
  }
  db.close();
}

describe('the partial indexes of migration 5', () => {
  const INDEX_COLUMNS = {
    deliveries_org_fresh: ['org_id', 'id'],
    deliveries_org_due: ['org_id', 'next_attempt_at'],
    deliveries_org_status: ['org_id', 'status', 'id'],
  };

  /** The ids of the deliveries a partial index holds: the rows its own WHERE (from sqlite_schema) selects. */
  function indexedIds(store: Store, index: string): number[] {
    const sql = store.db.prepare("SELECT sql FROM sqlite_schema WHERE type = 'index' AND tbl_name = 'deliveries' AND name = ?").pluck().get(index) as string | undefined;
    assert.ok(sql, `index ${index} is missing`);
    const where = /\bWHERE\b([\s\S]+)$/i.exec(sql)?.[1];
    assert.ok(where, `index ${index} is not partial: ${sql}`);
    return store.db.prepare(`SELECT id FROM deliveries WHERE ${where} ORDER BY id`).pluck().all() as number[];
  }

  function assertIndexes(store: Store, states: { fresh: number[]; leased: number[]; failed: number[]; settled: number[] }): void {
    const indexes = store.db.pragma('index_list(deliveries)') as Array<{ name: string; partial: number }>;
    for (const [name, columns] of Object.entries(INDEX_COLUMNS)) {
      assert.equal(indexes.find((i) => i.name === name)?.partial, 1, `${name} is a partial index`);
      assert.deepEqual(
        (store.db.pragma(`index_info(${name})`) as Array<{ name: string }>).map((c) => c.name),
        columns,
        name,
      );
    }
    const sorted = (ids: number[]) => [...ids].sort((a, b) => a - b);
    // A fresh delivery is in one per-organization index only; every other one is where the
    // dispatcher (if pending) and the log look for it.
    assert.deepEqual(indexedIds(store, 'deliveries_org_fresh'), sorted(states.fresh));
    assert.deepEqual(indexedIds(store, 'deliveries_org_due'), sorted([...states.leased, ...states.failed]));
    assert.deepEqual(indexedIds(store, 'deliveries_org_status'), sorted([...states.leased, ...states.failed, ...states.settled]));
  }

  test('a fresh delivery is only in deliveries_org_fresh; leased, failed and settled ones are in the indexes of the dispatcher and the log', async (t) => {
    const store = openTestStore(t);
    const fresh = await queue(store, 'ar_1', 1000);
    const leased = await queue(store, 'ar_2', 1000);
    const failed = await queue(store, 'ar_3', 1000);
    const delivered = await queue(store, 'ar_4', 1000);
    const dead = await queue(store, 'ar_5', 1000);
    const released = await queue(store, 'ar_6', 1000);
    repos(store).deliveries.lease([leased], 1000 + LEASE_MS, 1000);
    fail(store, failed, 1000, 5000);
    finish(store, delivered, 1000, 'delivered');
    finish(store, dead, 1000, 'dead');
    repos(store).deliveries.lease([released], 1000 + LEASE_MS, 1000);
    repos(store).deliveries.release([released], 1001);
    assertIndexes(store, { fresh: [fresh, released], leased: [leased], failed: [failed], settled: [delivered, dead] });
  });

  test('a database upgraded from version 4 has the same indexes, holding its existing deliveries, which due() and list() find', async (t) => {
    const path = join(tempDir(t, 'hookrelay-queues-'), 'hookrelay.db');
    version4Database(path);
    const store = openSqliteStore(path, { now: () => 0 });
    t.after(() => store.close());
    assert.deepEqual({ from: store.migrated.from, to: store.migrated.to }, { from: 4, to: MIGRATIONS.length });
    assertIndexes(store, { fresh: [1], leased: [2], failed: [3], settled: [4, 5] });
    assert.deepEqual(dueIds(store, 2000, 100, 'acme'), [1, 3]);
    assert.deepEqual(dueIds(store, 50_000, 100, 'acme'), [1, 2, 3]);
    assert.deepEqual(
      repos(store).deliveries.list('acme', { limit: 100 }).map((d) => [d.id, publicStatus(d), d.eventType]),
      [
        [5, 'dead', 'anticipation_request.status_changed'],
        [4, 'delivered', 'anticipation_request.status_changed'],
        [3, 'failed', 'anticipation_request.status_changed'],
        [2, 'pending', 'anticipation_request.status_changed'],
        [1, 'pending', 'anticipation_request.status_changed'],
      ],
    );
  });

  /** The SQL text and parameters of the statement the repository runs for `call` (the last, when several), captured on the way to SQLite. */
  function statementRunBy(store: Store, call: (repo: ReturnType<typeof createSqliteDeliveriesRepo>) => unknown): { sql: string; params: unknown[] } {
    return statementsRunBy(store, call).at(-1)!;
  }

  /** Every statement the repository runs for `call`, in order. */
  function statementsRunBy(store: Store, call: (repo: ReturnType<typeof createSqliteDeliveriesRepo>) => unknown): Array<{ sql: string; params: unknown[] }> {
    const run: Array<{ sql: string; params: unknown[] }> = [];
    const recording = {
      prepare(sql: string) {
        const statement = store.db.prepare(sql);
        return {
          all: (...params: unknown[]) => {
            run.push({ sql, params });
            return statement.all(...params);
          },
          get: (...params: unknown[]) => {
            run.push({ sql, params });
            return statement.get(...params);
          },
        };
      },
    };
    call(createSqliteDeliveriesRepo(recording as unknown as Db));
    assert.ok(run.length > 0, 'the call ran no statement');
    return run;
  }

  /** The index names in the query plan of `sql`. */
  function indexesUsed(store: Store, statement: { sql: string; params: unknown[] }): Set<string> {
    const plan = store.db.prepare(`EXPLAIN QUERY PLAN ${statement.sql}`).all(...statement.params) as Array<{ detail: string }>;
    return new Set(plan.flatMap((row) => [...row.detail.matchAll(/\bINDEX (\w+)/g)].map((m) => m[1]!)));
  }

  test('due() and list() read each queue through its own index', async (t) => {
    const { store } = await deliveryLog(t);
    const due = indexesUsed(store, statementRunBy(store, (repo) => repo.dueRows(ORG, 10_000, 50)));
    assert.ok(due.has('deliveries_org_fresh') && due.has('deliveries_org_due'), `due() uses ${[...due].join(', ')}`);
    // The held-back check finds a request's other deliveries by its ordering key, not by
    // reading every delivery of the organization in flight for each candidate.
    const statement = statementRunBy(store, (repo) => repo.dueRows(ORG, 10_000, 50));
    const plan = (store.db.prepare(`EXPLAIN QUERY PLAN ${statement.sql}`).all(...statement.params) as Array<{ detail: string }>).map((r) => r.detail);
    const heldBack = plan.filter((d) => /^SEARCH p\b/.test(d));
    assert.equal(heldBack.length, 2, plan.join('\n'));
    for (const d of heldBack) assert.match(d, /USING INDEX deliveries_ordering \(ordering_key=\?\)/);
    const list = indexesUsed(store, statementRunBy(store, (repo) => repo.list(ORG, { limit: 50 })));
    assert.ok(list.has('deliveries_org_fresh') && list.has('deliveries_org_status'), `list() uses ${[...list].join(', ')}`);
  });

  // SQLite re-plans a statement at every run when the planner looked at a bound parameter's
  // value, which it does for a bare `org_id = @org` while judging the partial indexes: that
  // re-planning was 170 µs of a 200 µs claim (docs/benchmarks.md). The claim's reads compare
  // org_id with `+@org`, which SQLite does not look into, and still search the same indexes.
  test('the claim and wake-up reads bind the organization so that SQLite plans them once', async (t) => {
    const { store } = await deliveryLog(t);
    const [oldestFresh, earliestRetry] = statementsRunBy(store, (repo) => repo.oldestDueAt(ORG, 10_000));
    const reads = {
      due: statementRunBy(store, (repo) => repo.dueRows(ORG, 10_000, 50)),
      nextRetry: statementRunBy(store, (repo) => repo.nextRetryAt(ORG, 10_000)),
      oldestFresh: oldestFresh!,
      earliestRetry: earliestRetry!,
    };
    for (const [name, statement] of Object.entries(reads)) {
      assert.doesNotMatch(statement.sql, /\borg_id\s*=\s*[@?:$]/, `${name} compares org_id with a bare parameter`);
      assert.match(statement.sql, /\borg_id = \+@org\b/, name);
    }
    assert.ok(indexesUsed(store, reads.nextRetry).has('deliveries_org_due'), 'nextRetryAt() searches deliveries_org_due');
    assert.ok(indexesUsed(store, reads.oldestFresh).has('deliveries_org_fresh'), 'oldestDueAt() searches deliveries_org_fresh');
    assert.ok(indexesUsed(store, reads.earliestRetry).has('deliveries_org_due'), 'oldestDueAt() searches deliveries_org_due');
  });

  test("list() reads each part of the log within the page's id range, newest first, and stops at the page's end: never the organization's whole log", async (t) => {
    const { store } = await deliveryLog(t);
    const window = { since: 2000, until: 8000, fromId: 2, beforeId: 9 };
    const shapes: Array<[string, ListFilter, string[]]> = [
      ['all', { limit: 50 }, ['deliveries_org_fresh', 'deliveries_org_status']],
      ['pending', { status: 'pending', limit: 50 }, ['deliveries_org_fresh', 'deliveries_org_status']],
      ['failed', { status: 'failed', limit: 50 }, ['deliveries_org_status']],
      ['delivered', { status: 'delivered', beforeId: 5, limit: 50 }, ['deliveries_org_status']],
      ['dead', { status: 'dead', limit: 50 }, ['deliveries_org_status']],
      ['a time window', { ...window, limit: 50 }, ['deliveries_org_fresh', 'deliveries_org_status']],
      ['a time window, delivered', { ...window, status: 'delivered', limit: 50 }, ['deliveries_org_status']],
    ];
    for (const [name, filter, indexes] of shapes) {
      const statement = statementRunBy(store, (repo) => repo.list(ORG, filter));
      const plan = (store.db.prepare(`EXPLAIN QUERY PLAN ${statement.sql}`).all(statement.params[0]) as Array<{ detail: string }>).map((r) => r.detail);
      const reads = plan.filter((d) => /^(SEARCH|SCAN) d\b/.test(d) && !/PRIMARY KEY \(rowid=\?\)/.test(d));
      assert.ok(reads.length > 0, `${name}: ${plan.join(' | ')}`);
      // Each part: one organization (and status) of its index, between two ids.
      for (const d of reads) assert.match(d, /^SEARCH d USING INDEX deliveries_org_(fresh|status) \(org_id=\? (AND status=\? )?AND id>\? AND id<\?\)$/, `${name}: ${plan.join(' | ')}`);
      assert.deepEqual([...new Set(reads.map((d) => /INDEX (\w+)/.exec(d)![1]))].sort(), indexes.sort(), `${name}: ${plan.join(' | ')}`);
    }
    // A search by request reads the deliveries between two ids (its caller bounds them), by id.
    const search = statementRunBy(store, (repo) => repo.list(ORG, { requestId: 'ar_3', fromId: 1, beforeId: 100, limit: 50 }));
    const plan = (store.db.prepare(`EXPLAIN QUERY PLAN ${search.sql}`).all(search.params[0]) as Array<{ detail: string }>).map((r) => r.detail);
    assert.match(plan[0] ?? '', /^SEARCH d USING INTEGER PRIMARY KEY \(rowid>\? AND rowid<\?\)$/, plan.join(' | '));
    assert.ok(!plan.some((d) => /TEMP B-TREE/.test(d)), `no sort: ${plan.join(' | ')}`);
  });

  test("attemptCounts() reads a window's attempts from delivery_attempts_started alone, and each one's delivery by its id", async (t) => {
    const { store } = await deliveryLog(t);
    const statement = statementRunBy(store, (repo) => repo.attemptCounts(ORG, 0, 60_000, 1000));
    const plan = (store.db.prepare(`EXPLAIN QUERY PLAN ${statement.sql}`).all(statement.params[0]) as Array<{ detail: string }>).map((r) => r.detail);
    assert.ok(plan.includes('SEARCH a USING COVERING INDEX delivery_attempts_started (started_at>? AND started_at<?)'), plan.join(' | '));
    assert.ok(plan.includes('SEARCH d USING INTEGER PRIMARY KEY (rowid=?)'), plan.join(' | '));
  });
});

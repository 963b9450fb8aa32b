/**
 * The deliveries repository contract: the same cases, through the Store boundary only
 * (store.transaction, store.read and the repositories of repos.ts), against each backend: a
 * fresh SQLite file and a fresh PostgreSQL database (test/helpers/pg-harness.ts). Then, on PostgreSQL
 * only, what several instances sharing one database add: the claim turn, the leases counted
 * across instances, fencing, per-request order and the per-webhook cap across instances, and
 * claims made side by side.
 *
 * Organizations, webhooks, events and deliveries are seeded through the repositories. Ids the
 * database hands out (seqs, delivery ids, attempt ids) are only compared with themselves. Times
 * are given explicitly (repository calls) or by a clock the test moves (the delivery service).
 */
import assert from 'node:assert/strict';
import { after, describe, test, type TestContext } from 'node:test';
import { EVENT_TYPE, statusChangeBody, type StorableEvent } from '../../src/domain/feed-event.ts';
import { orderingKey } from '../../src/domain/ordering.ts';
import type { AttemptResult, DeliveryOutcome } from '../../src/domain/retry-policy.ts';
import { createLogger } from '../../src/log.ts';
import { createDeliveryLogService } from '../../src/services/delivery-log.ts';
import { createOutboxService, type ClaimedDelivery, type ClaimWanted, type FinishedAttempt, type FlushResult } from '../../src/services/outbox.ts';
import { openPgStore, type PgStore } from '../../src/store/pg/store.ts';
import { createPgPool } from '../../src/store/pg/pool.ts';
import type { Store, Tx } from '../../src/store/repos.ts';
import { dueDeliveryOf } from '../../src/store/row-mappers.ts';
import { DeliveryStatus, type AttemptToStore, type DeliveryRow, type Settlement } from '../../src/store/values.ts';
import { pgServer, stopPgServer } from '../helpers/pg-harness.ts';
import { STORE_BACKENDS } from '../helpers/store-backends.ts';
import { testAudit } from '../helpers/audit-helpers.ts';

after(stopPgServer);

/** A clock the test moves. */
interface TestClock {
  at: number;
  now(): number;
}
const testClock = (at: number): TestClock => {
  const clock: TestClock = { at, now: () => clock.at };
  return clock;
};

const T0 = 1_700_000_000_000;

/** The contract's backends, each on a clock of its own the test moves. */
const backends = STORE_BACKENDS.map((b) => ({
  name: b.name,
  async open(t: TestContext) {
    const clock = testClock(T0);
    return { ...(await b.open(t, clock)), clock };
  },
}));

const silentLog = createLogger('silent');
const serviceOptions = { failingAfterFailures: 5, disableAfterMs: 86_400_000, secretRotationGraceMs: 1000 };
const DETAILS = '"status":"approved","previous_status":null';
const OCCURRED_AT = 1_690_000_000_000;
const hookUrl = (orgId: string) => `https://${orgId}.example.com/hook`;

/** Organizations with a webhook each (HMAC on, secret `whsec_<org>`). */
async function seedOrgs(store: Store, orgs: readonly string[] = ['acme', 'globex']): Promise<void> {
  await store.transaction(async (tx) => {
    for (const id of orgs) {
      assert.equal(await tx.orgs.insert({ id, name: id, createdAt: 1 }), true);
      await tx.webhooks.upsert(id, hookUrl(id), true, `whsec_${id}`, 1);
    }
  });
}

/** A change to queue: an event of `request` in `org`. */
interface Change {
  readonly id: string;
  readonly request: string;
  readonly org?: string;
  /** The event's trace context, when it has one. */
  readonly traceparent?: string;
  readonly tracestate?: string;
}
interface Queued {
  readonly id: number;
  readonly seq: number;
  readonly eventId: string;
  readonly orgId: string;
  readonly request: string;
  readonly key: number;
}

const storable = (c: Change): StorableEvent => ({
  id: c.id,
  orgId: c.org ?? 'acme',
  anticipationRequestId: c.request,
  occurredAt: OCCURRED_AT,
  details: DETAILS,
  legacyId: null,
  ...(c.traceparent === undefined ? {} : { trace: { traceparent: c.traceparent, tracestate: c.tracestate ?? null, ignored: null } }),
});

/** Stores events as ingest does (receive time, source, batch); returns their seqs. */
async function storeEvents(tx: Tx, changes: readonly Change[], now: number): Promise<number[]> {
  const at = await tx.feed.receivedAt(now);
  const seqs = await tx.feed.insertEvents(
    changes.map((c) => ({ event: storable(c), position: null })),
    await tx.feed.sourceId('feed.jsonl'),
    at,
  );
  return seqs.map((s) => {
    assert.ok(typeof s === 'number' && s > 0, `a seq, not ${s}`);
    return s;
  });
}

/** Stores the changes' events and queues one delivery each, in order, at `now` (one transaction). */
function queue(store: Store, changes: readonly Change[], now: number): Promise<Queued[]> {
  return store.transaction(async (tx) => {
    const seqs = await storeEvents(tx, changes, now);
    const out: Queued[] = [];
    for (const [i, c] of changes.entries()) {
      const orgId = c.org ?? 'acme';
      const key = orderingKey(orgId, c.request);
      out.push({ id: await tx.deliveries.insert(seqs[i]!, orgId, key, now), seq: seqs[i]!, eventId: c.id, orgId, request: c.request, key });
    }
    return out;
  });
}

/** Applies an attempt's outcome as the dispatcher does: under a lease of this instance (leased at `at`, until later). */
async function finish(store: Store, id: number, s: Settlement): Promise<void> {
  await store.transaction(async (tx) => {
    await tx.deliveries.lease([id], s.at + 60_000, s.at);
    assert.equal(await tx.deliveries.settle(id, s), true);
  });
}
const failedAt = (at: number, nextAttemptAt: number, attempts = 1, statusCode: number | null = 500, error = 'HTTP 500'): Settlement => ({
  status: DeliveryStatus.pending,
  attempts,
  nextAttemptAt,
  at,
  statusCode,
  error,
});
const deliveredAt = (at: number, attempts = 1): Settlement => ({ status: DeliveryStatus.delivered, attempts, nextAttemptAt: at, at, statusCode: 200, error: null });
const deadAt = (at: number, attempts = 1, statusCode: number | null = 400, error = 'HTTP 400'): Settlement => ({ status: DeliveryStatus.dead, attempts, nextAttemptAt: at, at, statusCode, error });

const ids = (rows: ReadonlyArray<{ id: number }>) => rows.map((r) => r.id);
const dueIds = async (store: Store, orgId: string, now: number, limit = 100) => ids(await store.read((tx) => tx.deliveries.dueRows(orgId, now, limit)));
const getRow = (store: Store, orgId: string, id: number) => store.read((tx) => tx.deliveries.get(orgId, id));
/** One organization's turn to claim (claimTurns for it alone), or null when another transaction holds it. */
const claimTurn = async (tx: Tx, orgId: string, now: number) => (await tx.deliveries.claimTurns([orgId], now)).get(orgId) ?? null;

/** The attempt outcomes the dispatcher hands over. */
const result = (statusCode: number | null, body: string | null = null): AttemptResult => ({
  statusCode,
  error: statusCode !== null && statusCode >= 200 && statusCode < 300 ? null : 'http_status',
  errorDetail: statusCode !== null && statusCode >= 200 && statusCode < 300 ? null : `HTTP ${statusCode}`,
  responseBody: body,
  durationMs: 7,
  retryAfterMs: null,
  // What the deliverer reports it sent (the flush stores it with the attempt).
  sentTimestamp: 1_767_225_600,
  sentSignature: statusCode === 200 ? 'v1,c2lnbmVkIGF0IDE3NjcyMjU2MDA= v1,b2xkZXIgc2VjcmV0' : null,
});
const delivered = (delivery: ClaimedDelivery, startedAt: number): FinishedAttempt => ({ delivery, result: result(200, 'ok'), outcome: { kind: 'delivered' }, startedAt });
const retried = (delivery: ClaimedDelivery, startedAt: number, at: number): FinishedAttempt => ({ delivery, result: result(500, 'boom'), outcome: { kind: 'retry', at } satisfies DeliveryOutcome, startedAt });

/** A claim for these organizations, and nothing else. */
const claimOnly = (wanted: readonly ClaimWanted[], leaseMs = 60_000) => ({ finished: [], released: [], claim: { wanted, leaseMs } });

for (const backend of backends) {
  describe(`deliveries contract: ${backend.name}`, () => {
    test("an event's trace context is stored with it: the due row and the delivery log read it back", async (t) => {
      const { store } = await backend.open(t);
      await seedOrgs(store);
      const traceparent = '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01';
      const [traced, plain] = await queue(store, [{ id: 'evt_traced', request: 'ar_t', traceparent, tracestate: 'vendor=abc' }, { id: 'evt_plain', request: 'ar_p' }], 1000);
      const rows = await store.read((tx) => tx.deliveries.dueRows('acme', 5000, 10));
      const due = (id: number) => dueDeliveryOf(rows.find((r) => r.id === id)!);
      assert.deepEqual([due(traced!.id).traceparent, due(traced!.id).tracestate], [traceparent, 'vendor=abc']);
      assert.deepEqual([due(plain!.id).traceparent, due(plain!.id).tracestate], [null, null]);
      assert.equal((await getRow(store, 'acme', traced!.id))?.traceId, '4bf92f3577b34da6a3ce929d0e0e4736');
      assert.equal((await getRow(store, 'acme', plain!.id))?.traceId, null);
    });

    test('insert, insertMany, get (within its organization), eventOf, hasPendingDelivery', async (t) => {
      const { store } = await backend.open(t);
      await seedOrgs(store);
      const [one] = await queue(store, [{ id: 'evt_1', request: 'ar_1' }], 1000);
      assert.ok(one !== undefined);
      const expected: DeliveryRow = {
        id: one.id,
        orgId: 'acme',
        eventId: 'evt_1',
        eventType: EVENT_TYPE,
        anticipationRequestId: 'ar_1',
        status: 'pending',
        attempts: 0,
        nextAttemptAt: 1000,
        lastAttemptAt: null,
        lastStatusCode: null,
        lastError: null,
        createdAt: 1000,
        updatedAt: 1000,
        traceId: null,
      };
      assert.deepEqual(await getRow(store, 'acme', one.id), expected);
      assert.equal(await getRow(store, 'globex', one.id), null, "another organization's delivery is not found");
      assert.equal(await getRow(store, 'acme', one.id + 1000), null);
      assert.deepEqual(await store.read((tx) => tx.deliveries.eventOf(one.id)), { eventSeq: one.seq, orderingKey: orderingKey('acme', 'ar_1') });
      assert.equal(await store.read((tx) => tx.deliveries.eventOf(one.id + 1000)), null);

      // insertMany: several organizations, in the order given (ids increase along it); empty: nothing.
      const seqs = await store.transaction(async (tx) => {
        const s = await storeEvents(
          tx,
          [
            { id: 'evt_2', request: 'ar_2' },
            { id: 'evt_3', request: 'ar_3', org: 'globex' },
            { id: 'evt_4', request: 'ar_2' },
          ],
          2000,
        );
        await tx.deliveries.insertMany([], 2000);
        await tx.deliveries.insertMany(
          [
            { eventSeq: s[0]!, orgId: 'acme', orderingKey: orderingKey('acme', 'ar_2') },
            { eventSeq: s[1]!, orgId: 'globex', orderingKey: orderingKey('globex', 'ar_3') },
            { eventSeq: s[2]!, orgId: 'acme', orderingKey: orderingKey('acme', 'ar_2') },
          ],
          2000,
        );
        return s;
      });
      const acme = await store.read((tx) => tx.deliveries.list('acme', { limit: 10 }));
      assert.deepEqual(
        acme.map((d) => [d.eventId, d.status, d.createdAt, d.nextAttemptAt, d.updatedAt]),
        [
          ['evt_4', 'pending', 2000, 2000, 2000],
          ['evt_2', 'pending', 2000, 2000, 2000],
          ['evt_1', 'pending', 1000, 1000, 1000],
        ],
      );
      assert.ok(acme[0]!.id > acme[1]!.id && acme[1]!.id > one.id, 'ids in the order queued');
      const globex = await store.read((tx) => tx.deliveries.list('globex', { limit: 10 }));
      assert.deepEqual(
        globex.map((d) => [d.orgId, d.eventId, d.anticipationRequestId]),
        [['globex', 'evt_3', 'ar_3']],
      );
      assert.ok(globex[0]!.id > acme[1]!.id && globex[0]!.id < acme[0]!.id);
      assert.deepEqual(await store.read((tx) => tx.deliveries.eventOf(acme[0]!.id)), { eventSeq: seqs[2], orderingKey: orderingKey('acme', 'ar_2') });

      // hasPendingDelivery: while the event has a pending delivery, not after it was delivered or died.
      assert.equal(await store.read((tx) => tx.deliveries.hasPendingDelivery(one.seq)), true);
      await finish(store, one.id, failedAt(3000, 9000));
      assert.equal(await store.read((tx) => tx.deliveries.hasPendingDelivery(one.seq)), true, 'a failed delivery is still pending');
      await finish(store, one.id, deliveredAt(4000, 2));
      assert.equal(await store.read((tx) => tx.deliveries.hasPendingDelivery(one.seq)), false);
      await finish(store, acme[1]!.id, deadAt(4000));
      assert.equal(await store.read((tx) => tx.deliveries.hasPendingDelivery(seqs[0]!)), false);
      // A replay queues the event again.
      await store.transaction((tx) => tx.deliveries.insert(one.seq, 'acme', orderingKey('acme', 'ar_1'), 5000));
      assert.equal(await store.read((tx) => tx.deliveries.hasPendingDelivery(one.seq)), true);
      const noDelivery = await store.transaction((tx) => storeEvents(tx, [{ id: 'evt_5', request: 'ar_5' }], 5000));
      assert.equal(await store.read((tx) => tx.deliveries.hasPendingDelivery(noDelivery[0]!)), false);
    });

    test('list: newest first, by public status, since/until, beforeId cursor, limit; only the organization', async (t) => {
      const { store } = await backend.open(t);
      await seedOrgs(store);
      const q: Queued[] = [];
      for (const [i, at] of [1000, 2000, 3000, 4000, 5000, 6000].entries()) q.push(...(await queue(store, [{ id: `evt_${i + 1}`, request: `ar_${i + 1}` }], at)));
      const [d1, d2, d3, d4, d5, d6] = q.map((x) => x.id) as [number, number, number, number, number, number];
      const [g] = await queue(store, [{ id: 'evt_g', request: 'ar_g', org: 'globex' }], 3500);
      await finish(store, d2, failedAt(7000, 90_000, 1, 500, 'HTTP 500'));
      await finish(store, d3, deliveredAt(7100));
      await finish(store, d4, deadAt(7200, 1, null, 'timeout'));
      // d5 is being attempted (leased, never attempted yet): pending, in the other part of the queue.
      await store.transaction((tx) => tx.deliveries.lease([d5], 70_000, 7300));
      const list = async (f: Parameters<Tx['deliveries']['list']>[1], orgId = 'acme') => ids(await store.read((tx) => tx.deliveries.list(orgId, f)));

      assert.deepEqual(await list({ limit: 100 }), [d6, d5, d4, d3, d2, d1]);
      assert.deepEqual(await list({ status: 'pending', limit: 100 }), [d6, d5, d1]);
      assert.deepEqual(await list({ status: 'failed', limit: 100 }), [d2]);
      assert.deepEqual(await list({ status: 'delivered', limit: 100 }), [d3]);
      assert.deepEqual(await list({ status: 'dead', limit: 100 }), [d4]);
      assert.deepEqual(await list({ since: 2000, until: 5000, limit: 100 }), [d4, d3, d2], 'created in [since, until)');
      assert.deepEqual(await list({ since: 5000, limit: 100 }), [d6, d5]);
      assert.deepEqual(await list({ until: 2000, limit: 100 }), [d1]);
      assert.deepEqual(await list({ status: 'pending', since: 1001, until: 6000, limit: 100 }), [d5]);
      assert.deepEqual(await list({ beforeId: d4, limit: 100 }), [d3, d2, d1]);
      assert.deepEqual(await list({ limit: 2 }), [d6, d5]);
      assert.deepEqual(await list({ beforeId: d5, limit: 2 }), [d4, d3]);
      assert.deepEqual(await list({ status: 'pending', beforeId: d5, limit: 100 }), [d1]);
      assert.deepEqual(await list({ status: 'pending', limit: 1 }), [d6]);
      assert.deepEqual(await list({ status: 'failed', beforeId: d2, limit: 100 }), []);
      assert.deepEqual(await list({ limit: 100 }, 'globex'), [g!.id]);
      assert.deepEqual(await list({ limit: 100 }, 'initech'), []);

      const rows = await store.read((tx) => tx.deliveries.list('acme', { since: 2000, until: 5000, limit: 100 }));
      assert.deepEqual(
        rows.map((r) => [r.status, r.attempts, r.lastAttemptAt, r.lastStatusCode, r.lastError, r.nextAttemptAt]),
        [
          ['dead', 1, 7200, null, 'timeout', 7200],
          ['delivered', 1, 7100, 200, null, 7100],
          ['pending', 1, 7000, 500, 'HTTP 500', 90_000],
        ],
      );
    });

    test('list: an id range [fromId, beforeId); a search by request within it, by status, never another organization\'s nor a request whose key collides', async (t) => {
      const { store } = await backend.open(t);
      await seedOrgs(store);
      const q: Queued[] = [];
      const changes: Change[] = [
        { id: 'evt_1', request: 'ar_x' },
        { id: 'evt_2', request: 'ar_y' },
        { id: 'evt_g', request: 'ar_x', org: 'globex' },
        { id: 'evt_3', request: 'ar_x' },
        { id: 'evt_4', request: 'ar_x' },
        { id: 'evt_5', request: 'ar_y' },
      ];
      for (const [i, c] of changes.entries()) q.push(...(await queue(store, [c], 1000 * (i + 1))));
      const [x1, y2, gx, x3, x4, y5] = q.map((d) => d.id) as [number, number, number, number, number, number];
      // A delivery whose event is of another request but that carries ar_x's ordering key (as a
      // collision of the 53-bit hash would): told apart by the request id on its event.
      const collided = await store.transaction(async (tx) => {
        const [seq] = await storeEvents(tx, [{ id: 'evt_c', request: 'ar_z' }], 7000);
        return tx.deliveries.insert(seq!, 'acme', orderingKey('acme', 'ar_x'), 7000);
      });
      await finish(store, x3, deliveredAt(8000));
      await finish(store, x4, failedAt(8000, 90_000));
      const list = async (f: Parameters<Tx['deliveries']['list']>[1], orgId = 'acme') => ids(await store.read((tx) => tx.deliveries.list(orgId, f)));

      assert.deepEqual(await list({ fromId: y2, beforeId: x4, limit: 100 }), [x3, y2], 'ids in [fromId, beforeId), of acme only');
      assert.deepEqual(await list({ fromId: x4, limit: 100 }), [collided, y5, x4]);
      assert.deepEqual(await list({ fromId: x3, beforeId: collided, status: 'delivered', limit: 100 }), [x3]);
      assert.deepEqual(await list({ fromId: x3, beforeId: x3, limit: 100 }), [], 'an empty range');

      const all = { fromId: 0, beforeId: Number.MAX_SAFE_INTEGER };
      assert.deepEqual(await list({ ...all, requestId: 'ar_x', limit: 100 }), [x4, x3, x1], "ar_x's deliveries, newest first, not globex's nor the collided one");
      assert.deepEqual(await list({ ...all, requestId: 'ar_x', limit: 100 }, 'globex'), [gx]);
      assert.deepEqual(await list({ ...all, requestId: 'ar_y', limit: 1 }), [y5]);
      assert.deepEqual(await list({ ...all, requestId: 'ar_z', limit: 100 }), [], "ar_z's key is not the one its delivery carries");
      assert.deepEqual(await list({ ...all, requestId: 'ar_none', limit: 100 }), []);
      assert.deepEqual(await list({ fromId: x3, beforeId: x4 + 1, requestId: 'ar_x', limit: 100 }), [x4, x3]);
      assert.deepEqual(await list({ ...all, requestId: 'ar_x', status: 'delivered', limit: 100 }), [x3]);
      assert.deepEqual(await list({ ...all, requestId: 'ar_x', status: 'failed', limit: 100 }), [x4]);
      assert.deepEqual(await list({ ...all, requestId: 'ar_x', status: 'pending', limit: 100 }), [x1]);
      assert.deepEqual(await list({ ...all, requestId: 'ar_x', status: 'dead', limit: 100 }), []);
      assert.deepEqual(await list({ ...all, requestId: 'ar_x', since: 3000, until: 5000, limit: 100 }), [x3], 'queued in [since, until)');
      const [row] = await store.read((tx) => tx.deliveries.list('acme', { ...all, requestId: 'ar_x', limit: 1 }));
      assert.deepEqual([row?.eventId, row?.anticipationRequestId, row?.status, row?.attempts], ['evt_4', 'ar_x', 'pending', 1]);
    });

    test('idsCreated: the ids queued in [since, until) by a binary search over the id; queue times never go back, even when deliveries were queued without an event under a clock that stepped back', async (t) => {
      const { store } = await backend.open(t);
      assert.deepEqual(await store.read((tx) => tx.deliveries.idsCreated(null, null)), { from: 0, to: 0 }, 'no delivery');
      assert.deepEqual(await store.read((tx) => tx.deliveries.idsCreated(1000, 2000)), { from: 0, to: 0 });
      await seedOrgs(store);
      const q: Queued[] = [];
      for (const at of [1000, 2000, 2000, 3000, 5000]) q.push(...(await queue(store, [{ id: `evt_${q.length}`, request: 'ar_1', org: q.length % 2 === 0 ? 'acme' : 'globex' }], at)));
      const [d0, d1, , d3, d4] = q.map((d) => d.id) as [number, number, number, number, number];
      const range = (since: number | null, until: number | null) => store.read((tx) => tx.deliveries.idsCreated(since, until));
      assert.deepEqual(await range(null, null), { from: d0, to: d4 + 1 });
      assert.deepEqual(await range(2000, 3000), { from: d1, to: d3 }, 'both deliveries queued at 2000, of either organization');
      assert.deepEqual(await range(2001, 5000), { from: d3, to: d4 });
      assert.deepEqual(await range(null, 1000), { from: d0, to: d0 }, 'nothing before the first');
      assert.deepEqual(await range(5001, null), { from: d4 + 1, to: d4 + 1 }, 'nothing after the last');
      assert.deepEqual(await range(0, 99_999), { from: d0, to: d4 + 1 });

      // A replay queues a delivery without an event; the clock then steps back: the next queue
      // time is still the replay's, so created_at never goes back along the id.
      const replayed = await store.transaction(async (tx) => tx.deliveries.insert(q[0]!.seq, 'acme', q[0]!.key, await tx.feed.receivedAt(9000)));
      const at = await store.transaction((tx) => tx.feed.receivedAt(6000));
      assert.equal(at, 9000);
      const [later] = await queue(store, [{ id: 'evt_later', request: 'ar_2' }], at);
      assert.deepEqual(await range(9000, null), { from: replayed, to: later!.id + 1 });
      assert.deepEqual(await range(5001, 9000), { from: replayed, to: replayed });
    });

    test('attemptCounts: the organization\'s attempts by the time they started, succeeded and failed, per bucket of [from, to)', async (t) => {
      const { store } = await backend.open(t);
      await seedOrgs(store);
      const [a1, a2, g1] = await queue(
        store,
        [
          { id: 'evt_1', request: 'ar_1' },
          { id: 'evt_2', request: 'ar_2' },
          { id: 'evt_g', request: 'ar_g', org: 'globex' },
        ],
        1000,
      );
      const attempt = (d: Queued, n: number, startedAt: number, outcome: string, statusCode: number | null): AttemptToStore => ({
        deliveryId: d.id,
        attempt: n,
        startedAt,
        durationMs: 5,
        url: hookUrl(d.orgId),
        statusCode,
        errorClass: outcome === 'delivered' ? null : 'http_status',
        errorDetail: null,
        responseBody: null,
        outcome,
        sentTimestamp: null,
        sentSignature: null,
      });
      await store.transaction((tx) =>
        tx.deliveries.insertAttempts([
          attempt(a1!, 1, 60_000, 'retry', 500), // bucket 0 of a window from 60,000 by the minute
          attempt(a1!, 2, 119_999, 'retry', null), // still bucket 0
          attempt(a2!, 1, 120_000, 'delivered', 200), // bucket 1
          attempt(a1!, 3, 150_000, 'dead', 503), // bucket 1
          attempt(a2!, 2, 240_000, 'delivered', 204), // bucket 3
          attempt(g1!, 1, 120_000, 'delivered', 200), // globex
          attempt(a2!, 3, 59_999, 'delivered', 200), // before the window
          attempt(a2!, 4, 300_000, 'disabled', 410), // at its end: not in it
        ]),
      );
      const counts = (orgId: string, from: number, to: number, bucketMs: number) => store.read((tx) => tx.deliveries.attemptCounts(orgId, from, to, bucketMs));
      assert.deepEqual(await counts('acme', 60_000, 300_000, 60_000), [
        { bucket: 0, succeeded: 0, failed: 2 },
        { bucket: 1, succeeded: 1, failed: 1 },
        { bucket: 3, succeeded: 1, failed: 0 },
      ]);
      assert.deepEqual(await counts('acme', 0, 400_000, 400_000), [{ bucket: 0, succeeded: 3, failed: 4 }], 'one bucket for all');
      assert.deepEqual(await counts('globex', 60_000, 300_000, 60_000), [{ bucket: 1, succeeded: 1, failed: 0 }]);
      assert.deepEqual(await counts('initech', 0, 400_000, 60_000), []);
      assert.deepEqual(await counts('acme', 400_000, 500_000, 60_000), []);
    });

    test('dueRows: fresh in queue order, retries by due time, merged; leased rows left out until the lease lapses; a disabled webhook has none', async (t) => {
      const { store } = await backend.open(t);
      await seedOrgs(store);
      const [f1, f2, r1, r2, r3] = await queue(
        store,
        ['f1', 'f2', 'r1', 'r2', 'r3'].map((id) => ({ id: `evt_${id}`, request: `ar_${id}` })),
        1000,
      );
      assert.ok(f1 && f2 && r1 && r2 && r3);
      const [g1] = await queue(store, [{ id: 'evt_g1', request: 'ar_g1', org: 'globex' }], 1000);
      // f2 queued later than f1 (its time is after f1's): fresh rows are due at once, in queue order.
      await store.transaction((tx) => tx.deliveries.insert(f2.seq, 'acme', f2.key, 2500));
      await finish(store, r1.id, failedAt(1100, 1500));
      await finish(store, r2.id, failedAt(1100, 500));
      await finish(store, r3.id, failedAt(1100, 10_000));
      await finish(store, f2.id, deadAt(1100)); // the first delivery of f2's event: not due any more
      const f2again = (await store.read((tx) => tx.deliveries.list('acme', { status: 'pending', limit: 1 })))[0]!;
      assert.equal(f2again.createdAt, 2500);

      // At 5000: r2 (due 500), f1 (queued 1000), r1 (due 1500), f2 again (queued 2500); r3 due at 10 000.
      assert.deepEqual(await dueIds(store, 'acme', 5000), [r2.id, f1.id, r1.id, f2again.id]);
      assert.deepEqual(await dueIds(store, 'acme', 5000, 2), [r2.id, f1.id]);
      assert.deepEqual(await dueIds(store, 'acme', 10_000), [r2.id, f1.id, r1.id, f2again.id, r3.id]);
      // Fresh deliveries are due at once whatever the clock says; retries only at their time.
      assert.deepEqual(await dueIds(store, 'acme', 100), [f1.id, f2again.id]);
      assert.deepEqual(await dueIds(store, 'globex', 5000), [g1!.id]);
      assert.deepEqual(await dueIds(store, 'initech', 5000), []);

      // The row as read: everything an attempt needs, and the body built from it.
      const rows = await store.read((tx) => tx.deliveries.dueRows('acme', 5000, 2));
      assert.deepEqual(rows[1], {
        id: f1.id,
        org_id: 'acme',
        ordering_key: f1.key,
        attempts: 0,
        event_id: 'evt_f1',
        anticipation_request_id: 'ar_f1',
        occurred_at: OCCURRED_AT,
        payload: DETAILS,
        url: hookUrl('acme'),
        headers: null,
        client_certificate: null,
        oauth2: null,
        active_hmac: 1,
        secret: 'whsec_acme',
        previous_secret: null,
        previous_secret_expires_at: null,
        // The event's trace context (none: stored without one).
        traceparent: null,
        tracestate: null,
        // PostgreSQL says whether a later change of its request waits behind it (see below).
        ...(backend.name === 'postgres' ? { holds_back: false } : {}),
      });
      assert.equal(rows[0]!.attempts, 1);
      const due = dueDeliveryOf(rows[1]!);
      assert.equal(due.payload, statusChangeBody({ id: 'evt_f1', orgId: 'acme', anticipationRequestId: 'ar_f1', occurredAt: OCCURRED_AT, details: DETAILS }));
      assert.equal(due.activeHmac, true);
      assert.equal(due.unsendable, null);
      // A rotated secret comes with the row, and a webhook without HMAC says so.
      await store.transaction((tx) => tx.webhooks.rotateSecret('acme', 'whsec_new', 99_000, 1200));
      assert.deepEqual(
        (await store.read((tx) => tx.deliveries.dueRows('acme', 5000, 1))).map((r) => [r.secret, r.previous_secret, r.previous_secret_expires_at]),
        [['whsec_new', 'whsec_acme', 99_000]],
      );
      await store.transaction((tx) => tx.webhooks.upsert('globex', hookUrl('globex'), false, null, 1300));
      assert.deepEqual(
        (await store.read((tx) => tx.deliveries.dueRows('globex', 5000, 1))).map((r) => [r.active_hmac, r.secret]),
        [[0, null]],
      );
      // The webhook's own headers come with the row too, in their order, whatever the backend's JSON type.
      await store.transaction((tx) => tx.webhooks.upsert('globex', hookUrl('globex'), false, null, 1300, { headers: [['X-B', '2'], ['Authorization', 'Bearer t']] }));
      assert.deepEqual(
        (await store.read((tx) => tx.deliveries.dueRows('globex', 5000, 1))).map((r) => dueDeliveryOf(r).headers),
        [[['X-B', '2'], ['Authorization', 'Bearer t']]],
      );
      // And its client certificate and OAuth2 settings (never their sealed secrets): the deliverer opens those by them.
      const clientCertificate = { subject: 'CN=globex', issuer: 'CN=CA', fingerprintSha256: 'AB:CD', serialNumber: '01', notBefore: 10, notAfter: 99_000, keyType: 'Ed25519' };
      const oauth2 = { tokenUrl: 'https://idp.example/token', clientId: 'hr', scope: null, audience: 'x', clientAuth: 'client_secret_post', revision: 'r2' } as const;
      await store.transaction((tx) => tx.webhooks.upsert('globex', hookUrl('globex'), false, null, 1300, { clientCertificate, oauth2, sealed: { clientCertificate: 'hrs1.sealed', oauth2ClientSecret: 'hrs1.sealed2' } }));
      const withAuth = (await store.read((tx) => tx.deliveries.dueRows('globex', 5000, 1))).map(dueDeliveryOf);
      assert.deepEqual(withAuth.map((d) => [d.clientCertificate, d.oauth2]), [[clientCertificate, oauth2]]);
      assert.ok(!JSON.stringify(withAuth).includes('hrs1'));

      // Leased: left out while the lease stands; back (as a retry, due since its time) once it lapsed.
      await store.transaction((tx) => tx.deliveries.lease([f1.id, r2.id], 9000, 5000));
      assert.deepEqual(await dueIds(store, 'acme', 5000), [r1.id, f2again.id]);
      assert.deepEqual(await dueIds(store, 'acme', 8999), [r1.id, f2again.id]);
      assert.deepEqual(await dueIds(store, 'acme', 9000), [r2.id, f1.id, r1.id, f2again.id]);

      // A disabled webhook's deliveries are held (pending, not due); failing ones still go.
      await store.transaction((tx) => tx.webhooks.setStatus('acme', 'disabled', 'operator', 5000));
      assert.deepEqual(await dueIds(store, 'acme', 9000), []);
      await store.transaction((tx) => tx.webhooks.setStatus('acme', 'failing', null, 5000));
      assert.deepEqual(await dueIds(store, 'acme', 9000), [r2.id, f1.id, r1.id, f2again.id]);
      await store.transaction((tx) => tx.webhooks.setStatus('acme', 'active', null, 5000));
      assert.deepEqual(await dueIds(store, 'acme', 9000), [r2.id, f1.id, r1.id, f2again.id]);
    });

    test('dueRows: a later change of a request waits while an earlier one is leased or failed; a claim never takes two of one request', async (t) => {
      const { store, clock } = await backend.open(t);
      await seedOrgs(store);
      const [k1, k2, k3, l1] = await queue(
        store,
        [
          { id: 'evt_k1', request: 'ar_k' },
          { id: 'evt_k2', request: 'ar_k' },
          { id: 'evt_k3', request: 'ar_k' },
          { id: 'evt_l1', request: 'ar_l' },
        ],
        1000,
      );
      assert.ok(k1 && k2 && k3 && l1);
      // PostgreSQL orders a request's changes by when they happened, across feeds: a pending
      // change that happened earlier holds back a later one, so only a request's first is due
      // (issue 30). SQLite, with one feed, returns them all, and the claim takes the first.
      const firstOnly = (all: number[], first: number[]) => (backend.name === 'postgres' ? first : all);
      // None tried yet: all due; the claim takes one per request.
      assert.deepEqual(await dueIds(store, 'acme', 2000), firstOnly([k1.id, k2.id, k3.id, l1.id], [k1.id, l1.id]));
      // k1 leased: the later changes of its request wait; the other request does not.
      await store.transaction((tx) => tx.deliveries.lease([k1.id], 9000, 2000));
      assert.deepEqual(await dueIds(store, 'acme', 2000), [l1.id]);
      // k1 failed (its retry at 5000): the later changes still wait, k1 itself at its time.
      await store.transaction(async (tx) => assert.equal(await tx.deliveries.settle(k1.id, failedAt(2000, 5000)), true));
      assert.deepEqual(await dueIds(store, 'acme', 4999), [l1.id]);
      assert.deepEqual(await dueIds(store, 'acme', 5000), [l1.id, k1.id], 'l1 due since 1000, k1 since 5000');
      // k1 delivered: the request goes on, in queue order.
      await finish(store, k1.id, deliveredAt(5000, 2));
      assert.deepEqual(await dueIds(store, 'acme', 5000), firstOnly([k2.id, k3.id, l1.id], [k2.id, l1.id]));
      // A later change leased (a replay, say) holds back an earlier fresh one too.
      await store.transaction((tx) => tx.deliveries.lease([k3.id], 9000, 5000));
      assert.deepEqual(await dueIds(store, 'acme', 5000), [l1.id]);
      await store.transaction((tx) => tx.deliveries.release([k3.id], 5000));
      assert.deepEqual(await dueIds(store, 'acme', 5000), firstOnly([k2.id, k3.id, l1.id], [k2.id, l1.id]));
      // A dead change holds nothing back.
      await finish(store, k2.id, deadAt(5000));
      assert.deepEqual(await dueIds(store, 'acme', 5000), [k3.id, l1.id]);

      // Through the claim: one delivery per request, the one held back behind it noted.
      const [m1, m2] = await queue(
        store,
        [
          { id: 'evt_m1', request: 'ar_m' },
          { id: 'evt_m2', request: 'ar_m' },
        ],
        6000,
      );
      clock.at = 7000;
      const service = createOutboxService(store, silentLog, serviceOptions);
      const first = await service.flush(claimOnly([{ orgId: 'acme', upTo: 10 }]));
      assert.deepEqual(
        first.claimed.map((d) => [d.id, d.holdsBack]),
        [
          [k3.id, false],
          [l1.id, false],
          [m1!.id, true],
        ],
      );
      assert.deepEqual(first.drained, [{ orgId: 'acme', nextRetryAt: null }]);
      assert.deepEqual((await service.flush(claimOnly([{ orgId: 'acme', upTo: 10 }]))).claimed, [], 'm2 waits for m1');
      assert.ok(m2 !== undefined);
    });

    test('claimTurn: SQLite is the only claimer; PostgreSQL alone on its database counts no leases of its own and reads the stored status', async (t) => {
      const { store } = await backend.open(t);
      await seedOrgs(store);
      const [d1, d2] = await queue(
        store,
        [
          { id: 'evt_1', request: 'ar_1' },
          { id: 'evt_2', request: 'ar_2' },
        ],
        1000,
      );
      await store.transaction((tx) => tx.deliveries.lease([d1!.id, d2!.id], 90_000, 1000));
      await store.transaction((tx) => tx.webhooks.setStatus('globex', 'failing', null, 1000));
      const turn = (orgId: string) => store.transaction((tx) => claimTurn(tx, orgId, 2000));
      const shared = backend.name === 'postgres';
      const active = { leasedElsewhere: 0, failing: false, shared };
      assert.deepEqual(await turn('acme'), active);
      assert.deepEqual(await turn('globex'), { leasedElsewhere: 0, failing: shared, shared });
      // Several at once: each organization asked for, once; none: nothing.
      assert.deepEqual(
        await store.transaction((tx) => tx.deliveries.claimTurns(['globex', 'acme'], 2000)),
        new Map([
          ['globex', { leasedElsewhere: 0, failing: shared, shared }],
          ['acme', active],
        ]),
      );
      assert.deepEqual(await store.transaction((tx) => tx.deliveries.claimTurns([], 2000)), new Map());
      // Taken twice in one transaction (a commit that records, then claims): the same answer.
      assert.deepEqual(
        await store.transaction(async (tx) => [await claimTurn(tx, 'acme', 2000), await claimTurn(tx, 'acme', 2000)]),
        [active, active],
      );
      // After the webhook's rows were locked for recording in the same transaction: still this transaction's turn.
      assert.deepEqual(
        await store.transaction(async (tx) => {
          await tx.webhooks.lockInOrder(['globex', 'acme']);
          return claimTurn(tx, 'acme', 2000);
        }),
        active,
      );
    });

    test('a claim takes its upTo alone on a database (claiming ahead), only what can start now (cap) on a shared one', async (t) => {
      const { store, clock } = await backend.open(t);
      await seedOrgs(store);
      await queue(
        store,
        Array.from({ length: 8 }, (_, i) => ({ id: `evt_${i}`, request: `ar_${i}` })),
        T0,
      );
      const service = createOutboxService(store, silentLog, serviceOptions);
      clock.at = T0 + 10;
      const claimed = await service.flush(claimOnly([{ orgId: 'acme', upTo: 6, cap: 3 }]));
      assert.equal(claimed.claimed.length, backend.name === 'postgres' ? 3 : 6);
      assert.deepEqual(claimed.contended, []);
      // Without a cap: the upTo, on either.
      assert.equal((await service.flush(claimOnly([{ orgId: 'acme', upTo: 1 }]))).claimed.length, 1);
      // A failing webhook: one at a time on a shared database (SQLite leaves it to its one dispatcher, which asks for upTo 1).
      await store.transaction((tx) => tx.webhooks.setStatus('globex', 'failing', null, T0));
      await queue(
        store,
        Array.from({ length: 5 }, (_, i) => ({ id: `evt_g${i}`, request: `ar_g${i}`, org: 'globex' })),
        T0,
      );
      assert.equal((await service.flush(claimOnly([{ orgId: 'globex', upTo: 4, cap: 4 }]))).claimed.length, backend.name === 'postgres' ? 1 : 4);
    });

    test('lease, release, settle, insertAttempts and attempts (in order; U+0000 as each backend stores it; the request as sent round-trips)', async (t) => {
      const { store, column } = await backend.open(t);
      await seedOrgs(store);
      const [d, other] = await queue(
        store,
        [
          { id: 'evt_1', request: 'ar_1' },
          { id: 'evt_2', request: 'ar_2' },
        ],
        1000,
      );
      assert.ok(d && other);
      await store.transaction((tx) => tx.deliveries.lease([d.id], 9000, 2000));
      assert.deepEqual(await column(`SELECT lease_expires_at FROM deliveries WHERE id = ${d.id}`), [9000]);
      assert.deepEqual((await getRow(store, 'acme', d.id))?.updatedAt, 2000);
      assert.deepEqual(await dueIds(store, 'acme', 3000), [other.id]);
      // Given back without counting an attempt.
      await store.transaction((tx) => tx.deliveries.release([d.id], 3000));
      assert.deepEqual(await column(`SELECT lease_expires_at FROM deliveries WHERE id = ${d.id}`), [null]);
      const released = await getRow(store, 'acme', d.id);
      assert.deepEqual([released?.status, released?.attempts, released?.nextAttemptAt, released?.lastAttemptAt, released?.updatedAt], ['pending', 0, 1000, null, 3000]);
      assert.deepEqual(await dueIds(store, 'acme', 3000), [d.id, other.id]);
      await store.transaction(async (tx) => {
        await tx.deliveries.lease([], 1, 1);
        await tx.deliveries.release([], 1);
        await tx.deliveries.insertAttempts([]);
      });

      // The first attempt fails (its body and its error hold U+0000), a retry is set. It sent a
      // request signed with two secrets; the second sent nothing (its name did not resolve).
      const body = 'bad\u0000gateway';
      const base = { deliveryId: d.id, url: hookUrl('acme') };
      const signature = 'v1,K5oZfzN95Z9UVu1EsfQmfVNQhnkZ2pj9o9NDN/H/pI4= v1,3vtZJ0Qj8d2AhJ4u8uaoR1eWmc0e3bcE9nQ4sOvPx2A=';
      const attempts: AttemptToStore[] = [
        { ...base, attempt: 1, startedAt: 4000, durationMs: 120, statusCode: 502, errorClass: 'http_status', errorDetail: 'HTTP 502 \u0000', responseBody: body, outcome: 'retry', sentTimestamp: 4_102_444_800, sentSignature: signature },
        { ...base, attempt: 2, startedAt: 6000, durationMs: 30, statusCode: null, errorClass: 'dns_error', errorDetail: 'no answer', responseBody: null, outcome: 'retry', sentTimestamp: null, sentSignature: null },
      ];
      await store.transaction(async (tx) => {
        await tx.deliveries.lease([d.id], 9000, 4000);
        await tx.deliveries.insertAttempts(attempts);
        assert.equal(await tx.deliveries.settle(d.id, failedAt(4100, 20_000, 1, 502, 'HTTP 502 \u0000')), true);
      });
      const nul = backend.name === 'postgres' ? '\uFFFD' : '\u0000';
      const failed = await getRow(store, 'acme', d.id);
      assert.deepEqual(
        [failed?.status, failed?.attempts, failed?.nextAttemptAt, failed?.lastAttemptAt, failed?.lastStatusCode, failed?.lastError, failed?.updatedAt],
        ['pending', 1, 20_000, 4100, 502, `HTTP 502 ${nul}`, 4100],
      );
      assert.deepEqual(await column(`SELECT lease_expires_at FROM deliveries WHERE id = ${d.id}`), [null], 'settle ends the lease');
      const stored = await store.read((tx) => tx.deliveries.attempts(d.id));
      assert.deepEqual(
        stored.map(({ id: _, ...a }) => a),
        [
          { attempt: 1, startedAt: 4000, durationMs: 120, url: hookUrl('acme'), statusCode: 502, errorClass: 'http_status', errorDetail: `HTTP 502 ${nul}`, responseBody: `bad${nul}gateway`, outcome: 'retry', sentTimestamp: 4_102_444_800, sentSignature: signature },
          { attempt: 2, startedAt: 6000, durationMs: 30, url: hookUrl('acme'), statusCode: null, errorClass: 'dns_error', errorDetail: 'no answer', responseBody: null, outcome: 'retry', sentTimestamp: null, sentSignature: null },
        ],
      );
      assert.ok(stored[0]!.id < stored[1]!.id);
      assert.deepEqual(await store.read((tx) => tx.deliveries.attempts(other.id)), []);

      // settleMany: several at once, none superseded here; none: nothing.
      await store.transaction(async (tx) => {
        await tx.deliveries.lease([other.id], 9000, 7000);
        assert.deepEqual(await tx.deliveries.settleMany([]), []);
        assert.deepEqual(await tx.deliveries.settleMany([{ id: other.id, settlement: deadAt(7100, 1, 410, 'HTTP 410') }]), []);
      });
      const gone = await getRow(store, 'acme', other.id);
      assert.deepEqual([gone?.status, gone?.attempts, gone?.lastStatusCode, gone?.lastError, gone?.updatedAt], ['dead', 1, 410, 'HTTP 410', 7100]);

      // Delivered at last.
      await store.transaction(async (tx) => {
        await tx.deliveries.lease([d.id], 30_000, 20_000);
        await tx.deliveries.insertAttempts([{ ...base, attempt: 3, startedAt: 20_000, durationMs: 5, statusCode: 204, errorClass: null, errorDetail: null, responseBody: '', outcome: 'delivered', sentTimestamp: 20, sentSignature: null }]);
        assert.equal(await tx.deliveries.settle(d.id, deliveredAt(20_010, 3)), true);
      });
      const done = await getRow(store, 'acme', d.id);
      assert.deepEqual([done?.status, done?.attempts, done?.lastStatusCode, done?.lastError, done?.lastAttemptAt], ['delivered', 3, 200, null, 20_010]);
      assert.deepEqual(
        (await store.read((tx) => tx.deliveries.attempts(d.id))).map((a) => [a.attempt, a.outcome, a.responseBody, a.sentTimestamp, a.sentSignature]),
        [
          [1, 'retry', `bad${nul}gateway`, 4_102_444_800, signature],
          [2, 'retry', null, null, null],
          [3, 'delivered', '', 20, null],
        ],
      );
      assert.deepEqual(await dueIds(store, 'acme', 30_000), []);
    });

    test('markUnsendable: a pending delivery becomes dead with the reason; another is left alone', async (t) => {
      const { store, column } = await backend.open(t);
      await seedOrgs(store);
      const [a, b, c] = await queue(
        store,
        [
          { id: 'evt_1', request: 'ar_1' },
          { id: 'evt_2', request: 'ar_2' },
          { id: 'evt_3', request: 'ar_3' },
        ],
        1000,
      );
      assert.ok(a && b && c);
      await store.transaction((tx) => tx.deliveries.lease([a.id], 9000, 1500));
      await finish(store, c.id, deliveredAt(1600));
      await store.transaction(async (tx) => {
        await tx.deliveries.markUnsendable(a.id, 'cannot build \u0000 body', 2000);
        await tx.deliveries.markUnsendable(c.id, 'too late', 2000);
      });
      const nul = backend.name === 'postgres' ? '\uFFFD' : '\u0000';
      const dead = await getRow(store, 'acme', a.id);
      assert.deepEqual([dead?.status, dead?.attempts, dead?.lastError, dead?.updatedAt, dead?.lastAttemptAt], ['dead', 0, `cannot build ${nul} body`, 2000, null]);
      assert.deepEqual(await column(`SELECT lease_expires_at FROM deliveries WHERE id = ${a.id}`), [null]);
      const kept = await getRow(store, 'acme', c.id);
      assert.deepEqual([kept?.status, kept?.lastError, kept?.updatedAt], ['delivered', null, 1600], 'only a pending delivery is marked');
      assert.deepEqual(await dueIds(store, 'acme', 3000), [b.id]);
      assert.deepEqual(ids(await store.read((tx) => tx.deliveries.list('acme', { status: 'dead', limit: 10 }))), [a.id]);
    });

    test('nextRetryAt, retryFailedNow and recoverable', async (t) => {
      const { store } = await backend.open(t);
      await seedOrgs(store);
      const [d1, d2, d3, d4, d5] = await queue(
        store,
        [1, 2, 3, 4, 6].map((i) => ({ id: `evt_${i}`, request: `ar_${i}` })),
        1000,
      );
      assert.ok(d1 && d2 && d3 && d4 && d5);
      // An event with no delivery at all (its organization had no webhook then), and one of another organization.
      const [s5, sg] = await store.transaction((tx) =>
        storeEvents(
          tx,
          [
            { id: 'evt_5', request: 'ar_5' },
            { id: 'evt_g', request: 'ar_g', org: 'globex' },
          ],
          1000,
        ),
      );
      assert.ok(s5 !== undefined && sg !== undefined);
      await finish(store, d1.id, deliveredAt(2000));
      await finish(store, d2.id, deadAt(2000));
      await finish(store, d3.id, failedAt(2000, 50_000));
      await finish(store, d5.id, failedAt(2000, 40_000));
      // d4 stays fresh.

      assert.equal(await store.read((tx) => tx.deliveries.nextRetryAt('acme', 5000)), 40_000);
      assert.equal(await store.read((tx) => tx.deliveries.nextRetryAt('acme', 40_000)), 50_000, 'only a retry after now');
      assert.equal(await store.read((tx) => tx.deliveries.nextRetryAt('acme', 50_000)), null);
      assert.equal(await store.read((tx) => tx.deliveries.nextRetryAt('globex', 0)), null);
      // A leased retry is not waited for (its lease ends with an outcome).
      await store.transaction((tx) => tx.deliveries.lease([d5.id], 99_000, 5000));
      assert.equal(await store.read((tx) => tx.deliveries.nextRetryAt('acme', 5000)), 50_000);
      await store.transaction((tx) => tx.deliveries.release([d5.id], 5000));

      const type = EVENT_TYPE;
      const all = [d1.seq, d2.seq, d3.seq, d4.seq, d5.seq, s5, sg];
      const to = Math.max(...all) + 1;
      const from = Math.min(...all);
      assert.deepEqual(await store.read((tx) => tx.deliveries.recoverable('acme', from, to)), [
        { eventSeq: d2.seq, eventId: 'evt_2', orgId: 'acme', anticipationRequestId: 'ar_2', type },
        { eventSeq: s5, eventId: 'evt_5', orgId: 'acme', anticipationRequestId: 'ar_5', type },
      ]);
      assert.deepEqual(await store.read((tx) => tx.deliveries.recoverable('acme', from, d2.seq)), [], 'the range ends before `to`');
      assert.deepEqual(await store.read((tx) => tx.deliveries.recoverable('globex', from, to)), [{ eventSeq: sg, eventId: 'evt_g', orgId: 'globex', anticipationRequestId: 'ar_g', type }]);
      // A test notification's type is its own.
      const testSeq = await store.transaction((tx) => tx.deliveries.insertTestEvent('evt_test_1', 'acme', '{"type":"webhook.test","data":{}}', 3000));
      assert.deepEqual(await store.read((tx) => tx.deliveries.recoverable('acme', testSeq, testSeq + 1)), [
        { eventSeq: testSeq, eventId: 'evt_test_1', orgId: 'acme', anticipationRequestId: '', type: 'webhook.test' },
      ]);

      // Failed deliveries in the range are made due now; fresh, delivered and dead ones are not touched.
      assert.equal(await store.transaction((tx) => tx.deliveries.retryFailedNow('acme', from, d3.seq, 9000)), 0);
      assert.equal(await store.transaction((tx) => tx.deliveries.retryFailedNow('globex', from, to, 9000)), 0);
      assert.equal(await store.transaction((tx) => tx.deliveries.retryFailedNow('acme', from, to, 9000)), 2);
      for (const d of [d3, d5]) {
        const row = await getRow(store, 'acme', d.id);
        assert.deepEqual([row?.nextAttemptAt, row?.updatedAt, row?.attempts], [9000, 9000, 1]);
      }
      assert.deepEqual([(await getRow(store, 'acme', d4.id))?.updatedAt, (await getRow(store, 'acme', d1.id))?.updatedAt], [1000, 2000]);
      assert.equal(await store.read((tx) => tx.deliveries.nextRetryAt('acme', 5000)), 9000);
      assert.deepEqual(await dueIds(store, 'acme', 9000), [d4.id, d3.id, d5.id]);
    });

    test('countPendingChunk, oldestDueAt and recentFailure', async (t) => {
      const { store } = await backend.open(t);
      await seedOrgs(store);
      const fresh: Queued[] = [];
      for (const at of [1000, 2000, 3000, 4000, 5000]) fresh.push(...(await queue(store, [{ id: `evt_f${at}`, request: `ar_f${at}` }], at)));
      const [leased, failed1, failed2, deadOld, deadNew, done] = await queue(
        store,
        ['l', 'x1', 'x2', 'dead1', 'dead2', 'ok'].map((id) => ({ id: `evt_${id}`, request: `ar_${id}` })),
        6000,
      );
      assert.ok(leased && failed1 && failed2 && deadOld && deadNew && done);
      await store.transaction((tx) => tx.deliveries.lease([leased.id], 90_000, 6000));
      await finish(store, failed1.id, failedAt(7000, 80_000, 1, 503, 'HTTP 503'));
      await finish(store, failed2.id, failedAt(6500, 70_000, 2, null, 'connection refused'));
      await finish(store, deadOld.id, deadAt(9000, 3, null, 'timeout'));
      await finish(store, deadNew.id, deadAt(8000, 1, 400, 'HTTP 400'));
      await finish(store, done.id, deliveredAt(9500));
      const chunk = (kind: 'fresh' | 'tried', after: number, limit: number, orgId = 'acme') => store.read((tx) => tx.deliveries.countPendingChunk(orgId, kind, after, limit));

      const f = fresh.map((x) => x.id);
      assert.deepEqual(await chunk('fresh', 0, 100), { n: 5, last: f[4] });
      assert.deepEqual(await chunk('fresh', 0, 2), { n: 2, last: f[1] });
      assert.deepEqual(await chunk('fresh', f[1]!, 2), { n: 2, last: f[3] });
      assert.deepEqual(await chunk('fresh', f[3]!, 2), { n: 1, last: f[4] });
      assert.deepEqual(await chunk('fresh', f[4]!, 2), { n: 0, last: f[4] });
      assert.deepEqual(await chunk('tried', 0, 100), { n: 3, last: failed2.id }, 'leased and failed, not delivered or dead');
      assert.deepEqual(await chunk('tried', leased.id, 1), { n: 1, last: failed1.id });
      assert.deepEqual(await chunk('fresh', 7, 100, 'globex'), { n: 0, last: 7 });

      // The oldest fresh delivery (queued at 1000) unless a retry fell due before it.
      assert.equal(await store.read((tx) => tx.deliveries.oldestDueAt('acme', 10_000)), 1000);
      assert.equal(await store.read((tx) => tx.deliveries.oldestDueAt('globex', 10_000)), null);
      await finish(store, fresh[0]!.id, failedAt(10_000, 500));
      assert.equal(await store.read((tx) => tx.deliveries.oldestDueAt('acme', 10_000)), 500);
      assert.equal(await store.read((tx) => tx.deliveries.oldestDueAt('acme', 499)), 2000, 'a retry not due yet does not count');
      for (const x of fresh) await finish(store, x.id, deliveredAt(10_000, 2));
      assert.equal(await store.read((tx) => tx.deliveries.oldestDueAt('acme', 60_000)), null, 'a standing lease and retries not due yet');
      assert.equal(await store.read((tx) => tx.deliveries.oldestDueAt('acme', 70_000)), 70_000);
      // A lapsed lease is due since the delivery's time (its queue time, 6000).
      assert.equal(await store.read((tx) => tx.deliveries.oldestDueAt('acme', 90_000)), 6000);

      // The latest failure: dead at 9000 (the older dead delivery) beats dead at 8000 and failed at 7000...
      assert.deepEqual(await store.read((tx) => tx.deliveries.recentFailure('acme')), { at: 9000, statusCode: null, error: 'timeout' });
      // ...unless the window of newest deliveries per status leaves it out.
      assert.deepEqual(await store.read((tx) => tx.deliveries.recentFailure('acme', 1)), { at: 8000, statusCode: 400, error: 'HTTP 400' });
      assert.equal(await store.read((tx) => tx.deliveries.recentFailure('globex')), null);
    });

    test('insertTestEvent: returns its seq, under the source "api"; twice, and in two transactions', async (t) => {
      const { store, column } = await backend.open(t);
      await seedOrgs(store);
      const payload = (n: number) => JSON.stringify({ type: 'webhook.test', timestamp: '2026-01-01T00:00:00.000Z', data: { n } });
      const [s1, s2] = await store.transaction(async (tx) => [
        await tx.deliveries.insertTestEvent('evt_test_1', 'acme', payload(1), 1000),
        await tx.deliveries.insertTestEvent('evt_test_2', 'acme', payload(2), 1001),
      ]);
      const s3 = await store.transaction((tx) => tx.deliveries.insertTestEvent('evt_test_3', 'globex', payload(3), 1002));
      assert.ok(s1! > 0 && s2! > s1! && s3 > s2!);
      const stored = await store.read((tx) => tx.feed.storedEvents(['evt_test_1', 'evt_test_3']));
      assert.deepEqual(stored.get('evt_test_1'), { id: 'evt_test_1', orgId: 'acme', anticipationRequestId: '', occurredAt: 1000, payload: payload(1) });
      assert.equal(stored.get('evt_test_3')?.orgId, 'globex');
      const api = await store.transaction((tx) => tx.feed.sourceId('api'));
      assert.deepEqual(await column(`SELECT source_id FROM events WHERE id LIKE 'evt_test_%' ORDER BY seq`), [api, api, api]);
      assert.deepEqual(await column(`SELECT received_at FROM events WHERE id LIKE 'evt_test_%' ORDER BY seq`), [1000, 1001, 1002]);
      // Queued and listed as a test notification.
      const id = await store.transaction((tx) => tx.deliveries.insert(s1!, 'acme', 42, 1000));
      const row = await getRow(store, 'acme', id);
      assert.deepEqual([row?.eventId, row?.eventType, row?.anticipationRequestId], ['evt_test_1', 'webhook.test', '']);
      const due = (await store.read((tx) => tx.deliveries.dueRows('acme', 2000, 1))).map(dueDeliveryOf);
      assert.equal(due[0]?.payload, payload(1), 'a whole stored body is sent as stored');
      // An id is stored once.
      await assert.rejects(store.transaction((tx) => tx.deliveries.insertTestEvent('evt_test_1', 'acme', payload(9), 1003)));
    });

    test('the delivery service: a claim, then a delivered attempt and a failed one recorded', async (t) => {
      const { store, clock } = await backend.open(t);
      await seedOrgs(store);
      const [d1, d2, d3] = await queue(
        store,
        [
          { id: 'evt_1', request: 'ar_k' },
          { id: 'evt_2', request: 'ar_k' },
          { id: 'evt_3', request: 'ar_l' },
        ],
        T0,
      );
      assert.ok(d1 && d2 && d3);
      const service = createOutboxService(store, silentLog, serviceOptions);
      clock.at = T0 + 1000;
      const first = await service.flush(claimOnly([{ orgId: 'acme', upTo: 5 }], 30_000));
      assert.deepEqual(
        first.claimed.map((d) => [d.id, d.orderingKey, d.attempts, d.eventId, d.url, d.secrets, d.holdsBack, d.unsendable]),
        [
          [d1.id, d1.key, 0, 'evt_1', hookUrl('acme'), ['whsec_acme'], true, null],
          [d3.id, d3.key, 0, 'evt_3', hookUrl('acme'), ['whsec_acme'], false, null],
        ],
      );
      assert.deepEqual({ ...first, claimed: [] }, { claimed: [], drained: [{ orgId: 'acme', nextRetryAt: null }], unsendable: [], contended: [], superseded: [], rateLimited: [], outOfOrder: [] });
      assert.deepEqual(await store.read((tx) => tx.deliveries.countPendingChunk('acme', 'tried', 0, 10)), { n: 2, last: d3.id });

      // d1 delivered, d3 failed (retry in a minute); d1's request goes on with d2 in the same commit.
      clock.at = T0 + 2000;
      const retryAt = T0 + 62_000;
      const second = await service.flush({
        finished: [delivered(first.claimed[0]!, T0 + 1100), retried(first.claimed[1]!, T0 + 1200, retryAt)],
        released: [],
        claim: { wanted: [{ orgId: 'acme', upTo: 5 }], leaseMs: 30_000 },
      });
      assert.deepEqual(ids(second.claimed), [d2.id]);
      assert.deepEqual(second.drained, [{ orgId: 'acme', nextRetryAt: retryAt }]);
      assert.deepEqual(second.superseded, []);
      const one = await getRow(store, 'acme', d1.id);
      assert.deepEqual([one?.status, one?.attempts, one?.lastStatusCode, one?.lastError, one?.lastAttemptAt], ['delivered', 1, 200, null, T0 + 2000]);
      assert.deepEqual(
        (await store.read((tx) => tx.deliveries.attempts(d1.id))).map(({ id: _, ...a }) => a),
        [{ attempt: 1, startedAt: T0 + 1100, durationMs: 7, url: hookUrl('acme'), statusCode: 200, errorClass: null, errorDetail: null, responseBody: 'ok', outcome: 'delivered', sentTimestamp: 1_767_225_600, sentSignature: 'v1,c2lnbmVkIGF0IDE3NjcyMjU2MDA= v1,b2xkZXIgc2VjcmV0' }],
      );
      const three = await getRow(store, 'acme', d3.id);
      assert.deepEqual([three?.status, three?.attempts, three?.nextAttemptAt, three?.lastStatusCode, three?.lastError], ['pending', 1, retryAt, 500, 'HTTP 500']);
      assert.deepEqual(ids(await createDeliveryLogService(store, { userAgent: 'test' }, testAudit(store)).list('acme', { status: 'failed', limit: 10 })), [d3.id]);
      const health = await store.read((tx) => tx.webhooks.health('acme'));
      assert.deepEqual([health?.consecutiveFailures, health?.lastSuccessAt], [1, T0 + 2000]);

      // The claimed d2 given back: due again, no attempt counted; d3 comes back at its time.
      clock.at = T0 + 3000;
      const third = await service.flush({ finished: [], released: second.claimed, claim: { wanted: [{ orgId: 'acme', upTo: 5 }], leaseMs: 30_000 } });
      assert.deepEqual(ids(third.claimed), [d2.id]);
      assert.equal((await getRow(store, 'acme', d2.id))?.attempts, 0);
      clock.at = retryAt;
      const fourth = await service.flush({ finished: [delivered(third.claimed[0]!, T0 + 3100)], released: [], claim: { wanted: [{ orgId: 'acme', upTo: 5 }], leaseMs: 30_000 } });
      assert.deepEqual(
        fourth.claimed.map((d) => [d.id, d.attempts, d.holdsBack]),
        [[d3.id, 1, true]],
      );
    });
  });
}

describe('PostgreSQL deliveries: several instances on one database', () => {
  /**
   * Two instances (host-a, host-b) on a fresh database, on one clock the test moves, with acme
   * and globex seeded. `holdOpen` runs a function in a transaction of a store and keeps the
   * transaction open until `end()` is called (`ready` resolves with the function's value, the
   * transaction still open). When the test ends, whatever it left open is ended first (a
   * failed assertion must not leave a pool waiting for ever), then every store is closed.
   */
  const open = async (t: TestContext, poolSize = 4) => {
    const held: Array<{ end: () => void; done: Promise<void> }> = [];
    const closers: Array<() => Promise<void>> = [];
    t.after(async () => {
      for (const h of held) h.end();
      await Promise.allSettled(held.map((h) => h.done));
      for (const close of closers.reverse()) await close();
    });
    const url = await (await pgServer()).createDatabase();
    const clock = testClock(T0);
    const instance = async (name: string, at = url, on: TestClock = clock) => {
      const store = await openPgStore(at, on, { instance: name, poolSize });
      closers.push(() => store.close());
      return store;
    };
    const a = await instance('host-a');
    const b = await instance('host-b');
    const pool = createPgPool(url, { max: 1 });
    closers.push(() => pool.end());
    await seedOrgs(a);
    const column = async (sql: string) => (await pool.query<Record<string, unknown>>(sql)).rows.map((r) => Object.values(r)[0]);
    const holdOpen = <T>(store: Store, fn: (tx: Tx) => Promise<T>) => {
      let end!: () => void;
      const ended = new Promise<void>((resolve) => (end = resolve));
      let readyWith!: (value: T) => void;
      let failWith!: (err: unknown) => void;
      const ready = new Promise<T>((resolve, reject) => {
        readyWith = resolve;
        failWith = reject;
      });
      const done = store.transaction(async (tx) => {
        let value: T;
        try {
          value = await fn(tx);
        } catch (err) {
          failWith(err);
          throw err;
        }
        readyWith(value);
        await ended;
      });
      held.push({ end, done: done.catch(() => undefined) });
      return { ready, end, done };
    };
    return { url, clock, a, b, column, instance, holdOpen };
  };

  /** A case of several instances: it fails rather than hangs when a lock is never given back. */
  const multi = { timeout: 60_000 };

  test('claimTurn: one transaction at a time per webhook, whichever instance; the other webhooks stay free', multi, async (t) => {
    const { a, b, holdOpen } = await open(t);
    const now = T0;
    const free = { leasedElsewhere: 0, failing: false, shared: true };
    const held = holdOpen(a, (tx) => claimTurn(tx, 'acme', now));
    assert.deepEqual(await held.ready, free);
    assert.equal(await b.transaction((tx) => claimTurn(tx, 'acme', now)), null, "another instance's turn");
    assert.equal(await a.transaction((tx) => claimTurn(tx, 'acme', now)), null, 'another transaction of the same instance');
    assert.deepEqual(await b.transaction((tx) => claimTurn(tx, 'globex', now)), free);
    assert.deepEqual(await b.transaction((tx) => tx.deliveries.claimTurns(['acme', 'globex'], now)), new Map([['globex', free]]), 'the held one is left out');
    // An organization without a webhook is not held by anyone: it gets its turn (and has nothing due).
    assert.deepEqual(await b.transaction((tx) => tx.deliveries.claimTurns(['acme', 'no-webhook'], now)), new Map([['no-webhook', free]]));
    // The delivery service skips the webhook for this commit, and says so.
    const service = createOutboxService(b, silentLog, serviceOptions);
    await queue(a, [{ id: 'evt_1', request: 'ar_1' }], now);
    const contended = await service.flush(claimOnly([{ orgId: 'acme', upTo: 3 }]));
    assert.deepEqual(contended, { claimed: [], drained: [], unsendable: [], contended: ['acme'], superseded: [], rateLimited: [], outOfOrder: [] });
    held.end();
    await held.done;
    assert.deepEqual(await b.transaction((tx) => claimTurn(tx, 'acme', now)), free);

    // A transaction recording the webhook's attempts holds the turn too (its row is locked).
    const recording = holdOpen(a, (tx) => tx.webhooks.recordFailure('acme', now, 5, 60_000));
    await recording.ready;
    assert.equal(await b.transaction((tx) => claimTurn(tx, 'acme', now)), null);
    recording.end();
    await recording.done;
    const locked = holdOpen(a, (tx) => tx.webhooks.lockInOrder(['globex', 'acme']));
    await locked.ready;
    assert.equal(await b.transaction((tx) => claimTurn(tx, 'acme', now)), null);
    assert.equal(await b.transaction((tx) => claimTurn(tx, 'globex', now)), null);
    locked.end();
    await locked.done;
    assert.equal((await service.flush(claimOnly([{ orgId: 'acme', upTo: 3 }]))).claimed.length, 1);
  });

  test('rate limit: one window for all instances, in the server clock; what is over it stays pending and unleased', multi, async (t) => {
    const { a, b, column } = await open(t);
    await a.transaction((tx) => tx.webhooks.upsert('acme', 'https://hooks.example/acme', false, null, T0, { rateLimit: 3 }));
    await queue(a, Array.from({ length: 8 }, (_, i) => ({ id: `evt_${i}`, request: `ar_${i}` })), T0);
    const sa = createOutboxService(a, silentLog, serviceOptions);
    const sb = createOutboxService(b, silentLog, serviceOptions);
    // Neither instance flags the webhook as limited: PostgreSQL reads the limit with the row anyway.
    const first = await sa.flush(claimOnly([{ orgId: 'acme', upTo: 2, cap: 2 }]));
    assert.equal(first.claimed.length, 2);
    assert.deepEqual(first.rateLimited, []);
    const second = await sb.flush(claimOnly([{ orgId: 'acme', upTo: 4, cap: 4 }]));
    assert.equal(second.claimed.length, 1, "host-b gets what host-a left of the limit");
    assert.equal(second.rateLimited.length, 1);
    assert.ok(second.rateLimited[0]!.waitMs > 0 && second.rateLimited[0]!.waitMs <= 1_100, JSON.stringify(second.rateLimited));
    const third = await sa.flush(claimOnly([{ orgId: 'acme', upTo: 4, cap: 4 }]));
    assert.deepEqual([third.claimed.length, third.rateLimited.map((r) => r.orgId)], [0, ['acme']]);
    // Over the limit: not leased, not attempted.
    assert.deepEqual(await column("SELECT count(*)::int FROM deliveries WHERE org_id = 'acme' AND lease_expires_at IS NOT NULL"), [3]);
    assert.deepEqual(await column("SELECT count(*)::int FROM deliveries WHERE org_id = 'acme' AND attempts = 0 AND lease_expires_at IS NULL"), [5]);
    // The window is kept in the server's clock: three starts, within the last second of it.
    const [window] = await column("SELECT rate_window FROM webhooks WHERE org_id = 'acme'");
    const entries = (window as string[]).map(Number);
    assert.equal(entries.filter((_, i) => i % 2 === 1).reduce((x, y) => x + y, 0), 3);
    assert.ok(Math.abs(entries[0]! - Date.now()) < 60_000, 'the window is not in the server clock');
    // Once the window has passed, the next ones go.
    await new Promise((r) => setTimeout(r, 1_150));
    assert.equal((await sb.flush(claimOnly([{ orgId: 'acme', upTo: 8, cap: 8 }]))).claimed.length, 3);
    // A webhook without a limit: no rate state read or written.
    assert.deepEqual(await column("SELECT rate_window FROM webhooks WHERE org_id = 'globex'"), [null]);
  });

  test('claimTurn: leasedElsewhere counts the unexpired leases of other instances only; failing follows the stored status', multi, async (t) => {
    const { a, b, instance } = await open(t);
    const q = await queue(
      a,
      [1, 2, 3, 4, 5].map((i) => ({ id: `evt_${i}`, request: `ar_${i}` })),
      T0,
    );
    const [g] = await queue(a, [{ id: 'evt_g', request: 'ar_g', org: 'globex' }], T0);
    const [d1, d2, d3, d4] = q.map((x) => x.id) as [number, number, number, number];
    await a.transaction(async (tx) => {
      await tx.deliveries.lease([d1, d2], 10_000, 1000);
      await tx.deliveries.lease([d3], 2000, 1000); // lapses at 2000
      await tx.deliveries.lease([g!.id], 10_000, 1000); // another organization
    });
    await b.transaction((tx) => tx.deliveries.lease([d4], 10_000, 1000));
    const turn = (store: PgStore, now: number, orgId = 'acme') => store.transaction((tx) => claimTurn(tx, orgId, now));
    assert.deepEqual(await turn(b, 1500), { leasedElsewhere: 3, failing: false, shared: true }, "a's d1, d2, d3");
    assert.deepEqual(await turn(b, 5000), { leasedElsewhere: 2, failing: false, shared: true }, "d3's lease lapsed; d4 is b's own");
    assert.deepEqual(await turn(a, 5000), { leasedElsewhere: 1, failing: false, shared: true }, "b's d4");
    assert.deepEqual(await turn(b, 5000, 'globex'), { leasedElsewhere: 1, failing: false, shared: true });
    assert.deepEqual(await turn(b, 10_000), { leasedElsewhere: 0, failing: false, shared: true }, 'a lease until 10 000 has lapsed at 10 000');
    const c = await instance('host-c');
    assert.deepEqual(await turn(c, 5000), { leasedElsewhere: 3, failing: false, shared: true }, "a's two and b's one");
    // Settled and released deliveries hold no lease.
    await a.transaction(async (tx) => assert.equal(await tx.deliveries.settle(d1, deliveredAt(5000)), true));
    await b.transaction((tx) => tx.deliveries.release([d4], 5000));
    assert.deepEqual(await turn(c, 5000), { leasedElsewhere: 1, failing: false, shared: true });
    await a.transaction((tx) => tx.webhooks.setStatus('acme', 'failing', null, 5000));
    assert.deepEqual(await turn(b, 5000), { leasedElsewhere: 1, failing: true, shared: true });
    await a.transaction((tx) => tx.webhooks.setStatus('acme', 'disabled', 'operator', 5000));
    assert.deepEqual(await turn(b, 5000), { leasedElsewhere: 1, failing: false, shared: true });
  });

  test('fencing: an instance whose lease lapsed and was taken over neither settles nor releases the delivery', multi, async (t) => {
    const { a, b, column } = await open(t);
    const [d, e] = await queue(
      a,
      [
        { id: 'evt_1', request: 'ar_1' },
        { id: 'evt_2', request: 'ar_2' },
      ],
      1000,
    );
    assert.ok(d && e);
    await a.transaction((tx) => tx.deliveries.lease([d.id], 2000, 1000));
    assert.deepEqual(await dueIds(b, 'acme', 1999), [e.id]);
    assert.deepEqual(await dueIds(b, 'acme', 3000), [d.id, e.id], 'the lapsed lease is due again');
    await b.transaction((tx) => tx.deliveries.lease([d.id], 9000, 3000));
    const state = () => column(`SELECT status || ' ' || attempts || ' ' || lease_expires_at || ' ' || leased_by FROM deliveries WHERE id = ${d.id}`);
    assert.deepEqual(await state(), ['pending 0 9000 host-b']);

    // a's attempt ends late: its outcome is not applied, its release does nothing.
    assert.equal(await a.transaction((tx) => tx.deliveries.settle(d.id, deliveredAt(3500))), false);
    assert.deepEqual(await state(), ['pending 0 9000 host-b']);
    await a.transaction((tx) => tx.deliveries.release([d.id], 3600));
    assert.deepEqual(await state(), ['pending 0 9000 host-b']);
    assert.deepEqual(await dueIds(a, 'acme', 4000), [e.id]);
    // settleMany applies what a still holds and returns what it does not.
    await a.transaction((tx) => tx.deliveries.lease([e.id], 9000, 3600));
    assert.deepEqual(
      await a.transaction((tx) =>
        tx.deliveries.settleMany([
          { id: d.id, settlement: deliveredAt(3700) },
          { id: e.id, settlement: failedAt(3700, 3800, 1, 503, 'HTTP 503') },
        ]),
      ),
      [d.id],
    );
    assert.deepEqual(await state(), ['pending 0 9000 host-b']);
    assert.deepEqual([(await getRow(a, 'acme', e.id))?.attempts, (await getRow(a, 'acme', e.id))?.lastStatusCode], [1, 503]);
    // b's outcome is.
    assert.equal(await b.transaction((tx) => tx.deliveries.settle(d.id, failedAt(4000, 20_000, 1, 500, 'HTTP 500'))), true);
    const row = await getRow(b, 'acme', d.id);
    assert.deepEqual([row?.status, row?.attempts, row?.nextAttemptAt, row?.lastError], ['pending', 1, 20_000, 'HTTP 500']);
    // b's release of its own lease works.
    await b.transaction((tx) => tx.deliveries.lease([e.id], 9000, 4000));
    await a.transaction((tx) => tx.deliveries.release([e.id], 4100));
    assert.deepEqual(await dueIds(a, 'acme', 4200), []);
    await b.transaction((tx) => tx.deliveries.release([e.id], 4200));
    assert.deepEqual(await dueIds(a, 'acme', 4300), [e.id]);
  });

  test('fencing through the delivery service: the late outcome is logged as an attempt and reported superseded', multi, async (t) => {
    const { clock, a, b } = await open(t);
    const [d] = await queue(a, [{ id: 'evt_1', request: 'ar_1' }], T0);
    const serviceA = createOutboxService(a, silentLog, serviceOptions);
    const serviceB = createOutboxService(b, silentLog, serviceOptions);
    clock.at = T0 + 10;
    const byA = await serviceA.flush(claimOnly([{ orgId: 'acme', upTo: 1 }], 1000));
    assert.deepEqual(ids(byA.claimed), [d!.id]);
    assert.deepEqual((await serviceB.flush(claimOnly([{ orgId: 'acme', upTo: 1 }], 1000))).claimed, [], 'a holds it');
    clock.at = T0 + 2000; // a's lease lapsed
    const byB = await serviceB.flush(claimOnly([{ orgId: 'acme', upTo: 1 }], 30_000));
    assert.deepEqual(ids(byB.claimed), [d!.id]);
    const late = await serviceA.flush({ finished: [delivered(byA.claimed[0]!, T0 + 20)], released: [], claim: null });
    assert.deepEqual(late.superseded, [{ id: d!.id, orgId: 'acme' }]);
    assert.equal((await getRow(a, 'acme', d!.id))?.status, 'pending');
    clock.at = T0 + 3000;
    const onTime = await serviceB.flush({ finished: [retried(byB.claimed[0]!, T0 + 2010, T0 + 60_000)], released: [], claim: null });
    assert.deepEqual(onTime.superseded, []);
    const row = await getRow(a, 'acme', d!.id);
    assert.deepEqual([row?.status, row?.attempts, row?.nextAttemptAt, row?.lastStatusCode], ['pending', 1, T0 + 60_000, 500]);
    assert.deepEqual(
      (await a.read((tx) => tx.deliveries.attempts(d!.id))).map((x) => [x.attempt, x.outcome, x.statusCode]),
      [
        [1, 'delivered', 200],
        [1, 'retry', 500],
      ],
    );
  });

  test('per-request order across instances: a change leased or failing on one instance holds the next one back on the other', multi, async (t) => {
    const { clock, a, b } = await open(t);
    const [d1, d2, d3] = await queue(
      a,
      [
        { id: 'evt_1', request: 'ar_k' },
        { id: 'evt_2', request: 'ar_k' },
        { id: 'evt_3', request: 'ar_l' },
      ],
      T0,
    );
    assert.ok(d1 && d2 && d3);
    const serviceA = createOutboxService(a, silentLog, serviceOptions);
    const serviceB = createOutboxService(b, silentLog, serviceOptions);
    clock.at = T0 + 10;
    const claimA = await serviceA.flush(claimOnly([{ orgId: 'acme', upTo: 1 }]));
    assert.deepEqual(ids(claimA.claimed), [d1.id]);
    assert.deepEqual(ids((await serviceB.flush(claimOnly([{ orgId: 'acme', upTo: 3 }]))).claimed), [d3.id], 'not d2: d1 is leased by a');
    assert.deepEqual(ids((await serviceB.flush(claimOnly([{ orgId: 'acme', upTo: 3 }]))).claimed), []);

    // d1 fails on a: d2 still waits, for d1's retry (which either instance may take).
    clock.at = T0 + 20;
    await serviceA.flush({ finished: [retried(claimA.claimed[0]!, T0 + 11, T0 + 5000)], released: [], claim: null });
    assert.deepEqual(ids((await serviceB.flush(claimOnly([{ orgId: 'acme', upTo: 3 }]))).claimed), []);
    clock.at = T0 + 5000;
    const retry = await serviceB.flush(claimOnly([{ orgId: 'acme', upTo: 3 }]));
    assert.deepEqual(
      retry.claimed.map((d) => [d.id, d.attempts]),
      [[d1.id, 1]],
    );
    assert.deepEqual(ids((await serviceA.flush(claimOnly([{ orgId: 'acme', upTo: 3 }]))).claimed), []);
    // Delivered by b: a's claim now gets d2.
    clock.at = T0 + 5100;
    await serviceB.flush({ finished: [delivered(retry.claimed[0]!, T0 + 5001)], released: [], claim: null });
    assert.deepEqual(ids((await serviceA.flush(claimOnly([{ orgId: 'acme', upTo: 3 }]))).claimed), [d2.id]);
  });

  test('the per-webhook cap counts the leases of every instance; a failing webhook gets one attempt at a time across instances', multi, async (t) => {
    const { clock, a, b, column } = await open(t);
    await queue(
      a,
      Array.from({ length: 10 }, (_, i) => ({ id: `evt_${i}`, request: `ar_${i}` })),
      T0,
    );
    const serviceA = createOutboxService(a, silentLog, serviceOptions);
    const serviceB = createOutboxService(b, silentLog, serviceOptions);
    clock.at = T0 + 10;
    const claim = async (service: typeof serviceA, want: ClaimWanted): Promise<FlushResult> => service.flush(claimOnly([want], 1000));
    const leasedBy = async () => column(`SELECT leased_by || ' ' || count(*) FROM deliveries WHERE lease_expires_at > ${clock.at} GROUP BY leased_by ORDER BY leased_by`);

    // The limit of a claim on a shared database: min(upTo, cap) (1 while failing), less the leases elsewhere.
    assert.equal((await claim(serviceA, { orgId: 'acme', upTo: 6, cap: 3 })).claimed.length, 3, 'min(6, 3) - 0');
    const none = await claim(serviceB, { orgId: 'acme', upTo: 3 });
    assert.deepEqual([none.claimed.length, none.contended], [0, ['acme']], '3 - 3 leased by a');
    assert.equal((await claim(serviceB, { orgId: 'acme', upTo: 6, cap: 5 })).claimed.length, 2, 'min(6, 5) - 3');
    assert.deepEqual(await leasedBy(), ['host-a 3', 'host-b 2']);
    const aFull = await claim(serviceA, { orgId: 'acme', upTo: 4, cap: 2 });
    assert.deepEqual([aFull.claimed.length, aFull.contended], [0, ['acme']], 'min(4, 2) - 2 leased by b');
    assert.equal((await claim(serviceA, { orgId: 'acme', upTo: 6, cap: 3 })).claimed.length, 1, 'min(6, 3) - 2');
    assert.deepEqual(await leasedBy(), ['host-a 4', 'host-b 2']);
    assert.deepEqual(await column(`SELECT count(DISTINCT id) FROM deliveries WHERE lease_expires_at IS NOT NULL`), [6]);
    // Once the leases lapsed, none is counted: b takes its upTo, the lapsed ones first.
    clock.at = T0 + 1010;
    assert.equal((await claim(serviceB, { orgId: 'acme', upTo: 3 })).claimed.length, 3);

    // A failing webhook: one at a time, whoever asks.
    await queue(
      a,
      Array.from({ length: 5 }, (_, i) => ({ id: `evt_g${i}`, request: `ar_g${i}`, org: 'globex' })),
      T0,
    );
    await a.transaction((tx) => tx.webhooks.setStatus('globex', 'failing', null, T0));
    const first = await claim(serviceA, { orgId: 'globex', upTo: 3 });
    assert.equal(first.claimed.length, 1);
    const blocked = await claim(serviceB, { orgId: 'globex', upTo: 3, cap: 3 });
    assert.deepEqual([blocked.claimed.length, blocked.contended], [0, ['globex']]);
    // a's attempt fails again (still failing): b may take the next one.
    clock.at = T0 + 1100;
    await serviceA.flush({ finished: [retried(first.claimed[0]!, T0 + 1020, T0 + 90_000)], released: [], claim: null });
    assert.equal((await a.read((tx) => tx.webhooks.get('globex')))?.status, 'failing');
    const next = await claim(serviceB, { orgId: 'globex', upTo: 3 });
    assert.equal(next.claimed.length, 1);
    assert.notEqual(next.claimed[0]!.id, first.claimed[0]!.id);
    assert.deepEqual((await claim(serviceA, { orgId: 'globex', upTo: 3 })).contended, ['globex']);
  });

  test('two instances claiming one webhook at the same time, many times: no delivery leased twice, never two of one request, requests in order', multi, async (t) => {
    const { clock, a, b, column } = await open(t);
    const requests = 6;
    const changes = 4;
    const upTo = 3;
    const q = await queue(
      a,
      Array.from({ length: requests * changes }, (_, i) => ({ id: `evt_${i}`, request: `ar_${i % requests}` })),
      T0,
    );
    const byId = new Map(q.map((x) => [x.id, x]));
    // Each request's changes in queue order: what must be claimed next for it.
    const order = new Map<number, number[]>();
    for (const x of q) order.set(x.key, [...(order.get(x.key) ?? []), x.id]);
    const services = [createOutboxService(a, silentLog, serviceOptions), createOutboxService(b, silentLog, serviceOptions)] as const;
    const held: [ClaimedDelivery[], ClaimedDelivery[]] = [[], []];
    const claimedOnce = new Set<number>();
    const deliveredIds = new Set<number>();
    let contended = 0;
    clock.at = T0 + 10;
    for (let round = 0; round < 200 && deliveredIds.size < q.length; round++) {
      clock.at += 10;
      const finished = held.map((h) => h.map((d) => delivered(d, clock.at - 5)));
      const results = await Promise.all(services.map((s, i) => s.flush({ finished: finished[i]!, released: [], claim: { wanted: [{ orgId: 'acme', upTo }], leaseMs: 600_000 } })));
      for (const f of finished.flat()) deliveredIds.add(f.delivery.id);
      for (const [i, r] of results.entries()) {
        assert.deepEqual(r.superseded, []);
        contended += r.contended.length;
        for (const d of r.claimed) {
          assert.ok(!claimedOnce.has(d.id), `delivery ${d.id} claimed twice (round ${round})`);
          claimedOnce.add(d.id);
          const expected = order.get(d.orderingKey)!.shift();
          assert.equal(d.id, expected, `request ${byId.get(d.id)?.request}: ${d.id} claimed before ${expected}`);
        }
        held[i] = r.claimed;
      }
      const inFlight = [...held[0], ...held[1]];
      assert.equal(new Set(inFlight.map((d) => d.orderingKey)).size, inFlight.length, `two changes of one request in flight (round ${round})`);
      assert.ok(inFlight.length <= upTo, `${inFlight.length} leases in flight, more than the upTo of ${upTo}`);
    }
    assert.equal(deliveredIds.size, q.length, 'every delivery went out');
    assert.deepEqual(await column(`SELECT status || ' ' || attempts || ' ' || count(*) FROM deliveries GROUP BY status, attempts`), [`delivered 1 ${q.length}`]);
    assert.deepEqual(await column('SELECT count(*) FROM delivery_attempts'), [q.length]);
    t.diagnostic(`contended claims: ${contended}`);
  });

  test('insertTestEvent on a database where the instance has no "api" source yet: twice in one transaction, and from two transactions at once', multi, async (t) => {
    const { a, b, column, instance, holdOpen } = await open(t);
    assert.deepEqual(await column(`SELECT count(*) FROM feed_sources`), [0]);
    const payload = '{"type":"webhook.test","data":{}}';
    const [s1, s2] = await a.transaction(async (tx) => [await tx.deliveries.insertTestEvent('evt_t1', 'acme', payload, 1000), await tx.deliveries.insertTestEvent('evt_t2', 'acme', payload, 1001)]);
    const s3 = await a.transaction((tx) => tx.deliveries.insertTestEvent('evt_t3', 'acme', payload, 1002));
    assert.ok(s1! < s2! && s2! < s3);
    assert.deepEqual(await column(`SELECT instance || ' ' || name FROM feed_sources`), ['host-a api']);
    // Another instance makes its own.
    await b.transaction((tx) => tx.deliveries.insertTestEvent('evt_t4', 'globex', payload, 1003));
    assert.deepEqual(await column(`SELECT instance || ' ' || name FROM feed_sources ORDER BY instance`), ['host-a api', 'host-b api']);
    assert.deepEqual(await column(`SELECT DISTINCT f.instance FROM events e JOIN feed_sources f ON f.id = e.source_id WHERE e.id IN ('evt_t1', 'evt_t2', 'evt_t3')`), ['host-a']);

    // Two test notifications sent at the same time by an instance that never sent one: the
    // second waits for the first's new source row, then must find it.
    const fresh = await instance('host-new', await (await pgServer()).createDatabase());
    const first = holdOpen(fresh, (tx) => tx.deliveries.insertTestEvent('evt_n1', 'acme', payload, 2000));
    await first.ready;
    const second = fresh.transaction((tx) => tx.deliveries.insertTestEvent('evt_n2', 'acme', payload, 2001));
    // Let the second statement reach the first's uncommitted source row and wait on it.
    await new Promise((resolve) => setTimeout(resolve, 200));
    first.end();
    await first.done;
    assert.ok((await second) > 0);
  });
});

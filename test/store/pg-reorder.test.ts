/**
 * Per-request order across feeds on PostgreSQL (issue 30), through the services a daemon runs
 * (ingest with delivery.reorderWindow, the delivery service's claims and group commits) on a
 * real PostgreSQL database and a clock the test moves: a change is held for the reorder window,
 * the next release is what the dispatcher's wake-up timer is set to, a request's changes are
 * claimed in occurred_at order whatever order they were stored in, a replay keeps its own rule
 * (queue order), and a change stored after a later one was sent is still sent, counted and
 * reported. The same services on SQLite keep the feed's order and hold nothing.
 * test/e2e/scale-out.e2e.test.ts has the same rule end to end, with three daemons.
 */
import assert from 'node:assert/strict';
import { after, test, type TestContext } from 'node:test';
import type { AttemptResult } from '../../src/domain/retry-policy.ts';
import { createLogger } from '../../src/log.ts';
import { createDeliveryLogService } from '../../src/services/delivery-log.ts';
import { createOutboxService, type ClaimedDelivery, type OutboxService, type FinishedAttempt, type FlushResult } from '../../src/services/outbox.ts';
import { createIngestService } from '../../src/services/ingest.ts';
import { createStatusService } from '../../src/services/status.ts';
import { nobodyListens } from '../../src/services/work-signal.ts';
import { stopPgServer } from '../helpers/pg-harness.ts';
import { feedLine, type FeedLine } from '../helpers/receivers.ts';
import { STORE_BACKENDS, type Backend } from '../helpers/store-backends.ts';
import { BY_TEST, testAudit } from '../helpers/audit-helpers.ts';

after(stopPgServer);

const T0 = Date.parse('2026-11-22T08:30:00.000Z');
const WINDOW = 1000;
const silentLog = createLogger('silent');
const pg = STORE_BACKENDS.find((b) => b.name === 'postgres')!;
const sqlite = STORE_BACKENDS.find((b) => b.name === 'sqlite')!;

const iso = (ms: number) => new Date(ms).toISOString();
const ok: AttemptResult = { statusCode: 200, error: null, errorDetail: null, responseBody: 'ok', durationMs: 5, retryAfterMs: null, sentTimestamp: 1, sentSignature: null };

/** The services of one instance on a fresh database of `backend`, on a clock the test moves. */
async function open(t: TestContext, backend: Backend) {
  const clock = { at: T0, now: () => clock.at };
  const opened = await backend.open(t, clock);
  const { store } = opened;
  await store.transaction(async (tx) => {
    await tx.orgs.insert({ id: 'acme', name: 'Acme', createdAt: 1 });
    await tx.webhooks.upsert('acme', 'https://acme.example.com/hook', true, 'whsec_acme', 1);
  });
  const ingest = createIngestService(store, silentLog, nobodyListens, { reorderWindowMs: WINDOW });
  const deliveries = createOutboxService(store, silentLog, { failingAfterFailures: 5, disableAfterMs: 86_400_000 });
  const deliveryLog = createDeliveryLogService(store, { userAgent: 'test' }, testAudit(store));
  const status = createStatusService(store, { disableAfterMs: 86_400_000 });
  /** Lines read from the feed of `source` (another instance's, say). */
  const read = (source: string, lines: readonly FeedLine[]) =>
    ingest.ingest(source, lines.map((l) => ({ bytes: Buffer.from(JSON.stringify(l)), position: null })), null);
  /** A claim for up to 8, as the dispatcher makes it. */
  const claim = (finished: readonly FinishedAttempt[] = []): Promise<FlushResult> =>
    deliveries.flush({ finished, released: [], claim: { wanted: [{ orgId: 'acme', upTo: 8, cap: 8 }], leaseMs: 60_000 } });
  return { ...opened, clock, read, claim, deliveries, deliveryLog, status };
}

const delivered = (d: ClaimedDelivery, at: number): FinishedAttempt => ({ delivery: d, result: ok, outcome: { kind: 'delivered' }, startedAt: at });
const change = (id: string, request: string, at: number) => feedLine('acme', id, request, 'approved', { occurred_at: iso(at) });

/** Claims and delivers, one claim after another, until nothing is due; returns the event ids in the order they were claimed. */
async function drain(o: Awaited<ReturnType<typeof open>>, deliveries: OutboxService = o.deliveries): Promise<string[]> {
  const order: string[] = [];
  let result = await o.claim();
  while (result.claimed.length > 0) {
    order.push(...result.claimed.map((d) => d.eventId));
    result = await deliveries.flush({ finished: result.claimed.map((d) => delivered(d, o.clock.at)), released: [], claim: { wanted: [{ orgId: 'acme', upTo: 8, cap: 8 }], leaseMs: 60_000 } });
  }
  return order;
}

test('PostgreSQL: a change is held for the reorder window, and the next release is the time to look again', { timeout: 60_000 }, async (t) => {
  const o = await open(t, pg);
  await o.read('feed-a', [change('evt_1', 'ar_1', T0 - 200)]);
  // Stored at T0, happened 200 ms before: held until T0 + 1 s (the window after it was stored, the later of the two).
  const first = await o.claim();
  assert.deepEqual(first.claimed, []);
  assert.deepEqual(first.drained, [{ orgId: 'acme', nextRetryAt: T0 + WINDOW }]);
  assert.deepEqual(await o.deliveries.peek(['acme']), { due: [], drained: [{ orgId: 'acme', nextRetryAt: T0 + WINDOW }] });
  o.clock.at = T0 + WINDOW - 1;
  assert.deepEqual((await o.claim()).claimed, []);
  o.clock.at = T0 + WINDOW;
  assert.deepEqual((await o.claim()).claimed.map((d) => d.eventId), ['evt_1']);

  // A clock ahead on the application host: held at most twice the window after it was stored.
  await o.read('feed-a', [change('evt_2', 'ar_2', o.clock.at + 3_600_000)]);
  assert.deepEqual((await o.claim()).drained, [{ orgId: 'acme', nextRetryAt: o.clock.at + 2 * WINDOW }]);
});

test('PostgreSQL: a request\'s changes are claimed in occurred_at order, whichever feed stored them first; other requests are not held up', { timeout: 60_000 }, async (t) => {
  const o = await open(t, pg);
  // Feed b is read first, with the later changes of ar_1; feed a's earlier change comes 600 ms later, within the window.
  await o.read('feed-b', [change('evt_b2', 'ar_1', T0 - 100), change('evt_b3', 'ar_1', T0 - 50), change('evt_other', 'ar_2', T0 - 100)]);
  o.clock.at = T0 + 600;
  await o.read('feed-a', [change('evt_a1', 'ar_1', T0 - 300)]);
  // Equal times: storage order (feed order within one feed).
  await o.read('feed-a', [change('evt_a4', 'ar_1', T0), change('evt_a5', 'ar_1', T0)]);
  o.clock.at = T0 + 2 * WINDOW;
  const order = await drain(o);
  assert.deepEqual(order.filter((id) => id !== 'evt_other'), ['evt_a1', 'evt_b2', 'evt_b3', 'evt_a4', 'evt_a5']);
  // ar_2's change goes in the first claim, beside ar_1's first.
  assert.deepEqual(order.slice(0, 2).sort(), ['evt_a1', 'evt_other']);
  const { claimed } = await o.claim();
  assert.deepEqual(claimed, []);
  // Nothing came late: nothing counted.
  assert.deepEqual((await o.status.webhooks()).map((w) => w.outOfOrderDeliveries), [0]);
});

test('PostgreSQL: an earlier change still held by its window holds back a later one already released', { timeout: 60_000 }, async (t) => {
  const o = await open(t, pg);
  await o.read('feed-b', [change('evt_late_in_time', 'ar_1', T0)]);
  o.clock.at = T0 + 900;
  // Happened before the first, stored 900 ms after it: released at T0 + 1.9 s.
  await o.read('feed-a', [change('evt_early_in_time', 'ar_1', T0 - 500)]);
  o.clock.at = T0 + WINDOW;
  const held = await o.claim();
  assert.deepEqual(held.claimed, [], 'evt_late_in_time is released but waits for the earlier change');
  assert.deepEqual(held.drained, [{ orgId: 'acme', nextRetryAt: T0 + 900 + WINDOW }]);
  o.clock.at = T0 + 900 + WINDOW;
  assert.deepEqual(await drain(o), ['evt_early_in_time', 'evt_late_in_time']);
});

test('PostgreSQL: a change stored after a later change of its request was sent is still sent, counted once and shown by status', { timeout: 60_000 }, async (t) => {
  const o = await open(t, pg);
  await o.read('feed-b', [change('evt_second', 'ar_1', T0)]);
  o.clock.at = T0 + WINDOW;
  const first = await o.claim();
  assert.deepEqual(first.claimed.map((d) => d.eventId), ['evt_second']);
  assert.deepEqual(first.outOfOrder, []);
  await o.deliveries.flush({ finished: [delivered(first.claimed[0]!, o.clock.at)], released: [], claim: null });

  // Beyond the window: feed a was down for a minute.
  o.clock.at = T0 + 60_000;
  await o.read('feed-a', [change('evt_first', 'ar_1', T0 - 1000), change('evt_third', 'ar_1', T0 + 5000)]);
  o.clock.at += WINDOW;
  const late = await o.claim();
  assert.deepEqual(late.claimed.map((d) => d.eventId), ['evt_first']);
  assert.deepEqual(late.outOfOrder.map((x) => [x.eventId, x.anticipationRequestId, x.orgId]), [['evt_first', 'ar_1', 'acme']]);
  // Given back unsent and claimed again: counted once.
  await o.deliveries.flush({ finished: [], released: late.claimed, claim: null });
  const again = await o.claim();
  assert.deepEqual(again.claimed.map((d) => d.eventId), ['evt_first']);
  assert.deepEqual(again.outOfOrder, []);
  const rest = await o.deliveries.flush({ finished: [delivered(again.claimed[0]!, o.clock.at)], released: [], claim: { wanted: [{ orgId: 'acme', upTo: 8, cap: 8 }], leaseMs: 60_000 } });
  // The change after both is in order.
  assert.deepEqual(rest.claimed.map((d) => d.eventId), ['evt_third']);
  assert.deepEqual(rest.outOfOrder, []);
  assert.deepEqual((await o.status.webhooks()).map((w) => [w.orgId, w.outOfOrderDeliveries]), [['acme', 1]]);
});

test('PostgreSQL: a replay keeps its own rule: queued now, it goes after the changes queued before it, and is not held', { timeout: 60_000 }, async (t) => {
  const o = await open(t, pg);
  await o.read('feed-a', [change('evt_1', 'ar_1', T0 - 100)]);
  o.clock.at = T0 + WINDOW;
  assert.deepEqual(await drain(o), ['evt_1']);
  const [row] = await o.deliveryLog.list('acme', { limit: 1 });
  await o.read('feed-a', [change('evt_2', 'ar_1', T0 + 500)]);
  // Replayed before evt_2 is released: due at once, but evt_2 happened before the replay was queued, and goes first.
  const replay = await o.deliveryLog.replay(BY_TEST, 'acme', row!.id);
  assert.equal(replay.eventId, 'evt_1');
  assert.deepEqual((await o.claim()).claimed, [], 'the replay waits for evt_2, queued before it');
  o.clock.at += WINDOW;
  assert.deepEqual(await drain(o), ['evt_2', 'evt_1']);
  // A replay of an event that happened long ago is not a late change.
  assert.deepEqual((await o.status.webhooks()).map((w) => w.outOfOrderDeliveries), [0]);
});

test('SQLite: the feed\'s order stands and nothing is held, whatever delivery.reorderWindow says', { timeout: 60_000 }, async (t) => {
  const o = await open(t, sqlite);
  await o.read('feed-a', [change('evt_b', 'ar_1', T0), change('evt_a', 'ar_1', T0 - 500)]);
  // Due at once (no window), in storage order.
  assert.deepEqual(await drain(o), ['evt_b', 'evt_a']);
  assert.deepEqual((await o.status.webhooks()).map((w) => w.outOfOrderDeliveries), [0]);
});

/**
 * delivery.orderHold on PostgreSQL (issue 46): a feed that stalls (its instance paused, or cut
 * off from the database) while the other instances deliver what their feeds hold. Each line
 * says which status came before it (previous_status); with the hold on, a change whose request
 * has not shown that status yet waits for it, at most the hold, instead of going out before it.
 * Through the services a daemon runs (ingest with the window and the hold, the delivery
 * service's claims and group commits) on a real PostgreSQL database and a clock the test moves.
 * Off by default: then the stalled change reaches the receiver after the later one (counted
 * late), as before. test/e2e/pg-faults.e2e.test.ts shows it end to end, under SIGSTOP and cuts.
 */
import assert from 'node:assert/strict';
import { after, test, type TestContext } from 'node:test';
import type { AttemptResult } from '../../src/domain/retry-policy.ts';
import { createLogger } from '../../src/log.ts';
import { createIngestService } from '../../src/services/ingest.ts';
import { createOutboxService, type ClaimedDelivery, type FinishedAttempt, type FlushResult } from '../../src/services/outbox.ts';
import { nobodyListens } from '../../src/services/work-signal.ts';
import { stopPgServer } from '../helpers/pg-harness.ts';
import { feedLine } from '../helpers/receivers.ts';
import { STORE_BACKENDS } from '../helpers/store-backends.ts';

after(stopPgServer);

const T0 = Date.parse('2026-11-29T08:00:00.000Z');
const WINDOW = 1000;
const HOLD = 30_000;
const silentLog = createLogger('silent');
const pg = STORE_BACKENDS.find((b) => b.name === 'postgres')!;
const ok: AttemptResult = { statusCode: 200, error: null, errorDetail: null, responseBody: 'ok', durationMs: 5, retryAfterMs: null, sentTimestamp: 1, sentSignature: null };

async function open(t: TestContext, orderHoldMs: number) {
  const clock = { at: T0, now: () => clock.at };
  const { store } = await pg.open(t, clock);
  await store.transaction(async (tx) => {
    await tx.orgs.insert({ id: 'acme', name: 'Acme', createdAt: 1 });
    await tx.webhooks.upsert('acme', 'https://acme.example.com/hook', true, 'whsec_acme', 1);
  });
  const ingest = createIngestService(store, silentLog, nobodyListens, { reorderWindowMs: WINDOW, orderHoldMs });
  const deliveries = createOutboxService(store, silentLog, { failingAfterFailures: 5, disableAfterMs: 86_400_000 });
  /** Change `status` of ar_1 (after `previous`), happened at `at`, read from `feed`. */
  const read = (feed: string, id: string, status: string, previous: string | null, at: number) =>
    ingest.ingest(feed, [{ bytes: Buffer.from(JSON.stringify(feedLine('acme', id, 'ar_1', status, { previous_status: previous, occurred_at: new Date(at).toISOString() }))), position: null }], null);
  /** Records `finished` as delivered and claims what is due, as a group commit does. */
  const commit = (finished: readonly ClaimedDelivery[] = []): Promise<FlushResult> =>
    deliveries.flush({
      finished: finished.map((d): FinishedAttempt => ({ delivery: d, result: ok, outcome: { kind: 'delivered' }, startedAt: clock.at })),
      released: [],
      claim: { wanted: [{ orgId: 'acme', upTo: 8, cap: 8 }], leaseMs: 60_000 },
    });
  return { clock, read, commit };
}
const ids = (r: FlushResult) => r.claimed.map((d) => d.eventId);

test('orderHold: a change waits for the change its line names before it, read late from a stalled feed, and goes out right after it', { timeout: 60_000 }, async (t) => {
  const o = await open(t, HOLD);
  // ar_1: submitted -> in_review -> approved, one change per feed; feed b stalls with in_review.
  await o.read('feed-a', 'evt_submitted', 'submitted', null, T0 - 300);
  await o.read('feed-c', 'evt_approved', 'approved', 'in_review', T0 - 100);
  o.clock.at = T0 + WINDOW;
  const first = await o.commit();
  assert.deepEqual(ids(first), ['evt_submitted']);
  // submitted is out; approved names in_review, which ar_1 has not shown: it waits.
  o.clock.at += 50;
  const waiting = await o.commit(first.claimed);
  assert.deepEqual(ids(waiting), [], 'approved waits for in_review');
  o.clock.at = T0 + 20_000;
  assert.deepEqual(ids(await o.commit()), [], 'still waiting, 20 s on (the hold is 30 s)');

  // Feed b comes back 20 s late: in_review goes, then approved at once.
  await o.read('feed-b', 'evt_in_review', 'in_review', 'submitted', T0 - 200);
  o.clock.at += WINDOW;
  const late = await o.commit();
  assert.deepEqual(ids(late), ['evt_in_review']);
  assert.deepEqual(late.outOfOrder, [], 'nothing was sent out of order');
  const next = await o.commit(late.claimed);
  assert.deepEqual(ids(next), ['evt_approved']);
  assert.deepEqual(next.outOfOrder, []);
});

test('orderHold: a predecessor that never comes holds its successor for the hold only; a change naming no previous status never waits', { timeout: 60_000 }, async (t) => {
  const o = await open(t, HOLD);
  await o.read('feed-a', 'evt_submitted', 'submitted', null, T0 - 300);
  await o.read('feed-c', 'evt_approved', 'approved', 'in_review', T0 - 100);
  o.clock.at = T0 + WINDOW;
  const first = await o.commit();
  assert.deepEqual(ids(first), ['evt_submitted'], 'no previous status: no wait');
  assert.deepEqual(ids(await o.commit(first.claimed)), []);
  // Its release (T0 + 1 s) plus the hold: then it goes, in_review having never come.
  o.clock.at = T0 + WINDOW + HOLD - 1;
  assert.deepEqual(ids(await o.commit()), []);
  o.clock.at = T0 + WINDOW + HOLD;
  assert.deepEqual(ids(await o.commit()), ['evt_approved']);
});

test('orderHold: the first change seen of a request, naming a status before it, waits the whole hold (the cost of the setting)', { timeout: 60_000 }, async (t) => {
  const o = await open(t, HOLD);
  await o.read('feed-a', 'evt_approved', 'approved', 'submitted', T0 - 100);
  o.clock.at = T0 + WINDOW;
  assert.deepEqual(ids(await o.commit()), []);
  o.clock.at = T0 + WINDOW + HOLD;
  assert.deepEqual(ids(await o.commit()), ['evt_approved']);
});

test('orderHold off (the default): the later change goes out before the stalled one, which is sent late and counted', { timeout: 60_000 }, async (t) => {
  const o = await open(t, 0);
  await o.read('feed-a', 'evt_submitted', 'submitted', null, T0 - 300);
  await o.read('feed-c', 'evt_approved', 'approved', 'in_review', T0 - 100);
  o.clock.at = T0 + WINDOW;
  const first = await o.commit();
  assert.deepEqual(ids(first), ['evt_submitted']);
  const second = await o.commit(first.claimed);
  assert.deepEqual(ids(second), ['evt_approved'], 'nothing waits for in_review');
  await o.read('feed-b', 'evt_in_review', 'in_review', 'submitted', T0 - 200);
  o.clock.at += WINDOW;
  const late = await o.commit(second.claimed);
  assert.deepEqual(ids(late), ['evt_in_review']);
  assert.deepEqual(late.outOfOrder.map((x) => x.eventId), ['evt_in_review']);
});

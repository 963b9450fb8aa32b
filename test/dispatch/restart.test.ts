/**
 * The retry schedule lives in the database: a relay stopped after a failed attempt and a new
 * relay started on the same state directory resume it, at the stored next_attempt_at, with
 * the same webhook-id and bytes.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { seedOrg, startRelay, tempDir } from '../helpers/helpers.ts';
import { appendFeed, attemptsOf, createTestTls, deliveriesOfEvent, FAST_DELIVERY, feedLine, startReceiver, waitForDelivery } from '../helpers/receivers.ts';
import { BY_TEST } from '../helpers/audit-helpers.ts';

test('a restart in the middle of the retry schedule resumes it: next_attempt_at unchanged, and the retry happens', async (t) => {
  const tls = createTestTls(t);
  const stateDir = tempDir(t, 'hookrelay-restart-');
  const overrides = { stateDir, 'delivery.caFile': tls.caFile, 'delivery.allowNetworks': '127.0.0.1/32', ...FAST_DELIVERY, 'delivery.retrySchedule': '3s,3s' };
  const receiver = await startReceiver(t, tls, (req) => (req.index === 0 ? { status: 500 } : { status: 200 }));

  const first = await startRelay(t, overrides);
  await seedOrg(first.services, 'org-a');
  await first.services.webhooks.register(BY_TEST, 'org-a', { webhook_url: receiver.url });
  appendFeed(first.config.feed.path, [feedLine('org-a', 'evt_resumed')]);
  const failed = await waitForDelivery(first.store, 'org-a', 'evt_resumed', (d) => d.attempts === 1, 'the first, failed attempt');
  assert.equal(failed.status, 'pending');
  assert.ok(failed.nextAttemptAt >= attemptsOf(first.store, failed.id)[0]!.startedAt + 3_000);
  await first.relay.stop();
  const afterStop = deliveriesOfEvent(first.store, 'org-a', 'evt_resumed')[0]!;
  assert.equal(afterStop.attempts, 1, 'the retry happened before the relay stopped; lengthen the schedule');
  assert.equal(afterStop.nextAttemptAt, failed.nextAttemptAt);

  const second = await startRelay(t, overrides);
  assert.equal(second.config.database.path, first.config.database.path);
  const resumed = deliveriesOfEvent(second.store, 'org-a', 'evt_resumed');
  assert.equal(resumed.length, 1);
  assert.equal(resumed[0]!.nextAttemptAt, failed.nextAttemptAt, 'the restart changed next_attempt_at');

  const delivered = await waitForDelivery(second.store, 'org-a', 'evt_resumed', (d) => d.status === 'delivered', 'the resumed retry', 10_000);
  assert.equal(delivered.id, failed.id);
  assert.equal(delivered.attempts, 2);
  const attempts = attemptsOf(second.store, delivered.id);
  assert.deepEqual(
    attempts.map((a) => [a.attempt, a.statusCode, a.outcome]),
    [
      [1, 500, 'retry'],
      [2, 200, 'delivered'],
    ],
  );
  assert.ok(attempts[1]!.startedAt >= failed.nextAttemptAt, 'the retry came before its time');
  assert.ok(receiver.requests[1]!.receivedAt >= failed.nextAttemptAt);
  assert.equal(receiver.requests.length, 2);
  assert.equal(receiver.requests[1]!.headers['webhook-id'], 'evt_resumed');
  assert.ok(receiver.requests[0]!.body.equals(receiver.requests[1]!.body));
  // The feed was not read twice by the second relay.
  assert.equal((second.store.db.prepare('SELECT count(*) AS n FROM events').get() as { n: number }).n, 1);
});

test('a graceful stop cuts in-flight attempts short without counting them; the next start sends them again', async (t) => {
  const tls = createTestTls(t);
  const stateDir = tempDir(t, 'hookrelay-restart-');
  const overrides = { stateDir, 'delivery.caFile': tls.caFile, 'delivery.allowNetworks': '127.0.0.1/32', ...FAST_DELIVERY, 'delivery.timeout': '30s' };
  let holding = true;
  const receiver = await startReceiver(t, tls, () => (holding ? 'hang' : { status: 200 }));

  const first = await startRelay(t, overrides);
  await seedOrg(first.services, 'org-a');
  await first.services.webhooks.register(BY_TEST, 'org-a', { webhook_url: receiver.url });
  appendFeed(first.config.feed.path, [feedLine('org-a', 'evt_interrupted')]);
  await receiver.waitForRequests(1);
  // The drain deadline (200 ms) passes long before the attempt's own (30 s): the attempt is aborted.
  await first.relay.stop(200);
  const released = deliveriesOfEvent(first.store, 'org-a', 'evt_interrupted')[0]!;
  assert.equal(released.status, 'pending');
  assert.equal(released.attempts, 0, 'an attempt cut short by shutdown was counted');
  assert.equal(attemptsOf(first.store, released.id).length, 0);
  const lease = first.store.db.prepare('SELECT lease_expires_at FROM deliveries WHERE id = ?').get(released.id) as { lease_expires_at: number | null };
  assert.equal(lease.lease_expires_at, null, 'the lease was not given back');

  holding = false;
  const second = await startRelay(t, overrides);
  const delivered = await waitForDelivery(second.store, 'org-a', 'evt_interrupted', (d) => d.status === 'delivered', 'the interrupted delivery');
  assert.equal(delivered.id, released.id);
  assert.equal(delivered.attempts, 1);
  assert.equal(receiver.requests.length, 2);
  assert.deepEqual(
    receiver.requests.map((r) => r.headers['webhook-id']),
    ['evt_interrupted', 'evt_interrupted'],
  );
});

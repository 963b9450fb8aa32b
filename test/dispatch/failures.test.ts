/**
 * How the engine treats receivers that do not simply answer 200: Retry-After on 429/503
 * (asserted on next_attempt_at in the database, never on wall time), 410 Gone (disable and
 * hold, released by re-registering or enabling), redirects (not followed), receivers that hang
 * or trickle (the overall deadline), ordering per anticipation request under failures, webhook
 * health (failing, active again), and a slow receiver that must not starve another webhook.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { call, seedOrg } from '../helpers/helpers.ts';
import { repos } from '../helpers/sqlite-repos.ts';
import {
  attemptsOf,
  deliveriesOf,
  deliveriesOfEvent,
  eventIdOf,
  feedLine,
  startDeliveryRig,
  startHangingReceiver,
  startReceiver,
  startTricklingReceiver,
  waitFor,
  waitForDelivery,
  type RecordedRequest,
} from '../helpers/receivers.ts';
import { BY_TEST } from '../helpers/audit-helpers.ts';

/** The first attempt of the event's delivery, once recorded. */
async function firstAttempt(rig: Awaited<ReturnType<typeof startDeliveryRig>>, orgId: string, eventId: string) {
  const delivery = await waitForDelivery(rig.relay.store, orgId, eventId, (d) => d.attempts >= 1, 'a first attempt');
  const attempt = attemptsOf(rig.relay.store, delivery.id)[0]!;
  return { delivery, attempt };
}

test('Retry-After on 503 is honoured (seconds and HTTP date) and clamped to delivery.maxRetryAfter', async (t) => {
  const rig = await startDeliveryRig(t, { 'delivery.maxRetryAfter': '30s' });
  const inTwentySeconds = new Date(Date.now() + 20_000).toUTCString();
  const answers = {
    'org-seconds': { status: 503, headers: { 'retry-after': '5' } },
    'org-date': { status: 503, headers: { 'retry-after': inTwentySeconds } },
    'org-huge': { status: 503, headers: { 'retry-after': '86400' } },
    'org-plain': { status: 503 },
  } as const;
  const received = new Map<string, RecordedRequest>();
  for (const [orgId, answer] of Object.entries(answers)) {
    const receiver = await startReceiver(t, rig.tls, (req) => {
      received.set(orgId, req);
      return answer;
    });
    await seedOrg(rig.relay.services, orgId);
    await rig.relay.services.webhooks.register(BY_TEST, orgId, { webhook_url: receiver.url });
    rig.feed(feedLine(orgId, `evt_${orgId}`));
  }
  const next: Record<string, { nextAttemptAt: number; lastAttemptAt: number; receivedAt: number }> = {};
  for (const orgId of Object.keys(answers)) {
    const { delivery, attempt } = await firstAttempt(rig, orgId, `evt_${orgId}`);
    assert.equal(delivery.status, 'pending');
    assert.equal(attempt.statusCode, 503);
    assert.equal(attempt.outcome, 'retry');
    next[orgId] = { nextAttemptAt: delivery.nextAttemptAt, lastAttemptAt: delivery.lastAttemptAt!, receivedAt: received.get(orgId)!.receivedAt };
  }
  // The decision is taken after the receiver answered and before the attempt is recorded, so
  // next_attempt_at lies in [received + wait, recorded + wait].
  const within = (orgId: string, waitMs: number) => {
    const n = next[orgId]!;
    assert.ok(n.nextAttemptAt >= n.receivedAt + waitMs, `${orgId}: next_attempt_at ${n.nextAttemptAt} is less than ${waitMs} ms after the answer (${n.receivedAt})`);
    assert.ok(n.nextAttemptAt <= n.lastAttemptAt + waitMs, `${orgId}: next_attempt_at ${n.nextAttemptAt} is more than ${waitMs} ms after the attempt (${n.lastAttemptAt})`);
  };
  within('org-seconds', 5_000);
  within('org-huge', 30_000);
  within('org-plain', 1_000);
  // An HTTP date is the retry time (turned into a wait when the answer is read, so it may come
  // out later by the time between reading the answer and recording the attempt, never earlier).
  const dated = next['org-date']!;
  assert.ok(dated.nextAttemptAt >= Date.parse(inTwentySeconds), `next_attempt_at ${dated.nextAttemptAt} is before the Retry-After date ${inTwentySeconds}`);
  assert.ok(dated.nextAttemptAt <= Date.parse(inTwentySeconds) + (dated.lastAttemptAt - dated.receivedAt), 'next_attempt_at is well after the Retry-After date');
});

test('429 waits at least 60 s, longer when Retry-After says so', async (t) => {
  const rig = await startDeliveryRig(t);
  const answers = {
    'org-short': { status: 429, headers: { 'retry-after': '2' } },
    'org-long': { status: 429, headers: { 'retry-after': '120' } },
    'org-none': { status: 429 },
  } as const;
  const received = new Map<string, RecordedRequest>();
  for (const [orgId, answer] of Object.entries(answers)) {
    const receiver = await startReceiver(t, rig.tls, (req) => {
      received.set(orgId, req);
      return answer;
    });
    await seedOrg(rig.relay.services, orgId);
    await rig.relay.services.webhooks.register(BY_TEST, orgId, { webhook_url: receiver.url });
    rig.feed(feedLine(orgId, `evt_${orgId}`));
  }
  for (const [orgId, wait] of [['org-short', 60_000], ['org-long', 120_000], ['org-none', 60_000]] as const) {
    const { delivery, attempt } = await firstAttempt(rig, orgId, `evt_${orgId}`);
    assert.equal(attempt.statusCode, 429);
    const answeredAt = received.get(orgId)!.receivedAt;
    assert.ok(delivery.nextAttemptAt >= answeredAt + wait, `${orgId}: next attempt ${delivery.nextAttemptAt - answeredAt} ms after a 429, expected at least ${wait}`);
    assert.ok(delivery.nextAttemptAt <= delivery.lastAttemptAt! + wait, `${orgId}: next attempt later than ${wait} ms`);
  }
});

test('410 disables the webhook and holds later deliveries, which go out after re-registering or enabling it', async (t) => {
  const rig = await startDeliveryRig(t);
  let gone = true;
  const receiver = await startReceiver(t, rig.tls, () => (gone ? { status: 410, body: 'gone' } : { status: 200 }));
  const { admin } = await seedOrg(rig.relay.services, 'org-a');
  const token = rig.relay.token('org-a', admin);
  await rig.relay.services.webhooks.register(BY_TEST, 'org-a', { webhook_url: receiver.url });
  const store = rig.relay.store;
  const status = async () => {
    const res = await call(rig.relay.baseUrl, 'GET', '/webhook/get_webhook', { token });
    assert.equal(res.status, 200, res.text);
    return res.body.status as string;
  };

  // Round 1: 410 -> disabled; a later event is held; re-registering releases both.
  rig.feed(feedLine('org-a', 'evt_gone_1'));
  const { delivery, attempt } = await firstAttempt(rig, 'org-a', 'evt_gone_1');
  assert.equal(attempt.statusCode, 410);
  assert.equal(attempt.outcome, 'disabled');
  assert.equal(delivery.status, 'pending', 'the 410 delivery is held, not dropped');
  assert.equal(await status(), 'disabled');
  assert.equal(repos(store).webhooks.health('org-a')?.disabledReason, 'gone');

  rig.feed(feedLine('org-a', 'evt_held_1'));
  const held = await waitForDelivery(store, 'org-a', 'evt_held_1', () => true, 'the held event to be queued');
  await sleep(400); // twenty dispatcher polls
  assert.equal(deliveriesOfEvent(store, 'org-a', 'evt_held_1')[0]!.attempts, 0, 'a delivery of a disabled webhook was attempted');
  assert.equal(attemptsOf(store, held.id).length, 0);
  assert.equal(receiver.requests.length, 1);
  assert.equal(deliveriesOfEvent(store, 'org-a', 'evt_gone_1')[0]!.attempts, 1, 'the 410 delivery was attempted again while disabled');

  gone = false;
  const again = await call(rig.relay.baseUrl, 'PUT', '/webhook/register_webhook', { token, body: { webhook_url: receiver.url } });
  assert.equal(again.status, 200, again.text);
  assert.equal(again.body.status, 'active');
  for (const eventId of ['evt_gone_1', 'evt_held_1']) await waitForDelivery(store, 'org-a', eventId, (d) => d.status === 'delivered', 'delivery after re-registering');
  assert.equal(await status(), 'active');
  assert.equal(receiver.requestsFor('evt_gone_1').length, 2);
  assert.equal(receiver.requestsFor('evt_held_1').length, 1);

  // Round 2: 410 again; this time the operator enables the webhook (hookrelay webhook enable).
  gone = true;
  rig.feed(feedLine('org-a', 'evt_gone_2'));
  await firstAttempt(rig, 'org-a', 'evt_gone_2');
  assert.equal(await status(), 'disabled');
  rig.feed(feedLine('org-a', 'evt_held_2'));
  await waitForDelivery(store, 'org-a', 'evt_held_2', () => true, 'the second held event to be queued');
  await sleep(400);
  assert.equal(deliveriesOfEvent(store, 'org-a', 'evt_held_2')[0]!.attempts, 0);
  gone = false;
  await rig.relay.services.webhooks.setEnabled(BY_TEST, 'org-a', true);
  for (const eventId of ['evt_gone_2', 'evt_held_2']) await waitForDelivery(store, 'org-a', eventId, (d) => d.status === 'delivered', 'delivery after enabling');
  assert.equal(await status(), 'active');
  assert.equal(deliveriesOf(store, 'org-a').filter((d) => d.status !== 'delivered').length, 0);
});

test('a redirect is not followed and counts as a failure', async (t) => {
  const rig = await startDeliveryRig(t, { 'delivery.retrySchedule': '1s' });
  const target = await startReceiver(t, rig.tls);
  const redirecting = await startReceiver(t, rig.tls, (req) => ({ status: req.index === 0 ? 302 : 307, headers: { location: target.url } }));
  await seedOrg(rig.relay.services, 'org-a');
  await rig.relay.services.webhooks.register(BY_TEST, 'org-a', { webhook_url: redirecting.url });

  rig.feed(feedLine('org-a', 'evt_redirected'));
  const dead = await waitForDelivery(rig.relay.store, 'org-a', 'evt_redirected', (d) => d.status === 'dead', 'the redirected delivery to go dead');
  const attempts = attemptsOf(rig.relay.store, dead.id);
  assert.deepEqual(
    attempts.map((a) => [a.statusCode, a.errorClass, a.outcome]),
    [
      [302, 'http_status', 'retry'],
      [307, 'http_status', 'dead'],
    ],
  );
  assert.match(attempts[0]!.errorDetail ?? '', /redirect \(302\) not followed/);
  assert.equal(redirecting.requests.length, 2);
  assert.equal(target.requests.length, 0, 'the redirect was followed');
  assert.equal(target.connections(), 0, 'something connected to the redirect target');
});

test('a hanging receiver and two trickling receivers hit the overall deadline (delivery.timeout) and are recorded as timeouts', async (t) => {
  const rig = await startDeliveryRig(t, { 'delivery.timeout': '1s' });
  const hanging = await startHangingReceiver(t, rig.tls);
  const tricklingBody = await startTricklingReceiver(t, rig.tls, { headersFirst: true, intervalMs: 50 });
  const tricklingAll = await startTricklingReceiver(t, rig.tls, { headersFirst: false, intervalMs: 50 });
  const cases = { 'org-hang': hanging.url, 'org-trickle-body': tricklingBody.url, 'org-trickle-all': tricklingAll.url };
  for (const [orgId, url] of Object.entries(cases)) {
    await seedOrg(rig.relay.services, orgId);
    await rig.relay.services.webhooks.register(BY_TEST, orgId, { webhook_url: url });
    rig.feed(feedLine(orgId, `evt_${orgId}`));
  }
  for (const orgId of Object.keys(cases)) {
    const { delivery, attempt } = await firstAttempt(rig, orgId, `evt_${orgId}`);
    assert.equal(attempt.errorClass, 'timeout', `${orgId}: ${attempt.errorClass} ${attempt.errorDetail}`);
    assert.equal(attempt.statusCode, null, `${orgId}: a response that did not complete in time has no status`);
    assert.equal(attempt.outcome, 'retry');
    assert.equal(delivery.status, 'pending', `${orgId}: an answer cut off by the deadline is not a delivery`);
    // A timeout waits at least a minute.
    assert.ok(delivery.nextAttemptAt >= attempt.startedAt + 60_000, `${orgId}: retry too soon after a timeout`);
  }
  assert.equal(hanging.requests.length, 1);
  assert.equal(tricklingBody.requests(), 1);
  assert.equal(tricklingAll.requests(), 1);
});

test('ordering: a later change of the same request waits for the earlier one (delivered or dead); other requests are not held up', async (t) => {
  const rig = await startDeliveryRig(t, { 'delivery.retrySchedule': '1s,1s,1s,1s,1s' });
  let otherArrived = false;
  let firstTries = 0;
  const receiver = await startReceiver(t, rig.tls, (req) => {
    const id = eventIdOf(req);
    if (id === 'evt_b1') otherArrived = true;
    // A1 fails at least once, and until B1 (another request) has arrived.
    if (id === 'evt_a1' && (firstTries++ === 0 || !otherArrived)) return { status: 500 };
    return { status: 200 };
  });
  await seedOrg(rig.relay.services, 'org-a');
  await rig.relay.services.webhooks.register(BY_TEST, 'org-a', { webhook_url: receiver.url });
  rig.feed(
    feedLine('org-a', 'evt_a1', 'ar_a', 'approved', { previous_status: 'pending' }),
    feedLine('org-a', 'evt_a2', 'ar_a', 'paid', { previous_status: 'approved' }),
    feedLine('org-a', 'evt_b1', 'ar_b', 'approved'),
  );
  const store = rig.relay.store;
  for (const eventId of ['evt_a1', 'evt_a2', 'evt_b1']) await waitForDelivery(store, 'org-a', eventId, (d) => d.status === 'delivered', 'every delivery', 15_000);

  const order = receiver.requests.map((r) => `${eventIdOf(r)}:${r.answeredStatus}`);
  const indexOf = (entry: string) => order.indexOf(entry);
  assert.ok(order.includes('evt_a1:500'), `A1 never failed: ${order.join(' ')}`);
  assert.ok(indexOf('evt_b1:200') < indexOf('evt_a1:200'), `B1 was held up by A1's failures: ${order.join(' ')}`);
  assert.ok(indexOf('evt_a1:200') < order.findIndex((e) => e.startsWith('evt_a2')), `A2 was sent before A1 was delivered: ${order.join(' ')}`);
  assert.equal(receiver.requestsFor('evt_a2').length, 1);
  assert.ok(receiver.requestsFor('evt_a1').length >= 2);
  assert.ok(receiver.requestsFor('evt_a2')[0]!.receivedAt >= receiver.requestsFor('evt_a1').at(-1)!.receivedAt);
});

test('ordering: a later change goes out once the earlier one has gone dead', async (t) => {
  const rig = await startDeliveryRig(t, { 'delivery.retrySchedule': '1s' });
  const receiver = await startReceiver(t, rig.tls, (req) => (eventIdOf(req) === 'evt_c1' ? { status: 500 } : { status: 200 }));
  await seedOrg(rig.relay.services, 'org-a');
  await rig.relay.services.webhooks.register(BY_TEST, 'org-a', { webhook_url: receiver.url });
  rig.feed(feedLine('org-a', 'evt_c1', 'ar_c', 'approved'), feedLine('org-a', 'evt_c2', 'ar_c', 'paid', { previous_status: 'approved' }));
  const store = rig.relay.store;
  const c2 = await waitForDelivery(store, 'org-a', 'evt_c2', (d) => d.status === 'delivered', 'the later change', 10_000);
  const c1 = deliveriesOfEvent(store, 'org-a', 'evt_c1')[0]!;
  assert.equal(c1.status, 'dead');
  assert.equal(c1.attempts, 2);
  const order = receiver.requests.map((r) => eventIdOf(r));
  assert.deepEqual(order, ['evt_c1', 'evt_c1', 'evt_c2']);
  assert.ok(attemptsOf(store, c2.id)[0]!.startedAt >= c1.lastAttemptAt!, 'C2 was attempted before C1 went dead');
});

test('webhook status: failing after delivery.failingAfterFailures consecutive failures, active again after a success', async (t) => {
  const rig = await startDeliveryRig(t, { 'delivery.failingAfterFailures': '2', 'delivery.retrySchedule': '1s,1s,1s,1s,1s,1s,1s,1s' });
  let healthy = false;
  const receiver = await startReceiver(t, rig.tls, () => (healthy ? { status: 200 } : { status: 500 }));
  const { viewer } = await seedOrg(rig.relay.services, 'org-a');
  const token = rig.relay.token('org-a', viewer);
  await rig.relay.services.webhooks.register(BY_TEST, 'org-a', { webhook_url: receiver.url });
  const store = rig.relay.store;
  const apiStatus = async () => (await call(rig.relay.baseUrl, 'GET', '/webhook/get_webhook', { token })).body.status as string;
  // One consistent read of the webhook's status and the number of attempts made so far.
  const snapshot = store.db.transaction(() => ({
    status: repos(store).webhooks.get('org-a')!.status,
    attempts: (store.db.prepare("SELECT count(*) AS n FROM delivery_attempts a JOIN deliveries d ON d.id = a.delivery_id WHERE d.org_id = 'org-a'").get() as { n: number }).n,
  }));

  rig.feed(feedLine('org-a', 'evt_f1'));
  const afterOne = await waitFor('exactly one failed attempt', () => {
    const s = snapshot();
    return s.attempts === 1 ? s : null;
  });
  assert.equal(afterOne.status, 'active', 'one failure is not yet failing');

  rig.feed(feedLine('org-a', 'evt_f2'));
  await waitFor('the webhook to be failing', () => snapshot().status === 'failing');
  assert.equal(await apiStatus(), 'failing');
  assert.ok((repos(store).webhooks.health('org-a')?.consecutiveFailures ?? 0) >= 2);

  healthy = true;
  await waitFor('the webhook to be active again', () => snapshot().status === 'active', 10_000);
  assert.equal(await apiStatus(), 'active');
  assert.equal(repos(store).webhooks.health('org-a')?.consecutiveFailures, 0);
  for (const eventId of ['evt_f1', 'evt_f2']) await waitForDelivery(store, 'org-a', eventId, (d) => d.status === 'delivered', 'delivery after recovery');
});

test('a slow receiver cannot starve another webhook, even with a backlog larger than the claim window', async (t) => {
  // One attempt at a time per webhook, two in all: the slow webhook's backlog (12 due
  // deliveries) is longer than what one claim looks at, and its receiver holds every request
  // until the other webhook's event has arrived.
  const rig = await startDeliveryRig(t, { 'delivery.concurrency': '2', 'delivery.perWebhookConcurrency': '1', 'delivery.timeout': '10s' });
  let release!: () => void;
  const otherArrived = new Promise<void>((resolve) => (release = resolve));
  const slow = await startReceiver(t, rig.tls, async () => {
    await otherArrived;
    return { status: 200 };
  });
  const fast = await startReceiver(t, rig.tls, () => {
    release();
    return { status: 200 };
  });
  await seedOrg(rig.relay.services, 'org-slow');
  await seedOrg(rig.relay.services, 'org-fast');
  await rig.relay.services.webhooks.register(BY_TEST, 'org-slow', { webhook_url: slow.url });
  await rig.relay.services.webhooks.register(BY_TEST, 'org-fast', { webhook_url: fast.url });
  rig.feed(...Array.from({ length: 12 }, (_, i) => feedLine('org-slow', `evt_slow_${i}`)));
  await slow.waitForRequests(1);
  rig.feed(feedLine('org-fast', 'evt_fast'));

  const store = rig.relay.store;
  await waitForDelivery(store, 'org-fast', 'evt_fast', (d) => d.status === 'delivered', 'the other webhook to get its event', 5_000);
  await waitFor('the slow backlog to drain', () => deliveriesOf(store, 'org-slow').every((d) => d.status === 'delivered'), 10_000);
  const firstSlow = deliveriesOfEvent(store, 'org-slow', 'evt_slow_0')[0]!;
  assert.deepEqual(
    attemptsOf(store, firstSlow.id).map((a) => a.outcome),
    ['delivered'],
    'the slow request was held until its deadline: the other webhook waited behind it',
  );
});

test('concurrency: at most delivery.perWebhookConcurrency attempts per webhook and delivery.concurrency in all', async (t) => {
  const rig = await startDeliveryRig(t, { 'delivery.concurrency': '3', 'delivery.perWebhookConcurrency': '2' });
  // Each webhook answers its first event at once (a webhook that has not answered yet gets one
  // attempt at a time), then holds every request until released.
  let holding = false;
  const held: Array<() => void> = [];
  const hold = async () => {
    if (holding) await new Promise<void>((resolve) => held.push(resolve));
    return { status: 200 } as const;
  };
  const a = await startReceiver(t, rig.tls, hold);
  const b = await startReceiver(t, rig.tls, hold);
  await seedOrg(rig.relay.services, 'org-a');
  await seedOrg(rig.relay.services, 'org-b');
  await rig.relay.services.webhooks.register(BY_TEST, 'org-a', { webhook_url: a.url });
  await rig.relay.services.webhooks.register(BY_TEST, 'org-b', { webhook_url: b.url });
  const store = rig.relay.store;
  rig.feed(feedLine('org-a', 'evt_cap_a_first'), feedLine('org-b', 'evt_cap_b_first'));
  await waitFor('both first events delivered', () => [...deliveriesOf(store, 'org-a'), ...deliveriesOf(store, 'org-b')].filter((d) => d.status === 'delivered').length === 2);
  holding = true;
  rig.feed(...Array.from({ length: 5 }, (_, i) => feedLine('org-a', `evt_cap_a${i}`)));
  await a.waitForRequests(1 + 2);
  rig.feed(...Array.from({ length: 5 }, (_, i) => feedLine('org-b', `evt_cap_b${i}`)));
  await b.waitForRequests(1 + 1);
  await sleep(400); // twenty dispatcher polls: nothing more may start while three are in flight
  assert.equal(a.requests.length, 1 + 2, 'more than perWebhookConcurrency attempts in flight to one webhook');
  assert.equal(b.requests.length, 1 + 1, 'more than concurrency attempts in flight in all');

  holding = false;
  for (const release of held.splice(0)) release();
  await waitFor('all twelve delivered', () => [...deliveriesOf(store, 'org-a'), ...deliveriesOf(store, 'org-b')].filter((d) => d.status === 'delivered').length === 12);
  assert.equal(a.requests.length, 6);
  assert.equal(b.requests.length, 6);
});

test('ordering: many requests with several changes each, slow answers and concurrency: each request receives its changes one at a time, in feed order', async (t) => {
  const rig = await startDeliveryRig(t, { 'delivery.concurrency': '8', 'delivery.perWebhookConcurrency': '8' });
  const open = new Map<string, number>();
  const overlaps: string[] = [];
  let inFlight = 0;
  let maxInFlight = 0;
  const receiver = await startReceiver(t, rig.tls, async (req) => {
    inFlight++;
    maxInFlight = Math.max(maxInFlight, inFlight);
    const body = JSON.parse(req.body.toString('utf8')) as { data: { anticipation_request_id: string } };
    const request = body.data.anticipation_request_id;
    if ((open.get(request) ?? 0) > 0) overlaps.push(`${request}: ${eventIdOf(req)} arrived while an earlier change was in flight`);
    open.set(request, (open.get(request) ?? 0) + 1);
    await sleep(5 + (Number(eventIdOf(req)!.split('_').at(-1)) % 3) * 10);
    open.set(request, open.get(request)! - 1);
    inFlight--;
    return { status: 200 };
  });
  await seedOrg(rig.relay.services, 'org-a');
  await rig.relay.services.webhooks.register(BY_TEST, 'org-a', { webhook_url: receiver.url });
  const requests = 12;
  const changes = 4;
  const lines = [];
  // Half of the requests have their changes next to each other in the feed (so one claim sees
  // several changes of one request at once), the other half interleaved.
  for (let r = 0; r < requests / 2; r++) {
    for (let c = 1; c <= changes; c++) lines.push(feedLine('org-a', `evt_r${r}_${c}`, `ar_${r}`, `status_${c}`));
  }
  for (let c = 1; c <= changes; c++) {
    for (let r = requests / 2; r < requests; r++) lines.push(feedLine('org-a', `evt_r${r}_${c}`, `ar_${r}`, `status_${c}`));
  }
  rig.feed(...lines);
  const store = rig.relay.store;
  await waitFor('every change delivered', () => deliveriesOf(store, 'org-a').length === requests * changes && deliveriesOf(store, 'org-a').every((d) => d.status === 'delivered'), 20_000);

  assert.deepEqual(overlaps, []);
  for (let r = 0; r < requests; r++) {
    const received = receiver.requests.map((q) => eventIdOf(q)!).filter((id) => id.startsWith(`evt_r${r}_`));
    assert.deepEqual(received, Array.from({ length: changes }, (_, i) => `evt_r${r}_${i + 1}`), `request ar_${r} received out of order`);
  }
  // With 8 attempts allowed at once and 12 requests, the requests did not wait for each other.
  assert.ok(maxInFlight > 1, `deliveries of different requests should overlap (at most ${maxInFlight} at once)`);
});

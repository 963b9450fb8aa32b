/**
 * The delivery log over the admin API: dead deliveries kept and replayable with the same
 * webhook-id, recovery of dead and undeliverable events of a window, listing with a status
 * filter and cursor pagination, one delivery with its attempt log (response bodies cut at
 * 20 KiB), and who may see or act on what (another organization, a viewer).
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { Webhook } from 'standardwebhooks';
import { assertProblem, call, seedOrg } from '../helpers/helpers.ts';
import { attemptsOf, deliveriesOf, deliveriesOfEvent, eventIdOf, feedLine, startDeliveryRig, startReceiver, waitFor, waitForDelivery } from '../helpers/receivers.ts';
import { BY_TEST } from '../helpers/audit-helpers.ts';

const MAX_RESPONSE_BYTES = 20 * 1024;

test('a delivery is dead after the schedule, kept, and a replay sends the event again with the same webhook-id', async (t) => {
  const rig = await startDeliveryRig(t, { 'delivery.retrySchedule': '1s' });
  let up = false;
  const receiver = await startReceiver(t, rig.tls, () => (up ? { status: 204 } : { status: 500, body: 'down' }));
  const { admin, viewer } = await seedOrg(rig.relay.services, 'org-a');
  const token = rig.relay.token('org-a', admin);
  const secret = (await rig.relay.services.webhooks.register(BY_TEST, 'org-a', { webhook_url: receiver.url })).newSecret!;
  const store = rig.relay.store;

  rig.feed(feedLine('org-a', 'evt_dies'));
  const dead = await waitForDelivery(store, 'org-a', 'evt_dies', (d) => d.status === 'dead', 'the delivery to go dead');
  assert.equal(dead.attempts, 2, 'one retry (schedule "1s"), then dead');

  const listed = await call(rig.relay.baseUrl, 'GET', '/webhook/deliveries?status=dead', { token });
  assert.equal(listed.status, 200, listed.text);
  assert.deepEqual(
    listed.body.data.map((d: { id: number }) => d.id),
    [dead.id],
  );
  const detail = await call(rig.relay.baseUrl, 'GET', `/webhook/deliveries/${dead.id}`, { token });
  assert.equal(detail.body.status, 'dead');
  assert.equal(detail.body.next_attempt_at, null);
  assert.deepEqual(
    detail.body.attempt_log.map((a: { attempt: number; status_code: number; error: string; outcome: string }) => [a.attempt, a.status_code, a.error, a.outcome]),
    [
      [1, 500, 'http_status', 'retry'],
      [2, 500, 'http_status', 'dead'],
    ],
  );

  // A viewer may look but not replay.
  const byViewer = await call(rig.relay.baseUrl, 'POST', `/webhook/deliveries/${dead.id}/replay`, { token: rig.relay.token('org-a', viewer) });
  assertProblem(byViewer, 403, 'forbidden');

  up = true;
  const replayed = await call(rig.relay.baseUrl, 'POST', `/webhook/deliveries/${dead.id}/replay`, { token });
  assert.equal(replayed.status, 202, replayed.text);
  const replayId = replayed.body.delivery.id as number;
  assert.notEqual(replayId, dead.id);
  assert.equal(replayed.body.delivery.event_id, 'evt_dies');
  assert.equal(replayed.body.delivery.attempts, 0);

  await waitForDelivery(store, 'org-a', 'evt_dies', (d) => d.id === replayId && d.status === 'delivered', 'the replay to be delivered');
  const requests = receiver.requestsFor('evt_dies');
  assert.equal(requests.length, 3);
  for (const req of requests) {
    assert.equal(req.headers['webhook-id'], 'evt_dies');
    assert.ok(req.body.equals(requests[0]!.body), 'the replay did not send the same bytes');
  }
  const last = requests[2]!;
  const raw = last.body.toString('utf8');
  assert.deepEqual(
    new Webhook(secret).verify(raw, {
      'webhook-id': String(last.headers['webhook-id']),
      'webhook-timestamp': String(last.headers['webhook-timestamp']),
      'webhook-signature': String(last.headers['webhook-signature']),
    }),
    JSON.parse(raw),
  );
  // The dead delivery is kept as it was, next to its replay.
  const rows = deliveriesOfEvent(store, 'org-a', 'evt_dies');
  assert.deepEqual(
    rows.map((d) => [d.id, d.status, d.attempts]),
    [
      [dead.id, 'dead', 2],
      [replayId, 'delivered', 1],
    ],
  );
});

test('POST /webhook/recover re-queues the dead and undeliverable events of the window, and nothing delivered', async (t) => {
  const rig = await startDeliveryRig(t, { 'delivery.retrySchedule': '1s' });
  let up = true;
  const receiver = await startReceiver(t, rig.tls, () => (up ? { status: 200 } : { status: 503 }));
  const { admin } = await seedOrg(rig.relay.services, 'org-a');
  const token = rig.relay.token('org-a', admin);
  const store = rig.relay.store;
  const since = new Date(Date.now() - 1000).toISOString();

  // Stored while the organization had no webhook: undeliverable.
  rig.feed(feedLine('org-a', 'evt_orphan'));
  await waitFor('the orphan event to be stored', () => store.db.prepare("SELECT 1 FROM events WHERE id = 'evt_orphan'").get());
  assert.equal(deliveriesOfEvent(store, 'org-a', 'evt_orphan').length, 0);

  await rig.relay.services.webhooks.register(BY_TEST, 'org-a', { webhook_url: receiver.url });
  rig.feed(feedLine('org-a', 'evt_fine'));
  await waitForDelivery(store, 'org-a', 'evt_fine', (d) => d.status === 'delivered', 'the healthy event');
  up = false;
  rig.feed(feedLine('org-a', 'evt_dead'));
  await waitForDelivery(store, 'org-a', 'evt_dead', (d) => d.status === 'dead', 'the dead event');

  // A window before all of it re-queues nothing.
  const empty = await call(rig.relay.baseUrl, 'POST', '/webhook/recover', { token, body: { since: '2020-01-01T00:00:00Z', until: '2020-01-02T00:00:00Z' } });
  assert.equal(empty.status, 202, empty.text);
  assert.equal(empty.body.requeued, 0);

  up = true;
  const recovered = await call(rig.relay.baseUrl, 'POST', '/webhook/recover', { token, body: { since } });
  assert.equal(recovered.status, 202, recovered.text);
  assert.equal(recovered.body.requeued, 2, recovered.text);
  assert.equal(recovered.body.retried_now, 0);
  for (const eventId of ['evt_orphan', 'evt_dead']) await waitForDelivery(store, 'org-a', eventId, (d) => d.status === 'delivered', 'the recovered event');
  assert.equal(receiver.requestsFor('evt_orphan').length, 1);
  assert.equal(receiver.requestsFor('evt_fine').length, 1, 'a delivered event was sent again');
  assert.equal(receiver.requestsFor('evt_dead').length, 3);
  assert.equal(new Set(receiver.requestsFor('evt_dead').map((r) => r.headers['webhook-id'])).size, 1);

  // Recovering again finds nothing left to do.
  const again = await call(rig.relay.baseUrl, 'POST', '/webhook/recover', { token, body: { since } });
  assert.equal(again.body.requeued, 0);
});

test('POST /webhook/recover makes failed deliveries of the window due now', async (t) => {
  const rig = await startDeliveryRig(t, { 'delivery.retrySchedule': '1h' });
  let up = false;
  const receiver = await startReceiver(t, rig.tls, () => (up ? { status: 200 } : { status: 500 }));
  const { admin } = await seedOrg(rig.relay.services, 'org-a');
  const token = rig.relay.token('org-a', admin);
  await rig.relay.services.webhooks.register(BY_TEST, 'org-a', { webhook_url: receiver.url });
  const since = new Date(Date.now() - 1000).toISOString();
  rig.feed(feedLine('org-a', 'evt_waiting'));
  const failed = await waitForDelivery(rig.relay.store, 'org-a', 'evt_waiting', (d) => d.attempts === 1, 'a first failure');
  assert.ok(failed.nextAttemptAt > Date.now() + 3_000_000, 'the retry is an hour away');

  up = true;
  const recovered = await call(rig.relay.baseUrl, 'POST', '/webhook/recover', { token, body: { since } });
  assert.equal(recovered.status, 202, recovered.text);
  assert.deepEqual([recovered.body.requeued, recovered.body.retried_now], [0, 1]);
  const delivered = await waitForDelivery(rig.relay.store, 'org-a', 'evt_waiting', (d) => d.status === 'delivered', 'the hurried retry');
  assert.equal(delivered.id, failed.id);
  assert.equal(delivered.attempts, 2);
});

test('GET /webhook/deliveries filters by status and pages with a cursor, newest first', async (t) => {
  const rig = await startDeliveryRig(t, { 'delivery.retrySchedule': '1h' });
  const receiver = await startReceiver(t, rig.tls, (req) => (eventIdOf(req) === 'evt_list_bad' ? { status: 500 } : { status: 200 }));
  const { admin } = await seedOrg(rig.relay.services, 'org-a');
  const token = rig.relay.token('org-a', admin);
  await rig.relay.services.webhooks.register(BY_TEST, 'org-a', { webhook_url: receiver.url });
  const store = rig.relay.store;

  rig.feed(...['evt_list_1', 'evt_list_2', 'evt_list_3', 'evt_list_4', 'evt_list_5', 'evt_list_bad'].map((id) => feedLine('org-a', id)));
  await waitFor('five delivered and one failed', () => {
    const rows = deliveriesOf(store, 'org-a');
    return rows.length === 6 && rows.filter((d) => d.status === 'delivered').length === 5 && rows.some((d) => d.attempts === 1 && d.status === 'pending');
  });
  // A pending delivery never attempted: held while the webhook is disabled.
  await rig.relay.services.webhooks.setEnabled(BY_TEST, 'org-a', false);
  rig.feed(feedLine('org-a', 'evt_list_held'));
  await waitForDelivery(store, 'org-a', 'evt_list_held', () => true, 'the held event');

  const all = deliveriesOf(store, 'org-a');
  const newestFirst = all.map((d) => d.id).sort((a, b) => b - a);
  const seen: number[] = [];
  let cursor: string | null = null;
  let pages = 0;
  do {
    const query: string = `/webhook/deliveries?limit=3${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ''}`;
    const page = await call(rig.relay.baseUrl, 'GET', query, { token });
    assert.equal(page.status, 200, page.text);
    assert.ok(page.body.data.length <= 3);
    seen.push(...page.body.data.map((d: { id: number }) => d.id));
    cursor = page.body.next_cursor;
    pages++;
  } while (cursor !== null && pages < 10);
  assert.deepEqual(seen, newestFirst, 'pages must cover every delivery once, newest first');
  assert.equal(pages, 3);

  const byStatus = async (status: string) => {
    const res = await call(rig.relay.baseUrl, 'GET', `/webhook/deliveries?status=${status}`, { token });
    assert.equal(res.status, 200, res.text);
    for (const d of res.body.data) assert.equal(d.status, status, `status=${status} listed a ${d.status} delivery`);
    return res.body.data.map((d: { event_id: string }) => d.event_id).sort();
  };
  assert.deepEqual(await byStatus('delivered'), ['evt_list_1', 'evt_list_2', 'evt_list_3', 'evt_list_4', 'evt_list_5']);
  assert.deepEqual(await byStatus('failed'), ['evt_list_bad']);
  assert.deepEqual(await byStatus('pending'), ['evt_list_held']);
  assert.deepEqual(await byStatus('dead'), []);

  const future = await call(rig.relay.baseUrl, 'GET', `/webhook/deliveries?since=${new Date(Date.now() + 3_600_000).toISOString()}`, { token });
  assert.deepEqual(future.body, { data: [], next_cursor: null });
  const bad = await call(rig.relay.baseUrl, 'GET', '/webhook/deliveries?status=lost&limit=0&cursor=zz', { token });
  const problem = assertProblem(bad, 422, 'validation_failed');
  assert.deepEqual(problem.invalid_params.map((p: { name: string }) => p.name).sort(), ['cursor', 'limit', 'status']);
});

test('GET /webhook/deliveries/{id} shows each attempt: status, duration, error and at most 20 KiB of the answer', async (t) => {
  // The receiver is on 127.0.0.1, an internal address: its answers are kept only when the operator says so.
  const rig = await startDeliveryRig(t, { 'delivery.retrySchedule': '1s', 'delivery.storeInternalResponses': 'org-a' });
  const big = Buffer.alloc(100 * 1024, 'x');
  big.write('BEGIN', 0);
  const receiver = await startReceiver(t, rig.tls, (req) => (req.index === 0 ? { status: 500, body: big } : { status: 200, body: big }));
  const { admin } = await seedOrg(rig.relay.services, 'org-a');
  const token = rig.relay.token('org-a', admin);
  await rig.relay.services.webhooks.register(BY_TEST, 'org-a', { webhook_url: receiver.url });
  rig.feed(feedLine('org-a', 'evt_big_answer'));
  const delivered = await waitForDelivery(rig.relay.store, 'org-a', 'evt_big_answer', (d) => d.status === 'delivered', 'the delivery');

  const res = await call(rig.relay.baseUrl, 'GET', `/webhook/deliveries/${delivered.id}`, { token });
  assert.equal(res.status, 200, res.text);
  assert.equal(res.body.id, delivered.id);
  assert.equal(res.body.event_id, 'evt_big_answer');
  assert.equal(res.body.event_type, 'anticipation_request.status_changed');
  assert.equal(res.body.anticipation_request_id, 'ar_evt_big_answer');
  assert.equal(res.body.status, 'delivered');
  assert.equal(res.body.attempts, 2);
  assert.equal(res.body.last_status_code, 200);
  const log = res.body.attempt_log as Array<Record<string, any>>;
  assert.equal(log.length, 2);
  assert.deepEqual(
    log.map((a) => [a.attempt, a.status_code, a.error, a.outcome, a.url]),
    [
      [1, 500, 'http_status', 'retry', receiver.url],
      [2, 200, null, 'delivered', receiver.url],
    ],
  );
  for (const a of log) {
    assert.match(a.started_at, /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/);
    assert.ok(Number.isInteger(a.duration_ms) && a.duration_ms >= 0, `duration_ms ${a.duration_ms}`);
    const body = a.response_body as string;
    assert.ok(Buffer.byteLength(body) <= MAX_RESPONSE_BYTES, `kept ${Buffer.byteLength(body)} bytes of the answer`);
    assert.ok(body.length > 0 && big.toString('utf8').startsWith(body), 'the kept answer is not the start of the answer');
  }
  assert.match(log[0]!.error_detail, /HTTP 500/);
  assert.equal(attemptsOf(rig.relay.store, delivered.id)[0]!.responseBody!.length, MAX_RESPONSE_BYTES);
});

test("deliveries are per organization: another organization's admin gets 404; a viewer lists but may not replay, recover or test", async (t) => {
  const rig = await startDeliveryRig(t);
  const receiver = await startReceiver(t, rig.tls);
  const a = await seedOrg(rig.relay.services, 'org-a');
  const b = await seedOrg(rig.relay.services, 'org-b');
  await rig.relay.services.webhooks.register(BY_TEST, 'org-a', { webhook_url: receiver.url });
  await rig.relay.services.webhooks.register(BY_TEST, 'org-b', { webhook_url: receiver.url });
  rig.feed(feedLine('org-a', 'evt_of_a'), feedLine('org-b', 'evt_of_b'));
  const ofA = await waitForDelivery(rig.relay.store, 'org-a', 'evt_of_a', (d) => d.status === 'delivered', "org A's delivery");
  await waitForDelivery(rig.relay.store, 'org-b', 'evt_of_b', (d) => d.status === 'delivered', "org B's delivery");

  const adminB = rig.relay.token('org-b', b.admin);
  assertProblem(await call(rig.relay.baseUrl, 'GET', `/webhook/deliveries/${ofA.id}`, { token: adminB }), 404, 'delivery_not_found');
  assertProblem(await call(rig.relay.baseUrl, 'POST', `/webhook/deliveries/${ofA.id}/replay`, { token: adminB }), 404, 'delivery_not_found');
  const listB = await call(rig.relay.baseUrl, 'GET', '/webhook/deliveries', { token: adminB });
  assert.deepEqual(
    listB.body.data.map((d: { event_id: string }) => d.event_id),
    ['evt_of_b'],
  );
  // A missing id gets the same answer as another organization's.
  assertProblem(await call(rig.relay.baseUrl, 'GET', `/webhook/deliveries/${ofA.id + 1000}`, { token: adminB }), 404, 'delivery_not_found');

  const viewerA = rig.relay.token('org-a', a.viewer);
  const list = await call(rig.relay.baseUrl, 'GET', '/webhook/deliveries', { token: viewerA });
  assert.equal(list.status, 200, list.text);
  assert.deepEqual(
    list.body.data.map((d: { id: number }) => d.id),
    [ofA.id],
  );
  const one = await call(rig.relay.baseUrl, 'GET', `/webhook/deliveries/${ofA.id}`, { token: viewerA });
  assert.equal(one.status, 200, one.text);
  assert.equal(one.body.attempt_log.length, 1);
  const before = deliveriesOf(rig.relay.store, 'org-a').length;
  assertProblem(await call(rig.relay.baseUrl, 'POST', `/webhook/deliveries/${ofA.id}/replay`, { token: viewerA }), 403, 'forbidden');
  assertProblem(await call(rig.relay.baseUrl, 'POST', '/webhook/recover', { token: viewerA, body: { since: '2020-01-01T00:00:00Z' } }), 403, 'forbidden');
  assertProblem(await call(rig.relay.baseUrl, 'POST', '/webhook/test', { token: viewerA }), 403, 'forbidden');
  assertProblem(await call(rig.relay.baseUrl, 'POST', '/webhook/rotate_secret', { token: viewerA }), 403, 'forbidden');
  await sleep(100);
  assert.equal(deliveriesOf(rig.relay.store, 'org-a').length, before, 'a refused request queued something');
  assert.equal(receiver.requestsFor('evt_of_a').length, 1);
});

/**
 * The delivery engine under time, faults and load (issue 9): wake-ups instead of polls, one TLS
 * context for every connection, a 429 pausing the webhook, fair slots with many hanging
 * receivers, a poison row in one organization, a claim that always ends, and a wall clock that
 * steps forward and back. Real relays on temp SQLite files, real HTTPS receivers on 127.0.0.1.
 */
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { createServer as createHttpsServer } from 'node:https';
import type { AddressInfo, Socket } from 'node:net';
import { join } from 'node:path';
import { test, type TestContext } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import tls from 'node:tls';
import { loadConfig } from '../../src/config/load.ts';
import { createDeliverer } from '../../src/dispatch/deliverer.ts';
import { createNetworkPolicies } from '../../src/domain/address-policy.ts';
import { systemClock, type Clock } from '../../src/domain/clock.ts';
import { orderingKey } from '../../src/domain/ordering.ts';
import { createRelay } from '../../src/relay.ts';
import { createServices } from '../../src/services/services.ts';
import { createIngestService } from '../../src/services/ingest.ts';
import { DeliveryStatus } from '../../src/store/values.ts';
import { openSqliteStore, type SqliteStore as Store } from '../../src/store/sqlite/store.ts';
import { call, seedOrg, silentLog, tempDir } from '../helpers/helpers.ts';
import { repos } from '../helpers/sqlite-repos.ts';
import {
  appendFeed,
  createTestTls,
  deliveriesOf,
  deliveriesOfEvent,
  eventIdOf,
  feedLine,
  startDeliveryRig,
  startReceiver,
  waitFor,
  waitForDelivery,
  type DeliveryRig,
  type Receiver,
  type TestTls,
} from '../helpers/receivers.ts';
import { BY_TEST } from '../helpers/audit-helpers.ts';

/** Polls so slow that only a wake-up can explain a prompt delivery. */
const NO_POLLS = { 'delivery.pollInterval': '60s', 'feed.pollInterval': '60000' } as const;

/**
 * Appends `${prefix}_1` to `${prefix}_5` one at a time (`${prefix}_0` already arrived), each once
 * the one before has arrived and `pauseMs` later; returns each one's append-to-arrival time (ms).
 */
async function appendOneByOne(rig: DeliveryRig, receiver: Receiver, prefix: string, pauseMs: number): Promise<number[]> {
  const latencies: number[] = [];
  for (let i = 1; i <= 5; i++) {
    const appendedAt = Date.now();
    rig.feed(feedLine('org-a', `${prefix}_${i}`));
    const [req] = (await receiver.waitForRequests(i + 1, 5_000)).slice(i);
    assert.equal(eventIdOf(req!), `${prefix}_${i}`);
    latencies.push(req!.receivedAt - appendedAt);
    await sleep(pauseMs);
  }
  return latencies;
}

test('wake-ups: an appended feed line and an API call are delivered at once, without waiting for a poll', async (t) => {
  const rig = await startDeliveryRig(t, NO_POLLS);
  const receiver = await startReceiver(t, rig.tls);
  const { admin } = await seedOrg(rig.relay.services, 'org-a');
  await rig.relay.services.webhooks.register(BY_TEST, 'org-a', { webhook_url: receiver.url });
  // The tailer waits for the feed file to appear; give it a first line and let it settle.
  rig.feed(feedLine('org-a', 'evt_wake_0'));
  await receiver.waitForRequests(1, 10_000);

  const latencies = await appendOneByOne(rig, receiver, 'evt_wake', 50);
  // Both polls are a minute: a line reached the receiver because the file change woke the
  // tailer and the commit woke the dispatcher.
  assert.ok(Math.max(...latencies) < 5_000, `append-to-arrival ${latencies.join(', ')} ms`);

  const sent = await call(rig.relay.baseUrl, 'POST', '/webhook/test', { token: rig.relay.token('org-a', admin) });
  assert.equal(sent.status, 202, sent.text);
  const [testRequest] = (await receiver.waitForRequests(7, 5_000)).slice(6);
  assert.match(eventIdOf(testRequest!) ?? '', /^evt_test_/);
});

test('one TLS context for every attempt with delivery.caFile: new connections reuse it, kept-alive ones are reused', async (t) => {
  const testTls = createTestTls(t);
  let closeEach = false;
  const receiver = await startReceiver(t, testTls, () => ({ status: 200, headers: closeEach ? { connection: 'close' } : {} }));
  const deliverer = createDeliverer({
    networks: createNetworkPolicies({ allowNetworks: ['127.0.0.1/32'], organizationNetworks: [], storeInternalResponses: [] }),
    clock: systemClock,
    timeoutMs: 5_000,
    allowHttp: false,
    userAgent: 'hookrelay-test',
    extraCa: readFileSync(testTls.caFile, 'utf8'),
    concurrency: 8,
  });
  t.after(() => deliverer.close());
  const created = countSecureContexts(t);

  const send = async (n: number) => {
    const result = await deliverer.deliver({ orgId: 'org-a', url: receiver.url, eventId: `evt_tls_${n}`, payload: '{}', secrets: [] });
    assert.equal(result.statusCode, 200, result.errorDetail ?? '');
  };
  for (let i = 0; i < 20; i++) await send(i);
  // undici opens a second connection for the attempt right after the first one of a new
  // connection (it counts that connection busy until a tick after the answer); from then on the
  // two are reused. Without keep-alive this would be twenty.
  assert.ok(receiver.connections() <= 2, `twenty attempts one after the other opened ${receiver.connections()} connections, not kept-alive ones`);

  // Every answer closes its connection: each attempt opens a new TLS connection, and none builds a context.
  closeEach = true;
  for (let i = 0; i < 10; i++) await send(100 + i);
  assert.ok(receiver.connections() >= 10, `${receiver.connections()} connections: the receiver did not force new ones`);
  closeEach = false;
  const before = receiver.connections();
  await Promise.all(Array.from({ length: 16 }, (_, i) => send(200 + i)));
  assert.ok(receiver.connections() - before <= 16, 'sixteen attempts at once opened more than sixteen connections');
  assert.equal(created(), 0, 'a TLS secure context was built for an attempt');
});

/** Counts the TLS secure contexts Node builds from now on (tls.connect builds one for a connection without one). */
function countSecureContexts(t: TestContext): () => number {
  const original = tls.createSecureContext;
  let count = 0;
  tls.createSecureContext = (...args: Parameters<typeof original>) => {
    count++;
    return original(...args);
  };
  t.after(() => {
    tls.createSecureContext = original;
  });
  return () => count;
}

test('a 429 with Retry-After pauses the webhook: its next delivery waits, other webhooks do not', async (t) => {
  const rig = await startDeliveryRig(t, { 'delivery.perWebhookConcurrency': '1' });
  let first = true;
  const throttled = await startReceiver(t, rig.tls, () => {
    if (!first) return { status: 200 };
    first = false;
    return { status: 429, headers: { 'retry-after': '2' } };
  });
  const other = await startReceiver(t, rig.tls);
  await seedOrg(rig.relay.services, 'org-a');
  await seedOrg(rig.relay.services, 'org-b');
  await rig.relay.services.webhooks.register(BY_TEST, 'org-a', { webhook_url: throttled.url });
  await rig.relay.services.webhooks.register(BY_TEST, 'org-b', { webhook_url: other.url });

  rig.feed(feedLine('org-a', 'evt_429_a1', 'ar_1'));
  const [refused] = await throttled.waitForRequests(1);
  rig.feed(feedLine('org-a', 'evt_429_a2', 'ar_2'), feedLine('org-a', 'evt_429_a3', 'ar_3'), feedLine('org-b', 'evt_429_b1'));
  const [otherGot] = await other.waitForRequests(1);
  assert.ok(otherGot!.receivedAt - refused!.receivedAt < 1_500, 'another webhook waited for the paused one');

  const later = await throttled.waitForRequests(3, 10_000);
  const gap = later[1]!.receivedAt - refused!.receivedAt;
  assert.ok(gap >= 1_900, `the next delivery to the throttled webhook went out ${gap} ms after the 429, before its Retry-After of 2 s`);
  assert.deepEqual(later.slice(1).map(eventIdOf).sort(), ['evt_429_a2', 'evt_429_a3']);
  // The throttled delivery itself waits at least its own backoff (a minute after a 429).
  const row = deliveriesOfEvent(rig.relay.store, 'org-a', 'evt_429_a1')[0]!;
  assert.equal(row.attempts, 1);
  assert.ok(row.nextAttemptAt - (row.lastAttemptAt ?? 0) >= 59_000, `retry scheduled ${row.nextAttemptAt - (row.lastAttemptAt ?? 0)} ms after the 429`);
});

/** An HTTPS server that never answers, counting the requests it holds open now and at most, and noting when the first arrived. */
async function startHangingCounter(t: TestContext, testTls: TestTls) {
  const sockets = new Set<Socket>();
  const counter = { open: 0, max: 0, total: 0, firstAt: 0 };
  const server = createHttpsServer({ key: testTls.keyPem, cert: testTls.certPem }, (req) => {
    if (counter.total === 0) counter.firstAt = Date.now();
    counter.open++;
    counter.total++;
    counter.max = Math.max(counter.max, counter.open);
    req.resume();
    req.socket.once('close', () => counter.open--);
  });
  server.on('connection', (socket: Socket) => {
    sockets.add(socket);
    socket.once('close', () => sockets.delete(socket));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  t.after(async () => {
    for (const socket of sockets) socket.destroy();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  });
  return { url: `https://127.0.0.1:${(server.address() as AddressInfo).port}/hook`, counter };
}

test('fair slots: six hanging receivers hold one attempt each and at most half the slots; a healthy webhook keeps delivering', async (t) => {
  const rig = await startDeliveryRig(t, { 'delivery.concurrency': '8', 'delivery.perWebhookConcurrency': '4', 'delivery.timeout': '2s', 'delivery.retrySchedule': '1s,1s,1s,1s,1s,1s,1s,1s' });
  const healthy = await startReceiver(t, rig.tls);
  const hanging = await Promise.all(Array.from({ length: 6 }, () => startHangingCounter(t, rig.tls)));
  await seedOrg(rig.relay.services, 'org-ok');
  await rig.relay.services.webhooks.register(BY_TEST, 'org-ok', { webhook_url: healthy.url });
  for (const [i, h] of hanging.entries()) {
    await seedOrg(rig.relay.services, `org-hang-${i}`);
    await rig.relay.services.webhooks.register(BY_TEST, `org-hang-${i}`, { webhook_url: h.url });
  }
  const samples: Array<{ at: number; open: number }> = [];
  const startedAt = Date.now();
  const sampler = setInterval(() => samples.push({ at: Date.now() - startedAt, open: hanging.reduce((n, h) => n + h.counter.open, 0) }), 10);
  t.after(() => clearInterval(sampler));

  rig.feed(...hanging.flatMap((_, i) => Array.from({ length: 5 }, (_, k) => feedLine(`org-hang-${i}`, `evt_hang_${i}_${k}`))));
  rig.feed(...Array.from({ length: 20 }, (_, k) => feedLine('org-ok', `evt_ok_a${k}`)));
  const store = rig.relay.store;
  const delivered = (prefix: string) => deliveriesOf(store, 'org-ok').filter((d) => d.eventId.startsWith(prefix) && d.status === 'delivered').length;
  await waitFor('the healthy webhook to get its first twenty events while six receivers hang', () => delivered('evt_ok_a') === 20, 4_000);

  // After the first timeouts (2 s), the hanging webhooks are failing: one attempt each, half the slots in all.
  await sleep(Math.max(0, 3_000 - (Date.now() - startedAt)));
  const more = Date.now();
  rig.feed(...Array.from({ length: 20 }, (_, k) => feedLine('org-ok', `evt_ok_b${k}`)));
  await waitFor('the healthy webhook to get twenty more', () => delivered('evt_ok_b') === 20, 4_000);
  const tookMs = Date.now() - more;
  await waitFor('every hanging receiver to be tried again after its timeout', () => hanging.every((h) => h.counter.total >= 2), 8_000);
  clearInterval(sampler);

  for (const [i, h] of hanging.entries()) assert.ok(h.counter.max <= 1, `hanging receiver ${i} held ${h.counter.max} requests at once`);
  // From 600 ms after the last first attempt's timeout (2 s): when the feed is picked up late on
  // a busy machine, the first attempts start late too, and still hold their slots until then.
  const firstTimeouts = Math.max(...hanging.map((h) => h.counter.firstAt)) - startedAt + 2_000;
  const late = samples.filter((s) => s.at >= firstTimeouts + 600);
  assert.ok(late.length > 50, 'too few samples');
  const worst = Math.max(...late.map((s) => s.open));
  assert.ok(worst <= 4, `hanging receivers held ${worst} of 8 slots at once after their first timeout (at most half expected)`);
  assert.ok(tookMs < 4_000, `the second twenty took ${tookMs} ms`);
});

test('a row whose body cannot be built is marked dead with the reason; its organization and the others go on', async (t) => {
  const rig = await startDeliveryRig(t);
  const a = await startReceiver(t, rig.tls);
  const b = await startReceiver(t, rig.tls);
  await seedOrg(rig.relay.services, 'org-a');
  await seedOrg(rig.relay.services, 'org-b');
  await rig.relay.services.webhooks.register(BY_TEST, 'org-a', { webhook_url: a.url });
  await rig.relay.services.webhooks.register(BY_TEST, 'org-b', { webhook_url: b.url });
  const store = rig.relay.store;
  // A damaged event: an occurred_at no Date can hold (as a damaged page or a hand edit could leave).
  const poisonId = store.db.transaction(() => {
    const seq = Number(
      store.db
        .prepare("INSERT INTO events (id, org_id, anticipation_request_id, occurred_at, payload, source_id, received_at) VALUES ('evt_poison', 'org-a', 'ar_poison', ?, ?, 1, ?)")
        .run(9e15, '"status":"approved","previous_status":null', Date.now()).lastInsertRowid,
    );
    return repos(store).deliveries.insert(seq, 'org-a', orderingKey('org-a', 'ar_poison'), Date.now());
  })();
  rig.feed(...Array.from({ length: 5 }, (_, i) => feedLine('org-a', `evt_a_${i}`)), ...Array.from({ length: 5 }, (_, i) => feedLine('org-b', `evt_b_${i}`)));

  await waitFor('every good event of both organizations delivered', () => [...deliveriesOf(store, 'org-a'), ...deliveriesOf(store, 'org-b')].filter((d) => d.status === 'delivered').length === 10);
  const poison = await waitForDelivery(store, 'org-a', 'evt_poison', (d) => d.status === DeliveryStatus.dead, 'the damaged row to be marked dead');
  assert.equal(poison.id, poisonId);
  assert.match(poison.lastError ?? '', /cannot be turned into a request body/);
  assert.equal(a.requestsFor('evt_poison').length, 0);
  assert.equal(a.requests.length, 5);
  assert.equal(b.requests.length, 5);
});

/** A store with one organization and its webhook, and a clock the test sets. */
function queueStore(t: TestContext): { store: Store; clock: { at: number } & Clock } {
  const clock = { at: 1_000_000, now: () => clock.at };
  const store = openSqliteStore(join(tempDir(t, 'hookrelay-claim-'), 'hookrelay.db'), clock);
  t.after(() => store.close());
  repos(store).orgs.insert({ id: 'org-a', name: 'org-a', createdAt: 0 });
  repos(store).webhooks.upsert('org-a', 'https://hooks.example/a', false, null, 0);
  return { store, clock };
}

async function ingestOne(store: Store, eventId: string, request: string): Promise<number> {
  const line = { bytes: Buffer.from(JSON.stringify({ organization_id: 'org-a', anticipation_request_id: request, status: 'approved', event_id: eventId })), position: null };
  await createIngestService(store, silentLog).ingest('test', [line], null);
  return (store.db.prepare('SELECT d.id FROM deliveries d JOIN events e ON e.seq = d.event_seq WHERE e.id = ?').get(eventId) as { id: number }).id;
}

test('a claim always ends: rows that wait behind a tried delivery of their request queued after them are not taken, and the page is read once', async (t) => {
  const { store, clock } = queueStore(t);
  const services = createServices(store, loadConfig({ env: {}, overrides: { stateDir: tempDir(t) } }));
  // Ten fresh changes of one request, then a delivery of the same request queued after them
  // that was tried and is due again, sooner than they are (as a replay of an old event would be).
  const fresh: number[] = [];
  for (let i = 0; i < 10; i++) fresh.push(await ingestOne(store, `evt_k${i}`, 'ar_k'));
  const tried = await ingestOne(store, 'evt_k_replayed', 'ar_k');
  const other = await ingestOne(store, 'evt_other', 'ar_other');
  store.db.transaction(() => {
    repos(store).deliveries.lease([tried], clock.at + 30_000, clock.at);
    repos(store).deliveries.settle(tried, { status: DeliveryStatus.pending, attempts: 1, nextAttemptAt: clock.at - 60_000, at: clock.at, statusCode: 500, error: 'HTTP 500' });
  })();
  clock.at += 1_000;

  const claim = (upTo: number) => services.outbox.flush({ finished: [], released: [], claim: { wanted: [{ orgId: 'org-a', upTo }], leaseMs: 30_000 } });
  // The claim loop before issue 9 leased the tried one, skipped the fresh ones of its request
  // in memory, found a full page with room left, read the same page again, and never ended.
  const first = await claim(2);
  assert.deepEqual(first.claimed.map((d) => d.id), [tried]);
  assert.deepEqual(first.drained, [], 'a full page was read: the organization may have more');
  // The next claim makes progress: the leased one now holds its request back in the query itself.
  assert.deepEqual((await claim(2)).claimed.map((d) => d.id), [other]);
  assert.deepEqual((await claim(4)).claimed, [], 'a change of a request with a delivery in flight was claimed');
  assert.ok(fresh.every((id) => deliveriesOf(store, 'org-a').find((d) => d.id === id)?.attempts === 0));
  // Once the tried one is delivered, its request goes on in queue order, one at a time.
  repos(store).deliveries.settle(tried, { status: DeliveryStatus.delivered, attempts: 2, nextAttemptAt: clock.at, at: clock.at, statusCode: 200, error: null });
  assert.deepEqual((await claim(4)).claimed.map((d) => d.id), [fresh[0]]);
});

test('the clock steps forward then back: fresh deliveries go out at once, before and after a restart; every queue uses one time base', async (t) => {
  const testTls = createTestTls(t);
  const receiver = await startReceiver(t, testTls);
  const stateDir = tempDir(t);
  const config = loadConfig({
    env: {},
    overrides: {
      stateDir,
      'api.listen': '127.0.0.1:0',
      'log.level': 'silent',
      'delivery.caFile': testTls.caFile,
      'delivery.allowNetworks': '127.0.0.1/32',
      'delivery.jitterPercent': '0',
      'delivery.retrySchedule': '1s,1s',
      'feed.pollInterval': '20',
      'delivery.pollInterval': '20ms',
    },
  });
  const DAY = 86_400_000;
  const clock = { offset: 0, now: () => Date.now() + clock.offset };
  const store = openSqliteStore(config.database.path, clock);
  t.after(() => store.close());
  const services = createServices(store, config);
  await seedOrg(services, 'org-a');
  await services.webhooks.register(BY_TEST, 'org-a', { webhook_url: receiver.url });
  const feed = (id: string, request = `ar_${id}`) => appendFeed(config.feed.path, [feedLine('org-a', id, request)]);
  const delivered = (id: string, what: string) => waitForDelivery(store, 'org-a', id, (d) => d.status === DeliveryStatus.delivered, what, 5_000);

  let relay = createRelay(config, { log: silentLog, clock });
  await relay.start();
  t.after(() => relay.stop());

  // A day ahead (a VM restored from a snapshot, a board before NTP): queued and sent.
  clock.offset = DAY;
  feed('evt_ahead');
  const ahead = await delivered('evt_ahead', 'the event received while the clock was a day ahead');
  // Back to the right time: the next events are queued after it (queue time never goes back)...
  clock.offset = 0;
  feed('evt_back_1');
  const back = await delivered('evt_back_1', 'an event received after the clock stepped back (it must not wait a day)');
  assert.ok(back.createdAt >= ahead.createdAt, 'queue times went back with the clock');
  // ... a replay and a test event share that time base and go out at once too...
  const replayed = await services.deliveryLog.replay(BY_TEST, 'org-a', ahead.id);
  assert.ok(replayed.createdAt >= back.createdAt, 'a replay was queued on another time base than ingestion');
  const testEvent = await services.deliveryLog.sendTest(BY_TEST, 'org-a');
  await waitFor('the replay and the test event', () => {
    const rows = deliveriesOf(store, 'org-a');
    return [replayed.id, testEvent.id].every((id) => rows.find((d) => d.id === id)?.status === DeliveryStatus.delivered);
  }, 5_000);
  assert.ok(testEvent.createdAt >= back.createdAt);

  // ... and after a restart at the right time.
  await relay.stop();
  relay = createRelay(config, { log: silentLog, clock });
  await relay.start();
  feed('evt_after_restart');
  await delivered('evt_after_restart', 'an event received after a restart, the clock behind the newest queue time');

  // A retry scheduled after the step is due by the clock: it waits its second, not a day.
  let failOnce = true;
  receiver.respond(() => {
    if (!failOnce) return { status: 200 };
    failOnce = false;
    return { status: 500 };
  });
  feed('evt_retried');
  const retried = await delivered('evt_retried', 'an event whose first attempt failed, retried a second later');
  assert.equal(retried.attempts, 2);
  assert.equal(receiver.requestsFor('evt_ahead').length, 2, 'the original and the replay');
});

test('new work is claimed at once while slots are free, not at the next group commit', async (t) => {
  // A group-commit window of a second (the longest allowed), and no polls: only the claim that
  // new work asks for can explain a delivery within a fraction of it. (Without it, each line,
  // appended 30 ms after the arrival that a commit followed, would wait for the next commit:
  // nearly a second.)
  // Slots enough for every attempt whose outcome waits for that window.
  const rig = await startDeliveryRig(t, { ...NO_POLLS, 'delivery.groupCommitInterval': '1s', 'delivery.perWebhookConcurrency': '8' });
  const receiver = await startReceiver(t, rig.tls);
  await seedOrg(rig.relay.services, 'org-a');
  await rig.relay.services.webhooks.register(BY_TEST, 'org-a', { webhook_url: receiver.url });
  rig.feed(feedLine('org-a', 'evt_claim_0'));
  await receiver.waitForRequests(1, 10_000);

  const latencies = await appendOneByOne(rig, receiver, 'evt_claim', 30);
  // Before, each waited for the window to end. The bound sits between: a busy machine takes
  // tens of ms, not most of a second.
  assert.ok(Math.max(...latencies) < 600, `append-to-arrival ${latencies.join(', ')} ms with a 1 s group-commit window`);
  // Outcomes still wait for their group commit, and are all recorded.
  await waitFor('every outcome recorded', () => deliveriesOf(rig.relay.store, 'org-a').filter((d) => d.status === DeliveryStatus.delivered).length === 6, 10_000);
});

test('a change that waits behind its request\'s attempt goes out when that attempt ends, without a poll', async (t) => {
  const rig = await startDeliveryRig(t, NO_POLLS);
  let holdUntil = 0;
  const receiver = await startReceiver(t, rig.tls, async () => {
    const wait = holdUntil - Date.now();
    if (wait > 0) await sleep(wait);
    return { status: 200 };
  });
  await seedOrg(rig.relay.services, 'org-a');
  await rig.relay.services.webhooks.register(BY_TEST, 'org-a', { webhook_url: receiver.url });
  rig.feed(feedLine('org-a', 'evt_warm'));
  await receiver.waitForRequests(1, 10_000);

  // 1. Queued while the first change of its request is being attempted (the receiver holds it).
  holdUntil = Date.now() + 400;
  rig.feed(feedLine('org-a', 'evt_r1_a', 'ar_r1'));
  await waitFor('the first change in flight', () => receiver.requestsFor('evt_r1_a').length === 1, 5_000);
  rig.feed(feedLine('org-a', 'evt_r1_b', 'ar_r1', 'rejected'));
  // 2. Two changes of another request in one batch: the claim sees the second behind the first.
  rig.feed(feedLine('org-a', 'evt_r2_a', 'ar_r2'), feedLine('org-a', 'evt_r2_b', 'ar_r2', 'rejected'));

  // With polls a minute apart, each later change can only go out because the end of the
  // attempt it waited behind brought its webhook another look.
  for (const [first, later] of [['evt_r1_a', 'evt_r1_b'], ['evt_r2_a', 'evt_r2_b']] as const) {
    await waitFor(`${later} delivered`, () => receiver.requestsFor(later).length === 1, 5_000);
    const [a] = receiver.requestsFor(first);
    const [b] = receiver.requestsFor(later);
    assert.ok(a!.index < b!.index, `${later} arrived before ${first}`);
  }
});

/**
 * What the admin API added for the console (issue 27), over HTTP against an in-process relay
 * and real HTTPS receivers: the chart's attempts per bucket (GET /webhook/stats), the delivery
 * log searched by anticipation request (request_id) and paged through a time window, the
 * request as sent on GET /webhook/deliveries/{id} (its signature verified with the
 * standardwebhooks package, and withheld from viewers), and the secret rotation under way in
 * get_webhook. Each with another organization seeing nothing, and bad parameters answered 422
 * without a change: times that do not exist (2026-02-30, 24:00) too, never rolled over. The search's reading in chunks is tested on the service, with small chunks.
 */
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { test, type TestContext } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { Webhook } from 'standardwebhooks';
import { orderingKey } from '../../src/domain/ordering.ts';
import { createDeliveryLogService, type LogQuery } from '../../src/services/delivery-log.ts';
import { createIngestService } from '../../src/services/ingest.ts';
import { openSqliteStore, type SqliteStore } from '../../src/store/sqlite/store.ts';
import { VERSION } from '../../src/version.ts';
import { assertProblem, assertUnchanged, call, seedOrg, silentLog, tempDir } from '../helpers/helpers.ts';
import { attemptsOf, deliveriesOf, eventIdOf, feedLine, startDeliveryRig, startReceiver, waitFor, waitForDelivery } from '../helpers/receivers.ts';
import { repos } from '../helpers/sqlite-repos.ts';
import { BY_TEST, testAudit } from '../helpers/audit-helpers.ts';

const MINUTE = 60_000;

test('GET /webhook/stats counts the attempts of the last hour per minute and of the last day per quarter hour, succeeded and failed; another organization counts none of them', async (t) => {
  const rig = await startDeliveryRig(t, { 'delivery.retrySchedule': '1s' });
  // evt_bad fails twice (then dead), the others are delivered at once.
  const receiver = await startReceiver(t, rig.tls, (req) => (eventIdOf(req) === 'evt_bad' ? { status: 503 } : { status: 204 }));
  const a = await seedOrg(rig.relay.services, 'org-a');
  const b = await seedOrg(rig.relay.services, 'org-b');
  await rig.relay.services.webhooks.register(BY_TEST, 'org-a', { webhook_url: receiver.url });
  await rig.relay.services.webhooks.register(BY_TEST, 'org-b', { webhook_url: receiver.url });
  const before = Date.now();
  rig.feed(feedLine('org-a', 'evt_ok_1'), feedLine('org-a', 'evt_ok_2'), feedLine('org-a', 'evt_bad'), feedLine('org-b', 'evt_b_1'));
  await waitForDelivery(rig.relay.store, 'org-a', 'evt_bad', (d) => d.status === 'dead', 'the failing delivery to die');
  for (const [org, id] of [['org-a', 'evt_ok_2'], ['org-b', 'evt_b_1']] as const) await waitForDelivery(rig.relay.store, org, id, (d) => d.status === 'delivered', 'a delivery');
  const after = Date.now();

  const viewerA = rig.relay.token('org-a', a.viewer);
  const hour = await call(rig.relay.baseUrl, 'GET', '/webhook/stats', { token: viewerA });
  assert.equal(hour.status, 200, hour.text);
  const stats = hour.body as { window: string; bucket_seconds: number; from: string; until: string; succeeded: number; failed: number; buckets: Array<{ start: string; succeeded: number; failed: number }> };
  assert.equal(stats.window, '1h', 'the last hour by default');
  assert.equal(stats.bucket_seconds, 60);
  assert.equal(stats.buckets.length, 60);
  const from = Date.parse(stats.from);
  const until = Date.parse(stats.until);
  assert.equal(from % MINUTE, 0, 'buckets start on the minute');
  assert.equal(until - from, 3_600_000);
  assert.ok(until > after && until - MINUTE <= Date.now(), 'the last bucket is the one under way');
  stats.buckets.forEach((bucket, i) => assert.equal(Date.parse(bucket.start), from + i * MINUTE));
  assert.deepEqual([stats.succeeded, stats.failed], [2, 2], 'two deliveries at once, two failed attempts of evt_bad');
  assert.deepEqual(
    [stats.buckets.reduce((n, x) => n + x.succeeded, 0), stats.buckets.reduce((n, x) => n + x.failed, 0)],
    [2, 2],
    'the totals are the sum of the buckets',
  );
  // Each attempt sits in the bucket of the minute it started.
  const recorded = deliveriesOf(rig.relay.store, 'org-a').flatMap((d) => attemptsOf(rig.relay.store, d.id));
  assert.equal(recorded.length, 4);
  const expected = new Map<number, { succeeded: number; failed: number }>();
  for (const attempt of recorded) {
    assert.ok(attempt.startedAt >= before - 1000 && attempt.startedAt <= after);
    const start = Math.floor(attempt.startedAt / MINUTE) * MINUTE;
    const counts = expected.get(start) ?? { succeeded: 0, failed: 0 };
    if (attempt.outcome === 'delivered') counts.succeeded++;
    else counts.failed++;
    expected.set(start, counts);
  }
  assert.deepEqual(
    stats.buckets.filter((x) => x.succeeded + x.failed > 0).map((x) => [Date.parse(x.start), { succeeded: x.succeeded, failed: x.failed }]),
    [...expected].sort((x, y) => x[0] - y[0]),
  );

  const day = await call(rig.relay.baseUrl, 'GET', '/webhook/stats?window=24h', { token: viewerA });
  assert.equal(day.status, 200, day.text);
  assert.deepEqual([day.body.window, day.body.bucket_seconds, day.body.buckets.length, day.body.succeeded, day.body.failed], ['24h', 900, 96, 2, 2]);
  assert.equal(Date.parse(day.body.until) - Date.parse(day.body.from), 86_400_000);
  assert.equal(Date.parse(day.body.from) % (15 * MINUTE), 0, 'quarter hours');

  // org-b: its own delivery only; an organization without a webhook or attempts: none.
  const ofB = await call(rig.relay.baseUrl, 'GET', '/webhook/stats?window=24h', { token: rig.relay.token('org-b', b.admin) });
  assert.deepEqual([ofB.body.succeeded, ofB.body.failed], [1, 0]);
  const c = await seedOrg(rig.relay.services, 'org-c');
  const ofC = await call(rig.relay.baseUrl, 'GET', '/webhook/stats', { token: rig.relay.token('org-c', c.admin) });
  assert.equal(ofC.status, 200);
  assert.deepEqual([ofC.body.succeeded, ofC.body.failed, ofC.body.buckets.length], [0, 0, 60]);

  // Bad windows: 422 naming the parameter and what it may be; nothing changed.
  for (const query of ['?window=7d', '?window=', '?window=1H']) {
    const res = await assertUnchanged(rig.relay.store, () => call(rig.relay.baseUrl, 'GET', `/webhook/stats${query}`, { token: viewerA }));
    const problem = assertProblem(res, 422, 'validation_failed');
    assert.deepEqual(problem.invalid_params, [{ name: 'window', reason: 'must be one of 1h, 24h' }]);
  }
  assertProblem(await call(rig.relay.baseUrl, 'GET', '/webhook/stats'), 401, 'missing_token');
});

test('GET /webhook/stats puts attempts in the bucket of the minute (or quarter hour) they started in, and leaves out those before the window', async (t) => {
  const rig = await startDeliveryRig(t);
  const receiver = await startReceiver(t, rig.tls);
  const { admin } = await seedOrg(rig.relay.services, 'org-a');
  await rig.relay.services.webhooks.register(BY_TEST, 'org-a', { webhook_url: receiver.url });
  rig.feed(feedLine('org-a', 'evt_seed'));
  const delivery = await waitForDelivery(rig.relay.store, 'org-a', 'evt_seed', (d) => d.status === 'delivered', 'the delivery');
  // Attempts of that delivery at chosen times (as the dispatcher records them): 30 and 31.5
  // minutes ago, 5 minutes ago twice, 2 hours ago, 25 hours ago.
  const now = Date.now();
  const at = (agoMs: number, outcome: string) => ({
    deliveryId: delivery.id,
    attempt: 9,
    startedAt: now - agoMs,
    durationMs: 3,
    url: receiver.url,
    statusCode: outcome === 'delivered' ? 200 : 500,
    errorClass: outcome === 'delivered' ? null : 'http_status',
    errorDetail: null,
    responseBody: null,
    outcome,
    sentTimestamp: null,
    sentSignature: null,
  });
  repos(rig.relay.store).deliveries.insertAttempts([
    at(30 * MINUTE, 'retry'),
    at(31.5 * MINUTE, 'dead'),
    at(5 * MINUTE, 'delivered'),
    at(5 * MINUTE, 'retry'),
    at(120 * MINUTE, 'delivered'),
    at(25 * 60 * MINUTE, 'delivered'),
  ]);
  const token = rig.relay.token('org-a', admin);
  const nonEmpty = (body: { buckets: Array<{ start: string; succeeded: number; failed: number }> }) =>
    body.buckets.filter((b) => b.succeeded + b.failed > 0).map((b) => [Date.parse(b.start), b.succeeded, b.failed]);
  const floor = (ms: number, size: number) => Math.floor(ms / size) * size;
  const hour = await call(rig.relay.baseUrl, 'GET', '/webhook/stats?window=1h', { token });
  const seed = attemptsOf(rig.relay.store, delivery.id).find((x) => x.attempt === 1)!;
  const expectedHour = new Map<number, [number, number]>();
  const add = (map: Map<number, [number, number]>, start: number, ok: boolean) => {
    const [s, f] = map.get(start) ?? [0, 0];
    map.set(start, ok ? [s + 1, f] : [s, f + 1]);
  };
  for (const [ago, ok] of [[30 * MINUTE, false], [31.5 * MINUTE, false], [5 * MINUTE, true], [5 * MINUTE, false]] as const) add(expectedHour, floor(now - ago, MINUTE), ok);
  add(expectedHour, floor(seed.startedAt, MINUTE), true);
  assert.deepEqual(nonEmpty(hour.body), [...expectedHour].sort((x, y) => x[0] - y[0]).map(([start, [s, f]]) => [start, s, f]));

  const day = await call(rig.relay.baseUrl, 'GET', '/webhook/stats?window=24h', { token });
  const quarter = 15 * MINUTE;
  const expectedDay = new Map<number, [number, number]>();
  for (const [ago, ok] of [[30 * MINUTE, false], [31.5 * MINUTE, false], [5 * MINUTE, true], [5 * MINUTE, false], [120 * MINUTE, true]] as const) add(expectedDay, floor(now - ago, quarter), ok);
  add(expectedDay, floor(seed.startedAt, quarter), true);
  assert.deepEqual(nonEmpty(day.body), [...expectedDay].sort((x, y) => x[0] - y[0]).map(([start, [s, f]]) => [start, s, f]), 'the attempt of 25 hours ago is not in the day');
});

test('GET /webhook/deliveries?request_id= lists the deliveries of that request only, newest first, with the other filters and pages; other organizations and bad ids get nothing', async (t) => {
  const rig = await startDeliveryRig(t, { 'delivery.retrySchedule': '1h' });
  const receiver = await startReceiver(t, rig.tls, (req) => (eventIdOf(req) === 'evt_a3' ? { status: 500 } : { status: 200 }));
  const a = await seedOrg(rig.relay.services, 'org-a');
  const b = await seedOrg(rig.relay.services, 'org-b');
  await rig.relay.services.webhooks.register(BY_TEST, 'org-a', { webhook_url: receiver.url });
  await rig.relay.services.webhooks.register(BY_TEST, 'org-b', { webhook_url: receiver.url });
  // Three changes of ar_shared in org-a, one of ar_other, and org-b's own ar_shared.
  rig.feed(
    feedLine('org-a', 'evt_a1', 'ar_shared', 'submitted'),
    feedLine('org-a', 'evt_x', 'ar_other'),
    feedLine('org-b', 'evt_b1', 'ar_shared'),
    feedLine('org-a', 'evt_a2', 'ar_shared', 'approved'),
    feedLine('org-a', 'evt_a3', 'ar_shared', 'paid'),
  );
  await waitFor('org-a\'s deliveries to settle', () => {
    const rows = deliveriesOf(rig.relay.store, 'org-a');
    return rows.length === 4 && rows.every((d) => d.status === 'delivered' || (d.eventId === 'evt_a3' && d.attempts === 1)) && rows;
  });
  await waitForDelivery(rig.relay.store, 'org-b', 'evt_b1', (d) => d.status === 'delivered', "org-b's delivery");
  const tokenA = rig.relay.token('org-a', a.viewer);
  const list = async (query: string, token = tokenA) => {
    const res = await call(rig.relay.baseUrl, 'GET', `/webhook/deliveries${query}`, { token });
    assert.equal(res.status, 200, res.text);
    return res.body as { data: Array<{ event_id: string; anticipation_request_id: string; status: string }>; next_cursor: string | null };
  };

  const shared = await list('?request_id=ar_shared');
  assert.deepEqual(shared.data.map((d) => d.event_id), ['evt_a3', 'evt_a2', 'evt_a1'], 'its three, newest first');
  assert.ok(shared.data.every((d) => d.anticipation_request_id === 'ar_shared'));
  assert.equal(shared.next_cursor, null);
  assert.deepEqual((await list('?request_id=ar_shared&status=failed')).data.map((d) => d.event_id), ['evt_a3']);
  assert.deepEqual((await list('?request_id=ar_shared&status=delivered')).data.map((d) => d.event_id), ['evt_a2', 'evt_a1']);
  assert.deepEqual((await list('?request_id=ar_other')).data.map((d) => d.event_id), ['evt_x']);
  assert.deepEqual(await list('?request_id=ar_nobody'), { data: [], next_cursor: null });
  assert.deepEqual((await list(`?request_id=ar_shared&until=${encodeURIComponent(new Date(Date.now() - 3_600_000).toISOString())}`)).data, [], 'before any was queued');

  // Pages of one.
  const first = await list('?request_id=ar_shared&limit=1');
  assert.deepEqual(first.data.map((d) => d.event_id), ['evt_a3']);
  assert.ok(first.next_cursor);
  const second = await list(`?request_id=ar_shared&limit=1&cursor=${first.next_cursor}`);
  assert.deepEqual(second.data.map((d) => d.event_id), ['evt_a2']);
  const third = await list(`?request_id=ar_shared&limit=1&cursor=${second.next_cursor}`);
  assert.deepEqual(third.data.map((d) => d.event_id), ['evt_a1']);
  assert.equal(third.next_cursor, null);

  // org-b sees its own change of a request of the same name, never org-a's.
  assert.deepEqual((await list('?request_id=ar_shared', rig.relay.token('org-b', b.admin))).data.map((d) => d.event_id), ['evt_b1']);
  assert.deepEqual((await list('?request_id=ar_other', rig.relay.token('org-b', b.admin))).data, []);

  // Bad ids: 422 naming request_id and what it must be; nothing changed.
  for (const bad of ['', 'x'.repeat(201), 'ar\u0001x', 'ar\nx']) {
    const res = await assertUnchanged(rig.relay.store, () => call(rig.relay.baseUrl, 'GET', `/webhook/deliveries?request_id=${encodeURIComponent(bad)}`, { token: tokenA }));
    const problem = assertProblem(res, 422, 'validation_failed');
    assert.deepEqual(problem.invalid_params, [{ name: 'request_id', reason: 'must be an anticipation request id: 1 to 200 characters, no control characters' }]);
  }
  assert.equal((await list(`?request_id=${encodeURIComponent('é'.repeat(200))}`)).data.length, 0, '200 characters are fine, whatever their bytes');
});

/** Dates and times that do not exist, each of which Date.parse would roll over into another time, or refuses only by luck. */
const IMPOSSIBLE_TIMES = [
  '2026-02-30T00:00:00Z',
  '2026-02-29T00:00:00Z',
  '2026-04-31T00:00:00Z',
  '2026-11-31T00:00:00Z',
  '2027-02-29T00:00:00Z',
  '2100-02-29T00:00:00Z',
  '2026-11-22T24:00:00Z',
  '2026-11-22T08:60:00Z',
  '2026-11-22T08:00:60Z',
  '2026-11-22T08:00:00+24:00',
  '2026-11-22T08:00:00-01:60',
  '2026-13-01T00:00:00Z',
  '2026-00-10T00:00:00Z',
  '2026-11-00T00:00:00Z',
];
/** Not RFC 3339 date-times: no offset (it would be read in the daemon's time zone), no seconds, a date alone, words. */
const MALFORMED_TIMES = ['2026-11-22T08:00:00', '2026-11-22T08:00Z', '2026-11-22', '+002026-11-22T08:00:00Z', 'yesterday', ''];

/** `ms` as an RFC 3339 date-time with the offset `minutes` east of UTC (the same instant). */
function withOffset(ms: number, minutes: number): string {
  const abs = Math.abs(minutes);
  const offset = `${minutes < 0 ? '-' : '+'}${String(Math.floor(abs / 60)).padStart(2, '0')}:${String(abs % 60).padStart(2, '0')}`;
  return new Date(ms + minutes * MINUTE).toISOString().slice(0, 23) + offset;
}

test('since and until that name a date or time that does not exist are 422 naming the parameter, on the log and on recover (which then recovers nothing); leap days and offsets work', async (t) => {
  // Some 160 refused requests in a row: no rate limit in the way.
  const rig = await startDeliveryRig(t, { 'api.rateLimitPerMinute': '0' });
  const receiver = await startReceiver(t, rig.tls);
  const { admin } = await seedOrg(rig.relay.services, 'org-a');
  const token = rig.relay.token('org-a', admin);
  const store = rig.relay.store;
  const before = Date.now() - MINUTE;
  // Stored while the organization had no webhook: what a recover of its window queues.
  rig.feed(feedLine('org-a', 'evt_orphan'));
  await waitFor('the orphan event to be stored', () => store.db.prepare("SELECT 1 FROM events WHERE id = 'evt_orphan'").get());
  await rig.relay.services.webhooks.register(BY_TEST, 'org-a', { webhook_url: receiver.url });
  rig.feed(feedLine('org-a', 'evt_listed'));
  await waitForDelivery(store, 'org-a', 'evt_listed', (d) => d.status === 'delivered', 'the listed delivery');

  const reason = /^must be an RFC 3339 date-time that exists, with seconds and an offset, such as 2026-11-22T08:00:00Z\b/;
  const assertRefused = (res: Awaited<ReturnType<typeof call>>, name: string, what: string) => {
    const problem = assertProblem(res, 422, 'validation_failed');
    assert.equal(problem.invalid_params.length, 1, `${what}: ${res.text}`);
    assert.equal(problem.invalid_params[0].name, name, what);
    assert.match(problem.invalid_params[0].reason, reason, what);
  };
  const list = (query: string) => call(rig.relay.baseUrl, 'GET', `/webhook/deliveries?${query}`, { token });
  const recover = (body: Record<string, unknown>) => call(rig.relay.baseUrl, 'POST', '/webhook/recover', { token, body });
  for (const bad of [...IMPOSSIBLE_TIMES, ...MALFORMED_TIMES]) {
    for (const name of ['since', 'until']) {
      assertRefused(await assertUnchanged(store, () => list(`${name}=${encodeURIComponent(bad)}`)), name, `GET ?${name}=${bad}`);
    }
    assertRefused(await assertUnchanged(store, () => recover({ since: bad })), 'since', `recover since ${bad}`);
    assertRefused(await assertUnchanged(store, () => recover({ since: withOffset(before, 0), until: bad })), 'until', `recover until ${bad}`);
  }
  assertRefused(await assertUnchanged(store, () => recover({ since: Date.now() })), 'since', 'a number');
  assert.deepEqual(deliveriesOf(store, 'org-a').map((d) => d.eventId), ['evt_listed'], 'no refused recover queued the orphan');

  // Real dates: leap days (2000 and 2028), offsets east and west of UTC, read as the instant they name.
  const listed = await list(`since=${encodeURIComponent('2000-02-29T23:59:59.999-01:00')}&until=${encodeURIComponent('2028-02-29T00:00:00+05:30')}`);
  assert.equal(listed.status, 200, listed.text);
  assert.deepEqual(listed.body.data.map((d: { event_id: string }) => d.event_id), ['evt_listed']);
  const queuedAt = Date.parse(listed.body.data[0].created_at);
  const ids = async (query: string) => {
    const res = await list(query);
    assert.equal(res.status, 200, res.text);
    return res.body.data.map((d: { event_id: string }) => d.event_id);
  };
  assert.deepEqual(await ids(`since=${encodeURIComponent(withOffset(queuedAt, 330))}`), ['evt_listed'], 'since the very ms it was queued, at +05:30');
  assert.deepEqual(await ids(`since=${encodeURIComponent(withOffset(queuedAt + 1, -480))}`), [], 'since a ms later, at -08:00');
  assert.deepEqual(await ids(`until=${encodeURIComponent(withOffset(queuedAt + 1, -90))}`), ['evt_listed'], 'until a ms later, at -01:30');
  assert.deepEqual(await ids(`until=${encodeURIComponent(withOffset(queuedAt, 60))}`), [], 'until the ms it was queued (excluded), at +01:00');

  const recovered = await recover({ since: withOffset(before, -300), until: '2028-02-29T00:00:00+01:00' });
  assert.equal(recovered.status, 202, recovered.text);
  assert.equal(recovered.body.requeued, 1, recovered.text);
  await waitForDelivery(store, 'org-a', 'evt_orphan', (d) => d.status === 'delivered', 'the recovered orphan');
});

/** A store on a clock the test sets, with organizations a and b, each with a webhook. */
function storeAt(t: TestContext): { store: SqliteStore; clock: { at: number; now(): number } } {
  const clock = { at: 1_000, now: () => clock.at };
  const store = openSqliteStore(join(tempDir(t), 'hookrelay.db'), clock);
  t.after(() => store.close());
  for (const org of ['org-a', 'org-b']) {
    repos(store).orgs.insert({ id: org, name: org, createdAt: 0 });
    repos(store).webhooks.upsert(org, `https://hooks.example/${org}`, true, `whsec_${Buffer.alloc(32, 1).toString('base64')}`, 0);
  }
  return { store, clock };
}

/** Ingests one change at `at` (queueing its delivery); returns the delivery id. */
async function queueAt(store: SqliteStore, clock: { at: number }, at: number, eventId: string, requestId: string, orgId = 'org-a'): Promise<number> {
  clock.at = at;
  const line = { bytes: Buffer.from(JSON.stringify({ organization_id: orgId, anticipation_request_id: requestId, status: 'approved', event_id: eventId })), position: null };
  await createIngestService(store, silentLog).ingest('test', [line], null);
  return store.db.prepare('SELECT d.id FROM deliveries d JOIN events e ON e.seq = d.event_seq WHERE e.id = ?').pluck().get(eventId) as number;
}

/** Every page of a query, following next_cursor: the ids of each page. */
async function allPages(log: ReturnType<typeof createDeliveryLogService>, orgId: string, query: LogQuery): Promise<number[][]> {
  const pages: number[][] = [];
  let beforeId: number | undefined;
  for (let i = 0; i < 100; i++) {
    const page = await log.page(orgId, { ...query, beforeId });
    pages.push(page.deliveries.map((d) => d.id));
    if (page.nextBeforeId === null) return pages;
    beforeId = page.nextBeforeId;
  }
  throw new Error('more than 100 pages');
}

test('a time window is paged from its own place in the log, each delivery once; a search by request reads the log a chunk at a time and goes on from a cursor when a call has read its share', async (t) => {
  const { store, clock } = storeAt(t);
  const ids: Array<{ id: number; at: number; request: string; org: string }> = [];
  for (let i = 0; i < 40; i++) {
    const org = i % 3 === 2 ? 'org-b' : 'org-a';
    const request = i % 5 === 0 ? 'ar_needle' : `ar_${i}`;
    const at = 10_000 + i * 1000;
    ids.push({ id: await queueAt(store, clock, at, `evt_${i}`, request, org), at, request, org });
  }
  const log = createDeliveryLogService(store, { userAgent: 'test', requestSearch: { chunkIds: 3, maxIds: 7 } }, testAudit(store));
  const newestFirst = (keep: (d: (typeof ids)[number]) => boolean) => ids.filter(keep).map((d) => d.id).reverse();

  // A window: [15 s, 31 s) of org-a, in pages of 3, each delivery once, newest first.
  const window = await allPages(log, 'org-a', { since: 15_000, until: 31_000, limit: 3 });
  assert.deepEqual(window.flat(), newestFirst((d) => d.org === 'org-a' && d.at >= 15_000 && d.at < 31_000));
  assert.ok(window.slice(0, -1).every((p) => p.length === 3));
  assert.deepEqual(await allPages(log, 'org-a', { since: 99_000, limit: 3 }), [[]], 'a window after the last delivery');
  assert.deepEqual(await allPages(log, 'org-a', { until: 10_000, limit: 3 }), [[]], 'a window before the first');

  // The search by request: at most 7 ids a call, 3 a chunk. Pages may come back short (even
  // empty) with a cursor; following the cursors finds each of the request's deliveries once.
  const needle = await allPages(log, 'org-a', { requestId: 'ar_needle', limit: 2 });
  assert.deepEqual(needle.flat(), newestFirst((d) => d.org === 'org-a' && d.request === 'ar_needle'));
  assert.ok(needle.length > 3, `several calls: ${JSON.stringify(needle)}`);
  assert.ok(needle.some((p) => p.length < 2) && needle.slice(0, -1).some((p) => p.length === 0), `short pages on the way: ${JSON.stringify(needle)}`);
  assert.ok(needle.every((p) => p.length <= 2));
  // Within a window, the search reads only the window's ids.
  const inWindow = await allPages(log, 'org-a', { requestId: 'ar_needle', since: 20_000, until: 36_000, limit: 10 });
  assert.deepEqual(inWindow.flat(), newestFirst((d) => d.org === 'org-a' && d.request === 'ar_needle' && d.at >= 20_000 && d.at < 36_000));
  assert.equal(inWindow.length, Math.ceil(16 / 7), 'the window (16 ids) in calls of at most 7');
  assert.deepEqual((await allPages(log, 'org-b', { requestId: 'ar_needle', limit: 10 })).flat(), newestFirst((d) => d.org === 'org-b' && d.request === 'ar_needle'));
  // The ordering key is what the log is searched by.
  assert.equal(store.db.prepare('SELECT ordering_key FROM deliveries WHERE id = ?').pluck().get(ids[0]!.id), orderingKey('org-a', 'ar_needle'));
});

test('GET /webhook/deliveries/{id} shows the request as sent: every header the receiver got, the timestamp and signature of the attempt that sent it, the exact body, a signature that verifies (admins only); a preview signed now before any attempt; unsigned when signing is off; another organization gets 404', async (t) => {
  const rig = await startDeliveryRig(t);
  const receiver = await startReceiver(t, rig.tls);
  const a = await seedOrg(rig.relay.services, 'org-a');
  const b = await seedOrg(rig.relay.services, 'org-b');
  const secret = (await rig.relay.services.webhooks.register(BY_TEST, 'org-a', { webhook_url: receiver.url })).newSecret!;
  await rig.relay.services.webhooks.register(BY_TEST, 'org-b', { webhook_url: receiver.url, active_hmac: false });
  rig.feed(feedLine('org-a', 'evt_seen', 'ar_seen', 'approved', { data: { note: 'açaí ✓', amount_cents: 1200 } }), feedLine('org-b', 'evt_plain'));
  const delivered = await waitForDelivery(rig.relay.store, 'org-a', 'evt_seen', (d) => d.status === 'delivered', 'the delivery');
  const [sent] = receiver.requestsFor('evt_seen');
  assert.ok(sent);
  assert.equal(receiver.requestsFor('evt_seen').length, 1);

  const adminToken = rig.relay.token('org-a', a.admin);
  const res = await call(rig.relay.baseUrl, 'GET', `/webhook/deliveries/${delivered.id}`, { token: adminToken });
  assert.equal(res.status, 200, res.text);
  type Shown = { method: string; url: string; headers: Record<string, string>; body: string; attempt: number | null; sent_at: string | null; signed_at: string; signature: string };
  const request = res.body.request as Shown;
  assert.equal(request.method, 'POST');
  assert.equal(request.url, receiver.url);
  assert.equal(request.signature, 'included');
  // The request attempt 1 sent: the exact bytes the receiver got, and every header it got, its timestamp and signature included.
  const [attempt] = res.body.attempt_log as Array<{ attempt: number; started_at: string; webhook_timestamp: number | null; webhook_signature: string | null }>;
  assert.ok(attempt);
  assert.equal(request.attempt, 1);
  assert.equal(request.sent_at, attempt.started_at);
  assert.ok(Buffer.from(request.body, 'utf8').equals(sent.body), 'the body is not the bytes sent');
  assert.deepEqual(request.headers, sent.headers);
  assert.equal(request.headers['user-agent'], `hookrelay/${VERSION}`);
  assert.equal(request.headers['webhook-id'], 'evt_seen');
  assert.equal(Number(request.headers['webhook-timestamp']) * 1000, Date.parse(request.signed_at));
  // The attempt's own record: exactly the two headers the receiver got, and they verify over the body with the webhook's secret.
  assert.equal(attempt.webhook_timestamp, Number(sent.headers['webhook-timestamp']));
  assert.equal(attempt.webhook_signature, sent.headers['webhook-signature']);
  const recorded = { 'webhook-id': 'evt_seen', 'webhook-timestamp': String(attempt.webhook_timestamp), 'webhook-signature': attempt.webhook_signature! };
  assert.deepEqual(new Webhook(secret).verify(sent.body, recorded), JSON.parse(sent.body.toString('utf8')));
  assert.deepEqual(new Webhook(secret).verify(request.body, request.headers), JSON.parse(sent.body.toString('utf8')));
  assert.throws(() => new Webhook(secret).verify(request.body.replace('açaí', 'acai'), request.headers), /No matching signature/);
  assert.ok(!res.text.includes(secret) && !res.text.includes(secret.slice('whsec_'.length)), 'never the secret');
  // Read again later, the same request: recorded, not made anew.
  await sleep(1100);
  assert.deepEqual((await call(rig.relay.baseUrl, 'GET', `/webhook/deliveries/${delivered.id}`, { token: adminToken })).body.request, request);

  // A viewer sees the request and each attempt's timestamp, without a signature (it cannot read the secret either).
  const viewed = await call(rig.relay.baseUrl, 'GET', `/webhook/deliveries/${delivered.id}`, { token: rig.relay.token('org-a', a.viewer) });
  assert.equal(viewed.body.request.signature, 'withheld');
  assert.equal(viewed.body.request.headers['webhook-signature'], undefined);
  assert.equal(viewed.body.request.headers['webhook-timestamp'], sent.headers['webhook-timestamp']);
  assert.equal(viewed.body.request.attempt, 1);
  assert.equal(viewed.body.request.body, request.body);
  assert.equal(viewed.body.attempt_log[0].webhook_timestamp, attempt.webhook_timestamp);
  assert.equal(viewed.body.attempt_log[0].webhook_signature, null);
  assert.ok(!viewed.text.includes(attempt.webhook_signature!.slice('v1,'.length)), 'no signature anywhere in the viewer\'s answer');

  // After a rotation the attempt's request is still the one it sent (signed with the old secret alone);
  // a delivery never attempted (its webhook disabled) shows a preview signed now, by both secrets, the new one first.
  const rotated = await call(rig.relay.baseUrl, 'POST', '/webhook/rotate_secret', { token: adminToken });
  assert.deepEqual((await call(rig.relay.baseUrl, 'GET', `/webhook/deliveries/${delivered.id}`, { token: adminToken })).body.request, request);
  assert.equal(request.headers['webhook-signature']!.split(' ').length, 1);
  await call(rig.relay.baseUrl, 'POST', '/webhook/disable', { token: adminToken });
  const held = (await call(rig.relay.baseUrl, 'POST', '/webhook/test', { token: adminToken })).body.delivery;
  const heldDetail = (await call(rig.relay.baseUrl, 'GET', `/webhook/deliveries/${held.id}`, { token: adminToken })).body;
  const preview = heldDetail.request as Shown;
  assert.deepEqual(heldDetail.attempt_log, []);
  assert.deepEqual([preview.attempt, preview.sent_at, preview.signature], [null, null, 'included']);
  assert.equal(Number(preview.headers['webhook-timestamp']) * 1000, Date.parse(preview.signed_at));
  assert.ok(Math.abs(Date.parse(preview.signed_at) - Date.now()) < 10_000);
  assert.equal(preview.headers['webhook-signature']!.split(' ').length, 2);
  assert.ok(new Webhook(rotated.body.secret).verify(preview.body, preview.headers));
  assert.ok(new Webhook(secret).verify(preview.body, preview.headers));
  assert.equal(receiver.requestsFor(held.event_id).length, 0, 'the preview is not sent');
  await call(rig.relay.baseUrl, 'POST', '/webhook/enable', { token: adminToken });

  // org-b does not sign; org-a's delivery is not org-b's to see.
  const plain = await waitForDelivery(rig.relay.store, 'org-b', 'evt_plain', (d) => d.status === 'delivered', "org-b's delivery");
  const adminB = rig.relay.token('org-b', b.admin);
  const plainDetail = (await call(rig.relay.baseUrl, 'GET', `/webhook/deliveries/${plain.id}`, { token: adminB })).body;
  const unsigned = plainDetail.request;
  assert.equal(unsigned.signature, 'unsigned');
  assert.equal(unsigned.headers['webhook-signature'], undefined);
  assert.deepEqual(unsigned.headers, receiver.requestsFor('evt_plain')[0]!.headers);
  assert.deepEqual([plainDetail.attempt_log[0].webhook_timestamp, plainDetail.attempt_log[0].webhook_signature], [Number(unsigned.headers['webhook-timestamp']), null]);
  assertProblem(await call(rig.relay.baseUrl, 'GET', `/webhook/deliveries/${delivered.id}`, { token: adminB }), 404, 'delivery_not_found');

  // The test event, once sent: its whole stored body, as the receiver got it.
  const test = await waitForDelivery(rig.relay.store, 'org-a', held.event_id, (d) => d.status === 'delivered', 'the test event');
  const testRequest = (await call(rig.relay.baseUrl, 'GET', `/webhook/deliveries/${test.id}`, { token: adminToken })).body.request;
  const testSent = receiver.requestsFor(test.eventId)[0]!;
  assert.ok(Buffer.from(testRequest.body, 'utf8').equals(testSent.body));
  assert.deepEqual(testRequest.headers, testSent.headers);
  assert.equal(JSON.parse(testRequest.body).type, 'webhook.test');
  // Signed by both secrets during the rotation, as sent.
  assert.ok(new Webhook(rotated.body.secret).verify(testSent.body, testRequest.headers) && new Webhook(secret).verify(testSent.body, testRequest.headers));
});

test('get_webhook says until when the previous secret keeps signing after a rotation made through the API, and null once the grace period is over or when nothing was rotated', async (t) => {
  const rig = await startDeliveryRig(t, { 'delivery.secretRotationGrace': '4s' });
  const a = await seedOrg(rig.relay.services, 'org-a');
  const b = await seedOrg(rig.relay.services, 'org-b');
  await rig.relay.services.webhooks.register(BY_TEST, 'org-a', { webhook_url: 'https://127.0.0.1:9/a' });
  await rig.relay.services.webhooks.register(BY_TEST, 'org-b', { webhook_url: 'https://127.0.0.1:9/b' });
  const admin = rig.relay.token('org-a', a.admin);
  const viewer = rig.relay.token('org-a', a.viewer);
  const get = async (token: string) => {
    const res = await call(rig.relay.baseUrl, 'GET', '/webhook/get_webhook', { token });
    assert.equal(res.status, 200, res.text);
    return res.body as { previous_secret_expires_at: string | null };
  };
  assert.equal((await get(viewer)).previous_secret_expires_at, null, 'never rotated');

  const rotated = await call(rig.relay.baseUrl, 'POST', '/webhook/rotate_secret', { token: admin });
  assert.equal(rotated.status, 200, rotated.text);
  const until = rotated.body.previous_secret_expires_at as string;
  assert.ok(Date.parse(until) > Date.now());
  assert.equal((await get(viewer)).previous_secret_expires_at, until, 'a viewer sees the rotation under way');
  for (const action of ['disable', 'enable']) {
    const changed = await call(rig.relay.baseUrl, 'POST', `/webhook/${action}`, { token: admin });
    assert.equal(changed.body.previous_secret_expires_at, until, `POST /webhook/${action} answers it too`);
  }
  assert.equal((await get(rig.relay.token('org-b', b.admin))).previous_secret_expires_at, null, "org-a's rotation is not org-b's");

  // Signing turned off: no secret signs, whatever was rotated.
  await rig.relay.services.webhooks.register(BY_TEST, 'org-a', { webhook_url: 'https://127.0.0.1:9/a', active_hmac: false });
  assert.equal((await get(admin)).previous_secret_expires_at, null);
  await rig.relay.services.webhooks.register(BY_TEST, 'org-a', { webhook_url: 'https://127.0.0.1:9/a' });
  assert.equal((await get(admin)).previous_secret_expires_at, until, 'on again: the grace period still runs');

  await sleep(Math.max(0, Date.parse(until) - Date.now()) + 50);
  assert.equal((await get(admin)).previous_secret_expires_at, null, 'the grace period is over');
});

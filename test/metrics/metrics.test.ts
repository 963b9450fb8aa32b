/**
 * GET /metrics: the text exposition parsed as Prometheus would, after a known sequence of
 * ingests and deliveries to real HTTPS receivers (every counter and gauge checked exactly); the
 * listener of its own; the rule that metrics without a token are served only on loopback; the
 * token file.
 */
import assert from 'node:assert/strict';
import { appendFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { loadConfig } from '../../src/config/load.ts';
import { isLoopbackHost } from '../../src/domain/listen.ts';
import { createLogger } from '../../src/log.ts';
import { createMetrics } from '../../src/metrics/metrics.ts';
import { createRelay } from '../../src/relay.ts';
import type { QueueSnapshot, StatusService } from '../../src/services/status.ts';
import { call, silentLog, startRelay, tempDir } from '../helpers/helpers.ts';
import { parsePrometheusText, sampleValue, type Family } from '../helpers/prometheus-text.ts';
import { feedLine, startDeliveryRig, startReceiver, waitFor, waitForDelivery } from '../helpers/receivers.ts';
import { repos } from '../helpers/sqlite-repos.ts';
import { BY_TEST } from '../helpers/audit-helpers.ts';

async function scrape(baseUrl: string, headers: Record<string, string> = {}): Promise<Map<string, Family>> {
  const res = await fetch(`${baseUrl}/metrics`, { headers });
  const text = await res.text();
  assert.equal(res.status, 200, text);
  assert.match(res.headers.get('content-type') ?? '', /^text\/plain; version=0\.0\.4; charset=utf-8$/);
  return parsePrometheusText(text);
}

test('the parser of this test refuses malformed expositions (so the checks below can fail)', () => {
  const good = '# HELP a_total A.\n# TYPE a_total counter\na_total{x="1\\"2"} 3\n';
  assert.equal(sampleValue(parsePrometheusText(good), 'a_total', { x: '1"2' }), 3);
  for (const bad of [
    'a_total 3\n', // no TYPE
    '# TYPE a_total counter\na_total{x=1} 3\n', // unquoted value
    '# TYPE a_total counter\na_total three\n', // not a number
    '# TYPE a_total counter\na_total 1\na_total 2\n', // series twice
    '# TYPE h histogram\nh 1\n', // a histogram sample without suffix
    '# TYPE a_total counter\na_total 1', // no final newline
  ]) {
    assert.throws(() => parsePrometheusText(bad), Error, JSON.stringify(bad));
  }
});

test('after a known sequence of ingests and deliveries, every hookrelay metric has exactly the expected value', async (t) => {
  const { tls, relay, feed } = await startDeliveryRig(t, { 'delivery.retrySchedule': '1h', 'metrics.refreshInterval': '1s' });
  const ok = await startReceiver(t, tls, () => ({ status: 200 }));
  const unavailable = await startReceiver(t, tls, () => ({ status: 503 }));
  const gone = await startReceiver(t, tls, () => ({ status: 410 }));
  const { services, store } = relay;
  for (const [org, receiver] of [['org-ok', ok], ['org-503', unavailable], ['org-gone', gone]] as const) {
    await services.orgs.add(BY_TEST, { id: org });
    await services.webhooks.register(BY_TEST, org, { webhook_url: receiver.url });
  }

  // Before anything happened: every counter at 0, nothing queued.
  const empty = await scrape(relay.baseUrl);
  assert.equal(sampleValue(empty, 'hookrelay_events_ingested_total'), 0);
  assert.equal(sampleValue(empty, 'hookrelay_delivery_attempts_total', { outcome: 'delivered' }), 0);
  assert.equal(sampleValue(empty, 'hookrelay_queue_depth', { state: 'new' }), 0);
  assert.equal(sampleValue(empty, 'hookrelay_webhooks', { status: 'active' }), 3);

  // 5 events delivered, 1 answered 503 (retry in an hour), 2 for a webhook that answers 410 Gone
  // (one attempt: the webhook is disabled, both are held), 1 for an organization without a
  // webhook; 2 lines repeated, 1 line that is not JSON.
  const lines = [
    ...[1, 2, 3, 4, 5].map((i) => feedLine('org-ok', `evt_ok_${i}`)),
    feedLine('org-503', 'evt_503_1'),
    feedLine('org-gone', 'evt_gone_1'),
    feedLine('org-gone', 'evt_gone_2'),
    feedLine('org-none', 'evt_none_1'),
  ];
  feed(...lines, lines[0]!, lines[1]!);
  appendFileSync(relay.config.feed.path, 'this is not JSON\n');

  for (let i = 1; i <= 5; i++) await waitForDelivery(store, 'org-ok', `evt_ok_${i}`, (d) => d.status === 'delivered', 'delivered');
  await waitForDelivery(store, 'org-503', 'evt_503_1', (d) => d.attempts === 1, 'attempted once');
  await waitFor('the 410 webhook disabled', () => repos(store).webhooks.get('org-gone')?.status === 'disabled');
  await waitFor('every line committed', () => {
    const s = repos(store).feed.stats()[0];
    return s !== undefined && s.accepted + s.duplicates + s.quarantined === 12;
  });
  // The gauges of the first scrape are reused for metrics.refreshInterval (1 s): let it pass.
  await sleep(1100);

  const m = await scrape(relay.baseUrl);
  const value = (name: string, labels: Record<string, string> = {}) => sampleValue(m, name, labels);
  assert.equal(value('hookrelay_events_ingested_total'), 9);
  assert.equal(value('hookrelay_events_duplicate_total'), 2);
  assert.equal(value('hookrelay_feed_lines_quarantined_total'), 1);
  assert.equal(value('hookrelay_events_undeliverable_total'), 1);
  assert.deepEqual(
    Object.fromEntries(['delivered', 'retry', 'dead', 'disabled'].map((outcome) => [outcome, value('hookrelay_delivery_attempts_total', { outcome })])),
    { delivered: 5, retry: 1, dead: 0, disabled: 1 },
  );
  assert.equal(value('hookrelay_delivery_attempt_failures_total', { error: 'http_status' }), 2);
  assert.equal(value('hookrelay_delivery_attempt_failures_total', { error: 'timeout' }), 0);
  assert.equal(value('hookrelay_deliveries_unsendable_total'), 0);

  const histogram = m.get('hookrelay_delivery_attempt_duration_seconds')!;
  assert.equal(histogram.type, 'histogram');
  for (const [result, count] of [['success', 5], ['failure', 2]] as const) {
    assert.equal(value('hookrelay_delivery_attempt_duration_seconds_count', { result }), count);
    const buckets = histogram.samples.filter((s) => s.name.endsWith('_bucket') && s.labels.result === result);
    assert.equal(buckets.at(-1)!.labels.le, '+Inf');
    assert.equal(buckets.at(-1)!.value, count, 'the +Inf bucket holds every observation');
    for (let i = 1; i < buckets.length; i++) assert.ok(buckets[i]!.value >= buckets[i - 1]!.value, 'buckets are cumulative');
    assert.ok(value('hookrelay_delivery_attempt_duration_seconds_sum', { result }) > 0);
  }

  // Gauges read from the database: the 503 delivery waits for its retry in an hour (not due), the
  // two of the disabled webhook are held.
  assert.equal(value('hookrelay_queue_depth', { state: 'new' }), 0);
  assert.equal(value('hookrelay_queue_depth', { state: 'retrying' }), 1);
  assert.equal(value('hookrelay_queue_depth', { state: 'held' }), 2);
  assert.equal(value('hookrelay_queue_oldest_due_age_seconds'), 0);
  assert.deepEqual(
    Object.fromEntries(['active', 'failing', 'disabled'].map((status) => [status, value('hookrelay_webhooks', { status })])),
    { active: 2, failing: 0, disabled: 1 },
  );
  for (const [org, current] of [['org-ok', 'active'], ['org-503', 'active'], ['org-gone', 'disabled']] as const) {
    for (const status of ['active', 'failing', 'disabled']) assert.equal(value('hookrelay_webhook_status', { org, status }), status === current ? 1 : 0, `${org} ${status}`);
  }
  assert.equal(m.get('hookrelay_webhook_status')!.samples.length, 9, 'three series per webhook, none for the organization without one');
  assert.equal(value('hookrelay_feed_lag_bytes'), 0);
  assert.ok(value('hookrelay_metrics_refresh_seconds') > 0);
  assert.equal(value('hookrelay_build_info', { version: (await import('../../src/version.ts')).VERSION }), 1);
  // Node's process metrics, under their usual names.
  assert.ok(value('process_cpu_seconds_total') > 0);
  assert.ok(value('process_resident_memory_bytes') > 0);
  assert.equal(m.get('nodejs_eventloop_lag_seconds')?.type, 'gauge');

});

test('the oldest due delivery and the feed lag, while a webhook does not answer and the feed is ahead', async (t) => {
  // The attempt deadline ends the hanging attempt soon after the scrape, so that stopping is quick.
  const { tls, relay, feed } = await startDeliveryRig(t, { 'metrics.refreshInterval': '1s', 'delivery.timeout': '3s' });
  const hanging = await startReceiver(t, tls, () => 'hang');
  await relay.services.orgs.add(BY_TEST, { id: 'org-slow' });
  await relay.services.webhooks.register(BY_TEST, 'org-slow', { webhook_url: hanging.url });
  const queuedAt = Date.now();
  // Two changes of one request: the second waits for the first, which hangs.
  feed(feedLine('org-slow', 'evt_1', 'ar_1'), feedLine('org-slow', 'evt_2', 'ar_1'));
  await hanging.waitForRequests(1);
  await sleep(1200);
  const m = await scrape(relay.baseUrl);
  const age = sampleValue(m, 'hookrelay_queue_oldest_due_age_seconds');
  assert.ok(age >= 1 && age <= (Date.now() - queuedAt) / 1000 + 0.1, `the second change has waited since it was queued: ${age} s`);
  assert.equal(sampleValue(m, 'hookrelay_queue_depth', { state: 'new' }), 1);
  assert.equal(sampleValue(m, 'hookrelay_queue_depth', { state: 'retrying' }), 1, 'the attempt in flight (leased)');

  // Bytes appended to a feed file the relay does not read yet: its lag. (A file where the feed
  // is not: the relay tails config.feed.path only, so a second relay reads this one.)
  const dir = tempDir(t);
  const path = join(dir, 'other-feed.jsonl');
  writeFileSync(path, '');
  const other = await startRelay(t, { 'feed.path': path, 'metrics.refreshInterval': '1s' });
  const partial = '{"organization_id":"org-x","anticipation_request_id":"ar_1","status":"ok"'; // no newline: not a line yet
  appendFileSync(path, partial);
  await sleep(300);
  assert.equal(sampleValue(await scrape(other.baseUrl), 'hookrelay_feed_lag_bytes'), Buffer.byteLength(partial));
});

test('metrics on a listener of their own: /metrics there, nothing else there, and no /metrics on the admin listener', async (t) => {
  const relay = await startRelay(t, { 'metrics.listen': '127.0.0.1:0' });
  const at = relay.relay.metricsAddress();
  assert.ok(at !== null);
  const metricsUrl = `http://127.0.0.1:${at.port}`;
  assert.ok(sampleValue(await scrape(metricsUrl), 'hookrelay_build_info', { version: (await import('../../src/version.ts')).VERSION }) === 1);
  const elsewhere = await call(metricsUrl, 'GET', '/healthz');
  assert.equal(elsewhere.status, 404);
  assert.equal(elsewhere.body.code, 'not_found');
  assert.equal((await call(relay.baseUrl, 'GET', '/metrics')).status, 404);
  assert.equal((await call(relay.baseUrl, 'GET', '/healthz')).status, 200);

  const off = await startRelay(t, { 'metrics.enabled': 'false' });
  assert.equal((await call(off.baseUrl, 'GET', '/metrics')).status, 404);
});

test('metrics without a token only on loopback: a non-loopback metrics.listen without a token is refused with one line saying what to set', (t) => {
  const cwd = tempDir(t);
  const load = (env: Record<string, string>) => loadConfig({ env, cwd });
  assert.throws(() => load({ HOOKRELAY_METRICS_LISTEN: '0.0.0.0:9464' }), (err: Error) => {
    assert.match(err.message, /metrics\.listen.*0\.0\.0\.0:9464.*not a loopback address.*metrics\.tokenFile.*127\.0\.0\.1.*allowUnauthenticated/);
    assert.doesNotMatch(err.message, /\n/);
    return true;
  });
  assert.throws(() => load({ HOOKRELAY_METRICS_LISTEN: '10.1.2.3:9464' }), /not a loopback address/);
  assert.throws(() => load({ HOOKRELAY_METRICS_LISTEN: 'metrics.example:9464' }), /not a loopback address/);
  assert.equal(load({ HOOKRELAY_METRICS_LISTEN: '0.0.0.0:9464', HOOKRELAY_METRICS_TOKEN: 'a-long-enough-token-123' }).metrics.token, 'a-long-enough-token-123');
  assert.equal(load({ HOOKRELAY_METRICS_LISTEN: '0.0.0.0:9464', HOOKRELAY_METRICS_TOKEN_FILE: '/run/credentials/hookrelay/metrics' }).metrics.listen, '0.0.0.0:9464');
  assert.equal(load({ HOOKRELAY_METRICS_LISTEN: '[::]:9464', HOOKRELAY_METRICS_ALLOW_UNAUTHENTICATED: 'true' }).metrics.allowUnauthenticated, true);
  for (const listen of ['127.0.0.1:9464', '127.8.9.10:9464', '[::1]:9464', 'localhost:9464']) assert.equal(load({ HOOKRELAY_METRICS_LISTEN: listen }).metrics.listen, listen);
  assert.throws(() => load({ HOOKRELAY_METRICS_LISTEN: '127.0.0.1:8080' }), /metrics\.listen.*is the address of the admin API/);
  // A token too short, or with characters a bearer token cannot carry, is refused without being shown.
  assert.throws(() => load({ HOOKRELAY_METRICS_TOKEN: 'short' }), (err: Error) => /HOOKRELAY_METRICS_TOKEN.*at least 16/.test(err.message) && !err.message.includes('short"'));
  assert.throws(() => load({ HOOKRELAY_METRICS_TOKEN: 'has spaces in it, sixteen+' }), /at least 16 characters of letters/);

  for (const [host, loopback] of [['127.0.0.1', true], ['127.255.0.1', true], ['::1', true], ['::ffff:127.0.0.1', true], ['LOCALHOST', true], ['0.0.0.0', false], ['::', false], ['10.0.0.1', false], ['192.168.1.2', false], ['fe80::1', false], ['example.com', false], ['128.0.0.1', false]] as const) {
    assert.equal(isLoopbackHost(host), loopback, host);
  }
});

test('on the admin listener: refused (403) on an address that is not loopback unless a token or the explicit opt-in is set', async (t) => {
  const token = 'metrics-token-from-a-file-0123456789';
  const file = join(tempDir(t), 'metrics-token');
  writeFileSync(file, `${token}\n`, { mode: 0o600 });
  const tokened = await startRelay(t, { 'api.listen': '0.0.0.0:0', 'metrics.tokenFile': file });
  assert.equal((await call(tokened.baseUrl, 'GET', '/metrics')).status, 401);
  assert.equal((await call(tokened.baseUrl, 'GET', '/metrics', { headers: { authorization: `Bearer ${token}x` } })).body.code, 'invalid_token');
  await scrape(tokened.baseUrl, { authorization: `Bearer ${token}` });

  const optedIn = await startRelay(t, { 'api.listen': '0.0.0.0:0', 'metrics.allowUnauthenticated': 'true' });
  await scrape(optedIn.baseUrl);

  const refused = await startRelay(t, { 'api.listen': '0.0.0.0:0' });
  const res = await call(refused.baseUrl, 'GET', '/metrics');
  assert.equal(res.status, 403);
  assert.equal(res.body.code, 'forbidden');
  assert.match(res.body.detail, /0\.0\.0\.0:0, which is not a loopback address, and no metrics token is set/);
});

test('an unreadable metrics.tokenFile stops the start with one line naming it', async (t) => {
  const stateDir = tempDir(t);
  const config = loadConfig({ env: {}, overrides: { stateDir, 'api.listen': '127.0.0.1:0', 'metrics.tokenFile': join(stateDir, 'no-such-file') } });
  const relay = createRelay(config, { log: silentLog });
  await assert.rejects(relay.start(), /cannot read metrics\.tokenFile .*no-such-file: ENOENT/);
  const bad = join(stateDir, 'bad-token');
  writeFileSync(bad, 'short\n');
  const again = createRelay(loadConfig({ env: {}, overrides: { stateDir, 'api.listen': '127.0.0.1:0', 'metrics.tokenFile': bad } }), { log: silentLog });
  await assert.rejects(again.start(), /metrics\.tokenFile .*bad-token must hold a token of at least 16 characters/);
});

test('the gauges from the database are read at most once per refresh interval, concurrent scrapes share one read, and a failed read leaves them out', async () => {
  let reads = 0;
  let fail = false;
  const queue = (): QueueSnapshot => ({ at: 10_000, organizations: [{ orgId: 'acme', webhookStatus: 'failing', fresh: 7, tried: 2, oldestDueAt: 4_000, rateLimit: null, rateLimited: 0 }], totals: { new: 7, retrying: 2, held: 0, rateLimited: 0 }, oldestDueAt: 4_000 });
  // A status service of our own, counting its reads (the real one is exercised above).
  const status = {
    async queue() {
      reads++;
      await sleep(20);
      if (fail) throw new Error('SQLITE_IOERR: disk I/O error');
      return queue();
    },
    async feed() {
      throw new Error('no feed in this test');
    },
  } as unknown as StatusService;
  const lines: string[] = [];
  const log = createLogger('warn', { write: (line: string) => void lines.push(line) });
  const render = async (metrics: ReturnType<typeof createMetrics>) => parsePrometheusText(await metrics.render());

  const cached = createMetrics({ status, feedPath: null, refreshIntervalMs: 60_000, perOrganization: true, version: 'test', log });
  const [first, second] = await Promise.all([render(cached), render(cached)]);
  assert.equal(reads, 1, 'two scrapes at once: one read');
  for (const m of [first, second]) {
    assert.equal(sampleValue(m, 'hookrelay_queue_depth', { state: 'new' }), 7);
    assert.equal(sampleValue(m, 'hookrelay_queue_oldest_due_age_seconds'), 6);
    assert.equal(sampleValue(m, 'hookrelay_webhook_status', { org: 'acme', status: 'failing' }), 1);
  }
  await render(cached);
  assert.equal(reads, 1, 'within the interval: the last values');
  assert.equal(first.get('hookrelay_feed_lag_bytes'), undefined, 'no feed file (standard input): no lag');

  const fresh = createMetrics({ status, feedPath: null, refreshIntervalMs: 0, perOrganization: false, version: 'test', log });
  await render(fresh);
  await render(fresh);
  assert.equal(reads, 3, 'interval over: read again');
  fail = true;
  const failed = await render(fresh);
  assert.equal(failed.get('hookrelay_queue_depth')!.samples.length, 0, 'a failed read leaves the gauges out rather than showing stale values');
  assert.equal(sampleValue(failed, 'hookrelay_metrics_refresh_errors_total'), 1);
  assert.equal(failed.get('hookrelay_webhook_status'), undefined, 'metrics.perOrganization false: no per-organization series');
  assert.equal(lines.length, 1, JSON.stringify(lines));
  assert.match(lines[0]!, /"level":40.*SQLITE_IOERR.*reading the metrics gauges from the database failed/);
});

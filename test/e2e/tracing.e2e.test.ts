/**
 * Traces as an operator turns them on (issue 44): the built CLI's `hookrelay serve`, with the
 * standard OTEL_* variables in its environment, exports to a collector on 127.0.0.1 and carries
 * the producer's trace from the feed line to the receiver; `hookrelay deliveries list` shows
 * the trace; SIGTERM exports the last spans and exits 0. A wrong OTEL_* value stops the start
 * with the variable named.
 */
import assert from 'node:assert/strict';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { assertBuilt, runCli, scratchDir, spawnServe } from '../helpers/feed-helpers.ts';
import { SpanKind, startCollector } from '../helpers/otlp-collector.ts';
import { appendFeed, createTestTls, feedLine, startReceiver, type FeedLine } from '../helpers/receivers.ts';

const TRACE = '0af7651916cd43dd8448eb211c80319c';
const PRODUCER_SPAN = 'b7ad6b7169203331';

test('hookrelay serve with OTEL_* variables: the feed line\'s trace reaches the receiver and the collector; SIGTERM exports the last spans', { timeout: 120_000 }, async (t) => {
  assertBuilt();
  const collector = await startCollector();
  t.after(() => collector.close());
  const tls = createTestTls(t);
  const receiver = await startReceiver(t, tls);
  const dir = scratchDir(t, 'hookrelay-tracing-e2e-');
  const stateDir = join(dir, 'var');
  const configFile = join(dir, 'hookrelay.json');
  writeFileSync(configFile, JSON.stringify({ delivery: { allowNetworks: ['127.0.0.1/32'], caFile: tls.caFile, pollInterval: '20ms' }, feed: { pollInterval: 20 }, log: { level: 'info' } }));
  const common = ['--state-dir', stateDir, '--config', configFile];
  for (const args of [['migrate'], ['orgs', 'add', 'acme'], ['webhook', 'set', '--org', 'acme', '--url', receiver.url]]) {
    const r = await runCli(t, [...args, ...common]);
    assert.equal(r.code, 0, `${args.join(' ')}: ${r.stderr}`);
  }

  const env = {
    OTEL_EXPORTER_OTLP_ENDPOINT: collector.url,
    OTEL_EXPORTER_OTLP_TRACES_PROTOCOL: 'http/json',
    OTEL_SERVICE_NAME: 'hookrelay-e2e',
    OTEL_RESOURCE_ATTRIBUTES: 'deployment.environment.name=test,team=payments%20core',
    OTEL_EXPORTER_OTLP_HEADERS: 'x-collector-key=e2e-key',
    // Longer than the test: only the stop's flush can export the last spans.
    OTEL_BSP_SCHEDULE_DELAY: '60000',
  };
  const daemon = await spawnServe(t, stateDir, ['--config', configFile], { env });
  assert.ok(daemon.logRecords().some((r) => r.msg === 'tracing on: spans exported over OTLP/HTTP' && r.protocol === 'http/json'), 'the daemon says tracing is on');
  appendFeed(join(stateDir, 'feed.jsonl'), [{ ...feedLine('acme', 'evt_e2e'), traceparent: `00-${TRACE}-${PRODUCER_SPAN}-01` } as FeedLine]);
  const [req] = await receiver.waitForRequests(1, 30_000);
  const traceparent = String(req!.headers.traceparent);
  assert.match(traceparent, new RegExp(`^00-${TRACE}-[0-9a-f]{16}-01$`));

  const list = await runCli(t, ['deliveries', 'list', '--org', 'acme', ...common]);
  assert.equal(list.code, 0, list.stderr);
  assert.match(list.stdout, /TRACE/);
  assert.match(list.stdout, new RegExp(TRACE));

  daemon.child.kill('SIGTERM');
  assert.deepEqual(await daemon.exited, { code: 0, signal: null }, daemon.stderr());
  // Flushed at the stop: the schedule delay is a minute.
  const spans = await collector.waitFor((s) => s.some((x) => x.name === 'POST') && s.some((x) => x.name === 'ingest'), 5_000);
  const attempt = spans.find((s) => s.name === 'POST')!;
  const ingest = spans.find((s) => s.name === 'ingest')!;
  assert.equal(attempt.encoding, 'json');
  assert.equal(attempt.kind, SpanKind.client);
  assert.equal(ingest.parentSpanId, PRODUCER_SPAN);
  assert.equal(attempt.parentSpanId, ingest.spanId);
  assert.equal(traceparent.slice(36, 52), attempt.spanId);
  assert.equal(attempt.resource['service.name'], 'hookrelay-e2e');
  assert.equal(attempt.resource['deployment.environment.name'], 'test');
  assert.equal(attempt.resource.team, 'payments core');
  assert.equal(collector.requests[0]?.headers['x-collector-key'], 'e2e-key');
});

test('a value of an OTEL_* variable hookrelay cannot use stops the start, naming the variable', { timeout: 60_000 }, async (t) => {
  assertBuilt();
  const stateDir = join(scratchDir(t, 'hookrelay-tracing-e2e-'), 'var');
  const r = await runCli(t, ['serve', '--state-dir', stateDir, '--listen', '127.0.0.1:0'], { env: { OTEL_EXPORTER_OTLP_ENDPOINT: 'http://127.0.0.1:4318', OTEL_EXPORTER_OTLP_PROTOCOL: 'grpc' } });
  assert.equal(r.code, 2, r.stderr);
  assert.match(r.stderr, /OTEL_EXPORTER_OTLP_PROTOCOL \(tracing\.protocol\) must be http\/protobuf or http\/json/);
});

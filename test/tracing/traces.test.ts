/**
 * OpenTelemetry traces end to end, in process (issue 44): a relay with tracing on exports to a
 * collector on 127.0.0.1 (test/helpers/otlp-collector.ts, protobuf and JSON decoded), delivers to
 * real HTTPS receivers, and the spans, the receivers' traceparent headers, the delivery log and
 * the metrics are checked together. The collector down or slow changes nothing in delivery;
 * no span carries a secret; tracing off sends and exports nothing.
 */
import assert from 'node:assert/strict';
import { describe, test, type TestContext } from 'node:test';
import { Webhook } from 'standardwebhooks';
import { createLogger } from '../../src/log.ts';
import { createRelay } from '../../src/relay.ts';
import { call, seedOrg, silentLog } from '../helpers/helpers.ts';
import { SpanKind, startCollector, type CollectedSpan, type Collector } from '../helpers/otlp-collector.ts';
import { parsePrometheusText } from '../helpers/prometheus-text.ts';
import { feedLine, startDeliveryRig, startReceiver, waitForDelivery, type DeliveryRig, type FeedLine, type Receiver, type RecordedRequest } from '../helpers/receivers.ts';

const PRODUCER_TRACE = '4bf92f3577b34da6a3ce929d0e0e4736';
const PRODUCER_SPAN = '00f067aa0ba902b7';
const PRODUCER_PARENT = `00-${PRODUCER_TRACE}-${PRODUCER_SPAN}-01`;

/** Settings that export at once (a short batch delay) to `collector`. */
function tracingTo(collector: Collector, extra: Record<string, string> = {}): Record<string, string> {
  return { 'tracing.endpoint': collector.url, 'tracing.scheduleDelay': '20ms', ...extra };
}

async function collector(t: TestContext): Promise<Collector> {
  const c = await startCollector();
  t.after(() => c.close());
  return c;
}

/** An organization whose webhook points at `receiver`, registered through the API; its admin's token and the signing secret. */
async function registered(rig: DeliveryRig, receiver: Receiver, orgId = 'org-a', url = receiver.url, headers?: Record<string, string>): Promise<{ token: string; secret: string }> {
  const { admin } = await seedOrg(rig.relay.services, orgId);
  const token = rig.relay.token(orgId, admin);
  const res = await call(rig.relay.baseUrl, 'POST', '/webhook/register_webhook', { token, body: { webhook_url: url, ...(headers === undefined ? {} : { headers }) } });
  assert.equal(res.status, 201, res.text);
  return { token, secret: res.body.secret as string };
}

/** A feed line with the producer's trace context. */
function tracedLine(orgId: string, eventId: string, traceparent: unknown = PRODUCER_PARENT, tracestate?: string): FeedLine {
  return { ...feedLine(orgId, eventId), traceparent, ...(tracestate === undefined ? {} : { tracestate }) } as FeedLine;
}

function header(req: RecordedRequest, name: string): string | undefined {
  const value = req.headers[name];
  return Array.isArray(value) ? value.join(',') : value;
}

/** traceparent's parts. */
function parts(traceparent: string | undefined): { traceId: string; spanId: string; flags: string } {
  const m = /^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$/.exec(traceparent ?? '');
  assert.ok(m, `a W3C traceparent: ${traceparent}`);
  return { traceId: m[1]!, spanId: m[2]!, flags: m[3]! };
}

/** A pino destination that keeps every line, parsed. */
function capture() {
  const lines: string[] = [];
  return { records: () => lines.map((l) => JSON.parse(l) as Record<string, any>), stream: { write: (line: string) => void lines.push(line) } };
}

const ofEvent = (spans: readonly CollectedSpan[], name: string, eventId: string) => spans.filter((s) => s.name === name && s.attributes['hookrelay.event_id'] === eventId);

/** The relay's metrics, each series by its name and labels as the text writes them (`name{reason="x"}`). */
async function metrics(rig: DeliveryRig): Promise<Map<string, number>> {
  const res = await fetch(`${rig.relay.baseUrl}/metrics`);
  const out = new Map<string, number>();
  for (const family of parsePrometheusText(await res.text()).values()) {
    for (const sample of family.samples) {
      const labels = Object.entries(sample.labels).map(([k, v]) => `${k}="${v}"`).join(',');
      out.set(labels === '' ? sample.name : `${sample.name}{${labels}}`, sample.value);
    }
  }
  return out;
}

describe('traces across the relay', () => {
  test("a feed line's traceparent reaches the receiver with the same trace id, its parent id the attempt span's; the spans arrive (protobuf) with their kinds, parents and attributes", async (t) => {
    const otlp = await collector(t);
    const rig = await startDeliveryRig(t, tracingTo(otlp, { 'tracing.serviceName': 'relay-under-test' }));
    const receiver = await startReceiver(t, rig.tls);
    const { secret, token } = await registered(rig, receiver);

    rig.feed(tracedLine('org-a', 'evt_traced', PRODUCER_PARENT, 'vendor=abc,other=x'));
    const [req] = await receiver.waitForRequests(1);
    await waitForDelivery(rig.relay.store, 'org-a', 'evt_traced', (d) => d.status === 'delivered', 'delivered');
    const sent = parts(header(req!, 'traceparent'));
    assert.equal(sent.traceId, PRODUCER_TRACE, "the receiver's traceparent continues the producer's trace");
    assert.notEqual(sent.spanId, PRODUCER_SPAN, 'with a new parent id');
    assert.equal(sent.flags, '01');
    assert.equal(header(req!, 'tracestate'), 'vendor=abc,other=x', "the producer's tracestate goes along");
    // The signature is over the body only: standardwebhooks verifies it with the trace headers present.
    new Webhook(secret).verify(req!.body.toString('utf8'), { 'webhook-id': header(req!, 'webhook-id')!, 'webhook-timestamp': header(req!, 'webhook-timestamp')!, 'webhook-signature': header(req!, 'webhook-signature')! });
    assert.ok(!req!.body.toString('utf8').includes('traceparent'), 'the trace context is not in the body');

    const spans = await otlp.waitFor((s) => ofEvent(s, 'POST', 'evt_traced').length === 1 && ofEvent(s, 'ingest', 'evt_traced').length === 1, 15_000, 'the ingest and attempt spans');
    const ingest = ofEvent(spans, 'ingest', 'evt_traced')[0]!;
    const attempt = ofEvent(spans, 'POST', 'evt_traced')[0]!;
    assert.equal(ingest.encoding, 'protobuf');
    assert.equal(ingest.kind, SpanKind.consumer);
    assert.equal(ingest.traceId, PRODUCER_TRACE);
    assert.equal(ingest.parentSpanId, PRODUCER_SPAN, "the ingest span is a child of the producer's span");
    assert.equal(ingest.traceState, 'vendor=abc,other=x');
    assert.equal(ingest.attributes['hookrelay.organization'], 'org-a');
    assert.equal(ingest.attributes['hookrelay.ingest.outcome'], 'queued');
    assert.equal(ingest.attributes['hookrelay.feed.source'], rig.relay.config.feed.path);
    assert.equal(typeof ingest.attributes['hookrelay.feed.position'], 'number');

    assert.equal(attempt.kind, SpanKind.client);
    assert.equal(attempt.traceId, PRODUCER_TRACE);
    assert.equal(attempt.parentSpanId, ingest.spanId, 'the attempt is a child of the ingest span');
    assert.equal(attempt.spanId, sent.spanId, "the receiver's parent id is the attempt span's id");
    const url = new URL(receiver.url);
    assert.deepEqual(
      {
        method: attempt.attributes['http.request.method'],
        full: attempt.attributes['url.full'],
        scheme: attempt.attributes['url.scheme'],
        address: attempt.attributes['server.address'],
        port: attempt.attributes['server.port'],
        status: attempt.attributes['http.response.status_code'],
        attempt: attempt.attributes['hookrelay.attempt'],
        organization: attempt.attributes['hookrelay.organization'],
        eventId: attempt.attributes['hookrelay.event_id'],
        webhookId: attempt.attributes['http.request.header.webhook-id'],
        outcome: attempt.attributes['hookrelay.outcome'],
      },
      { method: 'POST', full: url.origin, scheme: 'https', address: '127.0.0.1', port: Number(url.port), status: 200, attempt: 1, organization: 'org-a', eventId: 'evt_traced', webhookId: ['evt_traced'], outcome: 'delivered' },
    );
    assert.equal(attempt.attributes['http.request.resend_count'], undefined, 'a first attempt is no resend');
    assert.equal(attempt.attributes['error.type'], undefined);
    assert.equal(attempt.status.code, 0);
    assert.equal(attempt.resource['service.name'], 'relay-under-test');
    assert.equal(attempt.resource['service.instance.id'], rig.relay.config.instance.name);
    assert.equal(attempt.scope, 'hookrelay');
    assert.equal(otlp.requests[0]?.path, '/v1/traces');

    // The delivery log shows the trace id: the API's list and a delivery's answer.
    const list = await call(rig.relay.baseUrl, 'GET', '/webhook/deliveries', { token });
    assert.equal(list.status, 200, list.text);
    assert.equal(list.body.data[0].trace_id, PRODUCER_TRACE);
    const one = await call(rig.relay.baseUrl, 'GET', `/webhook/deliveries/${list.body.data[0].id}`, { token });
    assert.equal(one.body.trace_id, PRODUCER_TRACE);
  });

  test('a retry (500, then 200) and a replay share the event\'s trace; an API request carrying a traceparent is a SERVER span continuing it', async (t) => {
    const otlp = await collector(t);
    const log = capture();
    const rig = await startDeliveryRig(t, tracingTo(otlp), { log: createLogger('debug', log.stream) });
    let failures = 1;
    const receiver = await startReceiver(t, rig.tls, () => (failures-- > 0 ? { status: 500 } : { status: 200 }));
    const { token } = await registered(rig, receiver);

    rig.feed(feedLine('org-a', 'evt_retried'));
    const delivered = await waitForDelivery(rig.relay.store, 'org-a', 'evt_retried', (d) => d.status === 'delivered', 'delivered after a retry', 15_000);
    assert.equal(receiver.requests.length, 2);
    const [first, second] = receiver.requests.map((r) => parts(header(r, 'traceparent')));
    assert.equal(first!.traceId, second!.traceId, 'the retry joins the first attempt\'s trace');
    assert.notEqual(first!.spanId, second!.spanId, 'each attempt is a span of its own');
    assert.equal(delivered.traceId, first!.traceId, 'the delivery log names that trace');
    // The log lines of that delivery carry it too: the failed attempt's at warn, the success's at debug.
    const lines = log.records().filter((r) => r.eventId === 'evt_retried' && typeof r.attempt === 'number');
    assert.deepEqual(lines.map((r) => [r.attempt, r.outcome, r.traceId]), [[1, 'retry', first!.traceId], [2, 'delivered', first!.traceId]]);

    const callerTrace = 'a1b2c3d4e5f60718293a4b5c6d7e8f90';
    const callerSpan = '1122334455667788';
    const replay = await call(rig.relay.baseUrl, 'POST', `/webhook/deliveries/${delivered.id}/replay`, { token, headers: { traceparent: `00-${callerTrace}-${callerSpan}-01` } });
    assert.equal(replay.status, 202, replay.text);
    assert.equal(replay.body.delivery.trace_id, first!.traceId);
    await receiver.waitForRequests(3);
    assert.equal(parts(header(receiver.requests[2]!, 'traceparent')).traceId, first!.traceId, 'the replay joins the event\'s trace');

    const spans = await otlp.waitFor((s) => ofEvent(s, 'POST', 'evt_retried').length === 3 && s.some((x) => x.kind === SpanKind.server && x.traceId === callerTrace), 15_000, 'three attempt spans and the replay request');
    const ingest = ofEvent(spans, 'ingest', 'evt_retried')[0]!;
    const attempts = ofEvent(spans, 'POST', 'evt_retried').sort((a, b) => Number(a.attributes['hookrelay.attempt']) - Number(b.attributes['hookrelay.attempt']) || Number(a.attributes['hookrelay.delivery_id']) - Number(b.attributes['hookrelay.delivery_id']));
    assert.equal(ingest.parentSpanId, '', 'a line without traceparent starts a new trace');
    for (const a of attempts) {
      assert.equal(a.traceId, ingest.traceId);
      assert.equal(a.parentSpanId, ingest.spanId);
    }
    const failed = attempts.find((a) => a.attributes['http.response.status_code'] === 500)!;
    assert.equal(failed.attributes['error.type'], '500');
    assert.equal(failed.attributes['hookrelay.outcome'], 'retry');
    assert.equal(failed.status.code, 2, 'an error answer is an error span');
    const retry = attempts.find((a) => a.attributes['hookrelay.attempt'] === 2)!;
    assert.equal(retry.attributes['http.request.resend_count'], 1);
    assert.deepEqual(new Set(attempts.map((a) => a.spanId)), new Set(receiver.requests.map((r) => parts(header(r, 'traceparent')).spanId)));

    const server = spans.find((s) => s.kind === SpanKind.server && s.traceId === callerTrace)!;
    assert.equal(server.parentSpanId, callerSpan, "the request's span continues the caller's traceparent");
    assert.equal(server.name, 'POST /webhook/deliveries/:id/replay');
    assert.equal(server.attributes['http.route'], '/webhook/deliveries/:id/replay');
    assert.equal(server.attributes['http.request.method'], 'POST');
    assert.equal(server.attributes['url.path'], `/webhook/deliveries/${delivered.id}/replay`);
    assert.equal(server.attributes['http.response.status_code'], 202);
    assert.equal(server.attributes['hookrelay.organization'], 'org-a');
  });

  test("after a restart, the event's retry still joins its trace: the trace context is stored with the event", async (t) => {
    const otlp = await collector(t);
    const rig = await startDeliveryRig(t, tracingTo(otlp));
    const receiver = await startReceiver(t, rig.tls, () => ({ status: 503 }));
    await registered(rig, receiver);
    rig.feed(tracedLine('org-a', 'evt_restart'));
    await waitForDelivery(rig.relay.store, 'org-a', 'evt_restart', (d) => d.attempts === 1, 'a first, failed attempt');
    await rig.relay.relay.stop();

    // A new daemon on the same state directory: the retry is due from the database, not from memory.
    receiver.respond(() => ({ status: 200 }));
    const again = createRelay(rig.relay.config, { log: silentLog });
    t.after(() => again.stop());
    await again.start();
    await waitForDelivery(rig.relay.store, 'org-a', 'evt_restart', (d) => d.status === 'delivered', 'delivered after the restart', 15_000);

    const [first, second] = receiver.requests.map((r) => parts(header(r, 'traceparent')));
    assert.equal(first!.traceId, PRODUCER_TRACE);
    assert.equal(second!.traceId, PRODUCER_TRACE, 'the retry after the restart joins the trace');
    const spans = await otlp.waitFor((s) => ofEvent(s, 'POST', 'evt_restart').length === 2);
    const ingest = ofEvent(spans, 'ingest', 'evt_restart')[0]!;
    for (const a of ofEvent(spans, 'POST', 'evt_restart')) assert.equal(a.parentSpanId, ingest.spanId, 'both attempts are children of the ingest span');
    assert.deepEqual(ofEvent(spans, 'POST', 'evt_restart').map((a) => a.attributes['hookrelay.outcome']).sort(), ['delivered', 'retry']);
  });

  test('http/json: the spans arrive as OTLP/JSON; a malformed traceparent is ignored (the event is delivered in a trace of its own) and counted', async (t) => {
    const otlp = await collector(t);
    const rig = await startDeliveryRig(t, tracingTo(otlp, { 'tracing.protocol': 'http/json' }));
    const receiver = await startReceiver(t, rig.tls);
    await registered(rig, receiver);

    rig.feed(tracedLine('org-a', 'evt_bad_parent', `00-${'0'.repeat(32)}-${PRODUCER_SPAN}-01`), tracedLine('org-a', 'evt_upper', PRODUCER_PARENT.toUpperCase()));
    await receiver.waitForRequests(2);
    for (const req of receiver.requests) assert.notEqual(parts(header(req, 'traceparent')).traceId, PRODUCER_TRACE);
    const spans = await otlp.waitFor((s) => ofEvent(s, 'POST', 'evt_upper').length === 1 && ofEvent(s, 'ingest', 'evt_bad_parent').length === 1, 15_000);
    assert.ok(spans.every((s) => s.encoding === 'json'));
    assert.equal(otlp.requests[0]?.contentType, 'application/json');
    const ingest = ofEvent(spans, 'ingest', 'evt_bad_parent')[0]!;
    assert.equal(ingest.parentSpanId, '');
    assert.match(String(ingest.attributes['hookrelay.trace_context_ignored']), /trace id of zeros/);
    assert.equal((await metrics(rig)).get('hookrelay_feed_trace_context_ignored_total'), 2);
  });

  test('the collector slow (10 s per request), then stopped: every event is delivered as fast, and the dropped spans are counted', async (t) => {
    const otlp = await collector(t);
    otlp.delayMs = 10_000;
    const rig = await startDeliveryRig(t, tracingTo(otlp, { 'tracing.timeout': '300ms', 'tracing.maxQueueSize': '8', 'tracing.maxExportBatchSize': '4' }));
    const receiver = await startReceiver(t, rig.tls);
    await registered(rig, receiver);

    const started = performance.now();
    rig.feed(...Array.from({ length: 40 }, (_, i) => feedLine('org-a', `evt_slow_${i}`)));
    await receiver.waitForRequests(40, 10_000);
    const slowMs = performance.now() - started;
    for (const req of receiver.requests) parts(header(req, 'traceparent'));
    await waitForDelivery(rig.relay.store, 'org-a', 'evt_slow_39', (d) => d.status === 'delivered', 'the last one delivered');

    await otlp.close();
    const again = performance.now();
    rig.feed(...Array.from({ length: 40 }, (_, i) => feedLine('org-a', `evt_down_${i}`)));
    await receiver.waitForRequests(80, 10_000);
    const downMs = performance.now() - again;
    // Generous bounds on a shared machine: a delivery that waited for the collector would take its 10 s.
    assert.ok(slowMs < 8_000, `40 events with a slow collector took ${slowMs} ms`);
    assert.ok(downMs < 8_000, `40 events with the collector down took ${downMs} ms`);

    // The exports under way when the collector went answer within tracing.timeout, as failures.
    const m = await (async () => {
      const deadline = performance.now() + 15_000;
      for (;;) {
        const read = await metrics(rig);
        if ((read.get('hookrelay_trace_spans_dropped_total{reason="export_failed"}') ?? 0) > 0) return read;
        assert.ok(performance.now() < deadline, `no failed export counted: ${JSON.stringify([...read].filter(([k]) => k.startsWith('hookrelay_trace')))}`);
        await new Promise((r) => setTimeout(r, 100));
      }
    })();
    const queueFull = m.get('hookrelay_trace_spans_dropped_total{reason="queue_full"}') ?? 0;
    const failed = m.get('hookrelay_trace_spans_dropped_total{reason="export_failed"}') ?? 0;
    assert.ok(queueFull > 0, `spans past the queue are dropped and counted (${queueFull})`);
    assert.ok(failed > 0, `spans of failed exports are counted (${failed})`);
    assert.equal(m.get('hookrelay_trace_spans_exported_total'), 0, 'the collector took nothing');
    assert.equal(otlp.spans.length, 0);
    // A stop does not wait for a collector that is down longer than tracing.timeout.
    const stopping = performance.now();
    await rig.relay.relay.stop();
    assert.ok(performance.now() - stopping < 5_000, 'the stop is bounded');
  });

  test('no secret in any span: not the signing secret, the webhook\'s credential header, a token in the URL, nor the caller\'s JWT', async (t) => {
    const otlp = await collector(t);
    const rig = await startDeliveryRig(t, tracingTo(otlp));
    const receiver = await startReceiver(t, rig.tls);
    const credential = 'Bearer s3cr3t-credential-value-0123456789';
    const { token, secret } = await registered(rig, receiver, 'org-a', `${receiver.url}?token=query-s3cr3t-987`, { Authorization: credential, 'X-Api-Key': 'key-s3cr3t-5555' });
    await call(rig.relay.baseUrl, 'GET', '/webhook/get_webhook', { token });
    rig.feed(feedLine('org-a', 'evt_secret'));
    await receiver.waitForRequests(1);
    const spans = await otlp.waitFor((s) => ofEvent(s, 'POST', 'evt_secret').length === 1 && s.some((x) => x.name === 'GET /webhook/get_webhook'), 15_000);
    const text = JSON.stringify(spans);
    for (const forbidden of [secret, secret.slice(6), credential, 's3cr3t-credential', 'query-s3cr3t', 'key-s3cr3t', token, token.split('.')[2]!, '?token']) {
      assert.ok(!text.includes(forbidden), `no span carries ${forbidden.slice(0, 12)}...`);
    }
    assert.equal(ofEvent(spans, 'POST', 'evt_secret')[0]!.attributes['url.full'], new URL(receiver.url).origin);
  });

  test('tracing off: nothing exported, no traceparent sent; the producer\'s trace id is still kept for the delivery log', async (t) => {
    const otlp = await collector(t);
    const rig = await startDeliveryRig(t, { 'tracing.endpoint': otlp.url, 'tracing.enabled': 'false', 'tracing.scheduleDelay': '20ms' });
    const receiver = await startReceiver(t, rig.tls);
    await registered(rig, receiver);
    rig.feed(tracedLine('org-a', 'evt_off'), feedLine('org-a', 'evt_off_plain'));
    await receiver.waitForRequests(2);
    const d = await waitForDelivery(rig.relay.store, 'org-a', 'evt_off', (x) => x.status === 'delivered', 'delivered');
    for (const req of receiver.requests) {
      assert.equal(req.headers.traceparent, undefined);
      assert.equal(req.headers.tracestate, undefined);
    }
    assert.equal(d.traceId, PRODUCER_TRACE);
    assert.equal((await waitForDelivery(rig.relay.store, 'org-a', 'evt_off_plain', () => true, 'queued')).traceId, null);
    await new Promise((r) => setTimeout(r, 300));
    assert.equal(otlp.requests.length, 0);
    assert.equal((await metrics(rig)).has('hookrelay_trace_spans_dropped_total{reason="queue_full"}'), false, 'no span metric without tracing');
  });

  test('propagation switched off: the spans are exported, the receiver gets no traceparent', async (t) => {
    const otlp = await collector(t);
    const rig = await startDeliveryRig(t, tracingTo(otlp, { 'tracing.propagate': 'false' }));
    const receiver = await startReceiver(t, rig.tls);
    await registered(rig, receiver);
    rig.feed(tracedLine('org-a', 'evt_quiet'));
    const [req] = await receiver.waitForRequests(1);
    assert.equal(req!.headers.traceparent, undefined);
    const spans = await otlp.waitFor((s) => ofEvent(s, 'POST', 'evt_quiet').length === 1);
    assert.equal(ofEvent(spans, 'POST', 'evt_quiet')[0]!.traceId, PRODUCER_TRACE);
  });
});

/**
 * What a receiver gets: the request shape, Standard Webhooks signatures verified with the
 * `standardwebhooks` package (and refused after tampering), signing off, both secrets during a
 * rotation and only the new one after the grace period, the same id and bytes on a retry,
 * and the test event. Real HTTPS receivers on 127.0.0.1 behind a test CA.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { Webhook } from 'standardwebhooks';
import { deliveryHeaders, requestHeadersOnTheWire } from '../../src/domain/delivery-request.ts';
import { storedBody } from '../../src/domain/feed-event.ts';
import { DELIVERY_USER_AGENT, VERSION } from '../../src/version.ts';
import { call, seedOrg } from '../helpers/helpers.ts';
import { attemptsOf, deliveriesOfEvent, feedLine, startDeliveryRig, startReceiver, waitFor, waitForDelivery, type RecordedRequest } from '../helpers/receivers.ts';
import { BY_TEST } from '../helpers/audit-helpers.ts';

/** The headers a Standard Webhooks library reads, as plain strings. */
function webhookHeaders(req: RecordedRequest): Record<string, string> {
  const pick = (name: string) => {
    const value = req.headers[name];
    return Array.isArray(value) ? value.join(', ') : (value ?? '');
  };
  return { 'webhook-id': pick('webhook-id'), 'webhook-timestamp': pick('webhook-timestamp'), 'webhook-signature': pick('webhook-signature') };
}

function storedPayload(rig: Awaited<ReturnType<typeof startDeliveryRig>>, eventId: string): string {
  const row = rig.relay.store.db.prepare('SELECT id, org_id, anticipation_request_id, occurred_at, payload FROM events WHERE id = ?').get(eventId) as
    | { id: string; org_id: string; anticipation_request_id: string; occurred_at: number; payload: string }
    | undefined;
  assert.ok(row, `event ${eventId} is not stored`);
  return storedBody({ id: row.id, orgId: row.org_id, anticipationRequestId: row.anticipation_request_id, occurredAt: row.occurred_at, payload: row.payload });
}

test('a delivery is a signed POST of the stored bytes that standardwebhooks verifies, and refuses once tampered with', async (t) => {
  const rig = await startDeliveryRig(t);
  const receiver = await startReceiver(t, rig.tls);
  const { admin } = await seedOrg(rig.relay.services, 'org-a');
  const token = rig.relay.token('org-a', admin);
  const registered = await call(rig.relay.baseUrl, 'POST', '/webhook/register_webhook', { token, body: { webhook_url: receiver.url } });
  assert.equal(registered.status, 201, registered.text);
  const secret = registered.body.secret as string;

  rig.feed(
    feedLine('org-a', 'evt_shape_1', 'ar_42', 'approved', {
      previous_status: 'pending',
      occurred_at: '2026-11-22T08:30:00Z',
      data: { amount_cents: 120_000, currency: 'BRL', note: 'açaí ✓', tags: ['a', 'b'], nested: { ok: true, n: null } },
    }),
  );
  const [req] = await receiver.waitForRequests(1);
  assert.ok(req);
  await waitForDelivery(rig.relay.store, 'org-a', 'evt_shape_1', (d) => d.status === 'delivered', 'the delivery to be recorded as delivered');

  assert.equal(req.method, 'POST');
  assert.equal(req.path, '/hook');
  assert.equal(req.headers['content-type'], 'application/json');
  assert.equal(req.headers['user-agent'], `hookrelay/${VERSION}`);
  assert.equal(req.headers['webhook-id'], 'evt_shape_1');
  const timestamp = req.headers['webhook-timestamp'] as string;
  assert.match(timestamp, /^\d{10}$/, 'webhook-timestamp is unix seconds');
  assert.ok(Math.abs(Number(timestamp) - req.receivedAt / 1000) < 300, 'webhook-timestamp is the time of the attempt');
  assert.equal(req.headers['content-length'], String(req.body.length));
  // Every header the receiver got is what the delivery page shows as the request sent (domain/delivery-request.ts), and only those.
  const shown = requestHeadersOnTheWire(receiver.url, deliveryHeaders({ eventId: 'evt_shape_1', timestampSeconds: Number(timestamp), body: req.body.toString('utf8'), secrets: [secret], userAgent: DELIVERY_USER_AGENT }), req.body.toString('utf8'));
  assert.deepEqual(req.headers, shown);

  // The exact bytes stored at ingestion, and the documented shape.
  assert.ok(req.body.equals(Buffer.from(storedPayload(rig, 'evt_shape_1'), 'utf8')), 'the body is not the stored bytes');
  const body = JSON.parse(req.body.toString('utf8'));
  assert.deepEqual(body, {
    type: 'anticipation_request.status_changed',
    timestamp: '2026-11-22T08:30:00.000Z',
    data: {
      event_id: 'evt_shape_1',
      organization_id: 'org-a',
      anticipation_request_id: 'ar_42',
      status: 'approved',
      previous_status: 'pending',
      occurred_at: '2026-11-22T08:30:00.000Z',
      amount_cents: 120_000,
      currency: 'BRL',
      note: 'açaí ✓',
      tags: ['a', 'b'],
      nested: { ok: true, n: null },
    },
  });

  // One signature, verified by the reference library with the secret the API handed out.
  const headers = webhookHeaders(req);
  assert.match(headers['webhook-signature']!, /^v1,[A-Za-z0-9+/]{43}=$/);
  const raw = req.body.toString('utf8');
  assert.deepEqual(new Webhook(secret).verify(raw, headers), body);
  assert.deepEqual(new Webhook(secret).verify(req.body, headers), body, 'verifying the raw Buffer works too');

  // Tampering with anything signed is caught.
  const tamperedBody = raw.replace('"amount_cents":120000', '"amount_cents":920000');
  assert.notEqual(tamperedBody, raw);
  assert.throws(() => new Webhook(secret).verify(tamperedBody, headers), /No matching signature/);
  assert.throws(() => new Webhook(secret).verify(raw + ' ', headers), /No matching signature/);
  assert.throws(() => new Webhook(secret).verify(raw, { ...headers, 'webhook-id': 'evt_other' }), /No matching signature/);
  assert.throws(() => new Webhook(secret).verify(raw, { ...headers, 'webhook-timestamp': String(Number(timestamp) - 1) }), /No matching signature/);
  const otherSecret = (await rig.relay.services.webhooks.rotateSecret(BY_TEST, 'org-a')).secret;
  assert.throws(() => new Webhook(otherSecret).verify(raw, headers), /No matching signature/);
});

test('with active_hmac false the request carries webhook-id and webhook-timestamp but no webhook-signature', async (t) => {
  const rig = await startDeliveryRig(t);
  const receiver = await startReceiver(t, rig.tls);
  const { admin } = await seedOrg(rig.relay.services, 'org-a');
  const registered = await call(rig.relay.baseUrl, 'POST', '/webhook/register_webhook', { token: rig.relay.token('org-a', admin), body: { webhook_url: receiver.url, active_hmac: false } });
  assert.equal(registered.status, 201, registered.text);
  assert.equal(registered.body.secret, undefined);

  rig.feed(feedLine('org-a', 'evt_unsigned'));
  const [req] = await receiver.waitForRequests(1);
  assert.ok(req);
  assert.equal(req.headers['webhook-id'], 'evt_unsigned');
  assert.match(req.headers['webhook-timestamp'] as string, /^\d{10}$/);
  assert.equal(req.headers['webhook-signature'], undefined);
  assert.ok(!Object.keys(req.headers).some((name) => /signature/i.test(name)), `unexpected signature header in ${JSON.stringify(req.headers)}`);
  await waitForDelivery(rig.relay.store, 'org-a', 'evt_unsigned', (d) => d.status === 'delivered', 'the unsigned delivery');
});

test('during a secret rotation (POST /webhook/rotate_secret) both secrets sign, newest first, and both verify', async (t) => {
  const rig = await startDeliveryRig(t);
  const receiver = await startReceiver(t, rig.tls);
  const { admin } = await seedOrg(rig.relay.services, 'org-a');
  const token = rig.relay.token('org-a', admin);
  const registered = await call(rig.relay.baseUrl, 'POST', '/webhook/register_webhook', { token, body: { webhook_url: receiver.url } });
  const oldSecret = registered.body.secret as string;
  const rotated = await call(rig.relay.baseUrl, 'POST', '/webhook/rotate_secret', { token });
  assert.equal(rotated.status, 200, rotated.text);
  const newSecret = rotated.body.secret as string;
  assert.match(newSecret, /^whsec_/);
  assert.notEqual(newSecret, oldSecret);
  // Default grace: 24 h.
  const expires = Date.parse(rotated.body.previous_secret_expires_at);
  assert.ok(expires > Date.now() + 23 * 3_600_000 && expires <= Date.now() + 24 * 3_600_000, rotated.body.previous_secret_expires_at);

  rig.feed(feedLine('org-a', 'evt_rotating'));
  const [req] = await receiver.waitForRequests(1);
  assert.ok(req);
  const headers = webhookHeaders(req);
  const signatures = headers['webhook-signature']!.split(' ');
  assert.equal(signatures.length, 2, headers['webhook-signature']);
  for (const signature of signatures) assert.match(signature, /^v1,[A-Za-z0-9+/]{43}=$/);
  const raw = req.body.toString('utf8');
  const expected = JSON.parse(raw);
  assert.deepEqual(new Webhook(newSecret).verify(raw, headers), expected);
  assert.deepEqual(new Webhook(oldSecret).verify(raw, headers), expected);
  // Newest first: the first signature alone is the new secret's.
  assert.deepEqual(new Webhook(newSecret).verify(raw, { ...headers, 'webhook-signature': signatures[0]! }), expected);
  assert.throws(() => new Webhook(oldSecret).verify(raw, { ...headers, 'webhook-signature': signatures[0]! }), /No matching signature/);
  assert.deepEqual(new Webhook(oldSecret).verify(raw, { ...headers, 'webhook-signature': signatures[1]! }), expected);
  assert.throws(() => new Webhook(newSecret).verify(raw + 'x', headers), /No matching signature/);

  // get_secret now hands out the new secret.
  const current = await call(rig.relay.baseUrl, 'GET', '/webhook/get_secret', { token });
  assert.equal(current.body.secret, newSecret);
});

test('after the grace period (delivery.secretRotationGrace) only the new secret signs', async (t) => {
  const rig = await startDeliveryRig(t, { 'delivery.secretRotationGrace': '1s' });
  const receiver = await startReceiver(t, rig.tls);
  await seedOrg(rig.relay.services, 'org-a');
  const oldSecret = (await rig.relay.services.webhooks.register(BY_TEST, 'org-a', { webhook_url: receiver.url })).newSecret!;
  const { secret: newSecret, previousSecretExpiresAt } = await rig.relay.services.webhooks.rotateSecret(BY_TEST, 'org-a');
  await waitFor('the grace period to end', () => Date.now() > previousSecretExpiresAt + 5, 5_000);

  rig.feed(feedLine('org-a', 'evt_after_grace'));
  const [req] = await receiver.waitForRequests(1);
  assert.ok(req);
  const headers = webhookHeaders(req);
  assert.equal(headers['webhook-signature']!.split(' ').length, 1, headers['webhook-signature']);
  const raw = req.body.toString('utf8');
  assert.deepEqual(new Webhook(newSecret).verify(raw, headers), JSON.parse(raw));
  assert.throws(() => new Webhook(oldSecret).verify(raw, headers), /No matching signature/);
});

test('500 then 200: one event, two attempts, the same webhook-id and identical body bytes, both signed', async (t) => {
  // The receiver is on 127.0.0.1, an internal address: its answers are kept only when the operator says so.
  const rig = await startDeliveryRig(t, { 'delivery.retrySchedule': '1s', 'delivery.storeInternalResponses': 'org-a' });
  const receiver = await startReceiver(t, rig.tls, (req) => (req.index === 0 ? { status: 500, body: 'try later' } : { status: 200 }));
  await seedOrg(rig.relay.services, 'org-a');
  const secret = (await rig.relay.services.webhooks.register(BY_TEST, 'org-a', { webhook_url: receiver.url })).newSecret!;

  rig.feed(feedLine('org-a', 'evt_retry', 'ar_retry', 'approved', { data: { amount_cents: 5 } }));
  const delivered = await waitForDelivery(rig.relay.store, 'org-a', 'evt_retry', (d) => d.status === 'delivered', 'the retry to be delivered');
  assert.equal(delivered.attempts, 2);
  assert.equal(receiver.requests.length, 2);
  const [first, second] = receiver.requests as [RecordedRequest, RecordedRequest];
  assert.equal(first.headers['webhook-id'], 'evt_retry');
  assert.equal(second.headers['webhook-id'], 'evt_retry');
  assert.ok(first.body.equals(second.body), 'the retry did not send the same bytes');
  for (const req of [first, second]) {
    const raw = req.body.toString('utf8');
    assert.deepEqual(new Webhook(secret).verify(raw, webhookHeaders(req)), JSON.parse(raw));
  }

  // One event, one delivery, two attempts in its log; the retry waited for its step (1 s).
  const events = rig.relay.store.db.prepare("SELECT count(*) AS n FROM events WHERE id = 'evt_retry'").get() as { n: number };
  assert.equal(events.n, 1);
  assert.equal(deliveriesOfEvent(rig.relay.store, 'org-a', 'evt_retry').length, 1);
  const attempts = attemptsOf(rig.relay.store, delivered.id);
  assert.deepEqual(
    attempts.map((a) => [a.attempt, a.statusCode, a.errorClass, a.outcome]),
    [
      [1, 500, 'http_status', 'retry'],
      [2, 200, null, 'delivered'],
    ],
  );
  assert.equal(attempts[0]!.responseBody, 'try later');
  assert.ok(attempts[1]!.startedAt >= attempts[0]!.startedAt + 1000, 'the retry came before its scheduled time');
  assert.equal(delivered.lastStatusCode, 200);
  assert.equal(delivered.lastError, null);
});

test('POST /webhook/test delivers a signed webhook.test event', async (t) => {
  const rig = await startDeliveryRig(t);
  const receiver = await startReceiver(t, rig.tls);
  const { admin } = await seedOrg(rig.relay.services, 'org-a');
  const token = rig.relay.token('org-a', admin);
  const secret = (await rig.relay.services.webhooks.register(BY_TEST, 'org-a', { webhook_url: receiver.url })).newSecret!;

  const queued = await call(rig.relay.baseUrl, 'POST', '/webhook/test', { token });
  assert.equal(queued.status, 202, queued.text);
  const { delivery } = queued.body;
  assert.equal(delivery.event_type, 'webhook.test');
  assert.equal(delivery.anticipation_request_id, null);
  assert.match(delivery.event_id, /^evt_test_[0-9a-f]{32}$/);

  const [req] = await receiver.waitForRequests(1);
  assert.ok(req);
  assert.equal(req.headers['webhook-id'], delivery.event_id);
  const raw = req.body.toString('utf8');
  const body = new Webhook(secret).verify(raw, webhookHeaders(req)) as { type: string; timestamp: string; data: Record<string, unknown> };
  assert.equal(body.type, 'webhook.test');
  assert.match(body.timestamp, /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/);
  assert.equal(body.data.event_id, delivery.event_id);
  assert.equal(body.data.organization_id, 'org-a');

  await waitForDelivery(rig.relay.store, 'org-a', delivery.event_id, (d) => d.status === 'delivered', 'the test delivery');
  const detail = await call(rig.relay.baseUrl, 'GET', `/webhook/deliveries/${delivery.id}`, { token });
  assert.equal(detail.status, 200, detail.text);
  assert.equal(detail.body.status, 'delivered');
  assert.equal(detail.body.attempt_log.length, 1);
  assert.equal(detail.body.attempt_log[0].status_code, 200);
});

test('without delivery.caFile the test CA is not trusted: the attempt fails with tls_error and nothing is sent', async (t) => {
  const rig = await startDeliveryRig(t, { 'delivery.caFile': '', 'delivery.retrySchedule': '1h' });
  const receiver = await startReceiver(t, rig.tls);
  await seedOrg(rig.relay.services, 'org-a');
  await rig.relay.services.webhooks.register(BY_TEST, 'org-a', { webhook_url: receiver.url });
  rig.feed(feedLine('org-a', 'evt_untrusted'));
  const failed = await waitForDelivery(rig.relay.store, 'org-a', 'evt_untrusted', (d) => d.attempts === 1, 'the first attempt');
  const [attempt] = attemptsOf(rig.relay.store, failed.id);
  assert.equal(attempt?.errorClass, 'tls_error', `${attempt?.errorClass}: ${attempt?.errorDetail}`);
  assert.match(attempt?.errorDetail ?? '', /UNABLE_TO_VERIFY_LEAF_SIGNATURE|SELF_SIGNED|UNABLE_TO_GET_ISSUER/);
  assert.equal(receiver.requests.length, 0, 'a request went out over an untrusted connection');
});

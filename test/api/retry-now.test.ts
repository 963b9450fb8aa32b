/**
 * Retry now and the sample test event over the admin API, against an in-process daemon and a real
 * HTTPS receiver on 127.0.0.1: a delivery waiting an hour for its next attempt goes out within
 * seconds of POST /webhook/deliveries/{id}/retry, and its request's later change, queued behind
 * it, after it; a delivery that is not waiting is refused with 409 saying what to do instead;
 * another organization's delivery is 404, a viewer 403. The log names the waiting delivery's
 * state `retrying`. POST /webhook/test with `sample_status_change` reaches the receiver in the
 * real event's shape, marked as a test, with a signature that verifies.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { Webhook } from 'standardwebhooks';
import { cliAuditContext } from '../../src/services/audit.ts';
import type { Services } from '../../src/services/services.ts';
import { assertProblem, call } from '../helpers/helpers.ts';
import { eventIdOf, feedLine, startDeliveryRig, startReceiver, waitFor, waitForDelivery } from '../helpers/receivers.ts';

const by = cliAuditContext();

/** An organization with an admin and a viewer, and its webhook at `url`; returns their e-mails and the signing secret. */
async function seed(services: Services, orgId: string, url: string): Promise<{ admin: string; viewer: string; secret: string }> {
  await services.orgs.add(by, { id: orgId });
  const admin = `admin@${orgId}.test`;
  const viewer = `viewer@${orgId}.test`;
  await services.users.add(by, { orgId, email: admin, roleName: 'saas_admin' });
  await services.users.add(by, { orgId, email: viewer, roleName: 'saas_viewer' });
  const secret = (await services.webhooks.register(by, orgId, { webhook_url: url })).newSecret!;
  return { admin, viewer, secret };
}

test('retry now: a delivery waiting an hour goes out within seconds, its request\'s later change after it; refusals say what to do instead', async (t) => {
  const rig = await startDeliveryRig(t, { 'delivery.retrySchedule': '1h' });
  let first = true;
  const receiver = await startReceiver(t, rig.tls, () => {
    if (!first) return { status: 204 };
    first = false;
    return { status: 503, body: 'receiver down' };
  });
  const acme = await seed(rig.relay.services, 'acme', receiver.url);
  const globex = await seed(rig.relay.services, 'globex', receiver.url);
  const base = rig.relay.baseUrl;
  const token = rig.relay.token('acme', acme.admin);
  const store = rig.relay.store;

  rig.feed(feedLine('acme', 'evt_first', 'ar_1'));
  const waiting = await waitForDelivery(store, 'acme', 'evt_first', (d) => d.status === 'pending' && d.attempts === 1, 'the first attempt to fail');
  assert.ok(waiting.nextAttemptAt - Date.now() > 55 * 60_000, 'its next attempt is an hour away');
  rig.feed(feedLine('acme', 'evt_later', 'ar_1', 'rejected'));
  await waitForDelivery(store, 'acme', 'evt_later', () => true, 'the later change to be queued');
  await sleep(300);
  assert.deepEqual(receiver.requestsFor('evt_later'), [], 'the later change waits behind the failed one');

  // The log tells "retrying" from "failed for good", and the filter takes the state's name.
  const detail = await call(base, 'GET', `/webhook/deliveries/${waiting.id}`, { token });
  assert.equal(detail.body.status, 'failed');
  assert.equal(detail.body.state, 'retrying');
  const listed = await call(base, 'GET', '/webhook/deliveries?status=retrying', { token });
  assert.equal(listed.status, 200, listed.text);
  assert.deepEqual(
    listed.body.data.map((d: { id: number }) => d.id),
    [waiting.id],
  );

  // Who may: a viewer may not, another organization does not see it.
  assertProblem(await call(base, 'POST', `/webhook/deliveries/${waiting.id}/retry`, { token: rig.relay.token('acme', acme.viewer) }), 403, 'forbidden');
  assertProblem(await call(base, 'POST', `/webhook/deliveries/${waiting.id}/retry`, { token: rig.relay.token('globex', globex.admin) }), 404, 'delivery_not_found');

  const calledAt = Date.now();
  const retried = await call(base, 'POST', `/webhook/deliveries/${waiting.id}/retry`, { token });
  assert.equal(retried.status, 202, retried.text);
  assert.equal(retried.body.delivery.id, waiting.id);
  assert.equal(retried.body.delivery.state, 'retrying');
  assert.ok(Date.parse(retried.body.delivery.next_attempt_at) - calledAt < 1000, `due now: ${retried.body.delivery.next_attempt_at}`);

  const delivered = await waitForDelivery(store, 'acme', 'evt_first', (d) => d.id === waiting.id && d.status === 'delivered', 'the retried delivery to be delivered', 5_000);
  assert.equal(delivered.attempts, 2);
  await waitForDelivery(store, 'acme', 'evt_later', (d) => d.status === 'delivered', 'the later change to be delivered', 5_000);
  const seconds = (Date.now() - calledAt) / 1000;
  assert.ok(seconds < 5, `delivered ${seconds} s after the call`);
  // In order: the failed attempt, its retry, then the later change of the request.
  assert.deepEqual(
    receiver.requests.map((r) => [eventIdOf(r), r.answeredStatus]),
    [
      ['evt_first', 503],
      ['evt_first', 204],
      ['evt_later', 204],
    ],
  );

  // Not waiting any more: 409, saying what to do instead (and the same for the viewer's 403 first).
  const again = assertProblem(await call(base, 'POST', `/webhook/deliveries/${waiting.id}/retry`, { token }), 409, 'delivery_not_waiting');
  assert.match(again.detail, /was delivered: .*replay it/);
  assertProblem(await call(base, 'POST', '/webhook/deliveries/999999/retry', { token }), 404, 'delivery_not_found');
});

test('a sample status change reaches the receiver in the real event\'s shape, marked as a test, signed', async (t) => {
  const rig = await startDeliveryRig(t);
  const receiver = await startReceiver(t, rig.tls);
  const acme = await seed(rig.relay.services, 'acme', receiver.url);
  const token = rig.relay.token('acme', acme.admin);
  const base = rig.relay.baseUrl;

  // A real change first, to compare shapes with.
  rig.feed(feedLine('acme', 'evt_real', 'ar_real'));
  await waitFor('the real change to arrive', () => receiver.requestsFor('evt_real')[0]);

  const sent = await call(base, 'POST', '/webhook/test', { token, body: { kind: 'sample_status_change' } });
  assert.equal(sent.status, 202, sent.text);
  const eventId = sent.body.delivery.event_id as string;
  assert.equal(sent.body.delivery.event_type, 'anticipation_request.status_changed');
  assert.match(sent.body.delivery.anticipation_request_id, /^ar_test_[0-9a-f]{12}$/);
  assert.match(sent.body.message, /^Sample status change \(marked "test": true\) evt_test_/);
  const request = await waitFor('the sample to arrive', () => receiver.requestsFor(eventId)[0]);

  const verified = new Webhook(acme.secret).verify(request.body.toString('utf8'), request.headers as Record<string, string>) as Record<string, any>;
  const real = JSON.parse(receiver.requestsFor('evt_real')[0]!.body.toString('utf8'));
  assert.equal(verified.type, real.type);
  assert.equal(verified.test, true);
  assert.equal(real.test, undefined, 'no real event carries the marker');
  assert.deepEqual(Object.keys(verified.data).sort(), Object.keys(real.data).sort(), 'the same data members as a real change');
  assert.equal(verified.data.event_id, eventId);
  assert.equal(verified.data.organization_id, 'acme');
  assert.equal(verified.data.anticipation_request_id, sent.body.delivery.anticipation_request_id);

  // No body, or {}: a webhook.test as before; an unknown kind is refused.
  const plain = await call(base, 'POST', '/webhook/test', { token });
  assert.equal(plain.status, 202, plain.text);
  assert.equal(plain.body.delivery.event_type, 'webhook.test');
  const bad = assertProblem(await call(base, 'POST', '/webhook/test', { token, body: { kind: 'sample' } }), 422, 'validation_failed');
  assert.equal(bad.invalid_params[0].name, 'kind');
});

/**
 * A delivery whose request can never be sent (issue 47): an event id beyond Latin-1 cannot be a
 * `webhook-id` header. Stored events can hold such ids (the feed refuses them only since), so
 * they are stored here through the store, as an older database holds them. The attempt is
 * `invalid_request`, the delivery dead at once, the request's later change goes on at once,
 * and the webhook's health is left alone: the receiver never saw a thing.
 */
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { test } from 'node:test';
import { deliveryHeaders, unsendableHeader } from '../../src/domain/delivery-request.ts';
import { orderingKey } from '../../src/domain/ordering.ts';
import { AttemptError, concernsReceiver, decideOutcome, type AttemptResult, type RetryPolicy } from '../../src/domain/retry-policy.ts';
import { call, seedOrg } from '../helpers/helpers.ts';
import { attemptsOf, deliveriesOfEvent, eventIdOf, startDeliveryRig, startReceiver, waitForDelivery } from '../helpers/receivers.ts';
import { repos } from '../helpers/sqlite-repos.ts';
import { BY_TEST } from '../helpers/audit-helpers.ts';

const POLICY: RetryPolicy = { scheduleMs: [3_600_000, 3_600_000], jitter: 0, minBackoffAfterThrottleMs: 60_000, maxRetryAfterMs: 21_600_000 };

function failed(error: AttemptError): AttemptResult {
  return { statusCode: null, error, errorDetail: 'x', responseBody: null, durationMs: 0, retryAfterMs: null, sentTimestamp: null, sentSignature: null };
}

test('unsendableHeader: names the header and the character an HTTP header cannot carry; a header undici takes passes', () => {
  const headers = (eventId: string, custom: [string, string][] = []) => deliveryHeaders({ eventId, timestampSeconds: 1, body: '{}', secrets: ['whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw'], userAgent: 'hookrelay/test', custom });
  assert.equal(unsendableHeader(headers('evt_日本')), 'webhook-id (the event id) holds characters an HTTP header cannot carry (U+65E5 at character 5)');
  assert.equal(unsendableHeader(headers('evt_\u202e1')), 'webhook-id (the event id) holds characters an HTTP header cannot carry (U+202E at character 5)');
  assert.equal(unsendableHeader(headers('evt_a\r\nx-injected: 1')), 'webhook-id (the event id) holds characters an HTTP header cannot carry (U+000D at character 6)');
  // Latin-1 travels as one byte, and a tab is a field character: undici sends both.
  assert.equal(unsendableHeader(headers('evt_é\t1')), null);
  assert.equal(unsendableHeader(headers('chg_77812', [['X-Environment', 'production']])), null);
  // A webhook's header stored under other rules: named; a credential's value is not described.
  assert.equal(
    unsendableHeader(headers('chg_1', [['X-Region', 'eu—west']])),
    "the webhook's header X-Region holds characters an HTTP header cannot carry (U+2014 at character 3); register the webhook again with a valid value, then recover what went dead",
  );
  assert.equal(
    unsendableHeader(headers('chg_1', [['X-Api-Key', 'k—secret']])),
    "the webhook's header X-Api-Key holds characters an HTTP header cannot carry; register the webhook again with a valid value, then recover what went dead",
  );
  assert.match(unsendableHeader(headers('chg_1', [['X Bad', 'v']]))!, /^the webhook's header name "X Bad" is not an HTTP token/);
});

test('decideOutcome: invalid_request is dead at once, whatever the schedule has left; it does not concern the receiver', () => {
  assert.deepEqual(decideOutcome(failed(AttemptError.invalidRequest), 1, POLICY, 1_000, 0.5), { kind: 'dead' });
  assert.deepEqual(decideOutcome(failed(AttemptError.connection), 1, POLICY, 1_000, 0.5), { kind: 'retry', at: 3_601_000 });
  assert.equal(concernsReceiver(failed(AttemptError.invalidRequest)), false);
  // Nor does credentials_unavailable (the operator's credential key: issue 43), which is retried.
  assert.equal(concernsReceiver(failed(AttemptError.credentials)), false);
  assert.equal(decideOutcome(failed(AttemptError.credentials), 1, POLICY, 1_000, 0.5).kind, 'retry');
  for (const error of Object.values(AttemptError)) if (error !== AttemptError.invalidRequest && error !== AttemptError.credentials) assert.equal(concernsReceiver(failed(error)), true, error);
});

test('the error classes documented (docs/openapi.json, docs/metrics.md) are those of AttemptError', () => {
  const doc = JSON.parse(readFileSync(new URL('../../docs/openapi.json', import.meta.url), 'utf8'));
  const attempt = Object.values<any>(doc.components.schemas).find((schema) => schema?.properties?.response_body !== undefined && schema?.properties?.error !== undefined);
  assert.ok(attempt, 'the attempt schema is in docs/openapi.json');
  assert.deepEqual(new Set(attempt.properties.error.enum), new Set([...Object.values(AttemptError), null]));
  for (const error of Object.values(AttemptError)) assert.ok(attempt.properties.error.description.includes(`\`${error}\``), `openapi.json describes ${error}`);
  const metrics = readFileSync(new URL('../../docs/metrics.md', import.meta.url), 'utf8');
  const failures = metrics.split('\n').find((line) => line.startsWith('| `hookrelay_delivery_attempt_failures_total`'))!;
  for (const error of Object.values(AttemptError)) assert.ok(failures.includes(`\`${error}\``), `metrics.md lists ${error}`);
});

test('an event id no header can carry: one invalid_request attempt, dead at once, the later change of its request delivered right after, the webhook not failing', async (t) => {
  // An hour between attempts, and failing after a single failure: before issue 47 each bad id
  // was a connection_error retried an hour later, the later change waited behind it, and the
  // webhook was failing after the first attempt.
  const rig = await startDeliveryRig(t, { 'delivery.retrySchedule': '1h,1h', 'delivery.failingAfterFailures': '1' });
  const receiver = await startReceiver(t, rig.tls);
  const { viewer } = await seedOrg(rig.relay.services, 'org-a');
  await rig.relay.services.webhooks.register(BY_TEST, 'org-a', { webhook_url: receiver.url });
  const store = rig.relay.store;
  const ids = ['evt_日本', 'evt_\u202egnp.exe', 'evt_ok'];
  const now = Date.now();
  store.db.transaction(() => {
    const r = repos(store);
    const source = r.feed.sourceId('older-feed.jsonl');
    const seqs = r.feed.insertEvents(
      ids.map((id, i) => ({ event: { id, orgId: 'org-a', anticipationRequestId: 'ar_1', occurredAt: now + i, details: '"status":"approved","previous_status":"pending"', legacyId: null }, position: null })),
      source,
      now,
    );
    r.deliveries.insertMany(
      seqs.map((seq) => ({ eventSeq: seq!, orgId: 'org-a', orderingKey: orderingKey('org-a', 'ar_1') })),
      now,
    );
  })();

  const later = await waitForDelivery(store, 'org-a', 'evt_ok', (d) => d.status === 'delivered', 'the later change of the request', 10_000);
  for (const [id, character] of [['evt_日本', 'U+65E5'], ['evt_\u202egnp.exe', 'U+202E']] as const) {
    const [delivery] = deliveriesOfEvent(store, 'org-a', id);
    assert.equal(delivery!.status, 'dead', id);
    assert.equal(delivery!.attempts, 1, id);
    const [attempt, ...more] = attemptsOf(store, delivery!.id);
    assert.equal(more.length, 0);
    assert.equal(attempt!.errorClass, 'invalid_request');
    assert.equal(attempt!.errorDetail, `webhook-id (the event id) holds characters an HTTP header cannot carry (${character} at character 5)`);
    assert.equal(attempt!.outcome, 'dead');
    assert.equal(attempt!.statusCode, null);
    assert.equal(attempt!.sentTimestamp, null, 'nothing was sent');
    assert.ok(attemptsOf(store, later.id)[0]!.startedAt >= attempt!.startedAt);
  }
  assert.deepEqual(receiver.requests.map((r) => [r.headers['webhook-id'], eventIdOf(r)]), [['evt_ok', 'evt_ok']], 'the receiver got the later change alone');

  assert.equal(repos(store).webhooks.get('org-a')!.status, 'active');
  const health = repos(store).webhooks.health('org-a')!;
  assert.equal(health.consecutiveFailures, 0);
  assert.equal(health.failingSince, null);
  const webhook = await call(rig.relay.baseUrl, 'GET', '/webhook/get_webhook', { token: rig.relay.token('org-a', viewer) });
  assert.equal(webhook.body.status, 'active');
  assert.equal(webhook.body.consecutive_failures, 0);

  // The delivery log shows the class and the sentence to its readers.
  const dead = deliveriesOfEvent(store, 'org-a', 'evt_日本')[0]!;
  const shown = await call(rig.relay.baseUrl, 'GET', `/webhook/deliveries/${dead.id}`, { token: rig.relay.token('org-a', viewer) });
  assert.equal(shown.status, 200);
  assert.equal(shown.body.status, 'dead');
  assert.equal(shown.body.attempt_log[0].error, 'invalid_request');
  assert.match(shown.body.last_error, /^webhook-id \(the event id\) holds characters an HTTP header cannot carry/);
});

/**
 * A receiver that echoes the request's headers in its answer (issue 47). The answer body an
 * attempt keeps must not hand the webhook's credentials to the log's readers: they are hidden
 * when the attempt is recorded (with the values it sent), and again when the log is read (rows
 * recorded before, for everyone); a viewer, who may not read the secret, does not get the
 * signature either, from its own field or from an answer that repeats it.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { credentialEchoes, echoMarker, hideEchoes, signatureEchoes } from '../../src/domain/credential-echoes.ts';
import { call, seedOrg } from '../helpers/helpers.ts';
import { attemptsOf, feedLine, startDeliveryRig, startReceiver, waitForDelivery } from '../helpers/receivers.ts';
import { repos } from '../helpers/sqlite-repos.ts';
import { BY_TEST } from '../helpers/audit-helpers.ts';

const API_KEY = 'k-secret-123';
const BEARER = 'abc.def';
const HEADERS = { 'X-Environment': 'production', 'X-Api-Key': API_KEY, Authorization: `Bearer ${BEARER}` } as const;
const HIDDEN_KEY = '[hidden: value of header x-api-key]';
const HIDDEN_AUTHORIZATION = '[hidden: value of header authorization]';
const HIDDEN_SIGNATURE = '[hidden: value of header webhook-signature]';

test('hideEchoes: each credential, as sent or as a JSON string holds it, becomes a marker naming its header; the rest of the text is left as it was', () => {
  const echoes = credentialEchoes([
    ['X-Environment', 'production'],
    ['X-Api-Key', 'k"secret/123'],
    ['Authorization', `Bearer ${BEARER}`],
    ['X-Keyboard-Layout', 'us'],
  ]);
  assert.equal(echoMarker('X-Api-Key'), HIDDEN_KEY);
  assert.equal(
    hideEchoes(`{"x-api-key":"k\\"secret\\/123","raw":"k"secret/123","authorization":"Bearer ${BEARER}","token":"${BEARER}","env":"production"}`, echoes),
    `{"x-api-key":"${HIDDEN_KEY}","raw":"${HIDDEN_KEY}","authorization":"${HIDDEN_AUTHORIZATION}","token":"${HIDDEN_AUTHORIZATION}","env":"production"}`,
  );
  // A short value is hidden where it stands alone, not inside the answer's words.
  assert.equal(hideEchoes('status: us', echoes), 'status: [hidden: value of header x-keyboard-layout]');
  assert.equal(hideEchoes(null, echoes), null);
  assert.equal(hideEchoes('nothing here', []), 'nothing here');
  // The signature: the whole header, each signature of a rotation, and each one's base64 alone.
  const signature = 'v1,S/7k5Zw6WnDMVyE1IcBeajrZqYt71SwKASfylXHC89c= v1,Zm9vYmFyYmF6cXV4cXV1eGNvcmdlZ3JhdWx0Z2FycGx5Pz8=';
  const hidden = hideEchoes(`a ${signature} b v1,S/7k5Zw6WnDMVyE1IcBeajrZqYt71SwKASfylXHC89c= c Zm9vYmFyYmF6cXV4cXV1eGNvcmdlZ3JhdWx0Z2FycGx5Pz8= d`, signatureEchoes(signature));
  assert.equal(hidden, `a ${HIDDEN_SIGNATURE} b ${HIDDEN_SIGNATURE} c ${HIDDEN_SIGNATURE} d`);
});

test('an echoing receiver: the stored answer holds none of the webhook credentials; admins read the rest of it, viewers not the signature either', async (t) => {
  // The receiver is on 127.0.0.1, an internal network: its answers are kept for org-a.
  const rig = await startDeliveryRig(t, { 'delivery.storeInternalResponses': 'org-a' });
  // Answers with the headers it got, as JSON, and with the authorization's token quoted alone.
  const receiver = await startReceiver(t, rig.tls, (req) => ({
    status: 200,
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ received: req.headers, token: String(req.headers.authorization).split(' ')[1] }),
  }));
  const { admin, viewer } = await seedOrg(rig.relay.services, 'org-a');
  const adminToken = rig.relay.token('org-a', admin);
  const viewerToken = rig.relay.token('org-a', viewer);
  const registered = await call(rig.relay.baseUrl, 'POST', '/webhook/register_webhook', { token: adminToken, body: { webhook_url: receiver.url, headers: HEADERS } });
  assert.equal(registered.status, 201, registered.text);
  rig.feed(feedLine('org-a', 'evt_echo_1'));
  const store = rig.relay.store;
  const delivery = await waitForDelivery(store, 'org-a', 'evt_echo_1', (d) => d.status === 'delivered', 'the delivery');
  const [request] = await receiver.waitForRequests(1);
  assert.equal(request!.headers['x-api-key'], API_KEY, 'the receiver got the credential');
  const sentSignature = request!.headers['webhook-signature'] as string;
  assert.match(sentSignature, /^v1,/);

  // As recorded: the credentials the attempt sent are hidden already; nothing else is.
  const [stored] = attemptsOf(store, delivery.id);
  for (const secret of [API_KEY, BEARER]) assert.ok(!stored!.responseBody!.includes(secret), `the stored answer holds ${secret}`);
  assert.equal(JSON.parse(stored!.responseBody!).received['x-api-key'], HIDDEN_KEY);
  assert.equal(JSON.parse(stored!.responseBody!).received.authorization, HIDDEN_AUTHORIZATION);
  assert.equal(JSON.parse(stored!.responseBody!).token, HIDDEN_AUTHORIZATION);
  assert.equal(stored!.sentSignature, sentSignature);

  const read = async (token: string) => {
    const res = await call(rig.relay.baseUrl, 'GET', `/webhook/deliveries/${delivery.id}`, { token });
    assert.equal(res.status, 200, res.text);
    return res.body.attempt_log[0] as { response_body: string; webhook_signature: string | null };
  };
  const asAdmin = await read(adminToken);
  for (const secret of [API_KEY, BEARER]) assert.ok(!asAdmin.response_body.includes(secret), `an admin reads ${secret}`);
  const adminBody = JSON.parse(asAdmin.response_body);
  // An admin, who may read the secret, reads the rest: the signature, the id, the other headers.
  assert.equal(asAdmin.webhook_signature, sentSignature);
  assert.equal(adminBody.received['webhook-signature'], sentSignature);
  assert.equal(adminBody.received['webhook-id'], 'evt_echo_1');
  assert.equal(adminBody.received['x-environment'], 'production');
  assert.equal(adminBody.received['x-api-key'], HIDDEN_KEY);

  const asViewer = await read(viewerToken);
  for (const secret of [API_KEY, BEARER, sentSignature, sentSignature.slice(3)]) assert.ok(!asViewer.response_body.includes(secret), `a viewer reads ${secret}`);
  assert.equal(asViewer.webhook_signature, null);
  const viewerBody = JSON.parse(asViewer.response_body);
  assert.equal(viewerBody.received['webhook-signature'], HIDDEN_SIGNATURE);
  assert.equal(viewerBody.received['webhook-id'], 'evt_echo_1');
  assert.equal(viewerBody.received['x-environment'], 'production');
});

test('attempts recorded before the fix: the webhook credentials are hidden from every reader when the log is read, the signature from viewers', async (t) => {
  const rig = await startDeliveryRig(t);
  const receiver = await startReceiver(t, rig.tls, () => ({ status: 500, body: 'no' }));
  const { admin, viewer } = await seedOrg(rig.relay.services, 'org-a');
  await rig.relay.services.webhooks.register(BY_TEST, 'org-a', { webhook_url: receiver.url, headers: HEADERS });
  rig.feed(feedLine('org-a', 'evt_old_1'));
  const store = rig.relay.store;
  const delivery = await waitForDelivery(store, 'org-a', 'evt_old_1', (d) => d.attempts >= 1, 'a first attempt');
  // An attempt as a hookrelay before issue 47 recorded an echoing receiver's answer: as it came.
  const signature = 'v1,S/7k5Zw6WnDMVyE1IcBeajrZqYt71SwKASfylXHC89c=';
  const echoed = `x-api-key: ${API_KEY}\nauthorization: Bearer ${BEARER}\nwebhook-signature: ${signature}\nx-environment: production`;
  repos(store).deliveries.insertAttempts([
    { deliveryId: delivery.id, attempt: 99, startedAt: Date.now(), durationMs: 5, url: receiver.url, statusCode: 401, errorClass: 'http_status', errorDetail: `HTTP 401 (${API_KEY})`, responseBody: echoed, outcome: 'retry', sentTimestamp: 1_795_336_200, sentSignature: signature },
  ]);
  const oldOne = async (token: string) => {
    const res = await call(rig.relay.baseUrl, 'GET', `/webhook/deliveries/${delivery.id}`, { token: rig.relay.token('org-a', token) });
    assert.equal(res.status, 200, res.text);
    return (res.body.attempt_log as Array<{ attempt: number; response_body: string; error_detail: string }>).find((a) => a.attempt === 99)!;
  };
  const asAdmin = await oldOne(admin);
  assert.equal(asAdmin.response_body, `x-api-key: ${HIDDEN_KEY}\nauthorization: ${HIDDEN_AUTHORIZATION}\nwebhook-signature: ${signature}\nx-environment: production`);
  assert.equal(asAdmin.error_detail, `HTTP 401 (${HIDDEN_KEY})`);
  const asViewer = await oldOne(viewer);
  assert.equal(asViewer.response_body, `x-api-key: ${HIDDEN_KEY}\nauthorization: ${HIDDEN_AUTHORIZATION}\nwebhook-signature: ${HIDDEN_SIGNATURE}\nx-environment: production`);
  // The CLI (`hookrelay deliveries show`) reads the same service: the operator's view, signatures included, credentials hidden.
  const shown = (await rig.relay.services.deliveryLog.get('org-a', delivery.id)).attempts.find((a) => a.attempt === 99)!;
  assert.equal(shown.responseBody, asAdmin.response_body);
  assert.equal(shown.errorDetail, `HTTP 401 (${HIDDEN_KEY})`);
});

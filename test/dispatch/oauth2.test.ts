/**
 * OAuth2 client credentials (issue 43) against a real token service: oidc-provider's client
 * credentials grant issuing JWT access tokens, and a real HTTPS receiver that accepts only
 * tokens that service signed (verified with jose against its JWKS). Tokens are cached (one
 * fetch for many deliveries), fetched again when they near their expiry and after a 401, and
 * a token service that is down makes attempts fail with a clear, retryable error until it is
 * back. The client secret and the tokens appear in no log line, delivery log or answer.
 */
import assert from 'node:assert/strict';
import { test, type TestContext } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { createLocalJWKSet, jwtVerify } from 'jose';
import { createLogger } from '../../src/log.ts';
import { call, seedOrg } from '../helpers/helpers.ts';
import { RESOURCE, startOidcProvider, type TestOidcProvider } from '../helpers/oidc-provider.ts';
import { attemptsOf, deliveriesOfEvent, feedLine, startConnectProxy, startDeliveryRig, startReceiver, waitFor, waitForDelivery, type Receiver, type RecordedRequest } from '../helpers/receivers.ts';

const SECRET = 'hookrelay-client-secret-7Qx9Lm2Vw8';

function capture() {
  const lines: string[] = [];
  return { lines, stream: { write: (line: string) => void lines.push(line) } };
}

/** A receiver that answers 200 to a request whose Bearer token the provider signed for RESOURCE, 401 to any other; it records the tokens it saw. */
async function startTokenReceiver(t: TestContext, idp: TestOidcProvider): Promise<{ receiver: Receiver; tokens: string[]; refuseNext(n: number): void }> {
  const jwks = createLocalJWKSet(idp.publicJwks() as never);
  const tokens: string[] = [];
  let refuse = 0;
  const receiver = await startReceiver(t, idp.tls, async (req: RecordedRequest) => {
    const header = req.headers.authorization ?? '';
    const token = /^Bearer (\S+)$/.exec(header)?.[1];
    if (token === undefined) return { status: 401, body: 'no bearer token' };
    tokens.push(token);
    if (refuse > 0) {
      refuse -= 1;
      // A receiver that quotes what it refused: the log must not keep the token.
      return { status: 401, body: `token ${token} was revoked` };
    }
    try {
      await jwtVerify(token, jwks, { issuer: idp.issuer, audience: RESOURCE });
      return { status: 200, body: 'ok' };
    } catch (err) {
      return { status: 401, body: `invalid token: ${(err as Error).message}` };
    }
  });
  return { receiver, tokens, refuseNext: (n) => (refuse = n) };
}

async function setUp(t: TestContext, ttlSeconds = 600, overrides: Record<string, string> = {}) {
  const idp = await startOidcProvider(t);
  idp.serviceClient({ clientId: 'hookrelay-acme', secret: SECRET, accessTokenTtlSeconds: ttlSeconds });
  const log = capture();
  // The receiver's answers are kept (it is on 127.0.0.1, an internal address): what they repeat is what the log must hide.
  const rig = await startDeliveryRig(t, { 'delivery.caFile': idp.tls.caFile, 'delivery.storeInternalResponses': 'acme', ...overrides }, { log: createLogger('debug', log.stream) });
  const target = await startTokenReceiver(t, idp);
  const { admin } = await seedOrg(rig.relay.services, 'acme');
  const token = rig.relay.token('acme', admin);
  const registered = await call(rig.relay.baseUrl, 'POST', '/webhook/register_webhook', {
    token,
    body: { webhook_url: target.receiver.url, oauth2: { token_url: `${idp.issuer}/token`, client_id: 'hookrelay-acme', client_secret: SECRET, scope: 'api' } },
  });
  assert.equal(registered.status, 201, registered.text);
  assert.deepEqual(registered.body.oauth2, { token_url: `${idp.issuer}/token`, client_id: 'hookrelay-acme', scope: 'api', audience: null, client_auth: 'client_secret_basic' });
  assert.ok(!registered.text.includes(SECRET));
  return { idp, rig, log, token, ...target };
}

function assertNoSecrets(texts: readonly string[], tokens: readonly string[]): void {
  for (const text of texts) {
    assert.ok(!text.includes(SECRET), 'the client secret leaked');
    for (const tok of tokens) assert.ok(!text.includes(tok), 'an access token leaked');
  }
}

test('one token for many deliveries: every request carries a Bearer token the receiver verifies; nothing secret in the log, the delivery log or the answers', async (t) => {
  const { idp, rig, log, token, receiver, tokens } = await setUp(t);
  const ids = Array.from({ length: 12 }, (_, i) => `evt_many_${i}`);
  rig.feed(...ids.map((id, i) => feedLine('acme', id, `ar_${i}`)));
  for (const id of ids) await waitForDelivery(rig.relay.store, 'acme', id, (d) => d.status === 'delivered', `${id} delivered`);
  assert.equal(idp.tokenRequests().client_credentials, 1, 'one token fetched for all of them');
  assert.equal(new Set(tokens).size, 1);
  assert.equal(receiver.requests.length, 12);
  for (const r of receiver.requests) assert.match(String(r.headers.authorization), /^Bearer ey/);

  const d = deliveriesOfEvent(rig.relay.store, 'acme', 'evt_many_0')[0]!;
  const detail = await call(rig.relay.baseUrl, 'GET', `/webhook/deliveries/${d.id}`, { token });
  assert.equal(detail.status, 200);
  assert.equal(detail.body.request.headers.authorization, '(set; value hidden)');
  const webhook = await call(rig.relay.baseUrl, 'GET', '/webhook/get_webhook', { token });
  assertNoSecrets([...log.lines, detail.text, webhook.text], tokens);
});

test('a token near its expiry is replaced before it is used (short lifetime): a second fetch', async (t) => {
  // 2 s tokens: replaced once half their life is gone.
  const { idp, rig, tokens } = await setUp(t, 2);
  rig.feed(feedLine('acme', 'evt_exp_1'));
  await waitForDelivery(rig.relay.store, 'acme', 'evt_exp_1', (d) => d.status === 'delivered', 'evt_exp_1 delivered');
  await sleep(1_300);
  rig.feed(feedLine('acme', 'evt_exp_2'));
  await waitForDelivery(rig.relay.store, 'acme', 'evt_exp_2', (d) => d.status === 'delivered', 'evt_exp_2 delivered');
  assert.equal(idp.tokenRequests().client_credentials, 2);
  assert.equal(new Set(tokens).size, 2);
});

test('a receiver that answers 401 gets a new token once, within the same attempt; the refused token is hidden in the log', async (t) => {
  const { idp, rig, log, token, receiver, tokens, refuseNext } = await setUp(t);
  refuseNext(1);
  rig.feed(feedLine('acme', 'evt_401'));
  const d = await waitForDelivery(rig.relay.store, 'acme', 'evt_401', (x) => x.status === 'delivered', 'evt_401 delivered after one new token');
  assert.equal(d.attempts, 1, 'one attempt: the 401 was answered with a new token inside it');
  assert.equal(receiver.requests.length, 2);
  assert.equal(idp.tokenRequests().client_credentials, 2);
  assert.notEqual(tokens[0], tokens[1]);

  // Twice refused: the attempt fails with the receiver's 401 (no loop), and its body hides the token.
  refuseNext(2);
  rig.feed(feedLine('acme', 'evt_401b'));
  const failed = await waitForDelivery(rig.relay.store, 'acme', 'evt_401b', (x) => x.attempts >= 1, 'evt_401b attempted');
  const [attempt] = attemptsOf(rig.relay.store, failed.id);
  assert.equal(attempt?.statusCode, 401);
  assert.match(attempt?.responseBody ?? '', /^token \[hidden: value of header authorization\] was revoked$/);
  const detail = await call(rig.relay.baseUrl, 'GET', `/webhook/deliveries/${failed.id}`, { token });
  assertNoSecrets([...log.lines, detail.text, JSON.stringify(rig.relay.store.db.prepare('SELECT * FROM delivery_attempts').all())], tokens);
});

test('the token service down: attempts fail with a clear, retryable oauth2_token_failed, then succeed once it is back', async (t) => {
  const { idp, rig, log, tokens } = await setUp(t, 600, { 'delivery.retrySchedule': '1s,1s,1s,1s' });
  await idp.stop();
  rig.feed(feedLine('acme', 'evt_down'));
  const failed = await waitForDelivery(rig.relay.store, 'acme', 'evt_down', (d) => d.attempts >= 1, 'a failed attempt');
  const [attempt] = attemptsOf(rig.relay.store, failed.id);
  assert.equal(attempt?.errorClass, 'oauth2_token_failed');
  assert.equal(attempt?.errorDetail, `the token service at ${idp.issuer}/token could not be reached (ECONNREFUSED)`);
  assert.equal(failed.status, 'pending', 'retried on the schedule');
  await idp.restart();
  await waitForDelivery(rig.relay.store, 'acme', 'evt_down', (d) => d.status === 'delivered', 'delivered once the token service is back', 15_000);
  assertNoSecrets(log.lines, tokens);
  await waitFor('the relay logged the failed attempt', () => log.lines.some((l) => l.includes('oauth2_token_failed')));
});

test('a token service that refuses the client: the error names its status and RFC 6749 code, never the secret', async (t) => {
  const { idp, rig, token } = await setUp(t);
  // Registered again with a wrong secret.
  const wrong = 'not-the-secret-zZ81';
  const res = await call(rig.relay.baseUrl, 'POST', '/webhook/register_webhook', {
    token,
    body: { webhook_url: (await call(rig.relay.baseUrl, 'GET', '/webhook/get_webhook', { token })).body.webhook_url, oauth2: { token_url: `${idp.issuer}/token`, client_id: 'hookrelay-acme', client_secret: wrong } },
  });
  assert.equal(res.status, 200, res.text);
  rig.feed(feedLine('acme', 'evt_bad_client'));
  const failed = await waitForDelivery(rig.relay.store, 'acme', 'evt_bad_client', (d) => d.attempts >= 1, 'a failed attempt');
  const [attempt] = attemptsOf(rig.relay.store, failed.id);
  assert.equal(attempt?.errorClass, 'oauth2_token_failed');
  assert.equal(attempt?.errorDetail, `the token service at ${idp.issuer}/token answered HTTP 401 (invalid_client)`);
  assert.ok(!JSON.stringify(attempt).includes(wrong));
});

test('through the egress proxy: the token fetch and the delivery each go through a CONNECT tunnel', async (t) => {
  const proxy = await startConnectProxy(t);
  const { idp, rig, receiver } = await setUp(t, 600, { 'delivery.proxy': proxy.url });
  rig.feed(feedLine('acme', 'evt_proxy'));
  await waitForDelivery(rig.relay.store, 'acme', 'evt_proxy', (d) => d.status === 'delivered', 'delivered through the proxy');
  const authorities = proxy.tunnels.filter((x) => x.status === 200).map((x) => x.authority);
  assert.ok(authorities.includes(new URL(idp.issuer).host), `a tunnel to the token service: ${JSON.stringify(authorities)}`);
  assert.ok(authorities.includes(`127.0.0.1:${receiver.port}`), 'a tunnel to the receiver');
  assert.deepEqual(proxy.plainRequests, []);
});

/**
 * POST|PUT /webhook/register_webhook, GET /webhook/get_webhook and GET /webhook/get_secret over
 * real HTTP: creation and replacement, the signing secret (shown once, admins only, never in
 * get_webhook), the URL rules, and that a refused registration leaves the database untouched.
 */
import assert from 'node:assert/strict';
import { test, type TestContext } from 'node:test';
import { assertProblem, assertUnchanged, call, seedOrg, startRelay, type RunningRelay } from '../helpers/helpers.ts';
import { repos } from '../helpers/sqlite-repos.ts';

const WEBHOOK_VIEW_KEYS = ['active_hmac', 'client_certificate', 'created_at', 'headers', 'oauth2', 'rate_limit', 'status', 'updated_at', 'webhook_url'];
const ISO_DATE = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/;

async function setup(t: TestContext, overrides: Record<string, string> = {}) {
  const relay = await startRelay(t, overrides);
  const users = await seedOrg(relay.services, 'org-a');
  return { relay, adminToken: relay.token('org-a', users.admin), viewerToken: relay.token('org-a', users.viewer) };
}

function register(relay: RunningRelay, token: string, body: unknown, method = 'POST') {
  return call(relay.baseUrl, method, '/webhook/register_webhook', { token, body, headers: { Version: 'v1.2' } });
}

/** A Standard Webhooks secret: `whsec_` + canonical base64 of exactly 32 bytes. */
function assertStandardWebhooksSecret(secret: unknown): void {
  assert.equal(typeof secret, 'string');
  const text = secret as string;
  assert.ok(text.startsWith('whsec_'), `secret ${text} lacks the whsec_ prefix`);
  const raw = Buffer.from(text.slice('whsec_'.length), 'base64');
  assert.equal(raw.length, 32);
  assert.equal(raw.toString('base64'), text.slice('whsec_'.length), 'the secret is not canonical base64');
}

test('registering a first webhook is 201 with the configuration and a secret shown once', async (t) => {
  const { relay, adminToken } = await setup(t);
  const res = await register(relay, adminToken, { webhook_url: 'https://hooks.example.com/hookrelay' });
  assert.equal(res.status, 201, res.text);
  assert.equal(res.headers.get('version'), 'v1.2');
  assert.match(res.headers.get('content-type') ?? '', /^application\/json\b/);
  assert.deepEqual(Object.keys(res.body).sort(), ['message', 'secret', ...WEBHOOK_VIEW_KEYS].sort());
  assert.equal(
    res.body.message,
    'Webhook registered: status changes of anticipation requests will be sent to https://hooks.example.com/hookrelay. HMAC signing is on: give the secret below to your receiver, which verifies signatures with it (an admin can read it again with GET /webhook/get_secret)',
  );
  assert.equal(res.body.webhook_url, 'https://hooks.example.com/hookrelay');
  assert.equal(res.body.active_hmac, true, 'active_hmac defaults to true');
  assert.equal(res.body.status, 'active');
  assert.match(res.body.created_at, ISO_DATE);
  assert.equal(res.body.updated_at, res.body.created_at);
  assertStandardWebhooksSecret(res.body.secret);

  const stored = repos(relay.store).webhooks.getWithSecret('org-a');
  assert.equal(stored?.url, 'https://hooks.example.com/hookrelay');
  assert.equal(stored?.secret, res.body.secret);

  const again = await call(relay.baseUrl, 'GET', '/webhook/get_secret', { token: adminToken });
  assert.equal(again.status, 200);
  assert.deepEqual(again.body, { secret: res.body.secret });
});

test('registering again replaces the URL, says so, keeps the secret and does not return it', async (t) => {
  const { relay, adminToken } = await setup(t);
  const first = await register(relay, adminToken, { webhook_url: 'https://old.example.com/hook' });
  assert.equal(first.status, 201);

  const second = await register(relay, adminToken, { webhook_url: 'https://new.example.com/hook' }, 'PUT');
  assert.equal(second.status, 200, second.text);
  assert.equal(
    second.body.message,
    'Webhook replaced: https://old.example.com/hook was replaced by https://new.example.com/hook (one webhook per organization). HMAC signing is on with the existing secret',
  );
  assert.equal('secret' in second.body, false);
  assert.equal(second.text.includes(first.body.secret), false);
  assert.equal(second.body.webhook_url, 'https://new.example.com/hook');
  assert.equal(second.body.created_at, first.body.created_at);
  assert.ok(Date.parse(second.body.updated_at) >= Date.parse(first.body.updated_at));

  const view = await call(relay.baseUrl, 'GET', '/webhook/get_webhook', { token: adminToken });
  assert.equal(view.body.webhook_url, 'https://new.example.com/hook');
  const secret = await call(relay.baseUrl, 'GET', '/webhook/get_secret', { token: adminToken });
  assert.deepEqual(secret.body, { secret: first.body.secret });
  assert.deepEqual(relay.store.db.prepare('SELECT org_id, url FROM webhooks').all(), [{ org_id: 'org-a', url: 'https://new.example.com/hook' }]);
});

test('active_hmac false registers without a secret; turning it on later generates one', async (t) => {
  const { relay, adminToken } = await setup(t);
  const off = await register(relay, adminToken, { webhook_url: 'https://hooks.example.com/h', active_hmac: false });
  assert.equal(off.status, 201, off.text);
  assert.equal(off.body.active_hmac, false);
  assert.equal('secret' in off.body, false);
  assert.match(off.body.message, /\. HMAC signing is off$/);
  assert.equal(repos(relay.store).webhooks.getWithSecret('org-a')?.secret, null);

  const noSecret = await call(relay.baseUrl, 'GET', '/webhook/get_secret', { token: adminToken });
  assertProblem(noSecret, 404, 'secret_not_configured');

  const on = await register(relay, adminToken, { webhook_url: 'https://hooks.example.com/h', active_hmac: true });
  assert.equal(on.status, 200, on.text);
  assert.equal(on.body.active_hmac, true);
  assertStandardWebhooksSecret(on.body.secret);
  assert.match(on.body.message, /^Webhook replaced: .*HMAC signing is on: give the secret below to your receiver, which verifies signatures with it \(an admin can read it again with GET \/webhook\/get_secret\)$/);
});

test('get_webhook returns { webhook_url, active_hmac, status, created_at, updated_at } with its health and rotation state, and never the secret', async (t) => {
  const { relay, adminToken, viewerToken } = await setup(t);
  const created = await register(relay, adminToken, { webhook_url: 'https://hooks.example.com/h' });
  for (const token of [adminToken, viewerToken]) {
    const res = await call(relay.baseUrl, 'GET', '/webhook/get_webhook', { token, headers: { Version: 'v1' } });
    assert.equal(res.status, 200, res.text);
    assert.equal(res.headers.get('version'), 'v1.0');
    assert.deepEqual(res.body, {
      webhook_url: 'https://hooks.example.com/h',
      active_hmac: true,
      headers: {},
      status: 'active',
      rate_limit: null,
      client_certificate: null,
      oauth2: null,
      created_at: created.body.created_at,
      updated_at: created.body.updated_at,
      status_detail: 'active; no delivery has succeeded yet',
      consecutive_failures: 0,
      failing_since: null,
      last_success_at: null,
      disabled_reason: null,
      last_error: null,
      previous_secret_expires_at: null,
    });
    assert.equal(res.text.includes(created.body.secret), false);
    assert.equal(res.text.includes('whsec_'), false);
  }
});

test('get_webhook and get_secret without a webhook are 404 webhook_not_configured', async (t) => {
  const { relay, adminToken, viewerToken } = await setup(t);
  const view = await call(relay.baseUrl, 'GET', '/webhook/get_webhook', { token: viewerToken });
  const body = assertProblem(view, 404, 'webhook_not_configured');
  assert.equal(body.title, 'No webhook configured');
  const secret = await call(relay.baseUrl, 'GET', '/webhook/get_secret', { token: adminToken });
  assertProblem(secret, 404, 'webhook_not_configured');
});

test('a viewer may read the webhook but not register one nor read the secret (403)', async (t) => {
  const { relay, adminToken, viewerToken } = await setup(t);
  await register(relay, adminToken, { webhook_url: 'https://hooks.example.com/h' });
  for (const method of ['POST', 'PUT']) {
    const res = await assertUnchanged(relay.store, () => register(relay, viewerToken, { webhook_url: 'https://evil.example.com/h' }, method));
    const body = assertProblem(res, 403, 'forbidden');
    assert.equal(res.headers.get('www-authenticate'), 'Bearer realm="hookrelay", error="insufficient_scope"');
    assert.match(body.detail, /saas_viewer/);
  }
  const secret = await call(relay.baseUrl, 'GET', '/webhook/get_secret', { token: viewerToken });
  assertProblem(secret, 403, 'forbidden');
  assert.equal(secret.text.includes('whsec_'), false);
});

test('webhook_url must be an absolute https URL of at most 2048 characters, without user-info or fragment', async (t) => {
  const { relay, adminToken } = await setup(t);
  const base = 'https://hooks.example.com/';
  const exactly2048 = base + 'a'.repeat(2048 - base.length);
  const refused: Array<{ url: unknown; reason: string }> = [
    { url: exactly2048 + 'a', reason: 'must be at most 2048 characters' },
    { url: 'https://hooks.example.com/h#section', reason: 'must not contain a fragment (#...)' },
    { url: 'https://hooks.example.com/h#', reason: 'must not contain a fragment (#...)' },
    { url: '/hooks/relative', reason: 'must be an absolute URL such as https://example.com/hooks' },
    { url: 'hooks.example.com/h', reason: 'must be an absolute URL such as https://example.com/hooks' },
    { url: 'https:hooks.example.com/h', reason: 'must be an absolute URL such as https://example.com/hooks' },
    // The URL parser would drop these characters; the stored URL must be the one called.
    { url: ' https://hooks.example.com/h', reason: 'must not contain spaces or control characters' },
    { url: 'https://hooks.exa\nmple.com/h', reason: 'must not contain spaces or control characters' },
    { url: 'https://hooks.example.com/h\t', reason: 'must not contain spaces or control characters' },
    { url: '', reason: 'must not be empty' },
    { url: 42, reason: 'must be a string' },
    { url: null, reason: 'is required' },
    { url: undefined, reason: 'is required' },
  ];
  for (const { url, reason } of refused) {
    const res = await assertUnchanged(relay.store, () => register(relay, adminToken, url === undefined ? {} : { webhook_url: url }));
    const body = assertProblem(res, 422, 'validation_failed');
    assert.deepEqual(body.invalid_params, [{ name: 'webhook_url', reason }], String(url).slice(0, 60));
  }
  // What the URL may point at is the URL policy's: its own code, with the reason.
  const policy: Array<{ url: string; reason: string; message: string }> = [
    { url: 'http://hooks.example.com/h', reason: 'scheme_not_allowed', message: 'must use the https scheme (http only when the operator sets delivery.allowHttp)' },
    { url: 'ftp://hooks.example.com/h', reason: 'scheme_not_allowed', message: 'must use the https scheme (http only when the operator sets delivery.allowHttp)' },
    { url: 'HTTP://hooks.example.com/h', reason: 'scheme_not_allowed', message: 'must use the https scheme (http only when the operator sets delivery.allowHttp)' },
    { url: 'https://user:pass@hooks.example.com/h', reason: 'credentials_not_allowed', message: 'must not contain user-info (user:password@); put a token in the path or rely on the signature' },
    { url: 'https://user@hooks.example.com/h', reason: 'credentials_not_allowed', message: 'must not contain user-info (user:password@); put a token in the path or rely on the signature' },
  ];
  for (const { url, reason, message } of policy) {
    const res = await assertUnchanged(relay.store, () => register(relay, adminToken, { webhook_url: url }));
    const body = assertProblem(res, 422, 'webhook_url_not_allowed');
    assert.equal(body.reason, reason, url);
    assert.deepEqual(body.invalid_params, [{ name: 'webhook_url', reason: message }], url);
  }
  const accepted = await register(relay, adminToken, { webhook_url: exactly2048 });
  assert.equal(accepted.status, 201, 'a URL of exactly 2048 characters is accepted');
  assert.equal(accepted.body.webhook_url, exactly2048);
});

test('a mistyped active_hmac is 422 on its own field and changes nothing', async (t) => {
  const { relay, adminToken } = await setup(t);
  for (const active_hmac of ['true', 1, null]) {
    const res = await assertUnchanged(relay.store, () => register(relay, adminToken, { webhook_url: 'https://hooks.example.com/h', active_hmac }));
    const body = assertProblem(res, 422, 'validation_failed');
    assert.deepEqual(body.invalid_params, [{ name: 'active_hmac', reason: 'must be true or false' }]);
  }
  const both = await assertUnchanged(relay.store, () => register(relay, adminToken, { webhook_url: 'https://x.example.com/#top', active_hmac: 'no' }));
  assert.deepEqual(assertProblem(both, 422, 'validation_failed').invalid_params, [
    { name: 'webhook_url', reason: 'must not contain a fragment (#...)' },
    { name: 'active_hmac', reason: 'must be true or false' },
  ]);
});

test('a refused replacement keeps the registered webhook as it was', async (t) => {
  const { relay, adminToken } = await setup(t);
  await register(relay, adminToken, { webhook_url: 'https://hooks.example.com/h' });
  const res = await assertUnchanged(relay.store, () => register(relay, adminToken, { webhook_url: 'https://hooks.example.com/h#x' }, 'PUT'));
  assertProblem(res, 422, 'validation_failed');
  const view = await call(relay.baseUrl, 'GET', '/webhook/get_webhook', { token: adminToken });
  assert.equal(view.body.webhook_url, 'https://hooks.example.com/h');
});

test('plain http is accepted only when delivery.allowHttp is true', async (t) => {
  const { relay, adminToken } = await setup(t, { 'delivery.allowHttp': 'true', 'delivery.allowNetworks': '127.0.0.1/32' });
  const res = await register(relay, adminToken, { webhook_url: 'http://127.0.0.1:9999/hook' });
  assert.equal(res.status, 201, res.text);
  assert.equal(res.body.webhook_url, 'http://127.0.0.1:9999/hook');
  const ftp = await assertUnchanged(relay.store, () => register(relay, adminToken, { webhook_url: 'ftp://127.0.0.1/hook' }));
  assert.deepEqual(assertProblem(ftp, 422, 'webhook_url_not_allowed').invalid_params, [{ name: 'webhook_url', reason: 'must use the https or http scheme' }]);
});

test('headers: registered as an object, answered in order with credential values null, replaced by each registration (the message names those removed)', async (t) => {
  const { relay, adminToken, viewerToken } = await setup(t);
  const token = 'sk_live_never-echoed-0123456789';
  const first = await register(relay, adminToken, {
    webhook_url: 'https://hooks.example.com/h',
    headers: { 'X-Environment': 'production', Authorization: `Bearer ${token}`, 'X-Api-Key': token, 'X-Route': `Basic ${token}` },
  });
  assert.equal(first.status, 201, first.text);
  const shown = { 'X-Environment': 'production', Authorization: null, 'X-Api-Key': null, 'X-Route': null };
  assert.deepEqual(first.body.headers, shown);
  assert.deepEqual(Object.keys(first.body.headers), ['X-Environment', 'Authorization', 'X-Api-Key', 'X-Route'], 'in the order given');
  for (const t of [adminToken, viewerToken]) {
    const read = await call(relay.baseUrl, 'GET', '/webhook/get_webhook', { token: t });
    assert.deepEqual(read.body.headers, shown);
    assert.equal(read.text.includes(token), false);
  }
  assert.equal(first.text.includes(token), false);
  assert.deepEqual(repos(relay.store).webhooks.get('org-a')?.headers, [
    ['X-Environment', 'production'],
    ['Authorization', `Bearer ${token}`],
    ['X-Api-Key', token],
    ['X-Route', `Basic ${token}`],
  ]);

  // Registering again describes the whole webhook: headers left out are gone, and the answer says which.
  const again = await register(relay, adminToken, { webhook_url: 'https://hooks.example.com/h', headers: { 'x-environment': 'staging' } });
  assert.equal(again.status, 200, again.text);
  assert.deepEqual(again.body.headers, { 'x-environment': 'staging' });
  assert.match(again.body.message, /\. Headers no longer sent \(this registration did not set them\): Authorization, X-Api-Key, X-Route$/);
  const without = await register(relay, adminToken, { webhook_url: 'https://hooks.example.com/h' });
  assert.deepEqual(without.body.headers, {});
  assert.match(without.body.message, /: x-environment$/);
  const unchanged = await register(relay, adminToken, { webhook_url: 'https://hooks.example.com/h', headers: null });
  assert.doesNotMatch(unchanged.body.message, /Headers/);
});

test('headers: reserved, malformed, duplicated or too many are 422 naming each header, never quoting a value, and change nothing', async (t) => {
  const { relay, adminToken } = await setup(t);
  await register(relay, adminToken, { webhook_url: 'https://hooks.example.com/h', headers: { 'X-Keep': 'kept' } });
  const secret = 'Bearer do-not-echo-me-42';
  const cases: Array<[unknown, RegExp]> = [
    [{ 'Webhook-Signature': 'v1,forged' }, /^must not set "Webhook-Signature": it is reserved \(hookrelay sets it \(Standard Webhooks\)\)$/],
    [{ 'content-type': 'text/plain' }, /^must not set "content-type": it is reserved/],
    [{ Host: 'evil.example' }, /^must not set "Host": it is reserved/],
    [{ 'Transfer-Encoding': 'chunked' }, /^must not set "Transfer-Encoding": it is reserved/],
    [{ 'Proxy-Authorization': secret }, /^must not set "Proxy-Authorization": it is reserved/],
    [{ 'X A': 'v' }, /^must not have "X A" as a name/],
    [{ 'X-Tenant': 'a', 'x-TENANT': 'b' }, /^must not set "x-TENANT" twice: header names are case-insensitive/],
    [{ Authorization: `${secret}\r\nX-Injected: yes` }, /^must give "Authorization" a value of printable ASCII characters/],
    [{ Authorization: null }, /^must give "Authorization" a string value \(null is how answers show a hidden credential/],
    [['X-A', 'b'], /^must be an object of header names to values/],
    [Object.fromEntries(Array.from({ length: 21 }, (_, i) => [`X-H${i}`, 'v'])), /^must hold at most 20 headers; got 21$/],
  ];
  for (const [headers, reason] of cases) {
    const res = await assertUnchanged(relay.store, () => register(relay, adminToken, { webhook_url: 'https://hooks.example.com/other', headers }));
    const body = assertProblem(res, 422, 'validation_failed');
    assert.equal(body.invalid_params.length, 1, res.text);
    assert.equal(body.invalid_params[0].name, 'headers');
    assert.match(body.invalid_params[0].reason, reason);
    assert.equal(res.text.includes('do-not-echo-me'), false, res.text);
  }
  // Every problem at once, beside the other fields'.
  const several = await register(relay, adminToken, { webhook_url: 'ftp:nope', headers: { Host: 'x', 'X-Empty': '' } });
  assert.deepEqual(assertProblem(several, 422, 'validation_failed').invalid_params.map((p: { name: string }) => p.name), ['webhook_url', 'headers', 'headers']);
  assert.deepEqual(repos(relay.store).webhooks.get('org-a')?.headers, [['X-Keep', 'kept']]);
});

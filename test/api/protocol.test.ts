/**
 * The HTTP protocol of the admin API, over real HTTP: Version negotiation, body limits and
 * parsing, content types, the per-token rate limit, unknown paths and methods, the public
 * health routes, and error bodies that never show internals.
 */
import assert from 'node:assert/strict';
import { test, type TestContext } from 'node:test';
import { assertProblem, assertUnchanged, call, seedOrg, startRelay, tempDir, writeKeyPair, type RunningRelay } from '../helpers/helpers.ts';

async function setup(t: TestContext, overrides: Record<string, string> = {}) {
  const relay = await startRelay(t, overrides);
  const users = await seedOrg(relay.services, 'org-a');
  return { relay, ...users, adminToken: relay.token('org-a', users.admin), viewerToken: relay.token('org-a', users.viewer) };
}

/** A PUT /users/update_role with a raw body, which would promote the viewer if it were accepted. */
function rawUpdate(relay: RunningRelay, token: string, rawBody: string, contentType = 'application/json') {
  return call(relay.baseUrl, 'PUT', '/users/update_role', { token, rawBody, headers: { 'content-type': contentType } });
}

/** The methods of an Allow header, sorted. */
const allowedMethods = (res: { headers: Headers }) => (res.headers.get('allow') ?? '').split(/,\s*/).sort();

test('every accepted Version value is echoed as the version used; none means the newest', async (t) => {
  const { relay, adminToken } = await setup(t);
  const accepted: Array<[string | null, string]> = [
    ['v1', 'v1.0'],
    ['1', 'v1.0'],
    ['v1.0', 'v1.0'],
    ['1.0', 'v1.0'],
    ['v1.1', 'v1.1'],
    ['1.1', 'v1.1'],
    ['v1.2', 'v1.2'],
    ['1.2', 'v1.2'],
    [null, 'v1.2'],
  ];
  for (const [sent, used] of accepted) {
    for (const [method, path] of [
      ['GET', '/users/get_roles'],
      ['GET', '/webhook/get_webhook'],
    ]) {
      const res = await call(relay.baseUrl, method!, path!, { token: adminToken, ...(sent === null ? {} : { headers: { Version: sent } }) });
      assert.equal(res.headers.get('version'), used, `Version ${sent} on ${path}`);
      assert.equal(res.status, path === '/users/get_roles' ? 200 : 404);
    }
  }
});

test('any other Version is 400 unsupported_version listing the supported values, and changes nothing', async (t) => {
  const { relay, adminToken, viewer } = await setup(t);
  for (const version of ['v2', 'v1.3', '2.0', 'v0.9', 'latest', 'garbage', 'v1.2.0', 'v01', '1.00', 'V1.2', 'v', '*', 'v1.2, v1.1']) {
    const res = await assertUnchanged(relay.store, () =>
      call(relay.baseUrl, 'PUT', '/users/update_role', { token: adminToken, headers: { Version: version }, body: { email: viewer, role_name: 'saas_admin' } }),
    );
    const body = assertProblem(res, 400, 'unsupported_version');
    assert.equal(body.title, 'Unsupported API version');
    assert.deepEqual(body.supported_versions, ['v1.0', 'v1.1', 'v1.2']);
    assert.equal(
      body.detail,
      `Version "${version}" is not supported; send one of v1.0, 1.0, v1.1, 1.1, v1.2, 1.2, v1, 1, or omit the header for v1.2`,
    );
  }
});

test('a JSON body over 64 KiB is 413, declared or streamed; exactly 64 KiB is read', async (t) => {
  const { relay, adminToken, viewer } = await setup(t);
  const bodyOfSize = (bytes: number) => {
    const head = JSON.stringify({ email: viewer, role_name: 'saas_admin', padding: '' });
    return head.replace('"padding":""', `"padding":"${'x'.repeat(bytes - head.length)}"`);
  };
  assert.equal(Buffer.byteLength(bodyOfSize(65_537)), 65_537);

  const declared = await assertUnchanged(relay.store, () => rawUpdate(relay, adminToken, bodyOfSize(65_537)));
  const problem = assertProblem(declared, 413, 'payload_too_large');
  assert.equal(problem.limit_bytes, 65_536);

  // Without Content-Length (chunked), the limit is enforced while reading.
  const streamed = await assertUnchanged(relay.store, async () => {
    const bytes = new TextEncoder().encode(bodyOfSize(200_000));
    const stream = new ReadableStream<Uint8Array>({
      start(controller) {
        for (let i = 0; i < bytes.length; i += 16_384) controller.enqueue(bytes.subarray(i, i + 16_384));
        controller.close();
      },
    });
    const res = await fetch(`${relay.baseUrl}/users/update_role`, {
      method: 'PUT',
      headers: { authorization: `Bearer ${adminToken}`, 'content-type': 'application/json' },
      body: stream,
      duplex: 'half',
    } as RequestInit & { duplex: 'half' });
    const text = await res.text();
    return { status: res.status, headers: res.headers, text, body: JSON.parse(text) };
  });
  assertProblem(streamed, 413, 'payload_too_large');

  const atLimit = await rawUpdate(relay, adminToken, bodyOfSize(65_536));
  assert.equal(atLimit.status, 200, atLimit.text);
});

test('malformed JSON and JSON that is not an object are 400 malformed_json and change nothing', async (t) => {
  const { relay, adminToken, viewer } = await setup(t);
  for (const raw of [`{"email": "${viewer}", "role_name": "saas_admin"`, '{email: 1}', "{'email': 1}", 'nul', '{"a":1}}']) {
    const res = await assertUnchanged(relay.store, () => rawUpdate(relay, adminToken, raw));
    const body = assertProblem(res, 400, 'malformed_json');
    assert.equal(body.title, 'Malformed JSON body');
    assert.match(body.detail, /^The body is not valid JSON \(.+\); send a JSON object$/);
  }
  for (const raw of ['[]', JSON.stringify([{ email: viewer, role_name: 'saas_admin' }]), '"saas_admin"', '42', 'true', 'null']) {
    const res = await assertUnchanged(relay.store, () => rawUpdate(relay, adminToken, raw));
    assert.equal(assertProblem(res, 400, 'malformed_json').detail, 'The body must be a JSON object');
  }
  for (const raw of ['{"webhook_url": ', '["https://a.example.com"]']) {
    const res = await assertUnchanged(relay.store, () =>
      call(relay.baseUrl, 'POST', '/webhook/register_webhook', { token: adminToken, rawBody: raw, headers: { 'content-type': 'application/json' } }),
    );
    assertProblem(res, 400, 'malformed_json');
  }
});

test('a body that is not JSON by its Content-Type is 415; application/json with a charset and +json are read', async (t) => {
  const { relay, adminToken, viewer } = await setup(t);
  const json = JSON.stringify({ email: viewer, role_name: 'saas_admin' });
  for (const [type, raw] of [
    ['text/plain', json],
    ['application/x-www-form-urlencoded', `email=${encodeURIComponent(viewer)}&role_name=saas_admin`],
    ['multipart/form-data; boundary=x', `--x\r\nContent-Disposition: form-data; name="email"\r\n\r\n${viewer}\r\n--x--\r\n`],
    ['application/xml', '<role/>'],
  ] as const) {
    const res = await assertUnchanged(relay.store, () => rawUpdate(relay, adminToken, raw, type));
    const body = assertProblem(res, 415, 'unsupported_media_type');
    assert.equal(body.detail, `Content-Type "${type}" is not supported; send the body as application/json`);
  }
  const webhook = await assertUnchanged(relay.store, () =>
    call(relay.baseUrl, 'POST', '/webhook/register_webhook', { token: adminToken, rawBody: '{"webhook_url":"https://a.example.com"}', headers: { 'content-type': 'text/plain' } }),
  );
  assertProblem(webhook, 415, 'unsupported_media_type');

  const charset = await rawUpdate(relay, adminToken, json, 'application/json; charset=utf-8');
  assert.equal(charset.status, 200, charset.text);
  const mergePatch = await call(relay.baseUrl, 'PATCH', '/users/update_role', {
    token: adminToken,
    rawBody: JSON.stringify({ email: viewer, role_name: 'saas_viewer' }),
    headers: { 'content-type': 'application/merge-patch+json' },
  });
  assert.equal(mergePatch.status, 200, mergePatch.text);
});

test('the per-token rate limit answers 429 with Retry-After, changes nothing, and leaves other tokens alone', async (t) => {
  const { relay, admin, adminToken, viewer, viewerToken } = await setup(t, { 'api.rateLimitPerMinute': '1', 'api.rateLimitBurst': '2' });
  for (let i = 0; i < 2; i++) {
    const res = await call(relay.baseUrl, 'GET', '/users/get_roles', { token: adminToken });
    assert.equal(res.status, 200, `request ${i + 1} of the burst`);
  }
  const limited = await assertUnchanged(relay.store, () =>
    call(relay.baseUrl, 'PUT', '/users/update_role', { token: adminToken, body: { email: viewer, role_name: 'saas_admin' } }),
  );
  const body = assertProblem(limited, 429, 'rate_limited');
  const retryAfter = limited.headers.get('retry-after') ?? '';
  assert.match(retryAfter, /^\d+$/);
  assert.ok(Number(retryAfter) >= 1 && Number(retryAfter) <= 60, `Retry-After ${retryAfter} should be within the minute it takes to earn a request`);
  assert.equal(body.retry_after_seconds, Number(retryAfter));
  assert.match(body.detail, /^Rate limit of 1 requests per minute exceeded for this token; retry after \d+ s$/);

  // Another user's token, and another token of the same user, have their own buckets.
  const other = await call(relay.baseUrl, 'GET', '/users/get_roles', { token: viewerToken });
  assert.equal(other.status, 200);
  const fresh = await call(relay.baseUrl, 'PUT', '/users/update_role', { token: relay.token('org-a', admin), body: { email: viewer, role_name: 'saas_admin' } });
  assert.equal(fresh.status, 200, fresh.text);
  const still = await call(relay.baseUrl, 'GET', '/users/get_roles', { token: adminToken });
  assertProblem(still, 429, 'rate_limited');
  // Respelling the same token's header does not reset its bucket.
  for (const authorization of [`bearer ${adminToken}`, `BEARER ${adminToken}`, `Bearer   ${adminToken}`, `  Bearer ${adminToken}`]) {
    const respelled = await call(relay.baseUrl, 'GET', '/users/get_roles', { headers: { authorization } });
    assertProblem(respelled, 429, 'rate_limited');
  }
});

test('re-encoding the signature of a token (spare base64url bits) does not reset its rate limit', async (t) => {
  const keys = writeKeyPair(tempDir(t), 'ed25519');
  const { relay, adminToken } = await setup(t, {
    'api.rateLimitPerMinute': '1',
    'api.rateLimitBurst': '1',
    'auth.algorithm': 'EdDSA',
    'auth.publicKeyFile': keys.publicKeyFile,
    'auth.privateKeyFile': keys.privateKeyFile,
  });
  // An Ed25519 signature is 64 bytes: 86 base64url characters whose last one has 4 spare bits.
  const alphabet = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_';
  const variant = adminToken.slice(0, -1) + alphabet[alphabet.indexOf(adminToken.at(-1)!) ^ 1];
  assert.notEqual(variant, adminToken);
  const first = await call(relay.baseUrl, 'GET', '/users/get_roles', { token: adminToken });
  assert.equal(first.status, 200);
  const second = await call(relay.baseUrl, 'GET', '/users/get_roles', { token: variant });
  assertProblem(second, 429, 'rate_limited');
});

test('an unknown path is a 404 problem, with or without a token', async (t) => {
  const { relay, adminToken } = await setup(t);
  for (const [method, path] of [
    ['GET', '/'],
    ['GET', '/users'],
    ['GET', '/users/get_roles/extra'],
    ['POST', '/users/create_user'],
    ['GET', '/v1.2/users/get_roles'],
    ['DELETE', '/webhook'],
  ] as const) {
    for (const token of [undefined, adminToken]) {
      const res = await assertUnchanged(relay.store, () => call(relay.baseUrl, method, path, token === undefined ? {} : { token }));
      const body = assertProblem(res, 404, 'not_found');
      assert.equal(body.title, 'Not found');
      assert.equal(body.instance, path);
    }
  }
});

test('a known path with another method is 405 with Allow listing the methods it has', async (t) => {
  const { relay, adminToken } = await setup(t);
  const cases: Array<[string, string, string[]]> = [
    ['DELETE', '/users/update_role', ['PATCH', 'POST', 'PUT']],
    ['GET', '/users/update_role', ['PATCH', 'POST', 'PUT']],
    ['POST', '/users/get_roles', ['GET', 'HEAD']],
    ['DELETE', '/webhook/register_webhook', ['POST', 'PUT']],
    ['PATCH', '/webhook/register_webhook', ['POST', 'PUT']],
    ['PUT', '/webhook/get_webhook', ['GET', 'HEAD']],
    ['DELETE', '/webhook/get_secret', ['GET', 'HEAD']],
    ['POST', '/healthz', ['GET', 'HEAD']],
  ];
  for (const [method, path, allowed] of cases) {
    const res = await assertUnchanged(relay.store, () => call(relay.baseUrl, method, path, { token: adminToken, ...(method === 'GET' ? {} : { body: { email: 'x@example.com' } }) }));
    const body = assertProblem(res, 405, 'method_not_allowed');
    assert.deepEqual(allowedMethods(res), allowed, `${method} ${path}`);
    assert.equal(body.title, 'Method not allowed');
  }
});

test('/healthz and /readyz answer without authentication', async (t) => {
  const { relay } = await setup(t);
  for (const headers of [{}, { authorization: 'Bearer not-a-token' }, { Version: 'v9' }]) {
    const health = await call(relay.baseUrl, 'GET', '/healthz', { headers });
    assert.equal(health.status, 200);
    assert.deepEqual(health.body, { status: 'ok' });
    const ready = await call(relay.baseUrl, 'GET', '/readyz', { headers });
    assert.equal(ready.status, 200);
    assert.deepEqual(ready.body, { status: 'ready' });
  }
});

test('successful answers are JSON and not cacheable', async (t) => {
  const { relay, adminToken } = await setup(t);
  const res = await call(relay.baseUrl, 'GET', '/users/get_roles', { token: adminToken });
  assert.equal(res.headers.get('content-type'), 'application/json; charset=utf-8');
  assert.equal(res.headers.get('cache-control'), 'no-store');
  const refused = await call(relay.baseUrl, 'GET', '/webhook/get_webhook', { token: adminToken });
  assert.equal(refused.headers.get('cache-control'), 'no-store');
});

test('an unexpected failure is a bare 500 problem without internal messages', async (t) => {
  const { relay, adminToken } = await setup(t);
  // Break the database under the running relay, as a failing disk or a bad manual edit would.
  relay.store.db.exec('DROP TABLE webhooks');
  const res = await call(relay.baseUrl, 'GET', '/webhook/get_webhook', { token: adminToken });
  const body = assertProblem(res, 500, 'internal_error');
  assert.deepEqual(body, {
    type: 'urn:hookrelay:problem:internal_error',
    title: 'Internal server error',
    status: 500,
    detail: 'An internal error occurred; the operator can find it in the daemon log.',
    code: 'internal_error',
    instance: '/webhook/get_webhook',
  });
});

test('error answers quote at most a short, escaped excerpt of what the client sent', async (t) => {
  const { relay, adminToken } = await setup(t);
  const huge = `${'r'.repeat(30)}"\u0000\u202e${'x'.repeat(60_000)}`;
  const role = await assertUnchanged(relay.store, () => call(relay.baseUrl, 'PUT', '/users/update_role', { token: adminToken, body: { email: 'viewer@org-a.test', role_name: huge } }));
  const body = assertProblem(role, 422, 'role_not_found');
  assert.ok(role.text.length < 2_000, `a 60 KB role_name came back in ${role.text.length} bytes`);
  // 40 characters, escaped as JSON: the quote, the NUL and the bidi override cannot break out or disguise the text.
  assert.ok(body.detail.startsWith(`role "${'r'.repeat(30)}\\"\\u0000\\u202e${'x'.repeat(7)}..." does not exist;`), body.detail);
  assert.doesNotMatch(role.text, /\u202e/);

  const email = `${'e'.repeat(60)}@org-a.test`;
  const user = await call(relay.baseUrl, 'PUT', '/users/update_role', { token: adminToken, body: { email, role_name: 'saas_admin' } });
  assert.equal(assertProblem(user, 404, 'user_not_found').detail, `no user with e-mail "${'e'.repeat(40)}..." in organization "org-a"`);

  const secretish = `{"role_name": "saas_admin", "email": "S3cr3t-${'y'.repeat(100)}`;
  const broken = await rawUpdate(relay, adminToken, secretish);
  const problem = assertProblem(broken, 400, 'malformed_json');
  assert.equal(problem.detail, `The body is not valid JSON (${secretish.length} characters); send a JSON object`);
  assert.doesNotMatch(broken.text, /S3cr3t|yyyy/);

  const version = await call(relay.baseUrl, 'GET', '/users/get_roles', { token: adminToken, headers: { Version: 'v'.repeat(500) } });
  assert.ok(version.text.length < 1_000, version.text);
  assert.match(assertProblem(version, 400, 'unsupported_version').detail, new RegExp(`^Version "${'v'.repeat(40)}\\.\\.\\." is not supported`));
});

/**
 * Answers and access logs stay bounded whatever the request (issue 31, point 4): a path of
 * 15,000 characters gets a short 404 quoting a short excerpt of it (`detail`, `instance`), the
 * access log writes a bounded excerpt, and a flood of 404s is rate limited like any other
 * flood. Over real HTTP, with the relay's log captured.
 */
import assert from 'node:assert/strict';
import { test, type TestContext } from 'node:test';
import { createLogger } from '../../src/log.ts';
import { assertProblem, call, seedOrg, startRelay } from '../helpers/helpers.ts';

async function setup(t: TestContext, overrides: Record<string, string> = {}) {
  const records: Array<Record<string, unknown>> = [];
  const log = createLogger('info', { write: (line: string) => void records.push(JSON.parse(line) as Record<string, unknown>) });
  const relay = await startRelay(t, overrides, { log });
  const { admin } = await seedOrg(relay.services, 'org-a');
  return { relay, records, token: relay.token('org-a', admin) };
}

test('a 15,000-character path gets a short 404 quoting an excerpt of it, and the access log writes a bounded excerpt', async (t) => {
  const { relay, records, token } = await setup(t);
  const path = `/${'a'.repeat(30)}%E2%80%AE${'b'.repeat(15_000)}`;
  for (const withToken of [false, true]) {
    const res = await call(relay.baseUrl, 'GET', path, withToken ? { token } : {});
    const body = assertProblem(res, 404, 'not_found');
    assert.ok(res.text.length < 600, `a ${path.length}-character path came back in ${res.text.length} bytes`);
    assert.equal(body.detail, `There is no "${path.slice(0, 40)}..."; see /openapi.json for the API`);
    assert.equal(body.instance, `${path.slice(0, 40)}...`);
  }
  const logged = records.filter((r) => r.msg === 'request' && typeof r.path === 'string' && (r.path as string).startsWith('/aaa'));
  assert.equal(logged.length, 2);
  for (const r of logged) {
    assert.equal(r.path, `${path.slice(0, 200)}...`);
    assert.equal(r.pathChars, path.length);
    assert.equal(r.status, 404);
  }
  assert.ok(JSON.stringify(records).length < 20_000, 'the log holds the path whole');
});

test('a flood of 404s is rate limited per client address like other requests; tokens, the public routes and 404s a token paid for are not counted in it', async (t) => {
  const { relay, token } = await setup(t, { 'api.rateLimitPerMinute': '60', 'api.rateLimitBurst': '5' });
  const paths = ['/nope', '/wp-login.php', '/console/nope.js', '/.env', '/users/get_roles/extra'];
  for (const path of paths) assertProblem(await call(relay.baseUrl, 'GET', path), 404, 'not_found');
  // A 404 to a verified token (no such delivery) is the token's, not the address's.
  assertProblem(await call(relay.baseUrl, 'GET', '/webhook/deliveries/999999', { token }), 404, 'delivery_not_found');

  const limited = await call(relay.baseUrl, 'GET', '/admin.php');
  const body = assertProblem(limited, 429, 'rate_limited');
  const retryAfter = Number(limited.headers.get('retry-after'));
  assert.ok(retryAfter >= 1 && retryAfter <= 60, `Retry-After ${retryAfter}`);
  assert.equal(body.retry_after_seconds, retryAfter);
  assert.match(body.detail, /^Rate limit of 60 requests per minute exceeded for paths that do not exist, from this address; retry after \d+ s$/);
  assertProblem(await call(relay.baseUrl, 'GET', '/console/other.js'), 429, 'rate_limited');

  // What exists is answered as before, from the same address.
  assert.equal((await call(relay.baseUrl, 'GET', '/healthz')).status, 200);
  assert.equal((await call(relay.baseUrl, 'GET', '/users/get_roles', { token })).status, 200);
  assert.equal((await call(relay.baseUrl, 'GET', '/console/')).status, 200);
});

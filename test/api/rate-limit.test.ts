/**
 * rate_limit through the admin API and the CLI (issue 29): set, shown by get_webhook, removed
 * by a registration without it; every bad value refused with one clear error (422 naming the
 * field; exit 2 naming the option) that changes nothing.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { assertProblem, assertUnchanged, call, seedOrg, startRelay } from '../helpers/helpers.ts';
import { parseRateLimitOption } from '../../src/cli/webhook.ts';
import { UsageError } from '../../src/cli/shared.ts';

test('register_webhook takes rate_limit, get_webhook shows it, a registration without it removes it; bad values change nothing', async (t) => {
  const relay = await startRelay(t, { 'delivery.allowHttp': 'true', 'delivery.allowNetworks': '127.0.0.1/32' });
  const { admin } = await seedOrg(relay.services, 'acme');
  const token = relay.token('acme', admin);
  const url = 'http://127.0.0.1:9/hook';

  const created = await call(relay.baseUrl, 'POST', '/webhook/register_webhook', { token, body: { webhook_url: url, rate_limit: 20 } });
  assert.equal(created.status, 201, created.text);
  assert.equal(created.body.rate_limit, 20);
  assert.equal((await call(relay.baseUrl, 'GET', '/webhook/get_webhook', { token })).body.rate_limit, 20);

  for (const bad of [0, -1, 10_001, 1.5, '20', true, {}, [20]]) {
    const res = await assertUnchanged(relay.store, () => call(relay.baseUrl, 'POST', '/webhook/register_webhook', { token, body: { webhook_url: url, rate_limit: bad } }));
    const problem = assertProblem(res, 422, 'validation_failed');
    assert.deepEqual(problem.invalid_params, [{ name: 'rate_limit', reason: 'must be a whole number of deliveries per second from 1 to 10000, or null for no limit' }], JSON.stringify(bad));
  }
  assert.equal((await call(relay.baseUrl, 'GET', '/webhook/get_webhook', { token })).body.rate_limit, 20);

  const max = await call(relay.baseUrl, 'PUT', '/webhook/register_webhook', { token, body: { webhook_url: url, rate_limit: 10_000 } });
  assert.equal(max.body.rate_limit, 10_000);
  // Left out: a registration sets every setting, so the limit goes (as active_hmac goes back to true).
  const without = await call(relay.baseUrl, 'POST', '/webhook/register_webhook', { token, body: { webhook_url: url } });
  assert.equal(without.status, 200);
  assert.equal(without.body.rate_limit, null);
  await call(relay.baseUrl, 'POST', '/webhook/register_webhook', { token, body: { webhook_url: url, rate_limit: 5 } });
  const explicitNull = await call(relay.baseUrl, 'POST', '/webhook/register_webhook', { token, body: { webhook_url: url, rate_limit: null } });
  assert.equal(explicitNull.body.rate_limit, null);
});

test('--rate-limit: a whole number 1-10000 or "none"; anything else is a usage error naming the option', () => {
  assert.equal(parseRateLimitOption(undefined), null);
  assert.equal(parseRateLimitOption('none'), null);
  assert.equal(parseRateLimitOption('20'), 20);
  assert.equal(parseRateLimitOption('10000'), 10_000);
  for (const bad of ['0', '10001', '1.5', '-3', 'fast', '', '20/s', '1e3']) {
    assert.throws(() => parseRateLimitOption(bad), (err: unknown) => err instanceof UsageError && /^--rate-limit ".*": give a whole number of deliveries per second from 1 to 10000, or "none" for no limit$/.test(err.message), bad);
  }
});

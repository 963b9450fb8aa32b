/** The identity provider's documents over HTTPS: the CA file, the address rules, one clear line per failure. */
import assert from 'node:assert/strict';
import { createServer } from 'node:https';
import type { AddressInfo } from 'node:net';
import { test, type TestContext } from 'node:test';
import { createProviderFetch } from '../../src/dispatch/provider-fetch.ts';
import { createTestTls } from '../helpers/receivers.ts';

async function server(t: TestContext, answer: (path: string) => { status: number; body: string; headers?: Record<string, string> }) {
  const tls = createTestTls(t);
  const srv = createServer({ cert: tls.certPem, key: tls.keyPem }, (req, res) => {
    const a = answer(req.url ?? '/');
    res.writeHead(a.status, { 'content-type': 'application/json', ...a.headers }).end(a.body);
  });
  await new Promise<void>((resolve) => srv.listen(0, '127.0.0.1', resolve));
  t.after(() => new Promise((resolve) => srv.close(resolve)));
  return { base: `https://127.0.0.1:${(srv.address() as AddressInfo).port}`, caFile: tls.caFile };
}

test('reads a JSON document with its Cache-Control max-age, through the CA file, on an allowed network', async (t) => {
  const s = await server(t, () => ({ status: 200, body: '{"keys":[]}', headers: { 'cache-control': 'public, max-age=120' } }));
  const fetch = createProviderFetch({ caFile: s.caFile, allowNetworks: ['127.0.0.1/32'], timeoutMs: 2000 });
  assert.deepEqual(await fetch(`${s.base}/jwks`), { body: { keys: [] }, maxAgeMs: 120_000 });
});

test('refuses, in one line naming the URL: an internal address not allowed, http, an HTTP error, not JSON, an unknown CA', async (t) => {
  const s = await server(t, (path) => (path === '/500' ? { status: 500, body: 'oops' } : { status: 200, body: 'not json' }));
  const allowed = createProviderFetch({ caFile: s.caFile, allowNetworks: ['127.0.0.1/32'], timeoutMs: 2000 });
  await assert.rejects(createProviderFetch({ caFile: s.caFile, allowNetworks: [], timeoutMs: 2000 })(`${s.base}/jwks`), /cannot be read: 127\.0\.0\.1 is in a refused range .*auth\.provider\.allowNetworks/);
  await assert.rejects(createProviderFetch({ caFile: s.caFile, allowNetworks: [], timeoutMs: 2000 })(`https://localhost:1/jwks`), /localhost resolves to an address in a refused range .*auth\.provider\.allowNetworks/);
  await assert.rejects(allowed(`http://127.0.0.1:1/jwks`), /only https:\/\/ is accepted/);
  await assert.rejects(allowed(`${s.base}/500`), /at https:\/\/127\.0\.0\.1:\d+\/500 cannot be read: it answered HTTP 500/);
  await assert.rejects(allowed(`${s.base}/jwks`), /its answer is not JSON/);
  await assert.rejects(createProviderFetch({ caFile: null, allowNetworks: ['127.0.0.1/32'], timeoutMs: 2000 })(`${s.base}/jwks`), /cannot be read: .*certificate/i);
});

test('an unreadable CA file is a configuration error naming the key', () => {
  assert.throws(() => createProviderFetch({ caFile: '/nonexistent/ca.pem', allowNetworks: [], timeoutMs: 1000 }), /cannot read auth\.provider\.caFile \/nonexistent\/ca\.pem: ENOENT/);
});

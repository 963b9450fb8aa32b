/**
 * The OAuth2 token cache (src/dispatch/oauth2-tokens.ts) against a real HTTPS token endpoint
 * on 127.0.0.1 that the test controls: concurrent attempts share one fetch, a settings revision
 * gets a token of its own, a refused token is fetched again, and the token URL is held to the
 * address rules at every fetch (an IP literal checked, a name resolved and every address
 * checked), through the same guard deliveries use.
 */
import assert from 'node:assert/strict';
import { createServer } from 'node:https';
import type { AddressInfo } from 'node:net';
import { test, type TestContext } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { Agent } from 'undici';
import type { OAuth2Settings } from '../../src/domain/oauth2-settings.ts';
import { createNetworkGuard, type NetworkGuard } from '../../src/dispatch/network-guard.ts';
import { OAuth2TokenError, OAuth2Tokens } from '../../src/dispatch/oauth2-tokens.ts';
import { createTestTls } from '../helpers/receivers.ts';

async function startTokenEndpoint(t: TestContext, delayMs = 100) {
  const tls = createTestTls(t);
  const bodies: string[] = [];
  let n = 0;
  const server = createServer({ key: tls.keyPem, cert: tls.certPem }, (req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', async () => {
      bodies.push(`${req.headers.authorization} ${Buffer.concat(chunks).toString('utf8')}`);
      n += 1;
      await sleep(delayMs);
      res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ access_token: `token-${n}`, token_type: 'Bearer', expires_in: 3600 }));
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  t.after(() => new Promise((resolve) => server.close(resolve)));
  return { tls, port: (server.address() as AddressInfo).port, bodies };
}

function route(t: TestContext, guard: NetworkGuard, ca: string) {
  const dispatcher = new Agent({ connect: { ca, lookup: guard.lookup as never } });
  t.after(() => dispatcher.close());
  return { dispatcher, guard };
}

const settings = (tokenUrl: string, revision = 'r1'): OAuth2Settings => ({ tokenUrl, clientId: 'relay', scope: 'api', audience: null, clientAuth: 'client_secret_basic', revision });

test('concurrent attempts share one fetch; a new revision and a refused token get new ones', async (t) => {
  const endpoint = await startTokenEndpoint(t);
  const tokens = new OAuth2Tokens({ credentials: { oauth2ClientSecret: async () => 'the secret' }, allowHttp: false, timeoutMs: 5000, userAgent: 'test' });
  const via = route(t, createNetworkGuard(['127.0.0.1/32']), endpoint.tls.caPem);
  const s = settings(`https://127.0.0.1:${endpoint.port}/token`);
  const signal = new AbortController().signal;
  const got = await Promise.all(Array.from({ length: 8 }, () => tokens.token('acme', s, via, signal)));
  assert.deepEqual(new Set(got), new Set(['token-1']));
  assert.equal(tokens.fetches, 1);
  assert.equal(endpoint.bodies[0], `Basic ${Buffer.from('relay:the+secret').toString('base64')} grant_type=client_credentials&scope=api`);
  assert.equal(await tokens.token('acme', s, via, signal), 'token-1', 'cached');
  tokens.refused('acme', s, 'token-1');
  assert.equal(await tokens.token('acme', s, via, signal), 'token-2');
  // An old token refused after a new one was fetched does not throw the new one away.
  tokens.refused('acme', s, 'token-1');
  assert.equal(await tokens.token('acme', s, via, signal), 'token-2');
  assert.equal(await tokens.token('acme', settings(s.tokenUrl, 'r2'), via, signal), 'token-3', 'registered again: a token of its own');
  // Another organization never gets acme's token.
  assert.equal(await tokens.token('globex', s, via, signal), 'token-4');
});

test("an attempt that ends while it waits leaves the others' fetch alone", async (t) => {
  const endpoint = await startTokenEndpoint(t, 300);
  const tokens = new OAuth2Tokens({ credentials: { oauth2ClientSecret: async () => 'the secret' }, allowHttp: false, timeoutMs: 5000, userAgent: 'test' });
  const via = route(t, createNetworkGuard(['127.0.0.1/32']), endpoint.tls.caPem);
  const s = settings(`https://127.0.0.1:${endpoint.port}/token`);
  const short = new AbortController();
  const first = tokens.token('acme', s, via, short.signal);
  const second = tokens.token('acme', s, via, new AbortController().signal);
  short.abort(new Error('attempt deadline'));
  await assert.rejects(first, /attempt deadline/);
  assert.equal(await second, 'token-1');
  assert.equal(tokens.fetches, 1);
});

test('the token URL is held to the address rules at every fetch: an internal address, a name resolving to one, http', async (t) => {
  const endpoint = await startTokenEndpoint(t);
  const tokens = new OAuth2Tokens({ credentials: { oauth2ClientSecret: async () => 'the secret' }, allowHttp: false, timeoutMs: 5000, userAgent: 'test' });
  // The shared policy: no network granted.
  const via = route(t, createNetworkGuard([]), endpoint.tls.caPem);
  const signal = new AbortController().signal;
  const refused = async (url: string, message: RegExp) => {
    await assert.rejects(tokens.token(`org-${url.length}`, settings(url), via, signal), (err: unknown) => err instanceof OAuth2TokenError && message.test(err.message));
  };
  await refused(`https://127.0.0.1:${endpoint.port}/token`, new RegExp(`^the token service at https://127\\.0\\.0\\.1:${endpoint.port}/token cannot be used: 127\\.0\\.0\\.1 is in a refused range \\(loopback`));
  await refused(`https://localhost:${endpoint.port}/token?tenant=x`, new RegExp(`^the token service at https://localhost:${endpoint.port}/token cannot be used: localhost resolves to an address in a refused range`));
  await refused('http://idp.example/token', /cannot be used: the token URL must use the https scheme/);
  assert.equal(endpoint.bodies.length, 0, 'nothing reached the token service');
});

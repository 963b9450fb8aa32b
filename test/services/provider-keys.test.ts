/**
 * The identity provider's key cache: fetch limits whatever callers send, the bound on staleness,
 * a JWKS without a usable key, and which algorithms a key may verify. The documents come from a
 * function whose answers the test controls (the HTTPS fetch itself is tested in
 * test/dispatch/provider-fetch.test.ts, and the whole chain against a real provider in
 * test/api/provider-auth.test.ts).
 */
import assert from 'node:assert/strict';
import { generateKeyPairSync } from 'node:crypto';
import { test } from 'node:test';
import { loadConfig } from '../../src/config/load.ts';
import { keyAlgorithms, ProviderKeys } from '../../src/services/provider-keys.ts';
import { silentLog } from '../helpers/helpers.ts';

const config = loadConfig({
  env: {},
  overrides: { stateDir: '/tmp/x', 'auth.provider.issuer': 'https://idp.example', 'auth.provider.jwksUrl': 'https://idp.example/jwks', 'auth.provider.audience': 'hr' },
}).auth.provider;

const ecJwk = (kid: string) => ({ ...generateKeyPairSync('ec', { namedCurve: 'P-256' }).publicKey.export({ format: 'jwk' }), kid });

function harness(documents: Array<unknown | Error>) {
  let now = 1_000_000;
  let fetches = 0;
  const keys = new ProviderKeys({
    config,
    clock: { now: () => now },
    log: silentLog,
    fetch: async () => {
      const next = documents[Math.min(fetches, documents.length - 1)];
      fetches += 1;
      await new Promise((resolve) => setTimeout(resolve, 5));
      if (next instanceof Error) throw next;
      return { body: next, maxAgeMs: null };
    },
  });
  return { keys, fetches: () => fetches, advance: (ms: number) => (now += ms) };
}

test('unknown kids: concurrent askers share one fetch, and none is made again within minRefreshInterval', async () => {
  const h = harness([{ keys: [ecJwk('a')] }]);
  await h.keys.refresh();
  assert.equal(h.fetches(), 1);
  const found = await Promise.all(Array.from({ length: 500 }, (_, i) => h.keys.find(`unknown-${i}`)));
  assert.ok(found.every((k) => k === null));
  assert.equal(h.fetches(), 1, 'within minRefreshInterval of the first fetch: none');
  h.advance(config.minRefreshInterval);
  await Promise.all(Array.from({ length: 500 }, (_, i) => h.keys.find(`unknown-${i}`)));
  assert.equal(h.fetches(), 2, 'one fetch for all of them');
  assert.equal((await h.keys.find('a'))?.kid, 'a');
  h.keys.stop();
});

test('a failed fetch keeps the keys until maxStale after the last one that worked', async () => {
  const h = harness([{ keys: [ecJwk('a')] }, new Error('connect ECONNREFUSED')]);
  await h.keys.refresh();
  assert.equal(h.keys.health().state, 'fresh');
  h.advance(config.minRefreshInterval);
  await h.keys.refresh();
  assert.equal(h.keys.health().state, 'stale');
  assert.equal(h.keys.health().lastError, 'connect ECONNREFUSED');
  assert.equal(h.keys.usable(), true);
  assert.equal((await h.keys.find('a'))?.kid, 'a');
  h.advance(config.maxStale);
  assert.equal(h.keys.health().state, 'unavailable');
  assert.match(String(h.keys.usable()), /older than auth\.provider\.maxStale \(1d\)/);
  assert.deepEqual(h.keys.fetches, { ok: 1, unreachable: 1, no_usable_key: 0, invalid: 0 });
});

test('a JWKS with no usable key is an error, and the keys before it stay in use', async () => {
  const h = harness([{ keys: [ecJwk('a')] }, { keys: [{ kty: 'oct', k: 'c2VjcmV0', kid: 'h' }, { ...ecJwk('enc'), use: 'enc' }] }, { nope: true }]);
  await h.keys.refresh();
  h.advance(config.minRefreshInterval);
  await h.keys.refresh();
  assert.match(h.keys.health().lastError!, /has no usable key/);
  assert.equal((await h.keys.find('a'))?.kid, 'a');
  h.advance(config.minRefreshInterval);
  await h.keys.refresh();
  assert.match(h.keys.health().lastError!, /not an object with a "keys" list/);
  assert.deepEqual(h.keys.fetches, { ok: 1, unreachable: 0, no_usable_key: 1, invalid: 1 });
});

test("a key's own alg decides; without one, its kty and crv", () => {
  const all = ['RS256', 'PS256', 'ES256', 'EdDSA'];
  assert.deepEqual(keyAlgorithms({ kty: 'RSA' }, all), ['RS256', 'PS256']);
  assert.deepEqual(keyAlgorithms({ kty: 'RSA', alg: 'PS256' }, all), ['PS256']);
  assert.deepEqual(keyAlgorithms({ kty: 'RSA', alg: 'HS256' }, all), []);
  assert.deepEqual(keyAlgorithms({ kty: 'EC', crv: 'P-256' }, all), ['ES256']);
  assert.deepEqual(keyAlgorithms({ kty: 'EC', crv: 'P-384' }, all), []);
  assert.deepEqual(keyAlgorithms({ kty: 'OKP', crv: 'Ed25519' }, all), ['EdDSA']);
  assert.deepEqual(keyAlgorithms({ kty: 'oct' }, all), []);
  assert.deepEqual(keyAlgorithms({ kty: 'RSA', use: 'enc' }, all), []);
  assert.deepEqual(keyAlgorithms({ kty: 'RSA' }, ['ES256']), []);
});

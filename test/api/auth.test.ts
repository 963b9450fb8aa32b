/**
 * Bearer-token authentication over real HTTP, for each pinned algorithm (HS256 by default,
 * RS256, ES256 and EdDSA with a configured public key): what is accepted, and that every
 * forged, expired, mis-addressed or malformed token, or one with critical extensions (crit), is a 401 with a Bearer challenge that
 * changes nothing in the database.
 */
import assert from 'node:assert/strict';
import { createHmac, createPrivateKey, sign } from 'node:crypto';
import { test, type TestContext } from 'node:test';
import { loadConfig } from '../../src/config/load.ts';
import { systemClock } from '../../src/domain/clock.ts';
import { createRelay } from '../../src/relay.ts';
import { loadAuthKeys } from '../../src/services/auth-keys.ts';
import { issueToken } from '../../src/services/tokens.ts';
import {
  assertProblem,
  assertUnchanged,
  call,
  claimsFor,
  craftJwt,
  roleOf,
  seedOrg,
  silentLog,
  startRelay,
  tempDir,
  writeKeyPair,
  type RunningRelay,
} from '../helpers/helpers.ts';
import { BY_TEST } from '../helpers/audit-helpers.ts';

const nowSeconds = () => Math.floor(Date.now() / 1000);
const hmacSha256 = (key: string | Buffer) => (input: string) => createHmac('sha256', key).update(input).digest();
const unsigned = () => null;

async function setup(t: TestContext, overrides: Record<string, string> = {}) {
  const relay = await startRelay(t, overrides);
  const users = await seedOrg(relay.services, 'org-a');
  return { relay, ...users };
}

/** The relay's HS256 secret (generated in its state directory on first start). */
const hs256Secret = (relay: RunningRelay) => loadAuthKeys(relay.config, silentLog).verifyKey;
/** An HS256 token made by hand, for claims jsonwebtoken refuses to sign (mistyped exp or nbf). */
const handMadeHs256 = (relay: RunningRelay, claims: Record<string, unknown>) => craftJwt({ alg: 'HS256', typ: 'JWT' }, claims, hmacSha256(hs256Secret(relay)));

/** The state-changing request every token is tried on: make the viewer an admin. */
function promoteViewer(relay: RunningRelay, viewer: string, authorization: string | null) {
  return call(relay.baseUrl, 'PUT', '/users/update_role', {
    body: { email: viewer, role_name: 'saas_admin' },
    ...(authorization === null ? {} : { headers: { authorization } }),
  });
}

/** Asserts that `authorization` is refused with 401 `invalid_token` and a Bearer challenge, changing nothing. */
async function assertInvalidToken(relay: RunningRelay, viewer: string, authorization: string, detail?: RegExp): Promise<void> {
  const res = await assertUnchanged(relay.store, () => promoteViewer(relay, viewer, authorization));
  const body = assertProblem(res, 401, 'invalid_token');
  assert.equal(body.title, 'Invalid access token');
  if (detail) assert.match(body.detail, detail);
  const challenge = res.headers.get('www-authenticate') ?? '';
  assert.ok(challenge.startsWith('Bearer realm="hookrelay", error="invalid_token", error_description="'), challenge);
}

/** The positive control: the same request with a good token goes through. */
async function assertAccepted(relay: RunningRelay, viewer: string, token: string): Promise<void> {
  const res = await promoteViewer(relay, viewer, `Bearer ${token}`);
  assert.equal(res.status, 200, res.text);
  assert.equal(await roleOf(relay, 'org-a', viewer), 'saas_admin');
}

test('no token is 401 missing_token with a bare Bearer challenge', async (t) => {
  const { relay, viewer } = await setup(t);
  const res = await assertUnchanged(relay.store, () => promoteViewer(relay, viewer, null));
  const body = assertProblem(res, 401, 'missing_token');
  assert.equal(body.title, 'Authentication required');
  assert.equal(res.headers.get('www-authenticate'), 'Bearer realm="hookrelay"');
  for (const [method, path] of [
    ['GET', '/users/get_roles'],
    ['GET', '/webhook/get_webhook'],
    ['GET', '/webhook/get_secret'],
    ['POST', '/webhook/register_webhook'],
  ] as const) {
    const other = await assertUnchanged(relay.store, () => call(relay.baseUrl, method, path, method === 'POST' ? { body: { webhook_url: 'https://a.example.com' } } : {}));
    assertProblem(other, 401, 'missing_token');
    assert.equal(other.headers.get('www-authenticate'), 'Bearer realm="hookrelay"');
  }
});

test('a malformed Authorization header is 401 invalid_token', async (t) => {
  const { relay, admin, viewer } = await setup(t);
  const token = relay.token('org-a', admin);
  for (const header of ['Basic dXNlcjpwYXNz', 'Bearer', 'Bearer ', `Token ${token}`, token, `Bearer ${token} extra`, `Bearer "${token}"`]) {
    await assertInvalidToken(relay, viewer, header, /must have the form "Bearer <JWT>"/);
  }
  for (const header of ['Bearer not-a-jwt', 'Bearer a.b.c', `Bearer ${token.split('.').slice(0, 2).join('.')}`]) {
    await assertInvalidToken(relay, viewer, header, /could not be verified/);
  }
  await assertAccepted(relay, viewer, token);
});

test('alg none, a foreign HS256 secret and a tampered payload are 401 (HS256)', async (t) => {
  const { relay, admin, viewer } = await setup(t);
  const claims = claimsFor('org-a', admin);
  for (const alg of ['none', 'None', 'NONE']) {
    await assertInvalidToken(relay, viewer, `Bearer ${craftJwt({ alg, typ: 'JWT' }, claims, unsigned)}`);
  }
  // alg none carrying a signature that is valid for HS256 must not pass either.
  await assertInvalidToken(relay, viewer, `Bearer ${craftJwt({ alg: 'none', typ: 'JWT' }, claims, hmacSha256(hs256Secret(relay)))}`);
  await assertInvalidToken(relay, viewer, `Bearer ${craftJwt({ alg: 'HS256', typ: 'JWT' }, claims, hmacSha256('another secret that is at least 32 bytes long'))}`, /could not be verified/);
  // The algorithm is pinned: the right secret with another HMAC algorithm is refused too.
  const hs512 = craftJwt({ alg: 'HS512', typ: 'JWT' }, claims, (input) => createHmac('sha512', hs256Secret(relay)).update(input).digest());
  await assertInvalidToken(relay, viewer, `Bearer ${hs512}`, /algorithm this server does not accept/);

  const [header, , signature] = relay.token('org-a', admin).split('.');
  const forged = `${header}.${Buffer.from(JSON.stringify(claimsFor('org-a', admin, { exp: nowSeconds() + 86_400 * 365 }))).toString('base64url')}.${signature}`;
  await assertInvalidToken(relay, viewer, `Bearer ${forged}`, /could not be verified/);
  // A signature over the right header and payload, made with the relay's own secret, is accepted.
  await assertAccepted(relay, viewer, relay.sign(claims));
});

test('exp is required, an expired token is refused, nbf is honoured, with the configured clock tolerance', async (t) => {
  const { relay, admin, viewer } = await setup(t);
  const { iat: _iat, exp: _exp, ...noExp } = claimsFor('org-a', admin);
  await assertInvalidToken(relay, viewer, `Bearer ${relay.sign(noExp)}`, /no expiry \(exp\)/);
  await assertInvalidToken(relay, viewer, `Bearer ${relay.sign(claimsFor('org-a', admin, { exp: nowSeconds() - 3600 }))}`, /has expired/);
  await assertInvalidToken(relay, viewer, `Bearer ${handMadeHs256(relay, claimsFor('org-a', admin, { exp: String(nowSeconds() + 3600) }))}`, /exp\) must be a number/);
  await assertInvalidToken(relay, viewer, `Bearer ${relay.sign(claimsFor('org-a', admin, { nbf: nowSeconds() + 3600 }))}`, /not valid yet \(nbf\)/);
  await assertInvalidToken(relay, viewer, `Bearer ${handMadeHs256(relay, claimsFor('org-a', admin, { nbf: 'now' }))}`, /nbf must be a number/);
  // 10 s past exp is inside the default 30 s tolerance; nbf in the past is fine.
  await assertAccepted(relay, viewer, relay.sign(claimsFor('org-a', admin, { exp: nowSeconds() - 10, nbf: nowSeconds() - 60 })));
});

test('auth.maxTokenLifetime: a token whose exp is more than 24 h after its iat, or after now, is refused; token issue makes none longer', async (t) => {
  const { relay, admin, viewer } = await setup(t);
  const now = nowSeconds();
  const day = 86_400;
  for (const [what, claims] of [
    ['exp ten years ahead', { iat: now, exp: now + 10 * 365 * day }],
    ['exp 1e12', { iat: now, exp: 1e12 }],
    ['exp - iat of 24 h 30 min, issued an hour ago', { iat: now - 3600, exp: now + day - 1800 }],
    ['no iat, exp 25 h ahead', { iat: undefined, exp: now + day + 3600 }],
    ['iat far in the past to make it look fresh', { iat: now - 400 * day, exp: now + 3600 }],
  ] as const) {
    // jsonwebtoken would add an iat of its own: without iat the token is signed by hand.
    const token = claims.iat === undefined ? handMadeHs256(relay, { ...claimsFor('org-a', admin, { exp: claims.exp }), iat: undefined }) : relay.sign(claimsFor('org-a', admin, claims));
    await assertInvalidToken(relay, viewer, `Bearer ${token}`, /lives longer than this server accepts \(auth\.maxTokenLifetime, 1d\)/);
    t.diagnostic(`refused: ${what}`);
  }
  await assertInvalidToken(relay, viewer, `Bearer ${handMadeHs256(relay, claimsFor('org-a', admin, { iat: 'now' }))}`, /iat must be a number/);
  // Exactly 24 h, and 24 h without iat (within the clock tolerance), are accepted.
  await assertAccepted(relay, viewer, relay.sign(claimsFor('org-a', admin, { iat: now, exp: now + day })));
  await assertAccepted(relay, viewer, handMadeHs256(relay, { ...claimsFor('org-a', admin, { exp: now + day + 10 }), iat: undefined }));

  const keys = loadAuthKeys(relay.config, silentLog);
  const issue = (ttlMs: number) => issueToken({ keys, auth: relay.config.auth, users: relay.services.users, clock: systemClock }, { orgId: 'org-a', email: admin, ttlMs });
  await assert.rejects(() => issue(day * 1000 + 1000), { code: 'validation_failed', invalidParams: [{ name: 'ttl', reason: 'must be at most auth.maxTokenLifetime (1d); got 86401s' }] });
  await assertAccepted(relay, viewer, (await issue(day * 1000)).token);
  // A default lifetime above the cap would make every issued token unusable: refused at start.
  assert.throws(() => loadConfig({ env: {}, overrides: { 'auth.tokenTtl': '2d' } }), { code: 'invalid_config', message: /auth\.tokenTtl" must not exceed "auth\.maxTokenLifetime"/ });
  assert.equal(loadConfig({ env: {}, overrides: { 'auth.tokenTtl': '2d', 'auth.maxTokenLifetime': '7d' } }).auth.maxTokenLifetime, 7 * day * 1000);
});

test('with clockTolerance 0 a token 10 s past its exp is refused', async (t) => {
  const { relay, admin, viewer } = await setup(t, { 'auth.clockTolerance': '0' });
  await assertInvalidToken(relay, viewer, `Bearer ${relay.sign(claimsFor('org-a', admin, { exp: nowSeconds() - 10 }))}`, /has expired/);
  await assertAccepted(relay, viewer, relay.sign(claimsFor('org-a', admin)));
});

test('tokens without identity claims, of an unknown organization or of a deleted user are 401', async (t) => {
  const { relay, admin, viewer } = await setup(t);
  const { sub: _sub, ...noSub } = claimsFor('org-a', admin);
  await assertInvalidToken(relay, viewer, `Bearer ${relay.sign(noSub)}`, /must carry the claims "sub" \(e-mail\) and "org"/);
  await assertInvalidToken(relay, viewer, `Bearer ${relay.sign(claimsFor('org-a', admin, { org: 7 }))}`, /must carry the claims/);
  await assertInvalidToken(relay, viewer, `Bearer ${relay.sign(claimsFor('org-zz', admin))}`, /not a user of its organization/);
  await assertInvalidToken(relay, viewer, `Bearer ${relay.sign(claimsFor('org-a', 'ghost@org-a.test'))}`, /not a user of its organization/);

  const leaver = 'leaver@org-a.test';
  await relay.services.users.add(BY_TEST, { orgId: 'org-a', email: leaver, roleName: 'saas_admin' });
  const leaverToken = relay.token('org-a', leaver);
  const before = await call(relay.baseUrl, 'GET', '/users/get_roles', { token: leaverToken });
  assert.equal(before.status, 200);
  await relay.services.users.remove(BY_TEST, 'org-a', leaver);
  await assertInvalidToken(relay, viewer, `Bearer ${leaverToken}`, /not a user of its organization/);
  await assertAccepted(relay, viewer, relay.token('org-a', admin));
});

test('a token whose header has crit is 401, whatever crit lists (RFC 7515: no extension is understood here); the same token without crit is accepted', async (t) => {
  const { relay, admin, viewer } = await setup(t);
  const claims = claimsFor('org-a', admin);
  const refusal = /header has crit \(critical extensions\), which this server does not implement; issue a token without crit/;
  // Signed by jsonwebtoken with the relay's own secret, as an issuer would.
  for (const crit of [['exp'], ['urn:example:x'], ['b64'], []]) {
    await assertInvalidToken(relay, viewer, `Bearer ${relay.sign(claims, { header: { alg: 'HS256', crit } })}`, refusal);
  }
  // Malformed crit (not a list, or null) is refused as well.
  for (const crit of ['exp', null, { exp: true }]) {
    await assertInvalidToken(relay, viewer, `Bearer ${craftJwt({ alg: 'HS256', typ: 'JWT', crit }, claims, hmacSha256(hs256Secret(relay)))}`, refusal);
  }
  // A bad signature is said to be one first: the header is read once it is known to be the issuer's.
  await assertInvalidToken(relay, viewer, `Bearer ${craftJwt({ alg: 'HS256', crit: ['exp'] }, claims, hmacSha256('another secret that is at least 32 bytes long'))}`, /could not be verified/);
  await assertAccepted(relay, viewer, relay.sign(claims, { header: { alg: 'HS256' } }));
});

test('EdDSA: a token whose header has crit is 401 too; the same token without crit is accepted', async (t) => {
  const keys = writeKeyPair(tempDir(t), 'ed25519');
  const { relay, admin, viewer } = await setup(t, { 'auth.algorithm': 'EdDSA', 'auth.publicKeyFile': keys.publicKeyFile, 'auth.privateKeyFile': keys.privateKeyFile });
  const ed25519 = (input: string) => sign(null, Buffer.from(input), keys.privateKeyPem);
  const claims = claimsFor('org-a', admin);
  for (const crit of [['exp'], ['urn:example:x'], [], 'exp']) {
    await assertInvalidToken(relay, viewer, `Bearer ${craftJwt({ alg: 'EdDSA', typ: 'JWT', crit }, claims, ed25519)}`, /header has crit/);
  }
  await assertAccepted(relay, viewer, craftJwt({ alg: 'EdDSA', typ: 'JWT' }, claims, ed25519));
});

test('with auth.audience and auth.issuer configured, a wrong or missing aud or iss is 401', async (t) => {
  const audience = 'hookrelay-admin';
  const issuer = 'https://idp.example.com';
  const { relay, admin, viewer } = await setup(t, { 'auth.audience': audience, 'auth.issuer': issuer });
  const good = { aud: audience, iss: issuer };
  await assertInvalidToken(relay, viewer, `Bearer ${relay.sign(claimsFor('org-a', admin, { ...good, aud: 'another-api' }))}`, /audience \(aud\) is not accepted/);
  await assertInvalidToken(relay, viewer, `Bearer ${relay.sign(claimsFor('org-a', admin, { ...good, aud: ['another-api'] }))}`, /audience/);
  await assertInvalidToken(relay, viewer, `Bearer ${relay.sign(claimsFor('org-a', admin, { iss: issuer }))}`, /audience/);
  await assertInvalidToken(relay, viewer, `Bearer ${relay.sign(claimsFor('org-a', admin, { ...good, iss: 'https://evil.example.com' }))}`, /issuer \(iss\) is not accepted/);
  await assertInvalidToken(relay, viewer, `Bearer ${relay.sign(claimsFor('org-a', admin, { aud: audience }))}`, /issuer/);
  const first = await promoteViewer(relay, viewer, `Bearer ${relay.sign(claimsFor('org-a', admin, { ...good, aud: ['another-api', audience] }))}`);
  assert.equal(first.status, 200, `an aud array holding the audience is accepted: ${first.text}`);
  // `hookrelay token issue` sets both claims, so its tokens pass.
  const issued = JSON.parse(Buffer.from(relay.token('org-a', admin).split('.')[1]!, 'base64url').toString());
  assert.equal(issued.aud, audience);
  assert.equal(issued.iss, issuer);
  await assertAccepted(relay, viewer, relay.token('org-a', admin));
});

test('RS256: issued tokens work; HS256 signed with the public key, alg none and another key are 401', async (t) => {
  const keys = writeKeyPair(tempDir(t), 'rsa');
  const { relay, admin, viewer } = await setup(t, {
    'auth.algorithm': 'RS256',
    'auth.publicKeyFile': keys.publicKeyFile,
    'auth.privateKeyFile': keys.privateKeyFile,
  });
  const claims = claimsFor('org-a', admin);
  // The classic key-confusion attack: the public key file (as is, and trimmed) used as an HMAC secret.
  for (const secret of [keys.publicKeyPem, keys.publicKeyPem.trim()]) {
    await assertInvalidToken(relay, viewer, `Bearer ${craftJwt({ alg: 'HS256', typ: 'JWT' }, claims, hmacSha256(secret))}`, /algorithm this server does not accept/);
  }
  await assertInvalidToken(relay, viewer, `Bearer ${craftJwt({ alg: 'none', typ: 'JWT' }, claims, unsigned)}`);
  const stranger = createPrivateKey(writeKeyPair(tempDir(t), 'rsa').privateKeyPem);
  await assertInvalidToken(relay, viewer, `Bearer ${craftJwt({ alg: 'RS256', typ: 'JWT' }, claims, (input) => sign('sha256', Buffer.from(input), stranger))}`, /could not be verified/);
  await assertInvalidToken(relay, viewer, `Bearer ${craftJwt({ alg: 'RS256', typ: 'JWT' }, { ...claims, exp: nowSeconds() - 3600 }, (input) => sign('sha256', Buffer.from(input), keys.privateKeyPem))}`, /has expired/);

  const token = relay.token('org-a', admin);
  assert.deepEqual(JSON.parse(Buffer.from(token.split('.')[0]!, 'base64url').toString()), { alg: 'RS256', typ: 'JWT' });
  await assertAccepted(relay, viewer, token);
});

test('ES256: issued tokens work and an HS256 token is 401', async (t) => {
  const keys = writeKeyPair(tempDir(t), 'ec');
  const { relay, admin, viewer } = await setup(t, {
    'auth.algorithm': 'ES256',
    'auth.publicKeyFile': keys.publicKeyFile,
    'auth.privateKeyFile': keys.privateKeyFile,
  });
  await assertInvalidToken(relay, viewer, `Bearer ${craftJwt({ alg: 'HS256', typ: 'JWT' }, claimsFor('org-a', admin), hmacSha256(keys.publicKeyPem))}`, /algorithm/);
  await assertAccepted(relay, viewer, relay.token('org-a', admin));
});

test('EdDSA: issued and hand-made Ed25519 tokens work; other keys, other algorithms and alg none are 401', async (t) => {
  const keys = writeKeyPair(tempDir(t), 'ed25519');
  const audience = 'hookrelay-admin';
  const { relay, admin, viewer } = await setup(t, {
    'auth.algorithm': 'EdDSA',
    'auth.publicKeyFile': keys.publicKeyFile,
    'auth.privateKeyFile': keys.privateKeyFile,
    'auth.audience': audience,
  });
  const ed25519 = (privateKeyPem: string) => (input: string) => sign(null, Buffer.from(input), privateKeyPem);
  const claims = claimsFor('org-a', admin, { aud: audience });

  const issued = relay.token('org-a', admin);
  assert.deepEqual(JSON.parse(Buffer.from(issued.split('.')[0]!, 'base64url').toString()), { alg: 'EdDSA', typ: 'JWT' });
  const reads = await call(relay.baseUrl, 'GET', '/users/get_roles', { token: issued });
  assert.equal(reads.status, 200, reads.text);
  const handMade = await call(relay.baseUrl, 'GET', '/users/get_roles', { token: craftJwt({ alg: 'EdDSA' }, claims, ed25519(keys.privateKeyPem)) });
  assert.equal(handMade.status, 200, handMade.text);

  const stranger = writeKeyPair(tempDir(t), 'ed25519');
  await assertInvalidToken(relay, viewer, `Bearer ${craftJwt({ alg: 'EdDSA', typ: 'JWT' }, claims, ed25519(stranger.privateKeyPem))}`, /could not be verified/);
  await assertInvalidToken(relay, viewer, `Bearer ${craftJwt({ alg: 'HS256', typ: 'JWT' }, claims, hmacSha256(keys.publicKeyPem))}`, /algorithm this server does not accept/);
  await assertInvalidToken(relay, viewer, `Bearer ${craftJwt({ alg: 'none', typ: 'JWT' }, claims, unsigned)}`, /algorithm this server does not accept/);
  await assertInvalidToken(relay, viewer, `Bearer ${craftJwt({ alg: 'EdDSA', typ: 'JWT' }, claims, unsigned)}`, /could not be verified/);
  // The header is signed too, but alg must be exactly "EdDSA" (not Ed25519, not eddsa).
  for (const alg of ['Ed25519', 'eddsa']) {
    await assertInvalidToken(relay, viewer, `Bearer ${craftJwt({ alg, typ: 'JWT' }, claims, ed25519(keys.privateKeyPem))}`, /algorithm/);
  }
  const [header, , signature] = issued.split('.');
  const tampered = `${header}.${Buffer.from(JSON.stringify({ ...claims, org: 'org-a', exp: nowSeconds() + 86_400 * 365 })).toString('base64url')}.${signature}`;
  await assertInvalidToken(relay, viewer, `Bearer ${tampered}`, /could not be verified/);
  await assertInvalidToken(relay, viewer, `Bearer ${craftJwt({ alg: 'EdDSA' }, 'not an object' as never, ed25519(keys.privateKeyPem))}`, /payload must be a JSON object/);

  // The same claim rules as for koa-jwt's algorithms.
  const { exp: _exp, ...noExp } = claims;
  await assertInvalidToken(relay, viewer, `Bearer ${craftJwt({ alg: 'EdDSA' }, noExp, ed25519(keys.privateKeyPem))}`, /no expiry \(exp\)/);
  await assertInvalidToken(relay, viewer, `Bearer ${craftJwt({ alg: 'EdDSA' }, { ...claims, exp: nowSeconds() - 3600 }, ed25519(keys.privateKeyPem))}`, /has expired/);
  await assertInvalidToken(relay, viewer, `Bearer ${craftJwt({ alg: 'EdDSA' }, { ...claims, nbf: nowSeconds() + 3600 }, ed25519(keys.privateKeyPem))}`, /nbf/);
  await assertInvalidToken(relay, viewer, `Bearer ${craftJwt({ alg: 'EdDSA' }, { ...claims, aud: 'another-api' }, ed25519(keys.privateKeyPem))}`, /audience/);

  await assertAccepted(relay, viewer, issued);
});

test('EdDSA with a key that is not Ed25519 stops start-up and token issue with a clear error', async (t) => {
  const dir = tempDir(t);
  const rsa = writeKeyPair(dir, 'rsa');
  const config = loadConfig({
    env: {},
    overrides: { stateDir: dir, 'api.listen': '127.0.0.1:0', 'auth.algorithm': 'EdDSA', 'auth.publicKeyFile': rsa.publicKeyFile, 'auth.privateKeyFile': rsa.privateKeyFile },
  });
  const relay = createRelay(config, { log: silentLog });
  t.after(() => relay.stop());
  await assert.rejects(relay.start(), { code: 'invalid_config', message: /needs an Ed25519 public key; auth.publicKeyFile holds a rsa key/ });

  const keys = loadAuthKeys(config, silentLog);
  const probe = await startRelay(t);
  await seedOrg(probe.services, 'org-a');
  await assert.rejects(
    () => issueToken({ keys, auth: config.auth, users: probe.services.users, clock: systemClock }, { orgId: 'org-a', email: 'admin@org-a.test', ttlMs: 60_000 }),
    { code: 'signing_key_unavailable', message: /EdDSA needs an Ed25519 private key/ },
  );
});

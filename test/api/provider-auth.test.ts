/**
 * Tokens of an identity provider (auth.provider) over real HTTP, against a real OpenID provider
 * (oidc-provider on https://127.0.0.1 with a test CA): its tokens accepted for every algorithm,
 * a rotated key picked up without a restart, unknown kids costing a bounded number of JWKS
 * fetches, algorithm confusion, `none`, a wrong issuer or audience refused, the daemon's own
 * tokens still accepted, nested and list claims, and a caller who is not a user refused or
 * provisioned once (audited).
 */
import assert from 'node:assert/strict';
import { createHmac, createPrivateKey, createPublicKey, sign } from 'node:crypto';
import { test, type TestContext } from 'node:test';
import { PROVISIONING_ACTOR } from '../../src/api/provider-auth.ts';
import { call, craftJwt, seedOrg, startRelay } from '../helpers/helpers.ts';
import { RESOURCE, startOidcProvider, type TestOidcProvider } from '../helpers/oidc-provider.ts';

async function setup(t: TestContext, overrides: Record<string, string> = {}) {
  const idp = await startOidcProvider(t);
  const relay = await startRelay(t, {
    'auth.provider.issuer': idp.issuer,
    'auth.provider.jwksUrl': idp.jwksUrl,
    'auth.provider.audience': RESOURCE,
    'auth.provider.caFile': idp.tls.caFile,
    'auth.provider.allowNetworks': '127.0.0.1/32',
    ...overrides,
  });
  const users = await seedOrg(relay.services, 'org-a');
  return { idp, relay, ...users };
}

const me = (baseUrl: string, token: string, headers: Record<string, string> = {}) => call(baseUrl, 'GET', '/users/me', { token, headers });

function assert401(res: { status: number; body: any }, detail: RegExp): void {
  assert.equal(res.status, 401, JSON.stringify(res.body));
  assert.equal(res.body.code, 'invalid_token');
  assert.match(res.body.detail, detail);
}

/** Forges a token with `idp`'s own private key `kid`, as the provider would sign it, with `claims` changed. */
function forged(idp: TestOidcProvider, kid: string, claims: Record<string, unknown>, header: Record<string, unknown> = {}): string {
  const key = createPrivateKey({ key: idp.privateJwk(kid) as never, format: 'jwk' });
  const now = Math.floor(Date.now() / 1000);
  const payload = { iss: idp.issuer, aud: RESOURCE, iat: now, exp: now + 300, email: 'admin@org-a.test', org: 'org-a', ...claims };
  return craftJwt({ alg: 'ES256', kid, typ: 'at+jwt', ...header }, payload, (input) => sign('sha256', Buffer.from(input), { key, dsaEncoding: 'ieee-p1363' }));
}

const kidOf = (token: string) => (JSON.parse(Buffer.from(token.split('.')[0]!, 'base64url').toString()) as { kid: string }).kid;

test("the provider's tokens are accepted for each algorithm; the daemon's own still work beside them", async (t) => {
  const { idp, relay, admin, viewer } = await setup(t);
  for (const alg of ['ES256', 'RS256', 'PS256', 'EdDSA'] as const) {
    const token = await idp.token({ clientId: `client-${alg}`, claims: { email: admin, org: 'org-a' }, alg });
    const res = await me(relay.baseUrl, token);
    assert.equal(res.status, 200, `${alg}: ${JSON.stringify(res.body)}`);
    assert.equal(res.body.role, 'saas_admin');
  }
  const own = await me(relay.baseUrl, relay.token('org-a', viewer));
  assert.equal(own.status, 200);
  assert.equal(own.body.role, 'saas_viewer');
});

test('a rotated key is fetched when a token names it, without a restart', async (t) => {
  const { idp, relay, admin } = await setup(t, { 'auth.provider.minRefreshInterval': '1s' });
  const first = await idp.token({ clientId: 'svc', claims: { email: admin, org: 'org-a' } });
  assert.equal((await me(relay.baseUrl, first)).status, 200);
  const fetchesBefore = idp.jwksRequests();
  const newKid = idp.rotate();
  await new Promise((resolve) => setTimeout(resolve, 1100));
  const second = await idp.token({ clientId: 'svc', claims: { email: admin, org: 'org-a' } });
  assert.equal(kidOf(second), newKid);
  assert.equal((await me(relay.baseUrl, second)).status, 200);
  assert.equal(idp.jwksRequests(), fetchesBefore + 1);
  assert.equal((await me(relay.baseUrl, first)).status, 200, 'the old key is still published and still verifies');
});

test('1,000 requests with unknown kids cause a bounded number of JWKS fetches, each refused with the detail', async (t) => {
  const { idp, relay } = await setup(t);
  const kid = kidOf(await idp.token({ clientId: 'svc', claims: { email: 'x@org-a.test', org: 'org-a' } }));
  const before = idp.jwksRequests();
  const answers = [];
  for (let batch = 0; batch < 10; batch++) {
    answers.push(...(await Promise.all(Array.from({ length: 100 }, (_, i) => me(relay.baseUrl, forged(idp, kid, {}, { kid: `unknown-${batch}-${i}` }))))));
  }
  for (const res of answers) assert401(res, /not among the identity provider's keys \(fetched again for an unknown kid at most once per auth\.provider\.minRefreshInterval\)/);
  // minRefreshInterval is 30 s: one fetch at most for all of them.
  assert.ok(idp.jwksRequests() - before <= 1, `JWKS fetched ${idp.jwksRequests() - before} times`);
  const metrics = await fetch(`${relay.baseUrl}/metrics`).then((res) => res.text());
  assert.match(metrics, /^hookrelay_identity_provider_jwks_fetches_total\{outcome="ok"\} [12]$/m);
  assert.match(metrics, /^hookrelay_identity_provider_keys_age_seconds \d/m);
  assert.match(metrics, /^hookrelay_identity_provider_keys_usable 1$/m);
});

test('algorithm confusion, none, a wrong issuer or audience are refused', async (t) => {
  const { idp, relay, admin } = await setup(t);
  const token = await idp.token({ clientId: 'svc', claims: { email: admin, org: 'org-a' } });
  const kid = kidOf(token);
  const publicPem = createPublicKey({ key: idp.privateJwk(kid) as never, format: 'jwk' }).export({ type: 'spki', format: 'pem' });
  const now = Math.floor(Date.now() / 1000);
  const claims = { iss: idp.issuer, aud: RESOURCE, iat: now, exp: now + 300, email: admin, org: 'org-a' };
  const hs = craftJwt({ alg: 'HS256', kid }, claims, (input) => createHmac('sha256', publicPem).update(input).digest());
  assert401(await me(relay.baseUrl, hs), /algorithm this server does not accept from the identity provider/);
  assert401(await me(relay.baseUrl, craftJwt({ alg: 'none', kid }, claims, () => null)), /algorithm this server does not accept/);
  assert401(await me(relay.baseUrl, forged(idp, kid, { aud: 'https://other.example' })), /audience \(aud\) is not accepted/);
  assert401(await me(relay.baseUrl, forged(idp, kid, { iss: 'https://evil.example' })), /issuer \(iss\) is not accepted: this server accepts tokens of the identity provider/);
  // A token the provider signed, its payload changed afterwards.
  const [h, , s] = token.split('.');
  const tampered = `${h}.${Buffer.from(JSON.stringify({ ...claims, org: 'org-b' })).toString('base64url')}.${s}`;
  assert401(await me(relay.baseUrl, tampered), /could not be verified/);
  assert.equal((await me(relay.baseUrl, forged(idp, kid, {}))).status, 200, 'the same forge with the right claims passes: the refusals are the claims');
});

test('nested and list organization claims: a JSON Pointer, and the request naming one organization of a list', async (t) => {
  const { idp, relay, admin } = await setup(t, { 'auth.provider.organizationClaim': '/https:~1~1example.com~1claims/orgs' });
  const kid = kidOf(await idp.token({ clientId: 'svc', claims: {} }));
  await seedOrg(relay.services, 'org-b');
  const token = forged(idp, kid, { org: undefined, 'https://example.com/claims': { orgs: ['org-b', 'org-a'] } });
  assert401(await me(relay.baseUrl, token), /several organizations .* Hookrelay-Organization header/);
  const named = await me(relay.baseUrl, token, { 'hookrelay-organization': 'org-a' });
  assert.equal(named.status, 200);
  assert.equal(named.body.organization_id, 'org-a');
  assert.equal(named.body.email, admin);
  assert401(await me(relay.baseUrl, token, { 'hookrelay-organization': 'org-c' }), /does not name the organization/);
});

test('a caller the provider vouches for who is not a user gets 401; with provisioning, is created once as saas_viewer (audited)', async (t) => {
  const off = await setup(t);
  const stranger = await off.idp.token({ clientId: 'stranger', claims: { email: 'new@org-a.test', org: 'org-a' } });
  assert401(await me(off.relay.baseUrl, stranger), /not a user of organization "org-a" here/);

  const on = await setup(t, { 'auth.provider.provisionUsers': 'true' });
  const token = await on.idp.token({ clientId: 'stranger', claims: { email: 'new@org-a.test', org: 'org-a' } });
  const answers = await Promise.all(Array.from({ length: 5 }, () => me(on.relay.baseUrl, token)));
  for (const res of answers) assert.equal(res.status, 200, JSON.stringify(res.body));
  assert.equal(answers[0]!.body.role, 'saas_viewer');
  assert.equal((await me(on.relay.baseUrl, token)).status, 200);
  const entries = await on.relay.services.audit.list({ orgId: 'org-a', action: 'user.add', limit: 100 });
  const provisioned = entries.filter((e) => e.target === 'new@org-a.test');
  assert.equal(provisioned.filter((e) => e.outcome === 'ok').length, 1, JSON.stringify(provisioned));
  assert.equal(provisioned.find((e) => e.outcome === 'ok')!.actorName, PROVISIONING_ACTOR);
  const unknownOrg = await on.idp.token({ clientId: 'elsewhere', claims: { email: 'x@org-z.test', org: 'org-z' } });
  assert401(await me(on.relay.baseUrl, unknownOrg), /organization "org-z" does not exist here/);
  const notAnEmail = await on.idp.token({ clientId: 'robot', claims: { email: 'robot', org: 'org-a' } });
  assert401(await me(on.relay.baseUrl, notAnEmail), /does not hold an e-mail address; no user was created/);
});

test('provider stopped: cached keys keep working and readiness says degraded; never reached: 503 and 401, own tokens work', async (t) => {
  const { idp, relay, admin } = await setup(t, { 'auth.provider.minRefreshInterval': '1s' });
  const token = await idp.token({ clientId: 'svc', claims: { email: admin, org: 'org-a' } });
  await idp.stop();
  await new Promise((resolve) => setTimeout(resolve, 1100));
  // An unknown kid makes it try (and fail) to fetch again: the provider is now known to be down.
  assert401(await me(relay.baseUrl, forged(idp, kidOf(token), {}, { kid: 'unknown' })), /not among/);
  assert.equal((await me(relay.baseUrl, token)).status, 200);
  const ready = await call(relay.baseUrl, 'GET', '/readyz');
  assert.equal(ready.status, 200);
  assert.equal(ready.body.status, 'ready');
  assert.equal(ready.body.degraded[0].reason, 'identity_provider_unreachable');

  const down = await startRelay(t, {
    'auth.provider.issuer': idp.issuer,
    'auth.provider.jwksUrl': idp.jwksUrl,
    'auth.provider.audience': RESOURCE,
    'auth.provider.caFile': idp.tls.caFile,
    'auth.provider.allowNetworks': '127.0.0.1/32',
    'auth.provider.fetchTimeout': '1s',
  });
  await seedOrg(down.services, 'org-a');
  const notReady = await call(down.baseUrl, 'GET', '/readyz');
  assert.equal(notReady.status, 503);
  assert.equal(notReady.body.reason, 'identity_provider_unreachable');
  assert401(await me(down.baseUrl, token), /could not fetch the identity provider's keys yet/);
  assert.equal((await me(down.baseUrl, down.token('org-a', admin))).status, 200);
});

test('discovery: the JWKS URL is read from the openid-configuration of the issuer', async (t) => {
  const idp = await startOidcProvider(t);
  const relay = await startRelay(t, {
    'auth.provider.issuer': idp.issuer,
    'auth.provider.discovery': 'true',
    'auth.provider.audience': RESOURCE,
    'auth.provider.caFile': idp.tls.caFile,
    'auth.provider.allowNetworks': '127.0.0.1/32',
  });
  const { admin } = await seedOrg(relay.services, 'org-a');
  const token = await idp.token({ clientId: 'svc', claims: { email: admin, org: 'org-a' } });
  assert.equal((await me(relay.baseUrl, token)).status, 200);
  assert.equal((await call(relay.baseUrl, 'GET', '/readyz')).body.status, 'ready');
});

test('a provider on a loopback address is refused unless auth.provider.allowNetworks allows it', async (t) => {
  const idp = await startOidcProvider(t);
  const relay = await startRelay(t, {
    'auth.provider.issuer': idp.issuer,
    'auth.provider.discovery': 'true',
    'auth.provider.audience': RESOURCE,
    'auth.provider.caFile': idp.tls.caFile,
  });
  const ready = await call(relay.baseUrl, 'GET', '/readyz');
  assert.equal(ready.status, 503);
  assert.match(ready.body.detail, /refused range .* auth\.provider\.allowNetworks/);
  assert.equal(idp.jwksRequests(), 0);
});

test("the console's sign-in settings: the provider's endpoints from its discovery document, the redirect URI, and its token endpoint added to the console's CSP; none without console.oidc", async (t) => {
  const { idp, relay } = await setup(t, { 'auth.provider.jwksUrl': '', 'auth.provider.discovery': 'true', 'console.oidc.clientId': 'hookrelay-console', 'console.oidc.resource': RESOURCE, 'console.publicUrl': 'https://relay.example.com/ops' });
  const res = await fetch(`${relay.baseUrl}/console/sign-in.json`);
  assert.equal(res.status, 200);
  assert.deepEqual(await res.json(), {
    provider: {
      name: 'your identity provider',
      issuer: idp.issuer,
      client_id: 'hookrelay-console',
      authorization_endpoint: `${idp.issuer}/auth`,
      token_endpoint: `${idp.issuer}/token`,
      end_session_endpoint: `${idp.issuer}/session/end`,
      scope: 'openid email profile',
      resource: RESOURCE,
      redirect_uri: 'https://relay.example.com/ops/console/',
    },
  });
  const page = await fetch(`${relay.baseUrl}/console/`);
  await page.arrayBuffer();
  assert.match(page.headers.get('content-security-policy') ?? '', new RegExp(`connect-src 'self' ${idp.issuer.replace(/\./g, '\\.')};`));

  const plain = await startRelay(t);
  const none = await fetch(`${plain.baseUrl}/console/sign-in.json`);
  assert.deepEqual(await none.json(), { provider: null });
  const plainPage = await fetch(`${plain.baseUrl}/console/`);
  await plainPage.arrayBuffer();
  assert.match(plainPage.headers.get('content-security-policy') ?? '', /connect-src 'self';/);
});

test("the console's sign-in settings while the provider was never reached: unavailable, with the reason; the CSP adds nothing", async (t) => {
  const relay = await startRelay(t, {
    'auth.provider.issuer': 'https://127.0.0.1:9/realms/none',
    'auth.provider.discovery': 'true',
    'auth.provider.audience': RESOURCE,
    'auth.provider.allowNetworks': '127.0.0.1/32',
    'auth.provider.fetchTimeout': '500ms',
    'console.oidc.clientId': 'hookrelay-console',
    'console.oidc.displayName': 'Keycloak',
  });
  const res = await fetch(`${relay.baseUrl}/console/sign-in.json`);
  const body = (await res.json()) as { provider: { name: string; unavailable: string } };
  assert.equal(body.provider.name, 'Keycloak');
  assert.match(body.provider.unavailable, /has not read the identity provider's discovery document yet .* sign in with a link meanwhile/);
  const page = await fetch(`${relay.baseUrl}/console/`);
  await page.arrayBuffer();
  assert.match(page.headers.get('content-security-policy') ?? '', /connect-src 'self';/);
});

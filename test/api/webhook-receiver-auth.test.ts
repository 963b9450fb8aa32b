/**
 * register_webhook's receiver authentication (issue 43) through the real admin API: a client
 * certificate and OAuth2 client credentials are set, shown without their secrets, kept when
 * left out, removed with null, recorded in the audit trail as changed (never their values);
 * each bad input is one clear 422 that changes nothing; and the private key and the client
 * secret are in the database file only sealed.
 */
import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import { dirname } from 'node:path';
import { test, type TestContext } from 'node:test';
import { assertProblem, assertUnchanged, call, seedOrg, startRelay } from '../helpers/helpers.ts';
import { createClientCa, type ClientCert } from '../helpers/client-certs.ts';

const SECRET = 'oauth2-client-secret-Jq83Hx2kPz';
const OAUTH2 = { token_url: 'https://idp.example/oauth2/token', client_id: 'hookrelay-acme', client_secret: SECRET, scope: 'events:write' };

async function setup(t: TestContext, overrides: Record<string, string> = {}) {
  const relay = await startRelay(t, overrides);
  const { admin, viewer } = await seedOrg(relay.services, 'acme');
  return { relay, admin: relay.token('acme', admin), viewer: relay.token('acme', viewer), ca: createClientCa(t) };
}

const body = (c: ClientCert) => ({ certificate: c.certPem, private_key: c.keyPem });
/** The key's base64 body: what must never be found outside its sealed column. */
const keyBody = (c: ClientCert) => c.keyPem.split('\n').filter((l) => l !== '' && !l.startsWith('-----')).join('');

/** Every byte of the SQLite database's files (the main file, its WAL), as latin1 text to search. */
function databaseBytes(path: string): string {
  const dir = dirname(path);
  const base = path.slice(dir.length + 1);
  return readdirSync(dir)
    .filter((f) => f.startsWith(base))
    .map((f) => readFileSync(`${dir}/${f}`).toString('latin1'))
    .join('\n');
}

test('a client certificate and OAuth2 are set, shown without their secrets (to admins and viewers), kept when left out, removed with null', async (t) => {
  const { relay, admin, viewer, ca } = await setup(t);
  const cert = ca.issue({ cn: 'acme hookrelay client' });
  const url = 'https://hooks.example.com/in';
  const res = await call(relay.baseUrl, 'POST', '/webhook/register_webhook', { token: admin, body: { webhook_url: url, client_certificate: body(cert), oauth2: OAUTH2 } });
  assert.equal(res.status, 201, res.text);
  assert.equal(res.body.client_certificate.subject, 'CN=acme hookrelay client');
  assert.equal(res.body.client_certificate.issuer, 'CN=hookrelay test client CA');
  assert.equal(res.body.client_certificate.fingerprint_sha256, cert.fingerprint);
  assert.equal(res.body.client_certificate.key_type, 'EC P-256');
  assert.match(res.body.client_certificate.not_after, /^\d{4}-\d{2}-\d{2}T/);
  assert.deepEqual(res.body.oauth2, { token_url: OAUTH2.token_url, client_id: 'hookrelay-acme', scope: 'events:write', audience: null, client_auth: 'client_secret_basic' });
  assert.match(res.body.message, /Deliveries present the client certificate CN=acme hookrelay client .* and carry an OAuth2 access token from https:\/\/idp\.example\/oauth2\/token \(client hookrelay-acme\)/);
  for (const token of [admin, viewer]) {
    const got = await call(relay.baseUrl, 'GET', '/webhook/get_webhook', { token });
    assert.equal(got.status, 200);
    assert.equal(got.body.client_certificate.fingerprint_sha256, cert.fingerprint);
    assert.equal(got.body.oauth2.client_id, 'hookrelay-acme');
    for (const text of [got.text, res.text]) {
      assert.ok(!text.includes(SECRET), 'no client secret in an answer');
      assert.ok(!text.includes(keyBody(cert)), 'no private key in an answer');
    }
  }

  // Left out: kept (a registration cannot send them back: they are never shown).
  const kept = await call(relay.baseUrl, 'POST', '/webhook/register_webhook', { token: admin, body: { webhook_url: `${url}/v2` } });
  assert.equal(kept.status, 200, kept.text);
  assert.equal(kept.body.client_certificate.fingerprint_sha256, cert.fingerprint);
  assert.equal(kept.body.oauth2.client_id, 'hookrelay-acme');

  // The database holds them sealed only: neither the key's body nor the secret in its bytes.
  const bytes = databaseBytes(relay.config.database.path);
  assert.ok(!bytes.includes(keyBody(cert)), 'the private key is in the database file');
  assert.ok(!bytes.includes(SECRET), 'the client secret is in the database file');
  const row = relay.store.db.prepare("SELECT client_certificate_sealed, oauth2_secret_sealed FROM webhooks WHERE org_id = 'acme'").get() as Record<string, string>;
  assert.match(row.client_certificate_sealed!, /^hrs1\./);
  assert.match(row.oauth2_secret_sealed!, /^hrs1\./);

  // Removed with null.
  const removed = await call(relay.baseUrl, 'POST', '/webhook/register_webhook', { token: admin, body: { webhook_url: url, client_certificate: null, oauth2: null } });
  assert.equal(removed.body.client_certificate, null);
  assert.equal(removed.body.oauth2, null);
  assert.deepEqual(relay.store.db.prepare("SELECT client_certificate, client_certificate_sealed, oauth2, oauth2_secret_sealed FROM webhooks WHERE org_id = 'acme'").get(), {
    client_certificate: null,
    client_certificate_sealed: null,
    oauth2: null,
    oauth2_secret_sealed: null,
  });

  // The audit trail: what changed, whether the secrets changed, never their values.
  const audit = await call(relay.baseUrl, 'GET', '/audit/list?action=webhook.register', { token: admin });
  const replaced = await call(relay.baseUrl, 'GET', '/audit/list?action=webhook.replace', { token: admin });
  const entries = [...audit.body.data, ...replaced.body.data] as Array<{ changes: Record<string, any> }>;
  const first = entries.find((e) => e.changes.client_certificate?.after !== null && e.changes.client_certificate !== undefined)!;
  assert.deepEqual(first.changes.client_certificate.private_key, { set_before: false, set_after: true, changed: true });
  assert.equal(first.changes.client_certificate.after.fingerprint_sha256, cert.fingerprint);
  assert.deepEqual(first.changes.oauth2.client_secret, { set_before: false, set_after: true, changed: true });
  const last = entries.find((e) => e.changes.oauth2?.after === null)!;
  assert.deepEqual(last.changes.oauth2.client_secret, { set_before: true, set_after: false, changed: true });
  for (const text of [audit.text, replaced.text]) {
    assert.ok(!text.includes(SECRET));
    assert.ok(!text.includes(keyBody(cert)));
  }
});

test('the same OAuth2 secret given again is recorded as unchanged; another one as changed (compared sealed, never shown)', async (t) => {
  const { relay, admin } = await setup(t);
  const url = 'https://hooks.example.com/in';
  await call(relay.baseUrl, 'POST', '/webhook/register_webhook', { token: admin, body: { webhook_url: url, oauth2: OAUTH2 } });
  await call(relay.baseUrl, 'POST', '/webhook/register_webhook', { token: admin, body: { webhook_url: url, oauth2: OAUTH2 } });
  await call(relay.baseUrl, 'POST', '/webhook/register_webhook', { token: admin, body: { webhook_url: url, oauth2: { ...OAUTH2, client_secret: 'another-secret-value-1' } } });
  const page = await call(relay.baseUrl, 'GET', '/audit/list?action=webhook.replace', { token: admin });
  const changes = (page.body.data as Array<{ changes: Record<string, any> }>).map((e) => e.changes.oauth2 ?? null);
  // Newest first: the new secret, then the same one again (no oauth2 change at all).
  assert.deepEqual(changes[0]?.client_secret, { set_before: true, set_after: true, changed: true });
  assert.equal(changes[1], null);
  assert.ok(!page.text.includes('another-secret-value-1'));
});

test('bad inputs: each one clear 422 naming what is wrong, and nothing changes', async (t) => {
  const { relay, admin, ca } = await setup(t);
  const url = 'https://hooks.example.com/in';
  const good = ca.issue();
  const before = await call(relay.baseUrl, 'POST', '/webhook/register_webhook', { token: admin, body: { webhook_url: url, client_certificate: body(good) } });
  assert.equal(before.status, 201);
  const other = ca.issue();
  const expired = ca.issue({ startDate: '20200101000000Z', endDate: '20210101000000Z' });
  const register = (extra: Record<string, unknown>) => assertUnchanged(relay.store, () => call(relay.baseUrl, 'POST', '/webhook/register_webhook', { token: admin, body: { webhook_url: `${url}/changed`, ...extra } }));

  const mismatch = assertProblem(await register({ client_certificate: { certificate: good.certPem, private_key: other.keyPem } }), 422, 'validation_failed');
  assert.deepEqual(mismatch.invalid_params.map((p: { name: string }) => p.name), ['client_certificate.private_key']);
  assert.match(mismatch.invalid_params[0].reason, /^does not match the certificate/);

  const old = assertProblem(await register({ client_certificate: body(expired) }), 422, 'validation_failed');
  assert.deepEqual(old.invalid_params, [{ name: 'client_certificate.certificate', reason: 'expired on 2021-01-01T00:00:00.000Z; give a certificate that is valid now' }]);

  const missing = assertProblem(await register({ client_certificate: { certificate: good.certPem } }), 422, 'validation_failed');
  assert.deepEqual(missing.invalid_params, [{ name: 'client_certificate.private_key', reason: 'is required' }]);

  for (const tokenUrl of ['https://10.0.0.1/token', 'https://127.0.0.1:8443/token']) {
    const internal = assertProblem(await register({ oauth2: { ...OAUTH2, token_url: tokenUrl } }), 422, 'webhook_url_not_allowed');
    assert.equal(internal.invalid_params[0].name, 'oauth2.token_url');
    assert.match(internal.invalid_params[0].reason, /must not point at (a private|a loopback) address/);
  }
  const http = assertProblem(await register({ oauth2: { ...OAUTH2, token_url: 'http://idp.example/token' } }), 422, 'webhook_url_not_allowed');
  assert.equal(http.invalid_params[0].name, 'oauth2.token_url');

  // A secret in a custom Authorization header next to OAuth2: both named.
  const both = assertProblem(await register({ oauth2: OAUTH2, headers: { Authorization: 'Bearer static-token-123' } }), 422, 'validation_failed');
  assert.deepEqual(both.invalid_params.map((p: { name: string }) => p.name), ['headers', 'oauth2']);
  assert.ok(!JSON.stringify(both).includes('static-token-123'));
  assert.ok(!JSON.stringify(both).includes(SECRET));

  const incomplete = assertProblem(await register({ oauth2: { token_url: OAUTH2.token_url } }), 422, 'validation_failed');
  assert.deepEqual(incomplete.invalid_params.map((p: { name: string }) => p.name), ['oauth2.client_id', 'oauth2.client_secret']);

  // OAuth2 kept from before, and an Authorization header added: refused too.
  assert.equal((await call(relay.baseUrl, 'POST', '/webhook/register_webhook', { token: admin, body: { webhook_url: url, oauth2: OAUTH2 } })).status, 200);
  const later = assertProblem(await register({ headers: { authorization: 'Basic dXNlcjpwYXNz' } }), 422, 'validation_failed');
  assert.deepEqual(later.invalid_params.map((p: { name: string }) => p.name), ['headers', 'oauth2']);

  const after = await call(relay.baseUrl, 'GET', '/webhook/get_webhook', { token: admin });
  assert.equal(after.body.webhook_url, url);
  assert.equal(after.body.client_certificate.fingerprint_sha256, good.fingerprint);
});

test('a token URL on an internal network the operator grants to the organization is taken', async (t) => {
  const { relay, admin } = await setup(t, { 'delivery.organizationNetworks': 'acme=10.20.0.0/16' });
  const res = await call(relay.baseUrl, 'POST', '/webhook/register_webhook', { token: admin, body: { webhook_url: 'https://hooks.example.com/in', oauth2: { ...OAUTH2, token_url: 'https://10.20.0.5/token' } } });
  assert.equal(res.status, 201, res.text);
  assert.equal(res.body.oauth2.token_url, 'https://10.20.0.5/token');
});

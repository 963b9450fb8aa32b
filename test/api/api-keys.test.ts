/**
 * API keys through the admin API (the real app on 127.0.0.1:0): an admin creates a key, which
 * works as `Authorization: Bearer` beside JWTs until revoked and not a request after; an expired
 * key is refused; a key acts as its role, in its organization only; a role above the creator's
 * is refused; the key appears in no answer after its creation, no log line and no byte of the
 * database; creation, revocation and a refused use are in the audit trail.
 */
import assert from 'node:assert/strict';
import { existsSync, readFileSync } from 'node:fs';
import { Writable } from 'node:stream';
import { test, type TestContext } from 'node:test';
import type { AuditEntry } from '../../src/domain/audit.ts';
import { createLogger } from '../../src/log.ts';
import { BY_TEST } from '../helpers/audit-helpers.ts';
import { call, seedOrg, startRelay, type ApiResponse, type RunningRelay } from '../helpers/helpers.ts';

async function setup(t: TestContext) {
  const lines: string[] = [];
  const sink = new Writable({
    write: (chunk, _e, done) => {
      lines.push(String(chunk));
      done();
    },
  });
  const relay = await startRelay(t, { 'delivery.allowNetworks': '127.0.0.0/8' }, { log: createLogger('debug', sink) });
  const a = await seedOrg(relay.services, 'org-a');
  const b = await seedOrg(relay.services, 'org-b');
  return { relay, lines, a, b, admin: relay.token('org-a', a.admin), viewer: relay.token('org-a', a.viewer), adminB: relay.token('org-b', b.admin) };
}

async function entries(relay: RunningRelay): Promise<AuditEntry[]> {
  return relay.store.read((tx) => tx.audit.after(0, 10_000));
}

async function createKey(relay: RunningRelay, token: string, body: Record<string, unknown>): Promise<ApiResponse> {
  return call(relay.baseUrl, 'POST', '/api_keys/create_api_key', { token, body });
}

test('a key works as Bearer until revoked and not a request after; it acts as its role in its organization', async (t) => {
  const { relay, admin, adminB } = await setup(t);
  const created = await createKey(relay, admin, { name: 'deployer', role_name: 'saas_admin' });
  assert.equal(created.status, 201, created.text);
  const key: string = created.body.key;
  assert.match(key, /^hkr_[0-9a-f]{8}_/);
  assert.equal(created.body.prefix, key.slice(0, 12));
  assert.equal(created.headers.get('cache-control'), 'no-store');

  const me = await call(relay.baseUrl, 'GET', '/users/me', { token: key });
  assert.equal(me.status, 200);
  assert.deepEqual([me.body.email, me.body.organization_id, me.body.role], ['api-key:deployer', 'org-a', 'saas_admin']);
  // A change made with the key is the key's, in the trail.
  const added = await call(relay.baseUrl, 'POST', '/users/add_user', { token: key, body: { email: 'new@org-a.test', role_name: 'saas_viewer' } });
  assert.equal(added.status, 201);
  const addEntry = (await entries(relay)).find((e) => e.action === 'user.add' && e.target === 'new@org-a.test');
  assert.equal(addEntry?.actorName, 'api-key:deployer');

  // Its organization only: another organization's users are not its, and it cannot touch another's keys.
  const users = await call(relay.baseUrl, 'GET', '/users/get_users', { token: key });
  assert.ok(users.body.every((u: { email: string }) => u.email.endsWith('@org-a.test')));
  const otherKey = (await createKey(relay, adminB, { name: 'deployer', role_name: 'saas_viewer' })).body.key as string;
  assert.deepEqual((await call(relay.baseUrl, 'GET', '/api_keys/list_api_keys', { token: key })).body.map((k: { name: string; prefix: string }) => k.prefix), [key.slice(0, 12)]);
  const otherMe = await call(relay.baseUrl, 'GET', '/users/me', { token: otherKey });
  assert.equal(otherMe.body.organization_id, 'org-b');

  const revoked = await call(relay.baseUrl, 'POST', '/api_keys/revoke_api_key', { token: admin, body: { name: 'deployer' } });
  assert.equal(revoked.status, 200);
  const refused = await call(relay.baseUrl, 'GET', '/users/me', { token: key });
  assert.equal(refused.status, 401);
  assert.equal(refused.body.code, 'invalid_token');
  assert.match(refused.headers.get('www-authenticate') ?? '', /invalid_token/);
  assert.equal((await call(relay.baseUrl, 'GET', '/users/me', { token: otherKey })).status, 200, "revoking org-a's key leaves org-b's of the same name");
  // JWTs keep working beside keys.
  assert.equal((await call(relay.baseUrl, 'GET', '/users/me', { token: admin })).status, 200);
});

test("a viewer key cannot manage; a role above the creator's is refused; an expired key is refused", async (t) => {
  const { relay, admin, viewer } = await setup(t);
  const viewerKey = (await createKey(relay, admin, { name: 'reader', role_name: 'saas_viewer', expires_in: '30d' })).body.key as string;
  assert.equal((await call(relay.baseUrl, 'GET', '/users/get_roles', { token: viewerKey })).status, 200);
  const manage = await call(relay.baseUrl, 'POST', '/users/add_user', { token: viewerKey, body: { email: 'x@org-a.test', role_name: 'saas_viewer' } });
  assert.equal(manage.status, 403);
  assert.equal((await call(relay.baseUrl, 'POST', '/api_keys/create_api_key', { token: viewerKey, body: { name: 'x', role_name: 'saas_viewer' } })).status, 403);
  assert.equal((await createKey(relay, viewer, { name: 'x', role_name: 'saas_viewer' })).status, 403, 'a viewer may not create keys');

  await relay.services.roles.add(BY_TEST, { name: 'key_maker', description: 'creates keys', permissions: ['api_keys:manage', 'roles:read'] });
  const makerKey = (await relay.services.apiKeys.create(BY_TEST, { orgId: 'org-a', name: 'maker', roleName: 'key_maker', creatorPermissions: null })).key;
  const above = await createKey(relay, makerKey, { name: 'escalate', role_name: 'saas_viewer' });
  assert.equal(above.status, 403);
  assert.equal(above.body.code, 'api_key_role_too_high');
  assert.equal((await createKey(relay, admin, { name: 'forever', role_name: 'saas_viewer', expires_in: '400d' })).status, 422);

  relay.store.db.prepare("UPDATE api_keys SET expires_at = 1 WHERE name = 'reader'").run();
  const expired = await call(relay.baseUrl, 'GET', '/users/me', { token: viewerKey });
  assert.equal(expired.status, 401);
  assert.match(expired.body.detail, /expired/);
});

test('the key appears nowhere after its creation: answers, logs, the database file; creation, revocation and refused uses are audited', async (t) => {
  const { relay, lines, admin } = await setup(t);
  const created = await createKey(relay, admin, { name: 'secretive', role_name: 'saas_viewer' });
  const key: string = created.body.key;
  const secret = key.slice(13);
  const answers: string[] = [];
  for (const path of ['/api_keys/list_api_keys', '/audit/list', '/users/me', '/users/get_users']) answers.push((await call(relay.baseUrl, 'GET', path, { token: admin })).text);
  answers.push((await call(relay.baseUrl, 'GET', '/users/me', { token: key })).text);
  answers.push((await call(relay.baseUrl, 'POST', '/api_keys/revoke_api_key', { token: admin, body: { name: 'secretive' } })).text);
  // Refused uses: on a route that changes something (audited), and with a forged key of a known prefix.
  const refused = await call(relay.baseUrl, 'POST', '/users/add_user', { token: key, body: { email: 'x@org-a.test', role_name: 'saas_viewer' } });
  assert.equal(refused.status, 401);
  answers.push(refused.text);
  const forged = `${key.slice(0, 13)}${'A'.repeat(43)}`;
  answers.push((await call(relay.baseUrl, 'POST', '/users/add_user', { token: forged, body: { email: 'x@org-a.test', role_name: 'saas_viewer' } })).text);
  answers.push((await call(relay.baseUrl, 'GET', '/audit/list', { token: admin })).text);
  for (const text of answers) assert.ok(!text.includes(secret), `an answer holds the secret: ${text}`);

  const trail = await entries(relay);
  const keyEntries = trail.filter((e) => e.action.startsWith('api_key.')).map((e) => [e.action, e.outcome, e.orgId, e.target, e.code]);
  assert.deepEqual(keyEntries, [
    ['api_key.create', 'ok', 'org-a', 'api-key secretive', null],
    ['api_key.revoke', 'ok', 'org-a', 'api-key secretive', null],
    ['api_key.use_refused', 'denied', 'org-a', 'api-key secretive', 'invalid_token'],
    ['api_key.use_refused', 'denied', null, null, 'invalid_token'],
  ]);
  const revokedUse = trail.find((e) => e.action === 'api_key.use_refused');
  assert.deepEqual(JSON.parse(revokedUse!.changes!), { method: 'POST', path: '/users/add_user', reason: 'revoked', prefix: key.slice(0, 12) });
  const seen = (await call(relay.baseUrl, 'GET', '/audit/list?action=api_key.use_refused', { token: admin })).body.data;
  assert.equal(seen.length, 1, "the organization's admin sees the refused use of its key (the unknown one is no organization's)");

  const logText = lines.join('');
  assert.ok(logText.length > 0, 'the daemon logged');
  assert.ok(!logText.includes(secret), 'no log line holds the secret');
  relay.store.db.pragma('wal_checkpoint(PASSIVE)');
  for (const path of [relay.config.database.path, `${relay.config.database.path}-wal`]) {
    if (!existsSync(path)) continue;
    const bytes = readFileSync(path);
    assert.equal(bytes.indexOf(secret), -1, `${path} holds the secret`);
    assert.equal(bytes.indexOf(Buffer.from(secret, 'base64url')), -1, `${path} holds the secret's bytes`);
  }
});

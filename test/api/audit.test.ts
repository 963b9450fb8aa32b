/**
 * The audit trail through the admin API: each change made with a token is one entry with that
 * token's actor, the request's id (X-Request-Id) and address, `console` when a browser sends it;
 * refusals of changes (401, 403) are entries too; GET /audit/list shows an admin their own
 * organization's entries only, and refuses a viewer; the daemon writes each entry to its log
 * with its hash, and nothing secret.
 */
import assert from 'node:assert/strict';
import { Writable } from 'node:stream';
import { test, type TestContext } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import type { AuditEntry } from '../../src/domain/audit.ts';
import { createLogger } from '../../src/log.ts';
import { call, seedOrg, startRelay, type RunningRelay } from '../helpers/helpers.ts';

async function setup(t: TestContext) {
  const lines: string[] = [];
  const log = createLogger('info', new Writable({
      write: (chunk, _e, done) => {
        lines.push(String(chunk));
        done();
      },
    }));
  const relay = await startRelay(t, { 'delivery.allowNetworks': '127.0.0.0/8' }, { log });
  const a = await seedOrg(relay.services, 'org-a');
  const b = await seedOrg(relay.services, 'org-b');
  return { relay, lines, a, b, admin: relay.token('org-a', a.admin), viewer: relay.token('org-a', a.viewer), adminB: relay.token('org-b', b.admin) };
}

async function entries(relay: RunningRelay): Promise<AuditEntry[]> {
  return relay.store.read((tx) => tx.audit.after(0, 10_000));
}

const SEEDED = 6;

test('a change through the API is one entry with the token, the request id and the address; a browser is the console', async (t) => {
  const { relay, admin } = await setup(t);
  const res = await call(relay.baseUrl, 'PUT', '/users/update_role', { token: admin, body: { email: 'viewer@org-a.test', role_name: 'saas_admin' }, headers: { 'X-Request-Id': 'trace-42' } });
  assert.equal(res.status, 200);
  assert.equal(res.headers.get('x-request-id'), 'trace-42');
  const fromConsole = await call(relay.baseUrl, 'PUT', '/users/update_role', { token: admin, body: { email: 'viewer@org-a.test', role_name: 'saas_viewer' }, headers: { Origin: relay.baseUrl } });
  assert.equal(fromConsole.status, 200);
  const added = (await entries(relay)).slice(SEEDED);
  assert.equal(added.length, 2);
  const [api, browser] = added as [AuditEntry, AuditEntry];
  assert.deepEqual([api.action, api.actorKind, api.actorName, api.actorOrg, api.orgId, api.target, api.requestId, api.outcome], ['role.update', 'api', 'admin@org-a.test', 'org-a', 'org-a', 'viewer@org-a.test', 'trace-42', 'ok']);
  assert.match(api.source ?? '', /127\.0\.0\.1/);
  assert.deepEqual(JSON.parse(api.changes!), { role_name: { before: 'saas_viewer', after: 'saas_admin' } });
  assert.equal(browser.actorKind, 'console');
  assert.equal(browser.requestId, fromConsole.headers.get('x-request-id'));
});

test('each webhook change through the API is one entry; neither the secret nor a header credential is in an entry or a log line', async (t) => {
  const { relay, admin, lines } = await setup(t);
  const credential = 'Bearer api-hdr-s3cret-0123456789';
  const reg = await call(relay.baseUrl, 'POST', '/webhook/register_webhook', { token: admin, body: { webhook_url: 'https://127.0.0.1:9/in', headers: { Authorization: credential } } });
  assert.equal(reg.status, 201);
  const rot = await call(relay.baseUrl, 'POST', '/webhook/rotate_secret', { token: admin });
  const secret = await call(relay.baseUrl, 'GET', '/webhook/get_secret', { token: admin });
  for (const path of ['/webhook/disable', '/webhook/enable', '/webhook/test']) assert.ok((await call(relay.baseUrl, 'POST', path, { token: admin })).status < 300, path);
  const added = (await entries(relay)).slice(SEEDED);
  assert.deepEqual(added.map((e) => [e.action, e.actorName]), ['webhook.register', 'webhook.secret_rotate', 'webhook.disable', 'webhook.enable', 'webhook.test'].map((a) => [a, 'admin@org-a.test']));
  // The daemon's journal writes each entry with its hash.
  for (let i = 0; i < 50 && !lines.join('').includes(added[added.length - 1]!.hash); i++) await sleep(100);
  const logged = lines.filter((l) => l.includes('"subsystem":"audit"')).map((l) => JSON.parse(l).audit);
  for (const e of added) assert.ok(logged.some((l) => l.id === e.id && l.hash === e.hash), `entry ${e.id} logged with its hash`);
  for (const value of [reg.body.secret, rot.body.secret, secret.body.secret, credential, 'api-hdr-s3cret']) {
    assert.ok(!JSON.stringify(added).includes(value), 'an entry holds a secret');
    assert.ok(!lines.join('').includes(value), 'a log line holds a secret');
  }
});

test('refusals of a change are entries: 403 with the viewer, 401 anonymous; reads are not audited', async (t) => {
  const { relay, viewer } = await setup(t);
  assert.equal((await call(relay.baseUrl, 'POST', '/webhook/rotate_secret', { token: viewer })).status, 403);
  assert.equal((await call(relay.baseUrl, 'PUT', '/users/update_role', { body: { email: 'x@org-a.test', role_name: 'saas_admin' } })).status, 401);
  assert.equal((await call(relay.baseUrl, 'GET', '/webhook/get_webhook', {})).status, 401);
  const added = (await entries(relay)).slice(SEEDED);
  assert.deepEqual(
    added.map((e) => [e.action, e.outcome, e.code, e.actorKind, e.actorName, e.orgId]),
    [
      ['webhook.secret_rotate', 'denied', 'forbidden', 'api', 'viewer@org-a.test', 'org-a'],
      ['role.update', 'denied', 'missing_token', 'anonymous', null, null],
    ],
  );
  assert.deepEqual(JSON.parse(added[1]!.changes!), { method: 'PUT', path: '/users/update_role' });
});

test('GET /audit/list: the admin sees their organization only, newest first, paged and filtered; a viewer is refused', async (t) => {
  const { relay, admin, adminB, viewer } = await setup(t);
  await call(relay.baseUrl, 'PUT', '/users/update_role', { token: admin, body: { email: 'viewer@org-a.test', role_name: 'saas_admin' } });
  await call(relay.baseUrl, 'PUT', '/users/update_role', { token: adminB, body: { email: 'viewer@org-b.test', role_name: 'saas_admin' } });
  await call(relay.baseUrl, 'PUT', '/users/update_role', { token: admin, body: { email: 'viewer@org-a.test', role_name: 'saas_viewer' } });
  const page = await call(relay.baseUrl, 'GET', '/audit/list?limit=2', { token: admin });
  assert.equal(page.status, 200);
  assert.ok(page.body.data.every((e: { organization_id: string }) => e.organization_id === 'org-a'));
  assert.deepEqual(page.body.data.map((e: { action: string; changes: unknown }) => [e.action, e.changes]), [
    ['role.update', { role_name: { before: 'saas_admin', after: 'saas_viewer' } }],
    ['role.update', { role_name: { before: 'saas_viewer', after: 'saas_admin' } }],
  ]);
  const rest = await call(relay.baseUrl, 'GET', `/audit/list?cursor=${page.body.next_cursor}`, { token: admin });
  assert.deepEqual(rest.body.data.map((e: { action: string }) => e.action), ['user.add', 'user.add', 'org.add']);
  assert.equal(rest.body.next_cursor, null);
  const b = await call(relay.baseUrl, 'GET', '/audit/list?action=role.update', { token: adminB });
  assert.deepEqual(b.body.data.map((e: { organization_id: string; target: string }) => [e.organization_id, e.target]), [['org-b', 'viewer@org-b.test']]);
  const refused = await call(relay.baseUrl, 'GET', '/audit/list', { token: viewer });
  assert.equal(refused.status, 403);
  assert.equal(refused.body.code, 'forbidden');
  assert.equal((await call(relay.baseUrl, 'GET', '/audit/list?since=yesterday', { token: admin })).status, 422);
});

/**
 * Who may do what, over real HTTP: every query is scoped to the caller's organization (an
 * admin of org A can neither read nor change anything of org B, and cannot tell B's users
 * from unknown ones), and permissions are denied by default (a viewer changes nothing).
 */
import assert from 'node:assert/strict';
import { test, type TestContext } from 'node:test';
import { assertProblem, assertUnchanged, call, roleOf, seedOrg, snapshot, startRelay, type ApiResponse, type RunningRelay } from '../helpers/helpers.ts';
import { BY_TEST } from '../helpers/audit-helpers.ts';

async function twoOrgs(t: TestContext) {
  const relay = await startRelay(t);
  const a = await seedOrg(relay.services, 'org-a');
  const b = await seedOrg(relay.services, 'org-b');
  const bAdminToken = relay.token('org-b', b.admin);
  const bWebhook = await call(relay.baseUrl, 'POST', '/webhook/register_webhook', { token: bAdminToken, body: { webhook_url: 'https://b.example.com/hook' } });
  assert.equal(bWebhook.status, 201);
  return { relay, a, b, aAdminToken: relay.token('org-a', a.admin), bAdminToken, bSecret: bWebhook.body.secret as string };
}

/** Rows of one organization, to show that what A did left B alone. */
function rowsOf(relay: RunningRelay, orgId: string) {
  const all = snapshot(relay.store);
  return {
    users: (all.users as Array<{ org_id: string }>).filter((row) => row.org_id === orgId),
    webhooks: (all.webhooks as Array<{ org_id: string }>).filter((row) => row.org_id === orgId),
  };
}

test('an admin of org A cannot read the webhook or the secret of org B', async (t) => {
  const { relay, aAdminToken, bSecret } = await twoOrgs(t);
  const view = await call(relay.baseUrl, 'GET', '/webhook/get_webhook', { token: aAdminToken });
  assertProblem(view, 404, 'webhook_not_configured');
  const secret = await call(relay.baseUrl, 'GET', '/webhook/get_secret', { token: aAdminToken });
  assertProblem(secret, 404, 'webhook_not_configured');
  for (const res of [view, secret]) {
    assert.equal(res.text.includes('b.example.com'), false);
    assert.equal(res.text.includes(bSecret), false);
    assert.equal(res.text.includes('org-b'), false);
  }

  // Once A has its own webhook, A sees A's, with A's own secret.
  const mine = await call(relay.baseUrl, 'POST', '/webhook/register_webhook', { token: aAdminToken, body: { webhook_url: 'https://a.example.com/hook' } });
  assert.equal(mine.status, 201, 'A registering its first webhook is a creation, not a replacement of B\'s');
  assert.notEqual(mine.body.secret, bSecret);
  const aView = await call(relay.baseUrl, 'GET', '/webhook/get_webhook', { token: aAdminToken });
  assert.equal(aView.body.webhook_url, 'https://a.example.com/hook');
  const aSecret = await call(relay.baseUrl, 'GET', '/webhook/get_secret', { token: aAdminToken });
  assert.deepEqual(aSecret.body, { secret: mine.body.secret });
});

test('an admin of org A registering or replacing a webhook leaves org B untouched', async (t) => {
  const { relay, aAdminToken, bAdminToken, bSecret } = await twoOrgs(t);
  const before = rowsOf(relay, 'org-b');
  for (const method of ['POST', 'PUT']) {
    const res = await call(relay.baseUrl, method, '/webhook/register_webhook', { token: aAdminToken, body: { webhook_url: `https://a.example.com/${method}` } });
    assert.equal(res.status, method === 'POST' ? 201 : 200, res.text);
  }
  assert.deepEqual(rowsOf(relay, 'org-b'), before);
  const bView = await call(relay.baseUrl, 'GET', '/webhook/get_webhook', { token: bAdminToken });
  assert.equal(bView.body.webhook_url, 'https://b.example.com/hook');
  const bStillSecret = await call(relay.baseUrl, 'GET', '/webhook/get_secret', { token: bAdminToken });
  assert.deepEqual(bStillSecret.body, { secret: bSecret });
});

test('update_role on a user of org B is a 404 indistinguishable from an unknown e-mail, and changes nothing', async (t) => {
  const { relay, a, b, aAdminToken } = await twoOrgs(t);
  const attempt = (email: string) =>
    assertUnchanged(relay.store, () => call(relay.baseUrl, 'PUT', '/users/update_role', { token: aAdminToken, body: { email, role_name: 'saas_admin' } }));
  /** The answer with the e-mail the client sent masked: what remains must not depend on whose e-mail it was. */
  const masked = (res: ApiResponse, email: string) => ({
    status: res.status,
    contentType: res.headers.get('content-type'),
    body: JSON.parse(res.text.replaceAll(email, '<email>')),
  });

  const unknown = await attempt('nobody@org-b.test');
  assertProblem(unknown, 404, 'user_not_found');
  for (const email of [b.viewer, b.admin]) {
    const foreign = await attempt(email);
    assertProblem(foreign, 404, 'user_not_found');
    assert.deepEqual(masked(foreign, email), masked(unknown, 'nobody@org-b.test'));
  }
  assert.equal(await roleOf(relay, 'org-b', b.viewer), 'saas_viewer');
  // And the same request for A's own viewer does go through (the 404 above is about scope, not the request).
  const own = await call(relay.baseUrl, 'PUT', '/users/update_role', { token: aAdminToken, body: { email: a.viewer, role_name: 'saas_admin' } });
  assert.equal(own.status, 200, own.text);
});

test('an e-mail registered in both organizations is changed only in the caller\'s', async (t) => {
  const { relay, aAdminToken } = await twoOrgs(t);
  const shared = 'shared@example.com';
  await relay.services.users.add(BY_TEST, { orgId: 'org-a', email: shared, roleName: 'saas_viewer' });
  await relay.services.users.add(BY_TEST, { orgId: 'org-b', email: shared, roleName: 'saas_viewer' });
  const before = rowsOf(relay, 'org-b');
  const res = await call(relay.baseUrl, 'PUT', '/users/update_role', { token: aAdminToken, body: { email: 'Shared@Example.com', role_name: 'saas_admin' } });
  assert.equal(res.status, 200, res.text);
  assert.equal(await roleOf(relay, 'org-a', shared), 'saas_admin');
  assert.equal(await roleOf(relay, 'org-b', shared), 'saas_viewer');
  assert.deepEqual(rowsOf(relay, 'org-b'), before);
});

test('the last user manager is counted per organization: admins of org B do not let A lose its only one', async (t) => {
  const { relay, a, aAdminToken } = await twoOrgs(t);
  await relay.services.users.add(BY_TEST, { orgId: 'org-b', email: 'second@org-b.test', roleName: 'saas_admin' });
  const res = await assertUnchanged(relay.store, () =>
    call(relay.baseUrl, 'PUT', '/users/update_role', { token: aAdminToken, body: { email: a.admin, role_name: 'saas_viewer' } }),
  );
  assertProblem(res, 409, 'last_user_manager');
});

test('a token naming org B for a user of org A is refused', async (t) => {
  const { relay, a, b } = await twoOrgs(t);
  const crossed = relay.sign({ sub: a.admin, org: 'org-b', exp: Math.floor(Date.now() / 1000) + 3600 });
  const res = await assertUnchanged(relay.store, () =>
    call(relay.baseUrl, 'PUT', '/users/update_role', { token: crossed, body: { email: b.viewer, role_name: 'saas_admin' } }),
  );
  assertProblem(res, 401, 'invalid_token');
  const read = await call(relay.baseUrl, 'GET', '/webhook/get_webhook', { token: crossed });
  assertProblem(read, 401, 'invalid_token');
  assert.equal(read.text.includes('b.example.com'), false);
});

test('a viewer cannot change roles nor the webhook nor read the secret (403), but may list roles and read the webhook', async (t) => {
  const { relay, b } = await twoOrgs(t);
  const viewerToken = relay.token('org-b', b.viewer);
  const refused: Array<{ method: string; path: string; body?: unknown }> = [
    { method: 'PUT', path: '/users/update_role', body: { email: b.viewer, role_name: 'saas_admin' } },
    { method: 'POST', path: '/users/update_role', body: { email: b.admin, role_name: 'saas_viewer' } },
    { method: 'PATCH', path: '/users/update_role', body: { email: b.viewer, role_name: 'saas_admin' } },
    { method: 'POST', path: '/webhook/register_webhook', body: { webhook_url: 'https://evil.example.com/hook' } },
    { method: 'PUT', path: '/webhook/register_webhook', body: { webhook_url: 'https://evil.example.com/hook', active_hmac: false } },
    { method: 'GET', path: '/webhook/get_secret' },
  ];
  for (const r of refused) {
    const res = await assertUnchanged(relay.store, () => call(relay.baseUrl, r.method, r.path, { token: viewerToken, ...(r.body ? { body: r.body } : {}) }));
    const body = assertProblem(res, 403, 'forbidden');
    assert.equal(body.title, 'Forbidden');
    assert.equal(res.headers.get('www-authenticate'), 'Bearer realm="hookrelay", error="insufficient_scope"');
    assert.equal(res.text.includes('whsec_'), false);
  }
  const roles = await call(relay.baseUrl, 'GET', '/users/get_roles', { token: viewerToken });
  assert.equal(roles.status, 200);
  const view = await call(relay.baseUrl, 'GET', '/webhook/get_webhook', { token: viewerToken });
  assert.equal(view.status, 200);
  assert.equal(view.body.webhook_url, 'https://b.example.com/hook');
});

test('a role without permissions may do nothing at all (deny by default)', async (t) => {
  const { relay } = await twoOrgs(t);
  await relay.services.roles.add(BY_TEST, { name: 'saas_nobody', description: 'no access', permissions: [] });
  await relay.services.users.add(BY_TEST, { orgId: 'org-b', email: 'nobody@org-b.test', roleName: 'saas_nobody' });
  const token = relay.token('org-b', 'nobody@org-b.test');
  for (const [method, path, permission] of [
    ['GET', '/users/get_roles', 'roles:read'],
    ['GET', '/webhook/get_webhook', 'webhook:read'],
    ['GET', '/webhook/get_secret', 'webhook:manage'],
  ] as const) {
    const res = await call(relay.baseUrl, method, path, { token });
    const body = assertProblem(res, 403, 'forbidden');
    assert.equal(body.detail, `Your role (saas_nobody) does not allow this operation; it needs the permission ${permission}`);
  }
});

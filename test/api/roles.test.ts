/**
 * GET /users/get_roles and PUT|POST|PATCH /users/update_role over real HTTP: the answers a
 * client relies on, every documented refusal, and that a refusal leaves the database untouched.
 */
import assert from 'node:assert/strict';
import { test, type TestContext } from 'node:test';
import { assertProblem, assertUnchanged, call, roleOf, seedOrg, startRelay } from '../helpers/helpers.ts';
import { BY_TEST } from '../helpers/audit-helpers.ts';

const BUILTIN_ROLES = [
  { name: 'saas_admin', description: 'read plus specific modifications for the associated SaaS', permissions: ['api_keys:manage', 'audit:read', 'roles:read', 'users:manage', 'webhook:manage', 'webhook:read'] },
  { name: 'saas_viewer', description: 'view-only access to the SaaS resources', permissions: ['roles:read', 'webhook:read'] },
];

async function setup(t: TestContext) {
  const relay = await startRelay(t);
  const users = await seedOrg(relay.services, 'org-a');
  return { relay, ...users, adminToken: relay.token('org-a', users.admin), viewerToken: relay.token('org-a', users.viewer) };
}

test('GET /users/get_roles returns exactly the seeded roles as [{ name, description, permissions }]', async (t) => {
  const { relay, adminToken } = await setup(t);
  const res = await call(relay.baseUrl, 'GET', '/users/get_roles', { token: adminToken, headers: { Version: 'v1' } });
  assert.equal(res.status, 200);
  assert.match(res.headers.get('content-type') ?? '', /^application\/json\b/);
  assert.equal(res.headers.get('version'), 'v1.0');
  assert.deepEqual(res.body, BUILTIN_ROLES);
});

test('GET /users/get_roles includes a role added by the operator, and a viewer may list roles', async (t) => {
  const { relay, viewerToken } = await setup(t);
  await relay.services.roles.add(BY_TEST, { name: 'saas_auditor', description: 'reads the webhook configuration', permissions: ['roles:read', 'webhook:read'] });
  const res = await call(relay.baseUrl, 'GET', '/users/get_roles', { token: viewerToken });
  assert.equal(res.status, 200);
  assert.deepEqual(
    res.body,
    [...BUILTIN_ROLES, { name: 'saas_auditor', description: 'reads the webhook configuration', permissions: ['roles:read', 'webhook:read'] }].sort((a, b) => a.name.localeCompare(b.name)),
  );
});

test('update_role changes the role with PUT, POST and PATCH and confirms it in a message', async (t) => {
  const { relay, adminToken, viewer } = await setup(t);
  const steps = [
    { method: 'PUT', role: 'saas_admin', from: 'saas_viewer' },
    { method: 'POST', role: 'saas_viewer', from: 'saas_admin' },
    { method: 'PATCH', role: 'saas_admin', from: 'saas_viewer' },
  ];
  for (const step of steps) {
    const res = await call(relay.baseUrl, step.method, '/users/update_role', {
      token: adminToken,
      headers: { Version: 'v1.2' },
      body: { email: viewer, role_name: step.role },
    });
    assert.equal(res.status, 200, `${step.method}: ${res.text}`);
    assert.equal(res.headers.get('version'), 'v1.2');
    assert.deepEqual(Object.keys(res.body), ['message']);
    assert.equal(res.body.message, `Role of ${viewer} updated from ${step.from} to ${step.role}`);
    assert.equal(await roleOf(relay, 'org-a', viewer), step.role);
  }
});

test('update_role compares the e-mail case-insensitively and changes the one existing user', async (t) => {
  const { relay, adminToken, viewer } = await setup(t);
  const usersBefore = (await relay.services.users.list('org-a')).length;
  const res = await call(relay.baseUrl, 'PUT', '/users/update_role', {
    token: adminToken,
    body: { email: `  ${viewer.toUpperCase()} `, role_name: 'saas_admin' },
  });
  assert.equal(res.status, 200, res.text);
  assert.equal(await roleOf(relay, 'org-a', viewer), 'saas_admin');
  assert.equal((await relay.services.users.list('org-a')).length, usersBefore);
});

test('update_role to the role the user already has says so and writes nothing', async (t) => {
  const { relay, adminToken, viewer } = await setup(t);
  const res = await assertUnchanged(relay.store, () =>
    call(relay.baseUrl, 'PUT', '/users/update_role', { token: adminToken, body: { email: viewer, role_name: 'saas_viewer' } }),
  );
  assert.equal(res.status, 200);
  assert.equal(res.body.message, `${viewer} already has the role saas_viewer; nothing changed`);
});

test('update_role with an unregistered e-mail is 404 user_not_found and changes nothing', async (t) => {
  const { relay, adminToken } = await setup(t);
  const res = await assertUnchanged(relay.store, () =>
    call(relay.baseUrl, 'PUT', '/users/update_role', { token: adminToken, body: { email: 'nobody@org-a.test', role_name: 'saas_admin' } }),
  );
  const body = assertProblem(res, 404, 'user_not_found');
  assert.equal(body.title, 'User not found');
  assert.deepEqual(body.invalid_params, [{ name: 'email', reason: 'is not the e-mail of a user of this organization' }]);
});

test('update_role with an unknown role_name is 422 role_not_found listing every valid name, operator roles included', async (t) => {
  const { relay, adminToken, viewer } = await setup(t);
  await relay.services.roles.add(BY_TEST, { name: 'saas_auditor', description: 'auditor', permissions: ['roles:read'] });
  for (const roleName of ['saas_owner', '', 'SAAS_ADMIN']) {
    const res = await assertUnchanged(relay.store, () =>
      call(relay.baseUrl, 'PUT', '/users/update_role', { token: adminToken, body: { email: viewer, role_name: roleName } }),
    );
    const body = assertProblem(res, 422, 'role_not_found');
    assert.deepEqual(body.valid_role_names, ['saas_admin', 'saas_auditor', 'saas_viewer']);
    assert.deepEqual(body.invalid_params, [{ name: 'role_name', reason: 'must be one of: saas_admin, saas_auditor, saas_viewer' }]);
    assert.match(body.detail, /valid roles: saas_admin, saas_auditor, saas_viewer/);
  }
  assert.equal(await roleOf(relay, 'org-a', viewer), 'saas_viewer');
});

test('update_role with missing or mistyped fields is 422 validation_failed naming each field', async (t) => {
  const { relay, adminToken, viewer } = await setup(t);
  const cases: Array<{ body: unknown; rawBody?: string; invalid: Array<{ name: string; reason: string }> }> = [
    {
      body: {},
      invalid: [
        { name: 'email', reason: 'is required' },
        { name: 'role_name', reason: 'is required' },
      ],
    },
    {
      body: undefined,
      rawBody: '',
      invalid: [
        { name: 'email', reason: 'is required' },
        { name: 'role_name', reason: 'is required' },
      ],
    },
    {
      body: { email: 42, role_name: true },
      invalid: [
        { name: 'email', reason: 'must be a string' },
        { name: 'role_name', reason: 'must be a string' },
      ],
    },
    { body: { email: null, role_name: 'saas_admin' }, invalid: [{ name: 'email', reason: 'is required' }] },
    { body: { email: viewer, role_name: ['saas_admin'] }, invalid: [{ name: 'role_name', reason: 'must be a string' }] },
    { body: { email: 'not an e-mail', role_name: 'saas_admin' }, invalid: [{ name: 'email', reason: 'must be an e-mail address such as ada@example.com' }] },
    { body: { email: '   ', role_name: 'saas_admin' }, invalid: [{ name: 'email', reason: 'must not be empty' }] },
  ];
  for (const c of cases) {
    const res = await assertUnchanged(relay.store, () =>
      call(relay.baseUrl, 'PUT', '/users/update_role', {
        token: adminToken,
        ...(c.rawBody !== undefined ? { rawBody: c.rawBody, headers: { 'content-type': 'application/json' } } : { body: c.body }),
      }),
    );
    const body = assertProblem(res, 422, 'validation_failed');
    assert.deepEqual(body.invalid_params, c.invalid, JSON.stringify(c.body));
  }
});

test('update_role that would leave the organization without a user manager is 409 and changes nothing', async (t) => {
  const { relay, admin, adminToken } = await setup(t);
  const res = await assertUnchanged(relay.store, () =>
    call(relay.baseUrl, 'PUT', '/users/update_role', { token: adminToken, body: { email: admin, role_name: 'saas_viewer' } }),
  );
  const body = assertProblem(res, 409, 'last_user_manager');
  assert.match(body.detail, /last user of organization "org-a" who can manage users/);

  // A role without users:manage is just as refused; with a second admin, the demotion goes through.
  await relay.services.roles.add(BY_TEST, { name: 'saas_auditor', description: 'auditor', permissions: ['roles:read', 'webhook:read'] });
  const toAuditor = await assertUnchanged(relay.store, () =>
    call(relay.baseUrl, 'PUT', '/users/update_role', { token: adminToken, body: { email: admin, role_name: 'saas_auditor' } }),
  );
  assertProblem(toAuditor, 409, 'last_user_manager');
  await relay.services.users.add(BY_TEST, { orgId: 'org-a', email: 'second-admin@org-a.test', roleName: 'saas_admin' });
  const demoted = await call(relay.baseUrl, 'PUT', '/users/update_role', { token: adminToken, body: { email: admin, role_name: 'saas_viewer' } });
  assert.equal(demoted.status, 200, demoted.text);
  assert.equal(await roleOf(relay, 'org-a', admin), 'saas_viewer');
});

test('a role change takes effect on the very next request made with the same token', async (t) => {
  const { relay, admin, adminToken, viewer, viewerToken } = await setup(t);
  const second = 'second-admin@org-a.test';
  await relay.services.users.add(BY_TEST, { orgId: 'org-a', email: second, roleName: 'saas_admin' });
  const secondToken = relay.token('org-a', second);

  // Promotion: the viewer's unchanged token may now register a webhook.
  const refused = await assertUnchanged(relay.store, () =>
    call(relay.baseUrl, 'POST', '/webhook/register_webhook', { token: viewerToken, body: { webhook_url: 'https://example.com/a' } }),
  );
  assertProblem(refused, 403, 'forbidden');
  const promote = await call(relay.baseUrl, 'PUT', '/users/update_role', { token: adminToken, body: { email: viewer, role_name: 'saas_admin' } });
  assert.equal(promote.status, 200, promote.text);
  const allowed = await call(relay.baseUrl, 'POST', '/webhook/register_webhook', { token: viewerToken, body: { webhook_url: 'https://example.com/a' } });
  assert.equal(allowed.status, 201, allowed.text);

  // Demotion: the demoted admin's unchanged token loses users:manage at once.
  const demote = await call(relay.baseUrl, 'PUT', '/users/update_role', { token: secondToken, body: { email: admin, role_name: 'saas_viewer' } });
  assert.equal(demote.status, 200, demote.text);
  const lost = await assertUnchanged(relay.store, () =>
    call(relay.baseUrl, 'PUT', '/users/update_role', { token: adminToken, body: { email: second, role_name: 'saas_viewer' } }),
  );
  const body = assertProblem(lost, 403, 'forbidden');
  assert.match(body.detail, /saas_viewer/);
  const stillReads = await call(relay.baseUrl, 'GET', '/users/get_roles', { token: adminToken });
  assert.equal(stillReads.status, 200);
});

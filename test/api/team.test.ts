/**
 * The team over real HTTP: GET /users/get_users, POST /users/add_user and POST /users/remove_user.
 * Each call is scoped to the token's organization (another organization's e-mail is 404 as an
 * unknown one), adding and removing need users:manage, removal keeps the last user who can
 * manage users as update_role does, and a refusal leaves the users as they were.
 */
import assert from 'node:assert/strict';
import { test, type TestContext } from 'node:test';
import { BY_TEST } from '../helpers/audit-helpers.ts';
import { assertProblem, call, seedOrg, snapshot, startRelay, type RunningRelay } from '../helpers/helpers.ts';

async function setup(t: TestContext) {
  const relay = await startRelay(t);
  const a = await seedOrg(relay.services, 'org-a');
  const b = await seedOrg(relay.services, 'org-b');
  return { relay, a, b, adminToken: relay.token('org-a', a.admin), viewerToken: relay.token('org-a', a.viewer), otherAdminToken: relay.token('org-b', b.admin) };
}

/**
 * The users of every organization (the audit trail records refused attempts: a refusal may add an
 * entry there, never change a user).
 */
function users(relay: RunningRelay): unknown[] {
  return snapshot(relay.store).users ?? [];
}

async function refusedWithoutChange(relay: RunningRelay, action: () => ReturnType<typeof call>) {
  const before = users(relay);
  const res = await action();
  assert.deepEqual(users(relay), before, 'a refused request changed the users');
  return res;
}

const ISO = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/;

test('GET /users/get_users lists the organization\'s users, sorted by e-mail, with their roles; a viewer may read it; another organization\'s are never listed', async (t) => {
  const { relay, a, adminToken, viewerToken, otherAdminToken } = await setup(t);
  await relay.services.users.add(BY_TEST, { orgId: 'org-a', email: 'Carol@org-a.test', roleName: 'saas_viewer' });
  for (const token of [adminToken, viewerToken]) {
    const res = await call(relay.baseUrl, 'GET', '/users/get_users', { token });
    assert.equal(res.status, 200, res.text);
    assert.match(res.headers.get('content-type') ?? '', /^application\/json\b/);
    assert.deepEqual(
      res.body.map((u: { email: string; role_name: string }) => [u.email, u.role_name]),
      [
        [a.admin, 'saas_admin'],
        ['Carol@org-a.test', 'saas_viewer'],
        [a.viewer, 'saas_viewer'],
      ],
    );
    for (const user of res.body) {
      assert.deepEqual(Object.keys(user), ['email', 'role_name', 'created_at', 'updated_at']);
      assert.match(user.created_at, ISO);
      assert.match(user.updated_at, ISO);
    }
  }
  const other = await call(relay.baseUrl, 'GET', '/users/get_users', { token: otherAdminToken });
  assert.deepEqual(
    other.body.map((u: { email: string }) => u.email),
    ['admin@org-b.test', 'viewer@org-b.test'],
  );
});

test('GET /users/get_roles says what each role permits', async (t) => {
  const { relay, viewerToken } = await setup(t);
  const res = await call(relay.baseUrl, 'GET', '/users/get_roles', { token: viewerToken });
  assert.equal(res.status, 200);
  const byName = Object.fromEntries(res.body.map((r: { name: string; permissions: string[] }) => [r.name, r.permissions]));
  assert.deepEqual(byName.saas_viewer, ['roles:read', 'webhook:read']);
  assert.ok(byName.saas_admin.includes('users:manage'));
});

test('POST /users/add_user adds a user with a role (201), who can then sign in; the same e-mail again, in any case, is 409 and changes nothing', async (t) => {
  const { relay, adminToken } = await setup(t);
  const res = await call(relay.baseUrl, 'POST', '/users/add_user', { token: adminToken, body: { email: '  dana@org-a.test ', role_name: 'saas_viewer' } });
  assert.equal(res.status, 201, res.text);
  assert.equal(res.body.message, 'dana@org-a.test added with the role saas_viewer');
  assert.equal(res.body.email, 'dana@org-a.test');
  assert.equal(res.body.role_name, 'saas_viewer');
  assert.match(res.body.created_at, ISO);
  const listed = await call(relay.baseUrl, 'GET', '/users/get_users', { token: adminToken });
  assert.ok(listed.body.some((u: { email: string; role_name: string }) => u.email === 'dana@org-a.test' && u.role_name === 'saas_viewer'));
  const asDana = await call(relay.baseUrl, 'GET', '/users/me', { token: relay.token('org-a', 'dana@org-a.test') });
  assert.equal(asDana.status, 200);
  assert.equal(asDana.body.role, 'saas_viewer');

  const again = await refusedWithoutChange(relay, () =>
    call(relay.baseUrl, 'POST', '/users/add_user', { token: adminToken, body: { email: 'DANA@org-a.test', role_name: 'saas_admin' } }),
  );
  assertProblem(again, 409, 'user_already_exists');
});

test('add_user of an e-mail another organization has adds a separate user in the caller\'s organization only', async (t) => {
  const { relay, b, adminToken, otherAdminToken } = await setup(t);
  const res = await call(relay.baseUrl, 'POST', '/users/add_user', { token: adminToken, body: { email: b.viewer, role_name: 'saas_admin' } });
  assert.equal(res.status, 201, res.text);
  const inB = await call(relay.baseUrl, 'GET', '/users/get_users', { token: otherAdminToken });
  assert.equal(inB.body.find((u: { email: string }) => u.email === b.viewer).role_name, 'saas_viewer', 'org-b\'s user is untouched');
});

test('POST /users/remove_user removes a user, whose token is refused at once', async (t) => {
  const { relay, a, adminToken, viewerToken } = await setup(t);
  const res = await call(relay.baseUrl, 'POST', '/users/remove_user', { token: adminToken, body: { email: a.viewer.toUpperCase() } });
  assert.equal(res.status, 200, res.text);
  assert.deepEqual(Object.keys(res.body), ['message']);
  assert.equal(res.body.message, `${a.viewer} removed (had the role saas_viewer); their tokens are refused from now on`);
  const listed = await call(relay.baseUrl, 'GET', '/users/get_users', { token: adminToken });
  assert.deepEqual(listed.body.map((u: { email: string }) => u.email), [a.admin]);
  assertProblem(await call(relay.baseUrl, 'GET', '/users/get_users', { token: viewerToken }), 401, 'invalid_token');
});

test('remove_user of the last user who can manage users is 409 last_user_manager and changes nothing; with a second admin it goes through, oneself included', async (t) => {
  const { relay, a, adminToken } = await setup(t);
  const refused = await refusedWithoutChange(relay, () => call(relay.baseUrl, 'POST', '/users/remove_user', { token: adminToken, body: { email: a.admin } }));
  const body = assertProblem(refused, 409, 'last_user_manager');
  assert.match(body.detail, /last user of organization "org-a" who can manage users/);

  await relay.services.users.add(BY_TEST, { orgId: 'org-a', email: 'second@org-a.test', roleName: 'saas_admin' });
  const removed = await call(relay.baseUrl, 'POST', '/users/remove_user', { token: adminToken, body: { email: a.admin } });
  assert.equal(removed.status, 200, removed.text);
  // The second admin is now the last one: guarded in turn.
  const last = await refusedWithoutChange(relay, () =>
    call(relay.baseUrl, 'POST', '/users/remove_user', { token: relay.token('org-a', 'second@org-a.test'), body: { email: 'second@org-a.test' } }),
  );
  assertProblem(last, 409, 'last_user_manager');
});

test('remove_user of an unknown e-mail, or of another organization\'s user, is the same 404 and changes nothing', async (t) => {
  const { relay, b, adminToken } = await setup(t);
  const answers = [];
  for (const email of ['nobody@org-a.test', b.admin, b.viewer]) {
    const res = await refusedWithoutChange(relay, () => call(relay.baseUrl, 'POST', '/users/remove_user', { token: adminToken, body: { email } }));
    const body = assertProblem(res, 404, 'user_not_found');
    assert.deepEqual(body.invalid_params, [{ name: 'email', reason: 'is not the e-mail of a user of this organization' }]);
    answers.push(body.detail.replace(email, 'EMAIL'));
  }
  assert.equal(new Set(answers).size, 1, `one answer for all: ${answers.join(' | ')}`);
});

test('a viewer may neither add nor remove a user: 403, before the body is read, nothing changed', async (t) => {
  const { relay, a, viewerToken } = await setup(t);
  const cases: Array<[string, unknown]> = [
    ['/users/add_user', { email: 'eve@org-a.test', role_name: 'saas_admin' }],
    ['/users/add_user', 'not json'],
    ['/users/remove_user', { email: a.admin }],
  ];
  for (const [path, body] of cases) {
    const res = await refusedWithoutChange(relay, () =>
      call(relay.baseUrl, 'POST', path, { token: viewerToken, ...(typeof body === 'string' ? { rawBody: body, headers: { 'content-type': 'application/json' } } : { body }) }),
    );
    assertProblem(res, 403, 'forbidden');
    assert.equal(res.headers.get('www-authenticate'), 'Bearer realm="hookrelay", error="insufficient_scope"');
  }
});

test('bad input is 422 naming each field, and changes nothing', async (t) => {
  const { relay, adminToken } = await setup(t);
  const cases: Array<{ path: string; body: unknown; code?: string; invalid: Array<{ name: string; reason: string }> }> = [
    { path: '/users/add_user', body: {}, invalid: [{ name: 'email', reason: 'is required' }, { name: 'role_name', reason: 'is required' }] },
    { path: '/users/add_user', body: { email: 42, role_name: ['saas_admin'] }, invalid: [{ name: 'email', reason: 'must be a string' }, { name: 'role_name', reason: 'must be a string' }] },
    { path: '/users/add_user', body: { email: 'not an e-mail', role_name: 'saas_admin' }, invalid: [{ name: 'email', reason: 'must be an e-mail address such as ada@example.com' }] },
    { path: '/users/add_user', body: { email: 'root@org-a.test', role_name: 'root' }, code: 'role_not_found', invalid: [{ name: 'role_name', reason: 'must be one of: saas_admin, saas_viewer' }] },
    { path: '/users/remove_user', body: {}, invalid: [{ name: 'email', reason: 'is required' }] },
    { path: '/users/remove_user', body: { email: '   ' }, invalid: [{ name: 'email', reason: 'must not be empty' }] },
    { path: '/users/remove_user', body: { email: `${'x'.repeat(400)}@org-a.test` }, invalid: [{ name: 'email', reason: 'must be at most 320 characters' }] },
  ];
  for (const c of cases) {
    const res = await refusedWithoutChange(relay, () => call(relay.baseUrl, 'POST', c.path, { token: adminToken, body: c.body }));
    const body = assertProblem(res, 422, c.code ?? 'validation_failed');
    assert.deepEqual(body.invalid_params, c.invalid, `${c.path} ${JSON.stringify(c.body)}`);
  }
});

test('each change of the team is one entry of the audit trail, with the caller as actor; a viewer\'s refused attempt is one too', async (t) => {
  const { relay, a, adminToken, viewerToken } = await setup(t);
  const since = new Date().toISOString();
  assert.equal((await call(relay.baseUrl, 'POST', '/users/add_user', { token: adminToken, body: { email: 'dana@org-a.test', role_name: 'saas_viewer' } })).status, 201);
  assert.equal((await call(relay.baseUrl, 'POST', '/users/remove_user', { token: adminToken, body: { email: 'dana@org-a.test' } })).status, 200);
  assert.equal((await call(relay.baseUrl, 'POST', '/users/remove_user', { token: viewerToken, body: { email: a.admin } })).status, 403);
  const res = await call(relay.baseUrl, 'GET', `/audit/list?since=${encodeURIComponent(since)}`, { token: adminToken });
  assert.equal(res.status, 200, res.text);
  const entries = res.body.data.map((e: { action: string; actor: { kind: string; name: string }; target: string; outcome: string }) => [e.action, e.actor.kind, e.actor.name, e.target, e.outcome]);
  assert.deepEqual(entries, [
    ['user.remove', 'api', a.viewer, null, 'denied'],
    ['user.remove', 'api', a.admin, 'dana@org-a.test', 'ok'],
    ['user.add', 'api', a.admin, 'dana@org-a.test', 'ok'],
  ]);
});

/**
 * API keys as an operator and a machine use them, with the built CLI and daemon: `api-key
 * create` prints the key once (and `--json`); the daemon accepts it as Bearer; `api-key list`
 * shows its prefix and last use, never the key; `api-key revoke` refuses it from the next
 * request on, while the daemon runs; the key is in no log line, no later output and no byte of
 * the database; each step is in the audit trail.
 */
import assert from 'node:assert/strict';
import { existsSync, readFileSync } from 'node:fs';
import { before, test } from 'node:test';
import { assertBuilt, databaseIn, migrateCli, runCli, scratchDir, spawnServe } from '../helpers/feed-helpers.ts';

before(assertBuilt);

test('create prints the key once; it works as Bearer until revoke, then not; it appears nowhere else', async (t) => {
  const dir = scratchDir(t, 'hookrelay-api-keys-');
  const common = ['--state-dir', dir];
  await migrateCli(t, common);
  for (const args of [['orgs', 'add', 'acme'], ['orgs', 'add', 'globex']]) assert.equal((await runCli(t, [...args, ...common])).code, 0);
  const daemon = await spawnServe(t, dir, []);

  const created = await runCli(t, ['api-key', 'create', '--org', 'acme', '--name', 'ci', '--role', 'saas_admin', '--expires', '30d', ...common]);
  assert.equal(created.code, 0, created.stderr);
  const key = created.stdout.split('\n')[0]!;
  assert.match(key, /^hkr_[0-9a-f]{8}_[A-Za-z0-9_-]{43}$/);
  assert.match(created.stdout, /not shown again/);
  const secret = key.slice(13);
  const json = await runCli(t, ['api-key', 'create', '--org', 'acme', '--name', 'viewer', '--role', 'saas_viewer', '--json', ...common]);
  const viewer = JSON.parse(json.stdout) as { key: string; prefix: string; expires_at: string | null };
  assert.equal(viewer.expires_at, null);
  assert.ok(viewer.key.startsWith(viewer.prefix));
  const bad = await runCli(t, ['api-key', 'create', '--org', 'acme', '--name', 'x', '--role', 'saas_viewer', '--expires', '400d', ...common]);
  assert.notEqual(bad.code, 0);
  assert.match(bad.stderr, /365d/);

  const get = (path: string, token: string) => fetch(daemon.baseUrl + path, { headers: { authorization: `Bearer ${token}` } });
  const me = await get('/users/me', key);
  assert.equal(me.status, 200);
  assert.equal(((await me.json()) as { organization_id: string }).organization_id, 'acme');
  const team = await fetch(`${daemon.baseUrl}/users/add_user`, {
    method: 'POST',
    headers: { authorization: `Bearer ${viewer.key}`, 'content-type': 'application/json' },
    body: JSON.stringify({ email: 'x@acme.test', role_name: 'saas_viewer' }),
  });
  assert.equal(team.status, 403, 'a viewer key cannot manage');

  const list = await runCli(t, ['api-key', 'list', '--org', 'acme', '--json', ...common]);
  const listed = JSON.parse(list.stdout) as Array<{ name: string; prefix: string; last_used_at: string | null }>;
  assert.deepEqual(listed.map((k) => k.name), ['ci', 'viewer']);
  assert.equal(listed[0]!.prefix, key.slice(0, 12));
  assert.notEqual(listed[0]!.last_used_at, null, 'its use is shown');
  assert.match((await runCli(t, ['api-key', 'list', '--org', 'acme', ...common])).stdout, /NAME\s+PREFIX/);
  assert.match((await runCli(t, ['api-key', 'list', '--org', 'globex', ...common])).stdout, /no API keys in globex/);
  assert.notEqual((await runCli(t, ['api-key', 'revoke', '--org', 'globex', 'ci', ...common])).code, 0, "another organization's key cannot be revoked");

  const revoked = await runCli(t, ['api-key', 'revoke', '--org', 'acme', 'ci', ...common]);
  assert.equal(revoked.code, 0, revoked.stderr);
  assert.equal((await get('/users/me', key)).status, 401, 'refused from the next request on, without a restart');

  const trail = await runCli(t, ['audit', 'list', '--json', ...common]);
  const actions = (JSON.parse(trail.stdout) as Array<{ action: string }>).map((e) => e.action);
  for (const action of ['api_key.create', 'api_key.revoke']) assert.ok(actions.includes(action), action);

  for (const text of [list.stdout, trail.stdout, revoked.stdout, daemon.stderr(), JSON.stringify(daemon.logRecords())]) assert.ok(!text.includes(secret));
  for (const path of [databaseIn(dir), `${databaseIn(dir)}-wal`]) {
    if (existsSync(path)) assert.equal(readFileSync(path).indexOf(secret), -1, `${path} holds the secret`);
  }
});

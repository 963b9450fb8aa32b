/**
 * E-mail matching (issue 11): one normalisation for addresses in tokens, the API and the CLI.
 * ASCII letters are case-folded, the rest compared after NFC, never through a compatibility or
 * case mapping of a non-ASCII character: a Kelvin sign (U+212A) is not a "k". Databases made
 * before keep their users, under the new keys.
 */
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { test } from 'node:test';
import { emailKey } from '../../src/domain/validation.ts';
import { openSqliteStore } from '../../src/store/sqlite/store.ts';
import { call, claimsFor, databaseAtVersion, seedOrg, startRelay, tempDir } from '../helpers/helpers.ts';
import { BY_TEST } from '../helpers/audit-helpers.ts';

const KELVIN = '\u212A';

test('emailKey: ASCII letters case-folded and the address trimmed; composed and decomposed forms equal; no other folding', () => {
  assert.equal(emailKey('  Ada.Lovelace@Example.COM '), 'ada.lovelace@example.com');
  assert.equal(emailKey('e\u0301mile@example.com'), emailKey('\u00e9mile@example.com'), 'NFC: é decomposed and composed');
  const different: Array<[string, string]> = [
    [`${KELVIN}ate@acme.test`, 'kate@acme.test'],
    [`${KELVIN}ATE@ACME.TEST`, 'kate@acme.test'],
    ['\u00c9mile@example.com', '\u00e9mile@example.com'],
    ['stra\u00dfe@example.com', 'strasse@example.com'],
    ['\u0130nci@example.com', 'inci@example.com'],
    ['\u017fam@example.com', 'sam@example.com'],
    ['\uff41da@example.com', 'ada@example.com'],
  ];
  for (const [a, b] of different) assert.notEqual(emailKey(a), emailKey(b), `${JSON.stringify(a)} must not match ${JSON.stringify(b)}`);
});

test('a Kelvin sign matches no user: not in update_role, not in a token; the ASCII spelling in any case does', async (t) => {
  const relay = await startRelay(t);
  const { admin } = await seedOrg(relay.services, 'acme');
  await relay.services.users.add(BY_TEST, { orgId: 'acme', email: 'kate@acme.test', roleName: 'saas_viewer' });
  const token = relay.token('acme', admin);

  const kelvin = await call(relay.baseUrl, 'PUT', '/users/update_role', { token, body: { email: `${KELVIN}ate@acme.test`, role_name: 'saas_admin' } });
  assert.equal(kelvin.status, 404, kelvin.text);
  assert.equal(kelvin.body.code, 'user_not_found');
  assert.equal((await relay.services.users.list('acme')).find((u) => u.email === 'kate@acme.test')?.roleName, 'saas_viewer');

  const ascii = await call(relay.baseUrl, 'PUT', '/users/update_role', { token, body: { email: 'KATE@Acme.Test', role_name: 'saas_admin' } });
  assert.equal(ascii.status, 200, ascii.text);

  const forged = relay.sign(claimsFor('acme', `${KELVIN}ate@acme.test`));
  const asKelvin = await call(relay.baseUrl, 'GET', '/webhook/get_webhook', { token: forged });
  assert.equal(asKelvin.status, 401, asKelvin.text);
  assert.equal(asKelvin.body.code, 'invalid_token');
  const asKate = await call(relay.baseUrl, 'GET', '/users/get_roles', { token: relay.sign(claimsFor('acme', 'Kate@ACME.test')) });
  assert.equal(asKate.status, 200, asKate.text);

  // A Kelvin-sign address is another user, who can be added next to kate.
  await relay.services.users.add(BY_TEST, { orgId: 'acme', email: `${KELVIN}ate@acme.test`, roleName: 'saas_viewer' });
  assert.equal((await relay.services.users.list('acme')).length, 4, 'admin, viewer, kate and the Kelvin-sign address');
});

test('a database made before keeps its users under the new keys: an address with non-ASCII capitals is found as written', async (t) => {
  const path = join(tempDir(t), 'hookrelay.db');
  const db = databaseAtVersion(path, 6);
  const insert = db.prepare("INSERT INTO users (org_id, email, email_key, role_name, created_at, updated_at) VALUES ('acme', ?, ?, 'saas_admin', 1, 1)");
  // The keys as hookrelay made them before: JavaScript's toLowerCase().
  for (const email of ['Ada@Acme.Test', '\u00c9mile@acme.test', `${KELVIN}elvin@acme.test`]) insert.run(email, email.toLowerCase());
  db.close();

  const store = openSqliteStore(path, { now: () => 10_000 });
  t.after(() => store.close());
  assert.equal(store.migrated.from, 6);
  const keys = store.db.prepare('SELECT email, email_key FROM users ORDER BY id').raw().all();
  assert.deepEqual(keys, [
    ['Ada@Acme.Test', 'ada@acme.test'],
    ['\u00c9mile@acme.test', '\u00c9mile@acme.test'],
    [`${KELVIN}elvin@acme.test`, 'Kelvin@acme.test'],
  ]);
  const find = (email: string) => store.read((tx) => tx.users.findByEmail('acme', emailKey(email)));
  assert.equal((await find('ADA@acme.test'))?.email, 'Ada@Acme.Test');
  assert.equal((await find('\u00c9mile@acme.test'))?.email, '\u00c9mile@acme.test');
  assert.equal(await find('kelvin@acme.test'), null, 'the Kelvin sign no longer matches k');
});

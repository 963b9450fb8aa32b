/**
 * The audit trail on both backends: every change of the services leaves exactly one entry with
 * its actor; no secret reaches an entry; `verify` finds an entry edited, removed or inserted
 * directly in the database, names it, and a log copy catches a chain recomputed by someone
 * with the database alone; pruning keeps the chain verifiable from its anchor.
 */
import assert from 'node:assert/strict';
import { after, describe, test, type TestContext } from 'node:test';
import { Writable } from 'node:stream';
import { loadConfig } from '../../src/config/load.ts';
import { ActorKind, entryHash, GENESIS_HASH, type AuditContext, type AuditEntry } from '../../src/domain/audit.ts';
import { createLogger } from '../../src/log.ts';
import { createServices, type Services } from '../../src/services/services.ts';
import { auditLine } from '../../src/services/audit.ts';
import { readLogCopy } from '../../src/cli/audit.ts';
import { STORE_BACKENDS, type Opened } from '../helpers/store-backends.ts';
import { stopPgServer } from '../helpers/pg-harness.ts';
import { tempDir } from '../helpers/helpers.ts';

after(stopPgServer);

const CLI: AuditContext = { actor: { kind: ActorKind.cli, name: 'ops', orgId: null }, requestId: null, source: null };
const API: AuditContext = { actor: { kind: ActorKind.api, name: 'admin@acme.test', orgId: 'acme' }, requestId: 'req-1', source: '192.0.2.7' };
const HEADER_SECRET = 'Bearer hdr-s3cret-value-0123456789';

function servicesOver(t: TestContext, opened: Opened, lines?: string[]): Services {
  const config = loadConfig({ env: {}, overrides: { stateDir: tempDir(t), 'delivery.allowNetworks': '127.0.0.0/8' } });
  const sink = new Writable({
    write: (chunk, _enc, done) => {
      lines?.push(String(chunk));
      done();
    },
  });
  return createServices(opened.store, config, createLogger('info', sink));
}

async function entries(opened: Opened): Promise<AuditEntry[]> {
  return opened.store.read((tx) => tx.audit.after(0, 10_000));
}

/** Every change the services make, once each, with the secrets it handles; returns those secrets. */
async function everyChange(s: Services): Promise<string[]> {
  await s.orgs.add(CLI, { id: 'acme' });
  await s.roles.add(CLI, { name: 'auditor', description: 'reads', permissions: ['audit:read'] });
  await s.users.add(CLI, { orgId: 'acme', email: 'admin@acme.test', roleName: 'saas_admin' });
  await s.users.add(API, { orgId: 'acme', email: 'bob@acme.test', roleName: 'saas_viewer' });
  await s.users.setRole(API, 'acme', { email: 'bob@acme.test', role_name: 'saas_admin' });
  const registered = await s.webhooks.register(API, 'acme', { webhook_url: 'https://127.0.0.1:9/in?token=url-s3cret', headers: { Authorization: HEADER_SECRET, 'X-Env': 'prod' } });
  await s.webhooks.register(API, 'acme', { webhook_url: 'https://127.0.0.1:9/other', headers: { 'X-Env': 'staging' }, rate_limit: 5 });
  const rotated = await s.webhooks.rotateSecret(API, 'acme');
  await s.webhooks.setEnabled(API, 'acme', false);
  await s.webhooks.setEnabled(API, 'acme', true);
  const test = await s.deliveryLog.sendTest(API, 'acme');
  await s.deliveryLog.recover(API, 'acme', 0);
  await s.users.remove(API, 'acme', 'bob@acme.test');
  void test;
  return [registered.newSecret!, rotated.secret, HEADER_SECRET, 'hdr-s3cret', 'url-s3cret'];
}

const ACTIONS = [
  'org.add',
  'role.add',
  'user.add',
  'user.add',
  'role.update',
  'webhook.register',
  'webhook.replace',
  'webhook.secret_rotate',
  'webhook.disable',
  'webhook.enable',
  'webhook.test',
  'webhook.recover',
  'user.remove',
];

/** Runs `sql` on the database behind the store (an attacker with the database). */
async function tamper(opened: Opened, sql: string): Promise<void> {
  await opened.exec(sql);
}

for (const backend of STORE_BACKENDS) {
  describe(`audit trail on ${backend.name}`, () => {
    test('every change leaves exactly one entry, with its actor and what changed, and nothing secret', async (t) => {
      const opened = await backend.open(t);
      const lines: string[] = [];
      const s = servicesOver(t, opened, lines);
      const secrets = await everyChange(s);
      const all = await entries(opened);
      assert.deepEqual(all.map((e) => e.action), ACTIONS);
      assert.deepEqual(all.map((e) => e.id), ACTIONS.map((_, i) => i + 1));
      assert.ok(all.every((e) => e.outcome === 'ok' && e.code === null));
      assert.deepEqual(all.slice(0, 3).map((e) => [e.actorKind, e.actorName, e.actorOrg, e.source]), Array(3).fill(['cli', 'ops', null, null]));
      assert.deepEqual(all.slice(3).map((e) => [e.actorKind, e.actorName, e.actorOrg, e.requestId, e.source]), Array(ACTIONS.length - 3).fill(['api', 'admin@acme.test', 'acme', 'req-1', '192.0.2.7']));
      const roleUpdate = all[4]!;
      assert.equal(roleUpdate.target, 'bob@acme.test');
      assert.deepEqual(JSON.parse(roleUpdate.changes!), { role_name: { before: 'saas_viewer', after: 'saas_admin' } });
      const replaced = JSON.parse(all[6]!.changes!);
      assert.deepEqual(replaced.url, { before: 'https://127.0.0.1:9', after: 'https://127.0.0.1:9', changed: true });
      assert.deepEqual(replaced.headers, { Authorization: { set_before: true, set_after: false, changed: true }, 'X-Env': { before: 'prod', after: 'staging' } });
      assert.deepEqual(replaced.rate_limit, { before: null, after: 5 });
      assert.deepEqual(JSON.parse(all[5]!.changes!).secret, { changed: true });
      const text = JSON.stringify(all);
      for (const secret of secrets) assert.ok(!text.includes(secret), `an entry holds ${secret.slice(0, 6)}...`);
      for (const secret of secrets) assert.ok(!lines.join('').includes(secret), 'a log line holds a secret');
      assert.equal((await s.audit.verify()).broken, null);
    });

    test('a refused change is one failed entry with its code; the change it refused is not there', async (t) => {
      const opened = await backend.open(t);
      const s = servicesOver(t, opened);
      await s.orgs.add(CLI, { id: 'acme' });
      await s.users.add(CLI, { orgId: 'acme', email: 'admin@acme.test', roleName: 'saas_admin' });
      await assert.rejects(s.users.setRole(API, 'acme', { email: 'admin@acme.test', role_name: 'saas_viewer' }), { code: 'last_user_manager' });
      await assert.rejects(s.users.add(API, { orgId: 'acme', email: 'admin@acme.test', roleName: 'saas_admin' }), { code: 'user_already_exists' });
      const all = await entries(opened);
      assert.deepEqual(all.map((e) => [e.action, e.outcome, e.code]), [
        ['org.add', 'ok', null],
        ['user.add', 'ok', null],
        ['role.update', 'failed', 'last_user_manager'],
        ['user.add', 'failed', 'user_already_exists'],
      ]);
      assert.equal((await s.audit.verify()).broken, null);
    });

    test('verify names the entry edited, removed or inserted directly in the database', async (t) => {
      const opened = await backend.open(t);
      const s = servicesOver(t, opened);
      await everyChange(s);
      const ok = await s.audit.verify();
      assert.deepEqual([ok.broken, ok.checked, ok.firstId, ok.lastId], [null, ACTIONS.length, 1, ACTIONS.length]);

      await tamper(opened, "UPDATE audit_entries SET target = 'mallory@acme.test' WHERE id = 5");
      assert.deepEqual((await s.audit.verify()).broken, { id: 5, kind: 'edited', detail: "entry 5's fields do not match its hash: edited" });
      const five = (await entries(opened))[4]!;
      await tamper(opened, `UPDATE audit_entries SET target = 'bob@acme.test' WHERE id = 5`);
      assert.equal((await s.audit.verify()).broken, null, 'put back as it was: whole again');
      void five;

      await tamper(opened, 'DELETE FROM audit_entries WHERE id = 7');
      assert.equal((await s.audit.verify()).broken?.id, 7);
      assert.equal((await s.audit.verify()).broken?.kind, 'removed');
    });

    test('an entry inserted out of order (its own hash right, its link wrong) is named', async (t) => {
      const opened = await backend.open(t);
      const s = servicesOver(t, opened);
      await everyChange(s);
      // Moves entry 13 away and puts a forged one in its place, hashed over the wrong predecessor.
      const forged = { ...(await entries(opened))[12]!, target: 'forged@acme.test', prevHash: GENESIS_HASH };
      const hash = entryHash({ ...forged });
      await tamper(opened, `UPDATE audit_entries SET target = '${forged.target}', prev_hash = '${GENESIS_HASH}', hash = '${hash}' WHERE id = 13`);
      const broken = (await s.audit.verify()).broken;
      assert.equal(broken?.id, 13);
      assert.equal(broken?.kind, 'out_of_order');
    });

    test('a chain recomputed by someone with the database passes alone, and fails against the log copy', async (t) => {
      const opened = await backend.open(t);
      const lines: string[] = [];
      const s = servicesOver(t, opened, lines);
      await everyChange(s);
      const copy = (await entries(opened)).map((e) => JSON.stringify({ level: 30, subsystem: 'audit', audit: auditLine(e) })).join('\n');
      // The attacker edits entry 6 and recomputes every hash from there.
      const all = await entries(opened);
      let prev = all[4]!.hash;
      for (const e of all.slice(5)) {
        const edited = { ...e, target: e.id === 6 ? 'evil' : e.target, prevHash: prev };
        const { hash: _old, ...unhashed } = edited;
        prev = entryHash(unhashed);
        await tamper(opened, `UPDATE audit_entries SET target = ${edited.target === null ? 'NULL' : `'${edited.target}'`}, prev_hash = '${edited.prevHash}', hash = '${prev}' WHERE id = ${e.id}`);
      }
      assert.equal((await s.audit.verify()).broken, null, 'the database alone cannot tell');
      const logged = readLogCopy(copy);
      const mismatch = (await entries(opened)).find((e) => logged.get(e.id)?.hash !== e.hash);
      assert.equal(mismatch?.id, 6);
    });

    test('pruning cuts the oldest entries behind an anchor; the chain still verifies, and a further cut is caught', async (t) => {
      const opened = await backend.open(t);
      const s = servicesOver(t, opened);
      await everyChange(s);
      const cutAt = (await entries(opened))[5]!.at;
      const removed = await s.audit.prune(CLI, cutAt + 1, 3);
      assert.ok(removed > 0);
      const left = await entries(opened);
      const anchor = left[left.length - 1]!;
      assert.equal(anchor.action, 'audit.prune');
      const cut = JSON.parse(anchor.changes!);
      assert.equal(left[0]!.id, cut.first_kept_id);
      const r = await s.audit.verify();
      assert.deepEqual([r.broken, r.anchorId, r.firstId], [null, anchor.id, cut.first_kept_id]);
      await tamper(opened, `DELETE FROM audit_entries WHERE id = ${cut.first_kept_id}`);
      assert.deepEqual((await s.audit.verify()).broken?.id, cut.first_kept_id);
    });
  });
}

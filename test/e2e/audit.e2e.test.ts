/**
 * The audit trail from the built CLI, as an operator uses it: changes made with the CLI are
 * entries of the Unix user (actor `cli`), token issuing included, never the token; `audit
 * list --json` shows them; `audit verify` passes, then exits 1 naming the entry edited, removed
 * or inserted in the database file; `--against` a log copy catches a chain recomputed from the
 * database alone.
 */
import assert from 'node:assert/strict';
import { writeFileSync } from 'node:fs';
import { userInfo } from 'node:os';
import { join } from 'node:path';
import { before, test, type TestContext } from 'node:test';
import Database from 'better-sqlite3';
import { entryHash, type AuditEntry } from '../../src/domain/audit.ts';
import { toAuditEntry, type AuditRow } from '../../src/store/audit-sql.ts';
import { assertBuilt, databaseIn, migrateCli, runCli, scratchDir } from '../helpers/feed-helpers.ts';

before(assertBuilt);

async function install(t: TestContext): Promise<{ dir: string; common: string[] }> {
  const dir = scratchDir(t, 'hookrelay-audit-');
  const common = ['--state-dir', dir];
  await migrateCli(t, common);
  for (const args of [
    ['orgs', 'add', 'acme'],
    ['users', 'add', '--org', 'acme', '--email', 'admin@acme.test', '--role', 'saas_admin'],
    ['users', 'add', '--org', 'acme', '--email', 'bob@acme.test', '--role', 'saas_viewer'],
    ['users', 'set-role', '--org', 'acme', '--email', 'bob@acme.test', '--role', 'saas_admin'],
  ]) {
    const r = await runCli(t, [...args, ...common]);
    assert.equal(r.code, 0, r.stderr);
  }
  return { dir, common };
}

function rows(dir: string): AuditEntry[] {
  const db = new Database(databaseIn(dir), { readonly: true });
  try {
    return (db.prepare('SELECT * FROM audit_entries ORDER BY id').all() as AuditRow[]).map(toAuditEntry);
  } finally {
    db.close();
  }
}

function exec(dir: string, sql: string): void {
  const db = new Database(databaseIn(dir));
  try {
    db.exec(sql);
  } finally {
    db.close();
  }
}

test('CLI changes are entries of the Unix user; a token issued is recorded, never the token; audit list shows them', async (t) => {
  const { dir, common } = await install(t);
  const token = await runCli(t, ['token', 'issue', '--org', 'acme', '--email', 'bob@acme.test', ...common]);
  assert.equal(token.code, 0, token.stderr);
  const list = await runCli(t, ['audit', 'list', '--json', ...common]);
  assert.equal(list.code, 0, list.stderr);
  const entries = JSON.parse(list.stdout) as Array<{ action: string; actor_kind: string; actor_name: string; changes: string | null }>;
  assert.deepEqual(entries.map((e) => e.action), ['org.add', 'user.add', 'user.add', 'role.update', 'token.issue']);
  assert.ok(entries.every((e) => e.actor_kind === 'cli' && e.actor_name === userInfo().username));
  assert.ok(!list.stdout.includes(token.stdout.trim()), 'the token is not in the trail');
  assert.ok(!JSON.stringify(rows(dir)).includes(token.stdout.trim()));
  const filtered = await runCli(t, ['audit', 'list', '--json', '--action', 'role.update', ...common]);
  assert.deepEqual(JSON.parse(filtered.stdout).map((e: { target: string }) => e.target), ['bob@acme.test']);
});

test('audit verify passes, then exits 1 naming the entry edited, removed or inserted', async (t) => {
  const { dir, common } = await install(t);
  const ok = await runCli(t, ['audit', 'verify', ...common]);
  assert.equal(ok.code, 0, ok.stderr);
  assert.match(ok.stdout, /audit trail ok: 4 entries checked/);

  exec(dir, "UPDATE audit_entries SET target = 'mallory@acme.test' WHERE id = 2");
  const edited = await runCli(t, ['audit', 'verify', ...common]);
  assert.equal(edited.code, 1);
  assert.match(edited.stdout, /BROKEN at entry 2: entry 2's fields do not match its hash: edited/);
  exec(dir, "UPDATE audit_entries SET target = 'admin@acme.test' WHERE id = 2");

  const [, , third] = rows(dir) as [AuditEntry, AuditEntry, AuditEntry];
  exec(dir, 'DELETE FROM audit_entries WHERE id = 3');
  const removed = await runCli(t, ['audit', 'verify', '--json', ...common]);
  assert.equal(removed.code, 1);
  assert.deepEqual(JSON.parse(removed.stdout).broken.id, 3);

  // Inserted in its place: a well-formed entry of its own, hashed over a predecessor it does not follow.
  const forged = { ...third, target: 'forged@acme.test', prevHash: third.hash };
  const { hash: _h, ...unhashed } = forged;
  const hash = entryHash(unhashed);
  exec(dir, `INSERT INTO audit_entries SELECT id, at, actor_kind, actor_name, actor_org, action, org_id, 'forged@acme.test', changes, request_id, source, outcome, code, '${forged.prevHash}', '${hash}' FROM (SELECT ${third.id} AS id, ${third.at} AS at, '${third.actorKind}' AS actor_kind, '${third.actorName}' AS actor_name, NULL AS actor_org, '${third.action}' AS action, '${third.orgId}' AS org_id, '${third.changes}' AS changes, NULL AS request_id, NULL AS source, 'ok' AS outcome, NULL AS code)`);
  const inserted = await runCli(t, ['audit', 'verify', ...common]);
  assert.equal(inserted.code, 1);
  assert.match(inserted.stdout, /BROKEN at entry 3: .*inserted, replaced or out of order/);
});

test('a chain recomputed from the database alone verifies, and fails --against a copy of the log', async (t) => {
  const { dir, common } = await install(t);
  const copy = join(dir, 'journal.jsonl');
  const lines = rows(dir).map((e) => `<6>${JSON.stringify({ level: 30, subsystem: 'audit', audit: { id: e.id, hash: e.hash } })}`);
  writeFileSync(copy, ['{"level":30,"msg":"request"}', ...lines, 'not json'].join('\n'));
  assert.equal((await runCli(t, ['audit', 'verify', '--against', copy, ...common])).code, 0);
  // Entry 2 edited, every hash from there recomputed.
  let prev = rows(dir)[0]!.hash;
  for (const e of rows(dir).slice(1)) {
    const { hash: _old, ...unhashed } = { ...e, target: e.id === 2 ? 'evil@acme.test' : e.target, prevHash: prev };
    prev = entryHash(unhashed);
    exec(dir, `UPDATE audit_entries SET target = '${unhashed.target}', prev_hash = '${unhashed.prevHash}', hash = '${prev}' WHERE id = ${e.id}`);
  }
  assert.equal((await runCli(t, ['audit', 'verify', ...common])).code, 0, 'the database alone cannot tell');
  const against = await runCli(t, ['audit', 'verify', '--against', copy, ...common]);
  assert.equal(against.code, 1);
  assert.match(against.stdout, /BROKEN at entry 2: entry 2 differs from the log copy/);
  // The last entry removed (the chain stays whole): the log copy still has it.
  exec(dir, 'DELETE FROM audit_entries WHERE id = 4');
  const tail = await runCli(t, ['audit', 'verify', '--json', '--against', copy, ...common]);
  assert.equal(tail.code, 1);
});

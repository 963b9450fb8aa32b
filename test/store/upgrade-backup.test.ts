/**
 * The copy taken before an upgrade (store/sqlite/upgrade-backup.ts): taken when an older schema
 * is migrated or a newer hookrelay first opens the database, kept to the last N, private; and
 * the refusal of a database a newer hookrelay wrote, naming both versions and the copy to restore.
 */
import assert from 'node:assert/strict';
import { readdirSync, statSync } from 'node:fs';
import { join } from 'node:path';
import test from 'node:test';
import Database from 'better-sqlite3';
import { migrate, openDatabase, SCHEMA_VERSION } from '../../src/store/sqlite/connection.ts';
import { backupDirectory, compareVersions, newestUsableBackup } from '../../src/store/sqlite/upgrade-backup.ts';
import { VERSION } from '../../src/version.ts';
import { databaseAtVersion, tempDir } from '../helpers/helpers.ts';

function backupsOf(dbPath: string): string[] {
  try {
    return readdirSync(backupDirectory(dbPath)).sort();
  } catch {
    return [];
  }
}

test('versions are ordered by their numbers, a pre-release before its release', () => {
  assert.ok(compareVersions('0.1.0', '0.2.0') < 0);
  assert.ok(compareVersions('0.10.0', '0.9.9') > 0);
  assert.ok(compareVersions('1.0.0-rc.1', '1.0.0') < 0);
  assert.equal(compareVersions('1.2.3', '1.2.3'), 0);
});

test('a database at an older schema is copied before it is migrated: the copy holds the old schema and every row, private, in <dir>/backups', (t) => {
  const path = join(tempDir(t), 'hookrelay.db');
  databaseAtVersion(path, 12, 'whsec_old').close();

  const { db, migrated } = openDatabase(path);
  t.after(() => db.close());
  assert.equal(migrated.from, 12);
  assert.equal(migrated.to, SCHEMA_VERSION);
  assert.ok(migrated.backup, 'a pre-upgrade copy');
  assert.match(migrated.backup, /backups\/pre-upgrade-\d{8}T\d{6}Z-schema12-unknown\.db$/);
  assert.equal(statSync(backupDirectory(path)).mode & 0o777, 0o700);
  assert.equal(statSync(migrated.backup).mode & 0o777, 0o600);

  const copy = new Database(migrated.backup, { readonly: true });
  t.after(() => copy.close());
  assert.equal(copy.pragma('user_version', { simple: true }), 12);
  assert.equal(copy.prepare('SELECT secret FROM webhooks').pluck().get(), 'whsec_old');
  // The migrated database records this version as the newest that opened it.
  assert.equal(db.prepare("SELECT value FROM hookrelay_meta WHERE key = 'hookrelay_version'").pluck().get(), VERSION);
});

test('a new database, and a reopening by the same version, take no copy', (t) => {
  const path = join(tempDir(t), 'hookrelay.db');
  const first = openDatabase(path);
  assert.equal(first.migrated.backup, null);
  first.db.close();
  const again = openDatabase(path);
  assert.equal(again.migrated.backup, null);
  again.db.close();
  assert.deepEqual(backupsOf(path), []);
});

test('a newer hookrelay at the same schema copies the database once; an older one opening it after takes no copy and does not lower the recorded version', (t) => {
  const path = join(tempDir(t), 'hookrelay.db');
  const db = openDatabase(path, { preUpgradeBackups: 3 }).db;
  const recorded = () => db.prepare("SELECT value FROM hookrelay_meta WHERE key = 'hookrelay_version'").pluck().get();

  const upgraded = migrate(db, { version: '99.0.0', preUpgradeBackups: 3 });
  assert.match(upgraded.backup ?? '', new RegExp(`schema${SCHEMA_VERSION}-${VERSION.replace(/\./g, '\\.')}\\.db$`));
  assert.equal(recorded(), '99.0.0');
  assert.equal(migrate(db, { version: '99.0.0', preUpgradeBackups: 3 }).backup, null, 'the same version again');
  assert.equal(migrate(db, { version: '98.0.0', preUpgradeBackups: 3 }).backup, null, 'an older version');
  assert.equal(recorded(), '99.0.0');
  db.close();
});

test('only the last N pre-upgrade copies are kept; 0 takes none', (t) => {
  const path = join(tempDir(t), 'hookrelay.db');
  const db = openDatabase(path).db;
  t.after(() => db.close());
  const taken: string[] = [];
  for (const [i, version] of ['90.0.0', '91.0.0', '92.0.0', '93.0.0'].entries()) {
    // One second apart in their names: copies taken within a second would share a name.
    db.prepare("UPDATE hookrelay_meta SET value = ? WHERE key = 'hookrelay_version'").run(`${89 + i}.0.0`);
    const before = backupsOf(path);
    const { backup } = migrate(db, { version, preUpgradeBackups: 2 });
    assert.ok(backup);
    taken.push(backup);
    assert.ok(!before.includes(backup.split('/').at(-1)!));
    if (i < 3) Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 1100);
  }
  assert.deepEqual(
    backupsOf(path).map((name) => join(backupDirectory(path), name)),
    taken.slice(-2),
  );
  assert.equal(migrate(db, { version: '94.0.0', preUpgradeBackups: 0 }).backup, null);
  assert.equal(backupsOf(path).length, 2);
});

test('a database a newer hookrelay wrote is refused in one line naming both versions, both schemas and the pre-upgrade copy to restore; nothing is changed', (t) => {
  const path = join(tempDir(t), 'hookrelay.db');
  databaseAtVersion(path, 12).close();
  const { db, migrated } = openDatabase(path);
  // What a future hookrelay would leave: a higher schema, its version recorded.
  db.prepare("UPDATE hookrelay_meta SET value = '9.9.9' WHERE key = 'hookrelay_version'").run();
  db.pragma(`user_version = ${SCHEMA_VERSION + 1}`);
  db.close();

  let message = '';
  assert.throws(
    () => openDatabase(path),
    (err: Error & { code?: string }) => {
      message = err.message;
      return err.code === 'database_too_new';
    },
  );
  assert.ok(!message.includes('\n'), message);
  assert.match(message, new RegExp(`schema version ${SCHEMA_VERSION + 1}, written by hookrelay 9\\.9\\.9`));
  assert.match(message, new RegExp(`this hookrelay ${VERSION.replace(/\./g, '\\.')} understands \\(schema ${SCHEMA_VERSION}\\)`));
  assert.ok(message.includes(`restore the pre-upgrade backup ${migrated.backup}`), message);
  assert.equal(newestUsableBackup(path, SCHEMA_VERSION), migrated.backup);
  const after = new Database(path, { readonly: true });
  t.after(() => after.close());
  assert.equal(after.pragma('user_version', { simple: true }), SCHEMA_VERSION + 1);
  assert.equal(backupsOf(path).length, 1, 'no copy taken of a database it refuses');
});

/**
 * The copy taken before an upgrade touches the database, and the refusal of a database a newer
 * hookrelay wrote.
 *
 * When a hookrelay opens a database that an older one wrote (pending migrations, or a newer
 * version than any that opened it before, recorded in hookrelay_meta), it first copies it with
 * `VACUUM INTO` to `<database directory>/backups/pre-upgrade-<UTC time>-schema<N>-<version>.db`
 * and keeps the last few such copies. Going back to the older version is then: stop, restore that
 * file, install the older version (docs/operations.md, "Roll back").
 */
import { chmodSync, closeSync, fsyncSync, mkdirSync, openSync, readdirSync, renameSync, rmSync } from 'node:fs';
import { basename, dirname, join } from 'node:path';
import { ErrorCode, HookrelayError } from '../../domain/errors.ts';
import type Database from 'better-sqlite3';

/** connection.ts's Db, named here without importing it (connection.ts imports this file). */
type Db = Database.Database;

/** The schema version that created hookrelay_meta. */
const META_SCHEMA = 13;
const VERSION_KEY = 'hookrelay_version';
const PREFIX = 'pre-upgrade-';
/** pre-upgrade-20261128T221500Z-schema12-0.1.0.db */
const NAME = /^pre-upgrade-(\d{8}T\d{6}Z)-schema(\d+)-([0-9A-Za-z.+-]+)\.db$/;

/** Pre-upgrade copies kept when the configuration does not say (database.preUpgradeBackups). */
export const DEFAULT_PRE_UPGRADE_BACKUPS = 3;

export interface UpgradeCheck {
  /** The version of hookrelay opening the database. */
  readonly version: string;
  /** Pre-upgrade copies to keep; 0 takes none. */
  readonly keep: number;
}

/** The directory the pre-upgrade copies of the database at `dbPath` go to. */
export function backupDirectory(dbPath: string): string {
  return join(dirname(dbPath), 'backups');
}

/** The newest hookrelay version recorded as having opened `db`, or null (none recorded, or a schema before 13). */
export function recordedVersion(db: Db, schema: number): string | null {
  if (schema < META_SCHEMA) return null;
  const row = db.prepare('SELECT value FROM hookrelay_meta WHERE key = ?').get(VERSION_KEY) as { value: string } | undefined;
  return row?.value ?? null;
}

/** Records `version` as the newest that opened `db`, unless a newer one is recorded already. Inside the migration's transaction. */
export function recordVersion(db: Db, version: string): void {
  const current = recordedVersion(db, META_SCHEMA);
  if (current !== null && compareVersions(current, version) >= 0) return;
  db.prepare('INSERT INTO hookrelay_meta (key, value) VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value').run(VERSION_KEY, version);
}

/**
 * Orders two versions such as 0.1.0, 0.10.2 or 1.0.0-rc.1 by their numeric parts (a pre-release
 * suffix sorts before the release). Negative when `a` is older.
 */
export function compareVersions(a: string, b: string): number {
  const parse = (v: string) => {
    const [core = '', pre] = v.split('-', 2);
    return { parts: core.split('.').map((n) => Number.parseInt(n, 10) || 0), pre: pre ?? null };
  };
  const x = parse(a);
  const y = parse(b);
  for (let i = 0; i < Math.max(x.parts.length, y.parts.length); i++) {
    const d = (x.parts[i] ?? 0) - (y.parts[i] ?? 0);
    if (d !== 0) return d;
  }
  if (x.pre === y.pre) return 0;
  if (x.pre === null) return 1;
  if (y.pre === null) return -1;
  return x.pre < y.pre ? -1 : 1;
}

/** True when opening a database at `schema` (recorded by `recorded`) with this code is an upgrade worth a copy first. */
export function isUpgrade(schema: number, codeSchema: number, recorded: string | null, version: string): boolean {
  if (schema === 0) return false; // a new database: nothing to keep
  if (schema < codeSchema) return true;
  return recorded === null || compareVersions(recorded, version) < 0;
}

function stamp(ms: number): string {
  return new Date(ms).toISOString().replace(/[-:]/g, '').replace(/\.\d{3}Z$/, 'Z');
}

/**
 * Copies the database (a consistent snapshot, `VACUUM INTO`, outside any transaction) to a new
 * pre-upgrade file, then removes the oldest such files beyond `keep`. Returns the copy's path.
 * A copy that cannot be written stops the upgrade: nothing has been migrated yet.
 */
export function writePreUpgradeBackup(db: Db, schema: number, recorded: string | null, keep: number, now = Date.now()): string {
  const dir = backupDirectory(db.name);
  const file = join(dir, `${PREFIX}${stamp(now)}-schema${schema}-${recorded ?? 'unknown'}.db`);
  const partial = join(dir, `.${basename(file)}.partial`);
  try {
    // Private: the copy holds the webhooks' signing secrets.
    mkdirSync(dir, { recursive: true, mode: 0o700 });
    rmSync(partial, { force: true });
    db.prepare('VACUUM INTO ?').run(partial);
    chmodSync(partial, 0o600);
    const fd = openSync(partial, 'r+');
    try {
      fsyncSync(fd);
    } finally {
      closeSync(fd);
    }
    renameSync(partial, file);
  } catch (err) {
    rmSync(partial, { force: true });
    throw new HookrelayError(
      ErrorCode.config,
      `cannot write the pre-upgrade backup ${file} (${(err as Error).message}); the database was left as it was. Free space there, or set database.preUpgradeBackups to 0 to upgrade without a copy`,
      { cause: err },
    );
  }
  prune(dir, keep);
  return file;
}

function prune(dir: string, keep: number): void {
  const copies = readdirSync(dir)
    .filter((name) => NAME.test(name))
    .sort();
  for (const name of copies.slice(0, Math.max(0, copies.length - keep))) rmSync(join(dir, name), { force: true });
}

/** The newest pre-upgrade copy next to `dbPath` whose schema this code can open, or null. */
export function newestUsableBackup(dbPath: string, codeSchema: number): string | null {
  const dir = backupDirectory(dbPath);
  let names: string[];
  try {
    names = readdirSync(dir);
  } catch {
    return null;
  }
  const usable = names
    .map((name) => ({ name, m: NAME.exec(name) }))
    .filter((c) => c.m !== null && Number(c.m[2]) <= codeSchema)
    .map((c) => c.name)
    .sort();
  const newest = usable.at(-1);
  return newest === undefined ? null : join(dir, newest);
}

/** The one-line refusal of a database whose schema is newer than this code's. */
export function tooNewError(db: Db, schema: number, codeSchema: number, version: string): HookrelayError {
  let writer: string | null = null;
  try {
    writer = recordedVersion(db, schema);
  } catch {
    // A schema this code does not know may lack the table: say less.
  }
  // The same version at a higher schema is a development build's database: say no more than the schemas.
  if (writer === version) writer = null;
  const backup = newestUsableBackup(db.name, codeSchema);
  const what = writer === null ? `schema version ${schema}` : `schema version ${schema}, written by hookrelay ${writer}`;
  const restore = backup === null ? 'restore the backup taken before the upgrade' : `restore the pre-upgrade backup ${backup}`;
  return new HookrelayError(
    ErrorCode.databaseTooNew,
    `database ${db.name} has ${what}, newer than this hookrelay ${version} understands (schema ${codeSchema}); ${restore} (docs/operations.md, "Roll back"), or run hookrelay ${writer ?? 'the newer version'} again`,
  );
}

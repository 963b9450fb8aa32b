/**
 * A directory of dated backups (`db backup --dir DIR --keep N`, the nightly timer): each run
 * writes hookrelay-<UTC time>.db, and the generated JWT secret beside it as
 * hookrelay-<UTC time>.jwt-secret when there is one; the oldest beyond the last N are removed.
 */
import { chmodSync, copyFileSync, existsSync, readdirSync, rmSync } from 'node:fs';
import { join } from 'node:path';

const NAME = /^hookrelay-(\d{8}T\d{6}Z)\.db$/;

/** The file a backup taken at `ms` is written to in `dir`. */
export function datedBackupPath(dir: string, ms: number): string {
  const stamp = new Date(ms).toISOString().replace(/[-:]/g, '').replace(/\.\d{3}Z$/, 'Z');
  return join(dir, `hookrelay-${stamp}.db`);
}

/** Copies `secretFile` beside `backup` (same name, .jwt-secret), private. Returns its path, or null when there is no such file. */
export function copySecretBeside(backup: string, secretFile: string): string | null {
  if (!existsSync(secretFile)) return null;
  const to = backup.replace(/\.db$/, '.jwt-secret');
  copyFileSync(secretFile, to);
  chmodSync(to, 0o600);
  return to;
}

/** Removes the oldest dated backups in `dir` (and their secrets) beyond the newest `keep`. Returns the removed backups' paths. */
export function pruneDatedBackups(dir: string, keep: number): string[] {
  const backups = readdirSync(dir)
    .filter((name) => NAME.test(name))
    .sort();
  const gone = backups.slice(0, Math.max(0, backups.length - keep));
  for (const name of gone) {
    rmSync(join(dir, name), { force: true });
    rmSync(join(dir, name.replace(/\.db$/, '.jwt-secret')), { force: true });
  }
  return gone.map((name) => join(dir, name));
}

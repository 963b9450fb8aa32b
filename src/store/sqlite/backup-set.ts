/**
 * A directory of dated backups (`db backup --dir DIR --keep N`, the nightly timer): each run
 * writes hookrelay-<UTC time>.db, and the generated JWT secret and credential key beside it as
 * hookrelay-<UTC time>.jwt-secret and .credential-key when there are; the oldest beyond the last
 * N are removed. The credential key opens the webhooks' sealed credentials: a backup without it
 * restores them unreadable.
 */
import { chmodSync, copyFileSync, existsSync, readdirSync, rmSync } from 'node:fs';
import { join } from 'node:path';

const NAME = /^hookrelay-(\d{8}T\d{6}Z)\.db$/;

/** The file a backup taken at `ms` is written to in `dir`. */
export function datedBackupPath(dir: string, ms: number): string {
  const stamp = new Date(ms).toISOString().replace(/[-:]/g, '').replace(/\.\d{3}Z$/, 'Z');
  return join(dir, `hookrelay-${stamp}.db`);
}

/** What is copied beside a dated backup: the suffix each file gets. */
export const BESIDE_SUFFIXES = ['.jwt-secret', '.credential-key'] as const;

/** Copies `secretFile` beside `backup` (same name, `suffix`), private. Returns its path, or null when there is no such file. */
export function copySecretBeside(backup: string, secretFile: string, suffix: (typeof BESIDE_SUFFIXES)[number] = '.jwt-secret'): string | null {
  if (!existsSync(secretFile)) return null;
  const to = backup.replace(/\.db$/, suffix);
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
    for (const suffix of BESIDE_SUFFIXES) rmSync(join(dir, name.replace(/\.db$/, suffix)), { force: true });
  }
  return gone.map((name) => join(dir, name));
}

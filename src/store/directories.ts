import { accessSync, constants, existsSync, mkdirSync, statfsSync, statSync } from 'node:fs';
import { userInfo } from 'node:os';
import { dirname, resolve } from 'node:path';
import { ErrorCode, HookrelayError } from '../domain/errors.ts';

/**
 * Files hookrelay keeps (the state directory, the database, the generated JWT secret), created
 * and opened with errors an operator can act on: one sentence naming the path, what is missing
 * and what to do, as an `invalid_config` error (exit code 2: a restart does not help, the
 * configuration or the directory's permissions must change).
 */

/** "user hookrelay" (or "uid 1234" without a name): who needs the permission. */
function currentUser(): string {
  try {
    return `user ${userInfo().username}`;
  } catch {
    return `uid ${process.getuid?.() ?? '?'}`;
  }
}

/** "owner uid 0, mode 0755" of `path`, or '' if it cannot be read. */
function ownership(path: string): string {
  try {
    const s = statSync(path);
    return ` (owner uid ${s.uid}, mode ${(s.mode & 0o7777).toString(8).padStart(4, '0')})`;
  } catch {
    return '';
  }
}

/**
 * The error for `err` (from mkdir, open, write) on `path`; `what` names it ("the state
 * directory", "the database"). Returns `err` itself when it is nothing a person can fix.
 */
export function pathError(err: unknown, what: string, path: string): unknown {
  const code = (err as NodeJS.ErrnoException | null)?.code;
  const parent = dirname(path);
  const fix = 'choose another state directory (--state-dir, HOOKRELAY_STATE_DIR) or fix the permissions (chown/chmod), and run hookrelay as the user that owns it';
  let message: string;
  switch (code) {
    case 'EACCES':
    case 'EPERM':
      message = existsSync(path)
        ? `cannot use ${what} ${path}: permission denied (${code}): ${currentUser()} needs read and write permission on it${ownership(path)}; ${fix}`
        : `cannot create ${what} ${path}: permission denied (${code}): ${currentUser()} needs write permission on ${parent}${ownership(parent)}; ${fix}`;
      break;
    case 'EROFS':
      message = `cannot use ${what} ${path}: ${parent} is on a read-only file system (EROFS); choose a writable state directory (--state-dir, HOOKRELAY_STATE_DIR)`;
      break;
    case 'ENOTDIR':
      message = `cannot use ${what} ${path}: a part of the path is a file, not a directory (ENOTDIR); choose another state directory (--state-dir, HOOKRELAY_STATE_DIR)`;
      break;
    case 'EISDIR':
      message = `cannot use ${what} ${path}: it is a directory (EISDIR); point the setting at a file`;
      break;
    default:
      return err;
  }
  return new HookrelayError(ErrorCode.config, message, { cause: err });
}

/**
 * Creates the directory `dir` and whichever of its parents are missing, one level at a time,
 * with `mode` (0o700: the state holds secrets). Replaces `mkdirSync(dir, { recursive: true })`,
 * which loops forever, synchronously, when mkdir answers ENOENT for a directory whose parent
 * exists (as /proc does for `--state-dir /proc/nope`): the process then spins at full CPU and
 * never runs its SIGTERM handler. Errors name the path and say what to do (see pathError).
 */
export function ensureDirectory(dir: string, mode: number, what: string): void {
  const path = resolve(dir);
  try {
    if (statSync(path).isDirectory()) return;
    throw Object.assign(new Error(`${path} is not a directory`), { code: 'ENOTDIR' });
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw pathError(err, what, path);
  }
  const parent = dirname(path);
  if (parent !== path) ensureDirectory(parent, mode, what);
  try {
    mkdirSync(path, { mode });
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code === 'EEXIST' && statSync(path).isDirectory()) return; // created meanwhile by another process
    if (code === 'ENOENT') {
      // The parent exists (just checked or made), yet refuses the new entry: /proc, /sys.
      throw new HookrelayError(ErrorCode.config, `cannot create ${what} ${path}: ${parent} does not allow creating directories in it (ENOENT); choose another state directory (--state-dir, HOOKRELAY_STATE_DIR)`, { cause: err });
    }
    throw pathError(err, what, path);
  }
}

/**
 * The error for SQLite failing to open or set up the database at `path` (SQLITE_CANTOPEN,
 * SQLITE_READONLY...): SQLite keeps its -wal and -shm files next to the database, so the
 * directory must be writable too. Returns `err` itself when the directory is writable.
 */
export function databaseOpenError(err: unknown, path: string): unknown {
  const dir = dirname(path);
  try {
    accessSync(dir, constants.W_OK | constants.X_OK);
    return err;
  } catch (access) {
    const code = (access as NodeJS.ErrnoException).code;
    const why = code === 'EROFS' ? `${dir} is on a read-only file system (EROFS)` : `${currentUser()} cannot create files in ${dir}${ownership(dir)} (${code})`;
    return new HookrelayError(
      ErrorCode.config,
      `cannot open the database ${path}: ${why}, and SQLite keeps its -wal and -shm files next to the database; choose another state directory (--state-dir, HOOKRELAY_STATE_DIR) or fix the permissions (chown/chmod), and run hookrelay as the user that owns it`,
      { cause: err },
    );
  }
}

/** Bytes an unprivileged process may still write on the file system of `dir`, or null when it cannot be told. */
export function availableBytes(dir: string): number | null {
  try {
    const st = statfsSync(dir);
    return st.bavail * st.bsize;
  } catch {
    return null;
  }
}

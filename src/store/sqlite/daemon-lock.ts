import { readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { ErrorCode, HookrelayError } from '../../domain/errors.ts';
import { ensureDirectory, pathError } from '../directories.ts';

/** The lock file in the state directory, and the file naming the process that holds it. */
export const DAEMON_LOCK_FILE = 'daemon.lock';
export const DAEMON_PID_FILE = 'daemon.pid';

export interface DaemonLock {
  /** Lets go of the lock (the daemon has stopped); the lock also ends with the process, however it ends. */
  release(): void;
}

/**
 * One daemon per state directory: a second `hookrelay serve` on the same directory would read
 * the same feed and count every line twice. The lock is an exclusive POSIX lock (fcntl) on
 * `daemon.lock`, taken through SQLite, which the daemon already links (Node has no flock): an
 * empty database file in which this process holds an exclusive transaction open, so no other
 * process can take it until this one closes it or ends (the kernel drops the lock of a process
 * that dies, even by SIGKILL: nothing stale is left behind). `daemon.pid` names the holder for
 * the refusal's message. CLI commands do not take it: they work beside the running daemon.
 *
 * @throws HookrelayError (runtime) when another process holds the lock, naming its pid.
 */
export function acquireDaemonLock(stateDir: string): DaemonLock {
  ensureDirectory(stateDir, 0o700, 'the state directory');
  const path = join(stateDir, DAEMON_LOCK_FILE);
  const pidPath = join(stateDir, DAEMON_PID_FILE);
  let db: Database.Database;
  try {
    db = new Database(path);
  } catch (err) {
    throw pathError(err, 'the daemon lock file', path);
  }
  try {
    db.pragma('busy_timeout = 0');
    // An exclusive transaction that never ends: it takes the file's exclusive lock at once and
    // writes nothing (its journal, were it to need one, in memory), so a daemon started on a
    // full disk still gets it, and then waits for space to open its database.
    db.pragma('journal_mode = MEMORY');
    db.exec('BEGIN EXCLUSIVE');
  } catch (err) {
    db.close();
    if ((err as { code?: string }).code === 'SQLITE_BUSY') {
      throw new HookrelayError(
        ErrorCode.config,
        `another hookrelay daemon${holderPid(pidPath)} is running on the state directory ${stateDir}; stop it first (systemctl stop hookrelay), or give this one a state directory of its own (--state-dir)`,
      );
    }
    throw err;
  }
  try {
    writeFileSync(pidPath, `${process.pid}\n`, { mode: 0o600 });
  } catch {
    // Only the refusal's message reads it (a full disk, say): the lock holds without it.
  }
  return {
    release() {
      if (!db.open) return;
      rmSync(pidPath, { force: true });
      db.close();
    },
  };
}

/** " (pid N)" from the holder's pid file, or '' when it cannot be read. */
function holderPid(pidPath: string): string {
  try {
    const pid = Number(readFileSync(pidPath, 'utf8').trim());
    return Number.isInteger(pid) && pid > 0 ? ` (pid ${pid})` : '';
  } catch {
    return '';
  }
}

import { isTransientPgError } from './pg/transient-errors.ts';

/**
 * What an SQLite error says about the storage under the database, as opposed to an error of
 * the query or of the data: the one place that knows SQLite's result codes.
 */

export const StorageFault = {
  /** The file is not a database or its pages are damaged (SQLITE_CORRUPT, SQLITE_NOTADB): nothing heals it but a restore. */
  damaged: 'database_damaged',
  /** No space left on the device, or the file may not grow (SQLITE_FULL). Goes away when space returns. */
  diskFull: 'disk_full',
  /** The operating system failed a read, write or sync (SQLITE_IOERR_*), or the file cannot be opened or written (SQLITE_CANTOPEN, SQLITE_READONLY). */
  ioError: 'io_error',
} as const;
export type StorageFault = (typeof StorageFault)[keyof typeof StorageFault];

/** From worst to least bad: the state a daemon with several faults reports. */
export const FAULT_SEVERITY: readonly StorageFault[] = [StorageFault.damaged, StorageFault.diskFull, StorageFault.ioError];

function sqliteCode(err: unknown): string | null {
  // A HookrelayError (or any wrapper) may carry the SQLite error as its cause.
  for (let e = err, depth = 0; e !== null && typeof e === 'object' && depth < 5; e = (e as { cause?: unknown }).cause, depth++) {
    const code = (e as { code?: unknown }).code;
    if (typeof code === 'string' && code.startsWith('SQLITE_')) return code;
  }
  return null;
}

/**
 * The storage fault `err` reports, or null when it is not one (a constraint, a bug, a lock
 * held by another process: SQLITE_BUSY and SQLITE_LOCKED are waits, not faults).
 */
export function storageFaultOf(err: unknown): StorageFault | null {
  const code = sqliteCode(err);
  if (code === null) return null;
  if (code.startsWith('SQLITE_CORRUPT') || code === 'SQLITE_NOTADB') return StorageFault.damaged;
  if (code === 'SQLITE_FULL') return StorageFault.diskFull;
  if (code.startsWith('SQLITE_IOERR') || code.startsWith('SQLITE_CANTOPEN') || code.startsWith('SQLITE_READONLY')) return StorageFault.ioError;
  return null;
}

/**
 * True when `err` says another connection holds a lock the statement needed (SQLITE_BUSY,
 * SQLITE_LOCKED and their extended codes): a wait, not a fault. See lock-wait.ts.
 */
export function isLockWait(err: unknown): boolean {
  const code = sqliteCode(err);
  return code !== null && (code.startsWith('SQLITE_BUSY') || code.startsWith('SQLITE_LOCKED'));
}

/** SQLite errors that go away by themselves (a full or failing disk). Locks are waited for apart (lock-wait.ts). */
const TRANSIENT_SQLITE = /^SQLITE_(FULL|IOERR|CANTOPEN|READONLY|PROTOCOL)/;

/**
 * Whether a failed write is worth trying again as it was, whichever the backend: a full or
 * failing disk (SQLite), or a PostgreSQL server out of reach, restarting, or a deadlock
 * (pg/transient-errors.ts). Anything else is a fault of the write itself.
 */
export function isTransientStoreError(err: unknown): boolean {
  const code = sqliteCode(err);
  return code !== null ? TRANSIENT_SQLITE.test(code) : isTransientPgError(err);
}

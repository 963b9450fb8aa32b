import { closeSync, existsSync, fsyncSync, openSync, renameSync, statSync, unlinkSync } from 'node:fs';
import { randomBytes } from 'node:crypto';
import { basename, dirname, join, resolve } from 'node:path';
import Database from 'better-sqlite3';
import { ErrorCode, HookrelayError, validationError } from '../../domain/errors.ts';
import { startWorker } from '../../worker-thread.ts';
import type { BackupReport, BackupWorkerData } from './backup-worker.ts';
import { SCHEMA_VERSION } from './connection.ts';
import { StorageFault, storageFaultOf } from '../storage-faults.ts';

/** How a database file's space is used. */
export interface DiskUse {
  /** The database file, its WAL and its shared-memory index, in bytes (0 when absent). */
  readonly fileBytes: number;
  readonly walBytes: number;
  readonly shmBytes: number;
  readonly pageSize: number;
  readonly pages: number;
  /** Pages on the free list: space inside the file that new rows reuse before it grows (the file does not shrink by itself). */
  readonly freePages: number;
}

export interface CheckReport {
  readonly path: string;
  /** True when the file is a database and both checks found nothing. */
  readonly ok: boolean;
  /** Set when the file could not be read as a database at all (a damaged header, say). */
  readonly error: string | null;
  /** What PRAGMA integrity_check found: ['ok'], or up to 100 problems. */
  readonly integrity: readonly string[];
  /** Rows whose parent row is missing (PRAGMA foreign_key_check). */
  readonly foreignKeys: ReadonlyArray<{ readonly table: string; readonly rowid: number | null; readonly parent: string }>;
  readonly schemaVersion: number | null;
  /** The schema version this hookrelay writes. */
  readonly codeSchemaVersion: number;
  readonly disk: DiskUse | null;
}

function sizeOf(path: string): number {
  try {
    return statSync(path).size;
  } catch {
    return 0;
  }
}

/**
 * No database where one was expected: `given` when the path was named on the command line (check
 * the path), otherwise it came from the configuration (point at the daemon's).
 */
function missing(path: string, given = false): HookrelayError {
  return new HookrelayError(
    ErrorCode.config,
    given
      ? `there is no database file at ${path}; check the path`
      : `there is no database at ${path}; pass the daemon's --config and --state-dir (or HOOKRELAY_CONFIG / HOOKRELAY_STATE_DIR)`,
  );
}

/**
 * Checks a database file without changing it: PRAGMA integrity_check (every page, every
 * index entry against its row) and PRAGMA foreign_key_check, on a read-only connection, which
 * the daemon may keep writing meanwhile (the check sees one snapshot). Takes about as long as
 * reading the whole file. A file that cannot be read as a database is reported, not thrown.
 */
export function checkDatabase(path: string, options: { busyTimeoutMs?: number; named?: boolean } = {}): CheckReport {
  const file = resolve(path);
  if (!existsSync(file)) throw missing(file, options.named === true);
  const base = { path: file, codeSchemaVersion: SCHEMA_VERSION };
  let db: Database.Database | null = null;
  let error: string | null = null;
  /** Rows of a check; on a damaged file SQLite may report problems, then fail: what it said, and the failure. */
  const rowsOf = <T>(sql: string): T[] => {
    const rows: T[] = [];
    try {
      for (const row of db!.prepare<[], T>(sql).iterate()) rows.push(row);
    } catch (err) {
      if (storageFaultOf(err) !== StorageFault.damaged) throw err;
      error ??= (err as Error).message;
    }
    return rows;
  };
  try {
    db = new Database(file, { readonly: true, fileMustExist: true });
    db.pragma(`busy_timeout = ${Math.trunc(options.busyTimeoutMs ?? 5000)}`);
    // Each check reads one snapshot of its own (an explicit transaction would not survive the
    // first SQLITE_CORRUPT: SQLite rolls it back), while the daemon may go on writing.
    const version = rowsOf<{ user_version: number }>('PRAGMA user_version')[0]?.user_version ?? null;
    const integrity = rowsOf<{ integrity_check: string }>('PRAGMA integrity_check').flatMap((r) => r.integrity_check.split('\n'));
    const foreignKeys = rowsOf<{ table: string; rowid: number | null; parent: string }>('PRAGMA foreign_key_check').map((r) => ({ table: r.table, rowid: r.rowid, parent: r.parent }));
    const pragma = (name: string) => rowsOf<Record<string, number>>(`PRAGMA ${name}`)[0]?.[name] ?? 0;
    const disk: DiskUse | null =
      error === null
        ? { fileBytes: sizeOf(file), walBytes: sizeOf(`${file}-wal`), shmBytes: sizeOf(`${file}-shm`), pageSize: pragma('page_size'), pages: pragma('page_count'), freePages: pragma('freelist_count') }
        : null;
    const ok = error === null && integrity.length === 1 && integrity[0] === 'ok' && foreignKeys.length === 0;
    return { ...base, ok, error, integrity: ok ? integrity : integrity.filter((m) => m !== 'ok'), foreignKeys, schemaVersion: version, disk };
  } catch (err) {
    // The file could not even be opened as a database.
    if (storageFaultOf(err) !== StorageFault.damaged) throw err;
    return { ...base, ok: false, error: (err as Error).message, integrity: [], foreignKeys: [], schemaVersion: null, disk: null };
  } finally {
    db?.close();
  }
}

export interface BackupResult {
  readonly path: string;
  readonly bytes: number;
  readonly ms: number;
}

/**
 * Writes a consistent copy of the database at `source` to `target`, while the daemon goes on
 * writing: VACUUM INTO on a read-only connection, which reads one snapshot (WAL: the writer is
 * never blocked) and writes only the pages in use, compacted. (SQLite's online backup API,
 * better-sqlite3's db.backup(), starts over whenever another connection writes, which a busy
 * daemon does every few milliseconds.) The copy is written to a private temporary file next to
 * `target` (mode 0600: it holds signing secrets), quick-checked, synced, then renamed to
 * `target`, so that `target` is never a partial file. An existing `target` is refused unless
 * `overwrite`. `onProgress` hears the bytes written so far and about how many there will be.
 */
export async function backupDatabase(
  source: string,
  target: string,
  options: { overwrite?: boolean; busyTimeoutMs?: number; onProgress?: (written: number, expected: number) => void } = {},
): Promise<BackupResult> {
  const from = resolve(source);
  const to = resolve(target);
  if (!existsSync(from)) throw missing(from);
  if (from === to) throw validationError(`the backup file must not be the database itself (${to})`, [{ name: 'FILE', reason: 'is the database itself' }]);
  if (existsSync(to) && !options.overwrite) {
    throw validationError(`${to} already exists; choose another file, or pass --force to replace it`, [{ name: 'FILE', reason: 'already exists' }]);
  }
  if (!existsSync(dirname(to))) throw validationError(`the backup's directory ${dirname(to)} does not exist; create it first, or choose another file`, [{ name: 'FILE', reason: `is in ${dirname(to)}, which does not exist` }]);

  const started = performance.now();
  const expected = expectedBytes(from);
  const temp = join(dirname(to), `.${basename(to)}.${process.pid}.${randomBytes(4).toString('hex')}.tmp`);
  // VACUUM INTO writes into an empty file: created here, private.
  closeSync(openSync(temp, 'wx', 0o600));
  try {
    const workerData: BackupWorkerData = { source: from, target: temp, busyTimeoutMs: options.busyTimeoutMs ?? 5000 };
    const worker = startWorker(new URL('./backup-worker.ts', import.meta.url), { workerData });
    const timer = options.onProgress ? setInterval(() => options.onProgress!(sizeOf(temp), expected), 200) : null;
    try {
      const report = await new Promise<BackupReport>((done, fail) => {
        worker.once('message', done);
        worker.once('error', fail);
        worker.once('exit', (code) => fail(new Error(`the backup thread exited (${code}) before it finished`)));
      });
      if ('error' in report) {
        const err = Object.assign(new Error(`backup of ${from} failed: ${report.error.message}`), { code: report.error.code ?? undefined });
        if (storageFaultOf(err) === StorageFault.damaged) throw new HookrelayError(ErrorCode.databaseDamaged, `${from} is damaged (${report.error.message}); it cannot be backed up: restore the last good backup`, { cause: err });
        throw err;
      }
    } finally {
      if (timer !== null) clearInterval(timer);
      await worker.terminate();
    }
    const copy = new Database(temp, { readonly: true, fileMustExist: true });
    try {
      const verdict = copy.pragma('quick_check', { simple: true });
      if (verdict !== 'ok') throw new Error(`the backup written to ${temp} does not pass quick_check (${String(verdict)}); nothing was renamed`);
    } finally {
      copy.close();
    }
    const fd = openSync(temp, 'r+');
    try {
      fsyncSync(fd);
    } finally {
      closeSync(fd);
    }
    renameSync(temp, to);
    syncDirectory(dirname(to));
  } catch (err) {
    try {
      unlinkSync(temp);
    } catch {
      // already gone
    }
    throw err;
  }
  const bytes = sizeOf(to);
  options.onProgress?.(bytes, bytes);
  return { path: to, bytes, ms: performance.now() - started };
}

/** About the size of a compacted copy: the pages in use. */
function expectedBytes(path: string): number {
  try {
    const db = new Database(path, { readonly: true, fileMustExist: true });
    try {
      const pages = (db.pragma('page_count', { simple: true }) as number) - (db.pragma('freelist_count', { simple: true }) as number);
      return pages * (db.pragma('page_size', { simple: true }) as number);
    } finally {
      db.close();
    }
  } catch {
    return 0;
  }
}

/** Makes a rename in `dir` durable. */
function syncDirectory(dir: string): void {
  const fd = openSync(dir, 'r');
  try {
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
}

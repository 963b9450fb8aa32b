/**
 * Worker thread entry: writes a backup of the database with VACUUM INTO (see maintenance.ts)
 * on a connection of its own, so that the thread that started it can report progress.
 */
import { parentPort, workerData } from 'node:worker_threads';
import Database from 'better-sqlite3';

export interface BackupWorkerData {
  readonly source: string;
  /** An empty file (created private by the caller) that receives the copy. */
  readonly target: string;
  readonly busyTimeoutMs: number;
}

export type BackupReport = { readonly done: true } | { readonly error: { readonly message: string; readonly code: string | null } };

const { source, target, busyTimeoutMs } = workerData as BackupWorkerData;
let report: BackupReport;
try {
  const db = new Database(source, { readonly: true, fileMustExist: true });
  try {
    db.pragma(`busy_timeout = ${busyTimeoutMs}`);
    // One read transaction: a consistent snapshot, taken while the daemon goes on writing (WAL).
    db.prepare('VACUUM INTO ?').run(target);
  } finally {
    db.close();
  }
  report = { done: true };
} catch (err) {
  const e = err as { message?: string; code?: unknown };
  report = { error: { message: e.message ?? String(err), code: typeof e.code === 'string' ? e.code : null } };
}
parentPort?.postMessage(report);

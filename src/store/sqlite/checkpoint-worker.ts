/**
 * Worker thread entry: copies committed WAL frames into the database file on its own
 * connection (see checkpointer.ts), so that this I/O and its fsync block neither ingestion
 * nor the admin API on the main thread.
 */
import { parentPort, workerData } from 'node:worker_threads';
import Database from 'better-sqlite3';

export interface CheckpointWorkerData {
  readonly path: string;
  readonly intervalMs: number;
  /** Checkpoint from the start; otherwise only after an 'active' message (until an 'idle' one). */
  readonly active: boolean;
}

/** `ready` once the connection is open; `error` when checkpoints start failing. */
export interface CheckpointReport {
  readonly ready?: true;
  readonly error?: string;
}

const { path, intervalMs, active: activeAtStart } = workerData as CheckpointWorkerData;
let active = activeAtStart;
const db = new Database(path, { fileMustExist: true });
// A checkpoint fsyncs the database file before it lets the WAL be reused: keep it at FULL like every connection of ours.
db.pragma('synchronous = FULL');
db.pragma('busy_timeout = 0');

let failedBefore = false;
function checkpoint(): void {
  if (!active) return;
  try {
    // PASSIVE never waits for, nor blocks, the writer or the readers: it copies what it can.
    db.pragma('wal_checkpoint(PASSIVE)');
    failedBefore = false;
  } catch (err) {
    // Reported once per run of failures; the next tick tries again.
    if (!failedBefore) parentPort?.postMessage({ error: (err as Error).message } satisfies CheckpointReport);
    failedBefore = true;
  }
}

const timer = setInterval(checkpoint, intervalMs);
parentPort?.postMessage({ ready: true } satisfies CheckpointReport);
parentPort?.on('message', (message: unknown) => {
  if (message === 'active' || message === 'idle') {
    active = message === 'active';
    return;
  }
  if (message !== 'stop') return;
  clearInterval(timer);
  db.close();
  // Ends this thread only; its event loop may hold handles that are not ours (a module loader's).
  process.exit(0);
});

import type { Logger } from '../log.ts';
import { startWorker } from '../worker-thread.ts';
import type { CheckpointReport, CheckpointWorkerData } from './checkpoint-worker.ts';
import { AUTOCHECKPOINT_PAGES, type Db } from './db.ts';

/** WAL pages after which the writer checkpoints itself (the safety net when the background thread falls behind): 256 MiB of 16 KiB pages. */
export const SAFETY_NET_PAGES = 16384;

export interface BackgroundCheckpoints {
  stop(): Promise<void>;
}

/**
 * Moves WAL checkpoints off the calling thread: a worker thread with its own connection runs a
 * PASSIVE checkpoint every `intervalMs`, while `db` (the writer) only checkpoints itself once
 * SAFETY_NET_PAGES pages pile up, which during a long burst of ingestion is what lets the WAL
 * start over. Measured: about +9 % ingest rate against checkpointing on the writer every 4096
 * pages (docs/benchmarks.md). The WAL file may grow to that size during a burst; it is cut back
 * to `journal_size_limit` when it starts over.
 *
 * Never fails: if the thread cannot start, that is logged and the writer goes on checkpointing
 * itself, as SQLite does by default; `stop()` then has nothing to do.
 */
export async function startBackgroundCheckpoints(db: Db, log: Logger, intervalMs = 500): Promise<BackgroundCheckpoints> {
  const checkpointLog = log.child({ subsystem: 'checkpoint' });
  const workerData: CheckpointWorkerData = { path: db.name, intervalMs };
  const worker = startWorker(new URL('./checkpoint-worker.ts', import.meta.url), { workerData });
  let exited = false;
  const exit = new Promise<void>((resolve) =>
    worker.once('exit', () => {
      exited = true;
      if (db.open) db.pragma(`wal_autocheckpoint = ${AUTOCHECKPOINT_PAGES}`);
      resolve();
    }),
  );
  let started = false;
  // Started only once its connection is open, so a failure shows at start-up, not later.
  const ready = new Promise<void>((resolve, reject) => {
    worker.on('message', (report: CheckpointReport) => {
      if (report.ready) resolve();
      if (report.error) checkpointLog.warn({ error: report.error }, 'background WAL checkpoint failed; retrying, and the writer checkpoints itself past the safety net');
    });
    worker.on('error', (err) => {
      if (started) checkpointLog.error({ err }, 'background checkpoint thread failed; the writer checkpoints itself from now on');
      reject(err);
    });
    void exit.then(() => reject(new Error('the checkpoint thread exited before it started')));
  });
  try {
    await ready;
  } catch (err) {
    checkpointLog.warn({ err }, 'background checkpoints unavailable; the writer checkpoints the WAL itself');
    await exit;
    return { stop: async () => {} };
  }
  started = true;
  db.pragma(`wal_autocheckpoint = ${SAFETY_NET_PAGES}`);
  worker.unref();
  return {
    async stop() {
      if (exited) return;
      worker.ref();
      worker.postMessage('stop');
      await exit;
    },
  };
}

import type { Logger } from '../../log.ts';
import { startWorker } from '../../worker-thread.ts';
import type { CheckpointReport, CheckpointWorkerData } from './checkpoint-worker.ts';
import { AUTOCHECKPOINT_PAGES, BURST_CACHE_KIB, QUIET_CACHE_KIB, type Db } from './connection.ts';

/** WAL pages after which the writer checkpoints itself (the safety net when the background thread falls behind): 256 MiB of 16 KiB pages. */
export const SAFETY_NET_PAGES = 16384;

export interface BackgroundCheckpoints {
  /**
   * With `whileBusy`: a large batch was just written; background checkpoints run from now until
   * a couple of seconds after the last such batch, and the writer checkpoints itself (every
   * QUIET_AUTOCHECKPOINT_PAGES pages) otherwise.
   */
  busy(): void;
  stop(): Promise<void>;
}

/**
 * WAL pages after which the writer checkpoints itself when no large batch is being ingested
 * (SQLite's default): small steps (16 MiB), each a short pause of the writer, rather than a long
 * one every 64 MiB.
 */
export const QUIET_AUTOCHECKPOINT_PAGES = 1000;

/** How long background checkpoints go on after the last large batch (with `whileBusy`). */
export const BUSY_LINGER_MS = 2_000;

/**
 * Moves WAL checkpoints off the calling thread: a worker thread with its own connection runs a
 * PASSIVE checkpoint every `intervalMs`, while `db` (the writer) only checkpoints itself once
 * SAFETY_NET_PAGES pages pile up, which during a long burst of ingestion is what lets the WAL
 * start over. Faster ingestion than checkpointing on the writer every 4096 pages
 * (docs/benchmarks.md, "Figures behind the code's choices"). The WAL file may grow to that size during a burst; it is cut back
 * to `journal_size_limit` when it starts over.
 *
 * Never fails: if the thread cannot start, that is logged and the writer goes on checkpointing
 * itself, as SQLite does by default; `stop()` then has nothing to do.
 */
export async function startBackgroundCheckpoints(db: Db, log: Logger, options: { intervalMs?: number; whileBusy?: boolean } = {}): Promise<BackgroundCheckpoints> {
  const checkpointLog = log.child({ subsystem: 'checkpoint' });
  const intervalMs = options.intervalMs ?? 500;
  const whileBusy = options.whileBusy ?? false;
  const workerData: CheckpointWorkerData = { path: db.name, intervalMs, active: !whileBusy };
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
    return { busy: () => {}, stop: async () => {} };
  }
  started = true;
  worker.unref();
  // While the thread checkpoints, the writer waits for the safety net; otherwise it checkpoints
  // itself, in small steps. (A checkpoint thread's fsyncs of the database file, concurrent with
  // the writer's fsyncs of the WAL, stalled the writer for 50-100 ms at a time under a steady
  // trickle of commits: measured, docs/benchmarks.md. During a large ingest they are what keeps
  // the writer fast.)
  let active = !whileBusy;
  let quietTimer: NodeJS.Timeout | null = null;
  // With `whileBusy`, the page cache follows too: large during a burst, small otherwise, and
  // the pages beyond the small size handed back as the burst ends.
  const sizeCache = (on: boolean) => {
    if (!whileBusy || !db.open) return;
    db.pragma(`cache_size = -${on ? BURST_CACHE_KIB : QUIET_CACHE_KIB}`);
    if (!on) db.pragma('shrink_memory');
  };
  const setActive = (on: boolean) => {
    if (exited || on === active) return;
    active = on;
    worker.postMessage(on ? 'active' : 'idle');
    if (db.open) db.pragma(`wal_autocheckpoint = ${on ? SAFETY_NET_PAGES : QUIET_AUTOCHECKPOINT_PAGES}`);
    sizeCache(on);
  };
  db.pragma(`wal_autocheckpoint = ${active ? SAFETY_NET_PAGES : QUIET_AUTOCHECKPOINT_PAGES}`);
  sizeCache(active);
  return {
    busy() {
      if (!whileBusy) return;
      setActive(true);
      if (quietTimer !== null) clearTimeout(quietTimer);
      quietTimer = setTimeout(() => {
        quietTimer = null;
        setActive(false);
      }, BUSY_LINGER_MS);
      quietTimer.unref();
    },
    async stop() {
      if (quietTimer !== null) clearTimeout(quietTimer);
      if (exited) return;
      worker.ref();
      worker.postMessage('stop');
      await exit;
    },
  };
}

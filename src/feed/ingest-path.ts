import type { Logger } from '../log.ts';
import { createIngestService, type IngestService } from '../services/ingest.ts';
import { nobodyListens, type WorkSignal } from '../services/work-signal.ts';
import { startBackgroundCheckpoints } from '../store/checkpointer.ts';
import type { Store } from '../store/store.ts';
import { createWorkerLineParser, type LineParser } from './line-parser.ts';

/** A batch of at least this many lines keeps background WAL checkpoints on (a large ingest under way). */
export const LARGE_BATCH_LINES = 1000;

/**
 * What feed lines go through on their way into the store, set up the same way for the daemon
 * (relay.ts: the tailer or standard input) and for `hookrelay ingest`: the ingest service, a
 * parser on a worker thread, and WAL checkpoints on a thread of their own.
 */
export interface IngestPath {
  readonly ingest: IngestService;
  readonly parser: LineParser;
  /** Ends the parser thread and the checkpoint thread. Call once nothing reads any more, before the store closes. */
  close(): Promise<void>;
}

export interface IngestPathOptions {
  /** Hears of queued deliveries (the daemon's dispatcher); nobody by default. */
  readonly work?: WorkSignal;
  /**
   * The daemon's mode: background checkpoints only while large batches arrive (see
   * startBackgroundCheckpoints), otherwise the writer checkpoints itself in small steps. Off
   * (checkpoints always in the background) for a one-shot ingest, which is one large burst.
   */
  readonly checkpointsWhileBusy?: boolean;
}

export async function openIngestPath(store: Store, log: Logger, options: IngestPathOptions = {}): Promise<IngestPath> {
  const whileBusy = options.checkpointsWhileBusy ?? false;
  const checkpoints = await startBackgroundCheckpoints(store.db, log, { whileBusy });
  const parser = createWorkerLineParser(log);
  const service = createIngestService(store, log, options.work ?? nobodyListens);
  const ingest: IngestService = whileBusy
    ? {
        ...service,
        ingest(source, lines, position, parsed) {
          if (lines.length >= LARGE_BATCH_LINES) checkpoints.busy();
          return service.ingest(source, lines, position, parsed);
        },
      }
    : service;
  return {
    ingest,
    parser,
    async close() {
      await parser.close();
      await checkpoints.stop();
    },
  };
}

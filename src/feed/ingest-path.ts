import type { Logger } from '../log.ts';
import { createIngestService, type IngestService, type Lines } from '../services/ingest.ts';
import type { IngestTracing } from '../services/ingest-tracing.ts';
import { nobodyListens, type WorkSignal } from '../services/work-signal.ts';
import type { Store, Upkeep } from '../store/repos.ts';
import { sourceBytes } from './line-batch.ts';
import { createWorkerLineParser, IDLE_THREAD_MS, type LineParser } from './line-parser.ts';

/**
 * A batch of at least this many lines, or of this many bytes of lines, keeps background WAL
 * checkpoints on (a large ingest under way). The file tailer also ends a batch at
 * `feed.batchBytes`, so with that set low a feed of long lines comes in batches of fewer than
 * 1,000 lines.
 */
export const LARGE_BATCH_LINES = 1000;
export const LARGE_BATCH_BYTES = 256 << 10;

function isLargeBatch(lines: Lines): boolean {
  return lines.length >= LARGE_BATCH_LINES || sourceBytes(lines) >= LARGE_BATCH_BYTES;
}

/**
 * How long after the last burst (a large batch, a retention pass) the memory it freed is given
 * back to the system: once the parser thread has ended (IDLE_THREAD_MS) and the page cache has
 * shrunk back (SQLite's background checkpoints go on for BUSY_LINGER_MS, 2 s, after a burst; the
 * feed does not import a backend, so test/e2e/feed-crash.e2e.test.ts checks this is longer than both).
 */
export const RELEASE_AFTER_BURST_MS = IDLE_THREAD_MS + 1_000;

/**
 * What feed lines go through on their way into the store, set up the same way for the daemon
 * (relay.ts: the tailer or standard input) and for `hookrelay ingest`: the ingest service, a
 * parser on a worker thread, and WAL checkpoints on a thread of their own.
 */
export interface IngestPath {
  readonly ingest: IngestService;
  readonly parser: LineParser;
  /** Another burst of writes (retention): background checkpoints on for a while, as for a large batch. */
  checkpointsBusy(): void;
  /**
   * Gives the C heap's free pages back to the system now (the daemon calls it every
   * STEADY_RELEASE_MS while it delivers: see relay.ts); during a burst it waits for the burst's
   * own release. Returns the time it took (ms), or null when nothing was done.
   */
  releaseMemory(): number | null;
  /** Ends the parser thread and the checkpoint thread. Call once nothing reads any more, before the store closes. */
  close(): Promise<void>;
}

export interface IngestPathOptions {
  /** Hears of queued deliveries (the daemon's dispatcher); nobody by default. */
  readonly work?: WorkSignal;
  /** Logs events stored for organizations without a webhook, at warn (the daemon; see createIngestService). */
  readonly noticeUndeliverable?: boolean;
  /** delivery.reorderWindow (ms): how long a change read is held before it may be sent, on PostgreSQL (see createIngestService). */
  readonly reorderWindowMs?: number;
  /** The events' ingest spans, while the daemon traces (see IngestTracing). */
  readonly tracing?: IngestTracing | null;
  /** delivery.orderHold (ms): how long a change may wait for its predecessor, on PostgreSQL (see createIngestService); 0: off. */
  readonly orderHoldMs?: number;
  /**
   * The daemon's mode: background checkpoints only while large batches arrive (see
   * startBackgroundCheckpoints), otherwise the writer checkpoints itself in small steps. Off
   * (checkpoints always in the background) for a one-shot ingest, which is one large burst.
   */
  readonly checkpointsWhileBusy?: boolean;
  /** Overrides RELEASE_AFTER_BURST_MS (tests). */
  readonly releaseAfterBurstMs?: number;
  /** Hears each release of memory after a burst (tests). */
  readonly onReleased?: (rssBefore: number, rssAfter: number) => void;
}

export async function openIngestPath(store: Store, log: Logger, options: IngestPathOptions = {}): Promise<IngestPath> {
  const whileBusy = options.checkpointsWhileBusy ?? false;
  const upkeep = await store.upkeep(log, { whileBusy });
  const parser = createWorkerLineParser(log);
  const service = createIngestService(store, log, options.work ?? nobodyListens, { noticeUndeliverable: options.noticeUndeliverable === true, reorderWindowMs: options.reorderWindowMs ?? 0, orderHoldMs: options.orderHoldMs ?? 0, tracing: options.tracing ?? null });
  const bursts = new Bursts(upkeep, log, { ...options, whileBusy });
  const ingest: IngestService = whileBusy
    ? {
        ...service,
        ingest(source, lines, position, parsed) {
          if (isLargeBatch(lines)) bursts.burst();
          return service.ingest(source, lines, position, parsed);
        },
      }
    : service;
  return {
    ingest,
    parser,
    checkpointsBusy: () => bursts.burst(),
    releaseMemory: () => bursts.releaseBetweenBursts(),
    async close() {
      bursts.stop();
      await parser.close();
      await upkeep.stop();
    },
  };
}

/**
 * Bursts of writes, and the memory they take: checkpoints in the background while one lasts,
 * and, in the daemon's mode (`whileBusy`), what the burst took given back once it is over. The
 * parser thread's heap goes with the thread and the page cache shrinks, but glibc keeps the
 * freed pages in its arenas (most of the daemon's memory after a large ingest) until asked to
 * release them.
 */
class Bursts {
  readonly #upkeep: Upkeep;
  readonly #log: Logger;
  readonly #whileBusy: boolean;
  readonly #releaseAfterMs: number;
  readonly #onReleased: IngestPathOptions['onReleased'];
  /** Set from a burst until its release: the release after the burst is due. */
  #releaseTimer: NodeJS.Timeout | null = null;

  constructor(upkeep: Upkeep, log: Logger, options: Pick<IngestPathOptions, 'releaseAfterBurstMs' | 'onReleased'> & { whileBusy: boolean }) {
    this.#upkeep = upkeep;
    this.#log = log;
    this.#whileBusy = options.whileBusy;
    this.#releaseAfterMs = options.releaseAfterBurstMs ?? RELEASE_AFTER_BURST_MS;
    this.#onReleased = options.onReleased;
  }

  /** A burst of writes: background checkpoints on for a while, and the release put off until it is over. */
  burst(): void {
    this.#upkeep.busy();
    if (!this.#whileBusy || !this.#upkeep.canTrimHeap) return;
    if (this.#releaseTimer !== null) clearTimeout(this.#releaseTimer);
    this.#releaseTimer = setTimeout(() => {
      this.#releaseTimer = null;
      this.#release('after a burst');
    }, this.#releaseAfterMs);
    this.#releaseTimer.unref();
  }

  /** Releases now, unless a burst's own release is due (see IngestPath.releaseMemory). */
  releaseBetweenBursts(): number | null {
    return this.#releaseTimer === null ? this.#release('by steady work') : null;
  }

  stop(): void {
    if (this.#releaseTimer !== null) clearTimeout(this.#releaseTimer);
  }

  /** Gives the C heap's free pages back; returns the time it took (ms), or null when this platform cannot. */
  #release(why: string): number | null {
    const before = process.memoryUsage.rss();
    const started = performance.now();
    if (!this.#upkeep.trimHeap()) return null;
    const ms = performance.now() - started;
    const after = process.memoryUsage.rss();
    this.#log.debug({ rssBeforeMiB: Math.round(before / 2 ** 20), rssAfterMiB: Math.round(after / 2 ** 20), ms: Math.round(ms * 10) / 10 }, `memory freed ${why} given back to the system`);
    this.#onReleased?.(before, after);
    return ms;
  }
}

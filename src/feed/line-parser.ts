import type { Worker } from 'node:worker_threads';
import { parseFeedLine, toStorable, type ParsedLines, type StorableLine } from '../domain/feed-event.ts';
import type { Logger } from '../log.ts';
import { startWorker } from '../worker-thread.ts';
import type { Lines } from '../services/ingest.ts';
import { LineBatch } from './line-batch.ts';
import { PackedLines, packedCapacity, type PackedBatch } from './parsed-batch.ts';
import type { ParseReply, ParseRequest } from './parse-worker.ts';

/** Parses batches of feed lines; one result per line (reduced to what storing it takes), null for a line already rejected (`line.rejected`). */
export interface LineParser {
  /** `receivedAt` (epoch ms) stands in for a missing occurred_at. */
  parse(lines: Lines, receivedAt: number): Promise<ParsedLines>;
  /** Ends the worker thread, if any. Pending parses are still answered (on this thread). */
  close(): Promise<void>;
}

function parseHere(lines: Lines, receivedAt: number): Array<StorableLine | null> {
  return Array.from({ length: lines.length }, (_, i) => {
    const line = lines.at(i)!;
    return line.rejected ? null : toStorable(parseFeedLine(line.bytes, receivedAt));
  });
}

/** Results buffers kept for the next batches: one being filled, one being stored. */
const SPARE_BUFFERS = 2;

/** A parser thread with no batch for this long is ended (see retireWhenIdle), by default. */
export const IDLE_THREAD_MS = 5_000;

/** Batches of at most this many lines are parsed on the calling thread even by the worker parser. */
export const INLINE_LINES = 32;

/** Parses on the calling thread: for small inputs and as the fallback of the worker parser. */
export const inlineLineParser: LineParser = {
  parse: (lines, receivedAt) => Promise.resolve(parseHere(lines, receivedAt)),
  close: () => Promise.resolve(),
};

/**
 * Parses on one worker thread, so that a reader can parse the next batch while the main
 * thread commits the previous one (see the file tailer). The thread reads the lines where they
 * are, in a LineBatch's shared buffer; the results come back packed (see parsed-batch.ts).
 *
 * Should the worker fail, the error is logged and this and every later batch is parsed on the
 * calling thread: slower, never wrong.
 */
export function createWorkerLineParser(log: Logger, options: { idleThreadMs?: number } = {}): LineParser & { readonly threadRunning: boolean } {
  const idleThreadMs = options.idleThreadMs ?? IDLE_THREAD_MS;
  const parserLog = log.child({ subsystem: 'feed-parser' });
  let worker: Worker | null = null;
  let failed = false;
  let nextId = 0;
  const waiting = new Map<number, { resolve: (batch: PackedBatch) => void; reject: (err: Error) => void }>();
  // The buffers results come back in are used again once their batch is stored
  // (PackedLines.release). Left to the garbage collector they outlived every batch: tens of MB
  // of them waited for a full collection during a large ingest.
  const spareText: ArrayBuffer[] = [];
  const keepText = (text: ArrayBuffer) => {
    if (spareText.length < SPARE_BUFFERS) spareText.push(text);
  };

  function failAll(err: Error): void {
    for (const w of waiting.values()) w.reject(err);
    waiting.clear();
  }

  let idleTimer: NodeJS.Timeout | null = null;
  const retired = new WeakSet<Worker>();
  let retiring: Promise<void> = Promise.resolve();
  /**
   * Ends the thread once no batch has come for `idleThreadMs`: a thread that parsed a large
   * ingest keeps its heap (tens of MB) and nothing else ever gives it back. The next large
   * batch starts a new one (a few tens of ms, against the second a large batch takes).
   */
  function retireWhenIdle(w: Worker): void {
    if (idleTimer !== null) clearTimeout(idleTimer);
    idleTimer = setTimeout(() => {
      idleTimer = null;
      if (worker !== w || waiting.size > 0) return;
      worker = null;
      spareText.length = 0;
      retired.add(w);
      retiring = w.terminate().then(
        () => {},
        () => {},
      );
    }, idleThreadMs);
    idleTimer.unref();
  }

  function start(): Worker {
    const w = startWorker(new URL('./parse-worker.ts', import.meta.url));
    w.on('message', (message: ParseReply) => {
      const entryFor = waiting.get(message.id);
      waiting.delete(message.id);
      if (waiting.size === 0) {
        w.unref();
        retireWhenIdle(w);
      }
      entryFor?.resolve(message.batch);
    });
    w.on('error', (err) => {
      if (!failed) parserLog.error({ err }, 'feed parser thread failed; parsing on the main thread from now on');
      failed = true;
      worker = null;
      failAll(err);
    });
    w.on('exit', (code) => {
      // A retired thread had nothing pending; what is pending now belongs to its successor.
      if (retired.has(w)) {
        retired.delete(w);
        return;
      }
      worker = null;
      failAll(new Error(`feed parser thread exited with code ${code}`));
    });
    w.unref();
    return w;
  }

  function inWorker(lines: Lines, receivedAt: number): Promise<PackedBatch> {
    worker ??= start();
    // Lines that come as objects (a test, a caller of its own) are copied into a batch first.
    const { bytes, lengths } = (lines instanceof LineBatch ? lines : LineBatch.of(lines)).forParser();
    const total = bytes.length;
    const id = nextId++;
    // A results buffer large enough for what parseAndPack reserves, if one was given back.
    const t = spareText.findIndex((b) => b.byteLength >= packedCapacity(lengths.length, total));
    const text = t >= 0 ? spareText.splice(t, 1)[0]! : undefined;
    const request: ParseRequest = text === undefined ? { id, bytes, lengths, receivedAt } : { id, bytes, lengths, receivedAt, text };
    const w = worker;
    return new Promise<PackedBatch>((resolve, reject) => {
      waiting.set(id, { resolve, reject });
      w.ref();
      // The lines are shared, not transferred: the commit reads them again.
      w.postMessage(request, text === undefined ? [] : [text]);
    });
  }

  return {
    /** Whether a parser thread is up now (it is started by a large batch and ends when idle). */
    get threadRunning() {
      return worker !== null;
    },
    async parse(lines, receivedAt) {
      // A few lines (a feed appended to line by line) are parsed here: the trip to the thread
      // and back would cost more than the parsing, and add to every line's latency.
      if (failed || lines.length <= INLINE_LINES) return parseHere(lines, receivedAt);
      try {
        return new PackedLines(await inWorker(lines, receivedAt), keepText);
      } catch (err) {
        if (!failed) parserLog.error({ err }, 'feed parser thread failed; parsing on the main thread from now on');
        failed = true;
        return parseHere(lines, receivedAt);
      }
    },
    async close() {
      const w = worker;
      failed = true;
      worker = null;
      if (idleTimer !== null) clearTimeout(idleTimer);
      if (w) await w.terminate();
      await retiring;
    },
  };
}

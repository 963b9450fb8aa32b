import type { Worker } from 'node:worker_threads';
import { parseFeedLine, toStorable, type ParsedLines, type StorableLine } from '../domain/feed-event.ts';
import type { Logger } from '../log.ts';
import { startWorker } from '../worker-thread.ts';
import type { RawLine } from '../services/ingest.ts';
import { PackedLines, PRE_REJECTED, textCapacity, type PackedBatch } from './parsed-batch.ts';
import type { ParseReply, ParseRequest } from './parse-worker.ts';

/** Parses batches of feed lines; one result per line (reduced to what storing it takes), null for a line already rejected (`line.rejected`). */
export interface LineParser {
  /** `receivedAt` (epoch ms) stands in for a missing occurred_at. */
  parse(lines: readonly RawLine[], receivedAt: number): Promise<ParsedLines>;
  /** Ends the worker thread, if any. Pending parses are still answered (on this thread). */
  close(): Promise<void>;
}

function parseHere(lines: readonly RawLine[], receivedAt: number): Array<StorableLine | null> {
  return lines.map((line) => (line.rejected ? null : toStorable(parseFeedLine(line.bytes, receivedAt))));
}

/** Buffers kept for the next batches: one parsing, one being filled. */
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
 * thread commits the previous one (see the file tailer). The lines cross as one buffer that is
 * transferred, not copied; the results come back packed (see parsed-batch.ts).
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
  // The buffers lines cross in come back with their results and are used again. Left to the
  // thread's garbage collector they outlived every batch: an idle thread never collects, and
  // after a large ingest up to 60 MB of them were held by nothing but a thread with no work.
  const spare: ArrayBuffer[] = [];
  // The same for the buffers results come back in, once their batch is stored (PackedLines.release).
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
      spare.length = 0;
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
      if (spare.length < SPARE_BUFFERS) spare.push(message.bytes);
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

  /** A buffer of at least `size` bytes of its own (not a slice of Node's shared pool, so it can be transferred). */
  function takeBuffer(size: number): ArrayBuffer {
    const i = spare.findIndex((b) => b.byteLength >= size);
    if (i >= 0) return spare.splice(i, 1)[0]!;
    // Batches of one feed are much alike: a little room spares a new buffer for the next one.
    return new ArrayBuffer(Math.ceil(size * 1.125));
  }

  function inWorker(lines: readonly RawLine[], receivedAt: number): Promise<PackedBatch> {
    worker ??= start();
    let total = 0;
    for (const line of lines) if (!line.rejected) total += line.bytes.length;
    const bytes = new Uint8Array(takeBuffer(total), 0, total);
    const lengths = new Int32Array(lines.length);
    let offset = 0;
    lines.forEach((line, i) => {
      if (line.rejected) {
        lengths[i] = PRE_REJECTED;
        return;
      }
      bytes.set(line.bytes, offset);
      offset += line.bytes.length;
      lengths[i] = line.bytes.length;
    });
    const id = nextId++;
    // A results buffer large enough for what parseAndPack reserves, if one was given back.
    const t = spareText.findIndex((b) => b.byteLength >= textCapacity(total));
    const text = t >= 0 ? spareText.splice(t, 1)[0]! : undefined;
    const request: ParseRequest = text === undefined ? { id, bytes, lengths, receivedAt } : { id, bytes, lengths, receivedAt, text };
    const w = worker;
    return new Promise<PackedBatch>((resolve, reject) => {
      waiting.set(id, { resolve, reject });
      w.ref();
      w.postMessage(request, text === undefined ? [bytes.buffer, lengths.buffer as ArrayBuffer] : [bytes.buffer, lengths.buffer as ArrayBuffer, text]);
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

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

/** A batch sent to the parser thread, waiting for its results. */
interface PendingParse {
  readonly resolve: (batch: PackedBatch) => void;
  readonly reject: (err: Error) => void;
}

/**
 * Parses on one worker thread, so that a reader can parse the next batch while the main
 * thread commits the previous one (see the file tailer). The thread reads the lines where they
 * are, in a LineBatch's shared buffer; the results come back packed (see parsed-batch.ts).
 *
 * Should the worker fail, the error is logged and this and every later batch is parsed on the
 * calling thread: slower, never wrong.
 */
export class WorkerLineParser implements LineParser {
  readonly #log: Logger;
  readonly #idleThreadMs: number;
  /** The parser thread while one is up: started by a large batch, ended when idle (see retireWhenIdle). */
  #worker: Worker | null = null;
  /** A thread failed: every batch from now on is parsed on the calling thread. */
  #failed = false;
  #nextId = 0;
  /** Batches sent to the thread and not answered yet, by request id. */
  readonly #waiting = new Map<number, PendingParse>();
  /**
   * The buffers results come back in, used again once their batch is stored
   * (PackedLines.release): left to the garbage collector they outlive every batch, and tens of
   * MB of them wait for a full collection during a large ingest.
   */
  readonly #spareText: ArrayBuffer[] = [];
  #idleTimer: NodeJS.Timeout | null = null;
  /** Threads ended for being idle: their exit fails nothing. */
  readonly #retired = new WeakSet<Worker>();
  /** The end of the last thread retired, which close() awaits. */
  #retiring: Promise<void> = Promise.resolve();
  readonly #keepText = (text: ArrayBuffer): void => {
    if (this.#spareText.length < SPARE_BUFFERS) this.#spareText.push(text);
  };

  /** `idleThreadMs`: how long the thread lives without a batch (IDLE_THREAD_MS by default). */
  constructor(log: Logger, options: { idleThreadMs?: number } = {}) {
    this.#log = log.child({ subsystem: 'feed-parser' });
    this.#idleThreadMs = options.idleThreadMs ?? IDLE_THREAD_MS;
  }

  /** Whether a parser thread is up now (it is started by a large batch and ends when idle). */
  get threadRunning(): boolean {
    return this.#worker !== null;
  }

  async parse(lines: Lines, receivedAt: number): Promise<ParsedLines> {
    // A few lines (a feed appended to line by line) are parsed here: the trip to the thread
    // and back would cost more than the parsing, and add to every line's latency.
    if (this.#failed || lines.length <= INLINE_LINES) return parseHere(lines, receivedAt);
    try {
      return new PackedLines(await this.#inWorker(lines, receivedAt), this.#keepText);
    } catch (err) {
      if (!this.#failed) this.#log.error({ err }, 'feed parser thread failed; parsing on the main thread from now on');
      this.#failed = true;
      return parseHere(lines, receivedAt);
    }
  }

  async close(): Promise<void> {
    const w = this.#worker;
    this.#failed = true;
    this.#worker = null;
    if (this.#idleTimer !== null) clearTimeout(this.#idleTimer);
    if (w) await w.terminate();
    await this.#retiring;
  }

  #inWorker(lines: Lines, receivedAt: number): Promise<PackedBatch> {
    const w = (this.#worker ??= this.#startThread());
    // Lines that come as objects (a test, a caller of its own) are copied into a batch first.
    const { bytes, lengths } = (lines instanceof LineBatch ? lines : LineBatch.of(lines)).forParser();
    const id = this.#nextId++;
    // A results buffer large enough for what parseAndPack reserves, if one was given back.
    const t = this.#spareText.findIndex((b) => b.byteLength >= packedCapacity(lengths.length, bytes.length));
    const text = t >= 0 ? this.#spareText.splice(t, 1)[0]! : undefined;
    const request: ParseRequest = text === undefined ? { id, bytes, lengths, receivedAt } : { id, bytes, lengths, receivedAt, text };
    return new Promise<PackedBatch>((resolve, reject) => {
      this.#waiting.set(id, { resolve, reject });
      w.ref();
      // The lines are shared, not transferred: the commit reads them again.
      w.postMessage(request, text === undefined ? [] : [text]);
    });
  }

  #startThread(): Worker {
    const w = startWorker(new URL('./parse-worker.ts', import.meta.url));
    w.on('message', (message: ParseReply) => this.#answered(w, message));
    w.on('error', (err) => this.#threadFailed(err));
    w.on('exit', (code) => this.#threadExited(w, code));
    w.unref();
    return w;
  }

  #answered(w: Worker, message: ParseReply): void {
    const pending = this.#waiting.get(message.id);
    this.#waiting.delete(message.id);
    if (this.#waiting.size === 0) {
      w.unref();
      this.#retireWhenIdle(w);
    }
    pending?.resolve(message.batch);
  }

  #threadFailed(err: Error): void {
    if (!this.#failed) this.#log.error({ err }, 'feed parser thread failed; parsing on the main thread from now on');
    this.#failed = true;
    this.#worker = null;
    this.#failAll(err);
  }

  #threadExited(w: Worker, code: number): void {
    // A retired thread had nothing pending; what is pending now belongs to its successor.
    if (this.#retired.has(w)) {
      this.#retired.delete(w);
      return;
    }
    this.#worker = null;
    this.#failAll(new Error(`feed parser thread exited with code ${code}`));
  }

  /**
   * Ends the thread once no batch has come for `idleThreadMs`: a thread that parsed a large
   * ingest keeps its heap (tens of MB) and nothing else ever gives it back. The next large
   * batch starts a new one (a few tens of ms, against the second a large batch takes).
   */
  #retireWhenIdle(w: Worker): void {
    if (this.#idleTimer !== null) clearTimeout(this.#idleTimer);
    this.#idleTimer = setTimeout(() => {
      this.#idleTimer = null;
      if (this.#worker !== w || this.#waiting.size > 0) return;
      this.#worker = null;
      this.#spareText.length = 0;
      this.#retired.add(w);
      this.#retiring = w.terminate().then(
        () => {},
        () => {},
      );
    }, this.#idleThreadMs);
    this.#idleTimer.unref();
  }

  #failAll(err: Error): void {
    for (const pending of this.#waiting.values()) pending.reject(err);
    this.#waiting.clear();
  }
}

/** The parser on a worker thread (see WorkerLineParser). */
export function createWorkerLineParser(log: Logger, options: { idleThreadMs?: number } = {}): WorkerLineParser {
  return new WorkerLineParser(log, options);
}

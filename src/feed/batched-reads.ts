import { readSync } from 'node:fs';
import type { FileHandle, FileReadResult } from 'node:fs/promises';
import { setImmediate as yieldToEventLoop } from 'node:timers/promises';
import type { ParsedLines } from '../domain/feed-event.ts';
import { BatchPipeline } from './batch-pipeline.ts';
import { sizeOf, type Identity, type OpenFeed } from './feed-file.ts';
import { BatchFiller, type LineBatch } from './line-batch.ts';
import type { LineParser } from './line-parser.ts';
import type { LineSplitter } from './line-splitter.ts';

/**
 * Largest read. 1 MiB reads ingest as fast as 4 MiB ones (docs/benchmarks.md, "Memory"); a reader
 * reads into two such buffers in turn.
 */
const READ_CHUNK_BYTES = 1 << 20;
const FIRST_READ_CHUNK_BYTES = 64 << 10;
/** Up to this many bytes past the position are read synchronously (see readWaiting). */
const SMALL_READ_BYTES = 64 << 10;

/** A feed file being read: the open file, the splitter at the reader's position in it, and what is known of its identity. */
export interface TailedFile {
  readonly feed: OpenFeed;
  readonly splitter: LineSplitter;
  readonly identity: Identity;
}

export interface BatchedReadsOptions {
  readonly parser: LineParser;
  /** Epoch ms: the time a batch is parsed at. */
  readonly now: () => number;
  readonly batchLines: number;
  readonly batchBytes: number;
  /** Stores a batch of `file`'s lines with `end`, the offset after the last one, as the feed's position. */
  readonly commit: (file: TailedFile, lines: LineBatch, end: number, parsed: ParsedLines) => Promise<void>;
}

/** One read of a file to its end: the batches it fills and the pipeline that parses and commits them. */
interface ReadPass {
  readonly file: TailedFile;
  readonly batches: BatchFiller;
  readonly pipeline: BatchPipeline<number>;
  /** Runs after each batch; false: stop reading (see betweenBatches). */
  readonly between: () => Promise<boolean>;
}

/**
 * Reads feed files from the reader's position to their end, committing a batch (with the offset
 * after its last line) every `batchLines` lines or `batchBytes` bytes, and at the end. Batches
 * are pipelined (see BatchPipeline): while one is committed, the next one is parsed.
 */
export class BatchedReads {
  readonly #options: BatchedReadsOptions;

  constructor(options: BatchedReadsOptions) {
    this.#options = options;
  }

  /**
   * Reads `file` from its splitter's position to the current end. When `signal` is aborted it
   * returns after the batches in progress are committed, possibly before the end of the file.
   * Returns the bytes read.
   */
  async readToEnd(file: TailedFile, signal: AbortSignal): Promise<number> {
    const offset = file.splitter.consumed + file.splitter.pendingBytes;
    const waiting = sizeOf(file.feed.fh) - offset;
    if (waiting <= 0) return 0;
    const pass = this.#pass(file, signal);
    try {
      return waiting <= SMALL_READ_BYTES ? await readWaiting(pass, offset, waiting) : await readChunks(pass, offset);
    } finally {
      await pass.pipeline.abandon();
    }
  }

  #pass(file: TailedFile, signal: AbortSignal): ReadPass {
    const { parser, now, batchLines, batchBytes, commit } = this.#options;
    const pipeline = new BatchPipeline<number>(parser, now, (lines, parsed, end) => commit(file, lines, end, parsed));
    // A batch ends with the last complete line: its end is where reading resumes.
    const batches = new BatchFiller(batchLines, batchBytes, (lines) => pipeline.submit(lines, file.splitter.consumed));
    return { file, batches, pipeline, between: () => betweenBatches(signal) };
  }
}

/**
 * Reads the `waiting` bytes past `offset` at once, synchronously. What a file appended to line
 * by line holds past the position is small and was just written (in the page cache): this
 * spares the round trips through libuv's pool of a read and of the read that finds the end.
 * Lines appended meanwhile are read at the next turn (the reader reads again after data).
 */
async function readWaiting(pass: ReadPass, offset: number, waiting: number): Promise<number> {
  const chunk = Buffer.allocUnsafe(waiting);
  const bytesRead = readSync(pass.file.feed.fh.fd, chunk, 0, waiting, offset);
  await pass.batches.push(pass.file.splitter, chunk.subarray(0, bytesRead), pass.between);
  await commitRest(pass);
  return bytesRead;
}

/** Reads from `offset` to the end of the file in chunks (see ChunkReads), or until stopped. */
async function readChunks(pass: ReadPass, offset: number): Promise<number> {
  const chunks = new ChunkReads(pass.file.feed.fh, offset);
  try {
    for (let chunk = await chunks.next(); chunk !== null; chunk = await chunks.next()) {
      if (!(await pass.batches.push(pass.file.splitter, chunk, pass.between))) break;
    }
    await commitRest(pass);
  } finally {
    // A commit that failed leaves the next read in flight: it is awaited here, before the
    // caller closes the file under it (its failure would otherwise go unhandled).
    await chunks.settle();
  }
  return chunks.bytesRead;
}

/** Runs after each batch is handed on; false when reading is to stop. */
async function betweenBatches(signal: AbortSignal): Promise<boolean> {
  // Every commit blocks this thread on fsync: let the admin API, the dispatcher and a stop
  // request run between batches.
  await yieldToEventLoop();
  // Stopping must not wait for the rest of a large file: the position is committed and the
  // next start reads on from it. The rest of the chunk is dropped with the splitter, which the
  // caller discards when stopped.
  return !signal.aborted;
}

/** Commits the batch being filled and the one in the pipeline: the end of a read pass. */
async function commitRest(pass: ReadPass): Promise<void> {
  await pass.batches.flush();
  await pass.pipeline.drain();
}

/**
 * Reads a file in chunks, double-buffered: the next chunk is read (in libuv's pool) while the
 * one before is cut into lines, into the other of two buffers (the lines are copied out of a
 * chunk before its buffer is read into again). Chunks start small and grow while they come back
 * full: a file appended to line by line is read often, a few lines at a time.
 */
class ChunkReads {
  readonly #fh: FileHandle;
  readonly #buffers: Buffer[] = [];
  #turn = 0;
  #chunkBytes = FIRST_READ_CHUNK_BYTES;
  #offset: number;
  #next: Promise<FileReadResult<Buffer>>;
  /** Bytes read so far. */
  bytesRead = 0;

  /** Starts the first read, at `offset`. */
  constructor(fh: FileHandle, offset: number) {
    this.#fh = fh;
    this.#offset = offset;
    this.#next = this.#read();
  }

  /**
   * The next chunk, null at the end of the file; the read of the chunk after it starts at once.
   * A chunk is a view of one of the two buffers: valid until next() is called again.
   */
  async next(): Promise<Buffer | null> {
    const { bytesRead, buffer } = await this.#next;
    if (bytesRead === 0) return null;
    this.bytesRead += bytesRead;
    this.#offset += bytesRead;
    if (bytesRead === this.#chunkBytes) this.#chunkBytes = Math.min(this.#chunkBytes * 4, READ_CHUNK_BYTES);
    this.#next = this.#read();
    return buffer.subarray(0, bytesRead);
  }

  /** Awaits the read in flight, whatever its outcome. */
  settle(): Promise<void> {
    return this.#next.then(
      () => {},
      () => {},
    );
  }

  #read(): Promise<FileReadResult<Buffer>> {
    this.#turn ^= 1;
    if ((this.#buffers[this.#turn]?.length ?? 0) < this.#chunkBytes) this.#buffers[this.#turn] = Buffer.allocUnsafeSlow(this.#chunkBytes);
    return this.#fh.read(this.#buffers[this.#turn]!, 0, this.#chunkBytes, this.#offset);
  }
}

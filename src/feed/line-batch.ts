import type { Lines, RawLine } from '../services/ingest.ts';
import type { LineSink, LineSplitter } from './line-splitter.ts';

type Rejection = NonNullable<RawLine['rejected']>;

/** What a batch is built in, handed from batch to batch (see LineBatches). */
interface Storage {
  buffer: Buffer;
  starts: Int32Array;
  codes: Int32Array;
  positions: Float64Array;
}

const FIRST_BYTES = 64 << 10;
const FIRST_LINES = 256;

function sharedBytes(size: number): Buffer {
  return Buffer.from(new SharedArrayBuffer(size));
}

function sharedInts(count: number): Int32Array {
  return new Int32Array(new SharedArrayBuffer(count * 4));
}

/**
 * Makes room for `needed` bytes of lines in `s`, of which the first `used` are kept. By half,
 * not double: the last growth sets the size of the buffers that then serve every batch.
 */
function growBuffer(s: Storage, used: number, needed: number): void {
  const grown = sharedBytes(Math.max(Math.ceil(s.buffer.length * 1.5), needed));
  s.buffer.copy(grown, 0, 0, used);
  s.buffer = grown;
}

/** Doubles the number of lines `s` has room for. */
function growIndex(s: Storage): void {
  const size = s.starts.length * 2;
  s.starts = copiedInto(s.starts, new Int32Array(size));
  s.codes = copiedInto(s.codes, sharedInts(size));
  s.positions = copiedInto(s.positions, new Float64Array(size));
}

function copiedInto<T extends Int32Array | Float64Array>(from: T, to: T): T {
  to.set(from);
  return to;
}

/**
 * A batch of feed lines in one buffer, back to back, with their offsets, lengths and file
 * positions beside them in typed arrays and the (rare) rejections in a map.
 *
 * Lines as objects, each with a view of the read buffer it is cut from, would be tens of
 * thousands of small objects per large ingest that live through a parse and a commit (and are
 * promoted to the old generation meanwhile), and would keep read buffers alive for the sake of a
 * few lines each. Here a line costs its bytes in the batch's buffer and three numbers; the read
 * buffer is free as soon as its lines are copied, and a line object (`at`) exists only while it
 * is stored.
 *
 * The bytes and lengths are in SharedArrayBuffers: the parser thread reads the lines where they
 * are (see line-parser.ts), no copy and no transfer, and they are still here for the commit
 * (quarantine and duplicate checks need their bytes).
 */
export class LineBatch implements Lines, LineSink {
  #storage: Storage | null;
  #count = 0;
  #bytes = 0;
  #sourceBytes = 0;
  #rejected: Map<number, Rejection> | null = null;
  readonly #maxLines: number;
  readonly #maxBytes: number;
  readonly #onRelease: ((storage: Storage) => void) | null;

  /** Full at `maxLines` lines or `maxBytes` bytes of lines, whichever comes first. */
  constructor(maxLines: number, maxBytes: number, storage?: Storage, onRelease?: (storage: Storage) => void) {
    this.#maxLines = maxLines;
    this.#maxBytes = maxBytes;
    this.#storage = storage ?? {
      buffer: sharedBytes(Math.min(FIRST_BYTES, Math.max(maxBytes, 1024))),
      starts: new Int32Array(FIRST_LINES),
      codes: sharedInts(FIRST_LINES),
      positions: new Float64Array(FIRST_LINES),
    };
    this.#onRelease = onRelease ?? null;
  }

  /** A batch holding copies of `lines` (for lines that come as objects), with no limit. */
  static of(lines: Lines): LineBatch {
    const batch = new LineBatch(Infinity, Infinity);
    for (let i = 0; i < lines.length; i++) batch.add(lines.at(i)!);
    return batch;
  }

  get length(): number {
    return this.#count;
  }

  /** Bytes of the lines held (for an over-long line, of the prefix kept). */
  get byteLength(): number {
    return this.#bytes;
  }

  /** Bytes of the source the lines stand for: each line's full length and its newline. */
  get sourceBytes(): number {
    return this.#sourceBytes;
  }

  get full(): boolean {
    return this.#count >= this.#maxLines || this.#bytes >= this.#maxBytes;
  }

  /** Copies `line` in: its bytes may belong to a buffer that is used again afterwards. */
  add(line: RawLine): void {
    const s = this.#live();
    const length = line.bytes.length;
    if (this.#bytes + length > s.buffer.length) growBuffer(s, this.#bytes, this.#bytes + length);
    if (this.#count === s.starts.length) growIndex(s);
    const i = this.#count++;
    s.buffer.set(line.bytes, this.#bytes);
    s.starts[i] = this.#bytes;
    s.positions[i] = line.position ?? NaN;
    if (line.rejected) {
      (this.#rejected ??= new Map()).set(i, line.rejected);
      s.codes[i] = -1 - length;
      this.#sourceBytes += line.rejected.lineBytes + 1;
    } else {
      s.codes[i] = length;
      this.#sourceBytes += length + 1;
    }
    this.#bytes += length;
  }

  /** The line at `index`, made when asked for: its bytes are a view of this batch's buffer. */
  at(index: number): RawLine | undefined {
    const s = this.#live();
    if (!Number.isInteger(index) || index < 0 || index >= this.#count) return undefined;
    const start = s.starts[index]!;
    const code = s.codes[index]!;
    const bytes = s.buffer.subarray(start, start + (code < 0 ? -1 - code : code));
    const p = s.positions[index]!;
    const position = Number.isNaN(p) ? null : p;
    const rejected = code < 0 ? this.#rejected?.get(index) : undefined;
    return rejected ? { bytes, position, rejected } : { bytes, position };
  }

  /**
   * The lines as the parser takes them (parseAndPack), views of shared buffers (not copies):
   * their bytes back to back, and per line its length, or -1 - its length for a line rejected
   * before parsing (skipped).
   */
  forParser(): { bytes: Uint8Array; lengths: Int32Array } {
    const s = this.#live();
    return { bytes: new Uint8Array(s.buffer.buffer, s.buffer.byteOffset, this.#bytes), lengths: new Int32Array(s.codes.buffer, 0, this.#count) };
  }

  /**
   * Hands the buffer on to the next batch once these lines are stored (and parsed: nothing
   * reads it any more); this batch must not be read again.
   */
  release(): void {
    const storage = this.#live();
    this.#storage = null;
    this.#onRelease?.(storage);
  }

  #live(): Storage {
    if (this.#storage === null) throw new Error('line batch read after it was released');
    return this.#storage;
  }
}

/** Bytes of the source `lines` stand for (each line's full length and its newline). */
export function sourceBytes(lines: Lines): number {
  if (lines instanceof LineBatch) return lines.sourceBytes;
  let total = 0;
  for (let i = 0; i < lines.length; i++) {
    const line = lines.at(i)!;
    total += (line.rejected?.lineBytes ?? line.bytes.length) + 1;
  }
  return total;
}

/** Batches kept for reuse: one being filled, one parsing, one being stored, then one is free again. */
const SPARE = 2;

/**
 * Makes the batches of one reader, each with the buffer of a batch already stored when there
 * is one: a large ingest cycles through three buffers instead of one per batch, each waiting
 * for a garbage collection. `dropSpare` lets them go when the reader waits for more input.
 */
export class LineBatches {
  readonly #maxLines: number;
  readonly #maxBytes: number;
  readonly #spare: Storage[] = [];
  readonly #keep = (storage: Storage) => {
    if (this.#spare.length < SPARE) this.#spare.push(storage);
  };

  constructor(maxLines: number, maxBytes: number) {
    this.#maxLines = maxLines;
    this.#maxBytes = maxBytes;
  }

  next(): LineBatch {
    return new LineBatch(this.#maxLines, this.#maxBytes, this.#spare.pop(), this.#keep);
  }

  dropSpare(): void {
    this.#spare.length = 0;
  }
}

/**
 * The batch a reader is filling: lines cut from each chunk read go into it, and each batch that
 * fills up is handed to `submit` (the reader's BatchPipeline) and a new one started.
 */
export class BatchFiller {
  readonly #batches: LineBatches;
  readonly #submit: (batch: LineBatch) => Promise<void>;
  #batch: LineBatch | null = null;

  constructor(maxLines: number, maxBytes: number, submit: (batch: LineBatch) => Promise<void>) {
    this.#batches = new LineBatches(maxLines, maxBytes);
    this.#submit = submit;
  }

  /**
   * Adds the complete lines of `chunk` (cut by `splitter`), submitting every batch that fills
   * up; after each, `between` runs, and when it answers false the rest of the chunk is left
   * (push then returns false). `chunk` is not referred to afterwards.
   */
  async push(splitter: LineSplitter, chunk: Buffer, between?: () => Promise<boolean>): Promise<boolean> {
    for (;;) {
      const batch = (this.#batch ??= this.#batches.next());
      chunk = chunk.subarray(splitter.pushInto(chunk, batch));
      if (!batch.full) return true;
      await this.flush();
      if (between !== undefined && !(await between())) return false;
    }
  }

  /** Adds one line (the last, unterminated one of a stream) to the batch being filled. */
  add(line: RawLine): void {
    (this.#batch ??= this.#batches.next()).add(line);
  }

  /** Submits the batch being filled, if it holds any line. */
  async flush(): Promise<void> {
    const batch = this.#batch;
    if (batch === null || batch.length === 0) return;
    this.#batch = null;
    await this.#submit(batch);
  }

  /** Lets the buffers of stored batches go (a reader waiting for more input). */
  dropSpare(): void {
    this.#batches.dropSpare();
  }
}

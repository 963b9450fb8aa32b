import { RejectReason } from '../domain/feed-event.ts';
import { MAX_QUARANTINED_BYTES, type RawLine } from '../services/ingest.ts';

const NEWLINE = 0x0a;

/** A complete line and the offset just past its newline (where a reader resumes after it). */
export interface SplitLine {
  readonly line: RawLine;
  readonly end: number;
}

/**
 * Where pushInto copies lines: a LineBatch (line-batch.ts). Named here, by what the splitter needs
 * of it, so that the splitter does not import the batch that imports it (no import cycle).
 */
export interface LineSink {
  add(line: RawLine): void;
  /** True once the sink takes no more lines. */
  readonly full: boolean;
}

/**
 * Splits a byte stream into `\n`-terminated lines with their byte offsets. An unterminated
 * tail is held (never emitted) until its newline arrives. A line longer than `maxLineBytes`
 * is not buffered: only its first bytes are kept, the rest skipped, and it comes out as a
 * `line_too_long` reject once its newline is seen.
 */
export class LineSplitter {
  readonly #maxLineBytes: number;
  #parts: Buffer[] = [];
  #partBytes = 0;
  /** Offset of the first byte of the unterminated line. */
  #lineStart: number;
  /** Total bytes of the current line while it is being skipped (over the limit); -1 otherwise. */
  #skipped = -1;

  constructor(maxLineBytes: number, start = 0) {
    this.#maxLineBytes = maxLineBytes;
    this.#lineStart = start;
  }

  /** Offset just past the last complete line: where reading resumes after a restart. */
  get consumed(): number {
    return this.#lineStart;
  }

  /** Bytes held for the unterminated line (0 when the stream ended on a newline). */
  get pendingBytes(): number {
    return this.#skipped >= 0 ? this.#skipped : this.#partBytes;
  }

  /** Forgets any partial line and restarts at `position`. */
  reset(position: number): void {
    this.#parts = [];
    this.#partBytes = 0;
    this.#skipped = -1;
    this.#lineStart = position;
  }

  /** Feeds the next bytes of the stream (which must directly follow the previous ones); returns its complete lines, views of `chunk` where they can be. */
  push(chunk: Buffer): SplitLine[] {
    const out: SplitLine[] = [];
    this.#split(chunk, (line, end) => {
      out.push({ line, end });
      return false;
    });
    return out;
  }

  /**
   * Feeds the next bytes of the stream and copies its complete lines into `batch` until the
   * batch is full. Returns how many bytes of `chunk` were taken: the rest is to be pushed again
   * (into the next batch). `chunk` can be used again afterwards: nothing refers to it.
   */
  pushInto(chunk: Buffer, batch: LineSink): number {
    return this.#split(chunk, (line) => {
      batch.add(line);
      return batch.full;
    });
  }

  /** Cuts `chunk` into lines for `take`, until it returns true (after a complete line); returns the bytes of `chunk` consumed. */
  #split(chunk: Buffer, take: (line: RawLine, end: number) => boolean): number {
    let from = 0;
    while (from < chunk.length) {
      const nl = chunk.indexOf(NEWLINE, from);
      if (nl !== -1 && this.#partBytes === 0 && this.#skipped < 0 && nl - from <= this.#maxLineBytes) {
        // The common case, a whole line inside this chunk: a view of it, nothing copied or held.
        const end = this.#lineStart + (nl - from) + 1;
        const line = { bytes: chunk.subarray(from, nl), position: this.#lineStart };
        this.#lineStart = end;
        from = nl + 1;
        if (take(line, end)) return from;
        continue;
      }
      const stop = nl === -1 ? chunk.length : nl;
      this.#append(chunk.subarray(from, stop), nl === -1);
      if (nl === -1) break;
      const length = this.pendingBytes;
      const end = this.#lineStart + length + 1;
      const line = this.#takeLine(length);
      this.#lineStart = end;
      from = nl + 1;
      if (take(line, end)) return from;
    }
    return chunk.length;
  }

  /** The unterminated remainder, if any, as a line (for a stream that has ended); clears it. */
  takeIncomplete(asReject?: { reason: RejectReason; detail: string }): SplitLine | null {
    const length = this.pendingBytes;
    if (length === 0) return null;
    const wasSkipped = this.#skipped >= 0;
    const line = this.#takeLine(length);
    const end = this.#lineStart + length;
    this.#lineStart = end;
    if (asReject && !wasSkipped) {
      return { line: { ...line, rejected: { reason: asReject.reason, lineBytes: length, detail: asReject.detail } }, end };
    }
    return { line, end };
  }

  #append(bytes: Buffer, mayBeReused: boolean): void {
    if (bytes.length === 0) return;
    if (this.#skipped >= 0) {
      // Top the kept prefix up to what the quarantine stores, so the record does not depend on
      // how the input happened to be chunked (with a limit below 16 KiB it could be cut short).
      if (this.#partBytes < MAX_QUARANTINED_BYTES) {
        const more = Buffer.from(bytes.subarray(0, MAX_QUARANTINED_BYTES - this.#partBytes));
        this.#parts.push(more);
        this.#partBytes += more.length;
      }
      this.#skipped += bytes.length;
      return;
    }
    if (this.#partBytes + bytes.length > this.#maxLineBytes) {
      // Keep only what the quarantine will store; count the rest.
      const keep = Buffer.concat([...this.#parts, bytes]).subarray(0, MAX_QUARANTINED_BYTES);
      this.#skipped = this.#partBytes + bytes.length;
      this.#parts = [Buffer.from(keep)];
      this.#partBytes = keep.length;
      return;
    }
    // A tail that waits for more data must not alias a read buffer the caller will reuse.
    this.#parts.push(mayBeReused ? Buffer.from(bytes) : bytes);
    this.#partBytes += bytes.length;
  }

  #takeLine(length: number): RawLine {
    const bytes = this.#parts.length === 1 ? this.#parts[0]! : Buffer.concat(this.#parts);
    const line: RawLine =
      this.#skipped >= 0
        ? {
            bytes,
            position: this.#lineStart,
            rejected: { reason: RejectReason.lineTooLong, lineBytes: length, detail: `the line is ${length} bytes, over the limit of ${this.#maxLineBytes} (feed.maxLineBytes)` },
          }
        : { bytes, position: this.#lineStart };
    this.#parts = [];
    this.#partBytes = 0;
    this.#skipped = -1;
    return line;
  }
}

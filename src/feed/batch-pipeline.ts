import type { ParsedLines } from '../domain/feed-event.ts';
import type { LineBatch } from './line-batch.ts';
import type { LineParser } from './line-parser.ts';

/**
 * Overlaps parsing with committing: a batch handed in is given to the parser (a worker
 * thread) at once, and the batch handed in before it is committed (SQLite, on this thread)
 * meanwhile. Commits run one at a time, in the order the batches were handed in; at most two
 * batches are held, the one parsing and the one committing.
 *
 * `M` is what the commit needs to know besides the lines (a file position, say).
 */
export class BatchPipeline<M> {
  readonly #parser: LineParser;
  readonly #now: () => number;
  readonly #commit: (lines: LineBatch, parsed: ParsedLines, meta: M) => unknown;
  #parsing: { lines: LineBatch; meta: M; parsed: Promise<ParsedLines> } | null = null;

  /** `now` gives the time a batch is parsed at (it stands in for a missing occurred_at). */
  constructor(parser: LineParser, now: () => number, commit: (lines: LineBatch, parsed: ParsedLines, meta: M) => unknown) {
    this.#parser = parser;
    this.#now = now;
    this.#commit = commit;
  }

  /** Hands `lines` to the parser, then commits the batch handed in before (if any); resolves when that commit is done. */
  async submit(lines: LineBatch, meta: M): Promise<void> {
    const previous = this.#parsing;
    const parsed = this.#parser.parse(lines, this.#now());
    // Awaited by the next submit or by drain; dropped (with its error) if an error ends the reader first.
    parsed.catch(() => {});
    this.#parsing = { lines, meta, parsed };
    if (previous) await this.#commitParsed(previous);
  }

  /**
   * Commits a parsed batch, then hands on what its lines and results were held in, to be
   * filled again (not after a failed commit: the buffers are dropped with the batch then).
   */
  async #commitParsed(batch: { lines: LineBatch; meta: M; parsed: Promise<ParsedLines> }): Promise<void> {
    const parsed = await batch.parsed;
    await this.#commit(batch.lines, parsed, batch.meta);
    parsed.release?.();
    batch.lines.release();
  }

  /** Commits the batch still held, if any. */
  async drain(): Promise<void> {
    const last = this.#parsing;
    this.#parsing = null;
    if (last) await this.#commitParsed(last);
  }

  /** Forgets the batch still held (after an error), once its parse has finished, so that nothing runs on behind the caller. */
  async abandon(): Promise<void> {
    const last = this.#parsing;
    this.#parsing = null;
    await last?.parsed.catch(() => {});
  }
}

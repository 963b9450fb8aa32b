import type { FeedProblem } from './feed-file.ts';

/**
 * A reader that fails this many times in a row without committing anything in between is
 * stuck: it restarts from the same committed position each time, so the same failure is met
 * again. Three failures are three seconds (the tailer restarts after one): a passing fault
 * (a file replaced while read) fails once or twice at most.
 */
export const STUCK_AFTER_FAILURES = 3;

/**
 * What the feed reader's failures add up to, for /readyz, `hookrelay status` (which asks
 * /readyz) and the metrics. A line's own content never fails the reader (it is quarantined);
 * what does is a fault of the store that storage health does not classify, a bug, or a file the
 * reader cannot get past. Whatever the cause, a reader that keeps failing at one position makes
 * the daemon not ready, with the reason, until a commit gets past it.
 */
export class FeedReaderFaults {
  readonly #now: () => number;
  /** Failures since the reader started (the counter hookrelay_feed_reader_failures_total). */
  failures = 0;
  /** Failures in a row with no commit in between. */
  #inARow = 0;
  #problem: FeedProblem | null = null;

  /** `now` gives epoch ms (the `since` of the problem). */
  constructor(now: () => number) {
    this.#now = now;
  }

  /**
   * The reader failed at `where` (a position in words: "byte 1234 of /var/feed.jsonl"); returns
   * true when this failure makes it stuck (said once, when it becomes so).
   */
  failed(err: unknown, where: string): boolean {
    this.failures++;
    this.#inARow++;
    const message = err instanceof Error ? err.message : String(err);
    if (this.#inARow < STUCK_AFTER_FAILURES) return false;
    const wasStuck = this.#problem !== null;
    this.#problem = {
      reason: 'feed_reader_failing',
      detail: `the feed reader has failed ${this.#inARow} times in a row at ${where} (${message}); nothing after it is read. The daemon's log has each failure; see docs/feed.md, "When the reader fails"`,
      since: this.#problem?.since ?? this.#now(),
    };
    return !wasStuck;
  }

  /** The reader ended for good (standard input, which cannot be read again): not ready until the daemon restarts. */
  ended(err: unknown, where: string): void {
    this.failures++;
    const message = err instanceof Error ? err.message : String(err);
    this.#problem = { reason: 'feed_reader_failing', detail: `the feed reader stopped at ${where} (${message}); nothing more is read until the daemon restarts`, since: this.#now() };
  }

  /** A batch of lines committed: the reader got past wherever it failed. Returns true when it was stuck. */
  committed(): boolean {
    this.#inARow = 0;
    const was = this.#problem !== null;
    this.#problem = null;
    return was;
  }

  /** Why the reader cannot get on, or null. */
  problem(): FeedProblem | null {
    return this.#problem;
  }

  get stuck(): boolean {
    return this.#problem !== null;
  }
}

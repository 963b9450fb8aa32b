/**
 * Progress of a long CLI operation (ingest, deliveries recover, db prune, db backup): one line on
 * stderr, rewritten in place, such as
 *
 *   ingest: 412000 lines, 38210 lines/s, 41 %
 *
 * shown only when stderr is a terminal, so pipes, files, journald and tests see nothing of it
 * (the command's result on stdout is never mixed with it). The line is cleared when the
 * operation ends, before the result is printed.
 */

/** Redraws at most this often (ms). */
const REDRAW_MS = 200;

export interface Progress {
  /**
   * `done` units so far; `fraction` (0..1) of the whole when it is known (bytes read of a file's
   * size, events of a window). Cheap to call often: the line is redrawn at most every 200 ms.
   */
  update(done: number, fraction?: number): void;
  /** Clears the line (idempotent). */
  end(): void;
}

export interface ProgressOptions {
  /** What is counted, plural: "lines", "events", "rows", "pages". */
  readonly unit: string;
  /** Where to draw; stderr by default. */
  readonly stream?: NodeJS.WriteStream;
  /** Whether to draw at all; by default when `stream` is a terminal. */
  readonly enabled?: boolean;
  /** Clock for the rate (ms); performance.now by default. */
  readonly now?: () => number;
}

const silent: Progress = { update: () => {}, end: () => {} };

/** Starts the progress line of `label` (the command: "ingest", "recover"). */
export function startProgress(label: string, options: ProgressOptions): Progress {
  const stream = options.stream ?? process.stderr;
  if (!(options.enabled ?? stream.isTTY === true)) return silent;
  const now = options.now ?? (() => performance.now());
  const started = now();
  let drawnAt = Number.NEGATIVE_INFINITY;
  let drawn = false;
  return {
    update(done, fraction) {
      const at = now();
      if (at - drawnAt < REDRAW_MS) return;
      drawnAt = at;
      const seconds = (at - started) / 1000;
      const parts = [`${label}: ${done} ${options.unit}`];
      if (seconds >= 0.5) parts.push(`${Math.round(done / seconds)} ${options.unit}/s`);
      if (fraction !== undefined && Number.isFinite(fraction)) parts.push(`${Math.min(100, Math.floor(fraction * 100))} %`);
      // Carriage return, the line, then erase to its end (a shorter line leaves no tail).
      stream.write(`\r${parts.join(', ')}\x1b[K`);
      drawn = true;
    },
    end() {
      if (drawn) stream.write('\r\x1b[K');
      drawn = false;
    },
  };
}

/** Seconds and rate of a finished operation, for its summary: "1000000 lines in 41.2 s, 24272 lines/s". */
export function rateSummary(count: number, unit: string, seconds: number): { text: string; seconds: number; perSecond: number } {
  const perSecond = seconds > 0 ? Math.round(count / seconds) : count;
  const shown = seconds < 10 ? seconds.toFixed(2) : seconds.toFixed(1);
  return { text: `${count} ${unit} in ${shown} s, ${perSecond} ${unit}/s`, seconds: Number(seconds.toFixed(3)), perSecond };
}

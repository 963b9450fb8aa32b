/**
 * A webhook's rate limit: at most `limit` deliveries start in any one-second window.
 *
 * The limiter is a sliding log of the deliveries started lately, kept as batches (the time of
 * a claim and how many deliveries it started), so its size follows the claims of the last
 * second, not the rate: a claim may start `limit` minus the deliveries started in the last
 * RATE_SPAN_MS. That is the exact form of "a token bucket with a burst of one second's worth"
 * that holds the bound in every window: a plain bucket that starts full lets its burst through
 * and then refills during the same second, so up to twice the limit start in the first second
 * of a backlog. Here, after a second without deliveries up to `limit` may start at once, and
 * none more until the first of them is RATE_SPAN_MS old.
 *
 * The span is a second plus RATE_MARGIN_MS: a delivery is counted when it is claimed, and its
 * request reaches the receiver a little later (the commit, the network), later for some than
 * for others; the margin keeps that jitter from putting more than `limit` requests into one
 * second as the receiver counts them. Under a backlog the webhook gets `limit` deliveries per
 * RATE_SPAN_MS (20/s: 18 a second).
 *
 * Times are epoch ms of one clock (the dispatcher's on SQLite, the database server's on
 * PostgreSQL, so that every instance counts alike). After the clock stepped back, a start
 * "in the future" by less than a span still counts until a span after it (the webhook waits
 * two spans at most); one further in the future than a span is forgotten (a burst may follow
 * such a step: the window cannot tell how long ago that start really was).
 *
 * Pure: no I/O, no clock of its own (the tests drive it with any numbers).
 */

/** The smallest and largest rate limits, deliveries per second. */
export const RATE_LIMIT_MIN = 1;
export const RATE_LIMIT_MAX = 10_000;
/** The window the limit counts in. */
export const RATE_WINDOW_MS = 1_000;
/** What the limiter adds to the window for the jitter between claiming a delivery and its request arriving (see above). */
export const RATE_MARGIN_MS = 100;
/** How long a started delivery counts against the limit. */
export const RATE_SPAN_MS = RATE_WINDOW_MS + RATE_MARGIN_MS;

/** The deliveries started within the last span: [epoch ms, how many], oldest first. */
export type RateWindow = ReadonlyArray<readonly [at: number, count: number]>;

export const EMPTY_RATE_WINDOW: RateWindow = Object.freeze([]);

/** Why `value` is not a rate limit (a sentence for invalid_params), or null when it is one; null itself (no limit) is one. */
export function checkRateLimit(value: unknown): string | null {
  if (value === null) return null;
  if (typeof value !== 'number' || !Number.isInteger(value) || value < RATE_LIMIT_MIN || value > RATE_LIMIT_MAX) {
    return `must be a whole number of deliveries per second from ${RATE_LIMIT_MIN} to ${RATE_LIMIT_MAX}, or null for no limit`;
  }
  return null;
}

/** The entries that still count at `now`, oldest first. */
function live(window: RateWindow, now: number): Array<readonly [number, number]> {
  const out: Array<readonly [number, number]> = [];
  for (const [at, count] of window) if (at > now - RATE_SPAN_MS && at < now + RATE_SPAN_MS && count > 0) out.push([at, count]);
  return out.sort((a, b) => a[0] - b[0]);
}

/** Deliveries started within the span before `now`. */
export function rateUsed(window: RateWindow, now: number): number {
  let used = 0;
  for (const [, count] of live(window, now)) used += count;
  return used;
}

/**
 * How many deliveries may start at `now` under `limit`, and, when none may, how long until
 * one may (ms; 0 when some may now).
 */
export function ratePermits(window: RateWindow, limit: number, now: number): { permits: number; waitMs: number } {
  const entries = live(window, now);
  let used = 0;
  for (const [, count] of entries) used += count;
  if (used < limit) return { permits: limit - used, waitMs: 0 };
  // None now: the first moment enough of the oldest entries have aged out to leave one.
  for (const [at, count] of entries) {
    used -= count;
    if (used < limit) return { permits: 0, waitMs: Math.max(1, at + RATE_SPAN_MS - now) };
  }
  return { permits: 0, waitMs: RATE_SPAN_MS };
}

/** The window once `count` more deliveries have started at `now` (entries that no longer count dropped). */
export function rateTake(window: RateWindow, now: number, count: number): RateWindow {
  const entries = live(window, now);
  if (count <= 0) return entries;
  const same = entries.findIndex(([at]) => at === now);
  if (same >= 0) entries[same] = [now, entries[same]![1] + count];
  else entries.push([now, count]);
  return entries.sort((a, b) => a[0] - b[0]);
}

/** The stored form: a flat list [at, count, at, count, ...] (a PostgreSQL bigint[], JSON text in SQLite). */
export function encodeRateWindow(window: RateWindow): number[] {
  return window.flat();
}

/** The stored form read back; anything malformed (a hand-edited row) reads as an empty window. */
export function decodeRateWindow(flat: unknown): RateWindow {
  if (!Array.isArray(flat) || flat.length % 2 !== 0) return EMPTY_RATE_WINDOW;
  const out: Array<readonly [number, number]> = [];
  for (let i = 0; i < flat.length; i += 2) {
    const at = Number(flat[i]);
    const count = Number(flat[i + 1]);
    if (!Number.isFinite(at) || !Number.isInteger(count) || count < 0) return EMPTY_RATE_WINDOW;
    out.push([at, count]);
  }
  return out;
}

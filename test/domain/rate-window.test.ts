/**
 * The rate limiter as a pure module (src/domain/rate-window.ts), driven by a clock the test
 * moves: the bound it promises (at most `limit` starts in any window of RATE_WINDOW_MS, with
 * the margin, in any window of RATE_SPAN_MS), the burst after an idle second, the wait it
 * announces, a limit lowered or raised under a full window, a clock that steps back, and the
 * stored form.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import {
  checkRateLimit,
  decodeRateWindow,
  EMPTY_RATE_WINDOW,
  encodeRateWindow,
  RATE_LIMIT_MAX,
  RATE_MARGIN_MS,
  RATE_SPAN_MS,
  RATE_WINDOW_MS,
  ratePermits,
  rateTake,
  rateUsed,
  type RateWindow,
} from '../../src/domain/rate-window.ts';

/** Starts at each time (ms), as a list, for checking windows. */
type Starts = number[];

/**
 * A greedy claimer against the limiter: at each step it takes what the limiter allows (at most
 * `perClaim`), and the clock moves by `step` ms or to the moment the limiter said to come back.
 */
function drain(limit: number, total: number, options: { perClaim?: number; step?: number; start?: number } = {}): Starts {
  const perClaim = options.perClaim ?? Infinity;
  const step = options.step ?? 7;
  let now = options.start ?? 1_000_000;
  let window: RateWindow = EMPTY_RATE_WINDOW;
  const starts: Starts = [];
  while (starts.length < total) {
    const { permits, waitMs } = ratePermits(window, limit, now);
    if (permits === 0) {
      assert.ok(waitMs > 0);
      now += waitMs;
      continue;
    }
    const n = Math.min(permits, perClaim, total - starts.length);
    window = rateTake(window, now, n);
    for (let i = 0; i < n; i++) starts.push(now);
    now += step;
  }
  return starts;
}

/** The most starts in any half-open window [t, t + width), t ranging over every start. */
function busiestWindow(starts: Starts, width: number): number {
  const sorted = [...starts].sort((a, b) => a - b);
  let best = 0;
  let j = 0;
  for (let i = 0; i < sorted.length; i++) {
    while (j < sorted.length && sorted[j]! < sorted[i]! + width) j++;
    best = Math.max(best, j - i);
  }
  return best;
}

test('at most `limit` starts in any one-second window (and any window of the span), whatever the claim sizes', () => {
  for (const limit of [1, 3, 20, 100]) {
    for (const perClaim of [1, 4, 7, Infinity]) {
      for (const step of [1, 13, 50, 333]) {
        const starts = drain(limit, limit * 10 + 3, { perClaim, step });
        assert.ok(busiestWindow(starts, RATE_WINDOW_MS) <= limit, `limit ${limit}, ${perClaim} per claim, step ${step}: ${busiestWindow(starts, RATE_WINDOW_MS)} in a second`);
        assert.ok(busiestWindow(starts, RATE_SPAN_MS) <= limit, `limit ${limit}: more than the limit within the span`);
      }
    }
  }
});

test('a plain token bucket would not hold: the first second of a backlog is where it fails, and here it does not', () => {
  // 200 events at 20/s, claimed as fast as allowed: the first second gets the burst, and
  // nothing more until the first of it is a span old.
  const starts = drain(20, 200, { perClaim: 4, step: 5 });
  const first = starts[0]!;
  assert.equal(starts.filter((t) => t < first + RATE_WINDOW_MS).length, 20);
  assert.equal(busiestWindow(starts, RATE_WINDOW_MS), 20);
  // Under the backlog it keeps pace: 20 per span, so 200 take nine spans after the first burst.
  assert.ok(starts[199]! - first <= 9 * RATE_SPAN_MS + 10 * 5, `200 took ${starts[199]! - first} ms`);
});

test('after an idle second the whole limit may start at once, and not one more', () => {
  let window = rateTake(EMPTY_RATE_WINDOW, 0, 5);
  assert.deepEqual(ratePermits(window, 5, 0), { permits: 0, waitMs: RATE_SPAN_MS });
  assert.deepEqual(ratePermits(window, 5, RATE_SPAN_MS - 1), { permits: 0, waitMs: 1 });
  assert.deepEqual(ratePermits(window, 5, RATE_SPAN_MS), { permits: 5, waitMs: 0 });
  window = rateTake(window, RATE_SPAN_MS, 5);
  assert.equal(rateUsed(window, RATE_SPAN_MS), 5);
  // The old entry is dropped once it no longer counts.
  assert.equal(window.length, 1);
});

test('the wait announced is exactly when the oldest starts free enough room, batch by batch', () => {
  let window = rateTake(EMPTY_RATE_WINDOW, 100, 2);
  window = rateTake(window, 300, 2);
  window = rateTake(window, 300, 1); // same instant: one entry of 3
  assert.equal(window.length, 2);
  assert.deepEqual(ratePermits(window, 5, 400), { permits: 0, waitMs: 100 + RATE_SPAN_MS - 400 });
  // Lowered to 2 under a full window: the first entry leaving frees nothing, the second does.
  assert.deepEqual(ratePermits(window, 2, 400), { permits: 0, waitMs: 300 + RATE_SPAN_MS - 400 });
  // Raised: room at once.
  assert.deepEqual(ratePermits(window, 10, 400), { permits: 5, waitMs: 0 });
});

test('a clock that steps back: a small step holds the webhook two spans at most, a large one forgets the window', () => {
  const at = 1_000_000;
  const window = rateTake(EMPTY_RATE_WINDOW, at, 3);
  // Back by 300 ms: the starts still count until a span after them.
  const back = at - 300;
  assert.deepEqual(ratePermits(window, 3, back), { permits: 0, waitMs: 300 + RATE_SPAN_MS });
  assert.deepEqual(ratePermits(window, 3, at + RATE_SPAN_MS), { permits: 3, waitMs: 0 });
  // What is taken at the earlier time sorts before them.
  assert.deepEqual(rateTake(rateTake(EMPTY_RATE_WINDOW, at, 1), back, 2), [[back, 2], [at, 1]]);
  // Back by an hour: never stuck for the hour.
  assert.deepEqual(ratePermits(window, 3, at - 3_600_000), { permits: 3, waitMs: 0 });
});

test('the margin is part of the span, and small', () => {
  assert.equal(RATE_SPAN_MS, RATE_WINDOW_MS + RATE_MARGIN_MS);
  assert.ok(RATE_MARGIN_MS > 0 && RATE_MARGIN_MS <= 100);
});

test('limits: whole numbers 1-10,000, or null', () => {
  for (const ok of [1, 20, RATE_LIMIT_MAX, null]) assert.equal(checkRateLimit(ok), null, String(ok));
  for (const bad of [0, -1, 10_001, 1.5, '20', true, {}, [], Number.NaN, Infinity]) {
    assert.match(checkRateLimit(bad) ?? '', /whole number of deliveries per second from 1 to 10000, or null/, JSON.stringify(bad));
  }
});

test('the stored form round-trips; anything malformed reads as an empty window', () => {
  const window = rateTake(rateTake(EMPTY_RATE_WINDOW, 10, 2), 20, 3);
  assert.deepEqual(encodeRateWindow(window), [10, 2, 20, 3]);
  assert.deepEqual(decodeRateWindow([10, 2, 20, 3]), window);
  // PostgreSQL's bigint[] comes back as strings.
  assert.deepEqual(decodeRateWindow(['10', '2', '20', '3']), window);
  for (const bad of [null, 'x', [1], [1, 'x'], [1, -2], [1, 1.5], { 0: 1 }]) assert.deepEqual(decodeRateWindow(bad), EMPTY_RATE_WINDOW, JSON.stringify(bad));
});

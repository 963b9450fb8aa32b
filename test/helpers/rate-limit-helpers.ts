/**
 * What the rate limit's end-to-end tests share (test/e2e/rate-limit.e2e.test.ts on SQLite,
 * test/e2e/rate-limit-pg.e2e.test.ts with two instances on PostgreSQL): windows counted over
 * start and arrival times, and a receiver in a process of its own.
 */
import { fork } from 'node:child_process';
import type { TestContext } from 'node:test';
import { fileURLToPath } from 'node:url';
import { RATE_MARGIN_MS, RATE_WINDOW_MS } from '../../src/domain/rate-window.ts';
import type { TestTls } from './receivers.ts';

// The limit is taken when deliveries are claimed (in the claim's transaction); an attempt's
// started_at is read a moment later, after the claim's commit and on an event loop that a loaded
// machine may stall. Starts are checked in windows this much narrower than a second, so that
// one claim's attempts starting late against the next claim's do not fail the daemon's promise;
// without a working limit, a window holds many times the limit all the same.
export const START_ALLOWANCE_MS = 50;

/** The most times that fall in one window [t, t + width), t ranging over every time, and where. */
export function busiestWindow(times: readonly number[], width = RATE_WINDOW_MS): { count: number; from: number } {
  const sorted = [...times].sort((a, b) => a - b);
  let best = { count: 0, from: 0 };
  let j = 0;
  for (let i = 0; i < sorted.length; i++) {
    while (j < sorted.length && sorted[j]! < sorted[i]! + width) j++;
    if (j - i > best.count) best = { count: j - i, from: sorted[i]! };
  }
  return best;
}

/**
 * The window to check arrivals at the receiver in: the limit counts starts, a second and
 * RATE_MARGIN_MS apart, and a request delayed on its way (a loaded machine stalls one now and
 * then) by more than the margin beyond the others arrives closer to the next ones. The window is
 * narrowed by that excess, measured per request (its arrival less its recorded start), and by
 * the starts' own lateness against their claim (START_ALLOWANCE_MS), so that the check holds the
 * daemon to its promise and not to the machine's scheduling.
 */
export function arrivalWindow(transits: readonly number[]): number {
  const unevenBeyondMargin = Math.max(0, Math.max(...transits) - Math.min(...transits) - RATE_MARGIN_MS);
  return RATE_WINDOW_MS - START_ALLOWANCE_MS - unevenBeyondMargin;
}

/** The least time by which a window of a second missed holding limit + 1 of `times`. */
export function leastSlack(times: readonly number[], limit: number): number {
  const sorted = [...times].sort((a, b) => a - b);
  let least = Infinity;
  for (let i = 0; i + limit < sorted.length; i++) least = Math.min(least, sorted[i + limit]! - sorted[i]! - RATE_WINDOW_MS);
  return least;
}

/** A receiver in a process of its own (test/fixtures/timed-receiver.mjs): its arrival times are not delayed by this process's database reads. */
export async function startTimedReceiver(t: TestContext, tls: TestTls): Promise<{ url: string; arrivals(): Promise<Array<[number, string]>> }> {
  const child = fork(fileURLToPath(new URL('./fixtures/timed-receiver.mjs', import.meta.url)), [], {
    env: { ...process.env, TIMED_RECEIVER_TLS: JSON.stringify({ key: tls.keyPem, cert: tls.certPem }) },
    stdio: ['ignore', 'ignore', 'inherit', 'ipc'],
  });
  t.after(() => {
    child.kill();
  });
  const port = await new Promise<number>((resolve, reject) => {
    child.once('message', (m: { port: number }) => resolve(m.port));
    child.once('exit', (code) => reject(new Error(`the receiver exited (${code})`)));
  });
  return {
    url: `https://127.0.0.1:${port}/hook`,
    arrivals: () =>
      new Promise((resolve) => {
        child.once('message', (m: { arrivals: Array<[number, string]> }) => resolve(m.arrivals));
        child.send('report');
      }),
  };
}


/**
 * Durations the daemon measures do not move with the wall clock (issue 31, point 3). The built
 * daemon runs with a preload that steps its wall clock (test/fixtures/clock-shift.mjs: Date
 * moved by what a file says, written while it runs), one hour back and then two hours forward,
 * as NTP or a restored VM would; its per-token rate limit keeps refilling at the configured
 * rate, neither locking a token out for an hour nor handing it a fresh burst.
 */
import assert from 'node:assert/strict';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { test, type TestContext } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { assertBuilt, migrateCli, runCli, scratchDir, spawnServe } from '../helpers/feed-helpers.ts';

const CLOCK_SHIFT = fileURLToPath(new URL('../helpers/fixtures/clock-shift.mjs', import.meta.url));
const HOUR = 3_600_000;

/** The built daemon with the clock preload, bursts of 3 refilled at 1 a second, and a token of a user of acme that outlives the steps. */
async function startShiftable(t: TestContext) {
  assertBuilt();
  const dir = scratchDir(t);
  const stateDir = join(dir, 'state');
  const shiftFile = join(dir, 'clock-shift');
  writeFileSync(shiftFile, '0');
  await migrateCli(t, ['--state-dir', stateDir]);
  for (const args of [['orgs', 'add', 'acme'], ['users', 'add', '--org', 'acme', '--email', 'ada@acme.test', '--role', 'saas_admin']]) {
    const r = await runCli(t, [...args, '--state-dir', stateDir]);
    assert.equal(r.code, 0, r.stderr);
  }
  // Its exp is checked on the wall clock, as it must be: 8 h outlive the steps.
  const issued = await runCli(t, ['token', 'issue', '--org', 'acme', '--email', 'ada@acme.test', '--ttl', '8h', '--state-dir', stateDir]);
  assert.equal(issued.code, 0, issued.stderr);
  const token = issued.stdout.trim();
  const daemon = await spawnServe(t, stateDir, [], {
    nodeArgs: ['--import', CLOCK_SHIFT],
    env: { CLOCK_SHIFT_FILE: shiftFile, HOOKRELAY_API_RATE_LIMIT_BURST: '3', HOOKRELAY_API_RATE_LIMIT_PER_MINUTE: '60' },
  });
  const call = async () => {
    const res = await fetch(`${daemon.baseUrl}/users/me`, { headers: { authorization: `Bearer ${token}` } });
    await res.arrayBuffer();
    return { status: res.status, retryAfter: res.headers.get('retry-after') };
  };
  return {
    daemon,
    call,
    /** Uses the burst up. */
    async exhaust() {
      for (let i = 0; i < 10; i++) if ((await call()).status === 429) return;
      assert.fail('the burst of 3 was never used up');
    },
    /** Sets the daemon's wall clock `ms` away from the real one. */
    async shift(ms: number) {
      writeFileSync(shiftFile, String(ms));
      await sleep(100); // the preload reads the file every 20 ms
    },
    /** Asserts that the daemon's log times are `ms` (give or take a minute) away from ours: the preload works. */
    assertShifted(ms: number) {
      const last = daemon.logRecords().at(-1)!;
      assert.ok(Math.abs(Date.parse(last.time as string) - Date.now() - ms) < 60_000, `the preload did not step the daemon's clock: ${String(last.time)}`);
    },
  };
}

test('the per-token rate limit refills on a monotonic clock: a wall clock stepped back an hour locks no token out', { timeout: 60_000 }, async (t) => {
  const relay = await startShiftable(t);
  await relay.exhaust();
  await relay.shift(-HOUR);
  // A second and more of real time later, the bucket holds a token again.
  await sleep(1_200);
  const after = await relay.call();
  assert.equal(after.status, 200, `a wall clock stepped back an hour locked the token out (Retry-After: ${after.retryAfter})`);
  const limited = await relay.call();
  assert.equal(limited.status, 429);
  assert.ok(Number(limited.retryAfter) <= 1, `Retry-After ${limited.retryAfter}: the wait is counted from the clock step`);
  relay.assertShifted(-HOUR);
});

test('the per-token rate limit refills on a monotonic clock: a wall clock stepped forward an hour hands out no fresh burst', { timeout: 60_000 }, async (t) => {
  const relay = await startShiftable(t);
  await relay.exhaust();
  await relay.shift(HOUR);
  // An hour forward on the wall clock, 0.1 s of real time: the bucket is still (almost) empty.
  const after = [await relay.call(), await relay.call(), await relay.call()];
  assert.ok(after.some((r) => r.status === 429), `a wall clock stepped forward refilled the bucket: ${after.map((r) => r.status).join(', ')}`);
  relay.assertShifted(HOUR);
});

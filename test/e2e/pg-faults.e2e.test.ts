/**
 * The short version of the fault suite for PostgreSQL mode (scripts/fault-suite-pg.ts --quick):
 * three instances of the built daemon and a PostgreSQL server, each in a network namespace of
 * its own joined by veth pairs, changes flowing through three feeds (each request's changes
 * spread over them) with delivery.orderHold on; one instance's database link cut past its lease,
 * one instance paused (SIGSTOP) past its lease, the server restarted. Checked: nothing lost,
 * no change of a request reaching the receivers after a later one (either cause), duplicates
 * within what the instances hit can have in flight, /readyz 503 with a reason while the
 * database is out of reach and 200 again by itself, feed positions that never go back, every
 * daemon exiting 0 at the end.
 *
 * Needs root (network namespaces, veth pairs, running the server as the user postgres): it
 * says why it does not run otherwise. SKIP_PG_FAULT_TESTS=<reason> skips it on purpose (.ci/run
 * runs it on one Node.js line: it is minutes of three daemons and a server on the machine).
 */
import assert from 'node:assert/strict';
import { execFile, spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { assertBuilt } from '../helpers/feed-helpers.ts';
import { tempDir } from '../helpers/helpers.ts';

const SCRIPT = fileURLToPath(new URL('../../scripts/fault-suite-pg.ts', import.meta.url));

function whyNot(): string | null {
  if (process.env.SKIP_PG_FAULT_TESTS) return `SKIP_PG_FAULT_TESTS: ${process.env.SKIP_PG_FAULT_TESTS}`;
  if (process.getuid?.() !== 0) return 'not root: network namespaces and veth pairs need root (CI runs as root)';
  for (const tool of ['ip', 'runuser']) if (spawnSync('sh', ['-c', `command -v ${tool}`]).status !== 0) return `no ${tool} on this machine`;
  return null;
}

interface Row {
  readonly fault: string;
  readonly round: number;
  readonly lost: number;
  readonly duplicates: number;
  readonly duplicateBound: number;
  readonly orderSentOutOfOrder: number;
  readonly orderStoredLate: number;
  readonly recoverySeconds: number | null;
  readonly readiness: { readonly ok: boolean; readonly notReadyWithReason: number; readonly reasons: readonly string[] } | null;
}

const skip = whyNot();
test('fault suite for PostgreSQL, quick: a link cut and a SIGSTOP past the lease, a server restart; nothing lost, order held, readiness follows the database', { timeout: 600_000, ...(skip === null ? {} : { skip }) }, async (t) => {
  assertBuilt();
  const json = join(tempDir(t), 'fault-pg.json');
  const { NODE_TEST_CONTEXT: _, ...env } = process.env;
  const run = await promisify(execFile)(process.execPath, ['--import', 'tsx', SCRIPT, '--quick', '--order-hold', '60s', '--rate', '50', '--json', json], { env, timeout: 580_000, maxBuffer: 1 << 22 }).catch(
    (err: { code: number; stdout: string; stderr: string }) => err,
  );
  const report = JSON.parse(readFileSync(json, 'utf8')) as { problems: string[]; rows: Row[]; written: number; lost: number; orderSentOutOfOrder: number; orderStoredLate: number; duplicates: number; exits: string[]; positionsBack: string[]; log: string[] };
  t.diagnostic(report.log.join('\n'));
  assert.deepEqual(report.problems, [], run.stdout);
  const faults = report.rows.filter((r) => r.round > 0);
  assert.deepEqual(faults.map((r) => r.fault), ['link-cut', 'sigstop', 'pg-restart']);
  assert.ok(report.written > 2000, `${report.written} changes written`);
  assert.equal(report.lost, 0);
  assert.equal(report.orderSentOutOfOrder + report.orderStoredLate, 0, 'no change reached a receiver after a later change of its request');
  for (const r of faults) {
    assert.ok(r.duplicates <= r.duplicateBound, `${r.fault}: ${r.duplicates} duplicates, bound ${r.duplicateBound}`);
    assert.ok(r.recoverySeconds !== null, `${r.fault}: recovered by itself`);
  }
  for (const fault of ['link-cut', 'pg-restart']) {
    const readiness = faults.find((r) => r.fault === fault)!.readiness;
    assert.ok(readiness?.ok === true && readiness.notReadyWithReason > 0, `${fault}: /readyz ${JSON.stringify(readiness)}`);
    assert.ok(readiness.reasons.includes('database_unreachable'), `${fault}: ${readiness.reasons.join(', ')}`);
  }
  assert.deepEqual(report.exits, ['exit 0', 'exit 0', 'exit 0']);
  assert.deepEqual(report.positionsBack, []);
  assert.match(run.stdout, /passed: nothing lost/);
});

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
 * says why it does not run otherwise. The suite's judgement of a run (scripts/fault-pg-analysis.ts)
 * is tested below on runs made up by hand, everywhere. SKIP_PG_FAULT_TESTS=<reason> skips it on purpose (.ci/run
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
import { analyse, type Arrival, type FaultWindow, type ReadyProbe, type Written } from '../../scripts/fault-pg-analysis.ts';
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

// ── The suite's judgement of a run, on runs made up by hand ──

const w = (request: number, change: number, at: number): Written => ({ eventId: `e${request}-${change}`, request, change, atMono: at });
const a = (eventId: string, at: number): Arrival => ({ eventId, atMono: at, atWall: 1_000_000 + at, from: '10.0.0.11' });

test('lost, order violations by cause, stale re-sends and duplicates, each in its window', () => {
  const written = [w(1, 0, 100), w(1, 1, 200), w(1, 2, 300), w(2, 0, 1100), w(2, 1, 1200), w(3, 0, 1300), w(3, 1, 1400)];
  const arrivals = [
    a('e1-0', 150),
    a('e1-2', 1050), // before e1-1: a violation of e1-1, in the fault's window (e1-1 arrives at 1060)
    a('e1-1', 1060),
    a('e2-1', 1250), // before e2-0: stored late, as hookrelay found
    a('e2-0', 1260),
    a('e3-0', 1350),
    a('e3-1', 1450),
    a('e3-0', 1500), // a re-send after e3-1: stale, and a duplicate
    a('e1-0', 1600), // a re-send after e1-1 and e1-2 arrived: stale
  ];
  const windows: FaultWindow[] = [{ fault: 'sigstop', round: 1, target: 'relay-1', startMono: 1000, endMono: 1200, nextMono: 5000, unreachable: [], duplicateBound: 16 }];
  const probes: ReadyProbe[] = [0, 1].map((instance) => ({ instance, atMono: 1300, status: 200, reason: null }));
  const r = analyse([...written, w(4, 0, 1700)], arrivals, windows, probes, new Set(['e2-0']), 0, 2);
  assert.deepEqual(
    r.rows.map((x) => [x.fault, x.events, x.delivered, x.lost, x.duplicates, x.orderSentOutOfOrder, x.orderStoredLate, x.staleResends]),
    [
      ['none (calm)', 3, 3, 0, 0, 0, 0, 0],
      ['sigstop', 5, 4, 1, 2, 1, 1, 2],
    ],
  );
  assert.deepEqual([r.lost, r.lostSample], [1, ['e4-0']]);
  assert.deepEqual(r.violationSample.sort(), ['e1-1 after e1-2 (sent out of order)', 'e2-0 after e2-1 (stored late)']);
  // Ready at 1300; what was written before the end (1200) had all arrived by 1260.
  assert.equal(r.rows[1]!.recoverySeconds, 0.1);
  assert.equal(r.rows[1]!.readiness, null, 'no instance was without the database');
});

test('/readyz during an outage: 503 with a reason on every probe of the instances without the database, after the grace period', () => {
  const windows: FaultWindow[] = [{ fault: 'pg-restart', round: 1, target: 'server', startMono: 0, endMono: 10_000, nextMono: 20_000, unreachable: [0, 1], duplicateBound: 48 }];
  const probe = (instance: number, atMono: number, status: number | null, reason: string | null): ReadyProbe => ({ instance, atMono, status, reason });
  const good = [probe(0, 1000, 200, null), probe(0, 6000, 503, 'database_unreachable'), probe(1, 7000, 503, 'database_unreachable'), probe(0, 11_000, 200, null), probe(1, 11_500, 200, null)];
  const ok = analyse([], [], windows, good, new Set(), 0, 2).rows[1]!;
  assert.deepEqual(ok.readiness, { probes: 2, ready: 0, notReadyWithReason: 2, notReadyWithoutReason: 0, noAnswer: 0, reasons: ['database_unreachable'], ok: true });
  assert.equal(ok.recoverySeconds, 1.5);
  const silent = analyse([], [], windows, [...good, probe(1, 8000, null, null), probe(0, 9000, 503, null)], new Set(), 0, 2).rows[1]!;
  assert.deepEqual([silent.readiness?.ok, silent.readiness?.noAnswer, silent.readiness?.notReadyWithoutReason], [false, 1, 1]);
});

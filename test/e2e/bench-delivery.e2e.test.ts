/**
 * Keeps the delivery benchmark (scripts/bench-delivery.ts) working: runs its `--tiny` preset
 * against the built daemon (dist/cli.js; `npm test` builds it first) and checks its JSON.
 * It asserts that the run is complete and consistent, not how fast it was: the figures of a
 * few hundred events on a shared CI machine mean nothing.
 */
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { test } from 'node:test';
import assert from 'node:assert/strict';

const REPO = fileURLToPath(new URL('../..', import.meta.url));
const CLI = join(REPO, 'dist/cli.js');
/** The preset takes 15-30 s on a 2-core machine; a run that takes longer than this is stuck. */
const RUN_LIMIT_MS = 100_000;

const positive = (value: unknown, what: string) => assert.ok(typeof value === 'number' && Number.isFinite(value) && value > 0, `${what} should be a positive number, got ${String(value)}`);

test('bench-delivery --tiny runs every phase and delivers every event, signed', { timeout: RUN_LIMIT_MS + 10_000 }, async (t) => {
  assert.ok(existsSync(CLI), `${CLI} is missing; run npm run build first`);
  const dir = mkdtempSync(join(tmpdir(), 'hookrelay-bench-test-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const jsonPath = join(dir, 'bench.json');
  const env: NodeJS.ProcessEnv = {};
  for (const [name, value] of Object.entries(process.env)) {
    if (value !== undefined && !name.startsWith('HOOKRELAY_') && name !== 'NODE_OPTIONS' && name !== 'NODE_TEST_CONTEXT') env[name] = value;
  }
  const child = spawn(process.execPath, ['--import', 'tsx', 'scripts/bench-delivery.ts', '--tiny', '--json', jsonPath], { cwd: REPO, env, stdio: ['ignore', 'pipe', 'pipe'] });
  let output = '';
  child.stdout.on('data', (chunk: Buffer) => (output += chunk.toString('utf8')));
  child.stderr.on('data', (chunk: Buffer) => (output += chunk.toString('utf8')));
  // SIGTERM first, so that the benchmark stops the daemon it started.
  const timer = setTimeout(() => {
    child.kill('SIGTERM');
    setTimeout(() => child.kill('SIGKILL'), 5000).unref();
  }, RUN_LIMIT_MS);
  const code = await new Promise<number | null>((resolve) => child.once('close', (c) => resolve(c)));
  clearTimeout(timer);
  assert.equal(code, 0, `bench-delivery --tiny exited with ${code}:\n${output}`);

  const report = JSON.parse(readFileSync(jsonPath, 'utf8')) as {
    ok: boolean;
    failures: string[];
    ceilings: Record<'undici' | 'got' | 'raw', { medianRequestsPerSecond: number }> | null;
    bulkOverGotCeiling: number | null;
    bulkOverUndiciCeiling: number | null;
    phases: Array<{ phase: string; events: number; deliveredPerSecond: number | null; latencyMs: { p50: number; p99: number; max: number } | null; cpuMsPerEvent: number; rssMaxMiB: number; missing: number; duplicates: number; drainPerSecond?: number }>;
    receiver: { signatureFailures: number; unexpected: number };
    missingByPhase: Record<string, number>;
    daemon: { exit: { code: number | null }; nonJsonStderr: string[] };
  };
  assert.equal(report.ok, true, report.failures.join('\n'));
  assert.deepEqual(report.failures, []);
  assert.deepEqual(report.phases.map((p) => p.phase), ['bulk', 'paced', 'idle', 'backlog']);
  for (const [phase, missing] of Object.entries(report.missingByPhase)) assert.equal(missing, 0, `${phase}: events missing`);
  assert.equal(report.receiver.signatureFailures, 0);
  assert.equal(report.receiver.unexpected, 0);
  assert.equal(report.daemon.exit.code, 0);
  assert.deepEqual(report.daemon.nonJsonStderr, []);
  for (const p of report.phases) {
    assert.equal(p.missing, 0, `${p.phase}: missing`);
    positive(p.events, `${p.phase}.events`);
    positive(p.deliveredPerSecond, `${p.phase}.deliveredPerSecond`);
    positive(p.cpuMsPerEvent, `${p.phase}.cpuMsPerEvent`);
    positive(p.rssMaxMiB, `${p.phase}.rssMaxMiB`);
    if (p.phase === 'paced' || p.phase === 'idle') {
      positive(p.latencyMs?.p50, `${p.phase}.latencyMs.p50`);
      positive(p.latencyMs?.p99, `${p.phase}.latencyMs.p99`);
      positive(p.latencyMs?.max, `${p.phase}.latencyMs.max`);
    }
    if (p.phase === 'backlog') positive(p.drainPerSecond, 'backlog.drainPerSecond');
  }
  positive(report.ceilings?.undici.medianRequestsPerSecond, 'ceilings.undici');
  positive(report.ceilings?.got.medianRequestsPerSecond, 'ceilings.got');
  positive(report.ceilings?.raw.medianRequestsPerSecond, 'ceilings.raw');
  positive(report.bulkOverGotCeiling, 'bulkOverGotCeiling');
  positive(report.bulkOverUndiciCeiling, 'bulkOverUndiciCeiling');
});

/**
 * The short version of the fault-injection suite (scripts/fault-suite.ts --quick): the built
 * daemon under kill -9s, a misbehaving receiver (500, hang, cut connections, 429), rotation and
 * truncation of the feed, bad lines, SIGTERM during a burst, SIGSTOP and (as root) a full disk
 * under the running daemon and at its restart; every event written
 * arrives, duplicates stay within what can be in flight at each kill.
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { assertBuilt } from '../helpers/feed-helpers.ts';
import { tempDir } from '../helpers/helpers.ts';

const SCRIPT = fileURLToPath(new URL('../../scripts/fault-suite.ts', import.meta.url));

test('fault suite, quick: nothing lost under kill -9, receiver faults, rotation, truncation, bad lines, SIGTERM, SIGSTOP and a full disk (as root)', { timeout: 300_000 }, async (t) => {
  assertBuilt();
  const json = join(tempDir(t), 'fault.json');
  const { NODE_TEST_CONTEXT: _, ...env } = process.env;
  const run = await promisify(execFile)(process.execPath, ['--import', 'tsx', SCRIPT, '--quick', '--json', json], { env, timeout: 280_000, maxBuffer: 1 << 20 }).catch(
    (err: { code: number; stdout: string; stderr: string }) => err,
  );
  const report = JSON.parse(readFileSync(json, 'utf8')) as Record<string, any>;
  assert.deepEqual(report.problems, [], run.stdout);
  assert.deepEqual(
    report.scenarios.map((s: { name: string }) => s.name),
    // The disk-full scenario mounts a tmpfs: as root only.
    ['kill', 'error500', 'hang', 'cut', 'throttle', 'rotate', 'truncate', 'bad lines', 'SIGTERM', 'SIGSTOP', ...(process.getuid?.() === 0 ? ['disk full'] : [])],
  );
  assert.ok(report.written > 1000, `${report.written} events written`);
  assert.equal(report.missing, 0);
  assert.equal(report.arrived, report.written);
  assert.ok(report.duplicates <= report.duplicateBound, `${report.duplicates} duplicates, bound ${report.duplicateBound}`);
  assert.equal(report.quarantined, 2);
  assert.ok(report.misbehaved > 0, 'the receiver misbehaved for some attempts');
  assert.equal(report.signatureFailures, 0);
  assert.equal(report.stderrNotJson, 0);
  assert.match(run.stdout, /passed: nothing lost/);
});

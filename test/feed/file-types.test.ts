/**
 * What the daemon reads at its feed path (issue 31, point 1): regular files only. A symbolic
 * link (put there while it runs, as an attacker would, or there at start), a directory, a FIFO,
 * a socket or a device is refused with one log line per change, /readyz answers 503 with the
 * reason, the daemon keeps serving, and a regular file put in its place is read. A FIFO never
 * holds up a stop. feed.followSymlinks follows a link, resolved once at start. Real relays
 * (in-process, or the built daemon spawned), real files, real SQLite.
 */
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { appendFileSync, constants, mkdirSync, openSync, renameSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { join } from 'node:path';
import { test, type TestContext } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { assertBuilt, defer, feedLines, feedRelay, fields, jsonLine, scratchDir, spawnServe, waitFor, type FeedRelay } from '../helpers/feed-helpers.ts';

/** Lines of a file that is not a feed: what must never reach the database or the log. */
const SECRET = 'root:*:20228:0:99999:7:::\ndaemon:*:20228:0:99999:7:::\n' + jsonLine(fields(900, { event_id: 'evt_from_the_secret_file' }));

/** The relay's error records that refuse the feed path. */
function refusals(relay: FeedRelay): Array<Record<string, unknown>> {
  return relay.logRecords().filter((r) => r.level === 50 && r.subsystem === 'feed' && typeof r.kind === 'string');
}

async function readyz(relay: FeedRelay): Promise<{ status: number; body: Record<string, unknown> }> {
  const res = await fetch(`${relay.baseUrl()}/readyz`);
  return { status: res.status, body: (await res.json()) as Record<string, unknown> };
}

/** Waits for the refusal of `kind`, lets the reader poll many more times, then checks it was said once and that /readyz says why. */
async function assertRefusedOnce(relay: FeedRelay, path: string, kind: RegExp): Promise<void> {
  // Failing fast when the reader read the thing instead of refusing it.
  await waitFor(`the refusal of ${kind}`, () => {
    assert.equal(relay.probe().rejects().length, 0, 'what is at the feed path was read');
    return refusals(relay).length > 0;
  });
  await sleep(300); // 15 polls at 20 ms
  const said = refusals(relay);
  assert.equal(said.length, 1, `the refusal is said once, not once per poll: ${JSON.stringify(said)}`);
  assert.match(said[0]!.msg as string, kind);
  assert.match(said[0]!.msg as string, new RegExp(`^the feed path ${path.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')} is .*not a regular file: it is not read`));
  const ready = await readyz(relay);
  assert.equal(ready.status, 503);
  assert.equal(ready.body.status, 'not_ready');
  assert.equal(ready.body.reason, 'feed_not_a_file');
  assert.match(ready.body.detail as string, kind);
  assert.equal(typeof ready.body.since, 'string');
  const health = await fetch(`${relay.baseUrl()}/healthz`);
  assert.equal(health.status, 200, 'the daemon keeps serving');
}

/** Replaces what is at `path` with a regular file of `count` lines and waits until they are read; /readyz is 200 again. */
async function assertPickedUp(relay: FeedRelay, path: string, count: number, already = 0): Promise<void> {
  rmSync(path, { recursive: true, force: true });
  writeFileSync(path, feedLines(count, 100).text);
  await relay.probe().waitForLines(path, already + count);
  assert.equal((await readyz(relay)).status, 200);
  assert.ok(relay.logRecords().some((r) => r.msg === 'the feed path holds a regular file now: reading it'));
}

test('a symbolic link put at the feed path while the daemon runs: the old file is read to its end, the link is not followed, said once, /readyz 503; a regular file in its place is read', async (t) => {
  const dir = scratchDir(t);
  const path = join(dir, 'feed.jsonl');
  const secret = join(dir, 'shadow');
  writeFileSync(secret, SECRET);
  writeFileSync(path, feedLines(2).text);
  const relay = feedRelay(t, { 'feed.path': path });
  await relay.start();
  await relay.probe().waitForLines(path, 2);
  assert.equal((await readyz(relay)).status, 200);

  // mv feed.jsonl feed.old; ln -s /etc/shadow feed.jsonl (a line written to the old file just before is still read).
  appendFileSync(path, jsonLine(fields(2)));
  renameSync(path, join(dir, 'feed.old'));
  symlinkSync(secret, path);
  await assertRefusedOnce(relay, path, /is a symbolic link, not a regular file: it is not read; replace the link with the file, or set feed\.followSymlinks/);
  const probe = relay.probe();
  assert.deepEqual(probe.requestIds(), ['ar_0', 'ar_1', 'ar_2']);
  assert.equal(probe.rejects().length, 0);
  assert.doesNotMatch(JSON.stringify(relay.logRecords()), /root:|daemon:\*|evt_from_the_secret_file/);

  await assertPickedUp(relay, path, 2, 3);
  assert.deepEqual(probe.requestIds(), ['ar_0', 'ar_1', 'ar_2', 'ar_100', 'ar_101']);
});

test('at start, a symbolic link, a directory, a FIFO, a socket or a device at the feed path is refused (once, with /readyz 503 saying what it is) and never opened; a regular file in its place is read', { timeout: 120_000 }, async (t) => {
  const kinds: ReadonlyArray<readonly [string, (path: string, t: TestContext) => void, RegExp]> = [
    ['symbolic link', (path) => symlinkSync(join(path, '..', 'shadow'), path), /is a symbolic link/],
    ['dangling symbolic link', (path) => symlinkSync(join(path, '..', 'nowhere'), path), /is a symbolic link/],
    ['directory', (path) => mkdirSync(path), /is a directory/],
    ['FIFO', (path) => execFileSync('mkfifo', [path]), /is a FIFO \(named pipe\), not a regular file: it is not read; to read a pipe, give it to the daemon on standard input \(--feed -\)/],
    [
      'socket',
      (path, t) => {
        const server = createServer().listen(path);
        defer(t, () => new Promise<void>((resolve) => server.close(() => resolve())));
      },
      /is a socket/,
    ],
    // A character device: /dev/null's numbers (the tests run as root).
    ['device', (path) => execFileSync('mknod', [path, 'c', '1', '3']), /is a device/],
  ];
  for (const [name, make, kind] of kinds) {
    await t.test(name, async (t) => {
      const dir = scratchDir(t);
      writeFileSync(join(dir, 'shadow'), SECRET);
      const path = join(dir, 'feed.jsonl');
      make(path, t);
      await sleep(50); // a socket's listen() is asynchronous
      const relay = feedRelay(t, { 'feed.path': path });
      await relay.start();
      await assertRefusedOnce(relay, path, kind);
      assert.equal(relay.probe().eventCount(), 0);
      await assertPickedUp(relay, path, 3);
      // Read from its start: it appeared after the daemon started.
      assert.deepEqual(relay.probe().requestIds(), ['ar_100', 'ar_101', 'ar_102']);
      // Stopping does not wait on anything the refused file held up.
      const stopped = performance.now();
      await relay.stop();
      assert.ok(performance.now() - stopped < 5_000, 'the stop took too long');
    });
  }
});

test('the built daemon with a FIFO at its feed path: refused without opening it (a writer finds no reader), /readyz says so', { timeout: 60_000 }, async (t) => {
  assertBuilt();
  const dir = scratchDir(t);
  const fifo = join(dir, 'feed.jsonl');
  execFileSync('mkfifo', [fifo]);
  const daemon = await spawnServe(t, join(dir, 'state'), ['--feed', fifo]);
  await waitFor('the refusal of the FIFO', () => daemon.logRecords().some((r) => r.level === 50 && r.kind === 'a FIFO (named pipe)'));
  const ready = await fetch(`${daemon.baseUrl}/readyz`);
  assert.equal(ready.status, 503);
  assert.equal(((await ready.json()) as { reason: string }).reason, 'feed_not_a_file');
  // Nothing holds the FIFO open for reading: a producer cannot write into it and lose its lines.
  assert.throws(() => openSync(fifo, constants.O_WRONLY | constants.O_NONBLOCK), { code: 'ENXIO' });
});

test('the built daemon with a FIFO at its feed path ends at once on SIGTERM', { timeout: 60_000 }, async (t) => {
  assertBuilt();
  const dir = scratchDir(t);
  const fifo = join(dir, 'feed.jsonl');
  execFileSync('mkfifo', [fifo]);
  const daemon = await spawnServe(t, join(dir, 'state'), ['--feed', fifo]);
  await sleep(500); // the feed reader has come to the FIFO by then
  const signalled = performance.now();
  daemon.child.kill('SIGTERM');
  const exit = await Promise.race([daemon.exited, sleep(10_000).then(() => null)]);
  assert.notEqual(exit, null, `SIGTERM did not end the daemon within 10 s; stderr: ${daemon.stderr()}`);
  assert.deepEqual(exit, { code: 0, signal: null });
  t.diagnostic(`stopped ${Math.round(performance.now() - signalled)} ms after SIGTERM`);
});

test('feed.followSymlinks: a link at the feed path is followed, resolved once at start; pointing it elsewhere later changes nothing until a restart', async (t) => {
  const dir = scratchDir(t);
  const path = join(dir, 'feed.jsonl');
  const first = join(dir, 'data', 'current.jsonl');
  const other = join(dir, 'data', 'other.jsonl');
  mkdirSync(join(dir, 'data'));
  writeFileSync(first, feedLines(2).text);
  writeFileSync(other, feedLines(2, 50).text);
  symlinkSync(first, path);
  const relay = feedRelay(t, { 'feed.path': path, 'feed.followSymlinks': 'true' });
  await relay.start();
  const probe = relay.probe();
  await probe.waitForLines(path, 2);
  assert.ok(relay.logRecords().some((r) => r.target === first && /resolved once, at start/.test(r.msg as string)));
  assert.equal((await readyz(relay)).status, 200);

  // ln -sfn other.jsonl feed.jsonl, then a line appended to the file the link pointed at.
  symlinkSync(other, `${path}.new`);
  renameSync(`${path}.new`, path);
  appendFileSync(first, jsonLine(fields(2)));
  await probe.waitForLines(path, 3);
  await sleep(200);
  assert.deepEqual(probe.requestIds(), ['ar_0', 'ar_1', 'ar_2']);
  assert.equal(refusals(relay).length, 0);

  // A restart resolves the link again; the file it now points at is another file, read from its start.
  await relay.stop();
  await relay.start();
  await probe.waitForLines(path, 5);
  assert.deepEqual(probe.requestIds(), ['ar_0', 'ar_1', 'ar_2', 'ar_50', 'ar_51']);
});

/**
 * The file tailer's steps, each on its own, on real files in a temp directory: where reading
 * starts after a (re)start (startingPointOf), a truncation or rewrite in place
 * (inPlaceChangeOf), what is at the feed path (whatIsAt), the wait for a regular file and the
 * refusal of anything else (FeedPath), and a read to the end in batches (BatchedReads). The
 * tailer as a whole is tested inside a relay (feed-tailer.test.ts, feed-file-types.test.ts).
 */
import assert from 'node:assert/strict';
import { appendFileSync, mkdirSync, mkdtempSync, renameSync, rmSync, symlinkSync, truncateSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, test, type TestContext } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { BatchedReads, type TailedFile } from '../../src/feed/batched-reads.ts';
import { endOfLastLine, inPlaceChangeOf, startingPointOf, whatIsAt, type StartOptions } from '../../src/feed/feed-changes.ts';
import { EMPTY_FINGERPRINT, FINGERPRINT_BYTES, fingerprintOf, isRefused, openFeed, tailFingerprintOf, type Identity, type OpenFeed } from '../../src/feed/feed-file.ts';
import { FeedPath } from '../../src/feed/feed-path.ts';
import { inlineLineParser } from '../../src/feed/line-parser.ts';
import { LineSplitter } from '../../src/feed/line-splitter.ts';
import { createLogger } from '../../src/log.ts';
import type { FeedPosition } from '../../src/store/values.ts';

/** A fresh directory, removed when the test ends (after the files opened in it are closed). */
function scratch(t: TestContext): string {
  const dir = mkdtempSync(join(tmpdir(), 'hookrelay-tailer-steps-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

/** `count` numbered lines of `width` bytes each (newline included), from `from`. */
function lines(count: number, from = 0, width = 100): string {
  return Array.from({ length: count }, (_, i) => `line ${from + i} `.padEnd(width - 1, 'x') + '\n').join('');
}

/** Opens the regular file at `path` as the tailer does; closed when the test ends. */
async function opened(t: TestContext, path: string): Promise<OpenFeed> {
  const feed = await openFeed(path);
  assert.ok(feed !== null && !isRefused(feed), `${path} is not an open regular file`);
  t.after(() => feed.fh.close().catch(() => {}));
  return feed;
}

/** What the tailer knows of `feed` after committing `position`. */
function identityAt(feed: OpenFeed, position: number): Identity {
  return { current: fingerprintOf(feed.fh, Math.min(FINGERPRINT_BYTES, position)), tail: { position, hash: tailFingerprintOf(feed.fh, position) } };
}

/** The position the tailer saves after committing `position` of `feed`. */
function savedAt(feed: OpenFeed, position: number): FeedPosition {
  const { current, tail } = identityAt(feed, position);
  return { source: feed.path, dev: feed.dev, ino: feed.ino, fingerprint: current.hash, fingerprintBytes: current.bytes, position, tailFingerprint: tail!.hash };
}

const FROM_START: StartOptions = { startPosition: 'start', appeared: false };

describe('startingPointOf', () => {
  test('with no saved position: the beginning, or with startPosition end just past the last complete line, unless the file appeared after the start', async (t) => {
    const path = join(scratch(t), 'feed.jsonl');
    const complete = lines(5);
    writeFileSync(path, complete + 'a partial li');
    const feed = await opened(t, path);
    assert.deepEqual(await startingPointOf(feed, null, FROM_START), { kind: 'first-start', from: 'beginning', position: 0 });
    assert.deepEqual(await startingPointOf(feed, null, { startPosition: 'end', appeared: false }), { kind: 'first-start', from: 'end', position: complete.length });
    assert.deepEqual(await startingPointOf(feed, null, { startPosition: 'end', appeared: true }), { kind: 'first-start', from: 'beginning', position: 0 });
  });

  test('the file read before, appended to while stopped: resume at the saved position', async (t) => {
    const path = join(scratch(t), 'feed.jsonl');
    writeFileSync(path, lines(5));
    const saved = savedAt(await opened(t, path), 500);
    appendFileSync(path, lines(3, 5));
    assert.deepEqual(await startingPointOf(await opened(t, path), saved, FROM_START), { kind: 'resume', position: 500 });
  });

  test('the file read before, shorter than the saved position with the same first bytes: truncated while stopped, read from 0', async (t) => {
    const path = join(scratch(t), 'feed.jsonl');
    writeFileSync(path, lines(10));
    const saved = savedAt(await opened(t, path), 1000);
    truncateSync(path, 500);
    assert.deepEqual(await startingPointOf(await opened(t, path), saved, FROM_START), { kind: 'truncated-while-stopped', position: 0, size: 500, saved: 1000 });
  });

  test('the same inode with other first bytes, or other bytes before the saved position: rewritten while stopped, read from 0', async (t) => {
    const path = join(scratch(t), 'feed.jsonl');
    writeFileSync(path, lines(10));
    const saved = savedAt(await opened(t, path), 1000);
    writeFileSync(path, lines(20, 100));
    assert.deepEqual(await startingPointOf(await opened(t, path), saved, FROM_START), { kind: 'rewritten-while-stopped', position: 0 });
    // The same first 300 bytes, other bytes just before the position, longer than it.
    writeFileSync(path, lines(3) + lines(20, 200));
    assert.deepEqual(await startingPointOf(await opened(t, path), saved, FROM_START), { kind: 'rewritten-while-stopped', position: 0 });
  });

  test('another file at the path and the one read before renamed next to it: rotated while stopped, the old file handed over open', async (t) => {
    const path = join(scratch(t), 'feed.jsonl');
    writeFileSync(path, lines(10));
    const saved = savedAt(await opened(t, path), 700);
    renameSync(path, `${path}.1`);
    writeFileSync(path, lines(2, 50));
    const point = await startingPointOf(await opened(t, path), saved, FROM_START);
    assert.equal(point.kind, 'rotated-while-stopped');
    assert.ok(point.kind === 'rotated-while-stopped');
    t.after(() => point.old.fh.close());
    assert.equal(point.old.path, `${path}.1`);
    assert.equal(point.old.ino, saved.ino);
    assert.equal(point.saved, saved);
    assert.equal(point.position, 0);
  });

  test('another file at the path and the one read before gone: replaced while stopped, read from 0', async (t) => {
    const path = join(scratch(t), 'feed.jsonl');
    writeFileSync(path, lines(10));
    const saved = savedAt(await opened(t, path), 700);
    // Created before the old one goes, so it cannot reuse its inode.
    writeFileSync(`${path}.new`, lines(4, 80));
    renameSync(`${path}.new`, path);
    assert.deepEqual(await startingPointOf(await opened(t, path), saved, FROM_START), { kind: 'replaced-while-stopped', position: 0, saved: 700 });
  });
});

describe('endOfLastLine', () => {
  test('just past the last newline; 0 for a short file without one; the end for a long one without one in its last MiB', async (t) => {
    const dir = scratch(t);
    writeFileSync(join(dir, 'a'), 'one\ntwo\nthr');
    assert.equal(await endOfLastLine(await opened(t, join(dir, 'a'))), 8);
    writeFileSync(join(dir, 'b'), 'no newline at all');
    assert.equal(await endOfLastLine(await opened(t, join(dir, 'b'))), 0);
    writeFileSync(join(dir, 'c'), 'x\n' + 'y'.repeat((1 << 20) + 10));
    assert.equal(await endOfLastLine(await opened(t, join(dir, 'c'))), (1 << 20) + 12);
  });
});

describe('inPlaceChangeOf', () => {
  test('nothing for lines appended; truncated when shorter than what was read; rewritten for other first bytes or other bytes before the position', async (t) => {
    const path = join(scratch(t), 'feed.jsonl');
    writeFileSync(path, lines(10));
    const feed = await opened(t, path);
    const identity = identityAt(feed, 1000);
    appendFileSync(path, lines(2, 10));
    assert.equal(inPlaceChangeOf(feed, identity, 1000), null);
    // An unterminated line held by the reader counts as read.
    assert.equal(inPlaceChangeOf(feed, identity, 1200), null);
    assert.deepEqual(inPlaceChangeOf(feed, identity, 1250), { kind: 'truncated', size: 1200 });

    truncateSync(path, 300);
    assert.deepEqual(inPlaceChangeOf(feed, identity, 1000), { kind: 'truncated', size: 300 });

    writeFileSync(path, lines(30, 500));
    assert.deepEqual(inPlaceChangeOf(feed, identity, 1000), { kind: 'rewritten', size: 3000 });

    writeFileSync(path, lines(3) + lines(27, 700));
    assert.deepEqual(inPlaceChangeOf(feed, identity, 1000), { kind: 'rewritten', size: 3000 });
  });

  test('a file whose first bytes are not known yet (just restarted at 0) is not rewritten', async (t) => {
    const path = join(scratch(t), 'feed.jsonl');
    writeFileSync(path, lines(3));
    const feed = await opened(t, path);
    assert.equal(inPlaceChangeOf(feed, { current: EMPTY_FINGERPRINT, tail: null }, 0), null);
  });
});

describe('whatIsAt', () => {
  test('the file read; another one after a rotation, or a symbolic link, even to the file read; nothing once it is renamed away', async (t) => {
    const dir = scratch(t);
    const path = join(dir, 'feed.jsonl');
    writeFileSync(path, lines(2));
    const feed = await opened(t, path);
    assert.equal(whatIsAt(path, feed), 'the-file-read');
    renameSync(path, `${path}.1`);
    assert.equal(whatIsAt(path, feed), 'nothing');
    symlinkSync(`${path}.1`, path);
    assert.equal(whatIsAt(path, feed), 'another-file');
    rmSync(path);
    writeFileSync(path, lines(1));
    assert.equal(whatIsAt(path, feed), 'another-file');
  });
});

describe('FeedPath', () => {
  function recordingLog(): { log: ReturnType<typeof createLogger>; records: Array<Record<string, unknown>> } {
    const records: Array<Record<string, unknown>> = [];
    return { log: createLogger('info', { write: (line: string) => void records.push(JSON.parse(line) as Record<string, unknown>) }), records };
  }

  test('a regular file already there is opened at once: it did not appear', async (t) => {
    const path = join(scratch(t), 'feed.jsonl');
    writeFileSync(path, lines(1));
    const { log, records } = recordingLog();
    const found = await new FeedPath(path, { log, pollIntervalMs: 20, now: () => 1 }).waitForFile(AbortSignal.timeout(5_000));
    t.after(() => found.feed.fh.close());
    assert.equal(found.appeared, false);
    assert.equal(found.feed.path, path);
    assert.deepEqual(records, []);
  });

  test('a directory at the path is refused, said once however often it is looked at, and reported until a regular file takes its place', async (t) => {
    const path = join(scratch(t), 'feed.jsonl');
    mkdirSync(path);
    const { log, records } = recordingLog();
    const feedPath = new FeedPath(path, { log, pollIntervalMs: 20, now: () => 1234 });
    const waiting = feedPath.waitForFile(AbortSignal.timeout(10_000));
    for (let i = 0; i < 500 && feedPath.problem() === null; i++) await sleep(10);
    assert.deepEqual(feedPath.problem(), {
      reason: 'feed_not_a_file',
      detail: `the feed path ${path} is a directory, not a regular file: it is not read. The daemon waits for a regular file there`,
      since: 1234,
    });
    await sleep(200); // 10 polls
    assert.equal(records.filter((r) => r.level === 50).length, 1);

    rmSync(path, { recursive: true });
    writeFileSync(path, lines(1));
    const found = await waiting;
    t.after(() => found.feed.fh.close());
    assert.equal(found.appeared, true);
    assert.equal(feedPath.problem(), null);
    // The directory's end is said once: as a regular file in its place, or, when a look fell
    // between the removal and the new file, as the path left empty (then the file is just read).
    const ends = records.filter((r) => r.was === 'a directory').map((r) => r.msg);
    assert.equal(ends.length, 1, JSON.stringify(ends));
    assert.ok(['the feed path holds a regular file now: reading it', 'the refused file at the feed path is gone; waiting for a regular file to appear'].includes(ends[0] as string), JSON.stringify(ends));
  });

  test('a stop ends the wait', async (t) => {
    const path = join(scratch(t), 'feed.jsonl');
    const { log } = recordingLog();
    const stop = new AbortController();
    const waiting = new FeedPath(path, { log, pollIntervalMs: 10_000, now: () => 1 }).waitForFile(stop.signal);
    stop.abort();
    await assert.rejects(waiting, { name: 'AbortError' });
  });
});

describe('BatchedReads', () => {
  function recordingReads(batchLines: number): { reads: BatchedReads; commits: Array<{ lines: string[]; end: number }> } {
    const commits: Array<{ lines: string[]; end: number }> = [];
    const reads = new BatchedReads({
      parser: inlineLineParser,
      now: () => 0,
      batchLines,
      batchBytes: 1 << 20,
      async commit(_file, batch, end) {
        commits.push({ lines: Array.from({ length: batch.length }, (_, i) => batch.at(i)!.bytes.toString()), end });
      },
    });
    return { reads, commits };
  }

  function tailed(feed: OpenFeed): TailedFile {
    return { feed, splitter: new LineSplitter(1 << 20, 0), identity: { current: EMPTY_FINGERPRINT, tail: null } };
  }

  const stillRunning = new AbortController().signal;

  test('a small read: batches end at a complete line with the offset after it; an unterminated line is held, and read once its newline comes', async (t) => {
    const path = join(scratch(t), 'feed.jsonl');
    writeFileSync(path, lines(25) + 'line 25 ');
    const { reads, commits } = recordingReads(10);
    const file = tailed(await opened(t, path));
    assert.equal(await reads.readToEnd(file, stillRunning), 2508);
    assert.deepEqual(
      commits.map((c) => [c.lines.length, c.end]),
      [
        [10, 1000],
        [10, 2000],
        [5, 2500],
      ],
    );
    assert.equal(file.splitter.consumed, 2500);
    assert.equal(file.splitter.pendingBytes, 8);

    assert.equal(await reads.readToEnd(file, stillRunning), 0, 'nothing new');
    appendFileSync(path, 'and its end\n');
    assert.equal(await reads.readToEnd(file, stillRunning), 12);
    assert.deepEqual(commits.at(-1), { lines: ['line 25 and its end'], end: 2520 });
  });

  test('a large read, in chunks: every line once, in order, each batch ending where the next begins', async (t) => {
    const path = join(scratch(t), 'feed.jsonl');
    const count = 30_000; // 3 MB: chunks of 64 KiB growing to 1 MiB
    writeFileSync(path, lines(count));
    const { reads, commits } = recordingReads(1000);
    const file = tailed(await opened(t, path));
    assert.equal(await reads.readToEnd(file, stillRunning), count * 100);
    assert.equal(commits.length, count / 1000);
    assert.deepEqual(
      commits.map((c) => c.end),
      Array.from({ length: count / 1000 }, (_, i) => (i + 1) * 100_000),
    );
    const all = commits.flatMap((c) => c.lines);
    assert.equal(all.length, count);
    assert.ok(all.every((line, i) => line.startsWith(`line ${i} `)));
  });

  test('stopped: returns after the batch in progress is committed, before the end of the file', async (t) => {
    const path = join(scratch(t), 'feed.jsonl');
    writeFileSync(path, lines(5_000));
    const { reads, commits } = recordingReads(100);
    const file = tailed(await opened(t, path));
    const stopped = new AbortController();
    stopped.abort();
    await reads.readToEnd(file, stopped.signal);
    assert.deepEqual(
      commits.map((c) => c.end),
      [10_000],
    );
  });
});

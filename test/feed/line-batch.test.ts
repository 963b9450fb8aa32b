/**
 * Tests of the batches feed lines travel in (src/feed/line-batch.ts) and of how readers fill
 * them: a LineBatch holds copies of its lines in one shared buffer and gives each back with its
 * position and rejection; LineSplitter.pushInto stops at a full batch and the rest of the chunk
 * goes into the next one; the file tailer and the stream reader end a batch at
 * `feed.batchBytes` as well as at `feed.batchLines`; a batch goes to the parser thread without
 * being copied and is still readable for its commit; a failed commit leaves no read unawaited
 * and loses nothing.
 */
import assert from 'node:assert/strict';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import { describe, test, type TestContext } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { systemClock } from '../../src/domain/clock.ts';
import { parseFeedLine, RejectReason, toStorable } from '../../src/domain/feed-event.ts';
import { createFileTailer } from '../../src/feed/file-tailer.ts';
import { LineBatch, LineBatches, sourceBytes } from '../../src/feed/line-batch.ts';
import { createWorkerLineParser } from '../../src/feed/line-parser.ts';
import { LineSplitter } from '../../src/feed/line-splitter.ts';
import { ingestStream } from '../../src/feed/stream-reader.ts';
import { createIngestService, type IngestService, type Lines, type RawLine } from '../../src/services/ingest.ts';
import { openSqliteStore } from '../../src/store/sqlite/store.ts';
import { feedLines, WAIT_LIMIT_MS } from '../helpers/feed-helpers.ts';
import { silentLog, tempDir } from '../helpers/helpers.ts';

const raw = (text: string, position: number | null, rejected?: RawLine['rejected']): RawLine =>
  rejected ? { bytes: Buffer.from(text), position, rejected } : { bytes: Buffer.from(text), position };

/** Every line of `lines` as plain values, to compare batches with arrays. */
function plain(lines: Lines): Array<{ text: string; position: number | null; rejected?: RawLine['rejected'] }> {
  return Array.from({ length: lines.length }, (_, i) => {
    const line = lines.at(i)!;
    return line.rejected ? { text: line.bytes.toString(), position: line.position, rejected: line.rejected } : { text: line.bytes.toString(), position: line.position };
  });
}

const tooLong: RawLine['rejected'] = { reason: RejectReason.lineTooLong, lineBytes: 5000, detail: 'the line is 5000 bytes, over the limit of 1024 (feed.maxLineBytes)' };

describe('LineBatch', () => {
  test('holds copies of its lines: each comes back with its bytes, position and rejection, whatever happens to the buffer it came from', () => {
    const batch = new LineBatch(100, 1 << 20);
    const source = Buffer.from('{"a":1}\nsecond line\n');
    batch.add({ bytes: source.subarray(0, 7), position: 0 });
    batch.add({ bytes: source.subarray(8, 19), position: 8 });
    batch.add(raw('{"cut":', 20, tooLong));
    batch.add(raw('', null));
    source.fill(0x41);
    assert.deepEqual(plain(batch), [
      { text: '{"a":1}', position: 0 },
      { text: 'second line', position: 8 },
      { text: '{"cut":', position: 20, rejected: tooLong },
      { text: '', position: null },
    ]);
    assert.equal(batch.length, 4);
    assert.equal(batch.byteLength, 7 + 11 + 7);
    assert.equal(batch.at(4), undefined);
    assert.equal(batch.at(-1), undefined);
    assert.equal(batch.at(1.5), undefined);
  });

  test('counts the source bytes its lines stand for: each newline, and the full length of an over-long line', () => {
    const lines = [raw('abc', 0), raw('{"cut":', 4, tooLong), raw('', 5010)];
    const batch = LineBatch.of(lines);
    assert.equal(batch.sourceBytes, 4 + 5001 + 1);
    assert.equal(sourceBytes(batch), 4 + 5001 + 1);
    assert.equal(sourceBytes(lines), 4 + 5001 + 1, 'the same count for lines given as an array');
  });

  test('is full at its line count or at its byte count, whichever comes first', () => {
    const byLines = new LineBatch(3, 1 << 20);
    for (let i = 0; i < 3; i++) {
      assert.equal(byLines.full, false);
      byLines.add(raw('x', i * 2));
    }
    assert.equal(byLines.full, true);
    const byBytes = new LineBatch(1000, 10);
    byBytes.add(raw('12345', 0));
    assert.equal(byBytes.full, false);
    byBytes.add(raw('1234', 6));
    assert.equal(byBytes.full, false, '9 bytes');
    byBytes.add(raw('1', 11));
    assert.equal(byBytes.full, true, '10 bytes');
  });

  test('grows past its first buffer and index arrays with every line intact, long lines included', () => {
    const lines: RawLine[] = [];
    let position = 0;
    for (let i = 0; i < 3000; i++) {
      const text = i % 500 === 7 ? `${i}:`.padEnd(200_000, 'y') : `line ${i} ${'z'.repeat(i % 50)}`;
      lines.push(i % 700 === 3 ? raw(text, position, tooLong) : raw(text, position));
      position += text.length + 1;
    }
    const batch = LineBatch.of(lines);
    assert.equal(batch.length, 3000);
    assert.deepEqual(plain(batch), plain(lines));
  });

  test('hands its buffers to the next batch once released, and cannot be read after', () => {
    const batches = new LineBatches(100, 1 << 20);
    const first = batches.next();
    first.add(raw('the first batch, stored and released', 0));
    const buffer = first.forParser().bytes.buffer;
    assert.ok(buffer instanceof SharedArrayBuffer, 'the lines are in a buffer the parser thread can read where it is');
    first.release();
    assert.throws(() => first.at(0), /line batch read after it was released/);
    assert.throws(() => first.release(), /line batch read after it was released/);
    const second = batches.next();
    assert.equal(second.length, 0);
    second.add(raw('short', 100));
    assert.equal(second.forParser().bytes.buffer, buffer, 'the released buffer is used again');
    assert.deepEqual(plain(second), [{ text: 'short', position: 100 }], 'nothing of the earlier batch shows through');
    // A reader waiting for input lets its spare buffers go.
    second.release();
    batches.dropSpare();
    assert.notEqual(batches.next().forParser().bytes.buffer, buffer);
  });

  test('gives the parser its lines back to back and, per line, the length or -1 - the length of a line not to parse', () => {
    const batch = LineBatch.of([raw('ab', 0), raw('{"cut":', 3, tooLong), raw('cde', 5004)]);
    const { bytes, lengths } = batch.forParser();
    assert.equal(Buffer.from(bytes).toString(), 'ab{"cut":cde');
    assert.deepEqual(Array.from(lengths), [2, -1 - 7, 3]);
  });
});

describe('LineSplitter.pushInto', () => {
  test('stops after the line that fills the batch; the rest of the chunk, pushed into the next batches, gives the same lines as push()', () => {
    const { text } = feedLines(50);
    const input = Buffer.from(`${text}{"unterminated":`);
    const expected = new LineSplitter(1 << 20).push(Buffer.from(input)).map(({ line }) => ({ text: line.bytes.toString(), position: line.position }));
    assert.equal(expected.length, 50);
    const splitter = new LineSplitter(1 << 20);
    const batches = new LineBatches(7, 1 << 20);
    const got: Array<{ text: string; position: number | null }> = [];
    const ends: number[] = [];
    let chunk = input;
    let batch = batches.next();
    for (;;) {
      const taken = splitter.pushInto(chunk, batch);
      chunk = chunk.subarray(taken);
      if (!batch.full) break;
      assert.ok(taken > 0);
      got.push(...plain(batch));
      ends.push(splitter.consumed);
      batch.release();
      batch = batches.next();
    }
    got.push(...plain(batch));
    assert.deepEqual(got, expected);
    assert.equal(chunk.length, 0, 'the whole chunk is taken once the batch has room');
    assert.equal(ends.length, 7, 'seven full batches of seven lines');
    // Where a full batch stopped is the end of its last line: where a reader resumes.
    for (const [k, end] of ends.entries()) assert.equal(end, expected[(k + 1) * 7]!.position);
    assert.equal(splitter.pendingBytes, Buffer.byteLength('{"unterminated":'), 'the unterminated tail is held, not put in a batch');
    // The reader reuses its read buffer: the lines were copied, and so was the held tail.
    input.fill(0x20);
    assert.deepEqual(plain(batch).at(-1), expected.at(-1));
    const tail = splitter.takeIncomplete();
    assert.equal(tail?.line.bytes.toString(), '{"unterminated":');
  });
});

/** An ingest service on a fresh database that records the lines of each batch it stores. */
function recordingIngest(t: TestContext): { ingest: IngestService; batches: Array<{ lines: number; bytes: number; lastLineBytes: number }>; store: ReturnType<typeof openSqliteStore> } {
  const store = openSqliteStore(join(tempDir(t), 'hookrelay.db'), systemClock);
  t.after(() => store.close());
  const service = createIngestService(store, silentLog);
  const batches: Array<{ lines: number; bytes: number; lastLineBytes: number }> = [];
  const ingest: IngestService = {
    ...service,
    ingest(source, lines, position, parsed) {
      if (lines.length > 0) batches.push({ lines: lines.length, bytes: sourceBytes(lines), lastLineBytes: lines.at(lines.length - 1)!.bytes.length + 1 });
      return service.ingest(source, lines, position, parsed);
    },
  };
  return { ingest, batches, store };
}

/** Waits until the committed position of `source`, read through the service, is `position`. */
async function waitForCommitted(what: string, ingest: IngestService, source: string, position: number): Promise<void> {
  const deadline = Date.now() + WAIT_LIMIT_MS;
  while ((await ingest.position(source))?.position !== position) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(10);
  }
}

/** Each batch reached `batchBytes` with its last line and not before, but the last batch of the input. */
function assertCutAt(batches: ReadonlyArray<{ lines: number; bytes: number; lastLineBytes: number }>, batchBytes: number, total: number): void {
  assert.ok(batches.length > 2, `${batches.length} batches`);
  assert.equal(
    batches.reduce((n, b) => n + b.lines, 0),
    total,
  );
  for (const [i, b] of batches.entries()) {
    // The limit counts the lines' bytes without their newlines.
    const held = b.bytes - b.lines;
    if (i < batches.length - 1) assert.ok(held >= batchBytes, `batch ${i} holds ${held} bytes, under ${batchBytes}`);
    assert.ok(held - (b.lastLineBytes - 1) < batchBytes, `batch ${i} was already full before its last line (${held} bytes)`);
  }
}

describe('feed.batchBytes', () => {
  test('the file tailer commits a batch once its lines reach feed.batchBytes, every line once and in order', async (t) => {
    const path = join(tempDir(t), 'feed.jsonl');
    const { text, positions, bytes } = feedLines(400);
    writeFileSync(path, text);
    const { ingest, batches, store } = recordingIngest(t);
    const tailer = createFileTailer({ path, ingest, log: silentLog, maxLineBytes: 1 << 20, batchLines: 10_000, batchBytes: 4096, pollIntervalMs: 50, startPosition: 'start' });
    tailer.start();
    t.after(() => tailer.stop());
    await waitForCommitted('the whole file committed', ingest, path, bytes);
    await tailer.stop();
    assertCutAt(batches, 4096, 400);
    const stored = store.db.prepare('SELECT source_position AS position FROM events ORDER BY seq').all() as Array<{ position: number }>;
    assert.deepEqual(
      stored.map((r) => r.position),
      positions,
    );
  });

  test('so does the stream reader (standard input, hookrelay ingest), on the parser thread too', async (t) => {
    const { text } = feedLines(400);
    const { ingest, batches, store } = recordingIngest(t);
    const parser = createWorkerLineParser(silentLog);
    t.after(() => parser.close());
    // Chunks of 64 KiB, as a pipe gives them: the whole input comes as one chunk.
    const counts = await ingestStream(Readable.from([Buffer.from(text)]), { source: 'stdin', ingest, maxLineBytes: 1 << 20, batchLines: 10_000, batchBytes: 8192, log: silentLog, parser });
    assert.equal(counts.accepted, 400);
    assertCutAt(batches, 8192, 400);
    assert.equal((store.db.prepare('SELECT count(*) AS n FROM events').get() as { n: number }).n, 400);
  });
});

describe('a batch on the parser thread', () => {
  test('is read where it is, not copied or moved: the same results as parsing here, and its lines still readable for the commit', async (t) => {
    const parser = createWorkerLineParser(silentLog);
    t.after(() => parser.close());
    const { text } = feedLines(300);
    const splitter = new LineSplitter(1024);
    const batch = new LineBatch(10_000, 1 << 20);
    splitter.pushInto(Buffer.from(`${text}${'x'.repeat(2000)}\n{"not":"an event"}\n`), batch);
    assert.equal(batch.length, 302);
    const before = plain(batch);
    const parsed = await parser.parse(batch, 1_700_000_000_000);
    assert.equal(parsed.length, 302);
    for (let i = 0; i < 302; i++) {
      const line = batch.at(i)!;
      const expected = line.rejected ? null : toStorable(parseFeedLine(line.bytes, 1_700_000_000_000));
      assert.deepEqual(parsed.at(i), expected, `line ${i}`);
    }
    assert.equal(parsed.at(300), null, 'the over-long line was not parsed');
    assert.equal(parsed.at(301)?.ok, false);
    assert.deepEqual(plain(batch), before);
    parsed.release?.();
    batch.release();
  });
});

describe('a commit that fails', () => {
  test('the reader awaits the read it left in flight, restarts from the committed position and loses nothing', async (t) => {
    const path = join(tempDir(t), 'feed.jsonl');
    const { text, bytes } = feedLines(20_000);
    writeFileSync(path, text);
    const { ingest: service, store } = recordingIngest(t);
    let failures = 0;
    const unhandled: unknown[] = [];
    const onUnhandled = (reason: unknown) => unhandled.push(reason);
    process.on('unhandledRejection', onUnhandled);
    t.after(() => process.off('unhandledRejection', onUnhandled));
    const ingest: IngestService = {
      ...service,
      async ingest(source, lines, position, parsed) {
        // A batch fails once, early, with reads of the rest of the file still to come.
        if (position !== null && position.position > 80_000 && failures === 0) {
          failures++;
          throw new Error('injected commit failure');
        }
        return service.ingest(source, lines, position, parsed);
      },
    };
    const tailer = createFileTailer({ path, ingest, log: silentLog, maxLineBytes: 1 << 20, batchLines: 1000, batchBytes: 1 << 20, pollIntervalMs: 50, startPosition: 'start' });
    tailer.start();
    t.after(() => tailer.stop());
    await waitForCommitted('the whole file committed after the restart', ingest, path, bytes);
    await tailer.stop();
    assert.equal(failures, 1);
    assert.deepEqual(unhandled, []);
    const counts = store.db.prepare('SELECT count(*) AS n, count(DISTINCT source_position) AS positions FROM events').get() as { n: number; positions: number };
    assert.deepEqual(counts, { n: 20_000, positions: 20_000 });
  });
});

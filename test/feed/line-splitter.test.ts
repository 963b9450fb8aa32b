/**
 * Unit tests of the LineSplitter (src/feed/line-splitter.ts): lines and their byte offsets
 * whatever the chunking, the unterminated tail held back, CRLF kept as bytes, over-long lines
 * quarantined with their full length while only a bounded prefix is kept.
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { LineSplitter, type SplitLine } from '../../src/feed/line-splitter.ts';
import { MAX_QUARANTINED_BYTES } from '../../src/services/ingest.ts';

interface Seen {
  text: string;
  position: number | null;
  end: number;
  rejected?: { reason: string; lineBytes: number; detail: string };
}

function seen(lines: SplitLine[]): Seen[] {
  return lines.map(({ line, end }) => ({
    text: line.bytes.toString('latin1'),
    position: line.position,
    end,
    ...(line.rejected ? { rejected: { ...line.rejected } } : {}),
  }));
}

/** Pushes `input` cut into chunks of `size` bytes; returns every emitted line. */
function pushInChunks(splitter: LineSplitter, input: Buffer, size: number): SplitLine[] {
  const out: SplitLine[] = [];
  for (let i = 0; i < input.length; i += size) out.push(...splitter.push(input.subarray(i, i + size)));
  return out;
}

describe('LineSplitter', () => {
  test('splits lines with the offset of their first byte and the offset after their newline', () => {
    const s = new LineSplitter(1024);
    assert.deepEqual(seen(s.push(Buffer.from('ab\ncde\n\nf\n'))), [
      { text: 'ab', position: 0, end: 3 },
      { text: 'cde', position: 3, end: 7 },
      { text: '', position: 7, end: 8 },
      { text: 'f', position: 8, end: 10 },
    ]);
    assert.equal(s.consumed, 10);
    assert.equal(s.pendingBytes, 0);
  });

  test('gives the same lines and offsets whatever the chunk boundaries, one byte at a time included', () => {
    const input = Buffer.from('{"a":1}\n{"b":"ünï"}\n\n{"c":[1,2,3]}\nlast\n');
    const expected = seen(new LineSplitter(1024).push(input));
    assert.equal(expected.length, 5);
    for (const size of [1, 2, 3, 5, 7, 8, 13, input.length]) {
      assert.deepEqual(seen(pushInChunks(new LineSplitter(1024), input, size)), expected, `chunks of ${size}`);
    }
  });

  test('holds an unterminated tail until its newline arrives, and does not consume it', () => {
    const s = new LineSplitter(1024);
    assert.deepEqual(seen(s.push(Buffer.from('one\ntw'))), [{ text: 'one', position: 0, end: 4 }]);
    assert.equal(s.consumed, 4);
    assert.equal(s.pendingBytes, 2);
    assert.deepEqual(s.push(Buffer.from('o-and-a-')), []);
    assert.equal(s.consumed, 4);
    assert.equal(s.pendingBytes, 10);
    assert.deepEqual(seen(s.push(Buffer.from('half\nthree'))), [{ text: 'two-and-a-half', position: 4, end: 19 }]);
    assert.equal(s.consumed, 19);
    assert.equal(s.pendingBytes, 5);
  });

  test('a held tail does not alias the pushed buffer, which the reader may reuse', () => {
    const s = new LineSplitter(1024);
    const chunk = Buffer.from('first\npartial');
    s.push(chunk);
    chunk.fill(0x78); // the reader overwrites its buffer with the next read
    assert.deepEqual(seen(s.push(Buffer.from('-line\n'))), [{ text: 'partial-line', position: 6, end: 19 }]);
  });

  test('starts counting at the given offset (resuming a file) and reset() forgets the partial line', () => {
    const s = new LineSplitter(1024, 1000);
    assert.deepEqual(seen(s.push(Buffer.from('x\npart'))), [{ text: 'x', position: 1000, end: 1002 }]);
    s.reset(0);
    assert.equal(s.consumed, 0);
    assert.equal(s.pendingBytes, 0);
    assert.deepEqual(seen(s.push(Buffer.from('new\n'))), [{ text: 'new', position: 0, end: 4 }]);
  });

  test('CRLF: the \\r stays part of the line and of the offsets (JSON.parse treats it as whitespace)', () => {
    const s = new LineSplitter(1024);
    assert.deepEqual(seen(pushInChunks(s, Buffer.from('{"a":1}\r\n{"b":2}\r\n'), 8)), [
      { text: '{"a":1}\r', position: 0, end: 9 },
      { text: '{"b":2}\r', position: 9, end: 18 },
    ]);
    // A lone \r is not a line break.
    assert.deepEqual(seen(new LineSplitter(1024).push(Buffer.from('a\rb\n'))), [{ text: 'a\rb', position: 0, end: 4 }]);
  });

  test('a line exactly at the limit is a normal line; one byte more is line_too_long', () => {
    const atLimit = 'a'.repeat(1024);
    assert.deepEqual(seen(new LineSplitter(1024).push(Buffer.from(`${atLimit}\n`))), [{ text: atLimit, position: 0, end: 1025 }]);
    const over = 'b'.repeat(1025);
    assert.deepEqual(seen(new LineSplitter(1024).push(Buffer.from(`${over}\nok\n`))), [
      {
        // Only what the quarantine keeps.
        text: over.slice(0, MAX_QUARANTINED_BYTES),
        position: 0,
        end: 1026,
        rejected: { reason: 'line_too_long', lineBytes: 1025, detail: 'the line is 1025 bytes, over the limit of 1024 (feed.maxLineBytes)' },
      },
      { text: 'ok', position: 1026, end: 1029 },
    ]);
  });

  test('an over-long line arriving in many chunks: full length counted, only the excerpt the quarantine keeps, the lines behind it intact', () => {
    const maxLineBytes = 64 * 1024;
    const longLength = 5 * 1024 * 1024 + 3;
    const long = Buffer.alloc(longLength);
    for (let i = 0; i < longLength; i++) long[i] = 0x61 + (i % 26);
    const input = Buffer.concat([Buffer.from('before\n'), long, Buffer.from('\nafter\n')]);
    for (const size of [4096, 65_536, 1_000_003]) {
      const s = new LineSplitter(maxLineBytes);
      const out: SplitLine[] = [];
      for (let i = 0; i < input.length; i += size) {
        const pushed = s.push(input.subarray(i, i + size));
        out.push(...pushed);
        // While the long line is being skipped, the splitter counts its bytes so far (where a reader resumes).
        if (out.length === 1) assert.equal(s.consumed + s.pendingBytes, Math.min(i + size, input.length));
      }
      assert.equal(out.length, 3, `chunks of ${size}`);
      const [before, tooLong, after] = out as [SplitLine, SplitLine, SplitLine];
      assert.deepEqual(seen([before]), [{ text: 'before', position: 0, end: 7 }]);
      assert.equal(tooLong.line.position, 7);
      assert.equal(tooLong.end, 7 + longLength + 1);
      assert.deepEqual(tooLong.line.rejected, {
        reason: 'line_too_long',
        lineBytes: longLength,
        detail: `the line is ${longLength} bytes, over the limit of ${maxLineBytes} (feed.maxLineBytes)`,
      });
      assert.equal(tooLong.line.bytes.length, MAX_QUARANTINED_BYTES, `chunks of ${size}`);
      assert.ok(tooLong.line.bytes.equals(long.subarray(0, MAX_QUARANTINED_BYTES)), 'the kept bytes are the line\'s first bytes');
      assert.deepEqual(seen([after]), [{ text: 'after', position: 7 + longLength + 1, end: 7 + longLength + 1 + 6 }]);
      assert.equal(s.consumed, input.length);
      assert.equal(s.pendingBytes, 0);
    }
  });

  test('the kept prefix of an over-long line does not depend on how the input was chunked, even with a small limit', () => {
    const long = Buffer.from('z'.repeat(40_000));
    const input = Buffer.concat([long, Buffer.from('\n')]);
    for (const size of [100, 1500, 16_384, input.length]) {
      const [line] = pushInChunks(new LineSplitter(1024), input, size);
      assert.equal(line?.line.rejected?.lineBytes, 40_000, `chunks of ${size}`);
      assert.equal(line?.line.bytes.length, MAX_QUARANTINED_BYTES, `chunks of ${size}`);
    }
  });

  test('takeIncomplete: the tail as a line (end of a stream), or as the given reject; null when nothing is held', () => {
    const s = new LineSplitter(1024);
    s.push(Buffer.from('a\nlast-without-newline'));
    assert.deepEqual(seen([s.takeIncomplete()!]), [{ text: 'last-without-newline', position: 2, end: 22 }]);
    assert.equal(s.takeIncomplete(), null);
    assert.equal(s.consumed, 22);

    const r = new LineSplitter(1024);
    r.push(Buffer.from('cut'));
    assert.deepEqual(seen([r.takeIncomplete({ reason: 'incomplete_line', detail: 'rotated' })!]), [
      { text: 'cut', position: 0, end: 3, rejected: { reason: 'incomplete_line', lineBytes: 3, detail: 'rotated' } },
    ]);

    // An over-long unterminated tail stays line_too_long, with its full length.
    const big = new LineSplitter(1024);
    big.push(Buffer.from('y'.repeat(3000)));
    const taken = big.takeIncomplete({ reason: 'incomplete_line', detail: 'rotated' })!;
    assert.equal(taken.line.rejected?.reason, 'line_too_long');
    assert.equal(taken.line.rejected?.lineBytes, 3000);
    assert.equal(taken.end, 3000);
  });
});

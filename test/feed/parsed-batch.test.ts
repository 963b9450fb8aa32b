/**
 * Unit tests of the packed form of a parsed batch (src/feed/parsed-batch.ts) and of the line
 * parsers (src/feed/line-parser.ts): packing then unpacking gives exactly what parseFeedLine
 * gives line by line, and the worker-thread parser answers exactly as the inline one, batch by
 * batch, also when batches overlap and after it is closed.
 */
import assert from 'node:assert/strict';
import { describe, test, type TestContext } from 'node:test';
import { parseFeedLine, RejectReason, statusChangeBody, toStorable, type StorableLine } from '../../src/domain/feed-event.ts';
import { createWorkerLineParser, inlineLineParser, type LineParser } from '../../src/feed/line-parser.ts';
import { PackedLines, parseAndPack, PRE_REJECTED, unpack } from '../../src/feed/parsed-batch.ts';
import { createLogger } from '../../src/log.ts';
import type { RawLine } from '../../src/services/ingest.ts';

const RECEIVED_AT = Date.UTC(2026, 10, 22, 9, 0, 0, 250);

const base = { organization_id: 'acme', anticipation_request_id: 'ar_1842', status: 'approved' };

/** A line as bytes: a string is taken as the line's text, anything else is serialised as JSON. */
function lineBytes(value: unknown): Buffer {
  return Buffer.from(typeof value === 'string' ? value : JSON.stringify(value));
}

/**
 * Accepted lines of every shape the packed form has to carry: with and without
 * previous_status, event_id and data; non-ASCII text (é, emoji) in ids, statuses and data;
 * characters JSON escapes (quote, backslash, a NUL inside data, a lone surrogate); a missing
 * occurred_at (which takes the receive time).
 */
const ACCEPTED_LINES: Buffer[] = [
  lineBytes({ ...base, previous_status: 'submitted', occurred_at: '2026-11-22T08:30:00.000Z', event_id: 'chg_1', data: { amount_cents: 125000 } }),
  lineBytes(base),
  lineBytes({ ...base, event_id: 'chg_é_ñ', status: 'approuvé 😀', previous_status: 'soumis ✓', data: { note: 'café 😀', nested: { list: [1, 'deux', null] } } }),
  lineBytes({ ...base, event_id: 'chg_"quoted"\\back', anticipation_request_id: 'ar_"x"', occurred_at: '2026-11-22T10:30:00+02:00' }),
  // A NUL and a newline inside data: JSON.stringify escapes them, so the payload holds no U+0000 (the packing separator).
  lineBytes({ ...base, event_id: 'chg_nul_in_data', data: { nul: 'a\u0000b', newline: 'x\ny', del: '\u007f' } }),
  // A lone surrogate inside data, as a JSON escape (it cannot come as UTF-8 bytes): written escaped.
  lineBytes(`{"organization_id":"acme","anticipation_request_id":"ar_1","status":"approved","event_id":"chg_lone","data":{"s":"\\ud800"}}`),
  lineBytes({ ...base, event_id: 'chg_sep', status: 'line\u2028separator' }),
];

/** Rejected lines, one or more per reason the parser gives. */
const REJECTED_LINES: Array<{ reason: RejectReason; bytes: Buffer }> = [
  { reason: 'invalid_json', bytes: lineBytes('{"organization_id":"acme"') },
  { reason: 'invalid_json', bytes: lineBytes('') },
  { reason: 'invalid_utf8', bytes: Buffer.concat([lineBytes('{"status":"'), Buffer.from([0xc3, 0x28]), lineBytes('"}')]) },
  { reason: 'not_an_object', bytes: lineBytes('[1,2]') },
  { reason: 'missing_field', bytes: lineBytes({ organization_id: 'acme', status: 'approved', event_id: 'chg_missing_é' }) },
  { reason: 'invalid_field', bytes: lineBytes({ ...base, occurred_at: '2023-02-29T00:00:00.000Z', event_id: 'chg_bad_date' }) },
  { reason: 'invalid_field', bytes: lineBytes({ ...base, event_id: 'chg_nul\u0000id' }) },
  { reason: 'invalid_field', bytes: lineBytes({ ...base, status: 'line\nbreak' }) },
  { reason: 'invalid_field', bytes: lineBytes(`{"organization_id":"acme","anticipation_request_id":"ar_1","status":"approved","event_id":"chg_\\ud800_lone"}`) },
  { reason: 'unknown_field', bytes: lineBytes({ ...base, amount_cents: 5 }) },
];

/** `bytes` and `lengths` as parseAndPack takes them; null stands for a line rejected before parsing. */
function packInput(lines: ReadonlyArray<Buffer | null>): { bytes: Uint8Array; lengths: Int32Array } {
  const lengths = Int32Array.from(lines, (line) => (line === null ? PRE_REJECTED : line.length));
  return { bytes: Buffer.concat(lines.filter((l): l is Buffer => l !== null)), lengths };
}

/** What the packed form must reproduce: parseFeedLine per line, reduced to what storing takes, null where the line was rejected before parsing. */
function expectedResults(lines: ReadonlyArray<Buffer | null>, receivedAt: number): Array<StorableLine | null> {
  return lines.map((line) => (line === null ? null : toStorable(parseFeedLine(line, receivedAt))));
}

function roundTrip(lines: ReadonlyArray<Buffer | null>, receivedAt: number): Array<StorableLine | null> {
  const { bytes, lengths } = packInput(lines);
  return unpack(parseAndPack(bytes, lengths, receivedAt));
}

function countOutcomes(results: ReadonlyArray<StorableLine | null>): { accepted: number; rejected: number; preRejected: number } {
  return {
    accepted: results.filter((r) => r?.ok === true).length,
    rejected: results.filter((r) => r?.ok === false).length,
    preRejected: results.filter((r) => r === null).length,
  };
}

describe('parseAndPack / unpack', () => {
  test('a mixed batch comes back exactly as parseFeedLine gives each line, null for the slots rejected before parsing', () => {
    // Accepted, rejected and pre-rejected lines interleaved, with pre-rejected slots first and last.
    const lines: Array<Buffer | null> = [null];
    for (let i = 0; i < Math.max(ACCEPTED_LINES.length, REJECTED_LINES.length); i++) {
      if (ACCEPTED_LINES[i]) lines.push(ACCEPTED_LINES[i]!);
      if (REJECTED_LINES[i]) lines.push(REJECTED_LINES[i]!.bytes);
      if (i % 3 === 0) lines.push(null);
    }
    lines.push(null);

    const expected = expectedResults(lines, RECEIVED_AT);
    // The fixture is what we think it is: every kind of outcome, each reject for its reason.
    assert.deepEqual(countOutcomes(expected), { accepted: ACCEPTED_LINES.length, rejected: REJECTED_LINES.length, preRejected: lines.length - ACCEPTED_LINES.length - REJECTED_LINES.length });
    assert.deepEqual(
      expected.filter((r) => r?.ok === false).map((r) => (r as { reason: string }).reason),
      REJECTED_LINES.map((r) => r.reason),
    );

    const { bytes, lengths } = packInput(lines);
    const batch = parseAndPack(bytes, lengths, RECEIVED_AT);
    assert.equal(batch.occurredAt.length, ACCEPTED_LINES.length);
    assert.equal(batch.rejects.length, REJECTED_LINES.length);
    assert.deepEqual(unpack(batch), expected);
  });

  test('what may be absent survives: previous_status null vs given (inside the payload), the receive time as occurred_at', () => {
    const results = roundTrip([lineBytes(base), lineBytes({ ...base, previous_status: 'submitted' })], RECEIVED_AT);
    const [withoutPrevious, withPrevious] = results.map((r) => {
      if (r === null || !r.ok) return assert.fail(`expected an accepted line, got ${JSON.stringify(r)}`);
      return r.event;
    });
    assert.equal(JSON.parse(statusChangeBody(withoutPrevious!)).data.previous_status, null);
    assert.equal(withoutPrevious!.occurredAt, RECEIVED_AT);
    assert.equal(JSON.parse(statusChangeBody(withPrevious!)).data.previous_status, 'submitted');
  });

  test('the packed batch survives a structured clone (what crosses to the main thread)', () => {
    const lines = [null, ...ACCEPTED_LINES, ...REJECTED_LINES.map((r) => r.bytes), null];
    const { bytes, lengths } = packInput(lines);
    assert.deepEqual(unpack(structuredClone(parseAndPack(bytes, lengths, RECEIVED_AT))), expectedResults(lines, RECEIVED_AT));
  });

  test('an empty batch packs to nothing and unpacks to no results', () => {
    const batch = parseAndPack(new Uint8Array(0), new Int32Array(0), RECEIVED_AT);
    assert.equal(batch.slots.length, 0);
    assert.equal(batch.text.byteLength, 0);
    assert.equal(batch.occurredAt.length, 0);
    assert.deepEqual(batch.rejects, []);
    assert.deepEqual(unpack(batch), []);
  });

  test('a batch of rejects only (parsed and before parsing) has no event text and unpacks to the same rejects', () => {
    const lines = [...REJECTED_LINES.map((r) => r.bytes), null, REJECTED_LINES[0]!.bytes];
    const { bytes, lengths } = packInput(lines);
    const batch = parseAndPack(bytes, lengths, RECEIVED_AT);
    assert.equal(batch.text.byteLength, 0);
    assert.equal(batch.occurredAt.length, 0);
    const results = unpack(batch);
    assert.deepEqual(results, expectedResults(lines, RECEIVED_AT));
    assert.deepEqual(countOutcomes(results), { accepted: 0, rejected: REJECTED_LINES.length + 1, preRejected: 1 });
    // Only pre-rejected slots: nothing is parsed at all.
    assert.deepEqual(roundTrip([null, null], RECEIVED_AT), [null, null]);
  });

  test('a batch of one accepted line (no separator in the text) round-trips', () => {
    const lines = [ACCEPTED_LINES[2]!];
    assert.deepEqual(roundTrip(lines, RECEIVED_AT), expectedResults(lines, RECEIVED_AT));
  });

  test('PackedLines decodes any line on request, in any order and again, and nothing past the end', () => {
    const lines = [null, ...ACCEPTED_LINES, ...REJECTED_LINES.map((r) => r.bytes), null];
    const { bytes, lengths } = packInput(lines);
    const packed = new PackedLines(parseAndPack(bytes, lengths, RECEIVED_AT));
    const expected = expectedResults(lines, RECEIVED_AT);
    assert.equal(packed.length, lines.length);
    // Backwards, then forwards: each line stands alone (the ingest asks for each once, but nothing depends on the order).
    for (let i = lines.length - 1; i >= 0; i--) assert.deepEqual(packed.at(i), expected[i], `line ${i}, backwards`);
    for (let i = 0; i < lines.length; i++) assert.deepEqual(packed.at(i), expected[i], `line ${i}, again`);
    assert.equal(packed.at(lines.length), undefined);
    assert.equal(packed.at(-1), undefined);
  });

  test('results are packed into a buffer handed back when it is large enough, with the same results', () => {
    const lines = [null, ...ACCEPTED_LINES, ...REJECTED_LINES.map((r) => r.bytes)];
    const { bytes, lengths } = packInput(lines);
    const first = parseAndPack(bytes, lengths, RECEIVED_AT);
    let handedBack: ArrayBuffer | null = null;
    const packed = new PackedLines(first, (text) => {
      assert.equal(handedBack, null, 'handed back once');
      handedBack = text;
    });
    assert.deepEqual(packed.at(1), expectedResults(lines, RECEIVED_AT)[1]);
    packed.release();
    packed.release();
    assert.equal(handedBack, first.text.buffer);
    assert.throws(() => packed.at(1), /packed batch read after it was released/);
    // Garbage left in the reused buffer does not show through.
    new Uint8Array(handedBack!).fill(0x41);
    const again = parseAndPack(bytes, lengths, RECEIVED_AT, handedBack!);
    assert.equal(again.text.buffer, handedBack, 'the buffer was reused');
    assert.deepEqual(unpack(again), expectedResults(lines, RECEIVED_AT));
    // Too small a buffer is not used.
    const small = new ArrayBuffer(16);
    assert.notEqual(parseAndPack(bytes, lengths, RECEIVED_AT, small).text.buffer, small);
  });

  test('a line not to parse whose bytes are in the input (-1 - its length) is skipped, and the lines after it read from the right place', () => {
    const kept = ACCEPTED_LINES.slice(0, 3);
    const skipped = Buffer.from('{"organization_id":"acme","cut off');
    const bytes = Buffer.concat([kept[0]!, skipped, kept[1]!, skipped, skipped, kept[2]!]);
    const lengths = Int32Array.from([kept[0]!.length, -1 - skipped.length, kept[1]!.length, -1 - skipped.length, -1 - skipped.length, kept[2]!.length]);
    assert.deepEqual(unpack(parseAndPack(bytes, lengths, RECEIVED_AT)), expectedResults([kept[0]!, null, kept[1]!, null, null, kept[2]!], RECEIVED_AT));
  });

  test('fields that outgrow the room reserved for them (data most of each line) grow the buffer, with the same results', () => {
    // The reserved text is three quarters of the lines' bytes; these fields take nearly all of them.
    const lines = Array.from({ length: 40 }, (_, i) => lineBytes({ ...base, event_id: `chg_big_${i}`, data: { blob: 'ü'.repeat(2000 + i) } }));
    const { bytes, lengths } = packInput(lines);
    const batch = parseAndPack(bytes, lengths, RECEIVED_AT);
    assert.ok(batch.text.byteLength > bytes.length * 0.9, `${batch.text.byteLength} bytes of text for ${bytes.length} bytes of lines`);
    assert.deepEqual(unpack(batch), expectedResults(lines, RECEIVED_AT));
    // Every part of the results is in one buffer, the one handed back (PackedLines.release) and filled again.
    for (const part of [batch.slots, batch.starts, batch.occurredAt]) assert.equal(part.buffer, batch.text.buffer);
    const again = parseAndPack(bytes, lengths, RECEIVED_AT, batch.text.buffer as ArrayBuffer);
    assert.equal(again.text.buffer, batch.text.buffer, 'the grown buffer serves the next batch');
    assert.deepEqual(unpack(again), expectedResults(lines, RECEIVED_AT));
  });

  test('PackedLines refuses a batch whose offsets do not match its events, and an event whose text was cut short', () => {
    const { bytes, lengths } = packInput(ACCEPTED_LINES.slice(0, 3));
    const batch = parseAndPack(bytes, lengths, RECEIVED_AT);
    assert.throws(() => new PackedLines({ ...batch, starts: batch.starts.subarray(0, 2) }), /packed batch holds 2 offsets for 3 events/);
    assert.throws(() => new PackedLines({ ...batch, text: batch.text.subarray(0, batch.text.byteLength - 1) }), /does not end with the sixth field of its last event/);
    // The second event's start moved into the last event's fields: fewer than six separators follow it.
    const shifted = Int32Array.from(batch.starts);
    shifted[1] = Buffer.from(batch.text).indexOf(0, shifted[2]!) + 1;
    const packed = new PackedLines({ ...batch, starts: shifted });
    assert.throws(() => packed.at(1), /packed batch event 1 does not hold six fields/);
    assert.deepEqual(packed.at(0), toStorable(parseFeedLine(ACCEPTED_LINES[0]!, RECEIVED_AT)), 'the other events are still read');
  });

  test("a line's trace context crosses in the sixth field; a line without one costs an empty field", () => {
    const traced = [
      JSON.stringify({ organization_id: 'acme', anticipation_request_id: 'ar_t', status: 'approved', event_id: 'evt_t1', traceparent: '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01', tracestate: 'v=1' }),
      JSON.stringify({ organization_id: 'acme', anticipation_request_id: 'ar_t', status: 'approved', event_id: 'evt_t2', traceparent: 'bad' }),
      JSON.stringify({ organization_id: 'acme', anticipation_request_id: 'ar_t', status: 'approved', event_id: 'evt_t3' }),
    ].map((l) => Buffer.from(l));
    const { bytes, lengths } = packInput(traced);
    const results = unpack(parseAndPack(bytes, lengths, RECEIVED_AT));
    assert.deepEqual(results, traced.map((l) => toStorable(parseFeedLine(l, RECEIVED_AT))));
    const events = results.map((r) => (r?.ok ? r.event : undefined));
    assert.deepEqual(events[0]?.trace, { traceparent: '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01', tracestate: 'v=1', ignored: null });
    assert.equal(events[1]?.trace?.traceparent, null);
    assert.match(events[1]?.trace?.ignored ?? '', /was ignored/);
    assert.ok(events[2] !== undefined && !('trace' in events[2]), 'no trace on a line without one');
  });

  test('unpack refuses a batch whose text does not hold six fields per event', () => {
    const { bytes, lengths } = packInput(ACCEPTED_LINES.slice(0, 2));
    const batch = parseAndPack(bytes, lengths, RECEIVED_AT);
    const extra = Buffer.concat([batch.text, Buffer.from('extra\u0000')]);
    assert.throws(() => unpack({ ...batch, text: extra }), /packed batch text does not end with the sixth field of its last event/);
  });
});

/** A few thousand lines: mostly accepted, some rejected by the parser, some rejected before parsing (line_too_long, incomplete_line). */
function mixedRawLines(count: number, salt: string): RawLine[] {
  const lines: RawLine[] = [];
  let position = 0;
  for (let i = 0; i < count; i++) {
    let line: RawLine;
    if (i % 97 === 5) {
      const bytes = lineBytes({ ...base, event_id: `too_long_${i}` });
      line = { bytes, position, rejected: { reason: RejectReason.lineTooLong, lineBytes: 2_000_000, detail: 'the line is longer than 1048576 bytes' } };
    } else if (i % 89 === 7) {
      line = { bytes: lineBytes('{"organization_id":"ac'), position, rejected: { reason: RejectReason.incompleteLine, lineBytes: 22, detail: 'the feed was rotated before this line was terminated' } };
    } else if (i % 13 === 3) {
      line = { bytes: REJECTED_LINES[i % REJECTED_LINES.length]!.bytes, position };
    } else if (i % 11 === 4) {
      line = { bytes: ACCEPTED_LINES[i % ACCEPTED_LINES.length]!, position };
    } else {
      const value: Record<string, unknown> = { ...base, anticipation_request_id: `ar_${salt}_${i}`, event_id: `chg_${salt}_${i}_é` };
      if (i % 2 === 0) value.previous_status = 'submitted';
      if (i % 3 === 0) value.occurred_at = new Date(Date.UTC(2026, 0, 1) + i * 1000).toISOString();
      if (i % 5 === 0) value.data = { i, note: `n°${i} 😀` };
      line = { bytes: lineBytes(value), position };
    }
    lines.push(line);
    position += line.bytes.length + 1;
  }
  return lines;
}

/** The worker parser with a logger that keeps its records; closed when the test ends. */
function workerParser(t: TestContext, idleThreadMs?: number): { parser: LineParser & { readonly threadRunning: boolean }; logRecords: Array<Record<string, unknown>> } {
  const logRecords: Array<Record<string, unknown>> = [];
  const log = createLogger('info', { write: (line: string) => void logRecords.push(JSON.parse(line) as Record<string, unknown>) });
  const parser = createWorkerLineParser(log, idleThreadMs === undefined ? {} : { idleThreadMs });
  t.after(() => parser.close());
  return { parser, logRecords };
}

/** A parser's results as an array (a worker parser decodes them one at a time, on request). */
async function parseAll(parser: LineParser, lines: readonly RawLine[], receivedAt: number): Promise<Array<StorableLine | null>> {
  const parsed = await parser.parse(lines, receivedAt);
  const all = Array.from({ length: parsed.length }, (_, i) => parsed.at(i) ?? null);
  // As the ingest pipeline does once a batch is stored: the next batches write into its buffer.
  parsed.release?.();
  return all;
}

/** The worker logs an error exactly when it gives up and parses on the calling thread. */
function fallbackErrors(logRecords: ReadonlyArray<Record<string, unknown>>): Array<Record<string, unknown>> {
  return logRecords.filter((r) => r.subsystem === 'feed-parser');
}

describe('worker line parser', () => {
  test('gives the same results as the inline parser for a few thousand mixed lines, on its thread, leaving the lines intact', async (t) => {
    const { parser, logRecords } = workerParser(t);
    const lines = mixedRawLines(3000, 'a');
    const snapshot = lines.map((l) => Buffer.from(l.bytes));

    const expected = await parseAll(inlineLineParser, lines, RECEIVED_AT);
    const outcomes = countOutcomes(expected);
    assert.ok(outcomes.accepted > 2000 && outcomes.rejected > 100 && outcomes.preRejected > 30, JSON.stringify(outcomes));
    lines.forEach((line, i) => {
      if (line.rejected) assert.equal(expected[i], null, `line ${i} was rejected before parsing`);
    });

    const got = await parseAll(parser, lines, RECEIVED_AT);
    assert.deepEqual(got, expected);
    // The worker really parsed them (it logs an error whenever it falls back to this thread).
    assert.deepEqual(fallbackErrors(logRecords), []);
    // The lines' buffers are copied, not transferred: the caller still has every byte (ingest quarantines them).
    lines.forEach((line, i) => assert.ok(line.bytes.equals(snapshot[i]!), `line ${i} changed`));
  });

  test('several batches in flight at once each get their own results, in line order', async (t) => {
    const { parser, logRecords } = workerParser(t);
    const batches = Array.from({ length: 6 }, (_, b) => ({ lines: mixedRawLines(500 + b * 137, `b${b}`), receivedAt: RECEIVED_AT + b * 60_000 }));
    const results = await Promise.all(batches.map((b) => parseAll(parser, b.lines, b.receivedAt)));
    for (const [b, batch] of batches.entries()) {
      assert.equal(results[b]!.length, batch.lines.length, `batch ${b}`);
      assert.deepEqual(results[b], await parseAll(inlineLineParser, batch.lines, batch.receivedAt), `batch ${b}`);
    }
    // An empty batch in between is answered too.
    assert.deepEqual(await parseAll(parser, [], RECEIVED_AT), []);
    assert.deepEqual(fallbackErrors(logRecords), []);
  });

  test('a line without occurred_at takes the receivedAt of its own batch, not of another batch in flight', async (t) => {
    const { parser } = workerParser(t);
    const line: RawLine = { bytes: lineBytes(base), position: 0 };
    const times = [RECEIVED_AT, RECEIVED_AT + 1, RECEIVED_AT - 5_000];
    const results = await Promise.all(times.map((time) => parseAll(parser, [line], time)));
    assert.deepEqual(
      results.map((r) => (r[0]?.ok ? r[0].event.occurredAt : null)),
      times,
    );
  });

  test('after close() parse still answers, on the calling thread, with the same results', async (t) => {
    const { parser, logRecords } = workerParser(t);
    const lines = mixedRawLines(400, 'c');
    const expected = await parseAll(inlineLineParser, lines, RECEIVED_AT);
    assert.deepEqual(await parseAll(parser, lines, RECEIVED_AT), expected);
    await parser.close();
    assert.deepEqual(await parseAll(parser, lines, RECEIVED_AT), expected);
    // Closing twice is harmless.
    await parser.close();
    assert.deepEqual(await parseAll(parser, lines.slice(0, 10), RECEIVED_AT), expected.slice(0, 10));
    // A deliberate close is not a failure.
    assert.deepEqual(fallbackErrors(logRecords), []);
  });

  test('an idle thread is ended, and the next large batch starts a new one with the same results', async (t) => {
    const { parser, logRecords } = workerParser(t, 200);
    assert.equal(parser.threadRunning, false, 'no thread before the first large batch');
    const first = mixedRawLines(1500, 'e');
    assert.deepEqual(await parseAll(parser, first, RECEIVED_AT), await parseAll(inlineLineParser, first, RECEIVED_AT));
    assert.equal(parser.threadRunning, true);
    // Batches of other sizes reuse the buffers the thread gave back, larger and smaller.
    for (const n of [3000, 700, 2999]) {
      const lines = mixedRawLines(n, `f${n}`);
      assert.deepEqual(await parseAll(parser, lines, RECEIVED_AT), await parseAll(inlineLineParser, lines, RECEIVED_AT), `${n} lines`);
    }
    const deadline = Date.now() + 10_000;
    while (parser.threadRunning && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
    assert.equal(parser.threadRunning, false, 'the thread ended after 200 ms without a batch');
    // The next large batch gets a new thread.
    const again = mixedRawLines(2500, 'g');
    assert.deepEqual(await parseAll(parser, again, RECEIVED_AT), await parseAll(inlineLineParser, again, RECEIVED_AT));
    assert.equal(parser.threadRunning, true, 'a new thread parsed it');
    assert.deepEqual(fallbackErrors(logRecords), [], 'never fell back to the calling thread');
  });

  test('a parse in flight when close() is called is still answered', async (t) => {
    const { parser } = workerParser(t);
    const lines = mixedRawLines(2000, 'd');
    const pending = parser.parse(lines, RECEIVED_AT);
    await parser.close();
    assert.deepEqual(await pending, await parseAll(inlineLineParser, lines, RECEIVED_AT));
  });
});

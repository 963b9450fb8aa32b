/**
 * A fuzz test of the feed: random and structured lines (valid ones, deep nesting, huge and tiny
 * numbers, long strings, random code points in ids and data, invalid UTF-8, cut-off JSON,
 * repeated lines and repeated ids with other content, lines over the size limit). The parser
 * never throws and gives a known reason for every line it refuses; the daemon's reader stores or
 * quarantines every line of a file of them, and its position reaches the end of the file.
 *
 * Seeds: a few fixed ones, and one new each run, printed (FUZZ_SEED=N reruns that one alone).
 */
import assert from 'node:assert/strict';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, test } from 'node:test';
import { parseFeedLine, RejectReason } from '../../src/domain/feed-event.ts';
import { feedRelay, scratchDir } from '../helpers/feed-helpers.ts';

const KNOWN_REASONS = new Set<string>(Object.values(RejectReason));
const RECEIVED_AT = Date.UTC(2026, 10, 28);
/** The reader's line limit in this test: low, so that some lines are over it. */
const MAX_LINE_BYTES = 64 * 1024;

/** mulberry32: a small seeded generator, so a failing seed can be run again. */
function generator(seed: number) {
  let a = seed >>> 0;
  const next = (): number => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
  const int = (n: number): number => Math.floor(next() * n);
  const pick = <T>(items: readonly T[]): T => items[int(items.length)]!;
  return { next, int, pick };
}
type Random = ReturnType<typeof generator>;

/** Code points that make trouble: controls, C1, bidi and invisible ones, surrogates' neighbours, astral, non-characters. */
const AWKWARD_CODE_POINTS = [0x00, 0x09, 0x0a, 0x1b, 0x22, 0x5c, 0x7f, 0x85, 0x9b, 0xa0, 0xad, 0xff, 0x100, 0x202e, 0x2066, 0x2028, 0xfeff, 0xfffd, 0xffff, 0x1f600, 0x10ffff, 0x65e5];

function randomString(r: Random, maxLength: number): string {
  const length = r.int(maxLength + 1);
  let s = '';
  for (let i = 0; i < length; i++) {
    const kind = r.int(4);
    if (kind === 0) s += String.fromCodePoint(r.pick(AWKWARD_CODE_POINTS));
    else if (kind === 1) s += String.fromCodePoint(r.int(0xd800));
    else s += String.fromCharCode(0x20 + r.int(0x5f));
  }
  return s;
}

const NUMBERS = ['0', '-0', '1e400', '-1e400', '1e-400', '9007199254740993', '123456789012345678901234567890', '1.5', '-2.5e10', '0.1'];

/** A random JSON text of at most `depth` levels (numbers written as text, so that 1e400 gets through). */
function randomJson(r: Random, depth: number): string {
  const kind = depth <= 0 ? r.int(4) : r.int(6);
  switch (kind) {
    case 0:
      return r.pick(NUMBERS);
    case 1:
      return JSON.stringify(randomString(r, 12));
    case 2:
      return r.pick(['true', 'false', 'null']);
    case 3:
      return `"${'x'.repeat(r.int(2000))}"`;
    case 4:
      return `[${Array.from({ length: r.int(4) }, () => randomJson(r, depth - 1)).join(',')}]`;
    default:
      return `{${Array.from({ length: r.int(4) }, () => `${JSON.stringify(randomString(r, 6))}:${randomJson(r, depth - 1)}`).join(',')}}`;
  }
}

function deep(r: Random): string {
  const depth = r.pick([65, 70, 500, 3_000, 10_000, 50_000]);
  return r.int(2) === 0 ? '['.repeat(depth) + ']'.repeat(depth) : '{"a":'.repeat(depth) + '1' + '}'.repeat(depth);
}

/** One line's bytes, without newline (the lines written to a file must not hold 0x0a). */
function randomLine(r: Random, i: number, earlier: readonly Buffer[]): Buffer {
  const base = () => ({ organization_id: r.pick(['org-a', 'org-b', 'no-such-org']), anticipation_request_id: `ar_${r.int(50)}`, status: r.pick(['submitted', 'approved', 'rejected']) });
  const kind = r.int(12);
  switch (kind) {
    case 0:
      return Buffer.from(JSON.stringify({ ...base(), event_id: `chg_${i}` }));
    case 1: {
      const fieldsText = JSON.stringify({ ...base(), event_id: `chg_${i}` });
      return Buffer.from(`${fieldsText.slice(0, -1)},"data":${r.int(3) === 0 ? `{"x":${deep(r)}}` : `{"x":${randomJson(r, 4)}}`}}`);
    }
    case 2:
      // Random code points in the id and the statuses.
      return Buffer.from(JSON.stringify({ ...base(), event_id: randomString(r, 20), status: randomString(r, 10) }));
    case 3: {
      // Random bytes: invalid UTF-8 more often than not.
      const bytes = Buffer.alloc(r.int(200));
      for (let k = 0; k < bytes.length; k++) bytes[k] = r.int(256);
      return bytes;
    }
    case 4: {
      // A valid line cut short.
      const whole = Buffer.from(JSON.stringify({ ...base(), event_id: `chg_cut_${i}`, data: { note: randomString(r, 30) } }));
      return whole.subarray(0, r.int(whole.length));
    }
    case 5:
      // A long string: sometimes over the reader's limit.
      return Buffer.from(JSON.stringify({ ...base(), event_id: `chg_long_${i}`, data: { blob: 'y'.repeat(r.pick([1_000, 40_000, 70_000])) } }));
    case 6:
      return earlier.length > 0 ? r.pick(earlier) : Buffer.from('{}');
    case 7:
      // A repeated id with other content: a conflict.
      return Buffer.from(JSON.stringify({ ...base(), event_id: `chg_${r.int(Math.max(1, i))}`, status: `other_${r.int(1000)}` }));
    case 8:
      return Buffer.from(`{${randomString(r, 40)}`);
    case 9:
      return Buffer.from(randomJson(r, 3));
    case 10:
      return Buffer.from(JSON.stringify({ ...base(), occurred_at: r.pick(['2026-02-30T00:00:00Z', '2028-02-29T12:00:00Z', 'yesterday', '2026-11-28T24:00:00Z', '2026-11-28T08:00:00+23:59']), event_id: `chg_t_${i}` }));
    default:
      return Buffer.from(`${JSON.stringify({ ...base(), event_id: `chg_${i}` }).slice(0, -1)},"data":{"n":${r.pick(NUMBERS)}}}`);
  }
}

/** The bytes as a line of a file: every newline inside replaced, so that it stays one line. */
function asLine(bytes: Buffer): Buffer {
  const copy = Buffer.from(bytes);
  for (let k = 0; k < copy.length; k++) if (copy[k] === 0x0a) copy[k] = 0x20;
  return copy;
}

function linesFor(seed: number, count: number): Buffer[] {
  const r = generator(seed);
  const lines: Buffer[] = [];
  for (let i = 0; i < count; i++) lines.push(asLine(randomLine(r, i, lines)));
  return lines;
}

const SEEDS = process.env.FUZZ_SEED !== undefined ? [Number(process.env.FUZZ_SEED)] : [1, 2, 3, (Date.now() % 1_000_000_007) >>> 0];

describe('feed fuzz', () => {
  test('parseFeedLine never throws, and every refusal has a known reason and a detail', (t) => {
    for (const seed of SEEDS) {
      t.diagnostic(`seed ${seed}`);
      let accepted = 0;
      const reasons = new Map<string, number>();
      for (const line of linesFor(seed, 4_000)) {
        const parsed = parseFeedLine(line, RECEIVED_AT);
        if (parsed.ok) {
          accepted++;
          continue;
        }
        assert.ok(KNOWN_REASONS.has(parsed.reason), `seed ${seed}: unknown reason ${parsed.reason}`);
        assert.notEqual(parsed.reason, RejectReason.processingFailed, `seed ${seed}: ${parsed.detail}`);
        assert.ok(parsed.detail.length > 0);
        reasons.set(parsed.reason, (reasons.get(parsed.reason) ?? 0) + 1);
      }
      // The generator reaches both sides and the main reasons (else it tests little).
      assert.ok(accepted > 200, `seed ${seed}: only ${accepted} accepted`);
      for (const reason of ['invalid_json', 'invalid_utf8', 'invalid_field', 'nesting_too_deep', 'not_an_object']) assert.ok((reasons.get(reason) ?? 0) > 0, `seed ${seed}: no ${reason} among ${[...reasons]}`);
    }
  });

  test('the daemon stores or quarantines every line of a fuzzed file, and its position reaches the end', async (t) => {
    for (const seed of SEEDS.slice(-2)) {
      t.diagnostic(`seed ${seed}`);
      const stateDir = scratchDir(t);
      const path = join(stateDir, 'feed.jsonl');
      const lines = linesFor(seed, 3_000);
      const file = Buffer.concat(lines.flatMap((l) => [l, Buffer.from('\n')]));
      writeFileSync(path, file);
      const relay = feedRelay(t, { 'feed.path': path, 'feed.maxLineBytes': String(MAX_LINE_BYTES) }, { stateDir });
      await relay.start();
      const probe = relay.probe();
      const stats = await probe.waitForLines(path, lines.length);
      assert.equal(stats.accepted + stats.duplicates + stats.quarantined, lines.length, `seed ${seed}`);
      assert.equal(probe.position(path), file.length, `seed ${seed}: the position is not at the end of the file`);
      assert.equal(probe.eventCount(), stats.accepted);
      const rejects = probe.rejects();
      assert.equal(rejects.length, stats.quarantined);
      for (const reject of rejects) {
        assert.ok(KNOWN_REASONS.has(reject.reason), `seed ${seed}: unknown reason ${reject.reason}`);
        assert.notEqual(reject.reason, RejectReason.processingFailed, `seed ${seed}: ${reject.detail}`);
      }
      assert.ok(rejects.some((r) => r.reason === 'line_too_long'), `seed ${seed}: no line over the limit`);
      assert.equal(relay.logRecords().filter((r) => String(r.msg).startsWith('feed reader failed')).length, 0, `seed ${seed}: the reader failed`);
      await relay.stop();
    }
  });
});

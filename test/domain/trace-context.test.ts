/**
 * W3C Trace Context as a feed line carries it (domain/trace-context.ts): traceparent and
 * tracestate checked to the recommendation's rules, a later version read by its first fields, and
 * a malformed value left out with a reason that never quotes it, the event kept.
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { parseFeedLine } from '../../src/domain/feed-event.ts';
import { checkTracestate, formatTraceparent, lineTrace, parseTraceparent, traceIdOf } from '../../src/domain/trace-context.ts';

const TRACE = '4bf92f3577b34da6a3ce929d0e0e4736';
const SPAN = '00f067aa0ba902b7';
const VALID = `00-${TRACE}-${SPAN}-01`;

describe('parseTraceparent', () => {
  test('version 00 as written; its parts', () => {
    assert.deepEqual(parseTraceparent(VALID), { traceId: TRACE, spanId: SPAN, flags: 1, traceparent: VALID });
    assert.deepEqual(parseTraceparent(`00-${TRACE}-${SPAN}-00`), { traceId: TRACE, spanId: SPAN, flags: 0, traceparent: `00-${TRACE}-${SPAN}-00` });
  });

  test('a later version is read by its first four fields and stored as version 00', () => {
    assert.deepEqual(parseTraceparent(`cc-${TRACE}-${SPAN}-01-what-comes-next`), { traceId: TRACE, spanId: SPAN, flags: 1, traceparent: VALID });
    assert.deepEqual(parseTraceparent(`01-${TRACE}-${SPAN}-01`), { traceId: TRACE, spanId: SPAN, flags: 1, traceparent: VALID });
  });

  for (const [what, value, problem] of [
    ['not a string', 42, /must be a string/],
    ['version ff', `ff-${TRACE}-${SPAN}-01`, /other than ff/],
    ['upper case', VALID.toUpperCase(), /lower-case hex/],
    ['a short trace id', `00-${TRACE.slice(1)}-${SPAN}-01`, /2-32-16-2/],
    ['more after version 00', `${VALID}-extra`, /2-32-16-2/],
    ['a trace id of zeros', `00-${'0'.repeat(32)}-${SPAN}-01`, /trace id of zeros/],
    ['a parent id of zeros', `00-${TRACE}-${'0'.repeat(16)}-01`, /parent id of zeros/],
    ['a later version glued to more', `cc-${TRACE}-${SPAN}-01x`, /2-32-16-2/],
  ] as const) {
    test(`refuses ${what}, without quoting it`, () => {
      const parsed = parseTraceparent(value);
      assert.ok('problem' in parsed, `${String(value)} is refused`);
      assert.match(parsed.problem, problem);
      if (typeof value === 'string') assert.ok(!parsed.problem.includes(value));
    });
  }

  test('traceIdOf and formatTraceparent', () => {
    assert.equal(traceIdOf(VALID), TRACE);
    assert.equal(formatTraceparent(TRACE, SPAN, 1), VALID);
    assert.equal(formatTraceparent(TRACE, SPAN, 0xab), `00-${TRACE}-${SPAN}-ab`);
  });
});

describe('checkTracestate', () => {
  test('list members, spaces and empty members allowed', () => {
    for (const value of ['vendor=abc', 'rojo=00f067aa0ba902b7,congo=t61rcWkgMzE', ' a=1 ,\t, b@sys=x y ', 'tenant@vendor=v']) assert.deepEqual(checkTracestate(value), { tracestate: value });
  });
  for (const [what, value] of [
    ['a member without "="', 'vendor'],
    ['an upper-case key', 'Vendor=1'],
    ['a value with "="', 'a=b=c'],
    ['a key twice', 'a=1,a=2'],
    ['more than 32 members', Array.from({ length: 33 }, (_, i) => `k${i}=v`).join(',')],
    ['more than 512 characters', `a=${'x'.repeat(600)}`],
    ['nothing but commas', ' , '],
    ['not a string', ['a=1']],
  ] as const) {
    test(`refuses ${what}`, () => assert.ok('problem' in checkTracestate(value)));
  }
});

describe('a feed line\'s trace context', () => {
  const line = (extra: Record<string, unknown>) => Buffer.from(JSON.stringify({ organization_id: 'acme', anticipation_request_id: 'ar_1', status: 'approved', event_id: 'evt_1', ...extra }));
  const accepted = (extra: Record<string, unknown>) => {
    const parsed = parseFeedLine(line(extra), 0);
    assert.ok(parsed.ok, 'the line is accepted');
    return parsed.event;
  };

  test('absent or null: no trace on the event (nothing more stored)', () => {
    assert.equal('trace' in accepted({}), false);
    assert.equal('trace' in accepted({ traceparent: null, tracestate: null }), false);
  });

  test('valid: kept, with its tracestate', () => {
    assert.deepEqual(accepted({ traceparent: VALID, tracestate: 'vendor=abc' }).trace, { traceparent: VALID, tracestate: 'vendor=abc', ignored: null });
    assert.deepEqual(accepted({ traceparent: VALID }).trace, { traceparent: VALID, tracestate: null, ignored: null });
  });

  test('malformed: left out, the event kept, the reason said', () => {
    assert.deepEqual(accepted({ traceparent: '00-garbage', tracestate: 'vendor=abc' }).trace, {
      traceparent: null,
      tracestate: null,
      ignored: '"traceparent" must be VERSION-TRACEID-PARENTID-FLAGS in lower-case hex (2-32-16-2 digits), such as "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"; it was ignored with "tracestate"',
    });
    assert.deepEqual(accepted({ traceparent: VALID, tracestate: 'Bad' }).trace, { traceparent: VALID, tracestate: null, ignored: '"tracestate" must be key=value members (W3C Trace Context list members) separated by commas; it was ignored, "traceparent" kept' });
    assert.deepEqual(accepted({ tracestate: 'vendor=abc' }).trace, { traceparent: null, tracestate: null, ignored: '"tracestate" without "traceparent" was ignored' });
    assert.deepEqual(lineTrace(7, undefined), { traceparent: null, tracestate: null, ignored: '"traceparent" must be a string such as "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"; it was ignored' });
  });

  test('the trace context is not part of the notification: the same change with another traceparent is the same body', () => {
    const a = accepted({ traceparent: VALID });
    const b = accepted({ traceparent: `00-${TRACE}-1111111111111111-01` });
    assert.equal(a.details, b.details);
    assert.ok(!a.details.includes('traceparent'));
  });

  test('a line with a malformed field elsewhere is still refused for that field', () => {
    const parsed = parseFeedLine(Buffer.from(JSON.stringify({ organization_id: 'acme', status: 'approved', traceparent: 'garbage' })), 0);
    assert.equal(parsed.ok, false);
    assert.equal(!parsed.ok && parsed.reason, 'missing_field');
  });
});

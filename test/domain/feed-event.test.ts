/**
 * Unit tests of the feed line parser (src/domain/feed-event.ts): every reject reason it
 * gives, the defaults it fills in, the derived event id and the exact webhook body.
 */
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { describe, test } from 'node:test';
import { canonicalJson, EVENT_TYPE, LINE_EXCERPT_BYTES, lineExcerpt, MAX_EVENT_ID_LENGTH, parseFeedLine, sameNotification, statusChangeBody, type ParsedLine } from '../../src/domain/feed-event.ts';

const RECEIVED_AT = Date.UTC(2026, 10, 22, 9, 0, 0, 250);
const RECEIVED_ISO = '2026-11-22T09:00:00.250Z';

const base = { organization_id: 'acme', anticipation_request_id: 'ar_1842', status: 'approved' };

function parse(value: unknown, receivedAt = RECEIVED_AT): ParsedLine {
  return parseFeedLine(Buffer.from(typeof value === 'string' ? value : JSON.stringify(value)), receivedAt);
}

function rejected(result: ParsedLine): { reason: string; detail: string; eventId: string | null } {
  assert.equal(result.ok, false, `expected a reject, got ${JSON.stringify(result)}`);
  if (result.ok) throw new Error('unreachable');
  return { reason: result.reason, detail: result.detail, eventId: result.eventId };
}

function accepted(result: ParsedLine) {
  if (!result.ok) assert.fail(`expected the line to be accepted, got ${result.reason}: ${result.detail}`);
  return result.event;
}

/** Each given occurred_at is accepted, and both its time and the body carry the canonical UTC form. */
function assertNormalised(cases: ReadonlyArray<readonly [given: string, iso: string]>): void {
  for (const [given, iso] of cases) {
    const event = accepted(parse({ ...base, occurred_at: given }));
    assert.equal(event.occurredAt, Date.parse(iso), given);
    const body = JSON.parse(statusChangeBody(event));
    assert.equal(body.timestamp, iso, given);
    assert.equal(body.data.occurred_at, iso, given);
  }
}

describe('parseFeedLine rejects', () => {
  test('bytes that are not UTF-8: invalid_utf8', () => {
    const bytes = Buffer.concat([Buffer.from('{"organization_id":"acme","anticipation_request_id":"ar_1","status":"'), Buffer.from([0xc3, 0x28]), Buffer.from('"}')]);
    const r = rejected(parseFeedLine(bytes, RECEIVED_AT));
    assert.deepEqual(r, { reason: 'invalid_utf8', detail: 'the line is not valid UTF-8', eventId: null });
    // A lone continuation byte, and a truncated multi-byte sequence at the end.
    assert.equal(rejected(parseFeedLine(Buffer.from([0x7b, 0x80, 0x7d]), RECEIVED_AT)).reason, 'invalid_utf8');
    assert.equal(rejected(parseFeedLine(Buffer.from([0x7b, 0x7d, 0xe2, 0x82]), RECEIVED_AT)).reason, 'invalid_utf8');
  });

  test('text that is not JSON, an empty line included: invalid_json', () => {
    for (const line of ['{"organization_id":"acme"', 'not json', '', '   ', "{'a':1}", '{"a":1} {"b":2}']) {
      const r = rejected(parse(line));
      assert.equal(r.reason, 'invalid_json', `line ${JSON.stringify(line)}`);
      assert.match(r.detail, /^not valid JSON: /);
      assert.equal(r.eventId, null);
    }
  });

  test('JSON that is not an object: not_an_object', () => {
    for (const line of ['[]', '[{"organization_id":"acme"}]', '"text"', '42', 'null', 'true']) {
      assert.deepEqual(rejected(parse(line)), { reason: 'not_an_object', detail: 'each line must be one JSON object', eventId: null }, line);
    }
  });

  test('a required field absent or null: missing_field, naming the field', () => {
    for (const field of ['organization_id', 'anticipation_request_id', 'status'] as const) {
      const without: Record<string, unknown> = { ...base };
      delete without[field];
      assert.deepEqual(rejected(parse(without)), { reason: 'missing_field', detail: `"${field}" is required`, eventId: null });
      assert.deepEqual(rejected(parse({ ...base, [field]: null })), { reason: 'missing_field', detail: `"${field}" is required`, eventId: null });
    }
  });

  test('a reject keeps the given event_id, so the quarantine shows which event it was', () => {
    const r = rejected(parse({ event_id: 'chg_1', organization_id: 'acme', status: 'approved' }));
    assert.deepEqual(r, { reason: 'missing_field', detail: '"anticipation_request_id" is required', eventId: 'chg_1' });
  });

  test('text fields of the wrong type, empty or too long: invalid_field', () => {
    for (const field of ['anticipation_request_id', 'status', 'previous_status'] as const) {
      for (const bad of [5, true, '', ['x'], { a: 1 }]) {
        assert.deepEqual(rejected(parse({ ...base, [field]: bad })), { reason: 'invalid_field', detail: `"${field}" must be a non-empty string`, eventId: null }, `${field}=${JSON.stringify(bad)}`);
      }
      assert.deepEqual(rejected(parse({ ...base, [field]: 'x'.repeat(201) })), { reason: 'invalid_field', detail: `"${field}" must be at most 200 characters`, eventId: null });
      accepted(parse({ ...base, [field]: 'x'.repeat(200) }));
    }
  });

  test('a bad organization_id: invalid_field', () => {
    for (const bad of ['has space', '-leading-dash', 'a'.repeat(65), 'ünïcode', 'a/b']) {
      const r = rejected(parse({ ...base, organization_id: bad }));
      assert.equal(r.reason, 'invalid_field', bad);
      assert.match(r.detail, /^"organization_id" must be 1-64 characters/);
    }
    assert.deepEqual(rejected(parse({ ...base, organization_id: 7 })), { reason: 'invalid_field', detail: '"organization_id" must be a non-empty string', eventId: null });
    assert.equal(accepted(parse({ ...base, organization_id: 'A.b_c-9' })).orgId, 'A.b_c-9');
    assert.equal(accepted(parse({ ...base, organization_id: 'a'.repeat(64) })).orgId, 'a'.repeat(64));
  });

  test('event_id of the wrong type, empty or over 200 characters: invalid_field', () => {
    const detail = `"event_id" must be a string of 1-${MAX_EVENT_ID_LENGTH} characters`;
    assert.deepEqual(rejected(parse({ ...base, event_id: 'e'.repeat(MAX_EVENT_ID_LENGTH + 1) })), { reason: 'invalid_field', detail, eventId: 'e'.repeat(201) });
    assert.deepEqual(rejected(parse({ ...base, event_id: '' })), { reason: 'invalid_field', detail, eventId: '' });
    for (const bad of [12, null, false, ['a'], { id: 'a' }]) {
      assert.deepEqual(rejected(parse({ ...base, event_id: bad })), { reason: 'invalid_field', detail, eventId: null }, JSON.stringify(bad));
    }
    assert.equal(accepted(parse({ ...base, event_id: 'e'.repeat(MAX_EVENT_ID_LENGTH) })).id, 'e'.repeat(200));
  });

  test('occurred_at that is not an RFC 3339 date-time: invalid_field', () => {
    const detail = '"occurred_at" must be an RFC 3339 date-time such as 2026-11-22T08:30:00Z';
    for (const bad of [
      '2026-11-22',
      '2026-11-22T08:30:00', // no offset
      '22/11/2026 08:30',
      'yesterday',
      '2026-13-01T00:00:00Z', // month 13
      '2026-11-22T08:30:00+0100', // offset without colon
      1764000000000,
      true,
      {},
      '',
    ]) {
      assert.deepEqual(rejected(parse({ ...base, occurred_at: bad })), { reason: 'invalid_field', detail, eventId: null }, JSON.stringify(bad));
    }
  });

  test('occurred_at naming a day or time that does not exist is refused, not moved to another day', () => {
    // Date.parse rolls these over (2026-02-30 becomes 2026-03-02); a notification must not carry a date nobody sent.
    for (const bad of ['2026-02-30T00:00:00Z', '2026-02-29T00:00:00Z', '2026-04-31T12:00:00Z', '2026-01-01T24:00:00Z', '2026-01-01T23:60:00Z', '2026-01-01T00:00:00+24:00']) {
      assert.equal(rejected(parse({ ...base, occurred_at: bad })).reason, 'invalid_field', bad);
    }
    assert.equal(accepted(parse({ ...base, occurred_at: '2028-02-29T00:00:00Z' })).occurredAt, Date.UTC(2028, 1, 29));
    assert.equal(accepted(parse({ ...base, occurred_at: '2026-12-31T23:59:59.999Z' })).occurredAt, Date.UTC(2026, 11, 31, 23, 59, 59, 999));
  });

  test('data that is not an object, or uses a reserved key: invalid_field', () => {
    for (const bad of [[1, 2], 'text', 5, true]) {
      assert.deepEqual(rejected(parse({ ...base, data: bad })), { reason: 'invalid_field', detail: '"data" must be a JSON object', eventId: null }, JSON.stringify(bad));
    }
    for (const key of ['event_id', 'organization_id', 'anticipation_request_id', 'status', 'previous_status', 'occurred_at']) {
      assert.deepEqual(rejected(parse({ ...base, data: { amount: 1, [key]: 'x' } })), {
        reason: 'invalid_field',
        detail: `"data" must not contain the reserved key(s) ${key}`,
        eventId: null,
      });
    }
    assert.equal(rejected(parse({ ...base, data: { status: 'x', occurred_at: 'y' } })).detail, '"data" must not contain the reserved key(s) status, occurred_at');
  });

  test('a top-level field that is not part of the format: unknown_field', () => {
    assert.deepEqual(rejected(parse({ ...base, amount_cents: 100 })), {
      reason: 'unknown_field',
      detail: 'unknown field "amount_cents"; put extra fields under "data"',
      eventId: null,
    });
    assert.deepEqual(rejected(parse({ ...base, event_id: 'chg_9', Status: 'x' })), {
      reason: 'unknown_field',
      detail: 'unknown field "Status"; put extra fields under "data"',
      eventId: 'chg_9',
    });
    assert.equal(rejected(parse('{"organization_id":"acme","anticipation_request_id":"ar_1","status":"x","__proto__":{}}')).reason, 'unknown_field');
  });
});

describe('parseFeedLine accepts', () => {
  test('a full line: exact event and exact webhook body, data passed through after the event fields', () => {
    const line = {
      organization_id: 'acme',
      anticipation_request_id: 'ar_1842',
      status: 'approved',
      previous_status: 'submitted',
      occurred_at: '2026-11-22T08:30:00.000Z',
      event_id: 'chg_77812',
      data: { amount_cents: 125000, nested: { a: [1, 'two'] } },
    };
    const event = accepted(parse(line));
    assert.deepEqual(
      { ...event, details: undefined },
      {
        id: 'chg_77812',
        orgId: 'acme',
        anticipationRequestId: 'ar_1842',
        status: 'approved',
        previousStatus: 'submitted',
        occurredAt: Date.UTC(2026, 10, 22, 8, 30),
        details: undefined,
        legacyId: null,
      },
    );
    assert.equal(
      statusChangeBody(event),
      '{"type":"anticipation_request.status_changed","timestamp":"2026-11-22T08:30:00.000Z","data":{"event_id":"chg_77812","organization_id":"acme",' +
        '"anticipation_request_id":"ar_1842","occurred_at":"2026-11-22T08:30:00.000Z","status":"approved","previous_status":"submitted",' +
        '"amount_cents":125000,"nested":{"a":[1,"two"]}}}',
    );
    assert.equal(EVENT_TYPE, 'anticipation_request.status_changed');
  });

  test('optional fields absent: previous_status null, occurred_at and timestamp = ingestion time, no extra data keys', () => {
    const event = accepted(parse(base));
    assert.equal(event.previousStatus, null);
    assert.equal(event.occurredAt, RECEIVED_AT);
    assert.deepEqual(JSON.parse(statusChangeBody(event)), {
      type: EVENT_TYPE,
      timestamp: RECEIVED_ISO,
      data: {
        event_id: event.id,
        organization_id: 'acme',
        anticipation_request_id: 'ar_1842',
        status: 'approved',
        previous_status: null,
        occurred_at: RECEIVED_ISO,
      },
    });
    // null stands for absent in the optional fields too.
    const withNulls = accepted(parse({ ...base, previous_status: null, occurred_at: null, data: null }));
    assert.equal(withNulls.previousStatus, null);
    assert.equal(withNulls.occurredAt, RECEIVED_AT);
    // An empty data object adds nothing.
    assert.deepEqual(Object.keys(JSON.parse(statusChangeBody(accepted(parse({ ...base, data: {} })))).data), [
      'event_id',
      'organization_id',
      'anticipation_request_id',
      'occurred_at',
      'status',
      'previous_status',
    ]);
  });

  test('occurred_at in other RFC 3339 forms is normalised to UTC with milliseconds', () => {
    const cases: Array<[string, string]> = [
      ['2026-11-22T08:30:00Z', '2026-11-22T08:30:00.000Z'],
      ['2026-11-22T10:30:00+02:00', '2026-11-22T08:30:00.000Z'],
      ['2026-11-22T05:00:00.5-03:30', '2026-11-22T08:30:00.500Z'],
      ['2026-11-22 08:30:00Z', '2026-11-22T08:30:00.000Z'],
      ['2026-11-22T08:30:00.123456Z', '2026-11-22T08:30:00.123Z'],
    ];
    assertNormalised(cases);
  });

  test('without event_id or occurred_at the id is derived from the line bytes: evt_ + 32 hex digits of their SHA-256, the same every time', () => {
    const line = Buffer.from(JSON.stringify(base));
    const expected = `evt_${createHash('sha256').update(line).digest('hex').slice(0, 32)}`;
    const first = accepted(parseFeedLine(line, RECEIVED_AT));
    // Ingested at another time: still the same id (the line is the same).
    const again = accepted(parseFeedLine(Buffer.from(line), RECEIVED_AT + 60_000));
    assert.equal(first.id, expected);
    assert.equal(again.id, expected);
    assert.match(first.id, /^evt_[0-9a-f]{32}$/);
    // That was already the id before schema version 5: nothing else to look for.
    assert.equal(first.legacyId, null);
    assert.equal(JSON.parse(statusChangeBody(first)).data.event_id, expected);
    // Another line (even only spacing) is another id.
    assert.notEqual(accepted(parse(JSON.stringify(base, null, 1).replace(/\n/g, ''))).id, expected);
    assert.notEqual(accepted(parse({ ...base, status: 'rejected' })).id, expected);
  });

  test('without event_id but with occurred_at the derived id starts with that time in compact UTC, so the ids of a feed in time order increase', () => {
    const line = Buffer.from(JSON.stringify({ ...base, occurred_at: '2026-11-22T09:30:00.5+01:00' }));
    const hash = createHash('sha256').update(line).digest('hex').slice(0, 32);
    const first = accepted(parseFeedLine(line, RECEIVED_AT));
    assert.equal(first.id, `evt_20261122T083000500Z_${hash}`);
    // Deterministic: the same line read at another time is the same id; the id of before version 5 comes with it.
    const again = accepted(parseFeedLine(Buffer.from(line), RECEIVED_AT + 60_000));
    assert.deepEqual([again.id, again.legacyId], [first.id, `evt_${hash}`]);
    assert.equal(JSON.parse(statusChangeBody(first)).data.event_id, first.id);
    // Later lines sort after earlier ones, whatever their hashes.
    const ids = Array.from({ length: 50 }, (_, i) => accepted(parse({ ...base, occurred_at: new Date(Date.UTC(2026, 10, 22) + i * 37).toISOString() })).id);
    assert.deepEqual([...ids].sort(), ids);
    // A given event_id is the id, with nothing derived.
    const given = accepted(parse({ ...base, occurred_at: '2026-11-22T08:30:00Z', event_id: 'chg_1' }));
    assert.deepEqual([given.id, given.legacyId], ['chg_1', null]);
  });

  test('a line ending in \\r (CRLF feeds) parses, the \\r being JSON whitespace', () => {
    const event = accepted(parse(JSON.stringify({ ...base, event_id: 'chg_cr' }) + '\r'));
    assert.equal(event.id, 'chg_cr');
    assert.equal(event.status, 'approved');
  });

  test('strings are passed through exactly, including characters JSON must escape', () => {
    const status = 'needs "review" \\ ünïcode ✓ \u2028';
    const event = accepted(parse({ ...base, status, data: { note: 'line\nbreak' } }));
    assert.equal(event.status, status);
    assert.equal(JSON.parse(statusChangeBody(event)).data.status, status);
    assert.equal(JSON.parse(statusChangeBody(event)).data.note, 'line\nbreak');
  });
});

describe('parseFeedLine: control characters in ids and statuses', () => {
  const fieldsToCheck = ['event_id', 'anticipation_request_id', 'status', 'previous_status'] as const;

  test('a C0 control character or DEL in event_id, anticipation_request_id, status or previous_status: invalid_field', () => {
    for (const field of fieldsToCheck) {
      for (const control of ['\u0000', '\n', '\r', '\t', '\u001b', '\u001f', '\u007f']) {
        const value = `chg_${control}_1`;
        // JSON.stringify writes the C0 characters as escapes (\u0000, \n) and DEL as the raw byte 0x7f.
        const r = rejected(parse({ ...base, [field]: value }));
        assert.deepEqual(
          r,
          { reason: 'invalid_field', detail: `"${field}" must not contain control characters`, eventId: field === 'event_id' ? value : null },
          `${field} with U+${control.charCodeAt(0).toString(16).padStart(4, '0')}`,
        );
        assert.match(r.detail, /control characters/);
      }
    }
  });

  test('control characters written as JSON escapes in the line are refused the same way', () => {
    for (const escape of ['\\u0000', '\\n', '\\u007f', '\\u007F', '\\b']) {
      const line = `{"organization_id":"acme","anticipation_request_id":"ar_1","status":"approved","previous_status":"sub${escape}mitted"}`;
      assert.deepEqual(rejected(parse(line)), { reason: 'invalid_field', detail: '"previous_status" must not contain control characters', eventId: null }, line);
    }
    const line = '{"organization_id":"acme","anticipation_request_id":"ar_1","status":"approved","event_id":"chg\\u00001"}';
    assert.deepEqual(rejected(parse(line)), { reason: 'invalid_field', detail: '"event_id" must not contain control characters', eventId: 'chg\u00001' });
  });

  test('the first problem is the one reported: a bad event_id before a missing field', () => {
    assert.deepEqual(rejected(parse({ organization_id: 'acme', event_id: 'a\nb' })), {
      reason: 'invalid_field',
      detail: '"event_id" must not contain control characters',
      eventId: 'a\nb',
    });
  });

  test('characters that are not C0 controls or DEL pass: quote, backslash, non-ASCII, U+0080, U+2028 (event_id: only what a header carries)', () => {
    for (const field of fieldsToCheck) {
      const values = field === 'event_id' ? ['a"b', 'a\\b', 'é', 'in side'] : ['a"b', 'a\\b', 'é', '😀', 'x\u0080y', 'x\u2028y', ' spaced '];
      for (const value of values) {
        const event = accepted(parse({ ...base, [field]: value }));
        const stored = { event_id: event.id, anticipation_request_id: event.anticipationRequestId, status: event.status, previous_status: event.previousStatus }[field];
        assert.equal(stored, value, `${field}=${JSON.stringify(value)}`);
      }
    }
  });
});

describe('parseFeedLine: the webhook body for ids and statuses that need JSON escaping', () => {
  /** The body as it was built before plain strings were quoted by hand: JSON.stringify of every field. */
  function bodyBuiltWithStringify(event: { id: string; orgId: string; anticipationRequestId: string; status: string; previousStatus: string | null }, iso: string, dataJson = ''): string {
    return (
      `{"type":"${EVENT_TYPE}","timestamp":${JSON.stringify(iso)},"data":{"event_id":${JSON.stringify(event.id)},"organization_id":${JSON.stringify(event.orgId)},` +
      `"anticipation_request_id":${JSON.stringify(event.anticipationRequestId)},"occurred_at":${JSON.stringify(iso)},` +
      `"status":${JSON.stringify(event.status)},"previous_status":${JSON.stringify(event.previousStatus)}${dataJson}}}`
    );
  }

  const OCCURRED = '2026-11-22T08:30:00.000Z';
  const awkward = ['chg_"quoted"', 'chg_back\\slash', 'chg_\\"both\\"', 'chg_é', 'chg_😀', 'ünï"cödé\\😀', 'x\u2028y\u2029z', 'tab-like \\t text', 'chg_plain'];

  /** The awkward values an HTTP header can carry (Latin-1, no control character): event ids may hold them. */
  const headerSafe = awkward.filter((v) => /^[\x20-\x7e\u00a0-\u00ff]+$/.test(v));

  test('an event_id with a quote, a backslash or Latin-1 letters is accepted, and the body holds it exactly as JSON.stringify writes it', () => {
    assert.ok(headerSafe.length >= 6);
    for (const id of headerSafe) {
      const event = accepted(parse({ ...base, event_id: id, previous_status: 'submitted', occurred_at: OCCURRED }));
      assert.equal(event.id, id);
      assert.equal(JSON.parse(statusChangeBody(event)).data.event_id, id, id);
      assert.equal(statusChangeBody(event), bodyBuiltWithStringify(event, OCCURRED), id);
      assert.ok(statusChangeBody(event).includes(`"event_id":${JSON.stringify(id)},`), id);
    }
  });

  test('the same holds for anticipation_request_id, status and previous_status, with data after them', () => {
    for (const value of awkward) {
      const line = { organization_id: 'acme', anticipation_request_id: `ar_${value}`, status: `st_${value}`, previous_status: `prev_${value}`, occurred_at: OCCURRED, event_id: 'chg_1', data: { note: value } };
      const event = accepted(parse(line));
      assert.equal(statusChangeBody(event), bodyBuiltWithStringify(event, OCCURRED, `,"note":${JSON.stringify(value)}`), value);
      const body = JSON.parse(statusChangeBody(event));
      assert.equal(body.data.anticipation_request_id, `ar_${value}`);
      assert.equal(body.data.status, `st_${value}`);
      assert.equal(body.data.previous_status, `prev_${value}`);
      assert.equal(body.data.note, value);
    }
  });

  test('a lone surrogate (a JSON escape in the line) in an id or status is refused: it cannot be stored as UTF-8, so the id read back would differ from the body', () => {
    for (const [field, escaped] of [
      ['event_id', 'chg_\\ud83d'],
      ['anticipation_request_id', 'ar_\\udc00'],
      ['status', '\\udc00\\ud800'],
      ['previous_status', 'x\\ud800'],
    ] as const) {
      const fieldsText = { organization_id: 'acme', anticipation_request_id: 'ar_1', status: 'approved', occurred_at: OCCURRED, event_id: 'chg_1' } as Record<string, string>;
      const line = '{' + Object.entries({ ...fieldsText, [field]: '@' }).map(([k, v]) => `"${k}":"${v === '@' ? escaped : v}"`).join(',') + '}';
      const result = parse(line);
      assert.equal(result.ok, false, line);
      assert.ok(!result.ok && result.reason === 'invalid_field' && result.detail.includes(`"${field}"`) && result.detail.includes('surrogate'), JSON.stringify(result));
    }
    // A pair written as two escapes is one character: accepted.
    const paired = accepted(parse(`{"organization_id":"acme","anticipation_request_id":"ar_\\ud83d\\ude00","status":"approved","occurred_at":"${OCCURRED}","event_id":"chg_1"}`));
    assert.equal(paired.anticipationRequestId, 'ar_😀');
  });

  test('a lone surrogate inside data is written escaped, as JSON.stringify does, so the body stays valid UTF-8 text', () => {
    const line = `{"organization_id":"acme","anticipation_request_id":"ar_1","status":"approved","occurred_at":"${OCCURRED}","event_id":"chg_1","data":{"s":"\\ud83d"}}`;
    const event = accepted(parse(line));
    assert.ok(statusChangeBody(event).includes('"s":"\\ud83d"'), statusChangeBody(event));
    assert.equal(JSON.parse(statusChangeBody(event)).data.s, '\ud83d');
  });

  test('a derived id and a missing previous_status give the same body as before', () => {
    const event = accepted(parse({ ...base, status: 'é"\\' }));
    assert.equal(event.previousStatus, null);
    assert.equal(statusChangeBody(event), bodyBuiltWithStringify(event, RECEIVED_ISO));
  });
});

describe('parseFeedLine: occurred_at in the canonical form YYYY-MM-DDTHH:MM:SS.mmmZ', () => {
  /** Epoch ms of a UTC date-time for any year (Date.UTC would move years 0-99 to 1900-1999). */
  function utcMs(year: number, month: number, day: number, hour = 0, minute = 0, second = 0, ms = 0): number {
    const date = new Date(0);
    date.setUTCFullYear(year, month - 1, day);
    return date.setUTCHours(hour, minute, second, ms);
  }

  test('valid dates are accepted with the exact time, and the text is kept as given', () => {
    const cases: Array<[string, number]> = [
      ['2024-02-29T23:59:59.999Z', Date.UTC(2024, 1, 29, 23, 59, 59, 999)],
      ['2000-02-29T12:00:00.000Z', Date.UTC(2000, 1, 29, 12)],
      ['2026-11-22T08:30:00.001Z', Date.UTC(2026, 10, 22, 8, 30, 0, 1)],
      ['1970-01-01T00:00:00.000Z', 0],
      ['1969-12-31T23:59:59.999Z', -1],
      ['9999-12-31T23:59:59.999Z', Date.UTC(9999, 11, 31, 23, 59, 59, 999)],
      ['0001-01-01T00:00:00.000Z', utcMs(1, 1, 1)],
      ['0099-12-31T23:59:59.999Z', utcMs(99, 12, 31, 23, 59, 59, 999)],
      ['0004-02-29T01:02:03.004Z', utcMs(4, 2, 29, 1, 2, 3, 4)],
      ['0000-02-29T00:00:00.000Z', utcMs(0, 2, 29)],
    ];
    for (const [given, ms] of cases) {
      const event = accepted(parse({ ...base, occurred_at: given }));
      assert.equal(event.occurredAt, ms, given);
      // Date.parse reads the ISO form with 4-digit years as given (no 1900 shift): a second witness.
      assert.equal(event.occurredAt, Date.parse(given), given);
      assert.equal(new Date(event.occurredAt).toISOString(), given, given);
      const body = JSON.parse(statusChangeBody(event));
      assert.equal(body.timestamp, given);
      assert.equal(body.data.occurred_at, given);
    }
    // Years below 100 really are years 1-99, not 1901-1999.
    assert.equal(new Date(accepted(parse({ ...base, occurred_at: '0099-12-31T23:59:59.999Z' })).occurredAt).getUTCFullYear(), 99);
    assert.equal(new Date(accepted(parse({ ...base, occurred_at: '0001-01-01T00:00:00.000Z' })).occurredAt).getUTCFullYear(), 1);
  });

  test('dates and times that do not exist are refused, not rolled over', () => {
    const detail = '"occurred_at" must be an RFC 3339 date-time such as 2026-11-22T08:30:00Z';
    for (const bad of [
      '2023-02-29T00:00:00.000Z', // not a leap year
      '1900-02-29T00:00:00.000Z', // a century that is not a leap year
      '2026-02-30T00:00:00.000Z',
      '2026-04-31T00:00:00.000Z',
      '2026-06-31T00:00:00.000Z',
      '2026-09-31T00:00:00.000Z',
      '2026-11-31T00:00:00.000Z',
      '2026-01-32T00:00:00.000Z',
      '2026-01-00T00:00:00.000Z',
      '2026-00-10T00:00:00.000Z',
      '2026-13-10T00:00:00.000Z',
      '2026-01-01T24:00:00.000Z',
      '2026-01-01T23:60:00.000Z',
      '2026-01-01T23:59:60.000Z',
      '2026-01-01T99:00:00.000Z',
    ]) {
      assert.deepEqual(rejected(parse({ ...base, occurred_at: bad })), { reason: 'invalid_field', detail, eventId: null }, bad);
    }
  });

  test('text of the canonical length that is not a date-time is refused', () => {
    for (const bad of [
      '2026-1a-01T00:00:00.000Z',
      '2026-01-01T00:00:00.00aZ',
      '20x6-01-01T00:00:00.000Z',
      '2026-01-01T0 :00:00.000Z',
      '2026-01-01T-1:00:00.000Z',
      '+026-01-01T00:00:00.000Z',
      '2026/01/01T00:00:00.000Z',
      '2026-01-01X00:00:00.000Z',
      '2026-01-01T00-00:00.000Z',
      '2026-01-01T00:00:00,000Z',
      '2026-01-01T00:00:00.000+',
      '２０２６-01-01T00:00:00.000Z', // full-width digits
    ]) {
      assert.equal(rejected(parse({ ...base, occurred_at: bad })).reason, 'invalid_field', bad);
    }
  });

  test('other RFC 3339 forms still take the general path: offsets, no or other fractions, lowercase t and z, a space', () => {
    const cases: Array<[string, string]> = [
      ['2026-11-22t08:30:00.000Z', '2026-11-22T08:30:00.000Z'],
      ['2026-11-22T08:30:00.000z', '2026-11-22T08:30:00.000Z'],
      ['2026-11-22t08:30:00z', '2026-11-22T08:30:00.000Z'],
      ['2026-11-22T08:30:00.000+00:00', '2026-11-22T08:30:00.000Z'],
      ['2026-11-22T08:30:00.000-00:00', '2026-11-22T08:30:00.000Z'],
      ['2026-11-23T00:30:00.250+16:00', '2026-11-22T08:30:00.250Z'],
      ['2024-02-29T23:59:59+00:00', '2024-02-29T23:59:59.000Z'],
      ['2026-11-22 08:30:00.000Z', '2026-11-22T08:30:00.000Z'],
      ['2026-11-22T08:30:00.12Z', '2026-11-22T08:30:00.120Z'],
      ['0050-06-15T12:00:00Z', '0050-06-15T12:00:00.000Z'],
    ];
    assertNormalised(cases);
    // And the general path still refuses what does not exist.
    for (const bad of ['2023-02-29T00:00:00Z', '2026-01-01t24:00:00z', '2026-04-31T00:00:00.000+00:00']) {
      assert.equal(rejected(parse({ ...base, occurred_at: bad })).reason, 'invalid_field', bad);
    }
  });
});

describe('sameNotification / canonicalJson', () => {
  test('equal JSON values with different key order and spacing are the same notification; other values are not', () => {
    assert.equal(sameNotification('{"a":1,"b":{"c":[1,{"d":2,"e":3}]}}', '{ "b" : { "c" : [1, {"e":3,"d":2}] }, "a" : 1 }'), true);
    assert.equal(sameNotification('{"a":1,"b":[1,2]}', '{"a":1,"b":[2,1]}'), false);
    assert.equal(sameNotification('{"a":1}', '{"a":1,"b":null}'), false);
    assert.equal(canonicalJson({ b: 1, a: [{ d: 1, c: 2 }] }), '{"a":[{"c":2,"d":1}],"b":1}');
  });

  test('two lines with the same event_id, fields and data in another order, make the same notification', () => {
    const one = accepted(parse('{"event_id":"chg_1","organization_id":"acme","anticipation_request_id":"ar_1","status":"approved","data":{"x":1,"y":2}}'));
    const two = accepted(parse('{"data":{"y":2,"x":1},"status":"approved","anticipation_request_id":"ar_1","organization_id":"acme","event_id":"chg_1"}'));
    assert.equal(sameNotification(statusChangeBody(one), statusChangeBody(two)), true);
    const other = accepted(parse('{"event_id":"chg_1","organization_id":"acme","anticipation_request_id":"ar_1","status":"rejected","data":{"x":1,"y":2}}'));
    assert.equal(sameNotification(statusChangeBody(one), statusChangeBody(other)), false);
  });
});

describe('what a reject says of its line (issue 31, point 2)', () => {
  test('invalid_json says where (the byte of the line) and why, and quotes nothing of the line', () => {
    const cases: ReadonlyArray<readonly [line: string, detail: string]> = [
      ['root:*:20228:0:99999:7:::', 'not valid JSON: an unexpected character where a value should be at byte 0 of the line'],
      ['{"organization_id": "org-a", oops}', 'not valid JSON: an unexpected character where a field name in double quotes should be at byte 29 of the line'],
      ['{"organization_id":"acme"', "not valid JSON: the text ends inside an object at byte 25 of the line"],
      ['{"a":1} {"b":2}', 'not valid JSON: more text after the JSON value at byte 8 of the line'],
      ['', 'not valid JSON: the text is empty at byte 0 of the line'],
      ['   ', 'not valid JSON: the text holds only whitespace at byte 3 of the line'],
      ["{'a':1}", 'not valid JSON: an unexpected character where a field name in double quotes should be at byte 1 of the line'],
      ['{"a":"x\ty"}', 'not valid JSON: a control character inside a string (escape it) at byte 7 of the line'],
      ['{"a":"\\q"}', 'not valid JSON: an invalid escape in a string at byte 7 of the line'],
      ['{"a":"\\u12G4"}', 'not valid JSON: an invalid \\u escape in a string at byte 10 of the line'],
      ['{"a":tru}', 'not valid JSON: an unexpected character (true, false or null misspelt?) at byte 8 of the line'],
      ['{"a":01}', "not valid JSON: an unexpected character where ',' or '}' should be at byte 6 of the line"],
      ['{"a":1.}', 'not valid JSON: an invalid number (no digit after its decimal point) at byte 7 of the line'],
      ['{"a":[1,2}', "not valid JSON: an unexpected character where ',' or ']' should be at byte 9 of the line"],
      ['{"a" 1}', "not valid JSON: an unexpected character where ':' should follow a field name at byte 5 of the line"],
      ['{"ä":"é", x}', 'not valid JSON: an unexpected character where a field name in double quotes should be at byte 12 of the line'],
      ['{"a":"never closed', 'not valid JSON: the text ends inside a string at byte 18 of the line'],
      ['['.repeat(100_000), 'not valid JSON: the text ends inside an array at byte 100000 of the line'],
    ];
    for (const [line, detail] of cases) {
      const r = rejected(parse(line));
      assert.equal(r.reason, 'invalid_json', line.slice(0, 40));
      assert.equal(r.detail, detail, line.slice(0, 40));
    }
  });

  test('an unknown field and a conflicting event_id are quoted as short escaped excerpts', () => {
    const key = `k${'\u202e'.repeat(3)}${'x'.repeat(5000)}`;
    const r = rejected(parse(`{"${key}":1,"organization_id":"acme","anticipation_request_id":"ar_1","status":"approved"}`));
    assert.equal(r.reason, 'unknown_field');
    assert.equal(r.detail, `unknown field "k\\u202e\\u202e\\u202e${'x'.repeat(36)}..."; put extra fields under "data"`);
  });

  test('lineExcerpt: at most 64 bytes, escaped to one line of plain text, with "..." when the line is longer', () => {
    assert.equal(LINE_EXCERPT_BYTES, 64);
    const cases: ReadonlyArray<readonly [bytes: Buffer, lineBytes: number | undefined, excerpt: string]> = [
      [Buffer.from('{"organization_id":"acme"}'), undefined, '{"organization_id":"acme"}'],
      [Buffer.from('a\\b\nc\rd\te'), undefined, 'a\\\\b\\nc\\rd\\te'],
      [Buffer.from('\u001b[2J\u0007\u007f\u0085x'), undefined, '\\u001b[2J\\u0007\\u007f\\u0085x'],
      [Buffer.from('user\u202egpj.exe \u200b\ufeff'), undefined, 'user\\u202egpj.exe \\u200b\\ufeff'],
      [Buffer.from([0x7b, 0xff, 0xfe, 0x7d, 0xc3, 0x28, 0xe0, 0x80, 0x80, 0xed, 0xa0, 0x80]), undefined, '{\\xff\\xfe}\\xc3(\\xe0\\x80\\x80\\xed\\xa0\\x80'],
      [Buffer.from('é€𝄞'), undefined, 'é€𝄞'],
      [Buffer.from('x'.repeat(100)), undefined, `${'x'.repeat(64)}...`],
      [Buffer.from('x'.repeat(64)), 1_000_000, `${'x'.repeat(64)}...`],
      // A character cut by the excerpt's end is left out, not shown as broken bytes.
      [Buffer.from(`${'x'.repeat(63)}é`), undefined, `${'x'.repeat(63)}...`],
      // A line that itself ends in the middle of a character shows the bytes it has.
      [Buffer.from([0x61, 0xe2, 0x82]), undefined, 'a\\xe2\\x82'],
    ];
    for (const [bytes, lineBytes, excerpt] of cases) assert.equal(lineExcerpt(bytes, lineBytes), excerpt, JSON.stringify(bytes.toString('latin1')));
  });
});

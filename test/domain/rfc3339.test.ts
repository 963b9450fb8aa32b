/**
 * src/domain/rfc3339.ts, the strict reader of RFC 3339 date-times the API's time parameters use:
 * dates and times that do not exist are refused (never rolled over as Date.parse does), and every
 * one that exists is the instant Date.parse gives it.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { daysInMonth, rfc3339Ms } from '../../src/domain/rfc3339.ts';

test('daysInMonth follows the Gregorian calendar: 29 days in February of years divisible by 4, but not by 100 unless by 400', () => {
  assert.deepEqual(
    Array.from({ length: 12 }, (_, i) => daysInMonth(2026, i + 1)),
    [31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31],
  );
  for (const [year, days] of [[2028, 29], [2024, 29], [2000, 29], [0, 29], [1900, 28], [2100, 28], [2026, 28], [2027, 28]] as const) {
    assert.equal(daysInMonth(year, 2), days, String(year));
  }
});

test('rfc3339Ms reads the forms of RFC 3339: Z or an offset, a fraction, lower-case t and z, a space; years 0000-0099 as they are', () => {
  const cases: Array<[string, string]> = [
    ['2026-11-22T08:00:00Z', '2026-11-22T08:00:00.000Z'],
    ['2026-11-22T08:00:00.5Z', '2026-11-22T08:00:00.500Z'],
    ['2026-11-22T08:00:00.123456789Z', '2026-11-22T08:00:00.123Z'],
    ['2026-11-22T08:00:00.9999Z', '2026-11-22T08:00:00.999Z'],
    ['2026-11-22T09:30:00+01:30', '2026-11-22T08:00:00.000Z'],
    ['2026-11-22T00:00:00-08:00', '2026-11-22T08:00:00.000Z'],
    ['2026-11-23T07:59:00+23:59', '2026-11-22T08:00:00.000Z'],
    ['2026-11-22T08:00:00-00:00', '2026-11-22T08:00:00.000Z'],
    ['2026-11-22t08:00:00z', '2026-11-22T08:00:00.000Z'],
    ['2026-11-22 08:00:00Z', '2026-11-22T08:00:00.000Z'],
    ['2028-02-29T23:59:59.999Z', '2028-02-29T23:59:59.999Z'],
    ['2000-02-29T00:00:00Z', '2000-02-29T00:00:00.000Z'],
    ['2026-12-31T23:59:59Z', '2026-12-31T23:59:59.000Z'],
    ['2027-01-01T00:30:00+01:00', '2026-12-31T23:30:00.000Z'],
    ['0050-06-01T00:00:00Z', '0050-06-01T00:00:00.000Z'],
    ['0000-01-01T00:00:00Z', '0000-01-01T00:00:00.000Z'],
    ['9999-12-31T23:59:59Z', '9999-12-31T23:59:59.000Z'],
  ];
  for (const [value, utc] of cases) assert.equal(new Date(rfc3339Ms(value)).toISOString(), utc, value);
});

test('rfc3339Ms refuses dates and times that do not exist, which Date.parse rolls over', () => {
  const impossible = [
    '2026-02-30T00:00:00Z',
    '2026-02-29T00:00:00Z',
    '1900-02-29T00:00:00Z',
    '2100-02-29T00:00:00Z',
    '2026-04-31T00:00:00Z',
    '2026-06-31T00:00:00Z',
    '2026-09-31T00:00:00Z',
    '2026-11-31T00:00:00Z',
    '2026-01-32T00:00:00Z',
    '2026-00-10T00:00:00Z',
    '2026-13-01T00:00:00Z',
    '2026-11-00T00:00:00Z',
    '2026-11-22T24:00:00Z',
    '2026-11-22T08:60:00Z',
    '2026-11-22T08:00:60Z',
    '2026-12-31T23:59:60Z',
    '2026-11-22T08:00:00+24:00',
    '2026-11-22T08:00:00-24:00',
    '2026-11-22T08:00:00+01:60',
  ];
  for (const value of impossible) assert.ok(Number.isNaN(rfc3339Ms(value)), value);
  // What this module exists for: Date.parse gives these a time, another one.
  assert.equal(new Date(Date.parse('2026-02-30T00:00:00Z')).toISOString(), '2026-03-02T00:00:00.000Z');
  assert.equal(new Date(Date.parse('2026-11-22T24:00:00Z')).toISOString(), '2026-11-23T00:00:00.000Z');
});

test('rfc3339Ms refuses what is not an RFC 3339 date-time: no offset, no seconds, a date alone, expanded years, other separators, junk', () => {
  const malformed = [
    '2026-11-22T08:00:00',
    '2026-11-22T08:00Z',
    '2026-11-22',
    '2026-11-22T08:00:00.Z',
    '2026-11-22T08:00:00+0100',
    '2026-11-22T08:00:00+01',
    '+002026-11-22T08:00:00Z',
    '26-11-22T08:00:00Z',
    '2026-1-22T08:00:00Z',
    '2026/11/22T08:00:00Z',
    '2026-11-22_08:00:00Z',
    ' 2026-11-22T08:00:00Z',
    '2026-11-22T08:00:00Z ',
    '2026-11-22T08:00:00Z\n',
    '2026-11-22T08:00:00 GMT',
    '２０２６-11-22T08:00:00Z',
    'Sun, 22 Nov 2026 08:00:00 GMT',
    '1790000000000',
    '',
  ];
  for (const value of malformed) assert.ok(Number.isNaN(rfc3339Ms(value)), JSON.stringify(value));
});

test('every date-time that exists is the instant Date.parse gives it (random dates, times, fractions and offsets)', () => {
  // A small deterministic generator (mulberry32): the same cases on every run.
  let seed = 47;
  const random = () => {
    seed = (seed + 0x6d2b79f5) | 0;
    let x = Math.imul(seed ^ (seed >>> 15), 1 | seed);
    x = (x + Math.imul(x ^ (x >>> 7), 61 | x)) ^ x;
    return ((x ^ (x >>> 14)) >>> 0) / 4294967296;
  };
  const int = (below: number) => Math.floor(random() * below);
  const pad = (n: number, width = 2) => String(n).padStart(width, '0');
  for (let i = 0; i < 5000; i++) {
    const year = int(10_000);
    const month = 1 + int(12);
    const day = 1 + int(daysInMonth(year, month));
    const fraction = int(3) === 0 ? '' : `.${String(int(1e9)).padStart(9, '0').slice(0, 1 + int(9))}`;
    const zone = int(3) === 0 ? 'Z' : `${int(2) === 0 ? '+' : '-'}${pad(int(24))}:${pad(int(60))}`;
    const value = `${pad(year, 4)}-${pad(month)}-${pad(day)}T${pad(int(24))}:${pad(int(60))}:${pad(int(60))}${fraction}${zone}`;
    const expected = Date.parse(value);
    assert.ok(!Number.isNaN(expected), value);
    assert.equal(rfc3339Ms(value), expected, value);
  }
});

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { iso } from '../../src/domain/iso.ts';

test('iso: an epoch-ms time as RFC 3339 in UTC with milliseconds, and null as null', () => {
  assert.equal(iso(Date.UTC(2026, 10, 22, 8, 0, 0, 5)), '2026-11-22T08:00:00.005Z');
  assert.equal(iso(0), '1970-01-01T00:00:00.000Z', 'epoch 0 is a time, not a missing one');
  assert.equal(iso(null), null);
});

/**
 * The ordering helpers of src/domain/ordering.ts that the wait for a predecessor uses
 * (delivery.orderHold): the statuses read from the front of a stored event's details, and
 * until when a change may wait. The details are made by parseFeedLine, whose output is read here.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { parseFeedLine } from '../../src/domain/feed-event.ts';
import { changeStatusesOf, orderHoldUntil } from '../../src/domain/ordering.ts';

const detailsOf = (line: Record<string, unknown>): string => {
  const parsed = parseFeedLine(Buffer.from(JSON.stringify({ event_id: 'evt_1', organization_id: 'acme', anticipation_request_id: 'ar_1', ...line })), 0);
  assert.ok(parsed.ok);
  return parsed.event.details;
};

test('changeStatusesOf reads the status and the previous one from what the parser stores, escapes and all, and not the data after them', () => {
  assert.deepEqual(changeStatusesOf(detailsOf({ status: 'approved', previous_status: 'submitted', data: { status_note: '"status":"x"' } })), { status: 'approved', previous: 'submitted' });
  assert.deepEqual(changeStatusesOf(detailsOf({ status: 'approved' })), { status: 'approved', previous: null });
  assert.deepEqual(changeStatusesOf(detailsOf({ status: 'a "quoted" \\ one', previous_status: 'ünïcode' })), { status: 'a "quoted" \\ one', previous: 'ünïcode' });
  assert.equal(changeStatusesOf('{"type":"webhook.test"}'), null, 'a body stored whole names no statuses');
});

test('orderHoldUntil: the release plus the hold for a change that names a previous status; nothing to wait for otherwise, or with the hold off', () => {
  assert.equal(orderHoldUntil(1000, 'submitted', 30_000), 31_000);
  assert.equal(orderHoldUntil(1000, null, 30_000), null);
  assert.equal(orderHoldUntil(1000, 'submitted', 0), null);
});

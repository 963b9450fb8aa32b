/**
 * Test events (DeliveryLogService.sendTest): a `webhook.test` notification, or a sample status
 * change of an anticipation request in the real event's shape, marked as a test, so that a
 * receiver's real code path runs. Either is stored whole (the same bytes on every attempt) and
 * queued on an ordering key of its own.
 */
import { randomUUID } from 'node:crypto';
import { EVENT_TYPE } from '../domain/feed-event.ts';
import { iso } from '../domain/iso.ts';
import { testOrderingKey } from '../domain/ordering.ts';
import type { Store, Tx } from '../store/repos.ts';
import type { DeliveryRow } from '../store/values.ts';
import { requireWebhook } from './webhooks.ts';

export const TEST_EVENT_TYPE = 'webhook.test';

/**
 * What a test sends: a `webhook.test` notification, or a sample status change of an
 * anticipation request, in the real event's shape (type `anticipation_request.status_changed`),
 * marked `"test": true` and about a made-up request (`ar_test_...`), so that a receiver's real
 * code path runs (see sampleStatusChange).
 */
export const TestKind = { webhookTest: 'webhook_test', sampleStatusChange: 'sample_status_change' } as const;
export type TestKind = (typeof TestKind)[keyof typeof TestKind];

/**
 * A test event stored and queued (sendTest), in the caller's transaction: its ordering key is its
 * own (testOrderingKey), whatever its kind, so nothing waits for it and it waits for nothing.
 */
export async function queueTestEvent(store: Store, tx: Tx, orgId: string, kind: TestKind): Promise<DeliveryRow> {
  await requireWebhook(tx, orgId);
  // The queue's time base, as every writer that queues (delivery-log.ts's queueTime).
  const now = await tx.feed.receivedAt(store.clock.now());
  const hex = randomUUID().replaceAll('-', '');
  const id = `evt_test_${hex}`;
  let seq: number;
  if (kind === TestKind.sampleStatusChange) {
    const requestId = `ar_test_${hex.slice(0, 12)}`;
    seq = await tx.deliveries.insertTestEvent(id, orgId, sampleStatusChange(orgId, id, requestId, now), now, requestId);
  } else {
    const payload = JSON.stringify({ type: TEST_EVENT_TYPE, timestamp: iso(now), data: { event_id: id, organization_id: orgId, message: 'Test notification from hookrelay' } });
    seq = await tx.deliveries.insertTestEvent(id, orgId, payload, now);
  }
  const deliveryId = await tx.deliveries.insert(seq, orgId, testOrderingKey(orgId, id), now);
  return (await tx.deliveries.get(orgId, deliveryId))!;
}

/**
 * The body of a sample status change: the shape statusChangeBody gives a real one (type,
 * timestamp, data with event_id, organization_id, anticipation_request_id, occurred_at, status,
 * previous_status), plus a top-level `"test": true`, a member no real body has (a feed line's
 * own fields go into `data`, never beside it), about a request id that names a test.
 */
export function sampleStatusChange(orgId: string, eventId: string, requestId: string, now: number): string {
  const at = iso(now);
  return JSON.stringify({
    type: EVENT_TYPE,
    test: true,
    timestamp: at,
    data: { event_id: eventId, organization_id: orgId, anticipation_request_id: requestId, occurred_at: at, status: 'approved', previous_status: 'submitted' },
  });
}

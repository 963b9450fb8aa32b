import type { Db } from './db.ts';
import { noPrunedRows, type Newest, type PrunedRows, type RetentionRepo } from '../repos.ts';
import type { Sync } from './sync-repo.ts';

/**
 * An event may go once every delivery of it was delivered before `cutoff`: none pending (fresh,
 * failing, leased or held behind a disabled webhook), none dead, and none that is the newest
 * delivery or holds the newest attempt. An event without any delivery (its organization had no
 * webhook) is kept: `deliveries recover` can still queue it.
 */
const PRUNABLE = `EXISTS (SELECT 1 FROM deliveries d WHERE d.event_seq = e.seq)
  AND NOT EXISTS (SELECT 1 FROM deliveries d WHERE d.event_seq = e.seq
    AND (d.status <> 'delivered' OR d.updated_at >= @cutoff OR d.id >= @newestDelivery
      OR EXISTS (SELECT 1 FROM delivery_attempts a WHERE a.delivery_id = d.id AND a.id >= @newestAttempt)))`;

export function createRetentionRepo(db: Db): Sync<RetentionRepo> {
  const newest = db.prepare<[], { oldest_seq: number | null; seq: number | null; delivery_id: number | null; attempt_id: number | null; reject_id: number | null }>(`
    SELECT (SELECT min(seq) FROM events) AS oldest_seq, (SELECT max(seq) FROM events) AS seq, (SELECT max(id) FROM deliveries) AS delivery_id,
      (SELECT max(id) FROM delivery_attempts) AS attempt_id, (SELECT max(id) FROM feed_rejects) AS reject_id`);
  // A window of `limit` events in seq order (a primary-key range), each with whether it may go:
  // a batch reads at most `limit` events, however many of them are kept.
  const window = db.prepare<{ after: number; before: number; cutoff: number; newestDelivery: number; newestAttempt: number; limit: number }, { seq: number; prunable: number }>(`
    SELECT e.seq, ${PRUNABLE} AS prunable FROM events e
    WHERE e.seq > @after AND e.seq < @before
    ORDER BY e.seq LIMIT @limit`);
  const countDeliveries = db.prepare<[number], number>('SELECT count(*) FROM deliveries WHERE event_seq = ?').pluck();
  const countAttempts = db.prepare<[number], number>('SELECT count(*) FROM delivery_attempts WHERE delivery_id IN (SELECT id FROM deliveries WHERE event_seq = ?)').pluck();
  const deleteAttempts = db.prepare<[number]>('DELETE FROM delivery_attempts WHERE delivery_id IN (SELECT id FROM deliveries WHERE event_seq = ?)');
  const deleteDeliveries = db.prepare<[number]>('DELETE FROM deliveries WHERE event_seq = ?');
  const deleteEvent = db.prepare<[number]>('DELETE FROM events WHERE seq = ?');
  const deleteRejects = db.prepare<{ cutoff: number; newest: number; limit: number }>(`
    DELETE FROM feed_rejects WHERE id IN (
      SELECT id FROM feed_rejects WHERE received_at < @cutoff AND id < @newest ORDER BY received_at LIMIT @limit)`);
  const countRejects = db.prepare<{ cutoff: number; newest: number }, number>('SELECT count(*) FROM feed_rejects WHERE received_at < @cutoff AND id < @newest').pluck();

  return {
    /** The newest row of each table, and the oldest event (0 when a table is empty). */
    newest(): Newest {
      const r = newest.get()!;
      return { oldestSeq: r.oldest_seq ?? 0, seq: r.seq ?? 0, deliveryId: r.delivery_id ?? 0, attemptId: r.attempt_id ?? 0, rejectId: r.reject_id ?? 0 };
    },

    /**
     * Looks at up to `limit` events with seq in (after, before), oldest first, and removes those
     * whose deliveries were all delivered before `cutoff` (epoch ms), with their deliveries and
     * attempts; with `dryRun` only counts them. Returns the last seq looked at (null: none left
     * in the range) and the rows removed. Run it in one transaction (a write one unless dryRun).
     */
    pruneEvents(o: { after: number; before: number; cutoff: number; newest: Newest; limit: number; dryRun: boolean }): { last: number | null; removed: PrunedRows } {
      const removed = noPrunedRows();
      const rows = window.all({ after: o.after, before: o.before, cutoff: o.cutoff, newestDelivery: o.newest.deliveryId, newestAttempt: o.newest.attemptId, limit: o.limit });
      for (const { seq, prunable } of rows) {
        if (prunable !== 1) continue;
        removed.events++;
        if (o.dryRun) {
          removed.attempts += countAttempts.get(seq)!;
          removed.deliveries += countDeliveries.get(seq)!;
          continue;
        }
        removed.attempts += deleteAttempts.run(seq).changes;
        removed.deliveries += deleteDeliveries.run(seq).changes;
        deleteEvent.run(seq);
      }
      return { last: rows.length === 0 ? null : rows[rows.length - 1]!.seq, removed };
    },

    /** Removes up to `limit` quarantined lines received before `cutoff` (never the newest one); returns how many. */
    pruneRejects(cutoff: number, newestId: number, limit: number): number {
      return deleteRejects.run({ cutoff, newest: newestId, limit }).changes;
    },

    /** How many quarantined lines pruneRejects would remove in all. */
    countRejects(cutoff: number, newestId: number): number {
      return countRejects.get({ cutoff, newest: newestId })!;
    },
  };
}

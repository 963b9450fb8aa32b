import type { Db } from './db.ts';
import type { RetentionRepo } from '../repos.ts';
import { noPrunedRows, type PruneBounds, type PrunedRows } from '../types.ts';
import { toNewest, type NewestRow } from '../rows.ts';
import { countRejectsSql, named, NEWEST_SQL, pruneWindowSql } from '../sql.ts';
import type { Sync } from './sync-repo.ts';

export function createRetentionRepo(db: Db): Sync<RetentionRepo> {
  const newest = db.prepare<[], NewestRow>(NEWEST_SQL);
  const window = db.prepare<{ after: number; before: number; cutoff: number; newestDelivery: number; newestAttempt: number; limit: number }, { seq: number; prunable: number }>(
    pruneWindowSql(named('after', 'before', 'cutoff', 'newestDelivery', 'newestAttempt', 'limit')),
  );
  const countDeliveries = db.prepare<[number], number>('SELECT count(*) FROM deliveries WHERE event_seq = ?').pluck();
  const countAttempts = db.prepare<[number], number>('SELECT count(*) FROM delivery_attempts WHERE delivery_id IN (SELECT id FROM deliveries WHERE event_seq = ?)').pluck();
  const deleteAttempts = db.prepare<[number]>('DELETE FROM delivery_attempts WHERE delivery_id IN (SELECT id FROM deliveries WHERE event_seq = ?)');
  const deleteDeliveries = db.prepare<[number]>('DELETE FROM deliveries WHERE event_seq = ?');
  const deleteEvent = db.prepare<[number]>('DELETE FROM events WHERE seq = ?');
  const deleteRejects = db.prepare<{ cutoff: number; newest: number; limit: number }>(`
    DELETE FROM feed_rejects WHERE id IN (
      SELECT id FROM feed_rejects WHERE received_at < @cutoff AND id < @newest ORDER BY received_at LIMIT @limit)`);
  const countRejects = db.prepare<{ cutoff: number; newest: number }, number>(countRejectsSql(named('cutoff', 'newest'))).pluck();

  return {
    /** The newest row of each table, and the oldest event (0 when a table is empty). */
    newest(): PruneBounds {
      return toNewest(newest.get()!);
    },

    /**
     * Looks at up to `limit` events with seq in (after, before), oldest first, and removes those
     * whose deliveries were all delivered before `cutoff` (epoch ms), with their deliveries and
     * attempts; with `dryRun` only counts them. Returns the last seq looked at (null: none left
     * in the range) and the rows removed. Run it in one transaction (a write one unless dryRun).
     */
    pruneEvents(o: { after: number; before: number; cutoff: number; newest: PruneBounds; limit: number; dryRun: boolean }): { last: number | null; removed: PrunedRows } {
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

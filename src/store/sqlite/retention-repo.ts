import type { Db } from './connection.ts';
import type { RetentionRepo } from '../repos.ts';
import { noPrunedRows, type PruneBounds, type PrunedRows } from '../values.ts';
import { toNewest, type NewestRow } from '../row-mappers.ts';
import { countRejectsSql, named, NEWEST_SQL, pruneRejectsSql, pruneWindowSql } from '../sql.ts';
import type { Sync } from './sync-repo.ts';

/** Retention on SQLite: a statement per event that may go (microseconds each, in process). */
export function createSqliteRetentionRepo(db: Db): Sync<RetentionRepo> {
  const newest = db.prepare<[], NewestRow>(NEWEST_SQL);
  const window = db.prepare<{ after: number; before: number; cutoff: number; newestDelivery: number; newestAttempt: number; limit: number }, { seq: number; prunable: number }>(
    pruneWindowSql(named('after', 'before', 'cutoff', 'newestDelivery', 'newestAttempt', 'limit')),
  );
  const countDeliveries = db.prepare<[number], number>('SELECT count(*) FROM deliveries WHERE event_seq = ?').pluck();
  const countAttempts = db.prepare<[number], number>('SELECT count(*) FROM delivery_attempts WHERE delivery_id IN (SELECT id FROM deliveries WHERE event_seq = ?)').pluck();
  const deleteAttempts = db.prepare<[number]>('DELETE FROM delivery_attempts WHERE delivery_id IN (SELECT id FROM deliveries WHERE event_seq = ?)');
  const deleteDeliveries = db.prepare<[number]>('DELETE FROM deliveries WHERE event_seq = ?');
  const deleteEvent = db.prepare<[number]>('DELETE FROM events WHERE seq = ?');
  const deleteRejects = db.prepare<{ cutoff: number; newest: number; limit: number }>(pruneRejectsSql(named('cutoff', 'newest', 'limit')));
  const countRejects = db.prepare<{ cutoff: number; newest: number }, number>(countRejectsSql(named('cutoff', 'newest'))).pluck();

  return {
    newest(): PruneBounds {
      return toNewest(newest.get()!);
    },

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

    pruneRejects(cutoff: number, newestId: number, limit: number): number {
      return deleteRejects.run({ cutoff, newest: newestId, limit }).changes;
    },

    countRejects(cutoff: number, newestId: number): number {
      return countRejects.get({ cutoff, newest: newestId })!;
    },
  };
}

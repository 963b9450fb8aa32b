import type { RetentionRepo } from '../repos.ts';
import { noPrunedRows, type PruneBounds, type PrunedRows } from '../values.ts';
import { toNewest, type NewestRow } from '../row-mappers.ts';
import { countRejectsSql, NEWEST_SQL, numbered, prunableSql, pruneRejectsSql, pruneWindowSql } from '../sql.ts';
import type { PgConnection } from './connection.ts';

/** Each parameter cast to bigint: pg sends every value as text, and the cast gives it its type where the statement leaves it open. */
const bigints = <K extends string>(params: Record<K, string>): Record<K, string> =>
  Object.fromEntries(Object.entries<string>(params).map(([name, p]) => [name, `${p}::bigint`])) as Record<K, string>;

/** A window of up to $6 events in seq order (a primary-key range), each with whether it may go (../sql.ts's prunableSql). */
const WINDOW = pruneWindowSql(bigints(numbered('after', 'before', 'cutoff', 'newestDelivery', 'newestAttempt', 'limit')));

/**
 * Removes the events of the window that may go ($1: their seqs; $2 to $4: the cutoff, the
 * newest delivery id and the newest attempt id), with their deliveries and attempts, in one
 * statement, and counts what it removed. The condition is checked again here rather than
 * trusted from the window: under READ COMMITTED, another instance may have queued a delivery
 * of one of these events in between (a replay of an old delivery), and that one must stay. A
 * delivery committed while this statement runs is not seen by it: the event's foreign key then
 * fails the statement, and the batch's transaction with it, rather than leave a delivery
 * without its event. The deletes share one snapshot, and the foreign keys between them are
 * checked at the end of the statement, once all three are done.
 */
const DELETE_BATCH = `WITH gone AS (
    SELECT e.seq FROM events e WHERE e.seq = ANY($1::bigint[]) AND ${prunableSql(bigints({ cutoff: '$2', newestDelivery: '$3', newestAttempt: '$4' }))}
  ),
  gone_attempts AS (
    DELETE FROM delivery_attempts WHERE delivery_id IN (SELECT id FROM deliveries WHERE event_seq IN (SELECT seq FROM gone)) RETURNING 1
  ),
  gone_deliveries AS (DELETE FROM deliveries WHERE event_seq IN (SELECT seq FROM gone) RETURNING 1),
  gone_events AS (DELETE FROM events WHERE seq IN (SELECT seq FROM gone) RETURNING 1)
  SELECT (SELECT count(*) FROM gone_events) AS events, (SELECT count(*) FROM gone_deliveries) AS deliveries,
    (SELECT count(*) FROM gone_attempts) AS attempts`;

/** What DELETE_BATCH would remove ($1: the seqs of the events that may go), for a dry run: it writes nothing. */
const COUNT_BATCH = `SELECT (SELECT count(*) FROM deliveries WHERE event_seq = ANY($1::bigint[])) AS deliveries,
  (SELECT count(*) FROM delivery_attempts WHERE delivery_id IN (SELECT id FROM deliveries WHERE event_seq = ANY($1::bigint[]))) AS attempts`;

const PRUNE_REJECTS = pruneRejectsSql(numbered('cutoff', 'newest', 'limit'));
const COUNT_REJECTS = countRejectsSql(numbered('cutoff', 'newest'));

/**
 * Retention on PostgreSQL, as ../sqlite/retention-repo.ts on SQLite: the same rows kept and removed,
 * the same counts. Where SQLite runs a statement per event (microseconds each, in process),
 * a batch here is two round trips whatever its size: the window, then one statement that
 * removes (or, in a dry run, counts) the rows of all its events that may go.
 */
export function createPgRetentionRepo(db: PgConnection): RetentionRepo {
  return {
    async newest(): Promise<PruneBounds> {
      const { rows } = await db.query<NewestRow>(NEWEST_SQL);
      return toNewest(rows[0]!);
    },

    async pruneEvents(o: { after: number; before: number; cutoff: number; newest: PruneBounds; limit: number; dryRun: boolean }): Promise<{ last: number | null; removed: PrunedRows }> {
      const removed = noPrunedRows();
      const { rows } = await db.query<{ seq: number; prunable: boolean }>(WINDOW, [o.after, o.before, o.cutoff, o.newest.deliveryId, o.newest.attemptId, o.limit]);
      const last = rows.length === 0 ? null : rows[rows.length - 1]!.seq;
      const seqs = rows.filter((r) => r.prunable).map((r) => r.seq);
      if (seqs.length === 0) return { last, removed };
      if (o.dryRun) {
        const counts = (await db.query<{ deliveries: number; attempts: number }>(COUNT_BATCH, [seqs])).rows[0]!;
        removed.events = seqs.length;
        removed.deliveries = counts.deliveries;
        removed.attempts = counts.attempts;
      } else {
        const counts = (await db.query<{ events: number; deliveries: number; attempts: number }>(DELETE_BATCH, [seqs, o.cutoff, o.newest.deliveryId, o.newest.attemptId]))
          .rows[0]!;
        removed.events = counts.events;
        removed.deliveries = counts.deliveries;
        removed.attempts = counts.attempts;
      }
      return { last, removed };
    },

    async pruneRejects(cutoff: number, newestId: number, limit: number): Promise<number> {
      const r = await db.query(PRUNE_REJECTS, [cutoff, newestId, limit]);
      return r.rowCount ?? 0;
    },

    async countRejects(cutoff: number, newestId: number): Promise<number> {
      const { rows } = await db.query<{ n: number }>(COUNT_REJECTS, [cutoff, newestId]);
      return rows[0]!.n;
    },
  };
}

import { keyRangeOf, keyRangeSql } from './key-range-sql.ts';
import type { QueryResult } from 'pg';
import type { StoredEvent } from '../../domain/feed-event.ts';
import type { FeedRepo } from '../repos.ts';
import type { EventToStore, FeedPosition, FeedReject, FeedStats } from '../values.ts';
import { EVENT_COLUMNS, POSITION_COLUMNS, STATS_COLUMNS, toFeedStats, toPosition, toReject, toStoredEvent, type EventRow, type PositionRow, type RejectRow, type StatsRow } from '../row-mappers.ts';
import { EVENT_INSERT, insertRowsSql, listRejectsSql, numbered, REJECT_INSERT, UNDELIVERABLE_SQL } from '../sql.ts';
import type { PgConnection } from './connection.ts';
import { withoutNul } from './text.ts';


/**
 * The key of the transaction-level advisory lock under which events are inserted (see
 * receivedAt): the ASCII bytes of "hookrecv" as a bigint (0x686f6f6b72656376), so that
 * pg_locks shows it as classid 1752133483, the classid of migrations.ts's MIGRATION_LOCK_KEY
 * ("hookrela"), and objid 1919247222. Distinct from that key: an instance migrating must not
 * wait for ingestion, nor the reverse. Fixed forever: instances of different versions
 * inserting into one database must take the same lock.
 */
export const EVENT_INSERT_LOCK_KEY = '7525356009630819190';

/**
 * Two statements in one round trip (the simple query protocol, no parameters): take the event
 * insert lock, then read the newest event's received_at and the newest delivery's created_at
 * (a replay or a recovery queues deliveries without storing an event). Two statements, not one: under READ
 * COMMITTED each statement reads a snapshot taken when it starts, so a read in the statement
 * that waited for the lock would not see the events of the transaction that held it, which
 * committed in the meantime. The newest event is found by seq, the newest delivery by id
 * (primary-key lookups): their times are the maxima, which this lock keeps true, and neither
 * table has an index on its time to find the maximum otherwise. A read-only transaction (Store.read) skips the
 * lock: it inserts nothing, its snapshot is fixed before the lock could be granted, and it
 * would only wait for an ingest to commit.
 */
const LOCK_THEN_NEWEST = `SELECT CASE WHEN current_setting('transaction_read_only') = 'off' THEN pg_advisory_xact_lock(${EVENT_INSERT_LOCK_KEY}) END;
  SELECT greatest((SELECT received_at FROM events ORDER BY seq DESC LIMIT 1), (SELECT created_at FROM deliveries ORDER BY id DESC LIMIT 1)) AS received_at`;

/** The events of a batch, in one statement (../sql.ts's insertRowsSql): RETURNING gives only the rows inserted. */
const INSERT_EVENTS = `${insertRowsSql('postgres', EVENT_INSERT)}
  RETURNING id, seq`;
const INSERT_REJECTS = insertRowsSql('postgres', REJECT_INSERT);
const LIST_REJECTS = listRejectsSql(numbered('after', 'limit'));

/** seqRange's binary search over seq, run by the server in one statement (see key-range-sql.ts). */
const SEQ_RANGE = keyRangeSql('events', 'seq', 'received_at');


/**
 * The results of a query string of several statements: pg gives an array of them, which its
 * type for query() does not say.
 */
function resultsOf(result: QueryResult | QueryResult[]): QueryResult[] {
  return Array.isArray(result) ? result : [result];
}

/**
 * The feed repository on PostgreSQL, as ../sqlite/feed-repo.ts on SQLite: the same rows stored and
 * the same answers. Events, quarantined lines and what is undeliverable are shared by every
 * instance on the database; sources, positions and counts are `instance`'s own (the rows with
 * its name). Every batch method is one statement whatever the batch's size: arrays passed as
 * parameters and unnested, or matched with `= ANY`.
 */
export function createPgFeedRepo(db: PgConnection, instance: string): FeedRepo {
  return {
    async undeliverableByOrg(): Promise<Array<{ orgId: string; events: number }>> {
      const { rows } = await db.query<{ org_id: string; events: number }>(UNDELIVERABLE_SQL);
      return rows.map((r) => ({ orgId: r.org_id, events: r.events }));
    },

    /**
     * This instance's row for the source, made on first use. Looked up first: nearly every
     * call finds it, in one round trip. Two instances' transactions may make the same
     * instance's row at once (a daemon and a CLI command): the insert then does nothing, and
     * the SELECT after it, a statement of its own under READ COMMITTED, sees the other's row.
     */
    async sourceId(source: string): Promise<number> {
      const find = async () => (await db.query<{ id: number }>('SELECT id FROM feed_sources WHERE instance = $1 AND name = $2', [instance, source])).rows[0]?.id;
      const found = await find();
      if (found !== undefined) return found;
      const { rows } = await db.query<{ id: number }>('INSERT INTO feed_sources (instance, name) VALUES ($1, $2) ON CONFLICT (instance, name) DO NOTHING RETURNING id', [
        instance,
        source,
      ]);
      const id = rows[0]?.id ?? (await find());
      if (id === undefined) throw new Error(`feed source ${JSON.stringify(source)} of instance ${JSON.stringify(instance)} is neither found nor created`);
      return id;
    },

    /**
     * One statement for the batch (INSERT_EVENTS). The seqs come back by id: where an id
     * occurs more than once in the batch, its first occurrence is the one inserted (rows are
     * inserted in the batch's order) and gets the seq; the later ones get null, as in SQLite.
     */
    async insertEvents(events: readonly EventToStore[], sourceId: number, now: number): Promise<Array<number | null>> {
      if (events.length === 0) return [];
      const ids: string[] = [];
      const orgIds: string[] = [];
      const requestIds: string[] = [];
      const occurredAt: number[] = [];
      const payloads: string[] = [];
      const positions: Array<number | null> = [];
      const traceparents: Array<string | null> = [];
      const tracestates: Array<string | null> = [];
      for (const { event, position } of events) {
        ids.push(event.id);
        orgIds.push(event.orgId);
        requestIds.push(event.anticipationRequestId);
        occurredAt.push(event.occurredAt);
        payloads.push(event.details);
        positions.push(position);
        traceparents.push(event.trace?.traceparent ?? null);
        tracestates.push(event.trace?.tracestate ?? null);
      }
      // The arrays first, in EVENT_INSERT's column order, then its per-batch values (insertRowsSql).
      const { rows } = await db.query<{ id: string; seq: number }>(INSERT_EVENTS, [ids, orgIds, requestIds, occurredAt, payloads, positions, traceparents, tracestates, sourceId, now]);
      const inserted = new Map(rows.map((r) => [r.id, r.seq]));
      return ids.map((id) => {
        const seq = inserted.get(id);
        if (seq === undefined) return null;
        inserted.delete(id); // a later occurrence of the id in this batch was not inserted
        return seq;
      });
    },

    /** legacy_event_ids is read by the statement: `hookrelay db copy` may fill it after an instance started. */
    async legacyEvents(legacyIds: readonly string[]): Promise<Set<string>> {
      if (legacyIds.length === 0) return new Set();
      const { rows } = await db.query<{ id: string }>('SELECT id FROM events WHERE id = ANY($1::text[]) AND seq < (SELECT before_seq FROM legacy_event_ids LIMIT 1)', [
        legacyIds,
      ]);
      return new Set(rows.map((r) => r.id));
    },

    async storedEvents(ids: readonly string[]): Promise<Map<string, StoredEvent>> {
      const found = new Map<string, StoredEvent>();
      if (ids.length === 0) return found;
      const { rows } = await db.query<EventRow>(`SELECT ${EVENT_COLUMNS} FROM events WHERE id = ANY($1::text[])`, [ids]);
      for (const row of rows) found.set(row.id, toStoredEvent(row));
      return found;
    },

    /**
     * Several instances insert events into one table, and received_at must never decrease along
     * seq (seqRange's binary search, recovery's and retention's time windows rely on it). Two
     * transactions that each read the newest time, then insert, could commit out of order:
     * the later seqs with the earlier time, or a seq handed out before another transaction's
     * but committed after it. So this first takes a transaction-level advisory lock
     * (EVENT_INSERT_LOCK_KEY), held until the transaction ends, and only then reads the newest
     * event (LOCK_THEN_NEWEST). Every caller calls this inside the write transaction before it
     * inserts events (ingest, the test event), or queues deliveries (replay, recovery): the
     * event inserts of concurrent transactions, on every instance, are serialised, and each
     * sees what the one before it committed, so seqs are handed out, and committed, in
     * received_at order. The price: transactions that insert events run one at a time across
     * all instances. Call it before the transaction locks any row (the callers do), so that
     * the lock's holder never waits for a row that a transaction waiting for the lock holds.
     */
    async receivedAt(now: number): Promise<number> {
      const results = resultsOf(await db.query(LOCK_THEN_NEWEST));
      const newest = (results[1]?.rows[0] as { received_at: number } | undefined)?.received_at ?? 0;
      return Math.max(now, newest);
    },

    /** The binary search in one statement on the server (SEQ_RANGE). */
    async seqRange(since: number, until: number): Promise<{ from: number; to: number }> {
      const { rows } = await db.query<{ k: number; low: number }>(SEQ_RANGE, [since, until]);
      return keyRangeOf(rows, 'seqRange');
    },

    /** One statement for the batch (INSERT_REJECTS); a NUL in the detail or the event id becomes U+FFFD (see withoutNul). */
    async insertRejects(rejects: ReadonlyArray<Omit<FeedReject, 'id'>>): Promise<void> {
      if (rejects.length === 0) return;
      const columns = {
        source: [] as string[],
        position: [] as Array<number | null>,
        lineBytes: [] as number[],
        raw: [] as Buffer[],
        reason: [] as string[],
        detail: [] as string[],
        eventId: [] as Array<string | null>,
        receivedAt: [] as number[],
      };
      for (const r of rejects) {
        columns.source.push(r.source);
        columns.position.push(r.position);
        columns.lineBytes.push(r.lineBytes);
        columns.raw.push(r.raw);
        columns.reason.push(r.reason);
        columns.detail.push(withoutNul(r.detail));
        columns.eventId.push(r.eventId === null ? null : withoutNul(r.eventId));
        columns.receivedAt.push(r.receivedAt);
      }
      await db.query(INSERT_REJECTS, [
        columns.source,
        columns.position,
        columns.lineBytes,
        columns.raw,
        columns.reason,
        columns.detail,
        columns.eventId,
        columns.receivedAt,
      ]);
    },

    async getPosition(source: string): Promise<FeedPosition | null> {
      const { rows } = await db.query<PositionRow>(`SELECT ${POSITION_COLUMNS} FROM feed_positions WHERE instance = $1 AND source = $2`, [instance, source]);
      return rows[0] === undefined ? null : toPosition(rows[0]);
    },

    async savePosition(p: FeedPosition, now: number): Promise<void> {
      await db.query(
        `INSERT INTO feed_positions (instance, source, dev, ino, fingerprint, fingerprint_bytes, position, tail_fingerprint, updated_at)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
         ON CONFLICT (instance, source) DO UPDATE SET dev = excluded.dev, ino = excluded.ino, fingerprint = excluded.fingerprint,
           fingerprint_bytes = excluded.fingerprint_bytes, position = excluded.position, tail_fingerprint = excluded.tail_fingerprint,
           updated_at = excluded.updated_at`,
        [instance, p.source, p.dev, p.ino, p.fingerprint, p.fingerprintBytes, p.position, p.tailFingerprint, now],
      );
    },

    async addStats(source: string, accepted: number, duplicates: number, quarantined: number, now: number): Promise<void> {
      await db.query(
        `INSERT INTO feed_stats (instance, source, accepted, duplicates, quarantined, updated_at) VALUES ($1, $2, $3, $4, $5, $6)
         ON CONFLICT (instance, source) DO UPDATE SET accepted = feed_stats.accepted + excluded.accepted,
           duplicates = feed_stats.duplicates + excluded.duplicates, quarantined = feed_stats.quarantined + excluded.quarantined,
           updated_at = excluded.updated_at`,
        [instance, source, accepted, duplicates, quarantined, now],
      );
    },

    /** This instance's counts, by source (COLLATE "C": byte order, as in SQLite). */
    async stats(): Promise<FeedStats[]> {
      const { rows } = await db.query<StatsRow>(`SELECT ${STATS_COLUMNS} FROM feed_stats WHERE instance = $1 ORDER BY source`, [instance]);
      return rows.map(toFeedStats);
    },

    async listRejects(afterId: number, limit: number): Promise<FeedReject[]> {
      const { rows } = await db.query<RejectRow>(LIST_REJECTS, [afterId, limit]);
      return rows.map(toReject);
    },
  };
}

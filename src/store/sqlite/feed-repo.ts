import type { StoredEvent } from '../../domain/feed-event.ts';
import type { Db } from './connection.ts';
import { keyRange } from './key-range.ts';
import type { FeedRepo } from '../repos.ts';
import type { EventToStore, FeedPosition, FeedReject, FeedStats } from '../values.ts';
import { EVENT_COLUMNS, POSITION_COLUMNS, STATS_COLUMNS, toFeedStats, toPosition, toReject, toStoredEvent, type EventRow, type PositionRow, type RejectRow, type StatsRow } from '../row-mappers.ts';
import { EVENT_INSERT, insertRowsSql, listRejectsSql, positional, REJECT_INSERT, UNDELIVERABLE_SQL } from '../sql.ts';
import type { Sync } from './sync-repo.ts';


/** The SQLite feed repository (synchronous: see sync-repo.ts). */
export function createSqliteFeedRepo(db: Db): Sync<FeedRepo> {
  const insertEvent = db.prepare<[string, string, string, number, string, number, number | null, number, string | null, string | null]>(insertRowsSql('sqlite', EVENT_INSERT));
  const insertSource = db.prepare<[string]>('INSERT INTO feed_sources (name) VALUES (?)');
  const sourceByName = db.prepare<[string], { id: number }>('SELECT id FROM feed_sources WHERE name = ?');
  // Every event stored before schema version 5 under an id derived then is below this seq (0: there are none).
  const legacyBefore = (db.prepare('SELECT before_seq FROM legacy_event_ids').pluck().get() as number | undefined) ?? 0;
  const legacyEvent = db.prepare<[string, number], { seq: number }>('SELECT seq FROM events WHERE id = ? AND seq < ?');
  const eventById = db.prepare<[string], EventRow>(`SELECT ${EVENT_COLUMNS} FROM events WHERE id = ?`);
  // The newest event's time and the newest delivery's queue time (a replay or a recovery queues
  // deliveries without storing an event): two primary-key lookups.
  const newestStoredAt = db.prepare<[], { at: number }>(`
    SELECT max(coalesce((SELECT received_at FROM events ORDER BY seq DESC LIMIT 1), 0),
      coalesce((SELECT created_at FROM deliveries ORDER BY id DESC LIMIT 1), 0)) AS at`);
  const firstAtOrAfter = db.prepare<[number], { seq: number; received_at: number }>('SELECT seq, received_at FROM events WHERE seq >= ? ORDER BY seq LIMIT 1');
  // Two subqueries: SQLite reads min() or max() from the end of the primary key only when it is
  // the query's one aggregate; `SELECT min(seq), max(seq)` reads the whole table.
  const seqBounds = db.prepare<[], { lo: number | null; hi: number | null }>('SELECT (SELECT min(seq) FROM events) AS lo, (SELECT max(seq) FROM events) AS hi');
  const insertReject = db.prepare<[string, number | null, number, Buffer, string, string, string | null, number]>(insertRowsSql('sqlite', REJECT_INSERT));
  const getPosition = db.prepare<[string], PositionRow>(`SELECT ${POSITION_COLUMNS} FROM feed_positions WHERE source = ?`);
  const savePosition = db.prepare<[string, string, string, string, number, number, string | null, number]>(`
    INSERT INTO feed_positions (source, dev, ino, fingerprint, fingerprint_bytes, position, tail_fingerprint, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)
    ON CONFLICT (source) DO UPDATE SET dev = excluded.dev, ino = excluded.ino, fingerprint = excluded.fingerprint,
      fingerprint_bytes = excluded.fingerprint_bytes, position = excluded.position, tail_fingerprint = excluded.tail_fingerprint,
      updated_at = excluded.updated_at`);
  const addStats = db.prepare<[string, number, number, number, number]>(`
    INSERT INTO feed_stats (source, accepted, duplicates, quarantined, updated_at) VALUES (?, ?, ?, ?, ?)
    ON CONFLICT (source) DO UPDATE SET accepted = accepted + excluded.accepted, duplicates = duplicates + excluded.duplicates,
      quarantined = quarantined + excluded.quarantined, updated_at = excluded.updated_at`);
  const allStats = db.prepare<[], StatsRow>(`SELECT ${STATS_COLUMNS} FROM feed_stats ORDER BY source`);
  const listRejects = db.prepare<[number, number], RejectRow>(listRejectsSql(positional('after', 'limit')));
  const undeliverable = db.prepare<[], { org_id: string; events: number }>(UNDELIVERABLE_SQL);

  return {
    undeliverableByOrg(): Array<{ orgId: string; events: number }> {
      return undeliverable.all().map((r) => ({ orgId: r.org_id, events: r.events }));
    },
    /** Not cached: a batch that rolls back takes a new source's row with it. */
    sourceId(source: string): number {
      return sourceByName.get(source)?.id ?? Number(insertSource.run(source).lastInsertRowid);
    },
    insertEvents(events: readonly EventToStore[], sourceId: number, now: number): Array<number | null> {
      const seqs = new Array<number | null>(events.length);
      for (let i = 0; i < events.length; i++) {
        const { event, position } = events[i]!;
        const trace = event.trace;
        const info = insertEvent.run(event.id, event.orgId, event.anticipationRequestId, event.occurredAt, event.details, sourceId, position, now, trace?.traceparent ?? null, trace?.tracestate ?? null);
        seqs[i] = info.changes === 1 ? Number(info.lastInsertRowid) : null;
      }
      return seqs;
    },
    legacyEvents(legacyIds: readonly string[]): Set<string> {
      const found = new Set<string>();
      if (legacyBefore === 0) return found;
      for (const id of legacyIds) if (legacyEvent.get(id, legacyBefore) !== undefined) found.add(id);
      return found;
    },
    storedEvents(ids: readonly string[]): Map<string, StoredEvent> {
      const found = new Map<string, StoredEvent>();
      for (const id of ids) {
        const row = eventById.get(id);
        if (row) found.set(id, toStoredEvent(row));
      }
      return found;
    },
    /** The write transaction holds the whole database: no other writer stores events meanwhile. */
    receivedAt(now: number): number {
      return Math.max(now, newestStoredAt.get()?.at ?? 0);
    },
    /** A binary search over seq (see keyRange), in O(log n) primary-key lookups. */
    seqRange(since: number, until: number): { from: number; to: number } {
      return keyRange(seqBounds.get(), since, until, (seq) => {
        const row = firstAtOrAfter.get(seq);
        return row && { key: row.seq, at: row.received_at };
      });
    },
    insertRejects(rejects: ReadonlyArray<Omit<FeedReject, 'id'>>): void {
      for (const r of rejects) insertReject.run(r.source, r.position, r.lineBytes, r.raw, r.reason, r.detail, r.eventId, r.receivedAt);
    },
    getPosition(source: string): FeedPosition | null {
      const row = getPosition.get(source);
      return row ? toPosition(row) : null;
    },
    savePosition(p: FeedPosition, now: number): void {
      savePosition.run(p.source, p.dev, p.ino, p.fingerprint, p.fingerprintBytes, p.position, p.tailFingerprint, now);
    },
    addStats(source: string, accepted: number, duplicates: number, quarantined: number, now: number): void {
      addStats.run(source, accepted, duplicates, quarantined, now);
    },
    stats(): FeedStats[] {
      return allStats.all().map(toFeedStats);
    },
    listRejects(afterId: number, limit: number): FeedReject[] {
      return listRejects.all(afterId, limit).map(toReject);
    },
  };
}

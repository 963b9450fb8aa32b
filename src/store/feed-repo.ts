import { storedBody, type RejectReason, type StorableEvent, type StoredEvent } from '../domain/feed-event.ts';
import type { Db } from './db.ts';

/** Where a tailed feed file was last committed, and how to recognise that file again. */
export interface FeedPosition {
  readonly source: string;
  readonly dev: string;
  readonly ino: string;
  /** sha256 (hex) of the file's first `fingerprintBytes` bytes. */
  readonly fingerprint: string;
  readonly fingerprintBytes: number;
  /** Byte offset just past the last committed line. */
  readonly position: number;
  /**
   * sha256 (hex) of the up to 256 bytes just before `position`: a file rewritten with the same
   * first bytes is told apart by what precedes the committed position. Null for positions
   * committed before schema version 8.
   */
  readonly tailFingerprint: string | null;
}

export interface FeedReject {
  readonly id: number;
  readonly source: string;
  readonly position: number | null;
  readonly lineBytes: number;
  readonly raw: Buffer;
  readonly reason: RejectReason;
  readonly detail: string;
  readonly eventId: string | null;
  readonly receivedAt: number;
}

export interface FeedStats {
  readonly source: string;
  readonly accepted: number;
  readonly duplicates: number;
  readonly quarantined: number;
  readonly updatedAt: number;
}

interface PositionRow {
  source: string;
  dev: string;
  ino: string;
  fingerprint: string;
  fingerprint_bytes: number;
  position: number;
  tail_fingerprint: string | null;
}

interface RejectRow {
  id: number;
  source: string;
  position: number | null;
  line_bytes: number;
  raw: Buffer;
  reason: RejectReason;
  detail: string;
  event_id: string | null;
  received_at: number;
}

export function createFeedRepo(db: Db) {
  const insertEvent = db.prepare<[string, string, string, number, string, number, number | null, number]>(`
    INSERT INTO events (id, org_id, anticipation_request_id, occurred_at, payload, source_id, source_position, received_at)
    VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (id) DO NOTHING`);
  const insertSource = db.prepare<[string]>('INSERT INTO feed_sources (name) VALUES (?)');
  const sourceByName = db.prepare<[string], { id: number }>('SELECT id FROM feed_sources WHERE name = ?');
  // Every event stored before schema version 5 under an id derived then is below this seq (0: there are none).
  const legacyBefore = (db.prepare('SELECT before_seq FROM legacy_event_ids').pluck().get() as number | undefined) ?? 0;
  const legacyEvent = db.prepare<[string, number], { seq: number }>('SELECT seq FROM events WHERE id = ? AND seq < ?');
  const eventById = db.prepare<[string], { id: string; org_id: string; anticipation_request_id: string; payload: string; occurred_at: number }>(
    'SELECT id, org_id, anticipation_request_id, payload, occurred_at FROM events WHERE id = ?',
  );
  const newestReceivedAt = db.prepare<[], { received_at: number }>('SELECT received_at FROM events ORDER BY seq DESC LIMIT 1');
  const firstAtOrAfter = db.prepare<[number], { seq: number; received_at: number }>('SELECT seq, received_at FROM events WHERE seq >= ? ORDER BY seq LIMIT 1');
  const seqBounds = db.prepare<[], { lo: number | null; hi: number | null }>('SELECT min(seq) AS lo, max(seq) AS hi FROM events');
  const insertReject = db.prepare<[string, number | null, number, Buffer, string, string, string | null, number]>(`
    INSERT INTO feed_rejects (source, position, line_bytes, raw, reason, detail, event_id, received_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)`);
  const getPosition = db.prepare<[string], PositionRow>(
    'SELECT source, dev, ino, fingerprint, fingerprint_bytes, position, tail_fingerprint FROM feed_positions WHERE source = ?',
  );
  const savePosition = db.prepare<[string, string, string, string, number, number, string | null, number]>(`
    INSERT INTO feed_positions (source, dev, ino, fingerprint, fingerprint_bytes, position, tail_fingerprint, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)
    ON CONFLICT (source) DO UPDATE SET dev = excluded.dev, ino = excluded.ino, fingerprint = excluded.fingerprint,
      fingerprint_bytes = excluded.fingerprint_bytes, position = excluded.position, tail_fingerprint = excluded.tail_fingerprint,
      updated_at = excluded.updated_at`);
  const addStats = db.prepare<[string, number, number, number, number]>(`
    INSERT INTO feed_stats (source, accepted, duplicates, quarantined, updated_at) VALUES (?, ?, ?, ?, ?)
    ON CONFLICT (source) DO UPDATE SET accepted = accepted + excluded.accepted, duplicates = duplicates + excluded.duplicates,
      quarantined = quarantined + excluded.quarantined, updated_at = excluded.updated_at`);
  const allStats = db.prepare<[], { source: string; accepted: number; duplicates: number; quarantined: number; updated_at: number }>(
    'SELECT source, accepted, duplicates, quarantined, updated_at FROM feed_stats ORDER BY source',
  );
  const listRejects = db.prepare<[number, number], RejectRow>(
    'SELECT id, source, position, line_bytes, raw, reason, detail, event_id, received_at FROM feed_rejects WHERE id > ? ORDER BY id LIMIT ?',
  );

  const undeliverable = db.prepare<[], { org_id: string; events: number }>(`
    SELECT org_id, count(*) AS events FROM events e
    WHERE NOT EXISTS (SELECT 1 FROM deliveries d WHERE d.event_seq = e.seq)
    GROUP BY org_id ORDER BY org_id`);

  return {
    /** Events never queued for delivery (their organization had no webhook), per organization. */
    undeliverableByOrg(): Array<{ orgId: string; events: number }> {
      return undeliverable.all().map((r) => ({ orgId: r.org_id, events: r.events }));
    },
    /**
     * The number that stands for a source (a feed's path, "-" for standard input) in the events
     * it stored; given the first time the source is seen. Call inside the write transaction
     * (not cached: a batch that rolls back takes a new source's row with it).
     */
    sourceId(source: string): number {
      return sourceByName.get(source)?.id ?? Number(insertSource.run(source).lastInsertRowid);
    },
    /** Inserts the event read at byte `position` of the source `sourceId` names; returns its sequence number, or null when an event with that id exists. */
    insertEvent(event: StorableEvent, sourceId: number, position: number | null, now: number): number | null {
      const info = insertEvent.run(event.id, event.orgId, event.anticipationRequestId, event.occurredAt, event.details, sourceId, position, now);
      return info.changes === 1 ? Number(info.lastInsertRowid) : null;
    },
    /**
     * Whether an event stored before schema version 5 has `legacyId`: the id a line without
     * event_id was given then (see feed-event's derivedEventId). Always false in a database
     * created since.
     */
    hasLegacyEvent(legacyId: string): boolean {
      return legacyBefore > 0 && legacyEvent.get(legacyId, legacyBefore) !== undefined;
    },
    /** The stored columns of the event with this id (what its webhook body is built from), or null. */
    storedEvent(id: string): StoredEvent | null {
      const row = eventById.get(id);
      return row ? { id: row.id, orgId: row.org_id, anticipationRequestId: row.anticipation_request_id, occurredAt: row.occurred_at, payload: row.payload } : null;
    },
    /** What a duplicate check needs of a stored event: its webhook body and occurred_at. */
    eventForComparison(id: string): { body: string; occurredAt: number } | null {
      const stored = this.storedEvent(id);
      return stored && { body: storedBody(stored), occurredAt: stored.occurredAt };
    },
    /**
     * The time (epoch ms) the next stored event is received at: `now`, or the newest event's
     * time if the clock is behind it (stepped back, or another process's clock). Keeps
     * received_at non-decreasing along seq, which seqRange relies on. Call inside the write
     * transaction that inserts.
     */
    receivedAt(now: number): number {
      return Math.max(now, newestReceivedAt.get()?.received_at ?? 0);
    },
    /**
     * The seqs of events received in [since, until) (epoch ms) as a half-open range
     * [from, to): a binary search over seq, in O(log n) primary-key lookups, which needs no
     * index on received_at because received_at never decreases along seq.
     */
    seqRange(since: number, until: number): { from: number; to: number } {
      const bounds = seqBounds.get();
      if (!bounds || bounds.lo === null || bounds.hi === null) return { from: 0, to: 0 };
      const { lo, hi } = bounds;
      /** Smallest seq s in [lo, hi + 1] such that the first event at or after s was received at or after t. */
      const firstSeqAtOrAfter = (t: number): number => {
        let low = lo;
        let high = hi + 1;
        while (low < high) {
          const mid = Math.floor((low + high) / 2);
          const row = firstAtOrAfter.get(mid);
          if (row === undefined || row.received_at >= t) high = mid;
          else low = row.seq + 1;
        }
        return low;
      };
      return { from: firstSeqAtOrAfter(since), to: firstSeqAtOrAfter(until) };
    },
    insertReject(reject: Omit<FeedReject, 'id'>): void {
      insertReject.run(reject.source, reject.position, reject.lineBytes, reject.raw, reject.reason, reject.detail, reject.eventId, reject.receivedAt);
    },
    getPosition(source: string): FeedPosition | null {
      const row = getPosition.get(source);
      return row
        ? {
            source: row.source,
            dev: row.dev,
            ino: row.ino,
            fingerprint: row.fingerprint,
            fingerprintBytes: row.fingerprint_bytes,
            position: row.position,
            tailFingerprint: row.tail_fingerprint,
          }
        : null;
    },
    savePosition(p: FeedPosition, now: number): void {
      savePosition.run(p.source, p.dev, p.ino, p.fingerprint, p.fingerprintBytes, p.position, p.tailFingerprint, now);
    },
    addStats(source: string, accepted: number, duplicates: number, quarantined: number, now: number): void {
      addStats.run(source, accepted, duplicates, quarantined, now);
    },
    stats(): FeedStats[] {
      return allStats.all().map((r) => ({ source: r.source, accepted: r.accepted, duplicates: r.duplicates, quarantined: r.quarantined, updatedAt: r.updated_at }));
    },
    listRejects(afterId: number, limit: number): FeedReject[] {
      return listRejects.all(afterId, limit).map((r) => ({
        id: r.id,
        source: r.source,
        position: r.position,
        lineBytes: r.line_bytes,
        raw: r.raw,
        reason: r.reason,
        detail: r.detail,
        eventId: r.event_id,
        receivedAt: r.received_at,
      }));
    },
  };
}
export type FeedRepo = ReturnType<typeof createFeedRepo>;

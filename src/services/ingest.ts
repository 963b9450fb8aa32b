import { parseFeedLine, RejectReason, sameNotification, statusChangeBody, storedBody, type ParsedLines, type StorableEvent } from '../domain/feed-event.ts';
import { orderingKey } from '../domain/ordering.ts';
import type { Logger } from '../log.ts';
import type { FeedPosition } from '../store/feed-repo.ts';
import type { Store } from '../store/store.ts';
import { nobodyListens, type WorkSignal } from './work-signal.ts';

/** At most this many bytes of a rejected line are kept in the quarantine table. */
export const MAX_QUARANTINED_BYTES = 16 * 1024;

/** One line read from a feed, without its newline. */
export interface RawLine {
  /** The line's bytes; for a line over the size limit, only its first bytes. */
  readonly bytes: Buffer;
  /** Byte offset of the line's first byte in its source, when the source has offsets. */
  readonly position: number | null;
  /** Set when the line is rejected before parsing (too long, cut off by rotation): its full length and the reason. */
  readonly rejected?: { readonly reason: RejectReason; readonly lineBytes: number; readonly detail: string };
}

/** Lines to store, one at a time: an array of them, or a batch in one buffer (feed/line-batch.ts). */
export interface Lines {
  readonly length: number;
  at(index: number): RawLine | undefined;
}

export interface IngestCounts {
  accepted: number;
  duplicates: number;
  quarantined: number;
  /** Accepted events of organizations without a webhook: stored, not queued. */
  undeliverable: number;
}

export const emptyCounts = (): IngestCounts => ({ accepted: 0, duplicates: 0, quarantined: 0, undeliverable: 0 });

export function addCounts(into: IngestCounts, more: IngestCounts): void {
  into.accepted += more.accepted;
  into.duplicates += more.duplicates;
  into.quarantined += more.quarantined;
  into.undeliverable += more.undeliverable;
}

/**
 * Stores a batch of feed lines: each becomes an event (plus its outbox row when the
 * organization has a webhook), a counted duplicate, or a quarantined reject. The feed
 * position, when given, is committed in the same transaction, so a crash either keeps the
 * whole batch and its position or neither: no line is lost or stored twice.
 *
 * `parsed`, when given, holds the lines already parsed (one result per line, null for a line
 * with `rejected` set), by a parser on another thread; otherwise they are parsed here.
 */
export function createIngestService(store: Store, log: Logger, work: WorkSignal = nobodyListens) {
  const feedLog = log.child({ subsystem: 'ingest' });

  /**
   * Same id: a duplicate if the line would send the same notification as the stored event;
   * otherwise a conflict. Only runs when ids collide, which for a file ingested again is every
   * line, so the common case is decided by comparing columns: the body is a pure function of
   * the event's columns (statusChangeBody), so equal columns are the same notification. Only
   * when they differ is the line re-parsed with the stored event's occurred_at standing in for a
   * missing one (a missing occurred_at defaults to the time the line was first read) and the two
   * bodies compared as JSON values (key order and spacing do not matter).
   */
  function isDuplicate(line: RawLine, event: StorableEvent): boolean {
    const stored = store.feed.storedEvent(event.id);
    if (stored === null) return false;
    if (stored.payload === event.details && stored.occurredAt === event.occurredAt && stored.orgId === event.orgId && stored.anticipationRequestId === event.anticipationRequestId) return true;
    const again = parseFeedLine(line.bytes, stored.occurredAt);
    return again.ok && sameNotification(storedBody(stored), statusChangeBody(again.event));
  }

  return {
    /** The time to parse a batch with: it stands in for a missing occurred_at. */
    now(): number {
      return store.clock.now();
    },

    ingest(source: string, lines: Lines, position: FeedPosition | null, parsedLines?: ParsedLines): IngestCounts {
      if (parsedLines !== undefined && parsedLines.length !== lines.length) throw new Error(`${parsedLines.length} parse results for ${lines.length} lines`);
      const counts = emptyCounts();
      const rejected: Array<{ position: number | null; reason: string; detail: string }> = [];
      const hasWebhook = new Map<string, boolean>();
      /** Ordering keys queued per organization (see WorkSignal.notify). */
      const queuedKeys = new Map<string, Set<number>>();
      store.transaction(() => {
        // Never before the newest stored event: fresh deliveries are dispatched in
        // (next_attempt_at, id) order, which must be the order in which they were queued even
        // if the clock stepped back (NTP), and time windows map to seq ranges (recovery).
        const now = store.feed.receivedAt(store.clock.now());
        hasWebhook.clear();
        queuedKeys.clear();
        const sourceId = store.feed.sourceId(source);
        const quarantine = (line: RawLine, reason: RejectReason, detail: string, eventId: string | null, lineBytes = line.bytes.length) => {
          store.feed.insertReject({
            source,
            position: line.position,
            lineBytes,
            raw: line.bytes.subarray(0, MAX_QUARANTINED_BYTES),
            reason,
            detail,
            eventId,
            receivedAt: now,
          });
          counts.quarantined++;
          rejected.push({ position: line.position, reason, detail });
        };

        for (let i = 0; i < lines.length; i++) {
          const line = lines.at(i)!;
          if (line.rejected) {
            quarantine(line, line.rejected.reason, line.rejected.detail, null, line.rejected.lineBytes);
            continue;
          }
          const parsed = parsedLines?.at(i) ?? parseFeedLine(line.bytes, now);
          if (!parsed.ok) {
            quarantine(line, parsed.reason, parsed.detail, parsed.eventId);
            continue;
          }
          const { event } = parsed;
          // The same bytes, stored before schema version 5 under the id derived then: the same line.
          if (event.legacyId !== null && store.feed.hasLegacyEvent(event.legacyId)) {
            counts.duplicates++;
            continue;
          }
          const seq = store.feed.insertEvent(event, sourceId, line.position, now);
          if (seq === null) {
            if (isDuplicate(line, event)) counts.duplicates++;
            else quarantine(line, RejectReason.eventIdConflict, `event_id "${event.id}" was already ingested with different content`, event.id);
            continue;
          }
          counts.accepted++;
          let queued = hasWebhook.get(event.orgId);
          if (queued === undefined) {
            queued = store.webhooks.get(event.orgId) !== null;
            hasWebhook.set(event.orgId, queued);
          }
          if (queued) {
            const key = orderingKey(event.orgId, event.anticipationRequestId);
            store.deliveries.insert(seq, event.orgId, key, now);
            let keys = queuedKeys.get(event.orgId);
            if (keys === undefined) queuedKeys.set(event.orgId, (keys = new Set()));
            keys.add(key);
          } else counts.undeliverable++;
        }
        if (position !== null) store.feed.savePosition(position, now);
        store.feed.addStats(source, counts.accepted, counts.duplicates, counts.quarantined, now);
      });
      for (const [orgId, keys] of queuedKeys) work.notify(orgId, 'queued', keys);
      for (const r of rejected) feedLog.warn({ source, position: r.position, reason: r.reason, detail: r.detail }, 'feed line quarantined');
      return counts;
    },

    position(source: string): FeedPosition | null {
      return store.feed.getPosition(source);
    },

    /** Quarantined lines, oldest first, after `afterId`. */
    rejects(afterId: number, limit: number) {
      return store.feed.listRejects(afterId, limit);
    },

    /** Lines accepted, duplicate and quarantined per source since the database was created. */
    stats() {
      return store.feed.stats();
    },

    undeliverable() {
      return store.feed.undeliverableByOrg();
    },

    /** Commits a new position without lines (rotation to a new file, truncation). */
    savePosition(position: FeedPosition): void {
      store.transaction(() => store.feed.savePosition(position, store.clock.now()));
    },
  };
}
export type IngestService = ReturnType<typeof createIngestService>;

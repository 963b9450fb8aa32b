import { LINE_EXCERPT_BYTES, lineExcerpt, parseFeedLine, processingFailedDetail, RejectReason, sameNotification, statusChangeBody, storedBody, type ParsedLines, type StorableEvent, type StorableLine, type StoredEvent } from '../domain/feed-event.ts';
import { orderingKey, reorderReleaseAt } from '../domain/ordering.ts';
import type { Logger } from '../log.ts';
import type { Store } from '../store/repos.ts';
import type { DeliveryToQueue, EventToStore, FeedPosition, FeedReject } from '../store/types.ts';
import { nobodyListens, type WorkSignal } from './work-signal.ts';

/** Least time between two notices of events stored for the same organization without a webhook (see createIngestService). */
export const UNDELIVERABLE_NOTICE_MS = 10 * 60_000;

/**
 * At most this many bytes of a rejected line are kept in the quarantine table: an excerpt,
 * shown escaped (lineExcerpt). Whatever a line holds (a file that was never a feed, a secret
 * pasted by mistake), the quarantine and the log keep no more than its start; its position and
 * length say where the rest is.
 */
export const MAX_QUARANTINED_BYTES = LINE_EXCERPT_BYTES;

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
 * Line `index`'s parse result: the parser thread's, or parsed here. Reading a result back, like
 * parsing, never throws for a line's content; should it throw all the same, the line is
 * quarantined with the error rather than failing the batch (and the reader with it, at the same
 * line, at every restart).
 */
function parsedOrFailed(parsedLines: ParsedLines | undefined, index: number, line: RawLine, now: number): StorableLine {
  try {
    return parsedLines?.at(index) ?? parseFeedLine(line.bytes, now);
  } catch (err) {
    return { ok: false, reason: RejectReason.processingFailed, detail: processingFailedDetail(err), eventId: null };
  }
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
export function createIngestService(store: Store, log: Logger, work: WorkSignal = nobodyListens, options: { noticeUndeliverable?: boolean; reorderWindowMs?: number } = {}) {
  const feedLog = log.child({ subsystem: 'ingest' });
  /**
   * delivery.reorderWindow, on a database shared by several instances: each change queued is
   * placed in its request's order by its occurred_at and held until the window after it
   * happened or was stored has passed (reorderReleaseAt), so that an earlier change read by
   * another instance a little later goes first. On SQLite (one feed) the repository keeps
   * neither: the feed's order stands, and nothing is held.
   */
  const reorderWindowMs = store.shared ? Math.max(0, options.reorderWindowMs ?? 0) : 0;
  /**
   * Events stored for an organization without a webhook (or one that does not exist: a typo in
   * the feed, an organization not created yet) are kept, never delivered, until a webhook is
   * registered and they are recovered. Said at warn, per organization at most once every
   * UNDELIVERABLE_NOTICE_MS (performance.now(): a clock step neither floods nor silences it),
   * with how many events since the last notice.
   */
  const undeliverableNotice = new Map<string, { lastMono: number; since: number }>();
  function noticeUndeliverable(byOrg: ReadonlyMap<string, number>): void {
    const mono = performance.now();
    for (const [orgId, events] of byOrg) {
      let notice = undeliverableNotice.get(orgId);
      if (notice === undefined) {
        if (undeliverableNotice.size >= 10_000) undeliverableNotice.clear();
        undeliverableNotice.set(orgId, (notice = { lastMono: -Infinity, since: 0 }));
      }
      notice.since += events;
      if (mono - notice.lastMono < UNDELIVERABLE_NOTICE_MS) continue;
      feedLog.warn(
        { organization: orgId, events: notice.since },
        'events stored for an organization that has no webhook (or does not exist): they are kept, not delivered; check the feed\'s organization_id, or register its webhook and recover them (docs/feed.md)',
      );
      notice.lastMono = mono;
      notice.since = 0;
    }
  }

  /**
   * Same id: a duplicate if the line would send the same notification as the stored event;
   * otherwise a conflict. Only runs when ids collide, which for a file ingested again is every
   * line, so the common case is decided by comparing columns: the body is a pure function of
   * the event's columns (statusChangeBody), so equal columns are the same notification. Only
   * when they differ is the line re-parsed with the stored event's occurred_at standing in for a
   * missing one (a missing occurred_at defaults to the time the line was first read) and the two
   * bodies compared as JSON values (key order and spacing do not matter).
   */
  function isDuplicate(line: RawLine, event: StorableEvent, stored: StoredEvent | undefined): boolean {
    if (stored === undefined) return false;
    if (stored.payload === event.details && stored.occurredAt === event.occurredAt && stored.orgId === event.orgId && stored.anticipationRequestId === event.anticipationRequestId) return true;
    const again = parseFeedLine(line.bytes, stored.occurredAt);
    return again.ok && sameNotification(storedBody(stored), statusChangeBody(again.event));
  }

  /**
   * isDuplicate, or why it failed: a line's own content must never fail the batch (the reader
   * would then stop at it for good), so whatever comparing it throws quarantines that line.
   */
  function duplicateOrFailed(line: RawLine, event: StorableEvent, stored: StoredEvent | undefined): boolean | { failed: string } {
    try {
      return isDuplicate(line, event, stored);
    } catch (err) {
      return { failed: processingFailedDetail(err) };
    }
  }

  return {
    /** The time to parse a batch with: it stands in for a missing occurred_at. */
    now(): number {
      return store.clock.now();
    },

    /**
     * In four steps, each one repository call for the whole batch (one round trip each on a
     * database server): parse and sort out the lines, insert the events, look up the stored
     * events whose ids were taken (duplicate or conflict), queue the deliveries and quarantine
     * the rejects, with the position and the counts.
     */
    async ingest(source: string, lines: Lines, position: FeedPosition | null, parsedLines?: ParsedLines): Promise<IngestCounts> {
      if (parsedLines !== undefined && parsedLines.length !== lines.length) throw new Error(`${parsedLines.length} parse results for ${lines.length} lines`);
      const counts = emptyCounts();
      const rejected: Array<{ position: number | null; reason: string; detail: string; excerpt: string }> = [];
      /** Ordering keys queued per organization (see WorkSignal.notify). */
      const queuedKeys = new Map<string, Set<number>>();
      /** Events stored for organizations without a webhook, per organization. */
      const undeliverable = new Map<string, number>();
      await store.transaction(async (tx) => {
        counts.accepted = counts.duplicates = counts.quarantined = counts.undeliverable = 0;
        rejected.length = 0;
        queuedKeys.clear();
        undeliverable.clear();
        // Never before the newest stored event: fresh deliveries are dispatched in
        // (next_attempt_at, id) order, which must be the order in which they were queued even
        // if the clock stepped back (NTP), and time windows map to seq ranges (recovery).
        const now = await tx.feed.receivedAt(store.clock.now());
        // The hold counts from this clock, not from `now` (which never goes back): a clock
        // stepped back holds nothing longer than the window.
        const storedAt = store.clock.now();
        // Quarantined in line order (ids are what `feed rejects` pages by), whichever step found them.
        const rejects: Array<{ index: number; reject: Omit<FeedReject, 'id'> }> = [];
        const quarantine = (index: number, line: RawLine, reason: RejectReason, detail: string, eventId: string | null, lineBytes = line.bytes.length) => {
          rejects.push({ index, reject: { source, position: line.position, lineBytes, raw: line.bytes.subarray(0, MAX_QUARANTINED_BYTES), reason, detail, eventId, receivedAt: now } });
          counts.quarantined++;
        };

        const toStore: EventToStore[] = [];
        const storedLines: RawLine[] = [];
        const storedIndexes: number[] = [];
        let legacyIds: string[] | null = null;
        for (let i = 0; i < lines.length; i++) {
          const line = lines.at(i)!;
          if (line.rejected) {
            quarantine(i, line, line.rejected.reason, line.rejected.detail, null, line.rejected.lineBytes);
            continue;
          }
          const parsed = parsedOrFailed(parsedLines, i, line, now);
          if (!parsed.ok) {
            quarantine(i, line, parsed.reason, parsed.detail, parsed.eventId);
            continue;
          }
          if (parsed.event.legacyId !== null) (legacyIds ??= []).push(parsed.event.legacyId);
          toStore.push({ event: parsed.event, position: line.position });
          storedLines.push(line);
          storedIndexes.push(i);
        }
        // The same bytes, stored before schema version 5 under the id derived then: the same line.
        const legacy = legacyIds === null ? null : await tx.feed.legacyEvents(legacyIds);
        if (legacy !== null && legacy.size > 0) {
          for (let i = toStore.length - 1; i >= 0; i--) {
            const { legacyId } = toStore[i]!.event;
            if (legacyId === null || !legacy.has(legacyId)) continue;
            counts.duplicates++;
            toStore.splice(i, 1);
            storedLines.splice(i, 1);
            storedIndexes.splice(i, 1);
          }
        }
        const sourceId = await tx.feed.sourceId(source);
        const seqs = await tx.feed.insertEvents(toStore, sourceId, now);
        let taken: string[] | null = null;
        for (let i = 0; i < seqs.length; i++) if (seqs[i] === null) (taken ??= []).push(toStore[i]!.event.id);
        const stored = taken === null ? null : await tx.feed.storedEvents(taken);
        const hasWebhook = new Map<string, boolean>();
        const queue: DeliveryToQueue[] = [];
        for (let i = 0; i < seqs.length; i++) {
          const { event } = toStore[i]!;
          const seq = seqs[i];
          if (seq === null || seq === undefined) {
            const same = duplicateOrFailed(storedLines[i]!, event, stored?.get(event.id));
            if (same === true) counts.duplicates++;
            else if (same === false) quarantine(storedIndexes[i]!, storedLines[i]!, RejectReason.eventIdConflict, `event_id "${event.id}" was already ingested with different content`, event.id);
            else quarantine(storedIndexes[i]!, storedLines[i]!, RejectReason.processingFailed, same.failed, event.id);
            continue;
          }
          counts.accepted++;
          let queued = hasWebhook.get(event.orgId);
          if (queued === undefined) {
            queued = (await tx.webhooks.get(event.orgId)) !== null;
            hasWebhook.set(event.orgId, queued);
          }
          if (!queued) {
            counts.undeliverable++;
            undeliverable.set(event.orgId, (undeliverable.get(event.orgId) ?? 0) + 1);
            continue;
          }
          const key = orderingKey(event.orgId, event.anticipationRequestId);
          queue.push({ eventSeq: seq, orgId: event.orgId, orderingKey: key, orderAt: event.occurredAt, releaseAt: reorderReleaseAt(event.occurredAt, storedAt, reorderWindowMs) });
          let keys = queuedKeys.get(event.orgId);
          if (keys === undefined) queuedKeys.set(event.orgId, (keys = new Set()));
          keys.add(key);
        }
        if (queue.length > 0) await tx.deliveries.insertMany(queue, now);
        if (rejects.length > 0) {
          rejects.sort((a, b) => a.index - b.index);
          await tx.feed.insertRejects(rejects.map((r) => r.reject));
          for (const { reject: r } of rejects) rejected.push({ position: r.position, reason: r.reason, detail: r.detail, excerpt: lineExcerpt(r.raw, r.lineBytes) });
        }
        if (position !== null) await tx.feed.savePosition(position, now);
        await tx.feed.addStats(source, counts.accepted, counts.duplicates, counts.quarantined, now);
      });
      for (const [orgId, keys] of queuedKeys) work.notify(orgId, 'queued', keys);
      for (const r of rejected) feedLog.warn({ source, position: r.position, reason: r.reason, detail: r.detail, excerpt: r.excerpt }, 'feed line quarantined');
      // The daemon says so in its log; `hookrelay ingest` says so in its summary.
      if (undeliverable.size > 0 && options.noticeUndeliverable === true) noticeUndeliverable(undeliverable);
      return counts;
    },

    position(source: string): Promise<FeedPosition | null> {
      return store.read((tx) => tx.feed.getPosition(source));
    },

    /** Quarantined lines, oldest first, after `afterId`. */
    rejects(afterId: number, limit: number) {
      return store.read((tx) => tx.feed.listRejects(afterId, limit));
    },

    /** Lines accepted, duplicate and quarantined per source since the database was created. */
    stats() {
      return store.read((tx) => tx.feed.stats());
    },

    undeliverable() {
      return store.read((tx) => tx.feed.undeliverableByOrg());
    },

    /** Commits a new position without lines (rotation to a new file, truncation). */
    savePosition(position: FeedPosition): Promise<void> {
      return store.transaction((tx) => tx.feed.savePosition(position, store.clock.now()));
    },
  };
}
export type IngestService = ReturnType<typeof createIngestService>;

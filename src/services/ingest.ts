import { LINE_EXCERPT_BYTES, lineExcerpt, parseFeedLine, processingFailedDetail, RejectReason, sameNotification, statusChangeBody, storedBody, type ParsedLines, type StorableEvent, type StorableLine, type StoredEvent } from '../domain/feed-event.ts';
import { changeStatusesOf, orderHoldUntil, orderingKey, reorderReleaseAt } from '../domain/ordering.ts';
import type { Logger } from '../log.ts';
import type { Store, Tx } from '../store/repos.ts';
import type { DeliveryToQueue, EventToStore, FeedPosition, FeedReject } from '../store/values.ts';
import type { IngestBatchSpans, IngestTracing } from './ingest-tracing.ts';
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
  /**
   * Lines that parsed into an event (new or duplicate) whose traceparent or tracestate was
   * malformed and left out (the event is kept: docs/feed.md, "Trace context"); absent when none was.
   */
  traceContextIgnored?: number;
}

export const emptyCounts = (): IngestCounts => ({ accepted: 0, duplicates: 0, quarantined: 0, undeliverable: 0 });

export function addCounts(into: IngestCounts, more: IngestCounts): void {
  into.accepted += more.accepted;
  into.duplicates += more.duplicates;
  into.quarantined += more.quarantined;
  into.undeliverable += more.undeliverable;
  if (more.traceContextIgnored !== undefined) into.traceContextIgnored = (into.traceContextIgnored ?? 0) + more.traceContextIgnored;
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
export function createIngestService(store: Store, log: Logger, work: WorkSignal = nobodyListens, options: { noticeUndeliverable?: boolean; reorderWindowMs?: number; orderHoldMs?: number; tracing?: IngestTracing | null } = {}) {
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
   * delivery.orderHold, on a shared database: a change whose previous_status names a status its
   * request has not shown yet may wait that long more for it (orderHoldUntil). Off (0) by default.
   */
  const orderHoldMs = store.shared ? Math.max(0, options.orderHoldMs ?? 0) : 0;
  // The daemon says so in its log; `hookrelay ingest` says so in its summary.
  const notices = options.noticeUndeliverable === true ? new UndeliverableNotices(feedLog) : null;
  const tracing = options.tracing ?? null;

  return {
    /** The time to parse a batch with: it stands in for a missing occurred_at. */
    now(): number {
      return store.clock.now();
    },

    /**
     * In four steps, each one repository call for the whole batch (one round trip each on a
     * database server): parse and sort out the lines, insert the events, look up the stored
     * events whose ids were taken (duplicate or conflict), queue the deliveries and quarantine
     * the rejects, with the position and the counts (see IngestBatch).
     */
    async ingest(source: string, lines: Lines, position: FeedPosition | null, parsedLines?: ParsedLines): Promise<IngestCounts> {
      if (parsedLines !== undefined && parsedLines.length !== lines.length) throw new Error(`${parsedLines.length} parse results for ${lines.length} lines`);
      const batch = await store.transaction(async (tx) => {
        // Never before the newest stored event: fresh deliveries are dispatched in
        // (next_attempt_at, id) order, which must be the order in which they were queued even
        // if the clock stepped back (NTP), and time windows map to seq ranges (recovery).
        const now = await tx.feed.receivedAt(store.clock.now());
        // The hold counts from this clock, not from `now` (which never goes back): a clock
        // stepped back holds nothing longer than the window.
        const hold = { storedAt: store.clock.now(), windowMs: reorderWindowMs, orderHoldMs, shared: store.shared };
        return new IngestBatch(tx, source, now, hold, tracing).store(lines, parsedLines, position);
      });
      batch.spans?.end();
      for (const [orgId, keys] of batch.queuedKeys) work.notify(orgId, 'queued', keys);
      for (const r of batch.rejected) feedLog.warn({ source, position: r.position, reason: r.reason, detail: r.detail, excerpt: r.excerpt }, 'feed line quarantined');
      if (batch.undeliverable.size > 0) notices?.notice(batch.undeliverable);
      const ignored = batch.traceIgnored;
      if (ignored !== null) {
        // Once per batch: a producer that writes a malformed traceparent on every line does not flood the log.
        feedLog.warn({ source, lines: ignored.lines, position: ignored.first.position, eventId: ignored.first.eventId, detail: ignored.first.detail }, `trace context of ${ignored.lines} feed line(s) ignored (the events are kept): ${ignored.first.detail}`);
        batch.counts.traceContextIgnored = ignored.lines;
      }
      return batch.counts;
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

/** How a batch's changes wait: the reorder window from `storedAt`, and for their predecessors (delivery.orderHold). */
interface Hold {
  readonly storedAt: number;
  readonly windowMs: number;
  readonly orderHoldMs: number;
  /** Several instances share the database (the statuses are kept). */
  readonly shared: boolean;
}

/** The lines of a batch that parsed into events, in line order, side by side. */
interface ParsedBatch {
  readonly toStore: EventToStore[];
  readonly lines: RawLine[];
  /** Each one's index in the batch (its place among the rejects, which are stored in line order). */
  readonly indexes: number[];
  /** The ids stored before schema version 5 that these events would have had (null: none). */
  legacyIds: string[] | null;
}

/** A quarantined line, as the log says it. */
interface RejectedLine {
  readonly position: number | null;
  readonly reason: string;
  readonly detail: string;
  readonly excerpt: string;
}

/**
 * One batch of lines, stored inside its transaction: sort out the lines (sortLines), drop the
 * ones stored before under a legacy id (dropLegacyDuplicates), insert the events, tell
 * duplicates from conflicts and queue the new events' deliveries (queueInserted), quarantine
 * the rejects in line order (quarantineAll), then the position and the counts. What the
 * service logs and signals afterwards is kept here too.
 */
class IngestBatch {
  readonly counts = emptyCounts();
  readonly rejected: RejectedLine[] = [];
  /** Ordering keys queued per organization (see WorkSignal.notify). */
  readonly queuedKeys = new Map<string, Set<number>>();
  /** Events stored for organizations without a webhook, per organization. */
  readonly undeliverable = new Map<string, number>();
  /** The ingest spans of the events (tracing on), ended once the batch has committed. */
  spans: IngestBatchSpans | null = null;
  /** Lines whose trace context was left out, and the first of them (null: none). */
  traceIgnored: { lines: number; first: { position: number | null; eventId: string; detail: string } } | null = null;
  readonly #tracing: IngestTracing | null;
  readonly #tx: Tx;
  readonly #source: string;
  readonly #now: number;
  readonly #hold: Hold;
  /** Quarantined in line order (ids are what `feed rejects` pages by), whichever step found them. */
  readonly #rejects: Array<{ index: number; reject: Omit<FeedReject, 'id'> }> = [];

  constructor(tx: Tx, source: string, now: number, hold: Hold, tracing: IngestTracing | null) {
    this.#tracing = tracing;
    this.#tx = tx;
    this.#source = source;
    this.#now = now;
    this.#hold = hold;
  }

  async store(lines: Lines, parsedLines: ParsedLines | undefined, position: FeedPosition | null): Promise<this> {
    const { feed, deliveries } = this.#tx;
    const parsed = this.#sortLines(lines, parsedLines);
    if (parsed.legacyIds !== null) await this.#dropLegacyDuplicates(parsed, parsed.legacyIds);
    if (this.#tracing !== null) this.spans = this.#tracing.begin(parsed.toStore, this.#source);
    const seqs = await feed.insertEvents(parsed.toStore, await feed.sourceId(this.#source), this.#now);
    const queue = await this.#queueInserted(parsed, seqs);
    if (queue.length > 0) await deliveries.insertMany(queue, this.#now);
    if (this.#rejects.length > 0) await this.#quarantineAll();
    if (position !== null) await feed.savePosition(position, this.#now);
    await feed.addStats(this.#source, this.counts.accepted, this.counts.duplicates, this.counts.quarantined, this.#now);
    return this;
  }

  /** The lines that parse, in order; the others quarantined (rejected before parsing, or by the parser). */
  #sortLines(lines: Lines, parsedLines: ParsedLines | undefined): ParsedBatch {
    const parsed: ParsedBatch = { toStore: [], lines: [], indexes: [], legacyIds: null };
    for (let i = 0; i < lines.length; i++) {
      const line = lines.at(i)!;
      if (line.rejected) {
        this.#quarantine(i, line, line.rejected.reason, line.rejected.detail, null, line.rejected.lineBytes);
        continue;
      }
      const result = parsedOrFailed(parsedLines, i, line, this.#now);
      if (!result.ok) {
        this.#quarantine(i, line, result.reason, result.detail, result.eventId);
        continue;
      }
      if (result.event.legacyId !== null) (parsed.legacyIds ??= []).push(result.event.legacyId);
      const ignored = result.event.trace?.ignored;
      if (ignored !== undefined && ignored !== null) {
        if (this.traceIgnored === null) this.traceIgnored = { lines: 1, first: { position: line.position, eventId: result.event.id, detail: ignored } };
        else this.traceIgnored.lines++;
      }
      parsed.toStore.push({ event: result.event, position: line.position });
      parsed.lines.push(line);
      parsed.indexes.push(i);
    }
    return parsed;
  }

  /** The same bytes, stored before schema version 5 under the id derived then: the same line, a duplicate. */
  async #dropLegacyDuplicates(parsed: ParsedBatch, legacyIds: string[]): Promise<void> {
    const legacy = await this.#tx.feed.legacyEvents(legacyIds);
    if (legacy.size === 0) return;
    for (let i = parsed.toStore.length - 1; i >= 0; i--) {
      const { legacyId } = parsed.toStore[i]!.event;
      if (legacyId === null || !legacy.has(legacyId)) continue;
      this.counts.duplicates++;
      parsed.toStore.splice(i, 1);
      parsed.lines.splice(i, 1);
      parsed.indexes.splice(i, 1);
    }
  }

  /**
   * Sorts out the events inserted (their seq) from those whose id was taken (null): a
   * duplicate, or a conflict quarantined. Returns the deliveries to queue: one per new event
   * of an organization with a webhook (looked up once per organization); the others are
   * counted undeliverable.
   */
  async #queueInserted(parsed: ParsedBatch, seqs: ReadonlyArray<number | null>): Promise<DeliveryToQueue[]> {
    const { toStore, lines, indexes } = parsed;
    let taken: string[] | null = null;
    for (let i = 0; i < seqs.length; i++) if (seqs[i] === null) (taken ??= []).push(toStore[i]!.event.id);
    const stored = taken === null ? null : await this.#tx.feed.storedEvents(taken);
    const hasWebhook = new Map<string, boolean>();
    const queue: DeliveryToQueue[] = [];
    for (let i = 0; i < seqs.length; i++) {
      const { event } = toStore[i]!;
      const seq = seqs[i];
      if (seq === null || seq === undefined) {
        const same = duplicateOrFailed(lines[i]!, event, stored?.get(event.id));
        this.spans?.outcome(i, same === true ? 'duplicate' : same === false ? 'conflict' : 'failed');
        if (same === true) this.counts.duplicates++;
        else if (same === false) this.#quarantine(indexes[i]!, lines[i]!, RejectReason.eventIdConflict, `event_id "${event.id}" was already ingested with different content`, event.id);
        else this.#quarantine(indexes[i]!, lines[i]!, RejectReason.processingFailed, same.failed, event.id);
        continue;
      }
      this.counts.accepted++;
      let queued = hasWebhook.get(event.orgId);
      if (queued === undefined) {
        queued = (await this.#tx.webhooks.get(event.orgId)) !== null;
        hasWebhook.set(event.orgId, queued);
      }
      this.spans?.outcome(i, queued ? 'queued' : 'undeliverable');
      if (!queued) {
        this.counts.undeliverable++;
        this.undeliverable.set(event.orgId, (this.undeliverable.get(event.orgId) ?? 0) + 1);
        continue;
      }
      const key = orderingKey(event.orgId, event.anticipationRequestId);
      const releaseAt = reorderReleaseAt(event.occurredAt, this.#hold.storedAt, this.#hold.windowMs);
      // A shared database keeps each change's statuses, which a later change's wait for its predecessor reads.
      const statuses = this.#hold.shared ? changeStatusesOf(event.details) : null;
      const holdUntil = orderHoldUntil(releaseAt, statuses?.previous ?? null, this.#hold.orderHoldMs);
      queue.push({ eventSeq: seq, orgId: event.orgId, orderingKey: key, orderAt: event.occurredAt, releaseAt, statuses, holdUntil });
      let keys = this.queuedKeys.get(event.orgId);
      if (keys === undefined) this.queuedKeys.set(event.orgId, (keys = new Set()));
      keys.add(key);
    }
    return queue;
  }

  #quarantine(index: number, line: RawLine, reason: RejectReason, detail: string, eventId: string | null, lineBytes = line.bytes.length): void {
    const raw = line.bytes.subarray(0, MAX_QUARANTINED_BYTES);
    this.#rejects.push({ index, reject: { source: this.#source, position: line.position, lineBytes, raw, reason, detail, eventId, receivedAt: this.#now } });
    this.counts.quarantined++;
  }

  /** Stores the rejects in line order, whichever step found them, and keeps their log lines. */
  async #quarantineAll(): Promise<void> {
    this.#rejects.sort((a, b) => a.index - b.index);
    await this.#tx.feed.insertRejects(this.#rejects.map((r) => r.reject));
    for (const { reject: r } of this.#rejects) this.rejected.push({ position: r.position, reason: r.reason, detail: r.detail, excerpt: lineExcerpt(r.raw, r.lineBytes) });
  }
}

/**
 * Events stored for an organization without a webhook (or one that does not exist: a typo in
 * the feed, an organization not created yet) are kept, never delivered, until a webhook is
 * registered and they are recovered. Said at warn, per organization at most once every
 * UNDELIVERABLE_NOTICE_MS (performance.now(): a clock step neither floods nor silences it),
 * with how many events since the last notice.
 */
class UndeliverableNotices {
  readonly #log: Logger;
  readonly #byOrg = new Map<string, { lastMono: number; since: number }>();

  constructor(log: Logger) {
    this.#log = log;
  }

  notice(byOrg: ReadonlyMap<string, number>): void {
    const mono = performance.now();
    for (const [orgId, events] of byOrg) {
      let notice = this.#byOrg.get(orgId);
      if (notice === undefined) {
        if (this.#byOrg.size >= 10_000) this.#byOrg.clear();
        this.#byOrg.set(orgId, (notice = { lastMono: -Infinity, since: 0 }));
      }
      notice.since += events;
      if (mono - notice.lastMono < UNDELIVERABLE_NOTICE_MS) continue;
      this.#log.warn(
        { organization: orgId, events: notice.since },
        'events stored for an organization that has no webhook (or does not exist): they are kept, not delivered; check the feed\'s organization_id, or register its webhook and recover them (docs/feed.md)',
      );
      notice.lastMono = mono;
      notice.since = 0;
    }
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

import { parseFeedLine, type ParsedLines, type RejectReason, type StorableLine } from '../domain/feed-event.ts';

/**
 * A batch of parsed feed lines in the shape that crosses between threads cheaply: the
 * accepted events' text fields as UTF-8 in one buffer, their times in one typed array (both
 * transferred, not copied), and the (rare) rejects as a small list. Posting 10,000 parsed
 * events as objects costs about what parsing them does. Writing each field into the buffer as
 * soon as it is made also keeps the parser thread's heap small: no batch of strings stays
 * alive until the end, for its garbage collector to copy.
 *
 * The text fields are separated by a 0 byte, which none of them can contain: the parser refuses
 * control characters in ids and statuses, and the details are JSON text, which
 * escapes them (and UTF-8 has no 0 byte but U+0000).
 *
 * The receiving thread decodes one line at a time, when it stores it (see PackedLines), not the
 * whole batch up front: a batch decoded into strings and objects stayed alive for the whole
 * commit, survived the young-generation collections that ran meanwhile and was copied into the
 * old generation, which grew by tens of MB during a large ingest before a full collection.
 */
export interface PackedBatch {
  /** Per line: k >= 0, the k-th accepted event; -1, a line rejected before parsing (no result); -2 - r, the r-th reject. */
  readonly slots: Int32Array;
  /** Five fields per accepted event, as UTF-8, each followed by a 0 byte: id, organization, request, details (the status fields and the data, as JSON members), legacy id (empty for none). */
  readonly text: Uint8Array;
  /** Per accepted event, the offset in `text` of its first field. */
  readonly starts: Int32Array;
  /** occurred_at (epoch ms) per accepted event. */
  readonly occurredAt: Float64Array;
  readonly rejects: ReadonlyArray<{ readonly reason: RejectReason; readonly detail: string; readonly eventId: string | null }>;
}

const FIELDS = 5;
export const PRE_REJECTED = -1;

/** Grows as fields are written into it; its buffer is transferable (not a slice of Node's shared pool). */
class TextBuffer {
  #buffer: Buffer;
  #length = 0;

  /** Writes into `reuse` (a buffer given back by the receiving thread) when it holds `capacity` bytes. */
  constructor(capacity: number, reuse?: ArrayBuffer) {
    // Batches of one feed are much alike: a little room lets this buffer serve the next ones too.
    this.#buffer = reuse !== undefined && reuse.byteLength >= capacity ? Buffer.from(reuse) : Buffer.allocUnsafeSlow(Math.ceil(capacity * 1.125));
  }

  /** Appends `field` as UTF-8 and a 0 byte after it. */
  put(field: string): void {
    // A UTF-16 unit is at most 3 UTF-8 bytes.
    const room = field.length * 3 + 1;
    if (this.#length + room > this.#buffer.length) {
      const grown = Buffer.allocUnsafeSlow(Math.max(this.#buffer.length * 2, this.#length + room));
      this.#buffer.copy(grown, 0, 0, this.#length);
      this.#buffer = grown;
    }
    this.#length += this.#buffer.write(field, this.#length, 'utf8');
    this.#buffer[this.#length++] = 0;
  }

  get length(): number {
    return this.#length;
  }

  bytes(): Uint8Array {
    return new Uint8Array(this.#buffer.buffer, 0, this.#length);
  }
}

/** What parseAndPack reserves for the results of `lineBytes` bytes of lines: the fields take about as many bytes as the lines they come from. */
export function textCapacity(lineBytes: number): number {
  return Math.max(Math.ceil(lineBytes * 1.25), 1024);
}

/**
 * Parses the lines of `bytes` (lengths[i] bytes each, back to back; -1 for a line not to parse) and packs the results,
 * into `reuse` when it is large enough (see PackedLines.release).
 */
export function parseAndPack(bytes: Uint8Array, lengths: Int32Array, receivedAt: number, reuse?: ArrayBuffer): PackedBatch {
  const slots = new Int32Array(lengths.length);
  const text = new TextBuffer(textCapacity(bytes.length), reuse);
  // Typed arrays, outside the JavaScript heap: arrays of numbers that grow with the batch were
  // copied by every young collection of the parse, and made this thread's young generation grow
  // to its largest with large batches.
  const times = new Float64Array(lengths.length);
  const starts = new Int32Array(lengths.length);
  let events = 0;
  const rejects: Array<PackedBatch['rejects'][number]> = [];
  let offset = 0;
  for (let i = 0; i < lengths.length; i++) {
    const length = lengths[i]!;
    if (length < 0) {
      slots[i] = PRE_REJECTED;
      continue;
    }
    const parsed = parseFeedLine(bytes.subarray(offset, offset + length), receivedAt);
    offset += length;
    if (parsed.ok) {
      const e = parsed.event;
      slots[i] = events;
      times[events] = e.occurredAt;
      starts[events] = text.length;
      events++;
      text.put(e.id);
      text.put(e.orgId);
      text.put(e.anticipationRequestId);
      text.put(e.details);
      text.put(e.legacyId ?? '');
    } else {
      slots[i] = -2 - rejects.length;
      rejects.push({ reason: parsed.reason, detail: parsed.detail, eventId: parsed.eventId });
    }
  }
  return { slots, text: text.bytes(), starts: starts.slice(0, events), occurredAt: times.slice(0, events), rejects };
}

/**
 * The parse results of a packed batch, each decoded when it is asked for (and not kept): the
 * strings of one event live only while it is stored.
 */
export class PackedLines implements ParsedLines {
  readonly #batch: PackedBatch;
  readonly #text: Buffer;
  #onRelease: ((text: ArrayBuffer) => void) | null;
  #released = false;

  /** `onRelease` receives the text's buffer when the lines have been stored (release()), to be filled again. */
  constructor(batch: PackedBatch, onRelease?: (text: ArrayBuffer) => void) {
    this.#onRelease = onRelease ?? null;
    const events = batch.occurredAt.length;
    if (batch.starts.length !== events) throw new Error(`packed batch holds ${batch.starts.length} offsets for ${events} events`);
    this.#batch = batch;
    this.#text = Buffer.from(batch.text.buffer, batch.text.byteOffset, batch.text.byteLength);
    // Every event's five fields must lie in the text, the last one ending at its end.
    if (events > 0) {
      const last = this.#fieldEnds(batch.starts[events - 1]!);
      if (last === null || last[FIELDS - 1] !== this.#text.length - 1) throw new Error(`packed batch text does not end with the fifth field of its last event (${events} events, ${this.#text.length} bytes)`);
    } else if (this.#text.length !== 0) throw new Error(`packed batch holds ${this.#text.length} bytes of text for no event`);
  }

  get length(): number {
    return this.#batch.slots.length;
  }

  /**
   * Hands the text's buffer back, to be filled with another batch: the decoded strings are copies,
   * so nothing refers to it, but this object must not be read again. Without it, each batch's
   * buffer lived until a full collection (the object is promoted while its batch is stored), and
   * tens of MB of them were waiting for one during a large ingest.
   */
  release(): void {
    const onRelease = this.#onRelease;
    if (onRelease === null) return;
    this.#onRelease = null;
    this.#released = true;
    onRelease(this.#batch.text.buffer as ArrayBuffer);
  }

  at(index: number): StorableLine | null | undefined {
    if (this.#released) throw new Error('packed batch read after it was released');
    const batch = this.#batch;
    if (index < 0 || index >= batch.slots.length) return undefined;
    const slot = batch.slots[index]!;
    if (slot === PRE_REJECTED) return null;
    if (slot < 0) {
      const r = batch.rejects[-2 - slot]!;
      return { ok: false, reason: r.reason, detail: r.detail, eventId: r.eventId };
    }
    const start = batch.starts[slot]!;
    const ends = this.#fieldEnds(start);
    if (ends === null) throw new Error(`packed batch event ${slot} does not hold five fields`);
    const text = this.#text;
    return {
      ok: true,
      event: {
        id: text.toString('utf8', start, ends[0]),
        orgId: text.toString('utf8', ends[0] + 1, ends[1]),
        anticipationRequestId: text.toString('utf8', ends[1] + 1, ends[2]),
        occurredAt: batch.occurredAt[slot]!,
        details: text.toString('utf8', ends[2] + 1, ends[3]),
        legacyId: ends[4] > ends[3] + 1 ? text.toString('utf8', ends[3] + 1, ends[4]) : null,
      },
    };
  }

  /** The offsets of the separators after the five fields that start at `start`; null if the text ends first. */
  #fieldEnds(start: number): [number, number, number, number, number] | null {
    const text = this.#text;
    const e0 = text.indexOf(0, start);
    const e1 = e0 < 0 ? -1 : text.indexOf(0, e0 + 1);
    const e2 = e1 < 0 ? -1 : text.indexOf(0, e1 + 1);
    const e3 = e2 < 0 ? -1 : text.indexOf(0, e2 + 1);
    const e4 = e3 < 0 ? -1 : text.indexOf(0, e3 + 1);
    return e4 < 0 ? null : [e0, e1, e2, e3, e4];
  }
}

/** The parse results again, all at once (tests; the parsers read a batch through PackedLines). */
export function unpack(batch: PackedBatch): Array<StorableLine | null> {
  const lines = new PackedLines(batch);
  return Array.from({ length: lines.length }, (_, i) => lines.at(i) ?? null);
}

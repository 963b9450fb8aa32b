import { parseFeedLine, type ParsedLines, type RejectReason, type StorableLine } from '../domain/feed-event.ts';
import type { LineTrace } from '../domain/trace-context.ts';

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
 * whole batch up front: a batch decoded into strings and objects would stay alive for the
 * whole commit, survive the young-generation collections that run meanwhile and be copied into
 * the old generation, which grows by tens of MB during a large ingest before a full collection.
 */
export interface PackedBatch {
  /** Per line: k >= 0, the k-th accepted event; -1, a line rejected before parsing (no result); -2 - r, the r-th reject. */
  readonly slots: Int32Array;
  /**
   * Six fields per accepted event, as UTF-8, each followed by a 0 byte: id, organization,
   * request, details (the status fields and the data, as JSON members), legacy id (empty for
   * none), the line's trace context (its LineTrace as JSON; empty for none).
   */
  readonly text: Uint8Array;
  /** Per accepted event, the offset in `text` of its first field. */
  readonly starts: Int32Array;
  /** occurred_at (epoch ms) per accepted event. */
  readonly occurredAt: Float64Array;
  readonly rejects: ReadonlyArray<{ readonly reason: RejectReason; readonly detail: string; readonly eventId: string | null }>;
}

const FIELDS = 6;
export const PRE_REJECTED = -1;

/**
 * One buffer for all of a batch's results: per line its slot, per event its offset and time,
 * then the text. One buffer crosses to the receiving thread (transferred) and comes back to be
 * filled again (PackedLines.release). Separate typed arrays per batch would be freed only when
 * the receiving thread's garbage collector gets to them, and meanwhile this thread's malloc
 * arena would grow by their size for every batch of a large ingest (docs/benchmarks.md,
 * "Memory", the fifth pass).
 */
class Packer {
  readonly #lines: number;
  readonly #startsAt: number;
  readonly #timesAt: number;
  readonly #textAt: number;
  #buffer: Buffer;
  #slots: Int32Array;
  #starts: Int32Array;
  #times: Float64Array;
  #end: number;
  #events = 0;

  /** Room for `lines` lines and `textBytes` bytes of text, in `reuse` (a buffer given back) when it is large enough. */
  constructor(lines: number, textBytes: number, reuse?: ArrayBuffer) {
    this.#lines = lines;
    this.#startsAt = lines * 4;
    // After two arrays of 4-byte numbers: aligned for 8-byte ones.
    this.#timesAt = lines * 8;
    this.#textAt = this.#timesAt + lines * 8;
    const size = this.#textAt + textBytes;
    // Batches of one feed are much alike: a little room lets this buffer serve the next ones too.
    this.#buffer = reuse !== undefined && reuse.byteLength >= size ? Buffer.from(reuse) : Buffer.allocUnsafeSlow(Math.ceil(size * 1.125));
    this.#end = this.#textAt;
    [this.#slots, this.#starts, this.#times] = this.#views();
  }

  #views(): [Int32Array, Int32Array, Float64Array] {
    const ab = this.#buffer.buffer;
    return [new Int32Array(ab, 0, this.#lines), new Int32Array(ab, this.#startsAt, this.#lines), new Float64Array(ab, this.#timesAt, this.#lines)];
  }

  slot(line: number, value: number): void {
    this.#slots[line] = value;
  }

  /** Starts the next event (its fields follow with put); returns its number. */
  event(occurredAt: number): number {
    const k = this.#events++;
    this.#times[k] = occurredAt;
    this.#starts[k] = this.#end - this.#textAt;
    return k;
  }

  /** Appends `field` to the text as UTF-8 and a 0 byte after it. */
  put(field: string): void {
    // A UTF-16 unit is at most 3 UTF-8 bytes.
    const room = field.length * 3 + 1;
    if (this.#end + room > this.#buffer.length) {
      const grown = Buffer.allocUnsafeSlow(Math.max(this.#buffer.length * 2, this.#end + room));
      this.#buffer.copy(grown, 0, 0, this.#end);
      this.#buffer = grown;
      [this.#slots, this.#starts, this.#times] = this.#views();
    }
    this.#end += this.#buffer.write(field, this.#end, 'utf8');
    this.#buffer[this.#end++] = 0;
  }

  finish(rejects: PackedBatch['rejects']): PackedBatch {
    const ab = this.#buffer.buffer;
    const events = this.#events;
    return {
      slots: this.#slots,
      starts: new Int32Array(ab, this.#startsAt, events),
      occurredAt: new Float64Array(ab, this.#timesAt, events),
      text: new Uint8Array(ab, this.#textAt, this.#end - this.#textAt),
      rejects,
    };
  }
}

/**
 * What parseAndPack reserves for the text of `lineBytes` bytes of lines. The fields take less
 * than the lines they come from (the keys are left out): half of them in the benchmarks' feed,
 * more when `data` is most of a line. A batch whose fields do not fit grows the buffer, and the
 * grown buffer serves the next batches (PackedLines.release).
 */
export function textCapacity(lineBytes: number): number {
  return Math.max(Math.ceil(lineBytes * 0.75), 1024);
}

/** The size of the buffer parseAndPack fills for `lines` lines of `lineBytes` bytes: a buffer given back that large is used again. */
export function packedCapacity(lines: number, lineBytes: number): number {
  return lines * 16 + textCapacity(lineBytes);
}

/**
 * Parses the lines of `bytes` (back to back, lengths[i] bytes each; a negative length, -1 - n,
 * for a line of n bytes not to parse: rejected before, see LineBatch.forParser) and packs the
 * results, into `reuse` when it is large enough (see PackedLines.release).
 */
export function parseAndPack(bytes: Uint8Array, lengths: Int32Array, receivedAt: number, reuse?: ArrayBuffer): PackedBatch {
  const packer = new Packer(lengths.length, textCapacity(bytes.length), reuse);
  const rejects: Array<PackedBatch['rejects'][number]> = [];
  let offset = 0;
  for (let i = 0; i < lengths.length; i++) {
    const length = lengths[i]!;
    if (length < 0) {
      packer.slot(i, PRE_REJECTED);
      offset += -1 - length;
      continue;
    }
    const parsed = parseFeedLine(bytes.subarray(offset, offset + length), receivedAt);
    offset += length;
    if (parsed.ok) {
      const e = parsed.event;
      packer.slot(i, packer.event(e.occurredAt));
      packer.put(e.id);
      packer.put(e.orgId);
      packer.put(e.anticipationRequestId);
      packer.put(e.details);
      packer.put(e.legacyId ?? '');
      packer.put(e.trace === undefined ? '' : JSON.stringify(e.trace));
    } else {
      packer.slot(i, -2 - rejects.length);
      rejects.push({ reason: parsed.reason, detail: parsed.detail, eventId: parsed.eventId });
    }
  }
  return packer.finish(rejects);
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
    // Every event's six fields must lie in the text, the last one ending at its end.
    if (events > 0) {
      const last = this.#fieldEnds(batch.starts[events - 1]!);
      if (last === null || last[FIELDS - 1] !== this.#text.length - 1) throw new Error(`packed batch text does not end with the sixth field of its last event (${events} events, ${this.#text.length} bytes)`);
    } else if (this.#text.length !== 0) throw new Error(`packed batch holds ${this.#text.length} bytes of text for no event`);
  }

  get length(): number {
    return this.#batch.slots.length;
  }

  /**
   * Hands the text's buffer back, to be filled with another batch: the decoded strings are copies,
   * so nothing refers to it, but this object must not be read again. Without it, each batch's
   * buffer lives until a full collection (the object is promoted while its batch is stored), and
   * tens of MB of them wait for one during a large ingest.
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
    if (ends === null) throw new Error(`packed batch event ${slot} does not hold six fields`);
    const text = this.#text;
    const event = {
      id: text.toString('utf8', start, ends[0]),
      orgId: text.toString('utf8', ends[0] + 1, ends[1]),
      anticipationRequestId: text.toString('utf8', ends[1] + 1, ends[2]),
      occurredAt: batch.occurredAt[slot]!,
      details: text.toString('utf8', ends[2] + 1, ends[3]),
      legacyId: ends[4] > ends[3] + 1 ? text.toString('utf8', ends[3] + 1, ends[4]) : null,
    };
    // A line without trace context (the common case) costs an empty field, and no object.
    if (ends[5] === ends[4] + 1) return { ok: true, event };
    return { ok: true, event: { ...event, trace: JSON.parse(text.toString('utf8', ends[4] + 1, ends[5])) as LineTrace } };
  }

  /** The offsets of the separators after the six fields that start at `start`; null if the text ends first. */
  #fieldEnds(start: number): [number, number, number, number, number, number] | null {
    const text = this.#text;
    const e0 = text.indexOf(0, start);
    const e1 = e0 < 0 ? -1 : text.indexOf(0, e0 + 1);
    const e2 = e1 < 0 ? -1 : text.indexOf(0, e1 + 1);
    const e3 = e2 < 0 ? -1 : text.indexOf(0, e2 + 1);
    const e4 = e3 < 0 ? -1 : text.indexOf(0, e3 + 1);
    const e5 = e4 < 0 ? -1 : text.indexOf(0, e4 + 1);
    return e5 < 0 ? null : [e0, e1, e2, e3, e4, e5];
  }
}

/** The parse results again, all at once (tests; the parsers read a batch through PackedLines). */
export function unpack(batch: PackedBatch): Array<StorableLine | null> {
  const lines = new PackedLines(batch);
  return Array.from({ length: lines.length }, (_, i) => lines.at(i) ?? null);
}

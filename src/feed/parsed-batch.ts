import { parseFeedLine, type RejectReason, type StorableLine } from '../domain/feed-event.ts';

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
 */
export interface PackedBatch {
  /** Per line: k >= 0, the k-th accepted event; -1, a line rejected before parsing (no result); -2 - r, the r-th reject. */
  readonly slots: Int32Array;
  /** Five fields per accepted event, as UTF-8, each followed by a 0 byte: id, organization, request, details (the status fields and the data, as JSON members), legacy id (empty for none). */
  readonly text: Uint8Array;
  /** occurred_at (epoch ms) per accepted event. */
  readonly occurredAt: Float64Array;
  readonly rejects: ReadonlyArray<{ readonly reason: RejectReason; readonly detail: string; readonly eventId: string | null }>;
}

const SEPARATOR = '\u0000';
const FIELDS = 5;
export const PRE_REJECTED = -1;

/** Grows as fields are written into it; its buffer is transferable (not a slice of Node's shared pool). */
class TextBuffer {
  #buffer: Buffer;
  #length = 0;

  constructor(capacity: number) {
    this.#buffer = Buffer.allocUnsafeSlow(Math.max(capacity, 1024));
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

  bytes(): Uint8Array {
    return new Uint8Array(this.#buffer.buffer, 0, this.#length);
  }
}

/** Parses the lines of `bytes` (lengths[i] bytes each, back to back; -1 for a line not to parse) and packs the results. */
export function parseAndPack(bytes: Uint8Array, lengths: Int32Array, receivedAt: number): PackedBatch {
  const slots = new Int32Array(lengths.length);
  // The fields take about as many bytes as the lines they come from.
  const text = new TextBuffer(Math.ceil(bytes.length * 1.25));
  const times: number[] = [];
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
      slots[i] = times.length;
      times.push(e.occurredAt);
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
  return { slots, text: text.bytes(), occurredAt: Float64Array.from(times), rejects };
}

/** The parse results again, reduced to what storing them takes; one per line (null where the line was rejected before parsing). */
export function unpack(batch: PackedBatch): Array<StorableLine | null> {
  const text = batch.text;
  // Each field ends with a separator: drop the last one, then split.
  const fields = batch.occurredAt.length > 0 ? Buffer.from(text.buffer, text.byteOffset, text.byteLength - 1).toString('utf8').split(SEPARATOR) : [];
  if (fields.length !== batch.occurredAt.length * FIELDS) throw new Error(`packed batch holds ${fields.length} fields for ${batch.occurredAt.length} events`);
  const out = new Array<StorableLine | null>(batch.slots.length);
  for (let i = 0; i < batch.slots.length; i++) {
    const slot = batch.slots[i]!;
    if (slot >= 0) {
      const f = slot * FIELDS;
      out[i] = {
        ok: true,
        event: {
          id: fields[f]!,
          orgId: fields[f + 1]!,
          anticipationRequestId: fields[f + 2]!,
          occurredAt: batch.occurredAt[slot]!,
          details: fields[f + 3]!,
          legacyId: fields[f + 4] || null,
        },
      };
    } else if (slot === PRE_REJECTED) {
      out[i] = null;
    } else {
      const r = batch.rejects[-2 - slot]!;
      out[i] = { ok: false, reason: r.reason, detail: r.detail, eventId: r.eventId };
    }
  }
  return out;
}

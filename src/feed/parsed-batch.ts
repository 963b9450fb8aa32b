import { parseFeedLine, type RejectReason, type StorableLine } from '../domain/feed-event.ts';

/**
 * A batch of parsed feed lines in the shape that crosses between threads cheaply: the
 * accepted events' text fields in one string, their times in one typed array, and the
 * (rare) rejects as a small list. Posting 10,000 parsed events as objects costs about what
 * parsing them does; this costs one string copy.
 *
 * The text fields are joined with U+0000, which none of them can contain: the parser refuses
 * control characters in ids and statuses, and the payload is JSON.stringify output, which
 * escapes them.
 */
export interface PackedBatch {
  /** Per line: k >= 0, the k-th accepted event; -1, a line rejected before parsing (no result); -2 - r, the r-th reject. */
  readonly slots: Int32Array;
  /** Four fields per accepted event, joined with U+0000: id, organization, request, payload (the status and the rest are inside the payload). */
  readonly text: string;
  /** occurred_at (epoch ms) per accepted event. */
  readonly occurredAt: Float64Array;
  readonly rejects: ReadonlyArray<{ readonly reason: RejectReason; readonly detail: string; readonly eventId: string | null }>;
}

const SEPARATOR = '\u0000';
const FIELDS = 4;
export const PRE_REJECTED = -1;

/** Parses the lines of `bytes` (lengths[i] bytes each, back to back; -1 for a line not to parse) and packs the results. */
export function parseAndPack(bytes: Uint8Array, lengths: Int32Array, receivedAt: number): PackedBatch {
  const slots = new Int32Array(lengths.length);
  const parts: string[] = [];
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
      parts.push(e.id, e.orgId, e.anticipationRequestId, e.payload);
    } else {
      slots[i] = -2 - rejects.length;
      rejects.push({ reason: parsed.reason, detail: parsed.detail, eventId: parsed.eventId });
    }
  }
  return { slots, text: parts.join(SEPARATOR), occurredAt: Float64Array.from(times), rejects };
}

/** The parse results again, reduced to what storing them takes; one per line (null where the line was rejected before parsing). */
export function unpack(batch: PackedBatch): Array<StorableLine | null> {
  const fields = batch.occurredAt.length > 0 ? batch.text.split(SEPARATOR) : [];
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
          payload: fields[f + 3]!,
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

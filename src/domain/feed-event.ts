import { createHash } from 'node:crypto';
import { excerpt } from './errors.ts';
import { jsonSyntaxError } from './json-syntax.ts';
import { daysInMonth, rfc3339Ms } from './rfc3339.ts';
import { TERMINAL_UNSAFE } from './terminal-text.ts';
import { lineTrace, type LineTrace } from './trace-context.ts';
import { checkOrgId } from './validation.ts';

/**
 * The feed format: one JSON object per line. This module turns a line into an event ready to
 * store or says precisely why it is rejected, and builds the webhook body of a stored event.
 */

export const EVENT_TYPE = 'anticipation_request.status_changed';

export const RejectReason = {
  invalidUtf8: 'invalid_utf8',
  invalidJson: 'invalid_json',
  notAnObject: 'not_an_object',
  missingField: 'missing_field',
  invalidField: 'invalid_field',
  unknownField: 'unknown_field',
  lineTooLong: 'line_too_long',
  eventIdConflict: 'event_id_conflict',
  incompleteLine: 'incomplete_line',
  nestingTooDeep: 'nesting_too_deep',
  /**
   * Parsing, comparing or storing the line failed in a way the other reasons do not name (a
   * fault of hookrelay's own, found with this line): the line is kept in quarantine with the
   * error, so the lines behind it go on.
   */
  processingFailed: 'processing_failed',
} as const;
export type RejectReason = (typeof RejectReason)[keyof typeof RejectReason];

export interface FeedEvent {
  readonly id: string;
  readonly orgId: string;
  readonly anticipationRequestId: string;
  readonly status: string;
  readonly previousStatus: string | null;
  /** Epoch ms. */
  readonly occurredAt: number;
  /**
   * What the webhook body holds besides the event's own columns: its status fields and the
   * line's data, serialised once as JSON members (`"status":…,"previous_status":…,…`). This is
   * what is stored; statusChangeBody puts the body together around it.
   */
  readonly details: string;
  /**
   * For a line without event_id but with occurred_at: the id hookrelay derived for it before
   * schema version 5 (see derivedEventId). A database with events from before then is searched
   * for it too, so the same line is still one event.
   */
  readonly legacyId: string | null;
  /** The line's `traceparent` and `tracestate` (see lineTrace); absent when it has neither. */
  readonly trace?: LineTrace;
}

export type ParsedLine =
  | { readonly ok: true; readonly event: FeedEvent }
  | { readonly ok: false; readonly reason: RejectReason; readonly detail: string; readonly eventId: string | null };

/** What storing an event takes: the other fields of a FeedEvent are inside its details. */
export type StorableEvent = Pick<FeedEvent, 'id' | 'orgId' | 'anticipationRequestId' | 'occurredAt' | 'details' | 'legacyId' | 'trace'>;

/** A parse result reduced to what storing it takes (what crosses back from the parser thread). */
export type StorableLine = { readonly ok: true; readonly event: StorableEvent } | Extract<ParsedLine, { ok: false }>;

/**
 * Parse results, one per line, read by index: an array of them, or a packed batch from the parser
 * thread decoded a line at a time (src/feed/parsed-batch.ts). `at(i)` is null for a line rejected
 * before parsing.
 */
export interface ParsedLines {
  readonly length: number;
  at(index: number): StorableLine | null | undefined;
  /** Called once the lines have been stored: what they were read from may be used again. */
  release?(): void;
}

export function toStorable(parsed: ParsedLine): StorableLine {
  if (!parsed.ok) return parsed;
  const { id, orgId, anticipationRequestId, occurredAt, details, legacyId, trace } = parsed.event;
  return { ok: true, event: trace === undefined ? { id, orgId, anticipationRequestId, occurredAt, details, legacyId } : { id, orgId, anticipationRequestId, occurredAt, details, legacyId, trace } };
}

/**
 * The webhook request body of a status change: {type, timestamp, data: {event_id,
 * organization_id, anticipation_request_id, occurred_at, status, previous_status, ...data}}.
 * The same event always gives the same bytes, so every attempt sends (and signs) the same body.
 *
 * This is the house rule "serialise once, store those bytes, sign them" kept by other means:
 * what is stored is the details, and the rest of the body is a pure function of the event's
 * columns. So this function's output for a stored event must never change: events already
 * stored, some with deliveries still pending, are rebuilt by it. A new body format needs a new
 * stored form that storedBody can tell apart, as whole bodies are told apart from details.
 */
export function statusChangeBody(event: Pick<FeedEvent, 'id' | 'orgId' | 'anticipationRequestId' | 'occurredAt' | 'details'>): string {
  const iso = `"${new Date(event.occurredAt).toISOString()}"`;
  return (
    `{"type":"${EVENT_TYPE}","timestamp":${iso},"data":{"event_id":${quote(event.id)},"organization_id":${quote(event.orgId)},` +
    `"anticipation_request_id":${quote(event.anticipationRequestId)},"occurred_at":${iso},${event.details}}}`
  );
}

/** A stored event as its `payload` column holds it: a status change's details, or a whole body. */
export interface StoredEvent {
  readonly id: string;
  readonly orgId: string;
  readonly anticipationRequestId: string;
  readonly occurredAt: number;
  readonly payload: string;
}

/**
 * The webhook body of a stored event. A status change stores only its details (the rest of the
 * body repeats the event's columns; storing it cost a third of the ingest rate), which never
 * begin with "{"; a test notification, and any event stored before schema version 5, stores its
 * whole body, which always does.
 */
export function storedBody(event: StoredEvent): string {
  return event.payload.startsWith('{') ? event.payload : statusChangeBody({ ...event, details: event.payload });
}

const KNOWN_FIELDS = new Set(['organization_id', 'anticipation_request_id', 'status', 'previous_status', 'occurred_at', 'event_id', 'data', 'traceparent', 'tracestate']);
const RESERVED_DATA_KEYS = new Set(['event_id', 'organization_id', 'anticipation_request_id', 'status', 'previous_status', 'occurred_at']);
export const MAX_EVENT_ID_LENGTH = 200;
const MAX_TEXT_FIELD = 200;
/** Ids and statuses are single-line text: a control character in one is a producer bug, and the packed form of a parsed batch relies on their absence. */
const CONTROL_CHARACTER = /[\u0000-\u001f\u007f]/;
/** A UTF-16 surrogate without its pair: not a character, and not storable as UTF-8. */
const LONE_SURROGATE = /[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/;
/** What JSON.stringify would escape in a string (quote, backslash, control characters, lone surrogates), plus DEL. */
const NEEDS_CARE = /[\u0000-\u001f"\\\u007f\ud800-\udfff]/;

/** JSON text of a string, as JSON.stringify gives it; plain strings (nearly all ids) are quoted without it, which is several times cheaper. */
function quote(value: string): string {
  return NEEDS_CARE.test(value) ? JSON.stringify(value) : `"${value}"`;
}
const utf8 = new TextDecoder('utf-8', { fatal: true });

/**
 * Two events with the same id are duplicates when they would send the same notification:
 * their webhook bodies are equal as JSON values (key order and spacing do not matter).
 */
export function sameNotification(payloadA: string, payloadB: string): boolean {
  return canonicalJson(JSON.parse(payloadA)) === canonicalJson(JSON.parse(payloadB));
}

/** One object or array being written by canonicalJson: its members, and how many are written. */
interface Open {
  readonly close: ']' | '}';
  /** An object's keys, sorted; null for an array. */
  readonly keys: string[] | null;
  readonly value: unknown[] | Record<string, unknown>;
  next: number;
}

/**
 * JSON with object keys sorted at every depth: the same content always gives the same text.
 * Written with a stack of its own rather than by recursion, so that no depth of nesting (a
 * stored event may hold any that JSON.parse reads) can overflow the call stack.
 */
export function canonicalJson(value: unknown): string {
  let out = '';
  const open: Open[] = [];
  let current: unknown = value;
  for (;;) {
    if (current !== null && typeof current === 'object') {
      if (Array.isArray(current)) {
        out += '[';
        open.push({ close: ']', keys: null, value: current, next: 0 });
      } else {
        out += '{';
        const record = current as Record<string, unknown>;
        open.push({ close: '}', keys: Object.keys(record).sort(), value: record, next: 0 });
      }
    } else {
      // undefined (a member JSON cannot hold) is written as JSON.stringify writes it in an array.
      out += JSON.stringify(current) ?? 'null';
    }
    // The next member to write, closing every object and array that is done.
    current = undefined;
    let found = false;
    while (open.length > 0) {
      const top = open[open.length - 1]!;
      const count = top.keys === null ? (top.value as unknown[]).length : top.keys.length;
      if (top.next < count) {
        if (top.next > 0) out += ',';
        if (top.keys === null) current = (top.value as unknown[])[top.next];
        else {
          const key = top.keys[top.next]!;
          out += `${JSON.stringify(key)}:`;
          current = (top.value as Record<string, unknown>)[key];
        }
        top.next++;
        found = true;
        break;
      }
      out += top.close;
      open.pop();
    }
    if (!found) return out;
  }
}

/**
 * How deep `data` may nest objects and arrays, `data` itself being level 1. Far above any real
 * status change (a few levels), and far below what JSON.stringify and the database's JSON
 * functions handle without overflowing their stacks (a few thousand levels).
 */
export const MAX_DATA_DEPTH = 64;

function reject(reason: RejectReason, detail: string, eventId: string | null = null): ParsedLine {
  return { ok: false, reason, detail, eventId };
}

/** Thrown inside the parser only, to leave it from any depth with a reject. */
class LineRejected {
  readonly reason: RejectReason;
  readonly detail: string;
  constructor(reason: RejectReason, detail: string) {
    this.reason = reason;
    this.detail = detail;
  }
}

/** Ids and statuses: no control characters, and well-formed Unicode (an id read back from the database must equal the one in the payload). */
function checkText(field: string, value: string): void {
  if (CONTROL_CHARACTER.test(value)) throw new LineRejected(RejectReason.invalidField, `"${field}" must not contain control characters`);
  if (LONE_SURROGATE.test(value)) throw new LineRejected(RejectReason.invalidField, `"${field}" must be valid Unicode text (it holds an unpaired surrogate escape)`);
}

/**
 * What a header value can carry as the delivery's HTTP client sends it (Latin-1 text, RFC 9110's
 * field-vchar and obs-text) less the C1 controls and the soft hyphen (invisible, so two ids
 * would read alike): printable ASCII and U+00A0-U+00FF, spaces inside only (HTTP drops them at
 * either end, and the receiver would then verify the signature over another id).
 */
const HEADER_SAFE = /^[\x21-\x7e\u00a0-\u00ac\u00ae-\u00ff]([\x20-\x7e\u00a0-\u00ac\u00ae-\u00ff]*[\x21-\x7e\u00a0-\u00ac\u00ae-\u00ff])?$/;

/**
 * The event id travels as the `webhook-id` header of every delivery: an id no header can carry
 * would be stored and then fail every attempt. Refused here, naming the first character that
 * cannot go (as U+NNNN: the character itself may be invisible or reorder the text around it).
 */
function checkHeaderSafeId(id: string): void {
  if (HEADER_SAFE.test(id)) return;
  const first = id.charCodeAt(0) === 0x20 || id.charCodeAt(id.length - 1) === 0x20 ? null : [...id].find((c) => !HEADER_SAFE.test(`a${c}a`));
  const what = first === undefined || first === null ? 'it begins or ends with a space' : `it holds U+${first.codePointAt(0)!.toString(16).toUpperCase().padStart(4, '0')}`;
  throw new LineRejected(
    RejectReason.invalidField,
    `"event_id" must be text an HTTP header can carry, as it is sent as the webhook-id header: printable ASCII or Latin-1 letters (U+0020-U+007E, U+00A0-U+00FF but the soft hyphen U+00AD), no space at either end; ${what}`,
  );
}

/**
 * Checks `data` without recursion (it may nest deeper than the call stack reaches): at most
 * MAX_DATA_DEPTH levels, and numbers JSON can give back (JSON.parse reads 1e400 as Infinity,
 * which JSON.stringify would then write as null: a value nobody sent).
 */
function checkData(data: object): void {
  const values: object[] = [data];
  const depths: number[] = [1];
  while (values.length > 0) {
    const value = values.pop()!;
    const depth = depths.pop()!;
    if (depth > MAX_DATA_DEPTH) throw new LineRejected(RejectReason.nestingTooDeep, `"data" nests objects and arrays more than ${MAX_DATA_DEPTH} levels deep; flatten it`);
    const record = value as Record<string, unknown>;
    for (const key in record) {
      const member = record[key];
      if (typeof member === 'object' && member !== null) {
        values.push(member);
        depths.push(depth + 1);
      } else if (typeof member === 'number' && !Number.isFinite(member)) {
        throw new LineRejected(RejectReason.invalidField, `"data" holds a number too large for JSON to carry (it reads as ${member}); send it as a string`);
      }
    }
  }
}

function text(record: Record<string, unknown>, field: string, required: true): string;
function text(record: Record<string, unknown>, field: string, required: false): string | null;
function text(record: Record<string, unknown>, field: string, required: boolean): string | null {
  const value = record[field];
  if (value === undefined || value === null) {
    if (required) throw new LineRejected(RejectReason.missingField, `"${field}" is required`);
    return null;
  }
  if (typeof value !== 'string' || value === '') throw new LineRejected(RejectReason.invalidField, `"${field}" must be a non-empty string`);
  if (value.length > MAX_TEXT_FIELD) throw new LineRejected(RejectReason.invalidField, `"${field}" must be at most ${MAX_TEXT_FIELD} characters`);
  if (NEEDS_CARE.test(value)) checkText(field, value);
  return value;
}

/** The value of `count` ASCII digits of `text` from `at`, or -1 if one of them is not a digit. */
function digits(text: string, at: number, count: number): number {
  let n = 0;
  for (let i = at; i < at + count; i++) {
    const d = text.charCodeAt(i) - 48;
    if (d < 0 || d > 9) return -1;
    n = n * 10 + d;
  }
  return n;
}

/**
 * Epoch ms of a date-time in the canonical form toISOString() gives (2026-11-22T08:30:00.000Z,
 * years 0000-9999), NaN if `value` is not in that form or names a date or time that does not
 * exist. Read digit by digit: the common case of every feed line, about ten times cheaper
 * than a regular expression plus a Date round trip.
 */
function canonicalIsoMs(value: string): number {
  if (value.length !== 24 || value.charCodeAt(4) !== 45 || value.charCodeAt(7) !== 45 || value.charCodeAt(10) !== 84 || value.charCodeAt(13) !== 58 || value.charCodeAt(16) !== 58 || value.charCodeAt(19) !== 46 || value.charCodeAt(23) !== 90) return Number.NaN;
  const year = digits(value, 0, 4);
  const month = digits(value, 5, 2);
  const day = digits(value, 8, 2);
  const hour = digits(value, 11, 2);
  const minute = digits(value, 14, 2);
  const second = digits(value, 17, 2);
  const ms = digits(value, 20, 3);
  if (year < 0 || ms < 0 || month < 1 || month > 12 || day < 1 || day > daysInMonth(year, month) || hour < 0 || hour > 23 || minute < 0 || minute > 59 || second < 0 || second > 59) return Number.NaN;
  const date = new Date(0);
  // setUTCFullYear, not Date.UTC: Date.UTC maps years 0-99 to 1900-1999.
  date.setUTCFullYear(year, month - 1, day);
  return date.setUTCHours(hour, minute, second, ms);
}

/**
 * The id of a line without event_id, derived from its bytes so that the same line always gets
 * the same id: `evt_`, then the line's occurred_at in compact UTC (20261122T083000000Z) and `_`
 * when the line gives one, then the first 32 hex digits of the SHA-256 of the line's bytes.
 * The time goes first so that the ids of a feed written in time order increase: each batch then
 * adds its ids at the end of the id index. A hash alone lands all over the index, and every
 * commit rewrote pages all over it: ingestion fell from 34k lines/s for a first million lines to
 * 13k for a fourth (docs/benchmarks.md). Before schema version 5 every derived id was `evt_` and
 * the hash: that id comes back as `legacyId` for lines with a time.
 */
function derivedEventId(bytes: Uint8Array, occurredAt: number | null): { id: string; legacyId: string | null } {
  const legacyId = `evt_${createHash('sha256').update(bytes).digest('hex').slice(0, 32)}`;
  if (occurredAt === null) return { id: legacyId, legacyId: null };
  const compact = new Date(occurredAt).toISOString().replace(/[-:.]/g, '');
  return { id: `evt_${compact}_${legacyId.slice(4)}`, legacyId };
}

/** Epoch ms of occurred_at, any RFC 3339 form; absent means `receivedAt`. The body gives it in the UTC form toISOString() gives. */
function occurredAtOf(value: unknown, receivedAt: number): number {
  if (value === undefined || value === null) return receivedAt;
  if (typeof value === 'string') {
    const canonical = canonicalIsoMs(value);
    if (!Number.isNaN(canonical)) return canonical;
  }
  const ms = typeof value === 'string' ? rfc3339Ms(value) : Number.NaN;
  if (Number.isNaN(ms)) throw new LineRejected(RejectReason.invalidField, '"occurred_at" must be an RFC 3339 date-time such as 2026-11-22T08:30:00Z');
  return ms;
}

/**
 * Why a line that is UTF-8 is not JSON: where (the byte of the line, from 0) and a short
 * reason. Never JSON.parse's message, which quotes the line around the error.
 */
function invalidJsonDetail(bytes: Uint8Array): string {
  const text = utf8.decode(bytes);
  const error = jsonSyntaxError(text);
  if (error === null) return 'not valid JSON';
  return `not valid JSON: ${error.reason} at byte ${Buffer.byteLength(text.slice(0, error.index))} of the line`;
}

/** Bytes of a rejected line kept in the quarantine table and shown in the log (see lineExcerpt). */
export const LINE_EXCERPT_BYTES = 64;

/**
 * A rejected line as the quarantine and the log show it: its first LINE_EXCERPT_BYTES bytes at
 * most, as text with every byte that is not valid UTF-8 shown as `\xNN`, control characters
 * (C0, DEL, C1) and invisible or bidirectional ones as `\uNNNN` (`\n`, `\r`, `\t` for those),
 * and backslashes doubled, so that it is one line of plain text that a terminal or a log reader
 * shows as it is. `lineBytes` is the line's full length: "..." follows when it is longer than
 * what is shown.
 */
export function lineExcerpt(bytes: Uint8Array, lineBytes: number = bytes.length): string {
  const shown = bytes.subarray(0, LINE_EXCERPT_BYTES);
  const cut = lineBytes > shown.length;
  let out = '';
  for (let i = 0; i < shown.length; ) {
    const b = shown[i]!;
    const length = b < 0x80 ? 1 : b >= 0xc2 && b <= 0xdf ? 2 : b >= 0xe0 && b <= 0xef ? 3 : b >= 0xf0 && b <= 0xf4 ? 4 : 0;
    let code = -1;
    if (length === 1) code = b;
    else if (length > 0 && i + length <= shown.length) {
      code = b & (0xff >> (length + 1));
      for (let k = 1; k < length; k++) {
        const c = shown[i + k]!;
        if ((c & 0xc0) !== 0x80) {
          code = -1;
          break;
        }
        code = (code << 6) | (c & 0x3f);
      }
      // Overlong forms, surrogates and code points past U+10FFFF are not UTF-8.
      if (code < [0, 0, 0x80, 0x800, 0x10000][length]! || (code >= 0xd800 && code <= 0xdfff) || code > 0x10ffff) code = -1;
    } else if (length > 0 && cut) {
      // A character cut in two by the excerpt's end: left out, "..." says there is more.
      break;
    }
    if (code === -1) {
      out += `\\x${b.toString(16).padStart(2, '0')}`;
      i++;
      continue;
    }
    const char = String.fromCodePoint(code);
    if (code === 0x5c) out += '\\\\';
    else if (code === 0x0a) out += '\\n';
    else if (code === 0x0d) out += '\\r';
    else if (code === 0x09) out += '\\t';
    else if (TERMINAL_UNSAFE.test(char)) out += code > 0xffff ? `\\u{${code.toString(16)}}` : `\\u${code.toString(16).padStart(4, '0')}`;
    else out += char;
    i += length;
  }
  return cut ? `${out}...` : out;
}

/**
 * Parses one feed line (without its newline). `receivedAt` (epoch ms) stands in for a missing
 * `occurred_at`. Never throws: a bad line comes back with a reason and a detail sentence.
 */
export function parseFeedLine(bytes: Uint8Array, receivedAt: number): ParsedLine {
  let record: Record<string, unknown>;
  try {
    const parsed: unknown = JSON.parse(utf8.decode(bytes));
    if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) return reject(RejectReason.notAnObject, 'each line must be one JSON object');
    record = parsed as Record<string, unknown>;
  } catch (err) {
    return err instanceof SyntaxError ? reject(RejectReason.invalidJson, invalidJsonDetail(bytes)) : reject(RejectReason.invalidUtf8, 'the line is not valid UTF-8');
  }
  const rawId = record.event_id;
  const givenId = typeof rawId === 'string' ? rawId : null;
  try {
    for (const key in record) {
      if (!KNOWN_FIELDS.has(key)) throw new LineRejected(RejectReason.unknownField, `unknown field ${excerpt(key)}; put extra fields under "data"`);
    }
    if (rawId !== undefined && (givenId === null || givenId === '' || givenId.length > MAX_EVENT_ID_LENGTH)) {
      throw new LineRejected(RejectReason.invalidField, `"event_id" must be a string of 1-${MAX_EVENT_ID_LENGTH} characters`);
    }
    if (givenId !== null) {
      if (NEEDS_CARE.test(givenId)) checkText('event_id', givenId);
      checkHeaderSafeId(givenId);
    }
    const orgId = text(record, 'organization_id', true);
    const orgProblem = checkOrgId(orgId);
    if (orgProblem) throw new LineRejected(RejectReason.invalidField, `"organization_id" ${orgProblem}`);
    const requestId = text(record, 'anticipation_request_id', true);
    const status = text(record, 'status', true);
    const previousStatus = text(record, 'previous_status', false);
    const occurred = occurredAtOf(record.occurred_at, receivedAt);
    const data = record.data;
    let dataJson = '';
    if (data !== undefined && data !== null) {
      if (typeof data !== 'object' || Array.isArray(data)) throw new LineRejected(RejectReason.invalidField, '"data" must be a JSON object');
      const reserved = Object.keys(data).filter((k) => RESERVED_DATA_KEYS.has(k));
      if (reserved.length > 0) throw new LineRejected(RejectReason.invalidField, `"data" must not contain the reserved key(s) ${reserved.join(', ')}`);
      checkData(data);
      const inner = JSON.stringify(data).slice(1, -1);
      if (inner !== '') dataJson = ',' + inner;
    }

    // Without an event_id the id is derived from the line's bytes: the same line twice is one event.
    const given = record.occurred_at !== undefined && record.occurred_at !== null;
    const { id, legacyId } = givenId !== null ? { id: givenId, legacyId: null } : derivedEventId(bytes, given ? occurred : null);
    const details = `"status":${quote(status)},"previous_status":${previousStatus === null ? 'null' : quote(previousStatus)}${dataJson}`;
    const event: FeedEvent = { id, orgId, anticipationRequestId: requestId, status, previousStatus, occurredAt: occurred, details, legacyId };
    const trace = lineTrace(record.traceparent, record.tracestate);
    return { ok: true, event: trace === null ? event : { ...event, trace } };
  } catch (err) {
    if (err instanceof LineRejected) return reject(err.reason, err.detail, givenId);
    return reject(RejectReason.processingFailed, processingFailedDetail(err), givenId);
  }
}

/** The detail of a line that failed in a way no other reason names: what went wrong, never the line itself. */
export function processingFailedDetail(err: unknown): string {
  const message = err instanceof Error ? `${err.name}: ${err.message}` : String(err);
  return `hookrelay could not process this line (${excerpt(message)}); it is kept here and the lines after it go on. If the line is valid, report this with the line`;
}

/**
 * W3C Trace Context (https://www.w3.org/TR/trace-context/), as a feed line may carry it and as
 * an event stores it: the `traceparent` and `tracestate` values, checked and put in the one form
 * hookrelay stores and sends. Pure: the OpenTelemetry packages work from what this gives
 * (services/ingest-tracing.ts, dispatch/attempt-tracing.ts).
 */

/** An event's trace context: what its delivery attempts are children of. */
export interface TraceContext {
  /** `00-<32 hex trace id>-<16 hex parent id>-<2 hex flags>`, lower case. */
  readonly traceparent: string;
  /** The vendors' list, as given (checked); null for none. */
  readonly tracestate: string | null;
}

/** A traceparent read: its parts, and the version-00 form hookrelay stores and sends. */
export interface ParsedTraceparent {
  readonly traceId: string;
  readonly spanId: string;
  /** The trace flags (bit 0: sampled). */
  readonly flags: number;
  readonly traceparent: string;
}

/** tracestate values longer than this are not kept (W3C: vendors propagate at least 512 characters). */
export const MAX_TRACESTATE_LENGTH = 512;
/** W3C: at most 32 list members. */
const MAX_TRACESTATE_MEMBERS = 32;

const HEX_VERSION = /^[0-9a-f]{2}$/;
const VERSION_00 = /^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$/;
/** A later version: its first four fields as version 00 has them, then more after a dash. */
const LATER_VERSION = /^[0-9a-f]{2}-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?$/;
const ZERO_TRACE_ID = '0'.repeat(32);
const ZERO_SPAN_ID = '0'.repeat(16);
/** A list member's key: simple, or tenant@system (W3C, section 3.3.1.3.1). */
const TRACESTATE_KEY = /^([a-z][_0-9a-z\-*/]{0,255}|[a-z0-9][_0-9a-z\-*/]{0,240}@[a-z][_0-9a-z\-*/]{0,13})$/;
/** A list member's value: printable ASCII but "," and "=", not ending with a space. */
const TRACESTATE_VALUE = /^[\x20-\x2b\x2d-\x3c\x3e-\x7e]{0,255}[\x21-\x2b\x2d-\x3c\x3e-\x7e]$/;

/**
 * Reads a traceparent value: the parts, or why it is not one (a sentence naming the rule, never
 * quoting the value). Version 00 exactly as the recommendation writes it; a later version is read
 * by its first four fields, as the recommendation asks, and stored as version 00. The version
 * ff, and a trace id or parent id of zeros only, are invalid.
 */
export function parseTraceparent(value: unknown): ParsedTraceparent | { readonly problem: string } {
  if (typeof value !== 'string') return { problem: 'must be a string such as "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"' };
  const version = value.slice(0, 2);
  if (!HEX_VERSION.test(version) || version === 'ff') return { problem: 'must start with a version of two lower-case hex digits other than ff, such as 00' };
  const match = (version === '00' ? VERSION_00 : LATER_VERSION).exec(value);
  if (match === null) return { problem: 'must be VERSION-TRACEID-PARENTID-FLAGS in lower-case hex (2-32-16-2 digits), such as "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"' };
  const [, traceId, spanId, flags] = match as unknown as [string, string, string, string];
  if (traceId === ZERO_TRACE_ID) return { problem: 'has a trace id of zeros only, which W3C Trace Context calls invalid' };
  if (spanId === ZERO_SPAN_ID) return { problem: 'has a parent id of zeros only, which W3C Trace Context calls invalid' };
  return { traceId, spanId, flags: Number.parseInt(flags, 16), traceparent: version === '00' ? value : `00-${traceId}-${spanId}-${flags}` };
}

/**
 * Checks a tracestate value: a list of up to 32 `key=value` members separated by commas
 * (spaces and tabs around them allowed, empty members skipped), at most 512 characters.
 * Returns the value as given, or why it is not one.
 */
export function checkTracestate(value: unknown): { readonly tracestate: string } | { readonly problem: string } {
  if (typeof value !== 'string') return { problem: 'must be a string of key=value members separated by commas' };
  if (value.length > MAX_TRACESTATE_LENGTH) return { problem: `must be at most ${MAX_TRACESTATE_LENGTH} characters` };
  let members = 0;
  const keys = new Set<string>();
  for (const raw of value.split(',')) {
    const member = raw.replace(/^[ \t]+|[ \t]+$/g, '');
    if (member === '') continue;
    const equals = member.indexOf('=');
    const key = equals < 0 ? '' : member.slice(0, equals);
    if (equals < 0 || !TRACESTATE_KEY.test(key) || !TRACESTATE_VALUE.test(member.slice(equals + 1))) return { problem: 'must be key=value members (W3C Trace Context list members) separated by commas' };
    if (keys.has(key)) return { problem: 'must not name a key twice' };
    keys.add(key);
    if (++members > MAX_TRACESTATE_MEMBERS) return { problem: `must have at most ${MAX_TRACESTATE_MEMBERS} members` };
  }
  return members === 0 ? { problem: 'must have at least one key=value member' } : { tracestate: value };
}

/** The trace id (32 hex digits) of a stored traceparent (version-00 form: see parseTraceparent). */
export function traceIdOf(traceparent: string): string {
  return traceparent.slice(3, 35);
}

/** The version-00 traceparent of a trace id, a span id and trace flags. */
export function formatTraceparent(traceId: string, spanId: string, flags: number): string {
  return `00-${traceId}-${spanId}-${flags < 16 ? '0' : ''}${flags.toString(16)}`;
}

/**
 * The producer's trace context a feed line carries (docs/feed.md, "Trace context"): what is kept
 * of it, and why a part was left out. A malformed value never costs the event: the change it
 * announces is valid, so the value is left out, the event kept, and the line counted and logged.
 */
export interface LineTrace {
  /** The line's traceparent in its stored (version-00) form; null when it had none or it was left out. */
  readonly traceparent: string | null;
  /** The line's tracestate; null when it had none, or it was left out (malformed, or without a traceparent). */
  readonly tracestate: string | null;
  /** Why a part was left out, a sentence that never quotes the value; null when nothing was. */
  readonly ignored: string | null;
}

/**
 * What is kept of a line's `traceparent` and `tracestate` (null: the line has neither). Only
 * read for a line that is otherwise valid; a field given as null counts as absent. A malformed
 * traceparent is left out with its tracestate; a malformed tracestate, or one without a
 * traceparent, is left out alone (W3C: a vendor that cannot parse tracestate drops it and keeps
 * traceparent).
 */
export function lineTrace(traceparentField: unknown, tracestateField: unknown): LineTrace | null {
  const hasParent = traceparentField !== undefined && traceparentField !== null;
  const hasState = tracestateField !== undefined && tracestateField !== null;
  if (!hasParent && !hasState) return null;
  if (!hasParent) return { traceparent: null, tracestate: null, ignored: '"tracestate" without "traceparent" was ignored' };
  const parsed = parseTraceparent(traceparentField);
  if ('problem' in parsed) return { traceparent: null, tracestate: null, ignored: `"traceparent" ${parsed.problem}; it was ignored${hasState ? ' with "tracestate"' : ''}` };
  if (!hasState) return { traceparent: parsed.traceparent, tracestate: null, ignored: null };
  const state = checkTracestate(tracestateField);
  if ('problem' in state) return { traceparent: parsed.traceparent, tracestate: null, ignored: `"tracestate" ${state.problem}; it was ignored, "traceparent" kept` };
  return { traceparent: parsed.traceparent, tracestate: state.tracestate, ignored: null };
}

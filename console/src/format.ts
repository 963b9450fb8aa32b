/**
 * Formatting of times, durations and values for display. No DOM access (unit-tested under Node).
 *
 * Every time the console shows is shown one way (formatTime): the reader's local time with its
 * zone ("Nov 22, 2026, 9:05:09 AM GMT+1"), and UTC on hover ("2026-11-22 08:05:09 UTC", the
 * element's title); never an ISO string beside it. Text from the API that holds times (a
 * webhook's status sentence, a problem's detail) is split at them (timesIn) so that each is
 * shown the same way.
 */
import type { DeliveryStatus } from './api-client.ts';

export interface Locale {
  /** BCP 47 tag; undefined means the browser's. */
  readonly locale?: string;
  /** IANA zone; undefined means the browser's. */
  readonly timeZone?: string;
}

/** Placeholder for a value that is absent. */
export const NONE = '—';

/** A time as the console shows it: `text` local with the zone, `utc` for the title, `iso` (as given) for `datetime`. */
export interface FormattedTime {
  readonly text: string;
  readonly utc: string;
  readonly iso: string;
}

/** An API time (ISO 8601) in the reader's locale and zone, the zone named, with UTC for the title; null for null or unparseable input. */
export function formatTime(iso: string | null | undefined, where: Locale = {}): FormattedTime | null {
  if (typeof iso !== 'string') return null;
  const ms = Date.parse(iso);
  if (Number.isNaN(ms)) return null;
  const format = new Intl.DateTimeFormat(where.locale, {
    dateStyle: 'medium',
    // `long` names the zone ("9:05:09 AM GMT+1"), in the locale's own order and digits.
    timeStyle: 'long',
    ...(where.timeZone === undefined ? {} : { timeZone: where.timeZone }),
  });
  const exact = new Date(ms).toISOString();
  return { text: format.format(ms), utc: `${exact.slice(0, 10)} ${exact.slice(11, 19)} UTC`, iso };
}

/** An RFC 3339 instant as the API writes them (with seconds, an offset or Z), inside other text. */
const INSTANT = /\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d{1,9})?(?:Z|[+-]\d{2}:\d{2})/g;

/** Text from the API in parts: runs of text, and each time in it (`{ time }`, to be shown as formatTime shows times). */
export function timesIn(text: string): Array<string | { readonly time: string }> {
  const parts: Array<string | { readonly time: string }> = [];
  let from = 0;
  for (const match of text.matchAll(INSTANT)) {
    if (match.index > from) parts.push(text.slice(from, match.index));
    parts.push({ time: match[0] });
    from = match.index + match[0].length;
  }
  if (from < text.length || parts.length === 0) parts.push(text.slice(from));
  return parts;
}

/**
 * A delivery's status in words that cannot be misread (the API's `state`, the CLI's words):
 * `failed` is not final, it is retrying; `dead` is what failed for good.
 */
export const STATUS_LABELS: Readonly<Record<DeliveryStatus, string>> = { pending: 'queued', failed: 'retrying', delivered: 'delivered', dead: 'failed for good' };

/** What may be done with a delivery of this status: Retry now (waiting for its next attempt) or Replay (delivered or dead; refused while the event is queued). */
export function deliveryActions(status: DeliveryStatus): { retryNow: boolean; replay: boolean } {
  return { retryNow: status === 'failed', replay: status === 'delivered' || status === 'dead' };
}

/** "in 5 minutes", "2 hours ago", "now" (within a second), in the reader's locale. */
export function formatRelative(iso: string | null | undefined, nowMs: number, locale?: string): string | null {
  if (typeof iso !== 'string') return null;
  const ms = Date.parse(iso);
  if (Number.isNaN(ms)) return null;
  const diff = ms - nowMs;
  const abs = Math.abs(diff);
  const rtf = new Intl.RelativeTimeFormat(locale, { numeric: 'auto' });
  if (abs < 1000) return rtf.format(0, 'second');
  const units: ReadonlyArray<[Intl.RelativeTimeFormatUnit, number]> = [
    ['day', 86_400_000],
    ['hour', 3_600_000],
    ['minute', 60_000],
    ['second', 1000],
  ];
  for (const [unit, size] of units) {
    if (abs >= size || unit === 'second') return rtf.format(Math.trunc(diff / size), unit);
  }
  return null;
}

/** A duration in milliseconds: "85 ms", "1.3 s", "2 min 5 s". */
export function formatDuration(ms: number | null | undefined): string {
  if (typeof ms !== 'number' || !Number.isFinite(ms) || ms < 0) return NONE;
  if (ms < 1000) return `${Math.round(ms)} ms`;
  if (ms < 60_000) return `${(Math.round(ms / 100) / 10).toFixed(1)} s`;
  const minutes = Math.floor(ms / 60_000);
  const seconds = Math.round((ms % 60_000) / 1000);
  return seconds === 0 ? `${minutes} min` : `${minutes} min ${seconds} s`;
}

/**
 * Characters a reader of the page cannot see, or that change how the text around them reads:
 * controls, format characters (bidirectional controls such as U+202E, zero-width ones, the soft
 * hyphen, the byte order mark, tags), unpaired surrogates, line and paragraph separators, and
 * fillers that display as nothing. The set of src/domain/terminal-text.ts (TERMINAL_UNSAFE),
 * copied because the console is built apart from src/; test/domain/terminal-text.test.ts checks that
 * the two agree on every code point.
 */
export const INVISIBLE_SOURCE = '[\\p{Cc}\\p{Cf}\\p{Cs}\\p{Zl}\\p{Zp}\\u034f\\u115f\\u1160\\u17b4\\u17b5\\u2065\\u3164\\uffa0]';
const INVISIBLE_ALL = new RegExp(INVISIBLE_SOURCE, 'gu');

/** One invisible character, to be shown as its mark: `⟨U+202E⟩`. */
export interface InvisibleMark {
  readonly mark: string;
  readonly codePoint: number;
}

/** The code point of a character as Unicode writes it: U+202E, U+E0041. */
export const codePointName = (codePoint: number): string => `U+${codePoint.toString(16).toUpperCase().padStart(4, '0')}`;

/**
 * A value from the API (an event id, a request id, a URL, a header) in parts: runs of text as
 * they are, and each INVISIBLE character as a mark naming it, so that "evt_\u202Efdp.exe" reads
 * as what it holds and not as "evt_exe.pdf". A value without any comes back as one part.
 */
export function markInvisible(text: string): Array<string | InvisibleMark> {
  const parts: Array<string | InvisibleMark> = [];
  let from = 0;
  for (const match of text.matchAll(INVISIBLE_ALL)) {
    if (match.index > from) parts.push(text.slice(from, match.index));
    const codePoint = match[0].codePointAt(0)!;
    parts.push({ mark: `⟨${codePointName(codePoint)}⟩`, codePoint });
    from = match.index + match[0].length;
  }
  if (from < text.length || parts.length === 0) parts.push(text.slice(from));
  return parts;
}

/** A value that may be absent (null, undefined, empty) as display text. */
export function orNone(value: string | number | null | undefined): string {
  return value === null || value === undefined || value === '' ? NONE : String(value);
}

const pad = (n: number) => String(n).padStart(2, '0');

/**
 * The value of an `<input type="datetime-local">` ("2026-11-22T08:00", local time) as the
 * RFC 3339 UTC time the API takes; null when empty or not a time.
 */
export function localInputToIso(value: string): string | null {
  if (!/^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(:\d{2}(\.\d{1,3})?)?$/.test(value)) return null;
  const ms = new Date(value).getTime(); // a date-time without offset is local time
  return Number.isNaN(ms) ? null : new Date(ms).toISOString();
}

/** An epoch time as a `datetime-local` value in local time, to the minute. */
export function msToLocalInput(ms: number): string {
  const d = new Date(ms);
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())}T${pad(d.getHours())}:${pad(d.getMinutes())}`;
}

/** Formatting of times, durations and values for display. No DOM access (unit-tested under Node). */

export interface Locale {
  /** BCP 47 tag; undefined means the browser's. */
  readonly locale?: string;
  /** IANA zone; undefined means the browser's. */
  readonly timeZone?: string;
}

/** Placeholder for a value that is absent. */
export const NONE = '—';

/** An API time (ISO 8601) in the reader's locale, with the ISO text to put in a `title`; null for null or unparseable input. */
export function formatTime(iso: string | null | undefined, where: Locale = {}): { text: string; iso: string } | null {
  if (typeof iso !== 'string') return null;
  const ms = Date.parse(iso);
  if (Number.isNaN(ms)) return null;
  const format = new Intl.DateTimeFormat(where.locale, {
    dateStyle: 'medium',
    timeStyle: 'medium',
    ...(where.timeZone === undefined ? {} : { timeZone: where.timeZone }),
  });
  return { text: format.format(ms), iso };
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

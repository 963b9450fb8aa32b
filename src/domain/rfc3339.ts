/**
 * RFC 3339 date-times (§5.6 `date-time`), read strictly: every field is range-checked before a
 * time is made of it, because Date.parse rolls impossible values over (2026-02-30 becomes
 * 2026-03-02, 24:00 the next day) and so turns a mistyped date into a time nobody asked for.
 */

/**
 * `date-time`: full-date, `T` (or `t`, or the space §5.6 allows), partial-time with an optional
 * fraction, then `Z` (`z`) or a numeric offset. Seconds and the offset are required: a time
 * without an offset would be read in the server's own time zone.
 */
const DATE_TIME = /^(\d{4})-(\d{2})-(\d{2})[Tt ](\d{2}):(\d{2}):(\d{2})(?:\.(\d+))?(?:[Zz]|([+-])(\d{2}):(\d{2}))$/;

/** Days in `month` (1-12) of `year` in the proleptic Gregorian calendar (leap years: every 4th, not every 100th, every 400th). */
export function daysInMonth(year: number, month: number): number {
  if (month === 2) return (year % 4 === 0 && year % 100 !== 0) || year % 400 === 0 ? 29 : 28;
  return month === 4 || month === 6 || month === 9 || month === 11 ? 30 : 31;
}

/**
 * Epoch ms of `value` when it is an RFC 3339 date-time that exists, NaN otherwise: a month
 * 01-12, a day the month has (02-29 only in a leap year), hours 00-23, minutes and seconds 00-59,
 * an offset of at most ±23:59. A leap second (:60) is refused, as epoch ms cannot represent it.
 * Digits of the fraction beyond milliseconds are dropped (truncated, as Date.parse does), and
 * years 0000-9999 are read as they are (not 1900 + a two-digit year).
 */
export function rfc3339Ms(value: string): number {
  const m = DATE_TIME.exec(value);
  if (m === null) return Number.NaN;
  const [year, month, day, hour, minute, second] = [m[1], m[2], m[3], m[4], m[5], m[6]].map(Number) as [number, number, number, number, number, number];
  if (month < 1 || month > 12 || day < 1 || day > daysInMonth(year, month) || hour > 23 || minute > 59 || second > 59) return Number.NaN;
  let offsetMinutes = 0;
  if (m[8] !== undefined) {
    const offsetHours = Number(m[9]);
    const offsetMins = Number(m[10]);
    if (offsetHours > 23 || offsetMins > 59) return Number.NaN;
    offsetMinutes = (m[8] === '-' ? -1 : 1) * (offsetHours * 60 + offsetMins);
  }
  const ms = m[7] === undefined ? 0 : Number(m[7].slice(0, 3).padEnd(3, '0'));
  const date = new Date(0);
  // setUTCFullYear, not Date.UTC: Date.UTC maps years 0-99 to 1900-1999.
  date.setUTCFullYear(year, month - 1, day);
  // The local time is `offset` ahead of UTC: UTC is the local time less the offset.
  return date.setUTCHours(hour, minute, second, ms) - offsetMinutes * 60_000;
}

/** What a valid value looks like, for the messages that refuse one. */
export const RFC3339_EXPECTED =
  'an RFC 3339 date-time that exists, with seconds and an offset, such as 2026-11-22T08:00:00Z or 2026-11-22T09:00:00.250+01:00 (a day the month has, hours 00-23, minutes and seconds 00-59, offset at most ±23:59)';

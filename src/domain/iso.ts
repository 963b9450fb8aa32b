/**
 * An epoch-ms time as the API, the CLI and the logs show it: RFC 3339 in UTC with milliseconds
 * (`2026-11-22T08:00:00.000Z`). Null stays null (a time that is not set is shown as null).
 */
export function iso(ms: number): string;
export function iso(ms: number | null): string | null;
export function iso(ms: number | null): string | null {
  return ms === null ? null : new Date(ms).toISOString();
}

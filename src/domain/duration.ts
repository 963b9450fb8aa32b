const UNIT_MS = { ms: 1, s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000 } as const;

/**
 * Parses a duration such as `1500ms`, `15s`, `5m`, `2h`, `7d` (or a bare number of
 * milliseconds) into milliseconds. Returns `null` when the text is not a duration.
 */
export function parseDuration(value: string | number): number | null {
  if (typeof value === 'number') return Number.isFinite(value) && value >= 0 ? Math.round(value) : null;
  const match = /^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*$/.exec(value);
  if (!match) return null;
  const amount = Number(match[1]);
  const unit = (match[2] ?? 'ms') as keyof typeof UNIT_MS;
  return Math.round(amount * UNIT_MS[unit]);
}

/** Milliseconds as the largest unit that divides them: 432000000 -> `5d`, 90000 -> `90s`. */
export function formatDuration(ms: number): string {
  for (const unit of ['d', 'h', 'm', 's'] as const) {
    if (ms >= UNIT_MS[unit] && ms % UNIT_MS[unit] === 0) return `${ms / UNIT_MS[unit]}${unit}`;
  }
  return `${ms}ms`;
}

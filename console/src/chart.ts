/**
 * The webhook page's chart of delivery attempts per bucket of time (GET /webhook/stats): the
 * geometry of its bars and axes for a given width, its summary sentence and the rows of its
 * table of figures. No DOM access (unit-tested under Node); chart-view.ts draws it.
 */
import type { AttemptStats, StatsWindow } from './api-client.ts';

/** Height of the plot area, and the margins around it for the axes' labels (px). */
export const PLOT_HEIGHT = 140;
export const MARGIN = { top: 8, right: 8, bottom: 22, left: 36 } as const;
/** Labels of the time axis are at least this far apart (px). */
const MIN_LABEL_SPACING = 64;
/** Ticks of the time axis fall on multiples of one of these many buckets, the first that leaves room. */
const TICK_STEPS: Readonly<Record<StatsWindow, readonly number[]>> = {
  '1h': [5, 10, 15, 30, 60],
  '24h': [4, 8, 12, 24, 48, 96],
};

export const WINDOW_NAMES: Readonly<Record<StatsWindow, string>> = { '1h': 'the last hour', '24h': 'the last day' };

export interface Bar {
  readonly x: number;
  readonly width: number;
  /** The succeeded part (bottom of the stack); height 0 when none. */
  readonly okY: number;
  readonly okHeight: number;
  /** The failed part, on top. */
  readonly failY: number;
  readonly failHeight: number;
}

export interface Tick {
  /** Position along its axis (px, in the chart's coordinates). */
  readonly at: number;
  readonly label: string;
  /** How the label sits on its position (SVG text-anchor): at the chart's edges, inside it. */
  readonly anchor: 'start' | 'middle' | 'end';
}

/** About how wide a label of the axes is drawn (px a character, at 11 px). */
const CHARACTER_WIDTH = 6.5;

export interface ChartRow {
  /** ISO start of the bucket. */
  readonly start: string;
  /** "10:42" or "10:30–10:45", in the reader's locale and zone. */
  readonly label: string;
  readonly succeeded: number;
  readonly failed: number;
}

export interface ChartModel {
  readonly width: number;
  readonly height: number;
  /** The plot area (inside the margins). */
  readonly plot: { readonly x: number; readonly y: number; readonly width: number; readonly height: number };
  readonly bars: readonly Bar[];
  /** The count at the top of the scale. */
  readonly yMax: number;
  readonly yTicks: readonly Tick[];
  readonly xTicks: readonly Tick[];
  /** One sentence: the totals and the busiest bucket. */
  readonly summary: string;
  /** The buckets that had attempts, oldest first. */
  readonly rows: readonly ChartRow[];
}

/** The smallest of 1, 2, 5, 10, 20, 50... that is at least `n` (1 for nothing at all). */
export function niceCeiling(n: number): number {
  if (!(n > 1)) return 1;
  const power = 10 ** Math.floor(Math.log10(n));
  for (const step of [1, 2, 5, 10]) if (step * power >= n) return step * power;
  return 10 * power;
}

export interface ChartOptions {
  /** Width of the chart (px): the bars share what is left of it after the margins. */
  readonly width: number;
  readonly locale?: string;
  readonly timeZone?: string;
}

const plural = (n: number, one: string, many: string) => `${n} ${n === 1 ? one : many}`;

export function chartModel(stats: AttemptStats, options: ChartOptions): ChartModel {
  const width = Math.max(160, Math.round(options.width));
  const plot = { x: MARGIN.left, y: MARGIN.top, width: width - MARGIN.left - MARGIN.right, height: PLOT_HEIGHT };
  const height = MARGIN.top + PLOT_HEIGHT + MARGIN.bottom;
  const n = stats.buckets.length;
  const slot = plot.width / Math.max(1, n);
  // A gap between bars while they are wide enough to keep one.
  const gap = slot >= 4 ? 1 : 0;
  const yMax = niceCeiling(Math.max(0, ...stats.buckets.map((b) => b.succeeded + b.failed)));
  const scale = (count: number) => (count / yMax) * plot.height;
  const bottom = plot.y + plot.height;
  const bars = stats.buckets.map((b, i) => {
    const okHeight = scale(b.succeeded);
    const failHeight = scale(b.failed);
    return { x: plot.x + i * slot + gap / 2, width: Math.max(0.5, slot - gap), okY: bottom - okHeight, okHeight, failY: bottom - okHeight - failHeight, failHeight };
  });
  const yTicks = (yMax % 2 === 0 ? [0, yMax / 2, yMax] : [0, yMax]).map((v) => ({ at: bottom - scale(v), label: String(v), anchor: 'end' as const }));

  const zone = options.timeZone === undefined ? {} : { timeZone: options.timeZone };
  const clock = new Intl.DateTimeFormat(options.locale, { hour: 'numeric', minute: '2-digit', ...zone });
  // A label centred on its tick, unless that would put it past an edge of the chart.
  const anchorOf = (at: number, label: string): Tick['anchor'] => {
    const half = (label.length * CHARACTER_WIDTH) / 2;
    return at - half < 0 ? 'start' : at + half > width ? 'end' : 'middle';
  };
  const bucketMs = stats.bucket_seconds * 1000;
  const step = TICK_STEPS[stats.window].find((s) => s * slot >= MIN_LABEL_SPACING) ?? n;
  const xTicks: Tick[] = [];
  stats.buckets.forEach((b, i) => {
    const ms = Date.parse(b.start);
    if (Math.round(ms / bucketMs) % step !== 0) return;
    const at = plot.x + i * slot;
    const label = clock.format(ms);
    xTicks.push({ at, label, anchor: anchorOf(at, label) });
  });

  const labelOf = (start: string) => {
    const ms = Date.parse(start);
    return bucketMs === 60_000 ? clock.format(ms) : `${clock.format(ms)}–${clock.format(ms + bucketMs)}`;
  };
  const rows = stats.buckets.filter((b) => b.succeeded + b.failed > 0).map((b) => ({ start: b.start, label: labelOf(b.start), succeeded: b.succeeded, failed: b.failed }));
  let summary = `In ${WINDOW_NAMES[stats.window]}: ${plural(stats.succeeded, 'attempt', 'attempts')} succeeded, ${stats.failed} failed.`;
  if (rows.length > 0) {
    const busiest = rows.reduce((best, r) => (r.succeeded + r.failed > best.succeeded + best.failed ? r : best));
    const unit = bucketMs === 60_000 ? 'minute' : 'quarter hour';
    summary += ` Busiest ${unit}: ${busiest.label}, ${plural(busiest.succeeded + busiest.failed, 'attempt', 'attempts')}.`;
  }
  return { width, height, plot, bars, yMax, yTicks, xTicks, summary, rows };
}

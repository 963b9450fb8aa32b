/**
 * The webhook page's chart: delivery attempts per minute over the last hour, or per quarter
 * hour over the last day, succeeded and failed stacked, in SVG drawn by the page itself (no
 * library; colours and lines from the style sheet, by class). A sentence and a table of the
 * figures say the same for screen readers and for anyone who wants the numbers.
 */
import { STATS_WINDOWS, type ApiClient, type AttemptStats, type StatsWindow } from './api-client.ts';
import { chartModel, WINDOW_NAMES } from './chart.ts';
import { h, replace, svg, uid } from './dom.ts';

/** How often the chart asks for its figures again while the page is shown (docs/console.md). */
export const CHART_REFRESH_MS = 15_000;

const BUTTON_LABELS: Readonly<Record<StatsWindow, string>> = { '1h': 'Last hour', '24h': 'Last day' };

/** Width the chart is drawn at when its box has none yet (not laid out). */
const FALLBACK_WIDTH = 640;

export interface ChartSection {
  readonly element: HTMLElement;
  /** Asks the API for the figures of the window shown, and draws them. */
  load(): Promise<void>;
  dispose(): void;
}

/**
 * The chart's section. `onFailure` shows what a failed call means (the view's messages).
 * Redrawn when its box changes width, so that its text keeps its size at any width.
 */
export function chartSection(api: ApiClient, onFailure: (err: unknown) => void): ChartSection {
  let period: StatsWindow = '1h';
  let stats: AttemptStats | null = null;
  let drawnWidth = 0;
  let sequence = 0;
  const headingId = uid('chart-heading');
  const titleId = uid('chart-title');
  const descId = uid('chart-desc');
  const buttons = STATS_WINDOWS.map((w) => {
    const button = h('button', { type: 'button', 'aria-pressed': w === period ? 'true' : 'false' }, BUTTON_LABELS[w]);
    button.addEventListener('click', () => {
      period = w;
      for (const [i, b] of buttons.entries()) b.setAttribute('aria-pressed', STATS_WINDOWS[i] === w ? 'true' : 'false');
      void load();
    });
    return button;
  });
  const plot = h('div', { class: 'chart-plot', 'aria-busy': 'true' });
  const caption = h('figcaption', { id: descId, class: 'chart-summary' }, 'Loading…');
  const tableBody = h('tbody');
  const details = h(
    'details',
    { class: 'chart-figures' },
    h('summary', null, 'The figures'),
    h('div', { class: 'table-wrap table-narrow', role: 'region', 'aria-label': 'Attempts per bucket', tabindex: 0 }, h('table', { class: 'figures' }, h('caption', null, 'Attempts with at least one, oldest first'), h('thead', null, h('tr', null, h('th', { scope: 'col' }, 'Time'), h('th', { scope: 'col' }, 'Succeeded'), h('th', { scope: 'col' }, 'Failed'))), tableBody)),
  );
  const legend = h('ul', { class: 'chart-legend', 'aria-hidden': 'true' }, h('li', { class: 'legend-ok' }, 'Succeeded'), h('li', { class: 'legend-failed' }, 'Failed'));
  const element = h(
    'section',
    { class: 'chart', 'aria-labelledby': headingId },
    h('h2', { id: headingId }, 'Delivery attempts'),
    h('div', { class: 'chart-windows', role: 'group', 'aria-label': 'Period' }, ...buttons),
    h('figure', null, plot, legend, caption),
    details,
  );

  const draw = () => {
    if (stats === null) return;
    const width = plot.clientWidth || FALLBACK_WIDTH;
    drawnWidth = width;
    const m = chartModel(stats, { width });
    const grid = m.yTicks.map((t) => svg('line', { class: 'grid', x1: m.plot.x, x2: m.plot.x + m.plot.width, y1: t.at, y2: t.at }));
    const yLabels = m.yTicks.map((t) => svg('text', { class: 'axis', x: m.plot.x - 6, y: t.at, 'text-anchor': t.anchor, 'dominant-baseline': 'middle' }, t.label));
    const xLabels = m.xTicks.map((t) => svg('text', { class: 'axis', x: t.anchor === 'end' ? m.width - 1 : t.at, y: m.plot.y + m.plot.height + 15, 'text-anchor': t.anchor }, t.label));
    const bars = m.bars.flatMap((b) => [
      b.okHeight > 0 ? svg('rect', { class: 'bar-ok', x: b.x, y: b.okY, width: b.width, height: b.okHeight }) : null,
      b.failHeight > 0 ? svg('rect', { class: 'bar-failed', x: b.x, y: b.failY, width: b.width, height: b.failHeight }) : null,
    ]);
    const chart = svg(
      'svg',
      { role: 'img', 'aria-labelledby': `${titleId} ${descId}`, width: m.width, height: m.height, viewBox: `0 0 ${m.width} ${m.height}` },
      svg('title', { id: titleId }, `Delivery attempts per ${stats.bucket_seconds === 60 ? 'minute' : 'quarter hour'} in ${WINDOW_NAMES[stats.window]}, succeeded and failed`),
      ...grid,
      ...bars,
      svg('line', { class: 'baseline', x1: m.plot.x, x2: m.plot.x + m.plot.width, y1: m.plot.y + m.plot.height, y2: m.plot.y + m.plot.height }),
      ...yLabels,
      ...xLabels,
    );
    replace(plot, chart);
    plot.removeAttribute('aria-busy');
    caption.textContent = m.summary;
    replace(
      tableBody,
      ...(m.rows.length === 0
        ? [h('tr', null, h('td', { colspan: 3, class: 'empty' }, 'No attempt.'))]
        : m.rows.map((r) => h('tr', null, h('th', { scope: 'row' }, h('time', { datetime: r.start }, r.label)), h('td', { class: 'num' }, r.succeeded), h('td', { class: 'num' }, r.failed)))),
    );
  };

  const resize = new ResizeObserver(() => {
    if (stats !== null && plot.clientWidth !== drawnWidth) draw();
  });
  resize.observe(plot);

  async function load(): Promise<void> {
    const mine = ++sequence;
    try {
      const answer = await api.stats(period);
      if (mine !== sequence) return;
      const json = JSON.stringify(answer);
      if (stats !== null && json === JSON.stringify(stats)) return;
      stats = answer;
      draw();
    } catch (err) {
      if (mine !== sequence) return;
      plot.removeAttribute('aria-busy');
      onFailure(err);
    }
  }

  return { element, load, dispose: () => resize.disconnect() };
}

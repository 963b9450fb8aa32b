/**
 * Building the page: elements with attributes and text children only. Text from the API goes
 * in as text nodes (`append` of a string), never as HTML: there is no innerHTML in the console.
 */
import { codePointName, formatTime, markInvisible, NONE, timesIn } from './format.ts';

export type Child = Node | string | number | null | undefined | false;
type AttrValue = string | number | boolean | null | undefined;
export type Attrs = Record<string, AttrValue> & { on?: Partial<Record<keyof HTMLElementEventMap, (event: Event) => void>> };

export function h<K extends keyof HTMLElementTagNameMap>(tag: K, attrs: Attrs | null = null, ...children: Child[]): HTMLElementTagNameMap[K] {
  const el = document.createElement(tag);
  if (attrs !== null) {
    for (const [name, value] of Object.entries(attrs)) {
      if (name === 'on') continue;
      if (value === null || value === undefined || value === false) continue;
      el.setAttribute(name, value === true ? '' : String(value));
    }
    for (const [type, listener] of Object.entries(attrs.on ?? {})) el.addEventListener(type, listener);
  }
  add(el, ...children);
  return el;
}

/** Appends children; strings become text nodes. */
export function add(el: Element, ...children: Child[]): void {
  for (const child of children) {
    if (child === null || child === undefined || child === false) continue;
    el.append(typeof child === 'number' ? String(child) : child);
  }
}

export function replace(el: Element, ...children: Child[]): void {
  el.replaceChildren();
  add(el, ...children);
}

/** An API time in the reader's local time with its zone, UTC in `title`, the ISO time in `datetime`; "—" when absent (see formatTime). */
export function time(iso: string | null | undefined): Node {
  const formatted = formatTime(iso);
  if (formatted === null) return document.createTextNode(NONE);
  return h('time', { datetime: formatted.iso, title: formatted.utc }, formatted.text);
}

/** Text from the API (a status sentence, a problem's detail) with each time in it shown as `time` shows times. */
export function withTimes(text: string): Child[] {
  return timesIn(text).map((part) => (typeof part === 'string' ? part : time(part.time)));
}

/**
 * A value from the API as text, with each character a reader could not see, or that would
 * reorder the text around it (a bidirectional control, a zero-width character: markInvisible),
 * shown as a marked `⟨U+202E⟩` instead. For ids, URLs and header names and values: what is
 * compared, copied into a search, or trusted by the way it reads.
 */
export function marked(text: string): Node | string {
  const parts = markInvisible(text);
  if (parts.length === 1 && typeof parts[0] === 'string') return parts[0];
  const fragment = document.createDocumentFragment();
  for (const part of parts) {
    if (typeof part === 'string') fragment.append(part);
    else fragment.append(h('span', { class: 'invisible-char', title: `${codePointName(part.codePoint)}: a character that is not shown (invisible, or one that reorders the text around it)` }, part.mark));
  }
  return fragment;
}

let counter = 0;
/** An id unique in the page. */
export const uid = (prefix: string): string => `${prefix}-${++counter}`;

/** A table inside a wrapper that scrolls sideways on narrow screens (and can be scrolled by keyboard). */
export function scrollingTable(table: HTMLTableElement, label: string): HTMLElement {
  return h('div', { class: 'table-wrap', role: 'region', 'aria-label': label, tabindex: 0 }, table);
}

export function headerRow(names: readonly string[]): HTMLTableSectionElement {
  return h('thead', null, h('tr', null, ...names.map((name) => h('th', { scope: 'col' }, name))));
}

const SVG_NS = 'http://www.w3.org/2000/svg';

/** An SVG element with attributes (presentation attributes, never `style`: the CSP allows no inline style) and children. */
export function svg<K extends keyof SVGElementTagNameMap>(tag: K, attrs: Record<string, string | number> | null = null, ...children: Child[]): SVGElementTagNameMap[K] {
  const el = document.createElementNS(SVG_NS, tag);
  for (const [name, value] of Object.entries(attrs ?? {})) el.setAttribute(name, String(value));
  add(el, ...children);
  return el;
}

/**
 * Names each cell of `row` after its column (`data-label`), for tables that show a row as a card
 * on a narrow screen (`table.cards` in style.css), where the column headers are out of sight.
 */
export function labelCells<R extends HTMLTableRowElement>(row: R, columns: readonly string[]): R {
  [...row.cells].forEach((cell, i) => {
    const label = columns[i];
    if (label !== undefined && cell.colSpan === 1) cell.dataset.label = label;
  });
  return row;
}

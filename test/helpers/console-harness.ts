/**
 * Fixtures for the console's browser test (test/e2e/console.e2e.test.ts): Debian's chromium driven
 * by playwright-core (no browser download), browser contexts that record everything the page
 * must not do (page errors, console errors, Content-Security-Policy violations, requests to
 * another origin or carrying a token), bounded polling of assertions, and the screenshots the
 * documentation uses (only when CONSOLE_SCREENSHOTS names a directory).
 */
import assert from 'node:assert/strict';
import { existsSync, mkdirSync } from 'node:fs';
import { join, resolve } from 'node:path';
import type { TestContext } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { chromium, type Browser, type BrowserContext, type BrowserContextOptions, type Locator, type Page } from 'playwright-core';
import { defer } from './feed-helpers.ts';

/** Debian's chromium (apt-get install -y chromium); playwright-core never downloads one. */
export const CHROMIUM = process.env.CHROMIUM_PATH ?? '/usr/bin/chromium';
export const AXE_PATH = fileURLToPath(new URL('../../node_modules/axe-core/axe.min.js', import.meta.url));
/** How long a view may take to show what it should: generous, for a busy 2-core machine. Only reached when something is broken. */
export const UI_WAIT_MS = 15_000;

/** Retries `check` (an assertion, async or not) until it passes; after `timeoutMs` throws its last error, prefixed with `what`. */
export async function eventually<T>(what: string, check: () => T | Promise<T>, timeoutMs = UI_WAIT_MS, intervalMs = 100): Promise<T> {
  const deadline = performance.now() + timeoutMs;
  for (;;) {
    try {
      return await check();
    } catch (err) {
      if (performance.now() > deadline) {
        const message = err instanceof Error ? err.message : String(err);
        throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}: ${message}`, { cause: err });
      }
    }
    await sleep(intervalMs);
  }
}

/** Something a page did that it must not: the context it happened in and what. */
export interface Incident {
  readonly context: string;
  readonly kind: 'pageerror' | 'console' | 'csp-violation' | 'requestfailed';
  readonly text: string;
}

export interface SeenRequest {
  readonly context: string;
  readonly method: string;
  readonly url: string;
  readonly isNavigation: boolean;
}

export interface SeenResponse {
  readonly context: string;
  readonly url: string;
  readonly status: number;
  readonly headers: Record<string, string>;
}

export interface ConsoleBrowser {
  readonly browser: Browser;
  /**
   * A new browser context (its own sessionStorage: one signed-in user each) whose pages are
   * watched; `label` names it in the incidents and requests.
   */
  context(label: string, options?: BrowserContextOptions): Promise<BrowserContext>;
  /** A new watched page in a new context. */
  page(label: string, options?: BrowserContextOptions): Promise<Page>;
  readonly incidents: Incident[];
  readonly requests: SeenRequest[];
  readonly responses: SeenResponse[];
}

/** The name of the page function the CSP watcher calls (see the init script below). */
const CSP_BINDING = '__hookrelayTestCspViolation';

/**
 * Launches chromium (closed when the test ends). Every context it makes reports its pages'
 * uncaught errors, console errors, CSP violations (from the `securitypolicyviolation` event,
 * which fires even when the browser prints nothing), failed requests, and every request and
 * response, into the arrays the test asserts on at the end.
 */
export async function launchConsoleBrowser(t: TestContext): Promise<ConsoleBrowser> {
  assert.ok(existsSync(CHROMIUM), `${CHROMIUM} is missing: apt-get install -y chromium (or set CHROMIUM_PATH)`);
  const browser = await chromium.launch({ executablePath: CHROMIUM, args: ['--disable-dev-shm-usage'] });
  defer(t, () => browser.close());
  const incidents: Incident[] = [];
  const requests: SeenRequest[] = [];
  const responses: SeenResponse[] = [];

  const watch = (label: string, page: Page) => {
    page.setDefaultTimeout(UI_WAIT_MS);
    page.on('pageerror', (err) => incidents.push({ context: label, kind: 'pageerror', text: `${err.name}: ${err.message}` }));
    page.on('console', (msg) => {
      if (msg.type() === 'error') incidents.push({ context: label, kind: 'console', text: msg.text() });
    });
    page.on('request', (req) => requests.push({ context: label, method: req.method(), url: req.url(), isNavigation: req.isNavigationRequest() }));
    page.on('requestfailed', (req) => {
      // A page that ends (context closed) aborts what it was loading: not the console's doing.
      const failure = req.failure()?.errorText ?? '';
      if (!/ERR_ABORTED/.test(failure)) incidents.push({ context: label, kind: 'requestfailed', text: `${req.method()} ${req.url()}: ${failure}` });
    });
    page.on('response', (res) => void res.allHeaders().then(
      (headers) => responses.push({ context: label, url: res.url(), status: res.status(), headers }),
      () => responses.push({ context: label, url: res.url(), status: res.status(), headers: {} }),
    ));
  };

  const context = async (label: string, options: BrowserContextOptions = {}): Promise<BrowserContext> => {
    const ctx = await browser.newContext({ viewport: { width: 1280, height: 900 }, ...options });
    ctx.setDefaultTimeout(UI_WAIT_MS);
    await ctx.exposeFunction(CSP_BINDING, (text: string) => void incidents.push({ context: label, kind: 'csp-violation', text }));
    // Injected by the browser itself (DevTools protocol), so the page's CSP does not apply to it.
    await ctx.addInitScript(`document.addEventListener('securitypolicyviolation', (e) => window.${CSP_BINDING}(e.violatedDirective + ' blocked ' + e.blockedURI + ' at ' + e.sourceFile + ':' + e.lineNumber));`);
    ctx.on('page', (page) => watch(label, page));
    return ctx;
  };

  return {
    browser,
    context,
    async page(label, options) {
      const ctx = await context(label, options);
      return ctx.newPage();
    },
    incidents,
    requests,
    responses,
  };
}

/** Where CONSOLE_SCREENSHOTS points (created if needed), or null: then no screenshot is taken. */
export function screenshotDir(): string | null {
  const dir = process.env.CONSOLE_SCREENSHOTS;
  if (dir === undefined || dir.trim() === '') return null;
  const absolute = resolve(dir);
  mkdirSync(absolute, { recursive: true });
  return absolute;
}

/** Saves `console-<name>.png` of the page's viewport into CONSOLE_SCREENSHOTS, when it is set. */
export async function screenshot(page: Page, name: string): Promise<void> {
  const dir = screenshotDir();
  if (dir === null) return;
  // No caret blinking, no transition caught halfway.
  await page.screenshot({ path: join(dir, `console-${name}.png`), animations: 'disabled', caret: 'hide', fullPage: true });
}

/** The text of the page (for failure messages): its address and what it shows, shortened. */
export async function describePage(page: Page): Promise<string> {
  const text = await page
    .locator('body')
    .innerText({ timeout: 2_000 })
    .catch((err: unknown) => `(no text: ${String(err)})`);
  return `page ${page.url()} shows: ${text.replace(/\s+/g, ' ').slice(0, 1500)}`;
}

/** Runs `fn`; when it throws, adds what the page shows to the error, so that a failure says where the page was. */
export async function onPage<T>(page: Page, fn: () => Promise<T>): Promise<T> {
  try {
    return await fn();
  } catch (err) {
    const where = await describePage(page);
    if (err instanceof Error) {
      err.message = `${err.message}\n    ${where}`;
      throw err;
    }
    throw new Error(`${String(err)}\n    ${where}`);
  }
}

/** A table read as the user sees it: its column headers and each body row's cell texts (trimmed, one space). */
export interface TableText {
  readonly headers: string[];
  readonly rows: string[][];
}

export async function readTable(table: Locator): Promise<TableText> {
  // No named function inside: tsx (esbuild keepNames) would wrap it in a __name() call, which does not exist in the page.
  return table.evaluate((el) => ({
    headers: Array.from(el.querySelectorAll('thead th'), (th) => ((th as { textContent: string | null }).textContent ?? '').replace(/\s+/g, ' ').trim()),
    rows: Array.from(el.querySelectorAll('tbody tr'), (tr) =>
      Array.from((tr as { querySelectorAll(s: string): ArrayLike<unknown> }).querySelectorAll('th, td'), (td) => ((td as { textContent: string | null }).textContent ?? '').replace(/\s+/g, ' ').trim()),
    ),
  }));
}

/** The row of `table` whose cells include `text`, as a record by column header; undefined when none has. */
export function rowWith(table: TableText, text: string): Record<string, string> | undefined {
  const row = table.rows.find((cells) => cells.some((c) => c.includes(text)));
  if (row === undefined) return undefined;
  return Object.fromEntries(table.headers.map((h, i) => [h, row[i] ?? '']));
}

/** The dd that follows the dt whose text is exactly `term`. */
export function definition(scope: Page | Locator, term: string): Locator {
  const escaped = term.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
  return scope.locator('dt').filter({ hasText: new RegExp(`^\\s*${escaped}\\s*$`) }).first().locator('xpath=following-sibling::dd[1]');
}

/** Every value of the page's sessionStorage (run in the page). */
export function sessionStorageValues(page: Page): Promise<string[]> {
  return page.evaluate(() => {
    const storage = (globalThis as unknown as { sessionStorage: { length: number; key(i: number): string | null; getItem(k: string): string | null } }).sessionStorage;
    const values: string[] = [];
    for (let i = 0; i < storage.length; i++) values.push(storage.getItem(storage.key(i) ?? '') ?? '');
    return values;
  });
}

export interface AxeViolation {
  readonly id: string;
  readonly impact: string | null;
  readonly help: string;
  readonly targets: string[];
}

/**
 * Runs axe-core on the page as it is now and returns the violations of impact serious or
 * critical. The page must belong to a context created with bypassCSP: true: the console's CSP
 * (script-src 'self') rightly refuses the injected script otherwise.
 */
export async function seriousAxeViolations(page: Page): Promise<AxeViolation[]> {
  const loaded = await page.evaluate(() => typeof (globalThis as { axe?: unknown }).axe !== 'undefined');
  if (!loaded) await page.addScriptTag({ path: AXE_PATH });
  const violations = await page.evaluate(async () => {
    const axe = (globalThis as unknown as { axe: { run(): Promise<{ violations: Array<{ id: string; impact?: string | null; help: string; nodes: Array<{ target: unknown[] }> }> }> } }).axe;
    const result = await axe.run();
    return result.violations.map((v) => ({ id: v.id, impact: v.impact ?? null, help: v.help, targets: v.nodes.map((n) => n.target.map(String).join(' ')) }));
  });
  return violations.filter((v) => v.impact === 'serious' || v.impact === 'critical');
}

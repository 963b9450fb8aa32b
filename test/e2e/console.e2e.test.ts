/**
 * The delivery console (issue 27) end to end, in a real browser: Debian's chromium driven by
 * playwright-core, against the built daemon (`hookrelay serve`), its CLI and a real HTTPS
 * receiver on 127.0.0.1 whose answers the test chooses. Two organizations, each with an admin
 * and a viewer. acme's receiver first answers 500: the delivery fails and goes dead (retry
 * schedule 1s,1s); the admin signs in through `hookrelay console link`, sees the failed delivery
 * with the receiver's status and answer, replays it once the receiver answers 204, and watches
 * it turn delivered without a reload. A viewer sees it and can change nothing; globex sees none
 * of it. Throughout: the CSP header, no page error, no CSP violation, no request to another
 * origin, no token in any URL the page requests nor in the daemon's log; axe-core finds nothing
 * serious; the table stays usable at 390 px. With CONSOLE_SCREENSHOTS=DIR the views are saved
 * as PNGs there (docs/console.md uses them).
 */
import assert from 'node:assert/strict';
import { appendFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { before, test, type TestContext } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import Database from 'better-sqlite3';
import type { Page } from 'playwright-core';
import { Webhook } from 'standardwebhooks';
import {
  definition,
  eventually,
  launchConsoleBrowser,
  onPage,
  readTable,
  rowWith,
  screenshot,
  seriousAxeViolations,
  sessionStorageValues,
} from '../helpers/console-harness.ts';
import { assertBuilt, jsonLine, runCli, scratchDir, spawnServe, type Daemon } from '../helpers/feed-helpers.ts';
import { createTestTls, startReceiver, type Receiver } from '../helpers/receivers.ts';
import { HIDDEN_HEADER_VALUE } from '../../src/domain/webhook-headers.ts';

before(assertBuilt);

const CSP = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; frame-ancestors 'none'; base-uri 'none'; form-action 'none'";
const RECEIVER_DOWN = '{"error":"receiver down for maintenance"}';
const ACME_CREDENTIAL = 'Bearer console-test-credential-0123';
const ACME_WEBHOOK_SETTINGS = ['--header', 'X-Environment: staging', '--header', `Authorization: ${ACME_CREDENTIAL}`, '--rate-limit', '1000'];
const ACME_EVENT = 'evt_7c1f0e2a9b3d4c58';
/** The producer's trace context on the acme line: the delivery page names its trace (stored with tracing off too). */
const ACME_TRACE_ID = '4bf92f3577b34da6a3ce929d0e0e4736';
const ACME_TRACEPARENT = `00-${ACME_TRACE_ID}-00f067aa0ba902b7-01`;
const ACME_REQUEST = 'ar_5e21d9';
const ACME_OTHER_EVENT = 'evt_d4b28e61f0a94c3e';
const ACME_OTHER_REQUEST = 'ar_7a0c13';
const GLOBEX_EVENT = 'evt_3a90b6d2e15f4c07';
/** Issue 47: ids holding a bidirectional override and a zero-width space, which the console marks. */
const GLOBEX_MARKED_EVENT = 'evt_\u202efdp.exe';
const GLOBEX_MARKED_REQUEST = 'ar_\u202egnp\u200b.exe';
const JWT = /^[\w-]+\.[\w-]+\.[\w-]+$/;

interface DeliveryJson {
  readonly id: number;
  readonly event_id: string;
  readonly status: string;
  readonly attempts: number;
  readonly last_status_code: number | null;
}

interface Rig {
  readonly daemon: Daemon;
  readonly origin: string;
  readonly receiver: Receiver;
  readonly common: readonly string[];
  readonly listen: string;
  readonly feedPath: string;
}

/** `hookrelay console link` for that user: the one line it prints, checked against the contract, and the token in it. */
async function consoleLink(t: TestContext, rig: Rig, org: string, email: string, ttl?: string): Promise<{ link: string; token: string }> {
  const result = await runCli(t, ['console', 'link', '--org', org, '--email', email, ...(ttl === undefined ? [] : ['--ttl', ttl]), '--listen', rig.listen, ...rig.common]);
  assert.equal(result.code, 0, `hookrelay console link --org ${org} --email ${email}: exit ${result.code}; stderr: ${result.stderr}`);
  const lines = result.stdout.split('\n').filter((l) => l !== '');
  assert.equal(lines.length, 1, `console link prints one line; got: ${JSON.stringify(result.stdout)}`);
  const link = lines[0]!;
  const prefix = `${rig.origin}/console/#token=`;
  assert.ok(link.startsWith(prefix), `the link is ${prefix}JWT; got ${link}`);
  const token = link.slice(prefix.length);
  assert.match(token, JWT);
  return { link, token };
}

/** The API as the console calls it, with the same bearer token (for setup waits and cross-checks). */
async function api<T>(rig: Rig, token: string, path: string, init: RequestInit = {}): Promise<{ status: number; body: T }> {
  const res = await fetch(`${rig.origin}${path}`, { ...init, headers: { authorization: `Bearer ${token}`, ...init.headers } });
  const text = await res.text();
  return { status: res.status, body: (text === '' ? null : JSON.parse(text)) as T };
}

async function deliveriesOf(rig: Rig, token: string): Promise<DeliveryJson[]> {
  const { status, body } = await api<{ data: DeliveryJson[] }>(rig, token, '/webhook/deliveries');
  assert.equal(status, 200);
  return body.data;
}

/** Waits for the view's h1. */
async function heading(page: Page, name: string | RegExp): Promise<void> {
  await page.getByRole('heading', { level: 1, name }).waitFor({ state: 'visible' });
}

/** Follows a header link and waits for the view's h1 (same document: the console routes on the fragment). */
async function openFromHeader(page: Page, link: 'Webhook' | 'Deliveries'): Promise<void> {
  await page.getByRole('link', { name: link, exact: true }).first().click();
  await heading(page, link);
}

/** The deliveries view's table, once it lists something or says it is empty (its column headers are shown). */
function deliveriesTable(page: Page) {
  return page.getByRole('table').filter({ has: page.getByRole('columnheader', { name: 'Last status code' }) });
}

function attemptsTable(page: Page) {
  return page.getByRole('table').filter({ has: page.getByRole('columnheader', { name: 'Duration' }) });
}

async function assertSignInView(page: Page): Promise<void> {
  await heading(page, 'Sign in');
  await page.getByLabel('Access token').waitFor({ state: 'visible' });
  await page.getByRole('button', { name: 'Sign in', exact: true }).waitFor({ state: 'visible' });
}

test('the console: sign in by link, a failed delivery and its receiver answer, replay to delivered without a reload, viewer and tenant limits, CSP, axe, 390 px', { timeout: 180_000 }, async (t) => {
  const started = performance.now();
  // ---- The install: two organizations, an admin and a viewer each, acme's receiver failing.
  const dir = scratchDir(t, 'hookrelay-console-');
  const state = join(dir, 'state');
  const config = join(dir, 'hookrelay.json');
  const tls = createTestTls(t);
  const receiver = await startReceiver(t, tls, () => ({ status: 500, headers: { 'content-type': 'application/json' }, body: RECEIVER_DOWN }));
  writeFileSync(
    config,
    JSON.stringify({
      delivery: {
        caFile: tls.caFile,
        organizationNetworks: ['acme=127.0.0.1/32', 'globex=127.0.0.1/32'],
        // The receiver is on loopback, an internal network: its answers are kept in the log only for these.
        storeInternalResponses: ['acme', 'globex'],
        // Three attempts a second apart, then dead: failed, dead and replayable within ~3 s.
        retrySchedule: ['1s', '1s'],
        jitterPercent: 0,
        pollInterval: '50ms',
      },
      feed: { pollInterval: 50 },
      // Exact expiry: a 1 s token is refused 1 s later (the default allows 30 s of clock skew).
      auth: { clockTolerance: 0 },
    }),
  );
  const common = ['--config', config, '--state-dir', state];
  const setup = async (args: string[]) => {
    const r = await runCli(t, [...args, ...common]);
    assert.equal(r.code, 0, `hookrelay ${args.join(' ')}: exit ${r.code}; stderr: ${r.stderr}`);
    return r;
  };
  // The browser starts meanwhile. Each CLI run is a process start (about a second on a busy
  // machine): what does not depend on another runs at the same time (the CLI waits for the
  // database's write lock).
  const launching = launchConsoleBrowser(t);
  // Awaited below; should the setup fail first, a failed launch must not also be an unhandled rejection.
  launching.catch(() => undefined);
  await setup(['migrate']);
  const orgs = ['acme', 'globex'];
  await Promise.all(orgs.map((org) => setup(['orgs', 'add', org])));
  await Promise.all(
    orgs.flatMap((org) => [
      setup(['users', 'add', '--org', org, '--email', `admin@${org}.example`, '--role', 'saas_admin']),
      setup(['users', 'add', '--org', org, '--email', `viewer@${org}.example`, '--role', 'saas_viewer']),
      // acme's webhook carries headers of its own, one a credential, and a rate limit far above this test's pace.
      setup(['webhook', 'set', '--org', org, '--url', receiver.url.replace(/\/hook$/, `/${org}`), ...(org === 'acme' ? ACME_WEBHOOK_SETTINGS : [])]),
    ]),
  );
  const daemon = await spawnServe(t, state, ['--config', config]);
  const origin = daemon.baseUrl;
  const rig: Rig = { daemon, origin, receiver, common, listen: new URL(origin).host, feedPath: join(state, 'feed.jsonl') };

  // One status change for acme: the receiver answers 500 to every attempt until the test says otherwise.
  appendFileSync(rig.feedPath, jsonLine({ event_id: ACME_EVENT, organization_id: 'acme', anticipation_request_id: ACME_REQUEST, status: 'approved', previous_status: 'submitted', traceparent: ACME_TRACEPARENT }));

  // Links and the browser while the delivery fails (nothing here depends on it).
  const [acmeAdmin, acmeViewer, globexAdmin, expired, own, browser] = await Promise.all([
    consoleLink(t, rig, 'acme', 'admin@acme.example'),
    consoleLink(t, rig, 'acme', 'viewer@acme.example'),
    consoleLink(t, rig, 'globex', 'admin@globex.example'),
    // A link that lives one second (the shortest --ttl), for the expired sign-in; used last.
    consoleLink(t, rig, 'acme', 'admin@acme.example', '1s'),
    // The test's own API calls (waits, cross-checks) use a token of their own: the rate limit
    // counts per token, and the console's must not be spent by the test's polling.
    setup(['token', 'issue', '--org', 'acme', '--email', 'admin@acme.example']),
    launching,
  ]);
  const apiToken = own.stdout.trim();
  assert.match(apiToken, JWT);
  const tokens = [acmeAdmin.token, acmeViewer.token, globexAdmin.token, expired.token, apiToken];

  // The original delivery: dead after three 500s (a replay needs it finished: a pending one is refused).
  const failed = await eventually('acme\'s delivery to be dead after three 500 answers', async () => {
    const list = await deliveriesOf(rig, apiToken);
    const d = list.find((x) => x.event_id === ACME_EVENT);
    assert.ok(d, `no delivery of ${ACME_EVENT} yet: ${JSON.stringify(list)}`);
    assert.equal(d.status, 'dead', `delivery ${JSON.stringify(d)}`);
    return d;
  }, 20_000, 250);
  assert.equal(failed.last_status_code, 500);
  assert.equal(failed.attempts, 3);
  assert.equal(receiver.requestsFor(ACME_EVENT).length, 3);

  let replayedId = 0;
  /** The secret when the replay was sent (the rotate step replaces it): the one its attempt signed with. */
  let replaySecret = '';
  /**
   * One step as a subtest. Steps run in order on shared state (the admin's page, the deliveries):
   * one whose prerequisite failed is skipped rather than waiting out its timeouts on a page that
   * is not where it expects.
   */
  const broken = new Set<string>();
  const step = (key: string, needs: readonly string[], name: string, fn: () => Promise<void>) =>
    t.test(name, async (st) => {
      const missing = needs.filter((n) => broken.has(n));
      if (missing.length > 0) {
        broken.add(key);
        st.skip(`skipped: step ${missing.join(', ')} failed`);
        return;
      }
      try {
        await fn();
      } catch (err) {
        broken.add(key);
        throw err;
      }
    });

  await step('headers', [], 'GET /console/ answers the page with the CSP and the security headers; the page has no inline script', async () => {
    for (const path of ['/console/', '/console/index.html']) {
      const res = await fetch(`${origin}${path}`);
      assert.equal(res.status, 200, path);
      assert.match(res.headers.get('content-type') ?? '', /^text\/html/, path);
      assert.equal(res.headers.get('content-security-policy'), CSP, path);
      assert.equal(res.headers.get('x-content-type-options'), 'nosniff', path);
      assert.equal(res.headers.get('referrer-policy'), 'no-referrer', path);
      const html = await res.text();
      assert.doesNotMatch(html, /<script(?![^>]*\bsrc=)[^>]*>/i, `${path}: an inline script (the CSP would refuse it)`);
      assert.doesNotMatch(html, /\b(?:src|href)=["']?(?:https?:)?\/\//i, `${path}: a reference to another origin`);
    }
    // /console (no slash) leads to the page.
    const bare = await fetch(`${origin}/console`, { redirect: 'manual' });
    assert.ok([301, 302, 308].includes(bare.status), `/console answers ${bare.status}`);
    assert.equal(new URL(bare.headers.get('location') ?? '', origin).href, `${origin}/console/`);
    // Even a missing file answers with the CSP.
    const missing = await fetch(`${origin}/console/no-such-file.js`);
    assert.equal(missing.status, 404);
    assert.equal(missing.headers.get('content-security-policy'), CSP);
  });

  const admin = await browser.page('acme-admin');

  await step('sign-in', [], 'sign in through the link: the token leaves the address bar at once and stays in sessionStorage; the webhook view', async () => {
    await onPage(admin, async () => {
      const response = await admin.goto(acmeAdmin.link);
      assert.ok(response, 'the link loads a page');
      assert.equal(response.status(), 200);
      assert.equal(response.headers()['content-security-policy'], CSP);
      await heading(admin, 'Webhook');
      assert.doesNotMatch(admin.url(), /token=/, 'the address bar no longer holds the token');
      assert.ok(!admin.url().includes(acmeAdmin.token));
      assert.equal(new URL(admin.url()).hash, '#/webhook');
      assert.ok((await sessionStorageValues(admin)).some((v) => v.includes(acmeAdmin.token)), 'sessionStorage holds the token');
      // Nor may the token wait one step back in the history.
      await admin.goBack().catch(() => null);
      assert.ok(!admin.url().includes('token='), `one step back is ${admin.url()}`);
      await admin.goto(`${origin}/console/#/webhook`);
      await heading(admin, 'Webhook');

      // The header and the webhook view.
      for (const name of ['Webhook', 'Deliveries']) await admin.getByRole('link', { name, exact: true }).first().waitFor({ state: 'visible' });
      await admin.getByRole('button', { name: 'Sign out' }).waitFor({ state: 'visible' });
      for (const term of ['URL', 'Headers', 'Rate limit', 'Status', 'Last success', 'Last failure', 'Secret rotation']) {
        await definition(admin, term).waitFor({ state: 'visible' });
      }
      // The webhook's own headers, the credential's value never shown; its rate limit.
      const headers = await definition(admin, 'Headers').innerText();
      assert.match(headers, /X-Environment: staging/);
      assert.match(headers, /Authorization: set; value hidden/);
      assert.ok(!headers.includes(ACME_CREDENTIAL), 'the credential header\'s value is on the page');
      assert.ok(!(await admin.content()).includes(ACME_CREDENTIAL), 'the credential header\'s value is in the page\'s markup');
      assert.equal((await definition(admin, 'Rate limit').innerText()).trim(), 'at most 1000 deliveries per second');
      await eventually('the webhook\'s URL and failing status', async () => {
        assert.match(await definition(admin, 'URL').innerText(), /https:\/\/127\.0\.0\.1:\d+\/acme/);
        assert.match(await definition(admin, 'Status').innerText(), /failing/i);
      });
      for (const name of ['Send test event', 'Rotate secret']) assert.equal(await admin.getByRole('button', { name }).isEnabled(), true, `${name} is enabled for an admin`);
      assert.equal(await admin.getByText('Viewers cannot change anything').count(), 0);
    });
  });

  await step('failed', ['sign-in'], 'the deliveries view lists the failed delivery with the receiver\'s status; its view shows the attempts and the receiver\'s answer', async () => {
    await onPage(admin, async () => {
      await openFromHeader(admin, 'Deliveries');
      await admin.getByRole('combobox', { name: 'Status', exact: true }).waitFor({ state: 'visible' });
      for (const label of ['Since', 'Until']) await admin.getByLabel(label, { exact: true }).waitFor({ state: 'visible' });
      await admin.getByRole('button', { name: 'Apply' }).waitFor({ state: 'visible' });
      // Paging: one page here, so both ways are shown and neither leads anywhere.
      for (const name of ['Newest', 'Older']) assert.equal(await admin.getByRole('button', { name, exact: true }).isDisabled(), true, `${name} with a single page`);
      const table = deliveriesTable(admin);
      const row = await eventually(`a row for ${ACME_EVENT}`, async () => {
        const text = await readTable(table);
        assert.deepEqual(text.headers, ['Event', 'Request', 'Status', 'Attempts', 'Last status code', 'Next attempt', 'Created']);
        const r = rowWith(text, ACME_EVENT);
        assert.ok(r, `no row for ${ACME_EVENT}: ${JSON.stringify(text)}`);
        return r;
      });
      assert.equal(row.Event, ACME_EVENT);
      assert.equal(row.Request, ACME_REQUEST);
      assert.match(row.Status!, /\bfailed for good\b/i);
      assert.equal(row.Attempts, '3');
      assert.equal(row['Last status code'], '500');
      const link = table.getByRole('link', { name: ACME_EVENT });
      assert.equal(await link.getAttribute('href'), `#/deliveries/${failed.id}`);
      await screenshot(admin, 'deliveries');

      await link.click();
      await heading(admin, `Delivery ${failed.id}`);
      assert.equal(new URL(admin.url()).hash, `#/deliveries/${failed.id}`);
      await eventually('the delivery\'s fields', async () => {
        assert.match(await definition(admin, 'Event').innerText(), new RegExp(ACME_EVENT));
        assert.match(await definition(admin, 'Request').innerText(), new RegExp(ACME_REQUEST));
        assert.match(await admin.locator('dd[data-field="status"]').innerText(), /\bdead\b/i);
        assert.match(await definition(admin, 'Attempts').innerText(), /\b3\b/);
        assert.equal((await definition(admin, 'Trace').innerText()).trim(), ACME_TRACE_ID);
      });
      const attempts = attemptsTable(admin);
      const text = await eventually('three attempts, each a 500 with the receiver\'s answer', async () => {
        const read = await readTable(attempts);
        assert.deepEqual(read.headers, ['Attempt', 'Started', 'Duration', 'Status code', 'Error', 'Response']);
        assert.equal(read.rows.length, 3, JSON.stringify(read));
        return read;
      });
      for (const cells of text.rows) {
        const r = Object.fromEntries(text.headers.map((h, i) => [h, cells[i] ?? '']));
        assert.equal(r['Status code'], '500');
        assert.ok(r.Response!.includes('receiver down for maintenance'), `the response cell shows the receiver's answer: ${JSON.stringify(r)}`);
      }
      // The answer is shown as text in a pre, not interpreted.
      const pre = attempts.locator('pre').first();
      assert.equal(await pre.innerText(), RECEIVER_DOWN);
      await admin.getByRole('heading', { name: 'Verify the signature' }).waitFor({ state: 'visible' });
      assert.equal(await admin.getByRole('button', { name: 'Replay' }).isEnabled(), true);
      await screenshot(admin, 'delivery-failed');
    });
  });

  await step('replay', ['failed'], 'replay: confirmed, the status names the new delivery; its view turns delivered without a reload once the receiver answers 204', async () => {
    await onPage(admin, async () => {
      receiver.respond(() => ({ status: 204 }));
      // A reload would lose this mark: it proves the status below changed in the same document.
      await admin.evaluate(() => void ((globalThis as { __noReload?: boolean }).__noReload = true));

      await admin.getByRole('button', { name: 'Replay' }).click();
      const dialog = admin.getByRole('dialog', { name: 'Send this event again?' });
      await dialog.waitFor({ state: 'visible' });
      // Cancel first: nothing is queued.
      await dialog.getByRole('button', { name: 'Cancel' }).click();
      await dialog.waitFor({ state: 'hidden' });
      assert.equal((await deliveriesOf(rig, apiToken)).length, 1, 'Cancel queued nothing');

      await admin.getByRole('button', { name: 'Replay' }).click();
      await dialog.waitFor({ state: 'visible' });
      await dialog.getByRole('button', { name: 'Replay now' }).click();
      const status = admin.getByRole('status').filter({ hasText: /Replayed as delivery \d+/ });
      await status.waitFor({ state: 'visible' });
      replayedId = Number(/Replayed as delivery (\d+)/.exec(await status.innerText())![1]);
      assert.ok(replayedId > failed.id, `the new delivery ${replayedId} comes after ${failed.id}`);
      const link = status.getByRole('link');
      assert.equal(await link.getAttribute('href'), `#/deliveries/${replayedId}`);
      await link.click();
      await heading(admin, `Delivery ${replayedId}`);

      // The view polls: within 10 s, without page.reload(), the new status shows.
      const field = admin.locator('dd[data-field="status"]');
      await eventually('the replayed delivery to show delivered', async () => assert.match(await field.innerText(), /\bdelivered\b/i), 10_000);
      assert.equal(await admin.evaluate(() => (globalThis as { __noReload?: boolean }).__noReload === true), true, 'the page was not reloaded');

      // The receiver got the same event again, signed with the same webhook-id, and answered 204.
      const again = receiver.requestsFor(ACME_EVENT);
      assert.equal(again.length, 4);
      assert.equal(again[3]!.headers['webhook-id'], ACME_EVENT);
      assert.equal(again[3]!.answeredStatus, 204);
      replaySecret = (await api<{ secret: string }>(rig, apiToken, '/webhook/get_secret')).body.secret;
      await eventually('the attempt to show 204', async () => {
        const read = await readTable(attemptsTable(admin));
        assert.equal(read.rows.length, 1, JSON.stringify(read));
        assert.equal(rowWith(read, '204')?.['Status code'], '204', JSON.stringify(read));
      });
      const list = await deliveriesOf(rig, apiToken);
      assert.deepEqual(list.map((d) => [d.id, d.status]), [[replayedId, 'delivered'], [failed.id, 'dead']]);
      await screenshot(admin, 'delivery-replayed');
    });
  });

  await step('rotate', ['sign-in'], 'rotate the secret: confirmed in a dialog, the new secret is shown once and is the one the API now holds', async () => {
    await onPage(admin, async () => {
      await openFromHeader(admin, 'Webhook');
      await admin.getByRole('button', { name: 'Rotate secret' }).click();
      const dialog = admin.getByRole('dialog').filter({ has: admin.getByRole('button', { name: 'Rotate', exact: true }) });
      await dialog.waitFor({ state: 'visible' });
      await dialog.getByRole('button', { name: 'Cancel' }).waitFor({ state: 'visible' });
      const before = (await api<{ secret: string }>(rig, apiToken, '/webhook/get_secret')).body.secret;
      await dialog.getByRole('button', { name: 'Rotate', exact: true }).click();
      const secret = admin.getByLabel('New secret');
      await secret.waitFor({ state: 'visible' });
      const shown = (await secret.innerText()).trim();
      assert.match(shown, /^whsec_[A-Za-z0-9+/=]+$/);
      assert.notEqual(shown, before);
      assert.equal((await api<{ secret: string }>(rig, apiToken, '/webhook/get_secret')).body.secret, shown);
      await eventually('the rotation state', async () => assert.doesNotMatch(await definition(admin, 'Secret rotation').innerText(), /^\s*none\s*$/i));
      // Shown once: another visit of the view does not show it again.
      await openFromHeader(admin, 'Deliveries');
      await openFromHeader(admin, 'Webhook');
      await definition(admin, 'Secret rotation').waitFor({ state: 'visible' });
      assert.equal(await admin.getByLabel('New secret').count(), 0, 'the new secret is shown once');
    });
  });

  await step('viewer', ['replay'], 'a viewer of acme sees the delivery and can change nothing; the API refuses the replay anyway', async () => {
    const viewer = await browser.page('acme-viewer');
    await onPage(viewer, async () => {
      await viewer.goto(acmeViewer.link);
      await heading(viewer, 'Webhook');
      await viewer.getByText('Viewers cannot change anything').first().waitFor({ state: 'visible' });
      for (const name of ['Send test event', 'Rotate secret']) {
        const button = viewer.getByRole('button', { name });
        // Present and disabled (not merely hidden): the viewer sees what an admin could do.
        assert.equal(await button.count(), 1, `${name} is shown`);
        assert.equal(await button.isDisabled(), true, `${name} is disabled for a viewer`);
      }
      await openFromHeader(viewer, 'Deliveries');
      await eventually('the viewer to see both deliveries', async () => {
        const read = await readTable(deliveriesTable(viewer));
        assert.equal(read.rows.filter((r) => r.some((c) => c.includes(ACME_EVENT))).length, 2, JSON.stringify(read));
      });
      await viewer.goto(`${origin}/console/#/deliveries/${failed.id}`);
      await heading(viewer, `Delivery ${failed.id}`);
      await eventually('the dead status', async () => assert.match(await viewer.locator('dd[data-field="status"]').innerText(), /\bdead\b/i));
      const replay = viewer.getByRole('button', { name: 'Replay' });
      assert.equal(await replay.count(), 1, 'Replay is shown');
      assert.equal(await replay.isDisabled(), true, 'Replay is disabled for a viewer');
      // What the button would have asked, from the page: refused.
      const refused = await viewer.evaluate(
        async ([url, token]) => (await fetch(url!, { method: 'POST', headers: { authorization: `Bearer ${token}` } })).status,
        [`${origin}/webhook/deliveries/${failed.id}/replay`, acmeViewer.token],
      );
      assert.equal(refused, 403);
      assert.equal((await deliveriesOf(rig, apiToken)).length, 2, 'nothing was queued');
    });
    await viewer.context().close();
  });

  await step('chart', ['replay'], 'the webhook view charts the attempts: three failed and the replay that succeeded, over the last hour and the last day, as a sentence and a table too', async () => {
    await onPage(admin, async () => {
      await openFromHeader(admin, 'Webhook');
      const chart = admin.getByRole('region', { name: 'Delivery attempts' });
      await chart.waitFor({ state: 'visible' });
      for (const [button, window] of [['Last hour', '1h'], ['Last day', '24h']] as const) {
        await chart.getByRole('button', { name: button }).click();
        assert.equal(await chart.getByRole('button', { name: button }).getAttribute('aria-pressed'), 'true');
        const period = window === '1h' ? 'the last hour' : 'the last day';
        const caption = chart.locator('figcaption');
        await eventually(`the ${window} chart's sentence`, async () => assert.match(await caption.innerText(), new RegExp(`^In ${period}: 1 attempt succeeded, 3 failed\\.`)));
        // The API says the same.
        const stats = (await api<{ succeeded: number; failed: number }>(rig, apiToken, `/webhook/stats?window=${window}`)).body;
        assert.deepEqual([stats.succeeded, stats.failed], [1, 3]);
        // The picture: an image with a name, the failed parts and the succeeded one drawn as bars.
        const image = chart.getByRole('img');
        assert.match((await image.getAttribute('aria-labelledby')) ?? '', /\S+ \S+/);
        assert.ok((await chart.locator('svg rect.bar-failed').count()) >= 1, 'a failed bar');
        assert.equal(await chart.locator('svg rect.bar-ok').count(), 1, 'one bucket with a success');
        // The figures: every attempt in one row or another.
        await chart.getByText('The figures').click();
        const figures = await readTable(chart.getByRole('table'));
        assert.deepEqual(figures.headers, ['Time', 'Succeeded', 'Failed']);
        const sums = figures.rows.reduce((acc, r) => [acc[0]! + Number(r[1]), acc[1]! + Number(r[2])], [0, 0]);
        assert.deepEqual(sums, [1, 3], JSON.stringify(figures));
        await chart.getByText('The figures').click();
      }
      await chart.getByRole('button', { name: 'Last hour' }).click();
      await eventually('the hour again', async () => assert.match(await chart.locator('figcaption').innerText(), /^In the last hour/));
      await screenshot(admin, 'webhook');
    });
  });

  await step('rotation-api', ['sign-in'], 'a rotation made through the API, not the console, shows on the webhook view of a fresh tab, with its end as the API says it', async () => {
    const rotated = await api<{ previous_secret_expires_at: string }>(rig, apiToken, '/webhook/rotate_secret', { method: 'POST' });
    assert.equal(rotated.status, 200);
    const until = rotated.body.previous_secret_expires_at;
    assert.equal((await api<{ previous_secret_expires_at: string }>(rig, apiToken, '/webhook/get_webhook')).body.previous_secret_expires_at, until);
    // The viewer, in a tab of its own that never rotated anything.
    const viewer = await browser.page('acme-viewer-rotation');
    await onPage(viewer, async () => {
      await viewer.goto(acmeViewer.link);
      await heading(viewer, 'Webhook');
      const state = definition(viewer, 'Secret rotation');
      await eventually('the rotation state', async () => assert.match(await state.innerText(), /^rotated; the previous secret keeps signing until /));
      assert.equal(await state.locator('time').getAttribute('datetime'), until);
    });
    await viewer.context().close();
  });

  await step('request-filter', ['replay'], 'the delivery log filtered by anticipation request id: only that request\'s deliveries, then another request\'s, then none', async () => {
    // Another request of acme, delivered now that the receiver answers 204.
    appendFileSync(rig.feedPath, jsonLine({ event_id: ACME_OTHER_EVENT, organization_id: 'acme', anticipation_request_id: ACME_OTHER_REQUEST, status: 'approved', previous_status: 'submitted' }));
    await eventually('the other request\'s delivery', async () => {
      const d = (await deliveriesOf(rig, apiToken)).find((x) => x.event_id === ACME_OTHER_EVENT);
      assert.equal(d?.status, 'delivered');
    }, 20_000, 250);
    await onPage(admin, async () => {
      await openFromHeader(admin, 'Deliveries');
      const table = deliveriesTable(admin);
      await eventually('both requests listed', async () => {
        const read = await readTable(table);
        assert.ok(rowWith(read, ACME_OTHER_EVENT) && rowWith(read, ACME_EVENT), JSON.stringify(read));
      });
      const field = admin.getByLabel('Request', { exact: true });
      const filterBy = async (requestId: string) => {
        await field.fill(requestId);
        const answered = admin.waitForResponse((r) => new URL(r.url()).pathname === '/webhook/deliveries' && new URL(r.url()).searchParams.get('request_id') === requestId);
        await admin.getByRole('button', { name: 'Apply' }).click();
        assert.equal((await answered).status(), 200);
      };
      await filterBy(ACME_REQUEST);
      await eventually(`only ${ACME_REQUEST}'s deliveries`, async () => {
        const read = await readTable(table);
        assert.deepEqual(read.rows.map((r) => [r[0], r[1]]), [[ACME_EVENT, ACME_REQUEST], [ACME_EVENT, ACME_REQUEST]], JSON.stringify(read));
      });
      assert.match(await table.locator('caption').innerText(), new RegExp(`request ${ACME_REQUEST}`));
      await screenshot(admin, 'deliveries-request');
      await filterBy(ACME_OTHER_REQUEST);
      await eventually(`only ${ACME_OTHER_REQUEST}'s delivery`, async () => {
        const read = await readTable(table);
        assert.deepEqual(read.rows.map((r) => [r[0], r[1]]), [[ACME_OTHER_EVENT, ACME_OTHER_REQUEST]], JSON.stringify(read));
      });
      await filterBy('ar_nobody');
      await eventually('no delivery', async () => assert.deepEqual((await readTable(table)).rows, [['No deliveries match.']]));
      // Back to the whole log for the steps after this one.
      await field.fill('');
      await admin.getByRole('button', { name: 'Apply' }).click();
      await eventually('the whole log', async () => assert.ok(rowWith(await readTable(table), ACME_OTHER_EVENT)));
    });
  });

  await step('request-sent', ['replay'], 'the delivery view shows the request as its attempt sent it: exactly the headers the receiver got (its timestamp and signature included), the exact body, and a signature that verifies against it; a viewer gets it without the signature', async () => {
    await onPage(admin, async () => {
      await admin.goto(`${origin}/console/#/deliveries/${replayedId}`);
      await heading(admin, `Delivery ${replayedId}`);
      const section = admin.getByRole('region', { name: 'The request as sent' });
      await section.waitFor({ state: 'visible' });
      const headers = section.getByRole('table');
      const read = await eventually('the request headers', async () => {
        const r = await readTable(headers);
        assert.ok(r.rows.length >= 7, JSON.stringify(r));
        return r;
      });
      assert.deepEqual(read.headers, ['Header', 'Value']);
      const shown = Object.fromEntries(read.rows.map(([name, value]) => [name!, value!]));
      // What the receiver got for this delivery (its fourth request for the event): every header, the same values, the timestamp and the signature the attempt sent included.
      const sent = receiver.requestsFor(ACME_EVENT)[3]!;
      assert.equal(receiver.requestsFor(ACME_EVENT).length, 4);
      // Every header as the receiver got it (names compared as HTTP does, without case), but the
      // credential among the webhook's own, which the delivery log says is set and never shows.
      const shownByName = Object.fromEntries(Object.entries(shown).map(([name, value]) => [name.toLowerCase(), value]));
      assert.equal(sent.headers.authorization, ACME_CREDENTIAL);
      assert.equal(sent.headers['x-environment'], 'staging');
      assert.equal(shownByName.authorization, HIDDEN_HEADER_VALUE);
      assert.deepEqual(shownByName, { ...sent.headers, authorization: HIDDEN_HEADER_VALUE });
      assert.ok(!(await admin.content()).includes(ACME_CREDENTIAL), 'the credential header\'s value is in the page\'s markup');
      const body = await section.locator('pre.request-body').innerText();
      assert.equal(body, sent.body.toString('utf8'), 'the exact body');
      assert.match(await section.locator('.request-line').innerText(), new RegExp(`^POST ${receiver.url.replace(/\/hook$/, '/acme').replace(/[.]/g, '\\.')}$`));
      // As the attempt signed it: standardwebhooks verifies it with the secret of the time (rotated since, see the rotate step).
      assert.deepEqual(new Webhook(replaySecret).verify(body, shown), JSON.parse(body));
      const now = (await api<{ secret: string }>(rig, apiToken, '/webhook/get_secret')).body.secret;
      assert.notEqual(now, replaySecret);
      assert.throws(() => new Webhook(now).verify(body, shown), /No matching signature/, 'signed when it was sent, not now');
      const note = await section.locator('p').first().innerText();
      assert.match(note, /^As attempt 1 sent it at .+: every header the receiver got, with the webhook-timestamp \(.+\) and the signature that attempt sent\./);
      assert.match(note, /The signature verifies against this body with the secret that signed it then\./);
      assert.doesNotMatch(note, /Not sent yet/);
      await screenshot(admin, 'delivery-request');
    });
    const viewer = await browser.page('acme-viewer-request');
    await onPage(viewer, async () => {
      await viewer.goto(acmeViewer.link);
      await heading(viewer, 'Webhook');
      await viewer.goto(`${origin}/console/#/deliveries/${replayedId}`);
      const section = viewer.getByRole('region', { name: 'The request as sent' });
      await section.waitFor({ state: 'visible' });
      await eventually('the viewer\'s request', async () => assert.match(await section.innerText(), /signature is shown to admins only/));
      const names = (await readTable(section.getByRole('table'))).rows.map((r) => r[0]);
      assert.ok(names.includes('webhook-id') && !names.includes('webhook-signature'), JSON.stringify(names));
    });
    await viewer.context().close();
  });

  await step('globex', [], 'globex signs in with a pasted token: none of acme\'s deliveries, and acme\'s delivery by its id is an error; sign out', async () => {
    const globex = await browser.page('globex-admin');
    await onPage(globex, async () => {
      await globex.goto(`${origin}/console/`);
      await assertSignInView(globex);
      await screenshot(globex, 'sign-in');
      await globex.getByLabel('Access token').fill(globexAdmin.token);
      await globex.getByRole('button', { name: 'Sign in', exact: true }).click();
      await heading(globex, 'Webhook');
      assert.ok(!globex.url().includes(globexAdmin.token));

      const listed = globex.waitForResponse((r) => new URL(r.url()).pathname === '/webhook/deliveries' && r.request().method() === 'GET');
      await openFromHeader(globex, 'Deliveries');
      const response = await listed;
      assert.equal(response.status(), 200);
      assert.deepEqual(((await response.json()) as { data: unknown[] }).data, []);
      await deliveriesTable(globex).waitFor({ state: 'visible' });
      const read = await readTable(deliveriesTable(globex));
      assert.equal(read.rows.filter((r) => r.some((c) => c.startsWith('evt_'))).length, 0, `globex's table is empty: ${JSON.stringify(read)}`);
      assert.equal(await globex.locator('a[href^="#/deliveries/"]').count(), 0);
      for (const secret of [ACME_EVENT, ACME_REQUEST]) assert.ok(!(await globex.locator('body').innerText()).includes(secret), `${secret} appears in globex's page`);

      const asked = globex.waitForResponse((r) => new URL(r.url()).pathname === `/webhook/deliveries/${failed.id}`);
      await globex.goto(`${origin}/console/#/deliveries/${failed.id}`);
      assert.equal((await asked).status(), 404);
      await globex.getByRole('alert').first().waitFor({ state: 'visible' });
      const body = await globex.locator('body').innerText();
      for (const secret of [ACME_EVENT, ACME_REQUEST, 'receiver down']) assert.ok(!body.includes(secret), `${secret} appears in globex's page`);

      // globex's own delivery does show, in the list on screen, without a reload (it refreshes itself).
      await openFromHeader(globex, 'Deliveries');
      await globex.evaluate(() => void ((globalThis as { __noReload?: boolean }).__noReload = true));
      appendFileSync(rig.feedPath, jsonLine({ event_id: GLOBEX_EVENT, organization_id: 'globex', anticipation_request_id: 'ar_globex_1', status: 'approved', previous_status: 'submitted' }));
      await eventually('globex\'s delivery to appear as delivered in the list on screen', async () => {
        const row = rowWith(await readTable(deliveriesTable(globex)), GLOBEX_EVENT);
        assert.ok(row, 'no row yet');
        assert.match(row.Status!, /\bdelivered\b/i);
      });
      assert.equal(await globex.evaluate(() => (globalThis as { __noReload?: boolean }).__noReload === true), true, 'the page was not reloaded');
      const all = await readTable(deliveriesTable(globex));
      assert.equal(all.rows.length, 1, `only globex's delivery: ${JSON.stringify(all)}`);
      assert.ok(!(await globex.locator('body').innerText()).includes(ACME_EVENT));

      await globex.getByRole('button', { name: 'Sign out' }).click();
      await assertSignInView(globex);
      assert.ok(!(await sessionStorageValues(globex)).some((v) => v.includes(globexAdmin.token)), 'signing out forgets the token');
    });
    await globex.context().close();
  });

  await step('axe', [], 'axe-core finds nothing serious or critical on the sign-in, webhook, deliveries and delivery views', async () => {
    // The console's CSP (script-src 'self') refuses the injected axe script, as it should: axe
    // runs in a context of its own that bypasses the CSP. Its incidents are still watched.
    const page = await browser.page('axe', { bypassCSP: true });
    await onPage(page, async () => {
      const found: string[] = [];
      const check = async (view: string) => {
        for (const v of await seriousAxeViolations(page)) found.push(`${view}: ${v.impact} ${v.id} (${v.help}) at ${v.targets.join(', ')}`);
      };
      await page.goto(`${origin}/console/`);
      await assertSignInView(page);
      await check('sign-in');
      await page.goto(acmeAdmin.link);
      await heading(page, 'Webhook');
      await definition(page, 'Status').waitFor({ state: 'visible' });
      // The chart drawn, its table of figures open.
      const chart = page.getByRole('region', { name: 'Delivery attempts' });
      await eventually('the chart', async () => assert.match(await chart.locator('figcaption').innerText(), /^In the last hour/));
      await chart.getByText('The figures').click();
      await chart.getByRole('table').waitFor({ state: 'visible' });
      await check('webhook');
      await openFromHeader(page, 'Deliveries');
      await eventually('the rows', async () => assert.ok(rowWith(await readTable(deliveriesTable(page)), ACME_EVENT)));
      await check('deliveries');
      await page.goto(`${origin}/console/#/deliveries/${failed.id}`);
      await heading(page, `Delivery ${failed.id}`);
      await eventually('the attempts', async () => assert.equal((await readTable(attemptsTable(page))).rows.length, 3));
      await page.getByRole('region', { name: 'The request as sent' }).waitFor({ state: 'visible' });
      await check('delivery');
      assert.deepEqual(found, []);
    });
    await page.context().close();
  });

  await step('narrow', [], 'at 390x844 the chart fits the width, the deliveries table and the request as sent are reachable: nothing is cut off, tables scroll inside their wrapper', async () => {
    const page = await browser.page('narrow', { viewport: { width: 390, height: 844 }, isMobile: true, hasTouch: true, deviceScaleFactor: 2 });
    const pageWidth = () => page.evaluate(() => (globalThis as unknown as { document: { documentElement: { scrollWidth: number } } }).document.documentElement.scrollWidth);
    await onPage(page, async () => {
      await page.goto(acmeAdmin.link);
      await heading(page, 'Webhook');
      // The chart is drawn for the width it has: its picture within the screen, its sentence there.
      const chart = page.getByRole('region', { name: 'Delivery attempts' });
      await eventually('the chart', async () => assert.match(await chart.locator('figcaption').innerText(), /^In the last hour/));
      const picture = await chart.getByRole('img').boundingBox();
      assert.ok(picture && picture.x >= 0 && picture.x + picture.width <= 391, `the chart is within the screen: ${JSON.stringify(picture)}`);
      assert.ok((await pageWidth()) <= 391, `the webhook page is ${await pageWidth()} px wide at 390`);
      await screenshot(page, 'webhook-narrow');
      await openFromHeader(page, 'Deliveries');
      const table = deliveriesTable(page);
      await eventually('the rows', async () => assert.ok(rowWith(await readTable(table), ACME_EVENT)));
      const layout = await table.evaluate((el) => {
        type Box = { scrollWidth: number; clientWidth: number; parentElement: Box | null; tagName: string };
        const w = globalThis as unknown as { document: { documentElement: { scrollWidth: number } }; getComputedStyle(e: unknown): { overflowX: string } };
        let wrapper = (el as unknown as Box).parentElement;
        while (wrapper !== null && !['auto', 'scroll'].includes(w.getComputedStyle(wrapper).overflowX)) wrapper = wrapper.parentElement;
        return {
          pageWidth: w.document.documentElement.scrollWidth,
          wrapper: wrapper === null ? null : { tag: wrapper.tagName, scrollWidth: wrapper.scrollWidth, clientWidth: wrapper.clientWidth },
          tableWidth: (el as unknown as Box).scrollWidth,
        };
      });
      assert.ok(layout.pageWidth <= 391, `the page is ${layout.pageWidth} px wide at 390: something is cut off (${JSON.stringify(layout)})`);
      assert.ok(layout.wrapper, `the table has no scrolling wrapper (overflow-x auto or scroll): ${JSON.stringify(layout)}`);
      assert.ok(layout.wrapper.clientWidth <= 390, JSON.stringify(layout));
      await screenshot(page, 'deliveries-narrow');
      // The last column can be brought into view by scrolling the wrapper.
      const last = table.getByRole('columnheader', { name: 'Created' });
      await last.scrollIntoViewIfNeeded();
      const box = await last.boundingBox();
      assert.ok(box && box.x >= 0 && box.x + box.width <= 391, `"Created" is reachable: ${JSON.stringify(box)}`);
    });
    await page.context().close();
  });

  await step('narrow-request', ['replay'], 'at 390x844 the request as sent fits: its headers and body wrap within the screen', async () => {
    const page = await browser.page('narrow-request', { viewport: { width: 390, height: 844 }, isMobile: true, hasTouch: true, deviceScaleFactor: 2 });
    await onPage(page, async () => {
      await page.goto(acmeAdmin.link);
      await heading(page, 'Webhook');
      await page.goto(`${origin}/console/#/deliveries/${replayedId}`);
      const section = page.getByRole('region', { name: 'The request as sent' });
      await section.locator('pre.request-body').waitFor({ state: 'visible' });
      const width = await page.evaluate(() => (globalThis as unknown as { document: { documentElement: { scrollWidth: number } } }).document.documentElement.scrollWidth);
      assert.ok(width <= 391, `the delivery page is ${width} px wide at 390`);
      for (const part of [section.getByRole('table'), section.locator('pre.request-body')]) {
        const box = await part.boundingBox();
        assert.ok(box && box.x >= 0 && box.x + box.width <= 391, `within the screen: ${JSON.stringify(box)}`);
      }
    });
    await page.context().close();
  });

  await step('expired', [], 'an expired token: the page says it expired, asks for a new link, and shows the sign-in view', async () => {
    // `expired` was issued with --ttl 1s before the tests above; only if they ran in under a second would this wait.
    const expiresAt = 1000 * (JSON.parse(Buffer.from(expired.token.split('.')[1]!, 'base64url').toString('utf8')) as { exp: number }).exp;
    if (Date.now() <= expiresAt + 1000) await sleep(expiresAt + 1000 - Date.now() + 50);
    const page = await browser.page('expired');
    await onPage(page, async () => {
      await page.goto(expired.link);
      const alert = page.getByRole('alert').filter({ hasText: /expired/i });
      await alert.waitFor({ state: 'visible' });
      assert.match(await alert.innerText(), /ask for a new link/i);
      await assertSignInView(page);
      assert.ok(!page.url().includes('token='), 'the expired token left the address bar too');
      await screenshot(page, 'expired');
    });
    await page.context().close();
  });

  await step('invisible', [], 'ids holding a bidirectional override or a zero-width character show each of them as a mark naming it, not raw: "evt_\\u202Efdp.exe" does not read as "evt_exe.pdf"', async () => {
    // The request id comes from the feed; the event id as a database may hold one stored before
    // the feed refused such ids (the line's own id, then renamed in the database).
    appendFileSync(rig.feedPath, jsonLine({ event_id: 'evt_marked_plain', organization_id: 'globex', anticipation_request_id: GLOBEX_MARKED_REQUEST, status: 'approved' }));
    const db = new Database(join(state, 'hookrelay.db'));
    try {
      db.pragma('busy_timeout = 5000');
      await eventually('the marked event to be stored', () => assert.ok(db.prepare('SELECT 1 FROM events WHERE id = ?').get('evt_marked_plain')), 20_000, 100);
      db.prepare('UPDATE events SET id = ? WHERE id = ?').run(GLOBEX_MARKED_EVENT, 'evt_marked_plain');
    } finally {
      db.close();
    }
    const page = await browser.page('globex-marked');
    await onPage(page, async () => {
      await page.goto(globexAdmin.link);
      await heading(page, 'Webhook');
      await openFromHeader(page, 'Deliveries');
      const row = await eventually('the row of the marked event', async () => {
        const r = rowWith(await readTable(deliveriesTable(page)), 'evt_⟨U+202E⟩fdp.exe');
        assert.ok(r, 'no row yet');
        return r;
      });
      assert.equal(row.Event, 'evt_⟨U+202E⟩fdp.exe');
      assert.equal(row.Request, 'ar_⟨U+202E⟩gnp⟨U+200B⟩.exe');
      const mark = deliveriesTable(page).locator('.invisible-char').first();
      assert.match((await mark.getAttribute('title')) ?? '', /^U\+202E: /);
      await deliveriesTable(page).getByRole('link', { name: 'evt_⟨U+202E⟩fdp.exe' }).click();
      await heading(page, /^Delivery \d+$/);
      await eventually('the marked ids in the delivery view', async () => {
        assert.equal((await definition(page, 'Event').innerText()).trim(), 'evt_⟨U+202E⟩fdp.exe');
        assert.equal((await definition(page, 'Request').innerText()).trim(), 'ar_⟨U+202E⟩gnp⟨U+200B⟩.exe');
        assert.equal(await page.locator('section.verify p code').innerText(), 'evt_⟨U+202E⟩fdp.exe');
      });
      // Nowhere an id is shown does a raw U+202E or U+200B remain (the bodies, in their pre, are shown exactly).
      for (const text of [await page.locator('dl.facts').innerText(), await page.locator('section.verify').innerText()]) {
        assert.ok(!/[\u202e\u200b]/.test(text), JSON.stringify(text));
      }
    });
    await page.context().close();
  });

  await step('final', [], 'nothing went wrong in any page: no error, no CSP violation, only the daemon\'s origin, no token in a URL or in the daemon\'s log', async () => {
    await admin.context().close();
    // Chromium prints a failed fetch's status as a console error; these were the test's doing.
    const expectedStatus: Record<string, RegExp> = {
      'acme-viewer': /status of 403 \(Forbidden\)/,
      'globex-admin': /status of 404 \(Not Found\)/,
      expired: /status of 401 \(Unauthorized\)/,
    };
    const unexpected = browser.incidents.filter(
      (i) => !(i.kind === 'console' && /^Failed to load resource: the server responded with a status of/.test(i.text) && expectedStatus[i.context]?.test(i.text)),
    );
    assert.deepEqual(unexpected, [], 'page errors, console errors, CSP violations or failed requests');

    assert.ok(browser.requests.length > 0);
    for (const req of browser.requests) {
      const url = new URL(req.url);
      // The fragment is never sent: a link's #token=... is the browser's own (see the address bar checks above).
      const sent = url.href.slice(0, url.href.length - url.hash.length);
      assert.ok(url.origin === origin || url.protocol === 'data:', `${req.context}: ${req.method} ${req.url} goes to another origin`);
      for (const token of tokens) assert.ok(!sent.includes(token), `${req.context}: ${req.method} ${sent} carries a token`);
      assert.ok(!/token/i.test(url.search), `${req.context}: ${req.method} ${sent} has a token parameter`);
    }
    // Every /console/ response carries the CSP and its companions (the page, its scripts and styles).
    const consoleResponses = browser.responses.filter((r) => new URL(r.url).pathname.startsWith('/console/'));
    assert.ok(consoleResponses.length >= 2, `console responses: ${JSON.stringify(consoleResponses.map((r) => r.url))}`);
    for (const r of consoleResponses) {
      assert.equal(r.headers['content-security-policy'], CSP, r.url);
      assert.equal(r.headers['x-content-type-options'], 'nosniff', r.url);
      assert.equal(r.headers['referrer-policy'], 'no-referrer', r.url);
    }
    const log = daemon.logRecords().map((r) => JSON.stringify(r)).join('\n') + daemon.stderr();
    for (const token of tokens) {
      assert.ok(!log.includes(token), 'a token is in the daemon\'s log');
      // Nor its signature alone (a log could keep a part).
      assert.ok(!log.includes(token.split('.')[2]!), 'a token\'s signature is in the daemon\'s log');
    }
    assert.ok(log.includes('/console/'), 'the daemon logged the console\'s requests (so the check above looked at them)');
  });

  t.diagnostic(`console e2e: ${Math.round(performance.now() - started)} ms`);
});

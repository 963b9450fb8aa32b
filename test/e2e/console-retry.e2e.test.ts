/**
 * The console's Retry now, in Debian's chromium (playwright-core), against an in-process daemon
 * serving the built console (dist/console: `npm run build`, or `node scripts/build-console.mjs`)
 * and a real HTTPS receiver on 127.0.0.1 that fails the first attempt, then answers 204. The
 * delivery page of a delivery waiting an hour says "retrying" with its next attempt, in local
 * time with the zone (UTC on hover), offers Retry now and not Replay (which the API would
 * refuse); a viewer's button is disabled; the admin's click has it delivered within seconds
 * without a reload, and the page then offers Replay, saying that a replay keeps its webhook-id.
 * No page error, no CSP violation. With CONSOLE_SCREENSHOTS=DIR, the waiting delivery's page is
 * saved as console-delivery-retrying.png (docs/console.md).
 */
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { before, test } from 'node:test';
import type { Page } from 'playwright-core';
import { CONSOLE_DIR } from '../../src/api/console.ts';
import { cliAuditContext } from '../../src/services/audit.ts';
import { definition, eventually, launchConsoleBrowser, onPage, screenshot } from '../helpers/console-harness.ts';
import { feedLine, startDeliveryRig, startReceiver, waitForDelivery } from '../helpers/receivers.ts';

before(() => assert.ok(existsSync(`${CONSOLE_DIR}index.html`), `${CONSOLE_DIR} is missing: run npm run build (or node scripts/build-console.mjs) first`));

const ISO = /\d{4}-\d{2}-\d{2}T\d{2}:\d{2}/;

/** Signs in by link, then opens the delivery's page. */
async function openDelivery(page: Page, base: string, token: string, id: number): Promise<void> {
  await page.goto(`${base}/console/#token=${token}`);
  await page.getByRole('heading', { level: 1 }).first().waitFor({ state: 'visible' });
  await page.goto(`${base}/console/#/deliveries/${id}`);
  await page.getByRole('heading', { level: 1, name: `Delivery ${id}` }).waitFor({ state: 'visible' });
}

test('the console: Retry now on a delivery waiting an hour delivers it within seconds; Replay only where it is accepted; one way of showing times', { timeout: 120_000 }, async (t) => {
  const rig = await startDeliveryRig(t, { 'delivery.retrySchedule': '1h' });
  let first = true;
  const receiver = await startReceiver(t, rig.tls, () => {
    if (!first) return { status: 204 };
    first = false;
    return { status: 503, body: 'receiver down' };
  });
  const { services, store, baseUrl } = rig.relay;
  const by = cliAuditContext();
  await services.orgs.add(by, { id: 'acme' });
  await services.users.add(by, { orgId: 'acme', email: 'admin@acme.test', roleName: 'saas_admin' });
  await services.users.add(by, { orgId: 'acme', email: 'viewer@acme.test', roleName: 'saas_viewer' });
  await services.webhooks.register(by, 'acme', { webhook_url: receiver.url });
  const launching = launchConsoleBrowser(t);
  launching.catch(() => undefined);

  rig.feed(feedLine('acme', 'evt_console_retry', 'ar_console'));
  const waiting = await waitForDelivery(store, 'acme', 'evt_console_retry', (d) => d.status === 'pending' && d.attempts === 1, 'the first attempt to fail');
  const browser = await launching;

  // A viewer sees the state, and a Retry now it cannot use.
  const viewer = await browser.page('viewer');
  await onPage(viewer, async () => {
    await openDelivery(viewer, baseUrl, rig.relay.token('acme', 'viewer@acme.test'), waiting.id);
    const retry = viewer.getByRole('button', { name: 'Retry now' });
    await eventually('the viewer\'s Retry now to be disabled', async () => assert.equal(await retry.isDisabled(), true));
  });

  const admin = await browser.page('admin');
  await onPage(admin, async () => {
    await openDelivery(admin, baseUrl, rig.relay.token('acme', 'admin@acme.test'), waiting.id);
    const status = admin.locator('dd[data-field="status"]');
    await eventually('the status to say retrying and when', async () => assert.match(await status.innerText(), /^retrying\b.*next attempt at .+\(in (59|60) minutes\)/s));
    // The next attempt in local time with the zone, UTC on hover, the ISO time only in datetime.
    const next = status.locator('time');
    assert.match((await next.getAttribute('title')) ?? '', /^\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2} UTC$/);
    assert.equal(await next.getAttribute('datetime'), new Date(waiting.nextAttemptAt).toISOString());
    // Bodies are shown as sent (their own timestamps included): every other text of the page is free of ISO times.
    const shown = await admin.evaluate<string>("(() => { const copy = document.body.cloneNode(true); for (const pre of copy.querySelectorAll('pre')) pre.remove(); return copy.textContent; })()");
    assert.doesNotMatch(shown, ISO, 'no ISO time is shown on the page but in the bodies');
    assert.equal(await admin.getByRole('button', { name: 'Replay' }).isVisible(), false, 'Replay is not offered while the event is queued');
    const retry = admin.getByRole('button', { name: 'Retry now' });
    assert.equal(await retry.isEnabled(), true);
    assert.match(await admin.locator('[data-field="actions-hint"]').innerText(), /later changes of its request stay queued behind it/);
    await screenshot(admin, 'delivery-retrying');

    await admin.evaluate(() => void ((globalThis as { __noReload?: boolean }).__noReload = true));
    const clickedAt = Date.now();
    await retry.click();
    await admin.getByRole('status').filter({ hasText: `Delivery ${waiting.id} is due now` }).waitFor({ state: 'visible' });
    await waitForDelivery(store, 'acme', 'evt_console_retry', (d) => d.status === 'delivered', 'the retried delivery to be delivered', 5_000);
    assert.ok(Date.now() - clickedAt < 5_000, 'delivered within seconds of the click');
    await eventually('the page to show delivered, without a reload', async () => assert.match(await status.innerText(), /^delivered\b/), 10_000);
    assert.equal(await admin.evaluate(() => (globalThis as { __noReload?: boolean }).__noReload === true), true, 'the page was not reloaded');
    // Now Replay is offered, and the page says what a replay's webhook-id means to a de-duplicating receiver.
    await admin.getByRole('button', { name: 'Replay' }).waitFor({ state: 'visible' });
    assert.equal(await admin.getByRole('button', { name: 'Retry now' }).isVisible(), false);
    assert.match(await admin.locator('[data-field="actions-hint"]').innerText(), /replay keeps the webhook-id \(evt_console_retry\): a receiver that de-duplicates by it skips the replay/);
    assert.match(await definition(admin, 'Attempts').innerText(), /\b2\b/);
  });
  assert.deepEqual(receiver.requests.map((r) => r.answeredStatus), [503, 204]);
  assert.deepEqual(browser.incidents, [], 'no page error, console error, CSP violation or failed request');
});

/**
 * API keys on the console's team page, in Debian's chromium against the built daemon: an admin
 * creates a key (shown once, with the hint to copy it now), which the API accepts; the list shows
 * its prefix, never the key; revoked after a confirmation, the key is refused. A viewer does not
 * see the section.
 */
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { before, test, type TestContext } from 'node:test';
import type { Page } from 'playwright-core';
import { eventually, launchConsoleBrowser, onPage, readTable, rowWith, screenshot } from '../helpers/console-harness.ts';
import { assertBuilt, runCli, scratchDir, spawnServe } from '../helpers/feed-helpers.ts';

before(assertBuilt);

async function cli(t: TestContext, args: readonly string[], common: readonly string[]): Promise<string> {
  const r = await runCli(t, [...args, ...common]);
  assert.equal(r.code, 0, `hookrelay ${args.join(' ')}: exit ${r.code}; stderr: ${r.stderr}`);
  return r.stdout.trim();
}

async function openTeam(page: Page, link: string): Promise<void> {
  await page.goto(link);
  await page.getByRole('heading', { level: 1, name: 'Webhook' }).waitFor({ state: 'visible' });
  await page.getByRole('navigation', { name: 'Console' }).getByRole('link', { name: 'Team', exact: true }).click();
  await page.getByRole('heading', { level: 1, name: 'Team' }).waitFor({ state: 'visible' });
}

test('the team page creates an API key shown once, lists its prefix, revokes it; a viewer sees no keys', { timeout: 180_000 }, async (t) => {
  const launching = launchConsoleBrowser(t);
  launching.catch(() => undefined);
  const state = join(scratchDir(t, 'hookrelay-console-keys-'), 'state');
  const common = ['--state-dir', state];
  await cli(t, ['migrate'], common);
  await cli(t, ['orgs', 'add', 'acme'], common);
  await cli(t, ['users', 'add', '--org', 'acme', '--email', 'admin@acme.example', '--role', 'saas_admin'], common);
  await cli(t, ['users', 'add', '--org', 'acme', '--email', 'viewer@acme.example', '--role', 'saas_viewer'], common);
  const daemon = await spawnServe(t, state, []);
  const listen = new URL(daemon.baseUrl).host;
  const adminLink = await cli(t, ['console', 'link', '--org', 'acme', '--email', 'admin@acme.example', '--listen', listen], common);
  const viewerLink = await cli(t, ['console', 'link', '--org', 'acme', '--email', 'viewer@acme.example', '--listen', listen], common);
  const browser = await launching;
  const me = (key: string) => fetch(`${daemon.baseUrl}/users/me`, { headers: { authorization: `Bearer ${key}` } }).then((r) => r.status);

  const admin = await browser.page('acme-admin');
  await onPage(admin, async () => {
    await openTeam(admin, adminLink);
    const section = admin.getByRole('region', { name: 'API keys', exact: true });
    await section.waitFor({ state: 'visible' });
    await section.getByLabel('Name').fill('ci-deploy');
    await section.getByLabel('Role').selectOption('saas_viewer');
    await section.getByLabel('Expires').selectOption('90d');
    await section.getByRole('button', { name: 'Create key' }).click();
    await section.getByText('copy it now, it is not shown again').waitFor({ state: 'visible' });
    const key = (await section.locator('.api-key-shown code').innerText()).trim();
    assert.match(key, /^hkr_[0-9a-f]{8}_/);
    assert.equal(await me(key), 200);
    const table = section.getByRole('table');
    const row = await eventually('the key listed', async () => {
      const found = rowWith(await readTable(table), 'ci-deploy');
      assert.ok(found);
      return found;
    });
    assert.equal(row.Prefix, key.slice(0, 12));
    assert.ok(!JSON.stringify(await readTable(table)).includes(key.slice(13)), 'the list holds no key');
    await screenshot(admin, 'team-api-keys');

    await section.getByLabel('Key', { exact: true }).selectOption('ci-deploy');
    await section.getByRole('button', { name: 'Revoke key…' }).click();
    await admin.getByRole('dialog', { name: 'Revoke this key?' }).getByRole('button', { name: 'Revoke key' }).click();
    await section.getByRole('status').filter({ hasText: 'revoked' }).waitFor({ state: 'visible' });
    assert.equal(await me(key), 401);
    await eventually('the key gone from the list', async () => assert.equal(rowWith(await readTable(table), 'ci-deploy'), undefined));
  });
  await admin.context().close();

  const viewer = await browser.page('acme-viewer');
  await onPage(viewer, async () => {
    await openTeam(viewer, viewerLink);
    await viewer.getByRole('table').first().waitFor({ state: 'visible' });
    assert.equal(await viewer.getByRole('region', { name: 'API keys', exact: true }).count(), 0, 'no API keys section for a viewer');
  });
  await viewer.context().close();
  // The webhook page, where each sign-in lands, finds no webhook registered: its 404, as Chromium prints it.
  const unexpected = browser.incidents.filter((i) => !(i.kind === 'console' && /status of 404 \(Not Found\)/.test(i.text)));
  assert.deepEqual(unexpected, []);
});

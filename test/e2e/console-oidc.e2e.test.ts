/**
 * Sign-in to the console through the organization's identity provider (issue 41), in Debian's
 * chromium against the built daemon and a real OpenID provider (oidc-provider over HTTPS): the
 * sign-in page offers the provider; its own login page signs Ada in; the console exchanges the
 * code (PKCE) and shows her organization and role, as hookrelay's store has it; her token is
 * refreshed before it expires; Sign out ends her session at the provider too, so that the next
 * person signs in on the login page again: Gil, of another organization, who sees his
 * organization's webhook and nothing of Ada's. `hookrelay status` prints the redirect URI to
 * register. With CONSOLE_SCREENSHOTS=DIR the sign-in page is saved there.
 */
import assert from 'node:assert/strict';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { before, test, type TestContext } from 'node:test';
import type { BrowserContext, Page } from 'playwright-core';
import { eventually, launchConsoleBrowser, onPage, screenshot } from '../helpers/console-harness.ts';
import { assertBuilt, runCli, scratchDir, spawnServe } from '../helpers/feed-helpers.ts';
import { RESOURCE, startOidcProvider } from '../helpers/oidc-provider.ts';

before(assertBuilt);

const ADA = 'ada@acme.example';
const GIL = 'gil@globex.example';
const ACME_HOOK = 'https://hooks.acme.example/in';
const GLOBEX_HOOK = 'https://hooks.globex.example/in';
const CLIENT_ID = 'hookrelay-console';
/** Short, so that the console's refresh (a third of the lifetime ahead) happens within the test. */
const ACCESS_TOKEN_TTL_S = 24;

async function cli(t: TestContext, args: readonly string[], common: readonly string[]): Promise<string> {
  const r = await runCli(t, [...args, ...common]);
  assert.equal(r.code, 0, `hookrelay ${args.join(' ')}: exit ${r.code}; stderr: ${r.stderr}`);
  return r.stdout.trim();
}

const stored = (page: Page, key: string) => page.evaluate((k) => (globalThis as unknown as { sessionStorage: { getItem(k: string): string | null } }).sessionStorage.getItem(k), key);
const claimsOf = (token: string) => JSON.parse(Buffer.from(token.split('.')[1] ?? '', 'base64url').toString('utf8')) as Record<string, unknown>;

/** Signs in on the provider's login page (any password) from the console's sign-in page. */
async function signInAtProvider(page: Page, login: string, issuer: string): Promise<void> {
  await page.getByRole('button', { name: 'Sign in with Test IdP' }).click();
  await page.waitForURL((url) => url.origin === issuer);
  await page.locator('input[name="login"]').fill(login);
  await page.locator('input[name="password"]').fill('any password');
  await page.getByRole('button', { name: 'Sign-in' }).click();
}

async function whoShown(page: Page): Promise<string> {
  const who = page.locator('header .who');
  await who.waitFor({ state: 'visible' });
  return (await who.innerText()).replace(/\s+/g, ' ').trim();
}

test('the console signs in through the identity provider (PKCE), shows the organization and role, refreshes, signs out at the provider; another organization sees nothing of the first', { timeout: 240_000 }, async (t) => {
  const launching = launchConsoleBrowser(t);
  launching.catch(() => undefined);
  const idp = await startOidcProvider(t);
  idp.accounts.set(ADA, { claims: { email: ADA, org: 'acme' } });
  idp.accounts.set(GIL, { claims: { email: GIL, org: 'globex' } });

  const dir = scratchDir(t, 'hookrelay-oidc-console-');
  const state = join(dir, 'state');
  const config = join(dir, 'hookrelay.json');
  writeFileSync(
    config,
    JSON.stringify({
      auth: { provider: { issuer: idp.issuer, discovery: true, audience: RESOURCE, caFile: idp.tls.caFile, allowNetworks: ['127.0.0.1/32'] } },
      console: { oidc: { clientId: CLIENT_ID, scopes: ['openid', 'email', 'offline_access', 'api'], resource: RESOURCE, displayName: 'Test IdP' } },
    }),
  );
  const common = ['--config', config, '--state-dir', state];
  await cli(t, ['migrate'], common);
  await cli(t, ['orgs', 'add', 'acme'], common);
  await cli(t, ['orgs', 'add', 'globex'], common);
  await cli(t, ['users', 'add', '--org', 'acme', '--email', ADA, '--role', 'saas_admin'], common);
  await cli(t, ['users', 'add', '--org', 'globex', '--email', GIL, '--role', 'saas_viewer'], common);
  await cli(t, ['webhook', 'set', '--org', 'acme', '--url', ACME_HOOK], common);
  await cli(t, ['webhook', 'set', '--org', 'globex', '--url', GLOBEX_HOOK], common);
  const daemon = await spawnServe(t, state, ['--config', config]);
  const consoleUrl = `${daemon.baseUrl}/console/`;
  idp.consoleClient({ clientId: CLIENT_ID, redirectUri: consoleUrl, accessTokenTtlSeconds: ACCESS_TOKEN_TTL_S });

  await t.test('hookrelay status prints the redirect URI to register at the provider', async () => {
    const listen = new URL(daemon.baseUrl).host;
    const text = await cli(t, ['status', '--listen', listen], common);
    assert.match(text, new RegExp(`console: +sign-in by link, and through ${idp.issuer.replace(/[.]/g, '\\.')} as client ${CLIENT_ID}: register http://${listen.replace(/[.]/g, '\\.')}/console/ as its redirect URI and post-logout redirect URI`));
    const json = JSON.parse(await cli(t, ['status', '--listen', listen, '--json'], common)) as { console: unknown };
    assert.deepEqual(json.console, { identity_provider: { issuer: idp.issuer, client_id: CLIENT_ID, redirect_uri: `http://${listen}/console/`, scope: 'openid email offline_access api' } });
  });

  const browser = await launching;
  // The provider's pages are served with the test CA; its development pages ask for a web font, which this machine cannot fetch.
  const context: BrowserContext = await browser.context('oidc', { ignoreHTTPSErrors: true });
  await context.route(/fonts\.googleapis\.com/, (route) => route.abort('aborted'));
  const page = await context.newPage();

  await t.test('Ada signs in on the provider\'s login page and the console shows her organization and role from hookrelay\'s store', () =>
    onPage(page, async () => {
      await page.goto(consoleUrl);
      await page.getByRole('button', { name: 'Sign in with Test IdP' }).waitFor({ state: 'visible' });
      await screenshot(page, 'oidc-sign-in');
      await page.setViewportSize({ width: 390, height: 800 });
      const width = await page.evaluate(() => (globalThis as unknown as { document: { documentElement: { scrollWidth: number } } }).document.documentElement.scrollWidth);
      assert.ok(width <= 390, `at 390 px the sign-in page fits (scrollWidth ${width})`);
      await screenshot(page, 'oidc-sign-in-narrow');
      await page.setViewportSize({ width: 1280, height: 900 });
      await signInAtProvider(page, ADA, idp.issuer);
      assert.equal(await whoShown(page), `Organization acme · ${ADA} · saas_admin`);
      assert.equal(new URL(page.url()).search, '', 'the code and state are gone from the address bar');
      await page.getByText(ACME_HOOK).first().waitFor({ state: 'visible' });
      const token = await stored(page, 'hookrelay.token');
      assert.ok(token !== null);
      const claims = claimsOf(token);
      assert.equal(claims.iss, idp.issuer, 'the provider\'s access token, used as issued');
      assert.equal(claims.aud, RESOURCE);
      assert.equal(await stored(page, 'hookrelay.oidc.pending'), null, 'the verifier is used once and forgotten');
      assert.deepEqual(idp.tokenRequests().authorization_code, 1);
    }),
  );

  await t.test('her access token is refreshed before it expires: the console goes on working with the new one', () =>
    onPage(page, async () => {
      const first = await stored(page, 'hookrelay.token');
      const second = await eventually(
        'the refreshed token',
        async () => {
          const now = await stored(page, 'hookrelay.token');
          assert.ok(now !== null && now !== first, 'not refreshed yet');
          return now;
        },
        ACCESS_TOKEN_TTL_S * 1000,
        250,
      );
      assert.ok((idp.tokenRequests().refresh_token ?? 0) >= 1);
      assert.ok(Number(claimsOf(second).exp) > Number(claimsOf(first!).exp));
      // Past the first token's expiry, a page that calls the API still works.
      const firstExpiry = Number(claimsOf(first!).exp) * 1000;
      await new Promise((resolve) => setTimeout(resolve, Math.max(0, firstExpiry - Date.now() + 1500)));
      await page.getByRole('navigation', { name: 'Console' }).getByRole('link', { name: 'Deliveries', exact: true }).click();
      await page.getByRole('heading', { level: 1, name: /Deliveries/ }).waitFor({ state: 'visible' });
      assert.equal(await whoShown(page), `Organization acme · ${ADA} · saas_admin`);
    }),
  );

  await t.test('Sign out ends the session at the provider too and comes back to the sign-in page', () =>
    onPage(page, async () => {
      await page.getByRole('button', { name: 'Sign out' }).click();
      await page.waitForURL((url) => url.origin === idp.issuer);
      await page.getByRole('button', { name: 'Yes, sign me out' }).click();
      await page.waitForURL((url) => url.href.startsWith(consoleUrl));
      await page.getByRole('heading', { level: 1, name: 'Sign in' }).waitFor({ state: 'visible' });
      assert.equal(await stored(page, 'hookrelay.token'), null);
      assert.equal(await stored(page, 'hookrelay.oidc.session'), null);
    }),
  );

  await t.test('Gil, of globex, must sign in on the login page again, and sees his organization\'s webhook and nothing of acme\'s', () =>
    onPage(page, async () => {
      // signInAtProvider fills the login form: it is there because Ada's session at the provider ended.
      await signInAtProvider(page, GIL, idp.issuer);
      assert.equal(await whoShown(page), `Organization globex · ${GIL} · saas_viewer`);
      await page.getByText(GLOBEX_HOOK).first().waitFor({ state: 'visible' });
      assert.doesNotMatch(await page.locator('body').innerText(), /acme/);
      await page.getByRole('navigation', { name: 'Console' }).getByRole('link', { name: 'Deliveries', exact: true }).click();
      await page.getByRole('heading', { level: 1, name: /Deliveries/ }).waitFor({ state: 'visible' });
      assert.doesNotMatch(await page.locator('body').innerText(), /acme/);
      // His token says globex; asked about acme's users through the API it is refused.
      const res = await fetch(`${daemon.baseUrl}/users/me`, { headers: { authorization: `Bearer ${await stored(page, 'hookrelay.token')}`, Version: 'v1.2' } });
      assert.equal(res.status, 200);
      assert.equal(((await res.json()) as { organization_id: string }).organization_id, 'globex');
    }),
  );

  await t.test('nothing the console did broke its CSP or failed', () => {
    const own = (text: string) => !/fonts\.googleapis|favicon/.test(text);
    assert.deepEqual(browser.incidents.filter((i) => own(i.text)), []);
    const csp = browser.responses.find((r) => r.url === consoleUrl)?.headers['content-security-policy'] ?? '';
    assert.match(csp, new RegExp(`connect-src 'self' ${idp.issuer.replace(/[.]/g, '\\.')}(;| )`), 'the token endpoint is the one other origin the page may call');
  });
});

/**
 * Receiver authentication (issue 43) end to end, as an operator does it: the built daemon
 * (`hookrelay serve`), `hookrelay webhook set --client-cert --client-key --oauth2-*` from the
 * CLI, a real HTTPS receiver on 127.0.0.1 that requires a client certificate from a test CA
 * and a Bearer token from a real token service (oidc-provider's client credentials grant),
 * verified against its JWKS. A bad certificate is refused with exit 2 and changes nothing; the
 * console's webhook page and request view (Debian's chromium) show the certificate and the
 * OAuth2 client, never the key, the secret or a token; the daemon's log holds none of them.
 */
import assert from 'node:assert/strict';
import { appendFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { before, test, type TestContext } from 'node:test';
import { createLocalJWKSet, jwtVerify } from 'jose';
import { definition, eventually, launchConsoleBrowser, onPage } from '../helpers/console-harness.ts';
import { createClientCa } from '../helpers/client-certs.ts';
import { assertBuilt, jsonLine, runCli, scratchDir, spawnServe } from '../helpers/feed-helpers.ts';
import { RESOURCE, startOidcProvider } from '../helpers/oidc-provider.ts';
import { startReceiver, waitFor } from '../helpers/receivers.ts';

before(assertBuilt);

const SECRET = 'e2e-oauth2-secret-Wn4Rt7Yp2Qs9';

async function cli(t: TestContext, args: readonly string[], common: readonly string[]): Promise<string> {
  const r = await runCli(t, [...args, ...common]);
  assert.equal(r.code, 0, `hookrelay ${args.join(' ')}: exit ${r.code}; stderr: ${r.stderr}`);
  return r.stdout;
}

test('webhook set with a client certificate and OAuth2: delivered to a receiver that wants both; shown everywhere without a secret', { timeout: 240_000 }, async (t) => {
  const launching = launchConsoleBrowser(t);
  launching.catch(() => undefined);
  const idp = await startOidcProvider(t);
  idp.serviceClient({ clientId: 'acme-relay', secret: SECRET, accessTokenTtlSeconds: 600 });
  const ca = createClientCa(t);
  const cert = ca.issue({ cn: 'acme relay client' });
  const expired = ca.issue({ startDate: '20200101000000Z', endDate: '20210101000000Z' });
  const jwks = createLocalJWKSet(idp.publicJwks() as never);
  const tokens: string[] = [];
  const receiver = await startReceiver(
    t,
    idp.tls,
    async (req) => {
      const token = /^Bearer (\S+)$/.exec(req.headers.authorization ?? '')?.[1];
      if (token === undefined) return { status: 401 };
      tokens.push(token);
      try {
        await jwtVerify(token, jwks, { issuer: idp.issuer, audience: RESOURCE });
        return { status: 204 };
      } catch {
        return { status: 401 };
      }
    },
    { requestCert: true, rejectUnauthorized: true, ca: ca.caPem },
  );

  const dir = scratchDir(t, 'hookrelay-receiver-auth-');
  const state = join(dir, 'state');
  const configFile = join(dir, 'hookrelay.json');
  writeFileSync(
    configFile,
    JSON.stringify({
      feed: { pollInterval: '20ms' },
      delivery: { caFile: idp.tls.caFile, allowNetworks: ['127.0.0.1/32'], retrySchedule: ['1s', '1s'], pollInterval: '20ms', storeInternalResponses: ['acme'] },
    }),
  );
  const secretFile = join(dir, 'client-secret');
  writeFileSync(secretFile, `${SECRET}\n`, { mode: 0o600 });
  const common = ['--state-dir', state, '--config', configFile];
  await cli(t, ['migrate'], common);
  await cli(t, ['orgs', 'add', 'acme'], common);
  await cli(t, ['users', 'add', '--org', 'acme', '--email', 'admin@acme.example', '--role', 'saas_admin'], common);
  const daemon = await spawnServe(t, state, ['--config', configFile]);

  const set = await cli(
    t,
    ['webhook', 'set', '--org', 'acme', '--url', receiver.url, '--client-cert', cert.certFile, '--client-key', cert.keyFile,
      '--oauth2-token-url', `${idp.issuer}/token`, '--oauth2-client-id', 'acme-relay', '--oauth2-client-secret-file', secretFile, '--oauth2-scope', 'api'],
    common,
  );
  assert.match(set, new RegExp(`client certificate: CN=acme relay client \\(SHA-256 ${cert.fingerprint}, EC P-256, valid until `));
  assert.match(set, new RegExp(`oauth2: client acme-relay at ${idp.issuer}/token \\(scope api, client_secret_basic; client secret set, hidden\\)`));

  // A bad certificate: exit 2, one line naming what is wrong, nothing changed.
  const refused = await runCli(t, ['webhook', 'set', '--org', 'acme', '--url', `${receiver.url}/other`, '--client-cert', expired.certFile, '--client-key', expired.keyFile, ...common]);
  assert.equal(refused.code, 2, refused.stderr);
  assert.equal(refused.stderr, 'hookrelay: client_certificate.certificate expired on 2021-01-01T00:00:00.000Z; give a certificate that is valid now\n');
  const mismatch = await runCli(t, ['webhook', 'set', '--org', 'acme', '--url', receiver.url, '--client-cert', cert.certFile, '--client-key', expired.keyFile, ...common]);
  assert.equal(mismatch.code, 2);
  assert.match(mismatch.stderr, /^hookrelay: client_certificate\.private_key does not match the certificate/);
  const missingId = await runCli(t, ['webhook', 'set', '--org', 'acme', '--url', receiver.url, '--oauth2-token-url', `${idp.issuer}/token`, ...common]);
  assert.equal(missingId.code, 2);
  assert.match(missingId.stderr, /OAuth2 needs --oauth2-client-id, --oauth2-client-secret-file too/);
  const got = JSON.parse(await cli(t, ['webhook', 'get', '--org', 'acme', '--json'], common)) as Record<string, any>;
  assert.equal(got.webhook_url, receiver.url);
  assert.equal(got.client_certificate.fingerprint_sha256, cert.fingerprint);

  // Delivered: the receiver saw the certificate and a token it verified.
  appendFileSync(join(state, 'feed.jsonl'), jsonLine({ event_id: 'evt_e2e_auth', organization_id: 'acme', anticipation_request_id: 'ar_1', status: 'approved', previous_status: 'submitted' }));
  const [request] = await receiver.waitForRequests(1, 20_000);
  assert.equal(request?.clientCertificate, cert.fingerprint);
  await waitFor('the receiver answered 204', () => request?.answeredStatus === 204, 20_000);
  assert.equal(idp.tokenRequests().client_credentials, 1);
  const human = await cli(t, ['webhook', 'get', '--org', 'acme'], common);
  assert.match(human, /^client_certificate: CN=acme relay client/m);
  assert.match(human, /^oauth2: client acme-relay at /m);

  // The console: the webhook page and the request as sent show who and which, never a secret.
  const link = (await cli(t, ['console', 'link', '--org', 'acme', '--email', 'admin@acme.example', '--listen', new URL(daemon.baseUrl).host], common)).trim();
  const browser = await launching;
  const page = await browser.page('acme-admin');
  const keyBody = cert.keyPem.split('\n')[1]!;
  await onPage(page, async () => {
    await page.goto(link);
    await page.getByRole('heading', { level: 1, name: 'Webhook' }).waitFor({ state: 'visible' });
    await eventually('the certificate shown', async () => assert.match(await definition(page, 'Client certificate').innerText(), /CN=acme relay client/));
    const certText = await definition(page, 'Client certificate').innerText();
    assert.ok(certText.includes(cert.fingerprint), certText);
    const oauth2Text = await definition(page, 'OAuth2').innerText();
    assert.match(oauth2Text, new RegExp(`token URL ${idp.issuer}/token`));
    assert.match(oauth2Text, /client acme-relay; client secret set; value hidden/);
    const webhookPage = await page.locator('main').innerText();
    await page.evaluate(() => void ((globalThis as unknown as { location: { hash: string } }).location.hash = '#/deliveries/1'));
    await page.getByText('The request as sent').waitFor({ state: 'visible' });
    await eventually('the request line', async () => assert.match(await page.locator('.request-line').innerText(), /presenting the client certificate CN=acme relay client/));
    assert.equal((await page.locator('td[data-header="authorization"]').innerText()).trim(), '(set; value hidden)');
    const deliveryPage = await page.locator('main').innerText();
    for (const text of [webhookPage, deliveryPage]) {
      assert.ok(!text.includes(SECRET), 'no client secret on a page');
      assert.ok(!text.includes(keyBody), 'no private key on a page');
      for (const token of tokens) assert.ok(!text.includes(token), 'no token on a page');
    }
  });
  await page.context().close();

  // Removed from the CLI.
  const removed = await cli(t, ['webhook', 'set', '--org', 'acme', '--url', receiver.url, '--no-client-cert', '--no-oauth2'], common);
  assert.match(removed, /^client certificate: none$/m);
  assert.match(removed, /^oauth2: none$/m);

  // Nothing secret in the daemon's log.
  const log = JSON.stringify(daemon.logRecords()) + daemon.stderr();
  assert.ok(!log.includes(SECRET));
  assert.ok(!log.includes(keyBody));
  for (const token of tokens) assert.ok(!log.includes(token));
  assert.deepEqual(browser.incidents, []);
});

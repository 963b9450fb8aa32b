/**
 * The built daemon with an identity provider (auth.provider), as an operator runs it: a real
 * OpenID provider (oidc-provider) on https://127.0.0.1, its tokens accepted beside those of
 * `hookrelay token issue`; the provider stopped, its cached keys keep working and both /readyz
 * and `hookrelay status` say the daemon is ready but degraded.
 */
import assert from 'node:assert/strict';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { assertBuilt, runCli, scratchDir, spawnServe, waitFor } from '../helpers/feed-helpers.ts';
import { RESOURCE, startOidcProvider } from '../helpers/oidc-provider.ts';

test('provider tokens and own tokens side by side; the provider down: cached keys, ready but degraded', async (t) => {
  assertBuilt();
  const idp = await startOidcProvider(t);
  const dir = scratchDir(t, 'hookrelay-idp-');
  const stateDir = join(dir, 'var');
  const config = join(dir, 'hookrelay.json');
  const provider = { issuer: idp.issuer, jwksUrl: idp.jwksUrl, audience: RESOURCE, caFile: idp.tls.caFile, allowNetworks: ['127.0.0.1/32'], minRefreshInterval: '1s' };
  writeFileSync(config, JSON.stringify({ auth: { provider } }));
  const cli = async (...args: string[]) => {
    const r = await runCli(t, [...args, '--state-dir', stateDir, '--config', config]);
    assert.equal(r.code, 0, `hookrelay ${args.join(' ')}: ${r.stderr}`);
    return r.stdout.trim();
  };
  await cli('migrate');
  await cli('orgs', 'add', 'acme');
  await cli('users', 'add', '--org', 'acme', '--email', 'ada@acme.test', '--role', 'saas_admin');
  const daemon = await spawnServe(t, stateDir, ['--config', config]);
  const me = (token: string) => fetch(`${daemon.baseUrl}/users/me`, { headers: { authorization: `Bearer ${token}` } });

  const providerToken = await idp.token({ clientId: 'ada', claims: { email: 'ada@acme.test', org: 'acme' } });
  assert.equal((await me(providerToken)).status, 200);
  const ownToken = await cli('token', 'issue', '--org', 'acme', '--email', 'ada@acme.test');
  assert.equal((await me(ownToken)).status, 200);

  await idp.stop();
  await new Promise((resolve) => setTimeout(resolve, 1100));
  // A token naming a kid the daemon does not know makes it fetch again: that fetch fails.
  const [header, payload, signature] = providerToken.split('.') as [string, string, string];
  const otherKid = Buffer.from(JSON.stringify({ ...JSON.parse(Buffer.from(header, 'base64url').toString()), kid: 'rotated-in' })).toString('base64url');
  assert.equal((await me(`${otherKid}.${payload}.${signature}`)).status, 401);
  await waitFor('a failed fetch logged', () => daemon.logRecords().some((r) => r.msg === "fetching the identity provider's keys failed"));

  assert.equal((await me(providerToken)).status, 200, 'the cached keys keep working');
  assert.equal((await me(ownToken)).status, 200);
  const ready = await fetch(`${daemon.baseUrl}/readyz`);
  assert.equal(ready.status, 200);
  const body = (await ready.json()) as { status: string; degraded: Array<{ reason: string; detail: string }> };
  assert.equal(body.degraded[0]!.reason, 'identity_provider_unreachable');
  const port = new URL(daemon.baseUrl).port;
  const status = JSON.parse(await cli('status', '--json', '--listen', `127.0.0.1:${port}`)) as { daemon: { ready: boolean; degraded: string[] } };
  assert.equal(status.daemon.ready, true);
  assert.match(status.daemon.degraded[0]!, /^identity_provider_unreachable \(the identity provider cannot be reached/);
  assert.match(await cli('status', '--listen', `127.0.0.1:${port}`), /^daemon: +reachable at .*, ready, degraded: identity_provider_unreachable/m);

  daemon.child.kill('SIGTERM');
  assert.deepEqual(await daemon.exited, { code: 0, signal: null });
});

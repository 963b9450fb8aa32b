import assert from 'node:assert/strict';
import { test } from 'node:test';
import { loadConfig } from '../../src/config/load.ts';

const base = { 'auth.provider.issuer': 'https://idp.example.com/realms/acme', 'auth.provider.jwksUrl': 'https://idp.example.com/realms/acme/certs', 'auth.provider.audience': 'hookrelay' };
const load = (overrides: Record<string, string>) => loadConfig({ env: {}, overrides: { stateDir: '/tmp/x', ...overrides } });

test('a complete provider configuration loads', () => {
  const config = load(base);
  assert.equal(config.auth.provider.issuer, base['auth.provider.issuer']);
  assert.deepEqual(config.auth.provider.algorithms, ['RS256', 'PS256', 'ES256', 'EdDSA']);
  assert.equal(config.auth.provider.maxStale, 86_400_000);
});

test('an incoherent provider configuration is refused at start with one sentence naming the key', () => {
  const cases: Array<[Record<string, string>, RegExp]> = [
    [{ 'auth.provider.jwksUrl': base['auth.provider.jwksUrl'] }, /"auth\.provider\.jwksUrl" is set but "auth\.provider\.issuer" is not/],
    [{ ...base, 'auth.provider.audience': '' }, /"auth\.provider\.audience" is required/],
    [{ ...base, 'auth.provider.jwksUrl': '', 'auth.provider.discovery': 'false' }, /without a key source/],
    [{ ...base, 'auth.provider.discovery': 'true' }, /both set/],
    [{ ...base, 'auth.provider.algorithms': 'RS256,HS256' }, /"HS256"; accepted: RS256, PS256, ES256, EdDSA/],
    [{ ...base, 'auth.provider.organizationClaim': '/org~2' }, /"auth\.provider\.organizationClaim" has "~" not followed by 0 or 1/],
    [{ ...base, 'auth.provider.allowNetworks': '10.0.0.0/33' }, /must list CIDRs/],
    [{ ...base, 'auth.issuer': base['auth.provider.issuer'] }, /equals "auth\.issuer"/],
    [{ ...base, 'auth.provider.jwksUrl': 'http://idp.example.com/certs' }, /an https:\/\/ URL/],
  ];
  for (const [overrides, message] of cases) assert.throws(() => load(overrides), message, JSON.stringify(overrides));
});

test('console.oidc needs the provider with discovery, and scopes with openid; each refusal names the key', () => {
  const withConsole = { ...base, 'auth.provider.jwksUrl': '', 'auth.provider.discovery': 'true', 'console.oidc.clientId': 'hookrelay-console' };
  const config = load(withConsole);
  assert.deepEqual(config.console.oidc, { clientId: 'hookrelay-console', scopes: ['openid', 'email', 'profile'], resource: null, displayName: 'your identity provider' });
  const cases: Array<[Record<string, string>, RegExp]> = [
    [{ 'console.oidc.clientId': 'hookrelay-console' }, /"console\.oidc\.clientId" is set but "auth\.provider\.issuer" is not/],
    [{ ...base, 'console.oidc.clientId': 'hookrelay-console' }, /"console\.oidc\.clientId" needs the provider's sign-in endpoints: set "auth\.provider\.discovery" to true/],
    [{ ...withConsole, 'console.oidc.scopes': 'email,profile' }, /"console\.oidc\.scopes" must include "openid"/],
    [{ ...withConsole, 'console.oidc.scopes': 'openid,a"b' }, /"console\.oidc\.scopes" lists "a\\"b", which is not a scope/],
    [{ ...withConsole, 'console.oidc.displayName': '' }, /console\.oidc\.displayName/],
  ];
  for (const [overrides, message] of cases) assert.throws(() => load(overrides), message, JSON.stringify(overrides));
});

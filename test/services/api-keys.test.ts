/**
 * API keys on both backends: a key is answered once, stored only as its hash, stands for its
 * organization and role until revoked or expired; its role is never above its creator's; an
 * organization holds a bounded number; the last use is written at most once a minute; each
 * creation and revocation leaves an audit entry without the key.
 */
import assert from 'node:assert/strict';
import { after, describe, test, type TestContext } from 'node:test';
import { loadConfig } from '../../src/config/load.ts';
import { apiKeyPrefix, hashApiKey, LAST_USE_GRANULARITY_MS, MAX_API_KEYS_PER_ORG, sameApiKeyHash } from '../../src/domain/api-keys.ts';
import { ActorKind, type AuditContext } from '../../src/domain/audit.ts';
import type { Clock } from '../../src/domain/clock.ts';
import { Permission } from '../../src/domain/permissions.ts';
import { createServices, type Services } from '../../src/services/services.ts';
import { STORE_BACKENDS, type Opened } from '../helpers/store-backends.ts';
import { stopPgServer } from '../helpers/pg-harness.ts';
import { tempDir } from '../helpers/helpers.ts';
import { BY_TEST } from '../helpers/audit-helpers.ts';

after(stopPgServer);

const ADMIN: AuditContext = { actor: { kind: ActorKind.api, name: 'admin@acme.test', orgId: 'acme' }, requestId: 'req-1', source: '192.0.2.7' };
const ADMIN_PERMISSIONS = [Permission.rolesRead, Permission.usersManage, Permission.webhookRead, Permission.webhookManage, Permission.auditRead, Permission.apiKeysManage];
const DAY = 86_400_000;

class ManualClock implements Clock {
  at = Date.parse('2026-11-28T12:00:00Z');
  now(): number {
    return this.at;
  }
}

async function setUp(t: TestContext, backend: (typeof STORE_BACKENDS)[number]): Promise<{ opened: Opened; services: Services; clock: ManualClock }> {
  const clock = new ManualClock();
  const opened = await backend.open(t, clock);
  const config = loadConfig({ env: {}, overrides: { stateDir: tempDir(t) } });
  const services = createServices(opened.store, config);
  for (const id of ['acme', 'globex']) await services.orgs.add(BY_TEST, { id });
  return { opened, services, clock };
}

const viewerKey = (services: Services, name = 'ci', extra: { expiresInMs?: number; orgId?: string } = {}) =>
  services.apiKeys.create(ADMIN, { orgId: extra.orgId ?? 'acme', name, roleName: 'saas_viewer', creatorPermissions: ADMIN_PERMISSIONS, expiresInMs: extra.expiresInMs ?? null });

describe('the key', () => {
  test('reads hkr_<8 hex>_<43 base64url>; its hash compares in constant time, a changed character does not match', async () => {
    const { makeApiKey } = await import('../../src/domain/api-keys.ts');
    const made = makeApiKey();
    assert.match(made.key, /^hkr_[0-9a-f]{8}_[A-Za-z0-9_-]{43}$/);
    assert.equal(apiKeyPrefix(made.key), made.prefix);
    assert.equal(made.hash, hashApiKey(made.key));
    assert.ok(sameApiKeyHash(made.key, made.hash));
    const changed = made.key.slice(0, -1) + (made.key.endsWith('A') ? 'B' : 'A');
    assert.ok(!sameApiKeyHash(changed, made.hash));
    assert.equal(apiKeyPrefix('hkr_short'), null);
    assert.equal(apiKeyPrefix('eyJhbGciOiJIUzI1NiJ9.e30.x'), null);
  });
});

for (const backend of STORE_BACKENDS) {
  describe(`API keys on ${backend.name}`, () => {
    test('created once, listed without its secret, stands for its organization and role, refused from its revocation on', async (t) => {
      const { opened, services } = await setUp(t, backend);
      const created = await viewerKey(services);
      assert.equal(created.apiKey.createdBy, 'admin@acme.test');
      const check = await services.apiKeys.check(created.key);
      assert.deepEqual(check, { ok: true, principal: { orgId: 'acme', email: 'api-key:ci', roleName: 'saas_viewer', permissions: [Permission.rolesRead, Permission.webhookRead] } });
      const listed = await services.apiKeys.list('acme');
      assert.equal(listed.length, 1);
      assert.equal(listed[0]!.prefix, apiKeyPrefix(created.key));
      assert.ok(!JSON.stringify(listed).includes(created.key.slice(13)), 'the list holds no secret');
      assert.deepEqual(await services.apiKeys.list('globex'), [], "another organization's list is empty");

      // The database holds the hash, never the key or its secret part.
      const rows = await opened.column('SELECT hash FROM api_keys');
      assert.deepEqual(rows, [hashApiKey(created.key)]);
      const everything = JSON.stringify(await opened.column("SELECT org_id || name || role_name || prefix || hash || coalesce(created_by, '') FROM api_keys"));
      assert.ok(!everything.includes(created.key.slice(13)));

      await services.apiKeys.revoke(ADMIN, 'acme', 'ci');
      assert.deepEqual(await services.apiKeys.check(created.key), { ok: false, reason: 'revoked', orgId: 'acme', name: 'ci', prefix: apiKeyPrefix(created.key) });
      assert.deepEqual(await services.apiKeys.list('acme'), []);
      await assert.rejects(services.apiKeys.revoke(ADMIN, 'acme', 'ci'), { code: 'api_key_not_found' });
      // The name is free again; the new key is another one.
      const again = await viewerKey(services);
      assert.notEqual(again.key, created.key);
      assert.equal((await services.apiKeys.check(again.key)).ok, true);
      assert.equal((await services.apiKeys.check(created.key)).ok, false);
    });

    test('an unknown or malformed key, or a known prefix with another secret, is unknown', async (t) => {
      const { services } = await setUp(t, backend);
      const created = await viewerKey(services);
      const forged = `${apiKeyPrefix(created.key)}_${'A'.repeat(43)}`;
      assert.deepEqual(await services.apiKeys.check(forged), { ok: false, reason: 'unknown', orgId: null, name: null, prefix: apiKeyPrefix(created.key) });
      assert.equal((await services.apiKeys.check('hkr_nothing')).ok, false);
    });

    test('expires at its expiry; the expiry is bounded; the last use is written at most once a minute', async (t) => {
      const { services, clock } = await setUp(t, backend);
      await assert.rejects(viewerKey(services, 'long', { expiresInMs: 366 * DAY }), { code: 'validation_failed' });
      await assert.rejects(viewerKey(services, 'short', { expiresInMs: 1000 }), { code: 'validation_failed' });
      const created = await viewerKey(services, 'ci', { expiresInMs: 30 * DAY });
      assert.equal(created.apiKey.expiresAt, clock.at + 30 * DAY);
      const start = clock.at;
      assert.equal((await services.apiKeys.check(created.key)).ok, true);
      assert.equal((await services.apiKeys.list('acme'))[0]!.lastUsedAt, start);
      clock.at += LAST_USE_GRANULARITY_MS - 1;
      assert.equal((await services.apiKeys.check(created.key)).ok, true);
      assert.equal((await services.apiKeys.list('acme'))[0]!.lastUsedAt, start, 'not written again within the minute');
      clock.at = start + LAST_USE_GRANULARITY_MS;
      await services.apiKeys.check(created.key);
      assert.equal((await services.apiKeys.list('acme'))[0]!.lastUsedAt, start + LAST_USE_GRANULARITY_MS);
      clock.at = start + 30 * DAY;
      assert.deepEqual(await services.apiKeys.check(created.key), { ok: false, reason: 'expired', orgId: 'acme', name: 'ci', prefix: apiKeyPrefix(created.key) });
      assert.equal((await services.apiKeys.list('acme')).length, 1, 'an expired key is listed, to be revoked');
    });

    test("a role above the creator's is refused; the operator (null) may give any role; names are unique; an unknown role is refused", async (t) => {
      const { services } = await setUp(t, backend);
      const viewerPermissions = [Permission.rolesRead, Permission.webhookRead, Permission.apiKeysManage];
      await assert.rejects(
        services.apiKeys.create(ADMIN, { orgId: 'acme', name: 'up', roleName: 'saas_admin', creatorPermissions: viewerPermissions }),
        { code: 'api_key_role_too_high' },
      );
      assert.ok((await services.apiKeys.create(BY_TEST, { orgId: 'acme', name: 'ops', roleName: 'saas_admin', creatorPermissions: null })).key.startsWith('hkr_'));
      await viewerKey(services);
      await assert.rejects(viewerKey(services), { code: 'api_key_already_exists' });
      await assert.rejects(services.apiKeys.create(ADMIN, { orgId: 'acme', name: 'x', roleName: 'root', creatorPermissions: null }), { code: 'role_not_found' });
      await assert.rejects(services.apiKeys.create(ADMIN, { orgId: 'acme', name: 'bad name', roleName: 'saas_viewer', creatorPermissions: null }), { code: 'validation_failed' });
      await assert.rejects(viewerKey(services, 'ci', { orgId: 'nowhere' }), { code: 'organization_not_found' });
      await assert.rejects(services.apiKeys.revoke(ADMIN, 'globex', 'ci'), { code: 'api_key_not_found' }, "another organization's key cannot be revoked");
    });

    test(`an organization holds at most ${MAX_API_KEYS_PER_ORG} live keys; a revoked or expired one frees its place`, async (t) => {
      const { services, clock } = await setUp(t, backend);
      await viewerKey(services, 'short', { expiresInMs: DAY });
      for (let i = 1; i < MAX_API_KEYS_PER_ORG; i++) await viewerKey(services, `k${i}`);
      await assert.rejects(viewerKey(services, 'one-more'), { code: 'api_key_limit_reached' });
      assert.ok(await viewerKey(services, 'elsewhere', { orgId: 'globex' }), 'the bound is per organization');
      await services.apiKeys.revoke(ADMIN, 'acme', 'k1');
      await viewerKey(services, 'one-more');
      await assert.rejects(viewerKey(services, 'two-more'), { code: 'api_key_limit_reached' });
      clock.at += DAY;
      await viewerKey(services, 'two-more');
    });

    test('creation, revocation and a refused creation are in the audit trail, with the prefix and never the key', async (t) => {
      const { opened, services } = await setUp(t, backend);
      const created = await viewerKey(services);
      await assert.rejects(viewerKey(services));
      await services.apiKeys.revoke(ADMIN, 'acme', 'ci');
      const entries = await opened.store.read((tx) => tx.audit.list({ orgId: 'acme', limit: 10 }));
      const mine = entries.filter((e) => e.action.startsWith('api_key.')).reverse();
      assert.deepEqual(
        mine.map((e) => [e.action, e.outcome, e.code, e.target, e.actorName]),
        [
          ['api_key.create', 'ok', null, 'api-key ci', 'admin@acme.test'],
          ['api_key.create', 'failed', 'api_key_already_exists', 'api-key ci', 'admin@acme.test'],
          ['api_key.revoke', 'ok', null, 'api-key ci', 'admin@acme.test'],
        ],
      );
      assert.equal(JSON.parse(mine[0]!.changes!).prefix.after, apiKeyPrefix(created.key));
      assert.ok(!JSON.stringify(entries).includes(created.key.slice(13)));
    });
  });
}

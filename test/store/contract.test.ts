/**
 * The repository contract: the same cases, through the Store boundary only (store.transaction,
 * store.read and the repositories of repos.ts), against each backend: a fresh SQLite file and
 * a fresh PostgreSQL database (test/helpers/pg-harness.ts). A case that passes on one backend and fails
 * on the other is a difference the services would see.
 *
 * Retention's tables (events, deliveries, attempts, quarantined lines) are seeded with SQL of
 * each backend's own, so that a case can set every column (ids, times, statuses) directly.
 * The deliveries repository has cases of its own (deliveries-contract.test.ts). Ids a case compares are those it
 * chose; ids the database hands out (seqs, quarantine ids, source ids) are only compared with
 * themselves, as they differ between backends (SQLite gives max(rowid) + 1, PostgreSQL's
 * identity columns never hand a number out twice, even after a rollback or a conflict).
 */
import assert from 'node:assert/strict';
import { after, describe, test, type TestContext } from 'node:test';
import type pg from 'pg';
import { systemClock } from '../../src/domain/clock.ts';
import { ErrorCode, HookrelayError } from '../../src/domain/errors.ts';
import { BUILTIN_ROLES, Permission } from '../../src/domain/permissions.ts';
import { emailKey } from '../../src/domain/validation.ts';
import { createLogger } from '../../src/log.ts';
import { PG_SCHEMA_VERSION } from '../../src/store/pg/migrations.ts';
import { createPgPool } from '../../src/store/pg/pool.ts';
import { openPgStore, type PgStore } from '../../src/store/pg/store.ts';
import type { Store, Tx } from '../../src/store/repos.ts';
import type { EventToStore, FeedPosition, FeedReject, PruneBounds } from '../../src/store/values.ts';
import { createOrgService } from '../../src/services/orgs.ts';
import { createRoleService } from '../../src/services/roles.ts';
import { createUserService } from '../../src/services/users.ts';
import { pgServer, stopPgServer } from '../helpers/pg-harness.ts';
import { CONTRACT_INSTANCE, STORE_BACKENDS } from '../helpers/store-backends.ts';
import { BY_TEST, testAudit } from '../helpers/audit-helpers.ts';

after(stopPgServer);

const INSTANCE = CONTRACT_INSTANCE;
const backends = STORE_BACKENDS;

/** An error that a transaction's function throws, to see it come back unchanged. */
class Abandoned extends Error {}

/** A feed event to store, as ingest hands it over; `details` as the parser writes them. */
function feedEvent(id: string, orgId = 'acme', details = '"status":"approved","previous_status":null', position: number | null = null): EventToStore {
  return { event: { id, orgId, anticipationRequestId: `ar_${id}`, occurredAt: 1_700_000_000_000, details, legacyId: null }, position };
}

/**
 * Stores events as ingest does, in one write transaction: the receive time first (never before
 * the newest stored event), then the source, then the batch. Returns the time used and the seqs.
 */
function storeEvents(store: Store, events: readonly EventToStore[], now: number, source = 'feed.jsonl'): Promise<{ at: number; seqs: Array<number | null> }> {
  return store.transaction(async (tx) => {
    const at = await tx.feed.receivedAt(now);
    return { at, seqs: await tx.feed.insertEvents(events, await tx.feed.sourceId(source), at) };
  });
}

/** The seq of an event that was inserted (a test's own check that it was). */
function seqOf(seq: number | null | undefined): number {
  assert.ok(typeof seq === 'number' && Number.isSafeInteger(seq) && seq > 0, `a seq, not ${seq}`);
  return seq;
}

for (const backend of backends) {
  describe(`store contract: ${backend.name}`, () => {
    test('organizations: insert, a taken id, get, list in byte order', async (t) => {
      const { store } = await backend.open(t);
      const ids = ['b', 'B', 'a-1', 'a', 'Z', 'a.b', 'a_b', '0'];
      for (const [i, id] of ids.entries()) {
        assert.equal(await store.transaction((tx) => tx.orgs.insert({ id, name: `Org ${id}`, createdAt: 1000 + i })), true);
      }
      assert.equal(await store.transaction((tx) => tx.orgs.insert({ id: 'a', name: 'Another', createdAt: 5000 })), false);
      assert.deepEqual(await store.read((tx) => tx.orgs.get('a')), { id: 'a', name: 'Org a', createdAt: 1003 });
      assert.equal(await store.read((tx) => tx.orgs.get('A')), null);
      const list = await store.read((tx) => tx.orgs.list());
      // Byte order (JavaScript's default sort is the same for ASCII): '0' 'B' 'Z' 'a' 'a-1' 'a.b' 'a_b' 'b'.
      assert.deepEqual(
        list.map((o) => o.id),
        [...ids].sort(),
      );
      assert.deepEqual(list[0], { id: '0', name: 'Org 0', createdAt: 1007 });
    });

    test('a control character in a name, a description or an e-mail is refused before it reaches the database', async (t) => {
      const { store } = await backend.open(t);
      // PostgreSQL text cannot hold U+0000 at all: the services refuse it, with what was wrong, on both backends.
      const audit = testAudit(store);
      const orgs = createOrgService(store, audit);
      const roles = createRoleService(store, audit);
      const users = createUserService(store, orgs, roles, audit);
      await assert.rejects(orgs.add(BY_TEST, { id: 'acme', name: 'Acme\u0000Corp' }), { code: 'validation_failed', invalidParams: [{ name: 'name', reason: 'must not contain control characters' }] });
      assert.deepEqual(await orgs.list(), []);
      await assert.rejects(roles.add(BY_TEST, { name: 'nul_role', description: 'bad\u0000text', permissions: [] }), { code: 'validation_failed', invalidParams: [{ name: 'description', reason: 'must not contain control characters' }] });
      assert.equal(await store.read((tx) => tx.roles.get('nul_role')), null);
      await orgs.add(BY_TEST, { id: 'acme' });
      await assert.rejects(users.add(BY_TEST, { orgId: 'acme', email: 'a\u0000b@acme.test', roleName: 'saas_admin' }), { code: 'validation_failed' });
      assert.deepEqual(await users.list('acme'), []);
    });

    test('roles: the built-in ones, a custom one, a taken name, list in byte order', async (t) => {
      const { store } = await backend.open(t);
      const builtins = BUILTIN_ROLES.map((r) => ({ name: r.name, description: r.description, permissions: r.permissions, builtin: true }));
      assert.deepEqual(await store.read((tx) => tx.roles.list()), builtins);

      const auditor = { name: 'saasx', description: 'reads webhooks', permissions: [Permission.webhookRead, Permission.rolesRead] };
      assert.equal(await store.transaction((tx) => tx.roles.insert(auditor, 2000)), true);
      assert.equal(await store.transaction((tx) => tx.roles.insert({ name: 'a_role', description: 'nothing', permissions: [] }, 2001)), true);
      assert.equal(await store.transaction((tx) => tx.roles.insert({ ...auditor, description: 'again' }, 2002)), false);
      assert.equal(await store.transaction((tx) => tx.roles.insert({ name: 'saas_admin', description: 'mine now', permissions: [] }, 2003)), false);

      // Permissions come back in the order given, and the taken names kept what they had.
      assert.deepEqual(await store.read((tx) => tx.roles.get('saasx')), { ...auditor, builtin: false });
      assert.deepEqual(await store.read((tx) => tx.roles.get('saas_admin')), builtins[0]);
      assert.equal(await store.read((tx) => tx.roles.get('nobody')), null);
      // '_' (0x5f) sorts before 'x': saas_admin, saas_viewer, saasx.
      assert.deepEqual(
        (await store.read((tx) => tx.roles.list())).map((r) => [r.name, r.builtin]),
        [
          ['a_role', false],
          ['saas_admin', true],
          ['saas_viewer', true],
          ['saasx', false],
        ],
      );
    });

    test('users: insert, a taken e-mail key, find, list in e-mail key order, role change, removal', async (t) => {
      const { store } = await backend.open(t);
      await store.transaction(async (tx) => {
        await tx.orgs.insert({ id: 'acme', name: 'Acme', createdAt: 1 });
        await tx.orgs.insert({ id: 'globex', name: 'Globex', createdAt: 1 });
      });
      const add = (orgId: string, email: string, roleName = 'saas_viewer', now = 3000) =>
        store.transaction((tx) => tx.users.insert({ orgId, email, emailKey: emailKey(email), roleName }, now));

      const ann = await add('acme', 'Ann@Example.com', 'saas_admin', 3000);
      assert.ok(ann !== null);
      assert.deepEqual({ ...ann, id: 0 }, { id: 0, orgId: 'acme', email: 'Ann@Example.com', roleName: 'saas_admin', createdAt: 3000, updatedAt: 3000 });
      assert.ok(Number.isSafeInteger(ann.id) && ann.id > 0);

      // The key decides: another spelling of the same address is taken in acme, not in globex.
      assert.equal(await add('acme', 'ann@example.COM'), null);
      const annElsewhere = await add('globex', 'ann@example.com');
      assert.ok(annElsewhere !== null && annElsewhere.id !== ann.id);

      const others = ['zed@example.com', '\u00e9mile@example.com', 'a.b@example.com', 'a_b@example.com', 'Bob@example.com'];
      const added = new Map([[ann.email, ann.id]]);
      for (const email of others) added.set(email, (await add('acme', email))!.id);
      assert.equal(new Set(added.values()).size, added.size, 'each user has an id of its own');

      assert.deepEqual(await store.read((tx) => tx.users.findByEmail('acme', 'ann@example.com')), ann);
      assert.equal(await store.read((tx) => tx.users.findByEmail('acme', 'Ann@Example.com')), null, 'found by key, not by address');
      assert.equal(await store.read((tx) => tx.users.findByEmail('initech', 'ann@example.com')), null);

      // By key, in byte order: 'a.b' 'a_b' 'ann' 'bob' 'zed' then 'émile' (0xc3 0xa9 after every ASCII byte).
      const listed = await store.read((tx) => tx.users.listByOrg('acme'));
      assert.deepEqual(
        listed.map((u) => u.email),
        ['a.b@example.com', 'a_b@example.com', 'Ann@Example.com', 'Bob@example.com', 'zed@example.com', '\u00e9mile@example.com'],
      );
      assert.deepEqual(
        listed.map((u) => u.id),
        listed.map((u) => added.get(u.email)),
      );
      assert.deepEqual(await store.read((tx) => tx.users.listByOrg('initech')), []);

      await store.transaction((tx) => tx.users.setRole(ann.id, 'saas_viewer', 4000));
      assert.deepEqual(await store.read((tx) => tx.users.findByEmail('acme', 'ann@example.com')), { ...ann, roleName: 'saas_viewer', updatedAt: 4000 });

      await store.transaction((tx) => tx.users.remove(ann.id));
      assert.equal(await store.read((tx) => tx.users.findByEmail('acme', 'ann@example.com')), null);
      assert.equal((await store.read((tx) => tx.users.listByOrg('acme'))).length, others.length);
      assert.ok((await store.read((tx) => tx.users.findByEmail('globex', 'ann@example.com'))) !== null, 'the namesake in another organization stays');
      // Removing or changing a user that is not there does nothing.
      await store.transaction(async (tx) => {
        await tx.users.remove(ann.id);
        await tx.users.setRole(ann.id, 'saas_admin', 5000);
      });
    });

    test('users: countOthersWithPermission counts the other users of the organization whose role grants it', async (t) => {
      const { store } = await backend.open(t);
      const ids = await store.transaction(async (tx) => {
        await tx.orgs.insert({ id: 'acme', name: 'Acme', createdAt: 1 });
        await tx.orgs.insert({ id: 'globex', name: 'Globex', createdAt: 1 });
        await tx.roles.insert({ name: 'user_admin', description: 'manages users only', permissions: [Permission.usersManage] }, 1);
        const add = async (orgId: string, email: string, roleName: string) => (await tx.users.insert({ orgId, email, emailKey: email, roleName }, 1))!.id;
        return {
          admin1: await add('acme', 'a1@x', 'saas_admin'),
          admin2: await add('acme', 'a2@x', 'saas_admin'),
          viewer: await add('acme', 'v@x', 'saas_viewer'),
          userAdmin: await add('acme', 'u@x', 'user_admin'),
          elsewhere: await add('globex', 'a1@x', 'saas_admin'),
        };
      });
      const count = (except: number, permission: Permission, orgId = 'acme') => store.read((tx) => tx.users.countOthersWithPermission(orgId, except, permission));
      assert.equal(await count(ids.admin1, Permission.usersManage), 2); // admin2, userAdmin
      assert.equal(await count(ids.viewer, Permission.usersManage), 3);
      assert.equal(await count(ids.admin1, Permission.rolesRead), 2); // admin2, viewer
      assert.equal(await count(ids.admin1, Permission.webhookManage), 1); // admin2
      assert.equal(await count(ids.elsewhere, Permission.usersManage, 'globex'), 0);
      assert.equal(await count(ids.admin1, Permission.usersManage, 'initech'), 0);
      await store.transaction((tx) => tx.users.remove(ids.admin2));
      assert.equal(await count(ids.admin1, Permission.usersManage), 1);
      await store.transaction((tx) => tx.users.setRole(ids.userAdmin, 'saas_viewer', 2));
      assert.equal(await count(ids.admin1, Permission.usersManage), 0);
    });

    test('webhooks: upsert, get without the secret, getWithSecret, health, replace', async (t) => {
      const { store } = await backend.open(t);
      await store.transaction(async (tx) => {
        await tx.orgs.insert({ id: 'acme', name: 'Acme', createdAt: 1 });
        await tx.webhooks.upsert('acme', 'https://hooks.example.com/a', true, 'whsec_one', 1000);
      });
      const webhook = await store.read((tx) => tx.webhooks.get('acme'));
      assert.deepEqual(webhook, { orgId: 'acme', url: 'https://hooks.example.com/a', activeHmac: true, headers: [], status: 'active', rateLimit: null, clientCertificate: null, oauth2: null, createdAt: 1000, updatedAt: 1000 });
      assert.ok(webhook !== null && !('secret' in webhook), 'get() never carries the secret');
      assert.deepEqual(await store.read((tx) => tx.webhooks.getWithSecret('acme')), { ...webhook, secret: 'whsec_one' });
      assert.deepEqual(await store.read((tx) => tx.webhooks.health('acme')), { consecutiveFailures: 0, failingSince: null, lastSuccessAt: null, disabledReason: null });
      for (const read of [(o: string) => store.read((tx) => tx.webhooks.get(o)), (o: string) => store.read((tx) => tx.webhooks.getWithSecret(o)), (o: string) => store.read((tx) => tx.webhooks.health(o))]) {
        assert.equal(await read('globex'), null);
      }

      // A webhook that failed, succeeded once and was disabled, replaced: active again, the
      // failure count and the reason gone, its creation time and last success kept.
      await store.transaction(async (tx) => {
        await tx.webhooks.recordSuccess('acme', 1500);
        await tx.webhooks.recordFailure('acme', 1600, 1, 60_000);
        await tx.webhooks.setStatus('acme', 'disabled', 'operator', 1700);
      });
      await store.transaction((tx) => tx.webhooks.upsert('acme', 'https://hooks.example.com/b', false, null, 2000));
      assert.deepEqual(await store.read((tx) => tx.webhooks.getWithSecret('acme')), {
        orgId: 'acme',
        url: 'https://hooks.example.com/b',
        activeHmac: false,
        headers: [],
        status: 'active',
        rateLimit: null,
        clientCertificate: null,
        oauth2: null,
        createdAt: 1000,
        updatedAt: 2000,
        secret: null,
      });
      assert.deepEqual(await store.read((tx) => tx.webhooks.health('acme')), { consecutiveFailures: 0, failingSince: null, lastSuccessAt: 1500, disabledReason: null });
    });

    test('webhooks: the receiver credentials (issue 43): what may be shown read by every read, the sealed values only by sealedCredentials, replaced or cleared by each upsert', async (t) => {
      const { store, column } = await backend.open(t);
      const clientCertificate = { subject: 'CN=acme', issuer: 'CN=CA', fingerprintSha256: 'AB:CD', serialNumber: '01', notBefore: 10, notAfter: 99_000, keyType: 'EC P-256' };
      const oauth2 = { tokenUrl: 'https://idp.example/token', clientId: 'hr', scope: 'a b', audience: null, clientAuth: 'client_secret_basic', revision: 'r1' } as const;
      const sealed = { clientCertificate: 'hrs1.k.iv.certificate.tag', oauth2ClientSecret: 'hrs1.k.iv.secret.tag' };
      await store.transaction(async (tx) => {
        await tx.orgs.insert({ id: 'acme', name: 'Acme', createdAt: 1 });
        await tx.webhooks.upsert('acme', 'https://hooks.example.com/a', true, 'whsec_one', 1000, { clientCertificate, oauth2, sealed });
      });
      const webhook = await store.read((tx) => tx.webhooks.get('acme'));
      assert.deepEqual(webhook?.clientCertificate, clientCertificate);
      assert.deepEqual(webhook?.oauth2, oauth2);
      assert.ok(!JSON.stringify(webhook).includes('hrs1'), 'get() never carries a sealed value');
      assert.deepEqual((await store.read((tx) => tx.webhooks.listWithHealth()))[0]?.oauth2, oauth2);
      assert.deepEqual(await store.read((tx) => tx.webhooks.sealedCredentials('acme')), sealed);
      assert.equal(await store.read((tx) => tx.webhooks.sealedCredentials('nobody')), null);
      assert.deepEqual(await column("SELECT client_certificate_sealed FROM webhooks WHERE org_id = 'acme'"), [sealed.clientCertificate]);
      // A registration without them (the service passes what it keeps): cleared.
      await store.transaction((tx) => tx.webhooks.upsert('acme', 'https://hooks.example.com/a', true, 'whsec_one', 2000));
      const cleared = await store.read((tx) => tx.webhooks.get('acme'));
      assert.equal(cleared?.clientCertificate, null);
      assert.equal(cleared?.oauth2, null);
      assert.deepEqual(await store.read((tx) => tx.webhooks.sealedCredentials('acme')), { clientCertificate: null, oauth2ClientSecret: null });
    });

    test('webhooks: headers are kept in their order and spelling, read by every read, replaced (or removed) by each upsert', async (t) => {
      const { store } = await backend.open(t);
      const headers = [['X-Zeta', 'last letter'], ['Authorization', 'Bearer abc'], ['x-alpha', 'a "quoted" value']] as const;
      await store.transaction(async (tx) => {
        await tx.orgs.insert({ id: 'acme', name: 'Acme', createdAt: 1 });
        await tx.webhooks.upsert('acme', 'https://hooks.example.com/a', true, 'whsec_one', 1000, { headers });
      });
      assert.deepEqual((await store.read((tx) => tx.webhooks.get('acme')))?.headers, headers);
      assert.deepEqual((await store.read((tx) => tx.webhooks.getWithSecret('acme')))?.headers, headers);
      assert.deepEqual((await store.read((tx) => tx.webhooks.listWithHealth())).map((w) => w.headers), [headers]);
      await store.transaction((tx) => tx.webhooks.upsert('acme', 'https://hooks.example.com/a', true, 'whsec_one', 2000, { headers: [['X-Only', '1']] }));
      assert.deepEqual((await store.read((tx) => tx.webhooks.get('acme')))?.headers, [['X-Only', '1']]);
      await store.transaction((tx) => tx.webhooks.upsert('acme', 'https://hooks.example.com/a', true, 'whsec_one', 3000));
      assert.deepEqual((await store.read((tx) => tx.webhooks.get('acme')))?.headers, []);
    });

    test('webhooks: failures make it failing after N, disabled after disableAfterMs; a success brings failing back to active', async (t) => {
      const { store } = await backend.open(t);
      await store.transaction(async (tx) => {
        for (const id of ['acme', 'globex']) {
          await tx.orgs.insert({ id, name: id, createdAt: 1 });
          await tx.webhooks.upsert(id, `https://${id}.example.com/hook`, true, 'whsec_x', 1);
        }
      });
      const fail = (now: number, orgId = 'acme', failingAfter = 3, disableAfterMs = 10_000) =>
        store.transaction((tx) => tx.webhooks.recordFailure(orgId, now, failingAfter, disableAfterMs));
      const succeed = (now: number, orgId = 'acme') => store.transaction((tx) => tx.webhooks.recordSuccess(orgId, now));
      const health = (orgId = 'acme') => store.read((tx) => tx.webhooks.health(orgId));
      const status = async (orgId = 'acme') => (await store.read((tx) => tx.webhooks.get(orgId)))?.status;

      assert.equal(await fail(1000), null);
      assert.deepEqual(await health(), { consecutiveFailures: 1, failingSince: 1000, lastSuccessAt: null, disabledReason: null });
      assert.equal(await fail(1001), null);
      assert.deepEqual(await fail(1002), { from: 'active', to: 'failing', disabledReason: null });
      assert.equal(await fail(1003), null, 'failing stays failing');
      assert.deepEqual(await health(), { consecutiveFailures: 4, failingSince: 1000, lastSuccessAt: null, disabledReason: null });
      assert.equal(await status(), 'failing');

      assert.deepEqual(await succeed(1004), { from: 'failing', to: 'active', disabledReason: null });
      assert.deepEqual(await health(), { consecutiveFailures: 0, failingSince: null, lastSuccessAt: 1004, disabledReason: null });
      assert.equal(await succeed(1005), null, 'active stays active');

      // Failing since 20 000 for 10 000 ms: disabled, with the reason.
      for (const now of [20_000, 21_000]) assert.equal(await fail(now), null);
      assert.deepEqual(await fail(22_000), { from: 'active', to: 'failing', disabledReason: null });
      assert.equal(await fail(29_999), null);
      assert.deepEqual(await fail(30_000), { from: 'failing', to: 'disabled', disabledReason: 'failing_too_long' });
      assert.deepEqual(await health(), { consecutiveFailures: 5, failingSince: 20_000, lastSuccessAt: 1005, disabledReason: 'failing_too_long' });
      assert.equal(await fail(31_000), null, 'disabled stays disabled');
      // A success (an attempt that was in flight) clears the count, not the status nor its reason.
      assert.equal(await succeed(32_000), null);
      assert.equal(await status(), 'disabled');
      assert.deepEqual(await health(), { consecutiveFailures: 0, failingSince: null, lastSuccessAt: 32_000, disabledReason: 'failing_too_long' });

      // From active straight to disabled, when failing for long enough before the count is reached.
      assert.equal(await fail(1000, 'globex', 100), null);
      assert.deepEqual(await fail(11_000, 'globex', 100), { from: 'active', to: 'disabled', disabledReason: 'failing_too_long' });
      assert.deepEqual(await health('globex'), { consecutiveFailures: 2, failingSince: 1000, lastSuccessAt: null, disabledReason: 'failing_too_long' });

      // No webhook: nothing to record, no change.
      assert.equal(await fail(1000, 'initech'), null);
      assert.equal(await succeed(1000, 'initech'), null);
      // Neither counts touch updated_at.
      assert.equal((await store.read((tx) => tx.webhooks.get('acme')))?.updatedAt, 1);
    });

    test('webhooks: failures recorded side by side make one status change, and every one is counted', async (t) => {
      const { store } = await backend.open(t);
      await store.transaction(async (tx) => {
        await tx.orgs.insert({ id: 'acme', name: 'Acme', createdAt: 1 });
        await tx.webhooks.upsert('acme', 'https://hooks.example.com/a', true, 'whsec_one', 1);
      });
      // As several instances' group commits would: each change is reported by exactly one of them.
      const changes = await Promise.all(
        Array.from({ length: 10 }, (_, i) => store.transaction((tx) => tx.webhooks.recordFailure('acme', 100 + i, 5, 60_000))),
      );
      assert.deepEqual(
        changes.filter((c) => c !== null),
        [{ from: 'active', to: 'failing', disabledReason: null }],
      );
      assert.equal((await store.read((tx) => tx.webhooks.health('acme')))?.consecutiveFailures, 10);
    });

    test('webhooks: setStatus returns the change it made, null when the status stays or there is no webhook', async (t) => {
      const { store } = await backend.open(t);
      await store.transaction(async (tx) => {
        await tx.orgs.insert({ id: 'acme', name: 'Acme', createdAt: 1 });
        await tx.webhooks.upsert('acme', 'https://hooks.example.com/a', true, 'whsec_one', 1);
        for (const now of [10, 11, 12]) await tx.webhooks.recordFailure('acme', now, 2, 60_000);
      });
      const set = (status: 'active' | 'failing' | 'disabled', reason: string | null, now: number, orgId = 'acme') =>
        store.transaction((tx) => tx.webhooks.setStatus(orgId, status, reason, now));

      assert.deepEqual(await set('disabled', 'operator', 100), { from: 'failing', to: 'disabled', disabledReason: 'operator' });
      assert.deepEqual(await store.read((tx) => tx.webhooks.health('acme')), { consecutiveFailures: 3, failingSince: 10, lastSuccessAt: null, disabledReason: 'operator' });
      // The same status again: no change reported, but the reason and the time are written.
      assert.equal(await set('disabled', 'gone', 200), null);
      assert.deepEqual(await store.read((tx) => tx.webhooks.get('acme')), { orgId: 'acme', url: 'https://hooks.example.com/a', activeHmac: true, headers: [], status: 'disabled', rateLimit: null, clientCertificate: null, oauth2: null, createdAt: 1, updatedAt: 200 });
      assert.equal((await store.read((tx) => tx.webhooks.health('acme')))?.disabledReason, 'gone');

      // Back to active: the failure count starts again.
      assert.deepEqual(await set('active', null, 300), { from: 'disabled', to: 'active', disabledReason: null });
      assert.deepEqual(await store.read((tx) => tx.webhooks.health('acme')), { consecutiveFailures: 0, failingSince: null, lastSuccessAt: null, disabledReason: null });
      assert.deepEqual(await set('failing', null, 400), { from: 'active', to: 'failing', disabledReason: null });
      assert.equal(await set('disabled', 'operator', 500, 'globex'), null);
    });

    test('webhooks: rotateSecret makes the current secret the previous one; previousSecretExpiresAt and signingKeys read it back', async (t) => {
      const { store, column } = await backend.open(t);
      await store.transaction(async (tx) => {
        await tx.orgs.insert({ id: 'acme', name: 'Acme', createdAt: 1 });
        await tx.webhooks.upsert('acme', 'https://hooks.example.com/a', true, 'whsec_one', 1);
      });
      assert.equal(await store.read((tx) => tx.webhooks.previousSecretExpiresAt('acme')), null, 'never rotated');
      assert.deepEqual(await store.read((tx) => tx.webhooks.signingKeys('acme')), {
        url: 'https://hooks.example.com/a',
        activeHmac: true,
        secret: 'whsec_one',
        previousSecret: null,
        previousSecretExpiresAt: null,
      });
      await store.transaction((tx) => tx.webhooks.rotateSecret('acme', 'whsec_two', 90_000, 50));
      assert.equal(await store.read((tx) => tx.webhooks.previousSecretExpiresAt('acme')), 90_000);
      assert.deepEqual(await store.read((tx) => tx.webhooks.signingKeys('acme')), {
        url: 'https://hooks.example.com/a',
        activeHmac: true,
        secret: 'whsec_two',
        previousSecret: 'whsec_one',
        previousSecretExpiresAt: 90_000,
      });
      assert.equal(await store.read((tx) => tx.webhooks.previousSecretExpiresAt('globex')), null, 'no webhook');
      assert.equal(await store.read((tx) => tx.webhooks.signingKeys('globex')), null);
      const after = await store.read((tx) => tx.webhooks.getWithSecret('acme'));
      assert.equal(after?.secret, 'whsec_two');
      assert.equal(after?.updatedAt, 50);
      // What only the delivery path reads (dueRows, not built on PostgreSQL yet): looked at directly.
      assert.deepEqual(await column("SELECT previous_secret || ' ' || previous_secret_expires_at FROM webhooks WHERE org_id = 'acme'"), ['whsec_one 90000']);
      await store.transaction((tx) => tx.webhooks.rotateSecret('acme', 'whsec_three', 95_000, 60));
      assert.deepEqual(await column("SELECT previous_secret || ' ' || previous_secret_expires_at FROM webhooks WHERE org_id = 'acme'"), ['whsec_two 95000']);
      await store.transaction((tx) => tx.webhooks.rotateSecret('globex', 'whsec_x', 1, 1)); // no webhook: nothing happens
    });

    test('webhooks: deliverable leaves disabled ones out; listWithHealth lists them all, by organization id, without secrets', async (t) => {
      const { store } = await backend.open(t);
      const orgs = ['b', 'a', 'C', 'a_2'];
      await store.transaction(async (tx) => {
        for (const id of [...orgs, 'nohook']) await tx.orgs.insert({ id, name: id, createdAt: 1 });
        for (const id of orgs) await tx.webhooks.upsert(id, `https://${id.toLowerCase()}.example.com/`, id !== 'C', id === 'C' ? null : `whsec_${id}`, 10);
        await tx.webhooks.recordSuccess('a', 20);
        await tx.webhooks.recordFailure('a_2', 30, 1, 60_000);
        await tx.webhooks.setStatus('b', 'disabled', 'operator', 40);
      });
      assert.deepEqual(await store.read((tx) => tx.webhooks.deliverable()), [
        { orgId: 'C', status: 'active', lastSuccessAt: null, rateLimit: null },
        { orgId: 'a', status: 'active', lastSuccessAt: 20, rateLimit: null },
        { orgId: 'a_2', status: 'failing', lastSuccessAt: null, rateLimit: null },
      ]);
      const all = await store.read((tx) => tx.webhooks.listWithHealth());
      assert.deepEqual(all, [
        { orgId: 'C', url: 'https://c.example.com/', activeHmac: false, headers: [], status: 'active', rateLimit: null, clientCertificate: null, oauth2: null, createdAt: 10, updatedAt: 10, consecutiveFailures: 0, failingSince: null, lastSuccessAt: null, disabledReason: null, outOfOrderDeliveries: 0 },
        { orgId: 'a', url: 'https://a.example.com/', activeHmac: true, headers: [], status: 'active', rateLimit: null, clientCertificate: null, oauth2: null, createdAt: 10, updatedAt: 10, consecutiveFailures: 0, failingSince: null, lastSuccessAt: 20, disabledReason: null, outOfOrderDeliveries: 0 },
        { orgId: 'a_2', url: 'https://a_2.example.com/', activeHmac: true, headers: [], status: 'failing', rateLimit: null, clientCertificate: null, oauth2: null, createdAt: 10, updatedAt: 10, consecutiveFailures: 1, failingSince: 30, lastSuccessAt: null, disabledReason: null, outOfOrderDeliveries: 0 },
        { orgId: 'b', url: 'https://b.example.com/', activeHmac: true, headers: [], status: 'disabled', rateLimit: null, clientCertificate: null, oauth2: null, createdAt: 10, updatedAt: 40, consecutiveFailures: 0, failingSince: null, lastSuccessAt: null, disabledReason: 'operator', outOfOrderDeliveries: 0 },
      ]);
      assert.ok(all.every((w) => !('secret' in w)));
    });

    test('a transaction that throws leaves nothing behind, and rejects with what it threw', async (t) => {
      const { store } = await backend.open(t);
      const thrown = new Abandoned('changed my mind');
      await assert.rejects(
        store.transaction(async (tx) => {
          await tx.orgs.insert({ id: 'acme', name: 'Acme', createdAt: 1 });
          await tx.roles.insert({ name: 'auditor', description: 'reads', permissions: [Permission.webhookRead] }, 1);
          await tx.users.insert({ orgId: 'acme', email: 'ann@x', emailKey: 'ann@x', roleName: 'auditor' }, 1);
          await tx.webhooks.upsert('acme', 'https://hooks.example.com/', true, 'whsec_x', 1);
          assert.ok((await tx.users.findByEmail('acme', 'ann@x')) !== null, 'a transaction sees its own writes');
          throw thrown;
        }),
        (err) => err === thrown,
      );
      // A statement that fails (a user of an organization that does not exist) fails the whole transaction.
      await assert.rejects(
        store.transaction(async (tx) => {
          await tx.orgs.insert({ id: 'globex', name: 'Globex', createdAt: 1 });
          await tx.users.insert({ orgId: 'initech', email: 'bob@x', emailKey: 'bob@x', roleName: 'saas_admin' }, 1);
        }),
      );
      // Nor does a function that throws before its first call start anything.
      await assert.rejects(
        store.transaction(() => {
          throw thrown;
        }),
        (err) => err === thrown,
      );
      await store.read(async (tx) => {
        assert.deepEqual(await tx.orgs.list(), []);
        assert.equal(await tx.roles.get('auditor'), null);
        assert.deepEqual(await tx.users.listByOrg('acme'), []);
        assert.deepEqual(await tx.webhooks.listWithHealth(), []);
      });
      // The store is still usable, on every connection.
      const ids = ['x1', 'x2', 'x3', 'x4', 'x5', 'x6'];
      await Promise.all(ids.map((id) => store.transaction((tx) => tx.orgs.insert({ id, name: id, createdAt: 1 }))));
      assert.deepEqual((await store.read((tx) => tx.orgs.list())).map((o) => o.id), ids);
    });

    test('read sees what was committed, and returns what its function returns; transactions side by side all commit', async (t) => {
      const { store } = await backend.open(t);
      assert.equal(await store.read(async () => 42), 42);
      assert.equal(await store.transaction(async (tx) => tx.orgs.insert({ id: 'acme', name: 'Acme', createdAt: 1 })), true);
      assert.deepEqual(await store.read((tx) => tx.orgs.get('acme')), { id: 'acme', name: 'Acme', createdAt: 1 });

      // Many at once, more than the pool's connections, each reading then writing, durable or not.
      const ids = Array.from({ length: 12 }, (_, i) => `org-${String(i).padStart(2, '0')}`);
      const inserted = await Promise.all(
        ids.map((id, i) =>
          store.transaction(
            async (tx) => {
              assert.ok((await tx.orgs.get('acme')) !== null);
              return tx.orgs.insert({ id, name: id, createdAt: i });
            },
            { durable: i % 2 === 0 },
          ),
        ),
      );
      assert.deepEqual(inserted, ids.map(() => true));
      const [list, webhooks] = await store.read(async (tx) => [await tx.orgs.list(), await tx.webhooks.listWithHealth()] as const);
      assert.deepEqual(list.map((o) => o.id), ['acme', ...ids]);
      assert.deepEqual(webhooks, []);
      await store.ping();
    });

    test('feed: insertEvents hands out increasing seqs in order; a taken id, and an id repeated in the call, get null', async (t) => {
      const { store } = await backend.open(t);
      assert.deepEqual(await storeEvents(store, [], 1000).then((r) => r.seqs), []);
      // Details with what a text array literal must escape: quotes, backslashes, braces, commas, NULL, non-ASCII.
      const tricky = '"status":"a,b {c} \\\\ \\"q\\"","previous_status":null,"note":"NULL","u":"\u00e9\u{1f600}\\u0000"';
      const first = await storeEvents(store, [feedEvent('evt_a'), feedEvent('evt_b', 'globex', tricky, 10), feedEvent('evt_c', 'acme', undefined, 20)], 1000);
      const [a, b, c] = first.seqs.map(seqOf) as [number, number, number];
      assert.ok(a < b && b < c, `in order: ${first.seqs}`);

      // evt_b is taken; evt_d comes three times (its first occurrence is stored), evt_e once.
      const second = await storeEvents(
        store,
        [feedEvent('evt_d', 'acme', '"status":"first","previous_status":null'), feedEvent('evt_b', 'acme', '"status":"other","previous_status":null'), feedEvent('evt_e'), feedEvent('evt_d', 'acme', '"status":"second","previous_status":null'), feedEvent('evt_d')],
        2000,
      );
      assert.equal(second.seqs.length, 5);
      assert.deepEqual([second.seqs[1], second.seqs[3], second.seqs[4]], [null, null, null]);
      const [d, e] = [seqOf(second.seqs[0]), seqOf(second.seqs[2])];
      assert.ok(c < d && d < e, `after the first batch, in order: ${second.seqs}`);

      const stored = await store.read((tx) => tx.feed.storedEvents(['evt_b', 'evt_d', 'evt_missing', 'evt_a']));
      assert.deepEqual(
        [...stored.keys()].sort(),
        ['evt_a', 'evt_b', 'evt_d'],
      );
      assert.deepEqual(stored.get('evt_b'), { id: 'evt_b', orgId: 'globex', anticipationRequestId: 'ar_evt_b', occurredAt: 1_700_000_000_000, payload: tricky });
      assert.equal(stored.get('evt_d')?.payload, '"status":"first","previous_status":null');
      assert.deepEqual(await store.read((tx) => tx.feed.storedEvents([])), new Map());

      // A batch that rolls back leaves its ids free.
      await assert.rejects(
        store.transaction(async (tx) => {
          assert.equal((await tx.feed.insertEvents([feedEvent('evt_f')], await tx.feed.sourceId('feed.jsonl'), await tx.feed.receivedAt(3000)))[0] !== null, true);
          assert.equal((await tx.feed.storedEvents(['evt_f'])).size, 1, 'a transaction sees the events it inserted');
          throw new Abandoned('rolled back');
        }),
        Abandoned,
      );
      assert.equal((await store.read((tx) => tx.feed.storedEvents(['evt_f']))).size, 0);
      const f = seqOf((await storeEvents(store, [feedEvent('evt_f')], 3000)).seqs[0]);
      assert.ok(f > e);
    });

    test('feed: legacyEvents finds nothing in a database created since schema version 5', async (t) => {
      const { store } = await backend.open(t);
      await storeEvents(store, [feedEvent('evt_0123456789abcdef0123456789abcdef')], 1000);
      assert.deepEqual(await store.read((tx) => tx.feed.legacyEvents(['evt_0123456789abcdef0123456789abcdef', 'evt_nothing'])), new Set());
      assert.deepEqual(await store.read((tx) => tx.feed.legacyEvents([])), new Set());
    });

    test('feed: receivedAt is the clock, never before the newest stored event, in a write or a read', async (t) => {
      const { store } = await backend.open(t);
      assert.equal(await store.transaction((tx) => tx.feed.receivedAt(5000)), 5000);
      assert.equal(await store.read((tx) => tx.feed.receivedAt(5000)), 5000);
      assert.equal((await storeEvents(store, [feedEvent('evt_1')], 10_000)).at, 10_000);
      // The clock stepped back: the newest event's time.
      assert.equal(await store.transaction((tx) => tx.feed.receivedAt(5000)), 10_000);
      assert.equal(await store.read((tx) => tx.feed.receivedAt(9999)), 10_000);
      assert.equal(await store.transaction((tx) => tx.feed.receivedAt(20_000)), 20_000);
      const back = await storeEvents(store, [feedEvent('evt_2')], 7000);
      assert.equal(back.at, 10_000, 'stored at the newest time, not the clock');
      assert.equal(await store.read((tx) => tx.feed.receivedAt(0)), 10_000);
    });

    test('feed: seqRange maps a window [since, until) to the seqs of the events received in it', async (t) => {
      const { store } = await backend.open(t);
      assert.deepEqual(await store.read((tx) => tx.feed.seqRange(0, Number.MAX_SAFE_INTEGER)), { from: 0, to: 0 });
      // received_at: seq. Batches at 1000 (3), 2000 (2), 2000 again (1), a duplicate alone at 2500
      // (no event), 3000 (2), the clock back to 2500 (1, stored at 3000), 5000 (1).
      const received: Array<{ seq: number; at: number }> = [];
      let n = 0;
      for (const [now, count] of [[1000, 3], [2000, 2], [2000, 1], [2500, 0], [3000, 2], [2500, 1], [5000, 1]] as const) {
        const batch = count === 0 ? [feedEvent('evt_0')] : Array.from({ length: count }, () => feedEvent(`evt_${n++}`));
        const { at, seqs } = await storeEvents(store, batch, now);
        for (const seq of seqs) if (seq !== null) received.push({ seq, at });
      }
      assert.equal(received.length, 10);
      const times = [0, 999, 1000, 1001, 1999, 2000, 2001, 2500, 2999, 3000, 3001, 4999, 5000, 5001, 9999];
      for (const since of times) {
        for (const until of times) {
          if (until < since) continue;
          const range = await store.read((tx) => tx.feed.seqRange(since, until));
          const what = `[${since}, ${until}) -> ${JSON.stringify(range)}`;
          const expected = received.filter((r) => r.at >= since && r.at < until).map((r) => r.seq);
          assert.ok(range.from <= range.to, what);
          assert.deepEqual(received.filter((r) => r.seq >= range.from && r.seq < range.to).map((r) => r.seq), expected, what);
          if (expected.length === 0) continue;
          // Tight: `to` just past the window's last event; `from` after the event before the
          // window, and at most its first (a seq in between that no event holds, left by the
          // conflict at 2500 on PostgreSQL, may be where it lands).
          const before = received.filter((r) => r.seq < expected[0]!).at(-1)?.seq ?? 0;
          assert.equal(range.to, expected.at(-1)! + 1, what);
          assert.ok(range.from > before && range.from <= expected[0]!, what);
        }
      }
      // The whole table, and a window after the newest event: empty, past the last seq.
      const last = received.at(-1)!.seq;
      assert.deepEqual(await store.read((tx) => tx.feed.seqRange(0, 1e13)), { from: received[0]!.seq, to: last + 1 });
      assert.deepEqual(await store.read((tx) => tx.feed.seqRange(6000, 7000)), { from: last + 1, to: last + 1 });
      assert.deepEqual(await store.read((tx) => tx.feed.seqRange(1000.5, 2000.5)), { from: received[3]!.seq, to: received[5]!.seq + 1 }, 'bounds need not be whole milliseconds');
      // In a write transaction too.
      assert.deepEqual(await store.transaction((tx) => tx.feed.seqRange(1000, 3000)), { from: received[0]!.seq, to: received[5]!.seq + 1 });
    });

    test('feed: insertRejects keeps the lines in order, bytes intact; listRejects pages by id', async (t) => {
      const { store } = await backend.open(t);
      assert.deepEqual(await store.read((tx) => tx.feed.listRejects(0, 10)), []);
      await store.transaction((tx) => tx.feed.insertRejects([]));
      const line = (i: number, raw: Buffer, over: Partial<Omit<FeedReject, 'id'>> = {}): Omit<FeedReject, 'id'> => ({
        source: 'feed.jsonl',
        position: i * 100,
        lineBytes: raw.length,
        raw,
        reason: 'invalid_json',
        detail: `not valid JSON: line ${i}`,
        eventId: null,
        receivedAt: 1000 + i,
        ...over,
      });
      const lines = [
        line(0, Buffer.from('{"a":')),
        // Not UTF-8, with a NUL byte, a backslash and quotes: bytes, not text.
        line(1, Buffer.from([0x00, 0xff, 0xfe, 0x5c, 0x22, 0x7b, 0x7d, 0x2c, 0x00]), { reason: 'invalid_utf8', detail: 'the line is not valid UTF-8' }),
        line(2, Buffer.alloc(0), { source: '-', position: null, lineBytes: 70_000, reason: 'line_too_long', detail: 'over the limit' }),
        line(3, Buffer.from('{"event_id":"evt_x"}'), { reason: 'event_id_conflict', detail: 'event_id "evt_x" was already ingested with different content', eventId: 'evt_x' }),
        line(4, Buffer.from('{"b":1}'), { reason: 'unknown_field', detail: 'unknown field "b"; put extra fields under "data"', eventId: '\u00e9v\u00e9nement "1"' }),
      ];
      await store.transaction((tx) => tx.feed.insertRejects(lines.slice(0, 3)));
      await store.transaction((tx) => tx.feed.insertRejects(lines.slice(3)));

      const all = await store.read((tx) => tx.feed.listRejects(0, 100));
      assert.deepEqual(
        all.map(({ id: _id, ...rest }) => rest),
        lines,
      );
      const ids = all.map((r) => r.id);
      assert.ok(ids.every((id, i) => i === 0 || id > ids[i - 1]!), `ids increase: ${ids}`);

      const pages: number[][] = [];
      for (let after = 0; ; ) {
        const page = await store.read((tx) => tx.feed.listRejects(after, 2));
        if (page.length === 0) break;
        pages.push(page.map((r) => r.id));
        after = page.at(-1)!.id;
      }
      assert.deepEqual(pages, [ids.slice(0, 2), ids.slice(2, 4), ids.slice(4)]);
      assert.deepEqual(await store.read((tx) => tx.feed.listRejects(ids[4]!, 10)), []);
    });

    test('feed: a NUL in a quarantined line\'s detail or event id does not fail the batch', async (t) => {
      const { store } = await backend.open(t);
      // What JSON.parse says of a NUL, and an event_id refused for holding one (the parser keeps it as the line's event id).
      const raw = Buffer.from('{"event_id":"a\\u0000b"}\u0000');
      await store.transaction((tx) =>
        tx.feed.insertRejects([{ source: 'feed.jsonl', position: 0, lineBytes: raw.length, raw, reason: 'invalid_field', detail: 'bad \u0000 here', eventId: 'a\u0000b', receivedAt: 1 }]),
      );
      const [stored] = await store.read((tx) => tx.feed.listRejects(0, 10));
      assert.ok(stored !== undefined);
      assert.deepEqual(stored.raw, raw, 'the bytes are kept whole');
      // PostgreSQL text cannot hold U+0000: it becomes U+FFFD there; SQLite keeps it.
      const nul = backend.name === 'postgres' ? '\ufffd' : '\u0000';
      assert.equal(stored.detail, `bad ${nul} here`);
      assert.equal(stored.eventId, `a${nul}b`);
    });

    test('feed: positions are saved, read back and overwritten, per source', async (t) => {
      const { store } = await backend.open(t);
      assert.equal(await store.read((tx) => tx.feed.getPosition('/var/log/feed.jsonl')), null);
      const position: FeedPosition = {
        source: '/var/log/feed.jsonl',
        dev: '2049',
        ino: '1234567',
        fingerprint: 'a'.repeat(64),
        fingerprintBytes: 1024,
        position: 4_503_599_627_370_496,
        tailFingerprint: 'b'.repeat(64),
      };
      await store.transaction((tx) => tx.feed.savePosition(position, 1000));
      assert.deepEqual(await store.read((tx) => tx.feed.getPosition('/var/log/feed.jsonl')), position);
      // Rotated to a new file, committed before schema 8's tail fingerprint: null is kept as null.
      const rotated: FeedPosition = { ...position, ino: '7654321', fingerprint: 'c'.repeat(64), fingerprintBytes: 17, position: 17, tailFingerprint: null };
      await store.transaction((tx) => tx.feed.savePosition(rotated, 2000));
      assert.deepEqual(await store.read((tx) => tx.feed.getPosition('/var/log/feed.jsonl')), rotated);
      const other: FeedPosition = { ...position, source: '/var/log/other.jsonl', position: 5 };
      await store.transaction((tx) => tx.feed.savePosition(other, 3000));
      assert.deepEqual(await store.read((tx) => tx.feed.getPosition('/var/log/other.jsonl')), other);
      assert.deepEqual(await store.read((tx) => tx.feed.getPosition('/var/log/feed.jsonl')), rotated);
      assert.equal(await store.read((tx) => tx.feed.getPosition('/var/log/FEED.jsonl')), null);
    });

    test('feed: addStats accumulates per source; stats lists them in byte order', async (t) => {
      const { store } = await backend.open(t);
      assert.deepEqual(await store.read((tx) => tx.feed.stats()), []);
      await store.transaction(async (tx) => {
        await tx.feed.addStats('b', 1, 2, 3, 100);
        await tx.feed.addStats('a', 5, 0, 0, 200);
      });
      await store.transaction((tx) => tx.feed.addStats('b', 10, 20, 30, 300));
      await store.transaction((tx) => tx.feed.addStats('B', 0, 0, 0, 400));
      assert.deepEqual(await store.read((tx) => tx.feed.stats()), [
        { source: 'B', accepted: 0, duplicates: 0, quarantined: 0, updatedAt: 400 },
        { source: 'a', accepted: 5, duplicates: 0, quarantined: 0, updatedAt: 200 },
        { source: 'b', accepted: 11, duplicates: 22, quarantined: 33, updatedAt: 300 },
      ]);
    });

    test('feed: undeliverableByOrg counts the events without any delivery, per organization', async (t) => {
      const db = await backend.open(t);
      const { store } = db;
      assert.deepEqual(await store.read((tx) => tx.feed.undeliverableByOrg()), []);
      const { seqs } = await storeEvents(store, [feedEvent('e1', 'b'), feedEvent('e2', 'a'), feedEvent('e3', 'a'), feedEvent('e4', 'C'), feedEvent('e5', 'a'), feedEvent('e6', 'b')], 1000);
      // e2 was delivered, e6 is dead: both had a delivery. e3 has a pending one.
      const delivery = (seq: number | null, org: string, status: string) =>
        `INSERT INTO deliveries (event_seq, org_id, ordering_key, status, attempts, next_attempt_at, created_at, updated_at) VALUES (${seqOf(seq)}, '${org}', 1, '${status}', 1, 1, 1, 1)`;
      await db.exec([delivery(seqs[1]!, 'a', 'delivered'), delivery(seqs[5]!, 'b', 'dead'), delivery(seqs[2]!, 'a', 'pending')].join(';\n'));
      assert.deepEqual(await store.read((tx) => tx.feed.undeliverableByOrg()), [
        { orgId: 'C', events: 1 },
        { orgId: 'a', events: 1 },
        { orgId: 'b', events: 1 },
      ]);
    });

    test('feed: sourceId gives each source one number, the same every time', async (t) => {
      const { store } = await backend.open(t);
      const id = (source: string) => store.transaction((tx) => tx.feed.sourceId(source));
      const feed = await id('/var/log/feed.jsonl');
      const stdin = await id('-');
      const api = await id('api');
      assert.equal(new Set([feed, stdin, api]).size, 3);
      for (const n of [feed, stdin, api]) assert.ok(Number.isSafeInteger(n) && n > 0);
      assert.equal(await id('/var/log/feed.jsonl'), feed);
      assert.equal(await store.transaction(async (tx) => [await tx.feed.sourceId('-'), await tx.feed.sourceId('-')].join()), `${stdin},${stdin}`);
      // A source made by a transaction that rolls back is made again, and then stays.
      await assert.rejects(
        store.transaction(async (tx) => {
          await tx.feed.sourceId('/var/log/new.jsonl');
          throw new Abandoned('rolled back');
        }),
        Abandoned,
      );
      const fresh = await id('/var/log/new.jsonl');
      assert.equal(new Set([feed, stdin, api, fresh]).size, 4);
      assert.equal(await id('/var/log/new.jsonl'), fresh);
      assert.equal(await id('api'), api);
    });

    test('retention: newest on empty tables is all zeros, and a pass over them removes nothing', async (t) => {
      const { store } = await backend.open(t);
      const newest = await store.read((tx) => tx.retention.newest());
      assert.deepEqual(newest, { oldestSeq: 0, seq: 0, deliveryId: 0, attemptId: 0, rejectId: 0 });
      const options = { after: 0, before: 1_000, cutoff: 1_000, newest, limit: 10 };
      assert.deepEqual(await store.read((tx) => tx.retention.pruneEvents({ ...options, dryRun: true })), { last: null, removed: { events: 0, deliveries: 0, attempts: 0, quarantinedLines: 0 } });
      assert.deepEqual(await store.transaction((tx) => tx.retention.pruneEvents({ ...options, dryRun: false }), { durable: false }), {
        last: null,
        removed: { events: 0, deliveries: 0, attempts: 0, quarantinedLines: 0 },
      });
      assert.equal(await store.read((tx) => tx.retention.countRejects(1_000, 0)), 0);
      assert.equal(await store.transaction((tx) => tx.retention.pruneRejects(1_000, 0, 10)), 0);
    });

    test('retention: events go once all their deliveries were delivered before the cutoff, never the newest rows', async (t) => {
      const db = await backend.open(t);
      const { store } = db;
      const old = 500_000;
      const recent = 2_000_000;
      const cutoff = 1_000_000;
      // seq: the deliveries (id status updated_at) and attempts (id) of the event, and what becomes of it.
      // 1: d1 delivered old, a1 a2            -> goes, with 1 delivery and 2 attempts
      // 2: d2 pending                         -> stays
      // 3: no delivery                        -> stays (recover may still queue it)
      // 4: d3 delivered after the cutoff      -> stays
      // 5: d4 delivered old, d5 dead          -> stays
      // 6: d6 d7 delivered old, a3 on d6      -> goes, with 2 deliveries and 1 attempt
      // 7: d8 delivered old, a4 (the newest)  -> stays
      // 8: d9 delivered old (the newest)      -> stays
      const deliveries: Array<[id: number, seq: number, status: string, updatedAt: number]> = [
        [1, 1, 'delivered', old],
        [2, 2, 'pending', old],
        [3, 4, 'delivered', recent],
        [4, 5, 'delivered', old],
        [5, 5, 'dead', old],
        [6, 6, 'delivered', old],
        [7, 6, 'delivered', old],
        [8, 7, 'delivered', old],
        [9, 8, 'delivered', old],
      ];
      const attempts: Array<[id: number, deliveryId: number, outcome: string]> = [
        [1, 1, 'retry'],
        [2, 1, 'delivered'],
        [3, 6, 'delivered'],
        [4, 8, 'delivered'],
      ];
      await db.exec(
        [
          db.feedSource,
          `INSERT INTO events (seq, id, org_id, anticipation_request_id, occurred_at, payload, source_id, source_position, received_at) VALUES ${[1, 2, 3, 4, 5, 6, 7, 8]
            .map((seq) => `(${seq}, 'evt_${seq}', 'acme', 'ar_${seq}', ${old}, '{}', 1, NULL, ${old})`)
            .join(', ')}`,
          `INSERT INTO deliveries (id, event_seq, org_id, ordering_key, status, attempts, next_attempt_at, created_at, updated_at) VALUES ${deliveries
            .map(([id, seq, status, updatedAt]) => `(${id}, ${seq}, 'acme', ${seq}, '${status}', 1, ${old}, ${old}, ${updatedAt})`)
            .join(', ')}`,
          `INSERT INTO delivery_attempts (id, delivery_id, attempt, started_at, duration_ms, url, outcome) VALUES ${attempts
            .map(([id, deliveryId, outcome]) => `(${id}, ${deliveryId}, ${id}, ${old}, 5, 'https://hooks.example.com/', '${outcome}')`)
            .join(', ')}`,
        ].join(';\n'),
      );

      const newest = await store.read((tx) => tx.retention.newest());
      assert.deepEqual(newest, { oldestSeq: 1, seq: 8, deliveryId: 9, attemptId: 4, rejectId: 0 });
      const none = { events: 0, deliveries: 0, attempts: 0, quarantinedLines: 0 };
      const prune = (after: number, limit: number, dryRun: boolean, at: PruneBounds = newest) => {
        const fn = (tx: Tx) => tx.retention.pruneEvents({ after, before: 9, cutoff, newest: at, limit, dryRun });
        return dryRun ? store.read(fn) : store.transaction(fn, { durable: false });
      };

      // A dry run in windows of 3: counts, removes nothing.
      assert.deepEqual(await prune(0, 3, true), { last: 3, removed: { ...none, events: 1, deliveries: 1, attempts: 2 } });
      assert.deepEqual(await prune(3, 3, true), { last: 6, removed: { ...none, events: 1, deliveries: 2, attempts: 1 } });
      assert.deepEqual(await prune(6, 3, true), { last: 8, removed: none });
      assert.deepEqual(await prune(8, 3, true), { last: null, removed: none });
      assert.deepEqual(await store.read((tx) => tx.retention.newest()), newest);

      // The real thing, in one window.
      assert.deepEqual(await prune(0, 100, false), { last: 8, removed: { ...none, events: 2, deliveries: 3, attempts: 3 } });
      assert.deepEqual(await db.column('SELECT seq FROM events ORDER BY seq'), [2, 3, 4, 5, 7, 8]);
      assert.deepEqual(await db.column('SELECT id FROM deliveries ORDER BY id'), [2, 3, 4, 5, 8, 9]);
      assert.deepEqual(await db.column('SELECT id FROM delivery_attempts ORDER BY id'), [4]);
      assert.deepEqual(await store.read((tx) => tx.retention.newest()), { ...newest, oldestSeq: 2 });
      // Again: nothing left to remove.
      assert.deepEqual(await prune(0, 100, false), { last: 8, removed: none });

      // A replay of event 8's delivery queues a new one (d10, pending): the old delivery is no
      // longer the newest, but the event has a pending delivery and stays.
      await db.exec(`INSERT INTO deliveries (id, event_seq, org_id, ordering_key, status, attempts, next_attempt_at, created_at, updated_at) VALUES (10, 8, 'acme', 8, 'pending', 0, ${recent}, ${recent}, ${recent})`);
      const later = await store.read((tx) => tx.retention.newest());
      assert.equal(later.deliveryId, 10);
      assert.deepEqual(await prune(7, 100, false, later), { last: 8, removed: none });
      assert.deepEqual(await db.column('SELECT count(*) FROM deliveries WHERE event_seq = 8'), [2]);
    });

    test('retention: quarantined lines go oldest first, never the newest, in batches', async (t) => {
      const db = await backend.open(t);
      const { store } = db;
      // id: received_at. 6 is the newest row, old as it is.
      const rejects: Array<[id: number, receivedAt: number]> = [
        [1, 100],
        [2, 200],
        [3, 200],
        [4, 5_000],
        [5, 50],
        [6, 200],
      ];
      await db.exec(
        `INSERT INTO feed_rejects (id, source, position, line_bytes, raw, reason, detail, event_id, received_at) VALUES ${rejects
          .map(([id, receivedAt]) => `(${id}, 'feed.jsonl', ${id * 10}, 2, ${db.bytes('7b7d')}, 'invalid_json', 'bad', NULL, ${receivedAt})`)
          .join(', ')}`,
      );
      const newest = await store.read((tx) => tx.retention.newest());
      assert.equal(newest.rejectId, 6);
      assert.equal(await store.read((tx) => tx.retention.countRejects(1_000, newest.rejectId)), 4);
      assert.equal(await store.read((tx) => tx.retention.countRejects(150, newest.rejectId)), 2);
      // Oldest first, ties by id: 5 (50), 1 (100), then 2 (200) before 3 (200); 6 (200) is the newest and stays.
      assert.equal(await store.transaction((tx) => tx.retention.pruneRejects(1_000, newest.rejectId, 3), { durable: false }), 3);
      assert.deepEqual(await db.column('SELECT id FROM feed_rejects ORDER BY id'), [3, 4, 6]);
      assert.equal(await store.transaction((tx) => tx.retention.pruneRejects(1_000, newest.rejectId, 3)), 1);
      assert.equal(await store.transaction((tx) => tx.retention.pruneRejects(1_000, newest.rejectId, 3)), 0);
      assert.deepEqual(await db.column('SELECT id FROM feed_rejects ORDER BY id'), [4, 6]);
      assert.equal(await store.read((tx) => tx.retention.countRejects(1_000, newest.rejectId)), 0);
    });
  });
}

describe('PostgreSQL store: what only it has', () => {
  const open = async (t: TestContext, url?: string): Promise<{ store: PgStore; url: string }> => {
    const at = url ?? (await (await pgServer()).createDatabase());
    const store = await openPgStore(at, systemClock, { instance: INSTANCE, poolSize: 2 });
    t.after(() => store.close());
    return { store, url: at };
  };

  test('opening migrates once; the backend has no upkeep of its own; close can be called twice', async (t) => {
    const { store, url } = await open(t);
    assert.equal(store.backend, 'postgres');
    assert.equal(store.instance, INSTANCE);
    assert.deepEqual(store.migrated, { from: 0, to: PG_SCHEMA_VERSION });
    const again = await open(t, url);
    assert.deepEqual(again.store.migrated, { from: PG_SCHEMA_VERSION, to: PG_SCHEMA_VERSION });
    const upkeep = await store.upkeep(createLogger('silent'), { whileBusy: true });
    assert.equal(upkeep.canTrimHeap, false);
    assert.equal(upkeep.trimHeap(), false);
    upkeep.busy();
    await upkeep.stop();
    await again.store.close();
    await again.store.close();
    await assert.rejects(again.store.ping());
  });

  test('an empty instance name is refused before anything is opened', async () => {
    await assert.rejects(
      openPgStore('postgres://nobody@127.0.0.1:1/none', systemClock, { instance: '' }),
      (err: unknown) => err instanceof HookrelayError && err.code === ErrorCode.config && /instance\.name is empty/.test(err.message),
    );
  });

  test('a server that cannot be reached fails the open, with the pool closed', async () => {
    await assert.rejects(openPgStore('postgres://nobody@127.0.0.1:1/none?sslmode=disable&connect_timeout=2', systemClock, { instance: INSTANCE }), /ECONNREFUSED/);
  });

  test('feed: instances on one database keep their own sources, positions and counts, and share events and quarantined lines', async (t) => {
    const { store: mine, url } = await open(t);
    const theirs = await openPgStore(url, systemClock, { instance: 'other-host', poolSize: 2 });
    t.after(() => theirs.close());
    assert.equal(theirs.instance, 'other-host');

    // The same path on two hosts is two sources.
    const mySource = await mine.transaction((tx) => tx.feed.sourceId('/var/log/feed.jsonl'));
    const theirSource = await theirs.transaction((tx) => tx.feed.sourceId('/var/log/feed.jsonl'));
    assert.notEqual(mySource, theirSource);
    assert.equal(await mine.transaction((tx) => tx.feed.sourceId('/var/log/feed.jsonl')), mySource);
    assert.equal(await theirs.transaction((tx) => tx.feed.sourceId('/var/log/feed.jsonl')), theirSource);
    assert.notEqual(await mine.transaction((tx) => tx.feed.sourceId('api')), await theirs.transaction((tx) => tx.feed.sourceId('api')));

    // Positions and counts: each sees its own only.
    const position: FeedPosition = { source: '/var/log/feed.jsonl', dev: '1', ino: '2', fingerprint: 'f'.repeat(64), fingerprintBytes: 10, position: 100, tailFingerprint: null };
    await mine.transaction(async (tx) => {
      await tx.feed.savePosition(position, 1000);
      await tx.feed.addStats('/var/log/feed.jsonl', 3, 1, 0, 1000);
    });
    assert.equal(await theirs.read((tx) => tx.feed.getPosition('/var/log/feed.jsonl')), null);
    assert.deepEqual(await theirs.read((tx) => tx.feed.stats()), []);
    await theirs.transaction(async (tx) => {
      await tx.feed.savePosition({ ...position, position: 7 }, 2000);
      await tx.feed.addStats('/var/log/feed.jsonl', 1, 0, 0, 2000);
    });
    assert.equal((await mine.read((tx) => tx.feed.getPosition('/var/log/feed.jsonl')))?.position, 100);
    assert.equal((await theirs.read((tx) => tx.feed.getPosition('/var/log/feed.jsonl')))?.position, 7);
    assert.deepEqual(await mine.read((tx) => tx.feed.stats()), [{ source: '/var/log/feed.jsonl', accepted: 3, duplicates: 1, quarantined: 0, updatedAt: 1000 }]);
    assert.deepEqual(await theirs.read((tx) => tx.feed.stats()), [{ source: '/var/log/feed.jsonl', accepted: 1, duplicates: 0, quarantined: 0, updatedAt: 2000 }]);

    // Events: one id is stored once, whichever instance reads it first.
    const [mine1] = (await storeEvents(mine, [feedEvent('evt_shared', 'acme', '"status":"mine","previous_status":null')], 3000, '/var/log/feed.jsonl')).seqs;
    const theirBatch = await storeEvents(theirs, [feedEvent('evt_shared', 'acme', '"status":"theirs","previous_status":null'), feedEvent('evt_theirs', 'globex')], 1000, '/var/log/feed.jsonl');
    assert.equal(theirBatch.at, 3000, 'never before the newest event, whoever stored it');
    assert.equal(theirBatch.seqs[0], null);
    assert.ok(seqOf(theirBatch.seqs[1]) > seqOf(mine1));
    assert.equal((await theirs.read((tx) => tx.feed.storedEvents(['evt_shared']))).get('evt_shared')?.payload, '"status":"mine","previous_status":null');
    assert.deepEqual(await mine.read((tx) => tx.feed.undeliverableByOrg()), [
      { orgId: 'acme', events: 1 },
      { orgId: 'globex', events: 1 },
    ]);
    assert.deepEqual(await mine.read((tx) => tx.feed.seqRange(3000, 3001)), await theirs.read((tx) => tx.feed.seqRange(3000, 3001)));

    // Quarantined lines are shared too (their source names the file, not the instance).
    await theirs.transaction((tx) =>
      tx.feed.insertRejects([{ source: '/var/log/feed.jsonl', position: 7, lineBytes: 1, raw: Buffer.from('x'), reason: 'invalid_json', detail: 'bad', eventId: null, receivedAt: 3000 }]),
    );
    assert.deepEqual(
      (await mine.read((tx) => tx.feed.listRejects(0, 10))).map((r) => r.detail),
      ['bad'],
    );
  });

  test('feed: events inserted by two instances at the same time end with received_at non-decreasing along seq', async (t) => {
    const { store: first, url } = await open(t);
    const second = await openPgStore(url, systemClock, { instance: 'other-host', poolSize: 2 });
    t.after(() => second.close());
    const pool = createPgPool(url, { max: 1 });
    t.after(() => pool.end());
    // Every transaction starts before any commits, each with a clock earlier than the one
    // before it: without a lock, the later seqs would get the earlier times.
    const rounds = 3;
    const perRound = 6;
    for (let round = 0; round < rounds; round++) {
      await Promise.all(
        Array.from({ length: perRound }, (_, i) =>
          (i % 2 === 0 ? first : second).transaction(async (tx) => {
            const now = await tx.feed.receivedAt(1_000_000 * (round + 1) - i * 1000);
            const source = await tx.feed.sourceId('feed.jsonl');
            // Another round trip between reading the time and inserting, as ingest has (legacyEvents, sourceId).
            await tx.orgs.list();
            const events = Array.from({ length: 5 }, (_, k) => feedEvent(`evt_${round}_${i}_${k}`));
            return tx.feed.insertEvents(events, source, now);
          }),
        ),
      );
    }
    const { rows } = await pool.query<{ seq: number; received_at: number }>('SELECT seq, received_at FROM events ORDER BY seq');
    assert.equal(rows.length, rounds * perRound * 5);
    const decreases = rows.filter((r, i) => i > 0 && r.received_at < rows[i - 1]!.received_at);
    assert.deepEqual(decreases, [], 'received_at never decreases along seq');
  });

  test('a read transaction cannot write', async (t) => {
    const { store } = await open(t);
    await assert.rejects(
      store.read((tx) => tx.orgs.insert({ id: 'acme', name: 'Acme', createdAt: 1 })),
      (err: unknown) => (err as pg.DatabaseError).code === '25006',
    );
    assert.equal(await store.read((tx) => tx.orgs.get('acme')), null);
  });

  test('a connection that breaks in the middle of a transaction fails that transaction only, and is not used again', async (t) => {
    const { store, url } = await open(t);
    const admin = createPgPool(url, { max: 1 });
    t.after(() => admin.end());
    const database = new URL(url).pathname.slice(1);
    const killed = store.transaction(async (tx) => {
      await tx.orgs.insert({ id: 'acme', name: 'Acme', createdAt: 1 });
      // An administrator (or a failover) ends the session that holds this transaction.
      const ended = await admin.query<{ ended: boolean }>(
        "SELECT pg_terminate_backend(pid) AS ended FROM pg_stat_activity WHERE datname = $1 AND application_name = 'hookrelay' AND state = 'idle in transaction'",
        [database],
      );
      assert.deepEqual(
        ended.rows.map((r) => r.ended),
        [true],
      );
      await tx.orgs.insert({ id: 'globex', name: 'Globex', createdAt: 1 });
    });
    // pg fails the next statement: with the server's message, or its own once it has seen the connection close.
    await assert.rejects(killed, /terminat|not queryable/i);
    // Every later transaction gets a working connection, and nothing of the broken one was kept.
    for (let i = 0; i < 4; i++) assert.deepEqual(await store.read((tx) => tx.orgs.list()), []);
    assert.equal(await store.transaction((tx) => tx.orgs.insert({ id: 'acme', name: 'Acme', createdAt: 2 })), true);
    await store.ping();
  });
});

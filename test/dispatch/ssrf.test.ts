/**
 * SSRF: without delivery.allowNetworks, webhook URLs that point at the operator's own machine
 * or network, in any spelling, are refused before any connection is made, on every attempt,
 * and the refusal is recorded on the delivery (error class and the address refused). The
 * receiver is a real HTTPS server on 127.0.0.1 that counts every TCP connection it accepts.
 */
import assert from 'node:assert/strict';
import { lookup } from 'node:dns/promises';
import { hostname } from 'node:os';
import { test } from 'node:test';
import type { SqliteStore as Store } from '../../src/store/sqlite/store.ts';
import { call, seedOrg, startRelay } from '../helpers/helpers.ts';
import { appendFeed, attemptsOf, createTestTls, FAST_DELIVERY, feedLine, startReceiver, waitForDelivery } from '../helpers/receivers.ts';
import { repos } from '../helpers/sqlite-repos.ts';
import { BY_TEST } from '../helpers/audit-helpers.ts';

/** The machine's own host name when it resolves only to loopback addresses (as in /etc/hosts on many hosts), else null. */
async function loopbackHostname(): Promise<string | null> {
  const name = hostname();
  try {
    const addresses = await lookup(name, { all: true });
    return addresses.length > 0 && addresses.every((a) => a.address.startsWith('127.') || a.address === '::1') ? name : null;
  } catch {
    return null;
  }
}

/** A webhook as a version of hookrelay that did not check URLs at registration stored it. */
function registeredBeforeTheCheck(store: Store, orgId: string, url: string): void {
  repos(store).webhooks.upsert(orgId, url, false, null, Date.now());
}

test('without allowNetworks, loopback and metadata URLs in every spelling are refused before connecting, and the refusal is recorded', async (t) => {
  const tls = createTestTls(t);
  // No delivery.allowNetworks: the operator has allowed nothing.
  const relay = await startRelay(t, { 'delivery.caFile': tls.caFile, ...FAST_DELIVERY, 'delivery.retrySchedule': '1s' });
  assert.deepEqual(relay.config.delivery.allowNetworks, []);
  const receiver = await startReceiver(t, tls);
  const port = receiver.port;

  const cases: Array<{ url: string; names: RegExp }> = [
    // A name's refusal does not say which address it resolved to (the log is the tenant's to read).
    { url: `https://localhost:${port}/hook`, names: /^localhost resolves to an address in a refused range \(loopback\); allow its network/ },
    { url: `https://127.1:${port}/hook`, names: /^127\.0\.0\.1 is in a refused range \(loopback\)/ },
    { url: `https://2130706433:${port}/hook`, names: /^127\.0\.0\.1 is in a refused range \(loopback\)/ },
    { url: `https://0x7f.0.0.1:${port}/hook`, names: /^127\.0\.0\.1 is in a refused range \(loopback\)/ },
    { url: `https://127.0.0.1:${port}/hook`, names: /^127\.0\.0\.1 is in a refused range \(loopback\)/ },
    { url: `https://[::ffff:127.0.0.1]:${port}/hook`, names: /^::ffff:7f00:1 is in a refused range \(loopback\)/ },
    { url: `https://[::1]:${port}/hook`, names: /^::1 is in a refused range \(.*loopback/ },
    { url: `https://[::ffff:0:7f00:1]:${port}/hook`, names: /^::ffff:0:7f00:1 is in a refused range \(IPv4-translated \(127\.0\.0\.1: loopback\)\)/ },
    { url: 'https://[::ffff:0:a9fe:a9fe]/latest/meta-data/', names: /^::ffff:0:a9fe:a9fe is in a refused range \(IPv4-translated \(169\.254\.169\.254: link-local/ },
    { url: `https://[64:ff9b::7f00:1]:${port}/hook`, names: /^64:ff9b::7f00:1 is in a refused range \(NAT64 \(127\.0\.0\.1: loopback\)\)/ },
    { url: `https://0.0.0.0:${port}/hook`, names: /^0\.0\.0\.0 is in a refused range \(unspecified/ },
    { url: 'https://169.254.169.254/latest/meta-data/', names: /^169\.254\.169\.254 is in a refused range \(link-local \(cloud metadata\)\)/ },
    { url: 'https://[::ffff:a9fe:a9fe]/latest/meta-data/', names: /^::ffff:a9fe:a9fe is in a refused range \(link-local \(cloud metadata\)\)/ },
  ];
  const own = await loopbackHostname();
  if (own !== null) cases.push({ url: `https://${own}:${port}/hook`, names: new RegExp(`^${own.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')} resolves to an address in a refused range \\(loopback\\)`) });
  else t.diagnostic(`${hostname()} does not resolve to loopback here; the own-hostname case is covered by localhost`);

  const { admin } = await seedOrg(relay.services, 'ssrf-0');
  for (const [i, { url }] of cases.entries()) {
    const orgId = `ssrf-${i}`;
    if (i > 0) await seedOrg(relay.services, orgId);
    // Registration refuses every one of them now (see the tests below); these stand for
    // webhooks registered before it did, or names whose DNS changed since: each attempt checks.
    await assert.rejects(relay.services.webhooks.register(BY_TEST, orgId, { webhook_url: url }), { code: 'webhook_url_not_allowed' }, url);
    registeredBeforeTheCheck(relay.store, orgId, url);
  }
  appendFeed(
    relay.config.feed.path,
    cases.map((_, i) => feedLine(`ssrf-${i}`, `evt_ssrf_${i}`)),
  );

  for (const [i, { url, names }] of cases.entries()) {
    // Refused on the first attempt and again on the retry (each attempt checks anew), then dead.
    const dead = await waitForDelivery(relay.store, `ssrf-${i}`, `evt_ssrf_${i}`, (d) => d.status === 'dead', `${url} to be refused twice`);
    const attempts = attemptsOf(relay.store, dead.id);
    assert.equal(attempts.length, 2, url);
    for (const a of attempts) {
      assert.equal(a.errorClass, 'blocked_address', `${url}: ${a.errorClass} ${a.errorDetail}`);
      assert.match(a.errorDetail ?? '', names, url);
      assert.match(a.errorDetail ?? '', /delivery\.allowNetworks/);
      assert.equal(a.statusCode, null);
      assert.equal(a.responseBody, null);
      assert.equal(a.url, url);
    }
    assert.match(dead.lastError ?? '', names, `${url}: the refusal is not on the delivery`);
  }
  assert.equal(receiver.connections(), 0, 'a refused URL reached the receiver');
  assert.equal(receiver.requests.length, 0);

  // The log shows it through the API too.
  const token = relay.token('ssrf-0', admin);
  const list = await call(relay.baseUrl, 'GET', '/webhook/deliveries', { token });
  const detail = await call(relay.baseUrl, 'GET', `/webhook/deliveries/${list.body.data[0].id}`, { token });
  assert.equal(detail.status, 200, detail.text);
  assert.equal(detail.body.status, 'dead');
  assert.equal(detail.body.attempt_log[0].error, 'blocked_address');
  assert.match(detail.body.attempt_log[0].error_detail, cases[0]!.names);
});

test('allowNetworks opens only what it lists: 127.0.0.1/32 reaches the receiver by IP, not through other loopback addresses', async (t) => {
  const tls = createTestTls(t);
  const relay = await startRelay(t, { 'delivery.caFile': tls.caFile, 'delivery.allowNetworks': '127.0.0.1/32', ...FAST_DELIVERY, 'delivery.retrySchedule': '1s' });
  const receiver = await startReceiver(t, tls);
  const cases = {
    'org-ip': `https://127.0.0.1:${receiver.port}/hook`,
    'org-name': `https://localhost:${receiver.port}/hook`,
    'org-other': `https://127.0.0.2:${receiver.port}/hook`,
  };
  for (const [orgId, url] of Object.entries(cases)) {
    await seedOrg(relay.services, orgId);
    if (orgId === 'org-ip') await relay.services.webhooks.register(BY_TEST, orgId, { webhook_url: url });
    else {
      // Refused at registration as well: registered before the check, they are refused at delivery.
      await assert.rejects(relay.services.webhooks.register(BY_TEST, orgId, { webhook_url: url }), { code: 'webhook_url_not_allowed' }, url);
      registeredBeforeTheCheck(relay.store, orgId, url);
    }
  }
  appendFeed(
    relay.config.feed.path,
    Object.keys(cases).map((orgId) => feedLine(orgId, `evt_${orgId}`)),
  );
  await waitForDelivery(relay.store, 'org-ip', 'evt_org-ip', (d) => d.status === 'delivered', 'the allowed address');
  const other = await waitForDelivery(relay.store, 'org-other', 'evt_org-other', (d) => d.attempts >= 1, 'the other loopback address');
  assert.equal(attemptsOf(relay.store, other.id)[0]!.errorClass, 'blocked_address');
  // localhost may also resolve to ::1, which is not allowed: then the whole name is refused.
  const byName = await waitForDelivery(relay.store, 'org-name', 'evt_org-name', (d) => d.attempts >= 1, 'localhost');
  const first = attemptsOf(relay.store, byName.id)[0]!;
  const v6 = (await lookup('localhost', { all: true })).some((a) => a.family === 6);
  if (v6) assert.equal(first.errorClass, 'blocked_address');
  else assert.equal(first.statusCode, 200);
  const reached = receiver.requests.map((r) => r.headers['webhook-id']);
  assert.ok(reached.includes('evt_org-ip'));
  assert.ok(!reached.includes('evt_org-other'), '127.0.0.2 is outside 127.0.0.1/32');
});

test('IPv6 outside global unicast, its documentation range 3fff::/20 and the IPv4-translated form are refused at delivery too, before connecting (issue 31)', async (t) => {
  const relay = await startRelay(t, { ...FAST_DELIVERY, 'delivery.retrySchedule': '1h' });
  const cases: ReadonlyArray<readonly [string, RegExp]> = [
    ['3fff::1', /^3fff::1 is in a refused range \(documentation\)/],
    ['4000::1', /^4000::1 is in a refused range \(not global unicast \(outside 2000::\/3\)\)/],
    ['1::1', /^1::1 is in a refused range \(not global unicast/],
    ['::ffff:0:808:808', /^::ffff:0:808:808 is in a refused range \(IPv4-translated \(8\.8\.8\.8\), not a receiver's address\)/],
  ];
  for (const [i, [address]] of cases.entries()) {
    await seedOrg(relay.services, `v6-${i}`);
    registeredBeforeTheCheck(relay.store, `v6-${i}`, `https://[${address}]/hook`);
  }
  appendFeed(relay.config.feed.path, cases.map((_, i) => feedLine(`v6-${i}`, `evt_v6_${i}`)));
  for (const [i, [address, words]] of cases.entries()) {
    const tried = await waitForDelivery(relay.store, `v6-${i}`, `evt_v6_${i}`, (d) => d.attempts >= 1, `${address} to be attempted`);
    const [attempt] = attemptsOf(relay.store, tried.id);
    assert.equal(attempt!.errorClass, 'blocked_address', `${address}: ${attempt!.errorClass} ${attempt!.errorDetail}`);
    assert.match(attempt!.errorDetail ?? '', words, address);
  }
});

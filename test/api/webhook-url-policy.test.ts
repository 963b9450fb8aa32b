/**
 * The URL policy at registration (issue 11): a webhook URL that points at the operator's own
 * machine or network, in any notation, is refused with 422 `webhook_url_not_allowed` and a
 * reason code, and nothing changes; names are resolved and every address checked (in a network
 * namespace of its own with its own hosts file, through the real CLI); `delivery.allowNetworks`
 * opens what it lists. The same policy at delivery is tested in delivery-ssrf.test.ts.
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { promisify } from 'node:util';
import { loadConfig } from '../../src/config/load.ts';
import { createAddressPolicy, embeddedIpv4, ipv6Groups } from '../../src/domain/address-policy.ts';
import { CLI } from '../helpers/feed-helpers.ts';
import { call, seedOrg, startRelay, tempDir } from '../helpers/helpers.ts';
import { appendFeed, attemptsOf, createTestTls, FAST_DELIVERY, feedLine, startReceiver, waitForDelivery } from '../helpers/receivers.ts';
import { repos } from '../helpers/sqlite-repos.ts';
import { BY_TEST } from '../helpers/audit-helpers.ts';

const execFileAsync = promisify(execFile);

/** [URL, reason code] */
const REFUSED: ReadonlyArray<readonly [string, string]> = [
  ['https://127.0.0.1/', 'loopback_address'],
  ['https://localhost/', 'loopback_address'],
  ['https://LOCALHOST./hook', 'loopback_address'],
  ['https://hooks.localhost/', 'loopback_address'],
  ['https://127.1/', 'loopback_address'],
  ['https://2130706433/', 'loopback_address'],
  ['https://0x7f.0.0.1/', 'loopback_address'],
  ['https://0177.0.0.1/', 'loopback_address'],
  ['https://[::1]/', 'loopback_address'],
  ['https://[::ffff:127.0.0.1]/', 'loopback_address'],
  ['https://[::ffff:0:7f00:1]/', 'loopback_address'],
  ['https://[64:ff9b::7f00:1]/', 'loopback_address'],
  ['https://10.1.2.3/', 'private_address'],
  ['https://0xa.1.2.3/', 'private_address'],
  ['https://172.16.0.1/', 'private_address'],
  ['https://192.168.1.1/', 'private_address'],
  ['https://100.64.0.1/', 'private_address'],
  ['https://[fd00::1]/', 'private_address'],
  ['https://[::ffff:0:a01:203]/', 'private_address'],
  ['https://169.254.169.254/latest/meta-data/', 'link_local_address'],
  ['https://[::ffff:0:a9fe:a9fe]/', 'link_local_address'],
  ['https://[::ffff:a9fe:a9fe]/', 'link_local_address'],
  ['https://[64:ff9b::169.254.169.254]/', 'link_local_address'],
  ['https://[fe80::1]/', 'link_local_address'],
  ['https://0.0.0.0/', 'reserved_address'],
  ['https://224.0.0.1/', 'reserved_address'],
  ['https://[2002:7f00:1::1]/', 'reserved_address'],
  ['https://[2001:0:4136:e378:8000:63bf:3fff:fdd2]/', 'reserved_address'],
  ['https://[64:ff9b:1::a00:1]/', 'reserved_address'],
  ['https://[::127.0.0.1]/', 'reserved_address'],
  ['http://hooks.example.com/in', 'scheme_not_allowed'],
  ['ftp://hooks.example.com/in', 'scheme_not_allowed'],
  ['https://user:pass@hooks.example.com/in', 'credentials_not_allowed'],
  ['https://user@hooks.example.com/in', 'credentials_not_allowed'],
];

test('registration refuses every internal target in every notation with 422 webhook_url_not_allowed and its reason, and changes nothing', async (t) => {
  const relay = await startRelay(t);
  const { admin } = await seedOrg(relay.services, 'acme');
  const token = relay.token('acme', admin);
  // A name that does not resolve here reaches nothing: it is accepted, and every attempt checks it again.
  const first = await call(relay.baseUrl, 'POST', '/webhook/register_webhook', { token, body: { webhook_url: 'https://hooks.example.com/in' } });
  assert.equal(first.status, 201, first.text);
  const before = await call(relay.baseUrl, 'GET', '/webhook/get_webhook', { token });

  for (const [url, reason] of REFUSED) {
    const res = await call(relay.baseUrl, 'POST', '/webhook/register_webhook', { token, body: { webhook_url: url, active_hmac: false } });
    assert.equal(res.status, 422, `${url}: ${res.text}`);
    assert.equal(res.body.code, 'webhook_url_not_allowed', url);
    assert.equal(res.body.reason, reason, `${url}: ${res.text}`);
    assert.equal(res.body.invalid_params[0].name, 'webhook_url');
    assert.match(res.body.detail, /^webhook_url must/, url);
  }
  const after = await call(relay.baseUrl, 'GET', '/webhook/get_webhook', { token });
  assert.deepEqual(after.body, before.body, 'a refused registration changed the webhook');
  assert.equal(after.body.active_hmac, true);
});

test('delivery.allowNetworks opens exactly what it lists at registration too; public addresses are accepted', async (t) => {
  const relay = await startRelay(t, { 'delivery.allowNetworks': '10.0.0.0/8,fd00:1::/32' });
  const { admin } = await seedOrg(relay.services, 'acme');
  const token = relay.token('acme', admin);
  const register = (url: string) => call(relay.baseUrl, 'POST', '/webhook/register_webhook', { token, body: { webhook_url: url } });
  for (const url of ['https://10.1.2.3/hook', 'https://[::ffff:10.1.2.3]/hook', 'https://[fd00:1::5]/hook', 'https://93.184.216.34/hook', 'https://[2606:4700:4700::1111]/hook', 'https://[64:ff9b::808:808]/hook']) {
    const res = await register(url);
    assert.ok(res.status === 200 || res.status === 201, `${url}: ${res.text}`);
  }
  // The IPv4-translated form is refused whatever it carries (issue 31), an allowed network included.
  for (const url of ['https://11.0.0.1/', 'https://172.16.0.1/', 'https://[fd00:2::5]/', 'https://127.0.0.1/', 'https://[::ffff:0:a01:203]/hook']) {
    const res = await register(url);
    if (url === 'https://11.0.0.1/') assert.equal(res.status, 200, `${url} is public: ${res.text}`);
    else assert.equal(res.status, 422, `${url}: ${res.text}`);
  }
});

test('names are resolved at registration and every address checked; the answer does not say where a name points (the real CLI, in a network namespace with its own hosts file)', async (t) => {
  const dir = tempDir(t);
  const hosts = join(dir, 'hosts');
  writeFileSync(
    hosts,
    [
      '127.0.0.1 localhost',
      '10.20.30.40 billing.internal.example',
      '169.254.169.254 metadata.internal.example',
      '93.184.216.34 receiver.public.example',
      // One public and one private address: the name is refused (a connection could go to either).
      '93.184.216.35 mixed.example',
      'fd00::7 mixed.example',
    ].join('\n') + '\n',
  );
  const stateDir = join(dir, 'state');
  // The CLI runs with its own network stack (nothing leaves it) and /etc/hosts replaced inside it.
  const cli = async (...args: string[]) => {
    try {
      const { stdout, stderr } = await execFileAsync('unshare', ['-m', '-n', 'sh', '-c', 'mount --bind "$0" /etc/hosts && ip link set lo up && exec "$@"', hosts, process.execPath, CLI, ...args, '--state-dir', stateDir], { encoding: 'utf8' });
      return { code: 0, stdout, stderr };
    } catch (err) {
      const e = err as { code: number; stdout: string; stderr: string };
      return { code: e.code, stdout: e.stdout, stderr: e.stderr };
    }
  };
  assert.equal((await cli('migrate')).code, 0);
  assert.equal((await cli('orgs', 'add', 'acme')).code, 0);
  for (const [name, words] of [
    ['billing.internal.example', /must not point at a private address: billing\.internal\.example resolves to one/],
    ['metadata.internal.example', /must not point at a link-local address .*: metadata\.internal\.example resolves to one/],
    ['mixed.example', /must not point at a private address: mixed\.example resolves to one/],
  ] as const) {
    const r = await cli('webhook', 'set', '--org', 'acme', '--url', `https://${name}/hook`);
    assert.notEqual(r.code, 0, `${name} was accepted: ${r.stdout}`);
    assert.match(r.stderr, words, r.stderr);
    assert.doesNotMatch(r.stderr, /10\.20\.30\.40|169\.254\.169\.254|fd00::7/, 'the answer names the address a name resolves to');
  }
  assert.match((await cli('webhook', 'get', '--org', 'acme')).stderr, /no webhook/, 'a refused registration stored something');
  const ok = await cli('webhook', 'set', '--org', 'acme', '--url', 'https://receiver.public.example/hook');
  assert.equal(ok.code, 0, ok.stderr);
  assert.match(ok.stdout, /registered https:\/\/receiver\.public\.example\/hook for acme/);
});

test('address policy: embedded IPv4 forms are found and judged by the IPv4 address; other IPv6 addresses are not', () => {
  assert.deepEqual(ipv6Groups('::ffff:1.2.3.4'), [0, 0, 0, 0, 0, 0xffff, 0x0102, 0x0304]);
  assert.deepEqual(ipv6Groups('64:ff9b::1.2.3.4'), [0x64, 0xff9b, 0, 0, 0, 0, 0x0102, 0x0304]);
  assert.deepEqual(ipv6Groups('fe80::1%eth0'), [0xfe80, 0, 0, 0, 0, 0, 0, 1]);
  assert.equal(ipv6Groups('1.2.3.4'), null);
  assert.deepEqual(embeddedIpv4('::ffff:0:7f00:1'), { form: 'IPv4-translated', ipv4: '127.0.0.1' });
  assert.deepEqual(embeddedIpv4('0:0:0:0:ffff:0:a9fe:a9fe'), { form: 'IPv4-translated', ipv4: '169.254.169.254' });
  assert.deepEqual(embeddedIpv4('::FFFF:7F00:1'), { form: 'IPv4-mapped', ipv4: '127.0.0.1' });
  assert.deepEqual(embeddedIpv4('64:ff9b::a00:1'), { form: 'NAT64', ipv4: '10.0.0.1' });
  for (const other of ['2606:4700::1111', '::1', '::', '2002:7f00:1::1', '64:ff9b:1::a00:1', 'ffff::7f00:1']) assert.equal(embeddedIpv4(other), null, other);
  const policy = createAddressPolicy([]);
  assert.deepEqual(policy.refusal('::ffff:0:7f00:1'), { category: 'loopback_address', label: 'IPv4-translated (127.0.0.1: loopback)' });
  assert.deepEqual(policy.refusal('::ffff:0:808:808'), { category: 'reserved_address', label: "IPv4-translated (8.8.8.8), not a receiver's address" });
  assert.equal(policy.refusal('::ffff:808:808'), null, 'IPv4-mapped: the IPv4 address itself');
  assert.equal(policy.refusal('64:ff9b::808:808'), null, 'a public address behind the well-known NAT64 prefix');
  assert.deepEqual(policy.refusal('fe80::1%eth0'), { category: 'link_local_address', label: 'link-local' });
});

test('delivery.organizationNetworks grants an internal network to one organization: it registers and delivers there, its log keeps the status and size but not the body; other organizations are refused', async (t) => {
  const tls = createTestTls(t);
  const relay = await startRelay(t, { 'delivery.caFile': tls.caFile, 'delivery.organizationNetworks': 'acme=127.0.0.1/32,keeper=127.0.0.1/32', 'delivery.storeInternalResponses': 'keeper', ...FAST_DELIVERY, 'delivery.retrySchedule': '1s' });
  const receiver = await startReceiver(t, tls, () => ({ status: 200, body: 'internal service says: db password is hunter2' }));
  for (const orgId of ['acme', 'keeper', 'globex']) await seedOrg(relay.services, orgId);

  await relay.services.webhooks.register(BY_TEST, 'acme', { webhook_url: receiver.url });
  await relay.services.webhooks.register(BY_TEST, 'keeper', { webhook_url: receiver.url });
  await assert.rejects(relay.services.webhooks.register(BY_TEST, 'globex', { webhook_url: receiver.url }), { code: 'webhook_url_not_allowed', details: { reason: 'loopback_address' } });
  // Registered before the check (or pointed there by DNS later): refused at delivery too.
  repos(relay.store).webhooks.upsert('globex', receiver.url, false, null, Date.now());

  appendFeed(relay.config.feed.path, [feedLine('acme', 'evt_acme'), feedLine('keeper', 'evt_keeper'), feedLine('globex', 'evt_globex')]);
  const acme = await waitForDelivery(relay.store, 'acme', 'evt_acme', (d) => d.status === 'delivered', 'acme delivered');
  const keeper = await waitForDelivery(relay.store, 'keeper', 'evt_keeper', (d) => d.status === 'delivered', 'keeper delivered');
  const globex = await waitForDelivery(relay.store, 'globex', 'evt_globex', (d) => d.attempts >= 1, 'globex attempted');

  const [acmeAttempt] = attemptsOf(relay.store, acme.id);
  assert.equal(acmeAttempt!.statusCode, 200);
  assert.equal(acmeAttempt!.responseBody, '(not stored: 45 bytes from a receiver on an internal network; the operator can keep them with delivery.storeInternalResponses)');
  assert.equal(attemptsOf(relay.store, keeper.id)[0]!.responseBody, 'internal service says: db password is hunter2');
  const [globexAttempt] = attemptsOf(relay.store, globex.id);
  assert.equal(globexAttempt!.errorClass, 'blocked_address');
  assert.match(globexAttempt!.errorDetail ?? '', /^127\.0\.0\.1 is in a refused range \(loopback\)/);
  assert.deepEqual(
    receiver.requests.map((r) => r.headers['webhook-id']).sort(),
    ['evt_acme', 'evt_keeper'],
  );

  // Through the API, the tenant sees the status and the size, not what the internal service said.
  const token = relay.token('acme', 'admin@acme.test');
  const list = await call(relay.baseUrl, 'GET', '/webhook/deliveries', { token });
  const detail = await call(relay.baseUrl, 'GET', `/webhook/deliveries/${list.body.data[0].id}`, { token });
  assert.equal(detail.body.attempt_log[0].status_code, 200);
  assert.doesNotMatch(detail.text, /hunter2/);
});

test('delivery.organizationNetworks and storeInternalResponses refuse entries that are not ORG=CIDR or organization ids', () => {
  for (const [key, value, words] of [
    ['delivery.organizationNetworks', 'acme', /"ORG=CIDR" entries such as "acme=10\.20\.0\.0\/16"; got "acme"/],
    ['delivery.organizationNetworks', 'acme=10.0.0.0/33', /got "acme=10\.0\.0\.0\/33"/],
    ['delivery.organizationNetworks', '=10.0.0.0/8', /got "=10\.0\.0\.0\/8"/],
    ['delivery.storeInternalResponses', 'not an id', /must list organization ids; got "not an id"/],
  ] as const) {
    assert.throws(() => loadConfig({ env: {}, overrides: { [key]: value } }), { code: 'invalid_config', message: words }, `${key}=${value}`);
  }
  assert.deepEqual(loadConfig({ env: { HOOKRELAY_DELIVERY_ORGANIZATION_NETWORKS: 'acme=10.20.0.0/16,acme=fd00:1::/32' }, overrides: {} }).delivery.organizationNetworks, ['acme=10.20.0.0/16', 'acme=fd00:1::/32']);
});

test('a refusal names the setting that would allow the target; localhost says that 127.0.0.1 and ::1 must both be allowed', async (t) => {
  const relay = await startRelay(t, { 'delivery.allowNetworks': '127.0.0.1/32' });
  const { admin } = await seedOrg(relay.services, 'acme');
  const token = relay.token('acme', admin);
  const register = (url: string) => call(relay.baseUrl, 'POST', '/webhook/register_webhook', { token, body: { webhook_url: url } });

  const localhost = await register('https://localhost:8443/hook');
  assert.equal(localhost.status, 422, localhost.text);
  assert.equal(localhost.body.reason, 'loopback_address');
  assert.match(localhost.body.detail, /localhost is this machine, 127\.0\.0\.1 and ::1 both, and 127\.0\.0\.1 is allowed but ::1 is not; use http\(s\):\/\/127\.0\.0\.1:PORT\/ instead/);
  assert.match(localhost.body.detail, /delivery\.organizationNetworks \["acme=127\.0\.0\.1\/32","acme=::1\/128"\] \(or for all with delivery\.allowNetworks\)/);

  const literal = await register('https://10.1.2.3/hook');
  assert.equal(literal.status, 422, literal.text);
  assert.match(literal.body.detail, /10\.1\.2\.3 is in a refused range \(private.*\); if this receiver is meant to be internal, the operator allows it for this organization with delivery\.organizationNetworks \["acme=10\.1\.2\.3\/32"\]/);

  const http = await register('http://127.0.0.1:8090/hook');
  assert.equal(http.status, 422, http.text);
  assert.match(http.body.detail, /must use the https scheme \(http only when the operator sets delivery\.allowHttp\)/);
  // What the messages point at works: 127.0.0.1 is allowed here, so its https URL registers.
  assert.equal((await register('https://127.0.0.1:8443/hook')).status, 201);
});

test('IPv6: only global unicast (2000::/3) less its special ranges may be registered; documentation 3fff::/20, 4000::/2, 1::/16 and the IPv4-translated form are refused (issue 31)', async (t) => {
  const policy = createAddressPolicy([]);
  const refused: ReadonlyArray<readonly [string, string, string]> = [
    ['3fff::1', 'reserved_address', 'documentation'],
    ['3fff:fff:ffff::1', 'reserved_address', 'documentation'],
    ['2001:db8::1', 'reserved_address', 'documentation'],
    ['2001:2::1', 'reserved_address', 'IETF protocol assignments'],
    ['4000::1', 'reserved_address', 'not global unicast (outside 2000::/3)'],
    ['7fff::1', 'reserved_address', 'not global unicast (outside 2000::/3)'],
    ['5f00::1', 'reserved_address', 'not global unicast (outside 2000::/3)'],
    ['1::1', 'reserved_address', 'not global unicast (outside 2000::/3)'],
    ['1:ffff::1', 'reserved_address', 'not global unicast (outside 2000::/3)'],
    ['8000::1', 'reserved_address', 'not global unicast (outside 2000::/3)'],
    ['::ffff:0:808:808', 'reserved_address', "IPv4-translated (8.8.8.8), not a receiver's address"],
    ['::ffff:0:5db8:d822', 'reserved_address', "IPv4-translated (93.184.216.34), not a receiver's address"],
    ['fc00::1', 'private_address', 'unique-local'],
    ['fe80::1', 'link_local_address', 'link-local'],
    ['ff02::1', 'reserved_address', 'multicast'],
  ];
  for (const [address, category, label] of refused) assert.deepEqual(policy.refusal(address), { category, label }, address);
  for (const address of ['2606:4700:4700::1111', '2a00:1450:4001::1', '2001:4860:4860::8888', '3ffe::1', '3fff:1000::1', '2c0f:fb50::1', '64:ff9b::5db8:d822', '::ffff:93.184.216.34']) {
    assert.equal(policy.refusal(address), null, address);
  }

  const relay = await startRelay(t);
  const { admin } = await seedOrg(relay.services, 'acme');
  const token = relay.token('acme', admin);
  for (const [address, reason] of refused) {
    const res = await call(relay.baseUrl, 'POST', '/webhook/register_webhook', { token, body: { webhook_url: `https://[${address}]/hook` } });
    assert.equal(res.status, 422, `${address}: ${res.text}`);
    assert.equal(res.body.reason, reason, address);
  }
  const ok = await call(relay.baseUrl, 'POST', '/webhook/register_webhook', { token, body: { webhook_url: 'https://[2606:4700:4700::1111]/hook' } });
  assert.equal(ok.status, 201, ok.text);
});

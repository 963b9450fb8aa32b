/**
 * Deliveries through an egress proxy (delivery.proxy, issue 29): a real CONNECT proxy on
 * 127.0.0.1 written here (test/helpers/receivers.ts startConnectProxy), real HTTPS receivers behind a
 * test CA, the real relay. Every delivery goes through a tunnel and arrives signed, with the
 * webhook's headers, on first attempts and retries; the proxy's credentials and the headers'
 * credential values appear in no log line, answer or attempt; the proxy's refusals and its
 * absence are clear, retryable attempt errors. Names (a name resolving to a refused address
 * never reaches the proxy; the proxy asked for the address or for the name) need a hosts file
 * of their own: delivery-proxy-names.inner.ts, run in a network namespace by the last test.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { createServer as createNetServer, type AddressInfo } from 'node:net';
import { join } from 'node:path';
import { test, type TestContext } from 'node:test';
import { fileURLToPath } from 'node:url';
import { Webhook } from 'standardwebhooks';
import { createDeliverer, type Deliverer } from '../../src/dispatch/deliverer.ts';
import { createNetworkPolicies } from '../../src/domain/address-policy.ts';
import { systemClock } from '../../src/domain/clock.ts';
import { createEgressProxies } from '../../src/domain/egress-proxy.ts';
import { AttemptError } from '../../src/domain/retry-policy.ts';
import { createLogger } from '../../src/log.ts';
import { call, seedOrg, tempDir } from '../helpers/helpers.ts';
import { createTestTls, deliveriesOfEvent, feedLine, startConnectProxy, startDeliveryRig, startReceiver, waitForDelivery, type TestTls } from '../helpers/receivers.ts';

const PASSWORD = 'pr0xy-s3cret';
const TOKEN = 'sk_live_51Hheaders-credential';

function capture() {
  const lines: string[] = [];
  return { lines, stream: { write: (line: string) => void lines.push(line) } };
}

test('every delivery goes through the proxy in a tunnel to the checked address, signed and verified, with the webhook headers on first attempts and retries; no credential is echoed anywhere', async (t) => {
  const proxy = await startConnectProxy(t, { credentials: `relay:${PASSWORD}` });
  const log = capture();
  const rig = await startDeliveryRig(t, { 'delivery.proxy': `http://relay:${encodeURIComponent(PASSWORD)}@127.0.0.1:${proxy.port}` }, { log: createLogger('debug', log.stream) });
  // Each event fails once (503), then is delivered: a retry carries the headers too.
  const failedOnce = new Set<string>();
  const receiver = await startReceiver(t, rig.tls, (req) => {
    const id = req.headers['webhook-id'] as string;
    if (failedOnce.has(id)) return { status: 200 };
    failedOnce.add(id);
    return { status: 503 };
  });
  const { admin, viewer } = await seedOrg(rig.relay.services, 'org-a');
  const token = rig.relay.token('org-a', admin);
  const registered = await call(rig.relay.baseUrl, 'POST', '/webhook/register_webhook', {
    token,
    body: { webhook_url: receiver.url, headers: { 'X-Environment': 'production', Authorization: `Bearer ${TOKEN}`, 'X-Api-Key': TOKEN } },
  });
  assert.equal(registered.status, 201, registered.text);
  assert.deepEqual(registered.body.headers, { 'X-Environment': 'production', Authorization: null, 'X-Api-Key': null });
  const secret = registered.body.secret as string;

  const events = ['evt_p1', 'evt_p2', 'evt_p3'];
  rig.feed(...events.map((id) => feedLine('org-a', id)));
  for (const id of events) await waitForDelivery(rig.relay.store, 'org-a', id, (d) => d.status === 'delivered', 'delivered through the proxy', 20_000);

  // Two requests per event, each through a tunnel to the address the guard checked, with the proxy's credentials.
  assert.equal(receiver.requests.length, 6);
  assert.ok(proxy.tunnels.length >= 1);
  assert.equal(receiver.connections(), proxy.tunnels.length, 'every connection the receiver accepted came through a tunnel');
  for (const tunnel of proxy.tunnels) {
    assert.deepEqual(tunnel, { authority: `127.0.0.1:${receiver.port}`, proxyAuthorization: `Basic ${Buffer.from(`relay:${PASSWORD}`).toString('base64')}`, status: 200 });
  }
  assert.deepEqual(proxy.plainRequests, []);
  for (const req of receiver.requests) {
    assert.equal(req.headers['x-environment'], 'production');
    assert.equal(req.headers.authorization, `Bearer ${TOKEN}`);
    assert.equal(req.headers['x-api-key'], TOKEN);
    assert.equal(req.headers['proxy-authorization'], undefined, 'the proxy credentials stay with the proxy');
    const headers = { 'webhook-id': req.headers['webhook-id'] as string, 'webhook-timestamp': req.headers['webhook-timestamp'] as string, 'webhook-signature': req.headers['webhook-signature'] as string };
    new Webhook(secret).verify(req.body.toString('utf8'), headers);
  }
  for (const id of events) assert.deepEqual(receiver.requestsFor(id).map((r) => r.answeredStatus), [503, 200]);

  // Shown as set, never with their values: get_webhook, the delivery log (admin and viewer), the log lines.
  const webhook = await call(rig.relay.baseUrl, 'GET', '/webhook/get_webhook', { token: rig.relay.token('org-a', viewer) });
  assert.deepEqual(webhook.body.headers, { 'X-Environment': 'production', Authorization: null, 'X-Api-Key': null });
  const delivery = deliveriesOfEvent(rig.relay.store, 'org-a', 'evt_p1')[0]!;
  for (const who of [admin, viewer]) {
    const detail = await call(rig.relay.baseUrl, 'GET', `/webhook/deliveries/${delivery.id}`, { token: rig.relay.token('org-a', who) });
    assert.equal(detail.status, 200, detail.text);
    assert.equal(detail.body.request.headers['x-environment'], 'production');
    assert.equal(detail.body.request.headers.authorization, '(set; value hidden)');
    assert.equal(detail.body.request.headers['x-api-key'], '(set; value hidden)');
    assert.doesNotMatch(detail.text, new RegExp(TOKEN));
  }
  for (const text of [registered.text, webhook.text, ...log.lines]) {
    assert.doesNotMatch(text, new RegExp(TOKEN));
    assert.doesNotMatch(text, new RegExp(PASSWORD));
  }
  const started = log.lines.map((l) => JSON.parse(l) as { msg: string; proxies?: string[]; target?: string }).find((r) => r.msg === 'deliveries go through an egress proxy');
  assert.deepEqual([started?.proxies, started?.target], [[`http://127.0.0.1:${proxy.port}`], 'address']);
});

/** A deliverer through `proxyUrl` (for the organizations without an entry of their own), as the daemon builds one. */
function proxiedDeliverer(t: TestContext, tls: TestTls, proxyUrl: string | null, extra: { organizationProxies?: string[]; allowHttp?: boolean } = {}): Deliverer {
  const deliverer = createDeliverer({
    networks: createNetworkPolicies({ allowNetworks: ['127.0.0.1/32'], organizationNetworks: [], storeInternalResponses: [] }),
    clock: systemClock,
    timeoutMs: 5_000,
    allowHttp: extra.allowHttp ?? false,
    userAgent: 'hookrelay-proxy-test',
    extraCa: tls.caPem,
    concurrency: 4,
    proxies: createEgressProxies({ proxy: proxyUrl, organizationProxies: extra.organizationProxies ?? [] }),
    proxyTarget: 'address',
  });
  t.after(() => deliverer.close());
  return deliverer;
}

const request = (url: string, orgId = 'org-a') => ({ orgId, url, eventId: 'evt_proxy_err', payload: '{"type":"test"}', secrets: [] });

test("the proxy's refusals (407, 403) and its absence are proxy_error attempts that say what to fix, without credentials, and nothing reaches the receiver", async (t) => {
  const tls = createTestTls(t);
  const receiver = await startReceiver(t, tls);

  const strict = await startConnectProxy(t, { credentials: `relay:${PASSWORD}` });
  const wrong = await proxiedDeliverer(t, tls, `http://relay:wrong-${PASSWORD}@127.0.0.1:${strict.port}`).deliver(request(receiver.url));
  assert.equal(wrong.error, AttemptError.proxy, JSON.stringify(wrong));
  assert.match(wrong.errorDetail!, /^the egress proxy asked for credentials \(407 Proxy Authentication Required\): the user and password in delivery\.proxy are missing or wrong$/);
  const none = await proxiedDeliverer(t, tls, `http://127.0.0.1:${strict.port}`).deliver(request(receiver.url));
  assert.equal(none.error, AttemptError.proxy);
  assert.equal(strict.tunnels.at(-1)?.proxyAuthorization, undefined);

  const filtering = await startConnectProxy(t, { refuse: () => 403 });
  const forbidden = await proxiedDeliverer(t, tls, `http://127.0.0.1:${filtering.port}`).deliver(request(receiver.url));
  assert.equal(forbidden.error, AttemptError.proxy);
  assert.equal(forbidden.errorDetail, 'the egress proxy refused the tunnel to this receiver (403 Forbidden): its rules do not allow it');

  // A port nothing listens on.
  const closed = createNetServer();
  await new Promise<void>((resolve) => closed.listen(0, '127.0.0.1', resolve));
  const deadPort = (closed.address() as AddressInfo).port;
  await new Promise<void>((resolve) => closed.close(() => resolve()));
  const unreachable = await proxiedDeliverer(t, tls, `http://relay:${PASSWORD}@127.0.0.1:${deadPort}`).deliver(request(receiver.url));
  assert.equal(unreachable.error, AttemptError.proxy);
  assert.equal(unreachable.errorDetail, 'the egress proxy could not be reached or dropped the connection (ECONNREFUSED)');

  for (const result of [wrong, none, forbidden, unreachable]) {
    assert.equal(result.statusCode, null);
    assert.equal(result.sentTimestamp, null, 'no request was sent');
    assert.doesNotMatch(JSON.stringify(result), new RegExp(`${PASSWORD}|127\\.0\\.0\\.1`), 'neither the credentials nor an address');
  }
  assert.equal(receiver.connections(), 0);
});

test('plain http goes through a CONNECT tunnel too; an organization of its own may go direct or through its own proxy', async (t) => {
  const tls = createTestTls(t);
  const shared = await startConnectProxy(t);
  const acmes = await startConnectProxy(t);
  const receiver = await startReceiver(t, tls);
  const plain = await new Promise<{ port: number; hits: () => number }>((resolve) => {
    let hits = 0;
    const server = createNetServer((socket) => {
      hits++;
      socket.on('error', () => {});
      socket.once('data', () => socket.end('HTTP/1.1 204 No Content\r\nConnection: close\r\n\r\n'));
    });
    t.after(() => new Promise<void>((done) => server.close(() => done())));
    server.listen(0, '127.0.0.1', () => resolve({ port: (server.address() as AddressInfo).port, hits: () => hits }));
  });
  const deliverer = proxiedDeliverer(t, tls, shared.url, { allowHttp: true, organizationProxies: ['direct-org=direct', `acme=${acmes.url}`] });

  const http = await deliverer.deliver(request(`http://127.0.0.1:${plain.port}/hook`));
  assert.equal(http.statusCode, 204, JSON.stringify(http));
  assert.deepEqual(shared.tunnels.map((x) => x.authority), [`127.0.0.1:${plain.port}`]);
  assert.deepEqual(shared.plainRequests, [], 'never absolute-form');

  const direct = await deliverer.deliver(request(receiver.url, 'direct-org'));
  assert.equal(direct.statusCode, 200, JSON.stringify(direct));
  const viaAcme = await deliverer.deliver(request(receiver.url, 'acme'));
  assert.equal(viaAcme.statusCode, 200, JSON.stringify(viaAcme));
  assert.deepEqual(acmes.tunnels.map((x) => x.authority), [`127.0.0.1:${receiver.port}`]);
  assert.equal(shared.tunnels.length, 1, 'neither went through the shared proxy');
  assert.equal(receiver.connections(), 2);
});

test('through a proxy, names are resolved and checked first: a name resolving to a refused address never reaches it; the proxy is asked for the address or the name (a network namespace with its own hosts file)', { timeout: 120_000 }, async (t) => {
  if (process.getuid?.() !== 0) return t.skip('needs root for unshare -m -n');
  const dir = tempDir(t);
  const hosts = join(dir, 'hosts');
  writeFileSync(hosts, '127.0.0.1 localhost\n127.0.0.1 receiver.hookrelay.test\n127.0.0.2 internal.hookrelay.test\n');
  // A run of its own, not a subtest of this one (node:test passes its context down otherwise).
  const env = { ...process.env };
  delete env.NODE_TEST_CONTEXT;
  const inner = fileURLToPath(new URL('./proxy-names.inner.ts', import.meta.url));
  const child = spawn(
    'unshare',
    ['-m', '-n', 'sh', '-c', 'mount --bind "$0" /etc/hosts && ip link set lo up && exec "$@"', hosts, process.execPath, '--import', 'tsx', '--test', '--test-reporter=tap', inner],
    { stdio: ['ignore', 'pipe', 'pipe'], env },
  );
  let out = '';
  child.stdout.on('data', (chunk: Buffer) => (out += chunk.toString('utf8')));
  child.stderr.on('data', (chunk: Buffer) => (out += chunk.toString('utf8')));
  const code = await new Promise<number | null>((resolve) => child.once('close', resolve));
  assert.equal(code, 0, out);
  assert.match(out, /^# pass [1-9]/m, out);
  assert.match(out, /^# fail 0$/m, out);
});

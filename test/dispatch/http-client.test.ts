/**
 * The delivery HTTP client (undici, since it replaced got) pinned attempt by attempt: the
 * deliverer is called directly against real servers on 127.0.0.1 (HTTPS behind a test CA, plain
 * HTTP where the TLS layer is beside the point), and each test asserts what a receiver or the
 * attempt log would see: status and headers, the request as sent and signed, the 20 KiB cap on
 * an endless answer, one overall deadline, errors mapped to their classes, the address policy
 * applied to the addresses the socket really uses, kept-alive connections, shutdown and close,
 * and the bodies of internal answers withheld. Times come from performance.now (monotonic), and
 * every bound is generous enough for a busy two-core machine.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { lookup } from 'node:dns/promises';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer as createHttpServer, type RequestListener } from 'node:http';
import { createServer as createHttpsServer } from 'node:https';
import { connect as netConnect, createServer as createNetServer, type AddressInfo, type Server, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, test, type TestContext } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { createServer as createTlsServer } from 'node:tls';
import { Webhook } from 'standardwebhooks';
import { createTls } from '../../scripts/receiver-control.ts';
import { createDeliverer, internalBodyWithheld, MAX_RESPONSE_BYTES, NotSentInTime, type Deliverer, type DeliveryRequest } from '../../src/dispatch/deliverer.ts';
import { createNetworkPolicies } from '../../src/domain/address-policy.ts';
import { systemClock, type Clock } from '../../src/domain/clock.ts';
import { AttemptError, type AttemptResult } from '../../src/domain/retry-policy.ts';
import { startHangingReceiver, startReceiver, startTricklingReceiver, waitFor, type TestTls } from '../helpers/receivers.ts';

// One test CA for the whole file: openssl runs once, not once per test.
let tls: TestTls;
before(() => {
  const dir = mkdtempSync(join(tmpdir(), 'hookrelay-client-tls-'));
  tls = { ...createTls(dir, 'hookrelay client test CA'), dir };
});
after(() => rmSync(tls.dir, { recursive: true, force: true }));

interface DelivererSetup {
  readonly allowNetworks?: readonly string[];
  readonly organizationNetworks?: readonly string[];
  readonly storeInternalResponses?: readonly string[];
  readonly timeoutMs?: number;
  readonly allowHttp?: boolean;
  /** The test CA by default; null trusts Node's bundled roots alone. */
  readonly extraCa?: string | null;
  readonly clock?: Clock;
  readonly concurrency?: number;
}

const USER_AGENT = 'hookrelay-client-test/1.0';

/**
 * A deliverer as the daemon builds one, closed when the test ends. By default it may reach
 * 127.0.0.1, trusts the test CA, allows http, and keeps the internal answers of org-a (so a
 * test sees the bodies; the withholding has tests of its own).
 */
function makeDeliverer(t: TestContext, setup: DelivererSetup = {}): Deliverer {
  const deliverer = createDeliverer({
    networks: createNetworkPolicies({
      allowNetworks: setup.allowNetworks ?? ['127.0.0.1/32'],
      organizationNetworks: setup.organizationNetworks ?? [],
      storeInternalResponses: setup.storeInternalResponses ?? ['org-a'],
    }),
    clock: setup.clock ?? systemClock,
    timeoutMs: setup.timeoutMs ?? 5_000,
    allowHttp: setup.allowHttp ?? true,
    userAgent: USER_AGENT,
    extraCa: setup.extraCa === undefined ? tls.caPem : setup.extraCa,
    concurrency: setup.concurrency ?? 4,
  });
  t.after(() => deliverer.close());
  return deliverer;
}

function request(url: string, extra: Partial<DeliveryRequest> = {}): DeliveryRequest {
  return { orgId: 'org-a', url, eventId: 'evt_client_1', payload: '{"type":"test"}', secrets: [], ...extra };
}

/** The result in one line, for assertion messages. */
function shown(result: AttemptResult): string {
  return JSON.stringify({ ...result, responseBody: result.responseBody?.slice(0, 200) ?? null });
}

interface Listening {
  readonly port: number;
  /** TCP connections accepted so far. */
  connections(): number;
  /** TCP connections open now. */
  open(): number;
}

/**
 * Listens on 127.0.0.1:0 (or `host`), counting TCP connections; every socket is destroyed and
 * the server closed when the test ends.
 */
async function listenCounting(t: TestContext, server: Server, host = '127.0.0.1'): Promise<Listening> {
  const sockets = new Set<Socket>();
  let accepted = 0;
  server.on('connection', (socket: Socket) => {
    accepted++;
    sockets.add(socket);
    socket.on('error', () => {});
    socket.once('close', () => sockets.delete(socket));
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, host, () => {
      server.off('error', reject);
      resolve();
    });
  });
  t.after(async () => {
    for (const socket of sockets) socket.destroy();
    if (server.listening) await new Promise<void>((resolve) => server.close(() => resolve()));
  });
  return { port: (server.address() as AddressInfo).port, connections: () => accepted, open: () => sockets.size };
}

/** A plain HTTP server on 127.0.0.1 answering with `handler`. */
function startHttp(t: TestContext, handler: RequestListener): Promise<Listening> {
  return listenCounting(t, createHttpServer(handler));
}

/** A TCP server on 127.0.0.1 that does `onSocket` with each connection and nothing else (no HTTP, no TLS). */
function startTcp(t: TestContext, onSocket: (socket: Socket) => void): Promise<Listening> {
  return listenCounting(t, createNetServer(onSocket));
}

/** A port on 127.0.0.1 nobody listens on: one the system just handed out, then closed. */
async function closedPort(): Promise<number> {
  const server = createNetServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}

// ---------------------------------------------------------------------------------------------
// 1. Status and headers

test('a 2xx answer is a success: its status kept, no error, the body read', async (t) => {
  const receiver = await startReceiver(t, tls, () => ({ status: 201, body: 'created, thanks' }));
  const result = await makeDeliverer(t).deliver(request(receiver.url));
  assert.equal(result.statusCode, 201, shown(result));
  assert.equal(result.error, null);
  assert.equal(result.errorDetail, null);
  assert.equal(result.responseBody, 'created, thanks');
  assert.equal(result.retryAfterMs, null);
  assert.equal(receiver.requests.length, 1);
});

test('a 500 is an http_status failure with "HTTP 500" and the answer kept', async (t) => {
  const receiver = await startReceiver(t, tls, () => ({ status: 500, body: 'database on fire' }));
  const result = await makeDeliverer(t).deliver(request(receiver.url));
  assert.equal(result.statusCode, 500, shown(result));
  assert.equal(result.error, AttemptError.http);
  assert.equal(result.error, 'http_status');
  assert.equal(result.errorDetail, 'HTTP 500');
  assert.equal(result.responseBody, 'database on fire');
  // An HTTP answer is the receiver's word: it is not retried inside the attempt.
  assert.equal(receiver.requests.length, 1);
});

test('a redirect (302, 307) is not followed: the Location server is never contacted', async (t) => {
  const elsewhere = await startReceiver(t, tls);
  const deliverer = makeDeliverer(t);
  for (const status of [302, 307]) {
    const receiver = await startReceiver(t, tls, () => ({ status, headers: { location: `${elsewhere.url}?from=${status}` }, body: 'moved' }));
    const result = await deliverer.deliver(request(receiver.url));
    assert.equal(result.statusCode, status, shown(result));
    assert.equal(result.error, AttemptError.http);
    assert.equal(result.errorDetail, `redirect (${status}) not followed`);
    assert.equal(receiver.requests.length, 1);
  }
  // Nothing a redirect could make the client do reaches the Location: give a stray request time to arrive.
  await sleep(200);
  assert.equal(elsewhere.connections(), 0, 'the redirect target got a connection');
  assert.equal(elsewhere.requests.length, 0);
});

test('Retry-After on a 503 is parsed: delta-seconds and an HTTP date, against the injected clock', async (t) => {
  // A whole second, so that an HTTP date (second resolution) lands exactly.
  const now = Math.floor(Date.now() / 1000) * 1000;
  const fixed: Clock = { now: () => now };
  const inNinetySeconds = new Date(now + 90_000).toUTCString();
  let answer: Record<string, string> = { 'retry-after': '7' };
  const receiver = await startReceiver(t, tls, () => ({ status: 503, headers: answer }));
  const deliverer = makeDeliverer(t, { clock: fixed });

  const seconds = await deliverer.deliver(request(receiver.url));
  assert.equal(seconds.statusCode, 503, shown(seconds));
  assert.equal(seconds.errorDetail, 'HTTP 503');
  assert.equal(seconds.retryAfterMs, 7_000);

  answer = { 'retry-after': inNinetySeconds };
  const dated = await deliverer.deliver(request(receiver.url));
  assert.equal(dated.retryAfterMs, 90_000, shown(dated));

  answer = {};
  const none = await deliverer.deliver(request(receiver.url));
  assert.equal(none.retryAfterMs, null, shown(none));
});

// ---------------------------------------------------------------------------------------------
// 2. The request as sent

test('the request: a POST of the exact bytes, Standard Webhooks headers, every secret signing, path and query kept', async (t) => {
  const receiver = await startReceiver(t, tls);
  const payload = JSON.stringify({ type: 'anticipation_request.status_changed', data: { event_id: 'evt_sent', note: 'açaí ✓ "quoted" \\ \u2028 end', amount_cents: 120_000 } });
  const secrets = [`whsec_${randomBytes(32).toString('base64')}`, `whsec_${randomBytes(32).toString('base64')}`];
  const url = `https://127.0.0.1:${receiver.port}/hooks/in?token=a%2Fb&x=1&x=2#not-sent`;
  const startedAt = Math.floor(Date.now() / 1000);
  const result = await makeDeliverer(t).deliver(request(url, { eventId: 'evt_sent', payload, secrets }));
  const endedAt = Math.ceil(Date.now() / 1000);
  assert.equal(result.statusCode, 200, shown(result));

  const [req] = receiver.requests;
  assert.ok(req);
  assert.equal(receiver.requests.length, 1);
  assert.equal(req.method, 'POST');
  assert.equal(req.path, '/hooks/in?token=a%2Fb&x=1&x=2', 'the path and query string as registered, no fragment');
  assert.equal(req.headers.host, `127.0.0.1:${receiver.port}`);
  assert.ok(req.body.equals(Buffer.from(payload, 'utf8')), `the body bytes differ: ${req.body.toString('utf8')}`);
  assert.equal(req.headers['content-length'], String(Buffer.byteLength(payload)));
  assert.equal(req.headers['transfer-encoding'], undefined, 'the body is sent with a content-length, not chunked');
  assert.equal(req.headers['content-type'], 'application/json');
  assert.equal(req.headers['user-agent'], USER_AGENT);
  assert.equal(req.headers['webhook-id'], 'evt_sent');
  const timestamp = req.headers['webhook-timestamp'];
  assert.ok(typeof timestamp === 'string' && /^\d{10}$/.test(timestamp), `webhook-timestamp ${String(timestamp)}`);
  assert.ok(Number(timestamp) >= startedAt && Number(timestamp) <= endedAt, `webhook-timestamp ${timestamp} is not the time of the attempt`);

  const signature = req.headers['webhook-signature'];
  assert.ok(typeof signature === 'string');
  assert.equal(signature.split(' ').length, 2, `one signature per secret: ${signature}`);
  const headers = { 'webhook-id': 'evt_sent', 'webhook-timestamp': timestamp, 'webhook-signature': signature };
  // Each secret verifies on its own (the receiver may hold either during a rotation).
  for (const secret of secrets) assert.deepEqual(new Webhook(secret).verify(req.body, headers), JSON.parse(payload));
  assert.throws(() => new Webhook(`whsec_${randomBytes(32).toString('base64')}`).verify(req.body, headers), /No matching signature/);
  // The attempt reports the two headers it sent, exactly (the attempt log keeps them).
  assert.equal(result.sentTimestamp, Number(timestamp));
  assert.equal(result.sentSignature, signature);
});

test('without secrets the request carries webhook-id and webhook-timestamp but no webhook-signature', async (t) => {
  const receiver = await startReceiver(t, tls);
  const result = await makeDeliverer(t).deliver(request(receiver.url, { eventId: 'evt_unsigned', secrets: [] }));
  assert.equal(result.statusCode, 200, shown(result));
  const [req] = receiver.requests;
  assert.ok(req);
  assert.equal(req.headers['webhook-id'], 'evt_unsigned');
  assert.match(String(req.headers['webhook-timestamp']), /^\d{10}$/);
  assert.equal(req.headers['webhook-signature'], undefined);
  assert.ok(!Object.keys(req.headers).some((name) => /signature/i.test(name)), `a signature header: ${JSON.stringify(req.headers)}`);
  assert.equal(result.sentTimestamp, Number(req.headers['webhook-timestamp']));
  assert.equal(result.sentSignature, null);
});

// ---------------------------------------------------------------------------------------------
// 3. The response cap

test('an endless answer (1 GiB, generated on the fly) is cut at 20 KiB: quickly, in little memory, and the connection is dropped', { timeout: 30_000 }, async (t) => {
  const GIB = 1024 ** 3;
  const chunk = Buffer.alloc(64 * 1024, 'x');
  let written = 0;
  let closed = false;
  const server = createHttpsServer({ key: tls.keyPem, cert: tls.certPem }, (req, res) => {
    req.resume();
    req.on('end', () => {
      res.writeHead(200, { 'content-type': 'text/plain', 'content-length': String(GIB) });
      // Written as the client reads (backpressure): nothing here buffers the gigabyte either.
      const pump = () => {
        while (!res.destroyed && written < GIB) {
          written += chunk.length;
          if (!res.write(chunk)) return void res.once('drain', pump);
        }
        if (written >= GIB) res.end();
      };
      pump();
    });
    res.once('close', () => (closed = true));
  });
  const listening = await listenCounting(t, server);
  const deliverer = makeDeliverer(t);

  const rssBefore = process.memoryUsage().rss;
  const started = performance.now();
  const result = await deliverer.deliver(request(`https://127.0.0.1:${listening.port}/big`));
  const took = performance.now() - started;
  const grown = process.memoryUsage().rss - rssBefore;

  assert.equal(result.statusCode, 200, shown(result));
  assert.equal(result.error, null);
  assert.equal(Buffer.byteLength(result.responseBody ?? ''), MAX_RESPONSE_BYTES);
  assert.equal(MAX_RESPONSE_BYTES, 20 * 1024);
  assert.equal(result.responseBody, 'x'.repeat(MAX_RESPONSE_BYTES));
  assert.ok(took < 5_000, `the attempt took ${Math.round(took)} ms`);
  assert.ok(grown < 64 * 1024 ** 2, `RSS grew by ${(grown / 1024 ** 2).toFixed(1)} MiB during the attempt`);
  // The client hung up: the server stops writing long before the gigabyte.
  await waitFor('the server to see the connection closed', () => closed, 5_000);
  assert.ok(written < 64 * 1024 ** 2, `the server wrote ${(written / 1024 ** 2).toFixed(1)} MiB before the client hung up`);
  await waitFor('the connection to be gone', () => listening.open() === 0, 5_000);
  t.diagnostic(`cut after ${Math.round(took)} ms; server wrote ${(written / 1024).toFixed(0)} KiB; RSS ${grown >= 0 ? '+' : ''}${(grown / 1024 ** 2).toFixed(1)} MiB`);
});

// ---------------------------------------------------------------------------------------------
// 4. One overall deadline

test('one overall deadline: an answer trickling a byte every 100 ms (body or status line) times out at timeoutMs, and its connection is dropped', { timeout: 30_000 }, async (t) => {
  const deliverer = makeDeliverer(t, { timeoutMs: 1_000 });
  for (const headersFirst of [true, false]) {
    const receiver = await startTricklingReceiver(t, tls, { headersFirst, intervalMs: 100 });
    const started = performance.now();
    const result = await deliverer.deliver(request(receiver.url));
    const took = performance.now() - started;
    assert.equal(result.error, AttemptError.timeout, `headersFirst ${headersFirst}: ${shown(result)}`);
    assert.equal(result.error, 'timeout');
    assert.equal(result.errorDetail, 'no complete response within the attempt deadline');
    assert.equal(result.statusCode, null);
    // Every byte resets an idle timer; only a deadline on the whole attempt ends this.
    assert.ok(result.durationMs >= 950 && result.durationMs < 5_000, `headersFirst ${headersFirst}: durationMs ${result.durationMs}`);
    assert.ok(took >= 950 && took < 5_000, `headersFirst ${headersFirst}: took ${Math.round(took)} ms`);
    assert.equal(receiver.requests(), 1, 'a timeout is not retried inside the attempt');
    // The request went out before the answer trickled: the attempt reports what it sent.
    assert.ok(result.sentTimestamp !== null && Math.abs(result.sentTimestamp * 1000 - Date.now()) < 10_000, `headersFirst ${headersFirst}: ${shown(result)}`);
    await waitFor(`the trickling connection (headersFirst ${headersFirst}) to be dropped`, () => receiver.openConnections() === 0, 5_000);
  }
});

test('a receiver that accepts the connection and never answers times out: before TLS, after TLS, and over plain HTTP', { timeout: 30_000 }, async (t) => {
  const silentTcp = await startTcp(t, () => {});
  const hanging = await startHangingReceiver(t, tls);
  const deliverer = makeDeliverer(t, { timeoutMs: 1_000 });
  const cases = {
    'TCP accepted, no TLS handshake': `https://127.0.0.1:${silentTcp.port}/hook`,
    'TCP accepted, no HTTP answer': `http://127.0.0.1:${silentTcp.port}/hook`,
    'HTTPS request read, never answered': hanging.url,
  };
  const results = await Promise.all(
    Object.entries(cases).map(async ([name, url]) => {
      const started = performance.now();
      const result = await deliverer.deliver(request(url));
      return { name, result, took: performance.now() - started };
    }),
  );
  for (const { name, result, took } of results) {
    assert.equal(result.error, AttemptError.timeout, `${name}: ${shown(result)}`);
    assert.equal(result.statusCode, null, name);
    assert.ok(result.durationMs >= 950 && result.durationMs < 5_000, `${name}: durationMs ${result.durationMs}`);
    assert.ok(took < 5_000, `${name}: took ${Math.round(took)} ms`);
  }
  t.diagnostic(results.map(({ name, result }) => `${name}: ${result.durationMs} ms`).join('; '));
  assert.equal(hanging.requests.length, 1);
});

// ---------------------------------------------------------------------------------------------
// 5. Errors mapped to their classes

test('connection refused is a connection_error naming ECONNREFUSED, after the in-attempt retries', async (t) => {
  const port = await closedPort();
  const started = performance.now();
  const result = await makeDeliverer(t).deliver(request(`https://127.0.0.1:${port}/hook`));
  const took = performance.now() - started;
  assert.equal(result.error, AttemptError.connection, shown(result));
  assert.equal(result.error, 'connection_error');
  assert.match(result.errorDetail ?? '', /ECONNREFUSED/);
  assert.equal(result.statusCode, null);
  assert.equal(result.responseBody, null);
  // No connection, no request: nothing sent to report.
  assert.deepEqual([result.sentTimestamp, result.sentSignature], [null, null]);
  // Three tries 100 ms and 400 ms apart (p-retry): a refusal costs at least half a second.
  assert.ok(took >= 450 && took < 5_000, `took ${Math.round(took)} ms: not retried twice inside the attempt`);
});

test('a receiver that drops the connection without answering, every time: ECONNRESET, tried three times inside the attempt', async (t) => {
  const deliverer = makeDeliverer(t);
  // Dropped once the request has arrived (TLS done): the "socket hang up" of node:http and got.
  const afterRequest = await listenCounting(
    t,
    createTlsServer({ key: tls.keyPem, cert: tls.certPem }, (socket) => {
      socket.on('error', () => {});
      socket.once('data', () => socket.destroy());
    }),
  );
  // Dropped at once, before any TLS handshake.
  const atAccept = await startTcp(t, (socket) => socket.destroy());
  const cases = [
    { name: 'dropped after the request', server: afterRequest },
    { name: 'dropped at accept', server: atAccept },
  ];
  for (const { name, server } of cases) {
    const result = await deliverer.deliver(request(`https://127.0.0.1:${server.port}/hook`));
    assert.equal(result.error, AttemptError.connection, `${name}: ${shown(result)}`);
    assert.match(result.errorDetail ?? '', /ECONNRESET/, name);
    assert.equal(result.statusCode, null, name);
    assert.equal(server.connections(), 3, `${name}: ${server.connections()} connections, expected the first try and two retries`);
    // A connection closed on the attempt may have carried its request: what it was sending is reported.
    assert.ok(result.sentTimestamp !== null, `${name}: ${shown(result)}`);
  }
});

test('a certificate the deliverer does not trust is a tls_error, not retried, and no request is sent', async (t) => {
  const receiver = await startReceiver(t, tls);
  // Node's bundled roots alone: the test CA is unknown.
  const result = await makeDeliverer(t, { extraCa: null }).deliver(request(receiver.url));
  assert.equal(result.error, AttemptError.tls, shown(result));
  assert.equal(result.error, 'tls_error');
  assert.match(result.errorDetail ?? '', /^TLS failed \((UNABLE_TO_VERIFY_LEAF_SIGNATURE|UNABLE_TO_GET_ISSUER_CERT_LOCALLY|SELF_SIGNED_CERT_IN_CHAIN)\)/);
  assert.equal(result.statusCode, null);
  assert.equal(receiver.connections(), 1);
  assert.equal(receiver.requests.length, 0);
  assert.deepEqual([result.sentTimestamp, result.sentSignature], [null, null], 'nothing sent, nothing reported');
});

test('a name that does not resolve is a dns_error', async (t) => {
  const result = await makeDeliverer(t).deliver(request('https://does-not-exist.invalid/hook'));
  assert.equal(result.error, AttemptError.dns, shown(result));
  assert.equal(result.error, 'dns_error');
  assert.match(result.errorDetail ?? '', /^DNS lookup failed \((ENOTFOUND|EAI_NONAME|EAI_AGAIN)\)$/);
  assert.equal(result.statusCode, null);
  assert.deepEqual([result.sentTimestamp, result.sentSignature], [null, null]);
});

// ---------------------------------------------------------------------------------------------
// 6. The address policy, applied to the addresses the socket uses

test('without allowNetworks, https://127.0.0.1 is refused as blocked_address and nothing connects', async (t) => {
  const receiver = await startReceiver(t, tls);
  const result = await makeDeliverer(t, { allowNetworks: [] }).deliver(request(`https://127.0.0.1:${receiver.port}/hook`));
  assert.equal(result.error, AttemptError.blocked, shown(result));
  assert.equal(result.error, 'blocked_address');
  assert.match(result.errorDetail ?? '', /^127\.0\.0\.1 is in a refused range \(loopback\)/);
  assert.equal(result.statusCode, null);
  assert.deepEqual([result.sentTimestamp, result.sentSignature], [null, null]);
  await sleep(200);
  assert.equal(receiver.connections(), 0, 'a refused address was connected to');
});

test('a name is refused when any address it resolves to is refused, and nothing connects', async (t) => {
  const receiver = await startReceiver(t, tls);
  const url = `https://localhost:${receiver.port}/hook`;
  // localhost resolves to 127.0.0.1 everywhere (and to ::1 on some hosts): refused with only ::1 allowed.
  const onlyV6 = await makeDeliverer(t, { allowNetworks: ['::1/128'] }).deliver(request(url));
  assert.equal(onlyV6.error, AttemptError.blocked, shown(onlyV6));
  assert.match(onlyV6.errorDetail ?? '', /^localhost resolves to an address in a refused range \(loopback\)/);
  // Refused at the lookup, after the request's headers were made: nothing went out, nothing is reported.
  assert.deepEqual([onlyV6.sentTimestamp, onlyV6.sentSignature], [null, null]);

  // With only 127.0.0.1 allowed, the answer depends on whether this host resolves localhost to ::1 as well.
  const v6 = (await lookup('localhost', { all: true, verbatim: true })).some((a) => a.family === 6);
  const onlyV4 = await makeDeliverer(t, { allowNetworks: ['127.0.0.1/32'] }).deliver(request(url));
  if (v6) {
    assert.equal(onlyV4.error, AttemptError.blocked, shown(onlyV4));
    assert.match(onlyV4.errorDetail ?? '', /^localhost resolves to an address in a refused range \(loopback\)/);
    await sleep(200);
    assert.equal(receiver.connections(), 0, 'a refused name was connected to');
  } else {
    t.diagnostic('localhost resolves to 127.0.0.1 alone here: 127.0.0.1/32 is enough to reach it');
    assert.equal(onlyV4.statusCode, 200, shown(onlyV4));
    assert.equal(receiver.requests.length, 1);
  }
  // The refusal under ::1/128 alone connected nowhere (the other may have, when it is allowed).
  assert.equal(receiver.connections(), v6 ? 0 : 1);
});

test('with 127.0.0.1/32 and ::1/128 allowed, https://localhost reaches the receiver, its certificate checked against the name', async (t) => {
  // The receiver listens on 127.0.0.1 only; if localhost resolves to ::1 first, the connection
  // to ::1 is refused by the kernel and the next checked address (127.0.0.1) is tried.
  const receiver = await startReceiver(t, tls);
  const result = await makeDeliverer(t, { allowNetworks: ['127.0.0.1/32', '::1/128'] }).deliver(request(`https://localhost:${receiver.port}/by-name`));
  assert.equal(result.statusCode, 200, shown(result));
  assert.equal(result.error, null);
  const [req] = receiver.requests;
  assert.ok(req);
  assert.equal(req.path, '/by-name');
  assert.equal(req.headers.host, `localhost:${receiver.port}`);
});

test('the URL policy is applied on every attempt: http without allowHttp, user-info and a malformed URL are invalid_url, and nothing connects', async (t) => {
  const server = await startHttp(t, (_req, res) => res.end('ok'));
  const strict = makeDeliverer(t, { allowHttp: false });
  const http = await strict.deliver(request(`http://127.0.0.1:${server.port}/hook`));
  assert.equal(http.error, AttemptError.invalidUrl, shown(http));
  assert.equal(http.error, 'invalid_url');
  assert.match(http.errorDetail ?? '', /must use the https scheme/);
  const credentials = await strict.deliver(request(`https://user:secret@127.0.0.1:${server.port}/hook`));
  assert.equal(credentials.error, AttemptError.invalidUrl, shown(credentials));
  assert.match(credentials.errorDetail ?? '', /must not contain user-info/);
  assert.doesNotMatch(credentials.errorDetail ?? '', /secret/, 'the password is not echoed into the attempt log');
  const malformed = await strict.deliver(request('not a url'));
  assert.equal(malformed.error, AttemptError.invalidUrl, shown(malformed));
  // The same http URL goes out once the operator allows http.
  const allowed = await makeDeliverer(t, { allowHttp: true }).deliver(request(`http://127.0.0.1:${server.port}/hook`));
  assert.equal(allowed.statusCode, 200, shown(allowed));
  assert.equal(server.connections(), 1, 'a refused URL was connected to');
});

test('an IPv6 literal is checked like any address: [::1] is refused unless ::1/128 is allowed', async (t) => {
  let served = 0;
  const server = createHttpServer((req, res) => {
    served++;
    req.resume();
    res.end('v6 ok');
  });
  // The hosts this suite runs on have an IPv6 loopback; one without fails here, it is not skipped.
  const v6 = await listenCounting(t, server, '::1');
  const url = `http://[::1]:${v6.port}/hook`;
  const refused = await makeDeliverer(t, { allowNetworks: ['127.0.0.1/32'] }).deliver(request(url));
  assert.equal(refused.error, AttemptError.blocked, shown(refused));
  assert.match(refused.errorDetail ?? '', /^::1 is in a refused range \(loopback\)/);
  assert.equal(v6.connections(), 0);
  const allowed = await makeDeliverer(t, { allowNetworks: ['::1/128'], storeInternalResponses: ['org-a'] }).deliver(request(url));
  assert.equal(allowed.statusCode, 200, shown(allowed));
  assert.equal(allowed.responseBody, 'v6 ok');
  assert.equal(served, 1);
});

// ---------------------------------------------------------------------------------------------
// 7. Keep-alive, shutdown and close

test('keep-alive: twenty attempts one after the other use at most two connections', async (t) => {
  const receiver = await startReceiver(t, tls);
  const deliverer = makeDeliverer(t);
  for (let i = 0; i < 20; i++) {
    const result = await deliverer.deliver(request(receiver.url, { eventId: `evt_keep_${i}` }));
    assert.equal(result.statusCode, 200, shown(result));
  }
  assert.equal(receiver.requests.length, 20);
  // undici may open a second connection for the attempt right after a new connection's first.
  assert.ok(receiver.connections() <= 2, `twenty attempts opened ${receiver.connections()} connections`);
});

test('shutdown aborts an attempt in flight at once, and it is not reported as a timeout', { timeout: 30_000 }, async (t) => {
  const receiver = await startHangingReceiver(t, tls);
  const deliverer = makeDeliverer(t, { timeoutMs: 30_000 });
  const shutdown = new AbortController();
  const pending = deliverer.deliver(request(receiver.url), shutdown.signal);
  await receiver.waitForRequests(1, 5_000);
  const abortedAt = performance.now();
  shutdown.abort();
  const result = await pending;
  const took = performance.now() - abortedAt;
  assert.ok(took < 2_000, `deliver returned ${Math.round(took)} ms after the shutdown`);
  assert.notEqual(result.error, AttemptError.timeout, shown(result));
  assert.notEqual(result.error, null, shown(result));
  assert.equal(result.statusCode, null);
  assert.ok(result.durationMs < 29_000, `durationMs ${result.durationMs}`);
  assert.equal(receiver.requests.length, 1, 'an aborted attempt is not retried inside the attempt');
  await waitFor('the aborted connection to be dropped', () => receiver.openConnections() === 0, 5_000);

  // A shutdown that already happened: no attempt, no connection.
  const before = receiver.connections();
  const late = await deliverer.deliver(request(receiver.url), shutdown.signal);
  assert.notEqual(late.error, AttemptError.timeout, shown(late));
  assert.equal(late.statusCode, null);
  await sleep(200);
  assert.equal(receiver.connections(), before, 'an attempt after shutdown connected');
});

test('shutdown aborts an attempt still connecting (a TLS handshake never answered) at once, not at the connect timeout', { timeout: 30_000 }, async (t) => {
  // A receiver whose TLS handshake never completes, as behind a firewall that drops packets:
  // the attempt is still connecting when the daemon stops.
  const silent = await startTcp(t, () => {});
  const deliverer = makeDeliverer(t, { timeoutMs: 8_000 });
  const shutdown = new AbortController();
  const pending = deliverer.deliver(request(`https://127.0.0.1:${silent.port}/hook`), shutdown.signal);
  await waitFor('the connection to be accepted', () => silent.connections() === 1, 5_000);
  await sleep(100);
  const abortedAt = performance.now();
  shutdown.abort(new Error('the daemon is stopping'));
  const result = await pending;
  const took = performance.now() - abortedAt;
  assert.ok(took < 2_000, `deliver returned ${Math.round(took)} ms after the shutdown (${shown(result)})`);
  assert.notEqual(result.error, AttemptError.timeout, shown(result));
  assert.equal(result.statusCode, null);
});

test('close() closes the kept-alive connections', async (t) => {
  // The receiver keeps idle connections a minute (and says so in Keep-Alive): only close() ends them within the test.
  const server = createHttpsServer({ key: tls.keyPem, cert: tls.certPem, keepAliveTimeout: 60_000 }, (req, res) => {
    req.resume();
    req.on('end', () => res.end('ok'));
  });
  const receiver = await listenCounting(t, server);
  const deliverer = makeDeliverer(t);
  for (let i = 0; i < 3; i++) assert.equal((await deliverer.deliver(request(`https://127.0.0.1:${receiver.port}/hook`))).statusCode, 200);
  await sleep(300);
  assert.ok(receiver.open() >= 1, 'no kept-alive connection to close');
  await deliverer.close();
  await waitFor('the receiver to see its connections closed', () => receiver.open() === 0, 5_000);
});

// ---------------------------------------------------------------------------------------------
// 8. Internal answers

test('an internal receiver answer is withheld from the log unless delivery.storeInternalResponses lists the organization', async (t) => {
  const big = 'y'.repeat(50_000);
  const receiver = await startReceiver(t, tls, (req) => ({ status: req.path === '/big' ? 500 : 200, body: req.path === '/big' ? big : 'internal secrets here' }));
  const deliverer = makeDeliverer(t, { allowNetworks: ['127.0.0.1/32'], storeInternalResponses: ['org-keeps'] });

  const withheld = await deliverer.deliver(request(receiver.url, { orgId: 'org-plain' }));
  assert.equal(withheld.statusCode, 200, shown(withheld));
  assert.equal(withheld.responseBody, internalBodyWithheld(Buffer.byteLength('internal secrets here'), false));
  assert.match(withheld.responseBody ?? '', /^\(not stored: 21 bytes from a receiver on an internal network/);

  const cut = await deliverer.deliver(request(`https://127.0.0.1:${receiver.port}/big`, { orgId: 'org-plain' }));
  assert.equal(cut.statusCode, 500, shown(cut));
  assert.equal(cut.responseBody, internalBodyWithheld(MAX_RESPONSE_BYTES, true));

  // By name: what localhost resolved to is internal.
  const byName = await deliverer.deliver(request(`https://localhost:${receiver.port}/hook`, { orgId: 'org-plain' }));
  assert.equal(byName.statusCode, 200, shown(byName));
  assert.equal(byName.responseBody, internalBodyWithheld(21, false));

  const kept = await deliverer.deliver(request(receiver.url, { orgId: 'org-keeps' }));
  assert.equal(kept.statusCode, 200, shown(kept));
  assert.equal(kept.responseBody, 'internal secrets here');
  const keptBig = await deliverer.deliver(request(`https://127.0.0.1:${receiver.port}/big`, { orgId: 'org-keeps' }));
  assert.equal(keptBig.responseBody, 'y'.repeat(MAX_RESPONSE_BYTES));
});

test('an organization granted a network of its own reaches it (answers withheld); the others are still refused', async (t) => {
  const receiver = await startReceiver(t, tls, () => ({ status: 200, body: 'from inside' }));
  const deliverer = makeDeliverer(t, { allowNetworks: [], organizationNetworks: ['org-granted=127.0.0.1/32'], storeInternalResponses: [] });
  const granted = await deliverer.deliver(request(receiver.url, { orgId: 'org-granted' }));
  assert.equal(granted.statusCode, 200, shown(granted));
  assert.equal(granted.responseBody, internalBodyWithheld(11, false));
  const other = await deliverer.deliver(request(receiver.url, { orgId: 'org-other' }));
  assert.equal(other.error, AttemptError.blocked, shown(other));
  const otherByName = await deliverer.deliver(request(`https://localhost:${receiver.port}/hook`, { orgId: 'org-other' }));
  assert.equal(otherByName.error, AttemptError.blocked, shown(otherByName));
  assert.equal(receiver.requests.length, 1);
});

test('a request whose send-by time passes before its first byte can be written (a connection slow to open, a process paused) is not sent at all: nothing reaches the receiver', { timeout: 30_000 }, async (t) => {
  const receiver = await startReceiver(t, tls);
  // A relay that holds the client's first bytes (its TLS hello) for 600 ms: the connection opens late.
  const target = new URL(receiver.url);
  const relay = createNetServer((client) => {
    const upstream = netConnect(Number(target.port), '127.0.0.1');
    let first = true;
    client.on('data', (chunk: Buffer) => {
      if (!first) return void upstream.write(chunk);
      first = false;
      client.pause();
      setTimeout(() => {
        upstream.write(chunk);
        client.resume();
      }, 600);
    });
    upstream.on('data', (chunk: Buffer) => client.write(chunk));
    for (const s of [client, upstream]) s.on('error', () => {});
    client.on('close', () => upstream.destroy());
    upstream.on('close', () => client.destroy());
  });
  const { port } = await listenCounting(t, relay);
  const deliverer = makeDeliverer(t);
  await assert.rejects(deliverer.deliver(request(`https://127.0.0.1:${port}/hook`, { sendBy: performance.now() + 150 })), NotSentInTime);
  await sleep(300);
  assert.equal(receiver.requests.length, 0, 'nothing reached the receiver');
  // In time, the same way: sent.
  const onTime = await deliverer.deliver(request(`https://127.0.0.1:${port}/hook`, { sendBy: performance.now() + 5000 }));
  assert.equal(onTime.statusCode, 200, shown(onTime));
  assert.equal(receiver.requests.length, 1);
});

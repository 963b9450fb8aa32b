/**
 * /metrics and the console answer only requests whose Host names their listener (issue 31,
 * point 5), so that a page in a local browser cannot read them through DNS rebinding; a
 * listener given as a name is judged by the address it actually bound (the built daemon in a
 * network namespace whose hosts file points `localhost` elsewhere). Every console answer, the
 * refusals and errors included, carries the console's security headers (issue 47, point 1).
 * Real relays, raw HTTP requests with the Host header the test chooses.
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { request, type IncomingHttpHeaders } from 'node:http';
import { hostname, networkInterfaces } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { promisify } from 'node:util';
import { CONSOLE_CSP } from '../../src/api/console.ts';
import { assertBuilt, CLI, scratchDir, spawnWatched } from '../helpers/feed-helpers.ts';
import { startRelay } from '../helpers/helpers.ts';

const execFileAsync = promisify(execFile);

interface RawResponse {
  readonly status: number;
  readonly headers: IncomingHttpHeaders;
  readonly body: string;
}

/** `method` `path` to 127.0.0.1:`port` with the Host header `host` (none when null). */
function send(port: number, method: string, path: string, host: string | null): Promise<RawResponse> {
  return new Promise((resolve, reject) => {
    const req = request({ host: '127.0.0.1', port, path, method, setHost: false, headers: host === null ? {} : { host } }, (res) => {
      let body = '';
      res.setEncoding('utf8').on('data', (chunk: string) => (body += chunk));
      res.on('end', () => resolve({ status: res.statusCode!, headers: res.headers, body }));
    });
    req.on('error', reject);
    req.end();
  });
}

/** GET `path` from 127.0.0.1:`port` with the Host header `host` (none when null). */
const get = (port: number, path: string, host: string | null) => send(port, 'GET', path, host);

/** The console's security headers, as docs/console.md lists them. */
const CONSOLE_SECURITY_HEADERS: Readonly<Record<string, string>> = {
  'content-security-policy': CONSOLE_CSP,
  'x-content-type-options': 'nosniff',
  'referrer-policy': 'no-referrer',
  'x-frame-options': 'DENY',
  'cross-origin-opener-policy': 'same-origin',
  'cache-control': 'no-store',
};

/** Asserts the 403 of a Host that does not name the listener: a problem that says why and what to set, and nothing of the metrics. */
function assertRefusedHost(res: { status: number; body: string }, what: string): void {
  assert.equal(res.status, 403, `${what}: ${res.body}`);
  const body = JSON.parse(res.body) as { code: string; detail: string };
  assert.equal(body.code, 'forbidden');
  assert.match(body.detail, /answers only requests addressed to this listener .* by one of its own names or addresses.*DNS rebinding.*api\.allowedHosts/);
  assert.doesNotMatch(res.body, /hookrelay_/);
}

test('/metrics and the console answer only to the listener\'s own names and addresses in Host; the API and the probes to any', async (t) => {
  const relay = await startRelay(t);
  const { port } = relay.relay.address();
  for (const host of [`127.0.0.1:${port}`, `localhost:${port}`, `LOCALHOST.:${port}`]) {
    assert.equal((await get(port, '/metrics', host)).status, 200, host);
    assert.equal((await get(port, '/console/', host)).status, 200, host);
  }
  // (A request without Host is refused by Node's HTTP server itself, 400.)
  for (const host of [`evil.example:${port}`, `127.0.0.1.nip.io:${port}`, `127.0.0.1:${port + 1}`, '127.0.0.1', `[::1]:${port}`, `localhost:${port}@evil.example`]) {
    assertRefusedHost(await get(port, '/metrics', host), `/metrics, Host ${host}`);
    assertRefusedHost(await get(port, '/console/', host), `/console/, Host ${host}`);
    assertRefusedHost(await get(port, '/console', host), `/console, Host ${host}`);
    assertRefusedHost(await get(port, '/console/app.js', host), `/console/app.js, Host ${host}`);
  }
  // What needs a token, and the probes, are not Host-checked.
  assert.equal((await get(port, '/healthz', `evil.example:${port}`)).status, 200);
  assert.equal((await get(port, '/readyz', `evil.example:${port}`)).status, 200);
  // A long Host is quoted as a short excerpt.
  const long = await get(port, '/metrics', `${'h'.repeat(5000)}:${port}`);
  assert.equal(long.status, 403);
  assert.ok(long.body.length < 1_000, `${long.body.length} bytes`);
});

test('every answer under /console/ carries the console\'s security headers: the files, the redirect, HEAD, OPTIONS, 404, 405, the 403 of a foreign Host and the 429 of too many 404s', async (t) => {
  const relay = await startRelay(t, { 'api.rateLimitPerMinute': '60', 'api.rateLimitBurst': '20' });
  const { port } = relay.relay.address();
  const own = `127.0.0.1:${port}`;
  const foreign = `evil.example:${port}`;
  const answers: Array<readonly [method: string, path: string, host: string, status: number]> = [
    ['GET', '/console/', own, 200],
    ['GET', '/console/app.js', own, 200],
    ['HEAD', '/console/', own, 200],
    ['GET', '/console', own, 302],
    // @koa/router matches paths in any case: /CONSOLE/ is the console too.
    ['GET', '/CONSOLE/', own, 200],
    ['GET', '/console/nope.js', own, 404],
    ['POST', '/console/', own, 405],
    ['DELETE', '/console/', own, 405],
    ['PUT', '/console/app.js', own, 405],
    ['OPTIONS', '/console/', own, 200],
    ['OPTIONS', '/console/x', own, 200],
    // A foreign Host is refused whatever the method, before any route, 404 or 405 is looked for.
    ['GET', '/console/', foreign, 403],
    ['GET', '/console', foreign, 403],
    ['GET', '/console/app.js', foreign, 403],
    ['GET', '/console/nope.js', foreign, 403],
    ['HEAD', '/console/', foreign, 403],
    ['POST', '/console/', foreign, 403],
    ['DELETE', '/console/x', foreign, 403],
    ['OPTIONS', '/console/', foreign, 403],
    ['OPTIONS', '/console/x', foreign, 403],
  ];
  for (const [method, path, host, status] of answers) {
    const what = `${method} ${path}, Host ${host}`;
    const res = await send(port, method, path, host);
    assert.equal(res.status, status, `${what}: ${res.body}`);
    for (const [name, value] of Object.entries(CONSOLE_SECURITY_HEADERS)) assert.equal(res.headers[name], value, `${what}: ${name}`);
    if (status === 403 && method !== 'HEAD') assertRefusedHost(res, what);
    if (status === 405 || (method === 'OPTIONS' && status === 200)) assert.equal(res.headers.allow, 'HEAD, GET', what);
  }
  // Enough 404s from one address are 429: secured too.
  let limited: RawResponse | null = null;
  for (let i = 0; i < 40 && limited === null; i++) {
    const res = await send(port, 'GET', `/console/nope-${i}.js`, own);
    if (res.status === 429) limited = res;
    else assert.equal(res.status, 404);
  }
  assert.ok(limited !== null, 'no 429 after 40 404s');
  for (const [name, value] of Object.entries(CONSOLE_SECURITY_HEADERS)) assert.equal(limited.headers[name], value, `429: ${name}`);
  // Only the console's answers: the API's and a path that merely starts like it are not.
  for (const path of ['/healthz', '/consoles', '/console.js']) assert.equal((await send(port, 'GET', path, own)).headers['content-security-policy'], undefined, path);
});

test('api.allowedHosts and console.publicUrl add names (with or without a port); the metrics listener of its own checks its Host too', async (t) => {
  const relay = await startRelay(t, { 'api.allowedHosts': 'relay.internal,scrape.example:9999,[fd00::5]', 'console.publicUrl': 'https://relay.example.com/ops' });
  const { port } = relay.relay.address();
  // A name without a port is the operator's on any port (a proxy may or may not pass the port on).
  for (const host of ['relay.internal:1', `relay.internal:${port}`, 'scrape.example:9999', 'relay.example.com', 'relay.example.com:8443', '[fd00::5]:8080', `127.0.0.1:${port}`]) {
    assert.equal((await get(port, '/metrics', host)).status, 200, host);
    assert.equal((await get(port, '/console/', host)).status, 200, host);
  }
  for (const host of [`scrape.example:${port}`, 'other.example.com', 'example.com']) assertRefusedHost(await get(port, '/metrics', host), host);

  const own = await startRelay(t, { 'metrics.listen': '127.0.0.1:0', 'api.allowedHosts': 'prometheus-target.internal:9464' });
  const metricsPort = own.relay.metricsAddress()!.port;
  assert.equal((await get(metricsPort, '/metrics', `127.0.0.1:${metricsPort}`)).status, 200);
  assert.equal((await get(metricsPort, '/metrics', 'prometheus-target.internal:9464')).status, 200);
  assertRefusedHost(await get(metricsPort, '/metrics', `evil.example:${metricsPort}`), 'own listener');
  assertRefusedHost(await get(metricsPort, '/metrics', `127.0.0.1:${own.relay.address().port}`), 'the admin port on the metrics listener');
});

test('a listener on every address answers to every address of this machine and its host name, not to other names', async (t) => {
  const relay = await startRelay(t, { 'api.listen': '0.0.0.0:0', 'metrics.allowUnauthenticated': 'true' });
  const { port } = relay.relay.address();
  const addresses = Object.values(networkInterfaces())
    .flat()
    .filter((a) => a !== undefined && a.family === 'IPv4')
    .map((a) => a!.address);
  for (const host of [...addresses.map((a) => `${a}:${port}`), `${hostname()}:${port}`, `localhost:${port}`]) {
    assert.equal((await get(port, '/metrics', host)).status, 200, host);
  }
  assertRefusedHost(await get(port, '/metrics', `evil.example:${port}`), 'evil.example');
  assertRefusedHost(await get(port, '/metrics', `192.0.2.77:${port}`), 'an address of another machine');
});

test('a listener given as a name is judged by the address it bound: localhost resolving to a LAN address serves no metrics without a token (the built daemon, in a network namespace with its own hosts file)', { timeout: 60_000 }, async (t) => {
  assertBuilt();
  const dir = scratchDir(t);
  const hosts = join(dir, 'hosts');
  // localhost is not loopback here: what a tampered or careless hosts file does.
  writeFileSync(hosts, '10.99.0.1 localhost\n');
  const daemon = spawnWatched(t, 'unshare', [
    '-m',
    '-n',
    'sh',
    '-c',
    'mount --bind "$0" /etc/hosts && ip link set lo up && ip addr add 10.99.0.1/32 dev lo && exec "$@"',
    hosts,
    process.execPath,
    CLI,
    'serve',
    '--state-dir',
    join(dir, 'state'),
    '--listen',
    'localhost:8083',
  ]);
  const listening = JSON.parse(await daemon.line(/"msg":"admin API listening"/)) as { host: string; port: number };
  assert.deepEqual([listening.host, listening.port], ['10.99.0.1', 8083]);
  const warned = JSON.parse(await daemon.line(/GET \/metrics is refused/)) as { level: number; msg: string };
  assert.equal(warned.level, 40);
  assert.match(warned.msg, /this listener is at localhost:8083 \(bound to 10\.99\.0\.1\), which is not a loopback address, and no metrics token is set/);

  // From inside the namespace (the daemon's pid is the namespace's: unshare and sh exec it).
  const probe = async (host: string, path: string) => {
    // node:http, not fetch: fetch sends the URL's host whatever the headers say.
    const script =
      `import { request } from 'node:http'; ` +
      `request({ host: '10.99.0.1', port: 8083, path: ${JSON.stringify(path)}, setHost: false, headers: { host: ${JSON.stringify(host)} } }, (res) => { ` +
      `let body = ''; res.setEncoding('utf8').on('data', (c) => (body += c)); res.on('end', () => console.log(JSON.stringify({ status: res.statusCode, body }))); }).end();`;
    const { stdout } = await execFileAsync('nsenter', ['--target', String(daemon.child.pid), '--net', process.execPath, '--input-type=module', '-e', script], { encoding: 'utf8' });
    return JSON.parse(stdout) as { status: number; body: string };
  };
  const metrics = await probe('10.99.0.1:8083', '/metrics');
  assert.equal(metrics.status, 403, metrics.body);
  assert.match((JSON.parse(metrics.body) as { detail: string }).detail, /bound to 10\.99\.0\.1\), which is not a loopback address/);
  assert.doesNotMatch(metrics.body, /hookrelay_/);
  // The name it was given, and the address it bound, are its own; localhost is not a loopback name here.
  assert.equal((await probe('localhost:8083', '/console/')).status, 200);
  assert.equal((await probe('10.99.0.1:8083', '/console/')).status, 200);
  assert.equal((await probe('evil.example:8083', '/console/')).status, 403);
});

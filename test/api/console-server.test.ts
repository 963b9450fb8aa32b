/**
 * The console as the daemon serves it (docs/console.md): its built files under /console/ with
 * their security headers, nothing outside them, and the API additions it relies on (who the
 * token is, disable and enable); `hookrelay console link` as a user runs it. The browser side is
 * test/e2e/console.e2e.test.ts. `npm test` builds dist/console first.
 */
import assert from 'node:assert/strict';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import Koa from 'koa';
import { Router } from '@koa/router';
import { CONSOLE_CSP, CONSOLE_DIR, consoleGuard, loadConsoleFiles, registerConsoleRoutes } from '../../src/api/console.ts';
import { consoleLink } from '../../src/cli/console.ts';
import { writeProblem } from '../../src/api/problem.ts';
import type { HookrelayError } from '../../src/domain/errors.ts';
import { call, seedOrg, startRelay } from '../helpers/helpers.ts';
import { runCli } from '../helpers/feed-helpers.ts';

const SECURITY_HEADERS = {
  'content-security-policy': CONSOLE_CSP,
  'x-content-type-options': 'nosniff',
  'referrer-policy': 'no-referrer',
  'x-frame-options': 'DENY',
};

function assertSecured(res: { headers: Headers }, what: string): void {
  for (const [name, value] of Object.entries(SECURITY_HEADERS)) assert.equal(res.headers.get(name), value, `${what}: ${name}`);
}

test('the console is served under /console/ from the build, with a strict CSP on every answer, and nothing outside its files', async (t) => {
  assert.ok(existsSync(join(CONSOLE_DIR, 'index.html')), `${CONSOLE_DIR}index.html is missing: npm run build builds the console`);
  const relay = await startRelay(t);

  const index = await fetch(`${relay.baseUrl}/console/`);
  assert.equal(index.status, 200);
  assert.equal(index.headers.get('content-type'), 'text/html; charset=utf-8');
  assertSecured(index, 'GET /console/');
  const html = await index.text();
  assert.equal(html, readFileSync(join(CONSOLE_DIR, 'index.html'), 'utf8'));
  // Scripts from this origin only, as modules; no inline script for the CSP to block.
  const scripts = [...html.matchAll(/<script\b[^>]*>/g)].map((m) => m[0]);
  assert.ok(scripts.length > 0, 'index.html loads a script');
  for (const tag of scripts) assert.match(tag, /\bsrc="(\.\/|\/console\/)[\w./-]+\.js"/, `a script from the console's own files: ${tag}`);
  assert.doesNotMatch(html, /<script\b[^>]*>[^<\s]/, 'no inline script');
  assert.doesNotMatch(html, /\bstyle="/, 'no inline style');

  // Each built file, with its type.
  for (const [path, file] of loadConsoleFiles()) {
    if (path === '') continue;
    const res = await fetch(`${relay.baseUrl}/console/${path}`);
    assert.equal(res.status, 200, path);
    assert.equal(res.headers.get('content-type'), file.type, path);
    assertSecured(res, path);
    assert.deepEqual(Buffer.from(await res.arrayBuffer()), file.body, path);
  }
  const redirect = await fetch(`${relay.baseUrl}/console`, { redirect: 'manual' });
  assert.equal(redirect.status, 302);
  assert.equal(redirect.headers.get('location'), 'console/');

  // Only the build's own files: unknown names and any way out of the folder are 404, secured too.
  for (const path of ['/console/nope.js', '/console/../package.json', '/console/%2e%2e/package.json', '/console/..%2fpackage.json', '/console/%2e%2e%2f%2e%2e%2fetc%2fpasswd', '/console//etc/passwd']) {
    const res = await fetch(relay.baseUrl + path);
    assert.equal(res.status, 404, path);
    const text = await res.text();
    assert.doesNotMatch(text, /"name": "hookrelay"|root:/, `${path} leaked a file`);
  }
  const missing = await fetch(`${relay.baseUrl}/console/nope.js`);
  assertSecured(missing, '404');
  const post = await call(relay.baseUrl, 'POST', '/console/');
  assert.equal(post.status, 405);
});

test('a daemon whose console was not built says so, instead of a bare 404', async () => {
  const files = loadConsoleFiles(join(CONSOLE_DIR, 'no-such-folder'));
  assert.equal(files.size, 0);
  const app = new Koa();
  const router = new Router();
  registerConsoleRoutes(router, files);
  // The admin API's own error mapping (problem+json).
  app.use(async (ctx, next) => {
    try {
      await next();
    } catch (err) {
      writeProblem(ctx, err as HookrelayError);
    }
  });
  app.use(consoleGuard());
  app.use(router.routes());
  const server = app.listen(0, '127.0.0.1');
  await new Promise((resolve) => server.once('listening', resolve));
  try {
    const { port } = server.address() as { port: number };
    const res = await fetch(`http://127.0.0.1:${port}/console/`);
    assert.equal(res.status, 404);
    assert.match(await res.text(), /console was not built: run npm run build/);
    assert.equal(res.headers.get('content-security-policy'), CONSOLE_CSP);
  } finally {
    server.close();
  }
});

test('GET /users/me says who the token is; POST /webhook/disable and /webhook/enable hold and release deliveries, admins only', async (t) => {
  const relay = await startRelay(t);
  const { admin, viewer } = await seedOrg(relay.services, 'acme');
  await seedOrg(relay.services, 'globex');
  const adminToken = relay.token('acme', admin);
  const viewerToken = relay.token('acme', viewer);

  const me = await call(relay.baseUrl, 'GET', '/users/me', { token: adminToken });
  assert.equal(me.status, 200);
  assert.deepEqual(me.body, { email: admin, organization_id: 'acme', role: 'saas_admin', permissions: ['roles:read', 'users:manage', 'webhook:read', 'webhook:manage', 'audit:read', 'api_keys:manage'] });
  const viewerMe = await call(relay.baseUrl, 'GET', '/users/me', { token: viewerToken });
  assert.deepEqual(viewerMe.body, { email: viewer, organization_id: 'acme', role: 'saas_viewer', permissions: ['roles:read', 'webhook:read'] });
  assert.equal((await call(relay.baseUrl, 'GET', '/users/me')).status, 401);

  const none = await call(relay.baseUrl, 'POST', '/webhook/disable', { token: adminToken });
  assert.equal(none.status, 404);
  assert.equal(none.body.code, 'webhook_not_configured');
  await call(relay.baseUrl, 'POST', '/webhook/register_webhook', { token: adminToken, body: { webhook_url: 'https://hooks.acme.example/in' } });
  await call(relay.baseUrl, 'POST', '/webhook/register_webhook', { token: relay.token('globex', 'admin@globex.test'), body: { webhook_url: 'https://hooks.globex.example/in' } });

  const refused = await call(relay.baseUrl, 'POST', '/webhook/disable', { token: viewerToken });
  assert.equal(refused.status, 403);
  assert.equal((await call(relay.baseUrl, 'GET', '/webhook/get_webhook', { token: adminToken })).body.status, 'active', 'a refused request changed nothing');

  const disabled = await call(relay.baseUrl, 'POST', '/webhook/disable', { token: adminToken });
  assert.equal(disabled.status, 200);
  assert.equal(disabled.body.status, 'disabled');
  assert.equal(disabled.body.disabled_reason, 'operator');
  assert.match(disabled.body.message, /held, not dropped/);
  // Another organization's webhook is untouched.
  assert.equal((await call(relay.baseUrl, 'GET', '/webhook/get_webhook', { token: relay.token('globex', 'admin@globex.test') })).body.status, 'active');
  const enabled = await call(relay.baseUrl, 'POST', '/webhook/enable', { token: adminToken });
  assert.equal(enabled.status, 200);
  assert.equal(enabled.body.status, 'active');
  assert.equal(enabled.body.disabled_reason, null);
});

test('hookrelay console link prints one URL whose fragment holds a token the API accepts, from api.listen or console.publicUrl', async (t) => {
  assert.equal(consoleLink('https://relay.example.com/', 'abc'), 'https://relay.example.com/console/#token=abc');
  const relay = await startRelay(t);
  const { admin } = await seedOrg(relay.services, 'acme');
  const stateDir = relay.config.stateDir;

  const linked = await runCli(t, ['console', 'link', '--org', 'acme', '--email', admin, '--state-dir', stateDir, '--listen', '127.0.0.1:18080']);
  assert.equal(linked.code, 0, linked.stderr);
  const url = linked.stdout.trim();
  assert.match(url, /^http:\/\/127\.0\.0\.1:18080\/console\/#token=[\w-]+\.[\w-]+\.[\w-]+$/);
  const token = url.slice(url.indexOf('#token=') + '#token='.length);
  const me = await call(relay.baseUrl, 'GET', '/users/me', { token });
  assert.equal(me.status, 200, me.text);
  assert.equal(me.body.email, admin);
  // One hour unless --ttl.
  const claims = JSON.parse(Buffer.from(token.split('.')[1]!, 'base64url').toString('utf8')) as { iat: number; exp: number };
  assert.equal(claims.exp - claims.iat, 3600);

  const behindProxy = await runCli(t, ['console', 'link', '--org', 'acme', '--email', admin, '--ttl', '15m', '--json', '--state-dir', stateDir], { env: { HOOKRELAY_CONSOLE_PUBLIC_URL: 'https://relay.example.com/ops' } });
  assert.equal(behindProxy.code, 0, behindProxy.stderr);
  const json = JSON.parse(behindProxy.stdout) as { url: string; expires_at: string };
  assert.match(json.url, /^https:\/\/relay\.example\.com\/ops\/console\/#token=/);
  assert.ok(Math.abs(Date.parse(json.expires_at) - Date.now() - 15 * 60_000) < 60_000, json.expires_at);

  // Port 0 (chosen at start) cannot make a link; an unknown user gets none.
  const portZero = await runCli(t, ['console', 'link', '--org', 'acme', '--email', admin, '--state-dir', stateDir, '--listen', '127.0.0.1:0']);
  assert.equal(portZero.code, 2);
  assert.match(portZero.stderr, /^hookrelay: api\.listen is 127\.0\.0\.1:0: .*pass --listen HOST:PORT, or set console\.publicUrl\n$/);
  const stranger = await runCli(t, ['console', 'link', '--org', 'acme', '--email', 'nobody@acme.test', '--state-dir', stateDir, '--listen', '127.0.0.1:18080']);
  assert.equal(stranger.code, 1);
  assert.equal(stranger.stdout, '');
  // A publicUrl with a query or fragment is a configuration error.
  const bad = await runCli(t, ['console', 'link', '--org', 'acme', '--email', admin, '--state-dir', stateDir], { env: { HOOKRELAY_CONSOLE_PUBLIC_URL: 'https://relay.example.com/?x=1' } });
  assert.equal(bad.code, 2);
  assert.match(bad.stderr, /HOOKRELAY_CONSOLE_PUBLIC_URL/);
});

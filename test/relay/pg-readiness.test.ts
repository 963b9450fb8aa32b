/**
 * /readyz of a daemon on PostgreSQL while the server cannot be reached (issue 46): it answers
 * 503 `database_unreachable` with the reason, within a few seconds, both when the server
 * refuses connections (stopped, restarting) and when it answers nothing at all (a network cut:
 * a connection that was open simply goes silent), and 200 again by itself once the server
 * answers. The daemon runs in this process (createRelay) with its database URL pointing at a
 * TCP relay the test controls, in front of the test server (test/helpers/pg-harness.ts).
 */
import assert from 'node:assert/strict';
import { connect, createServer, type Server, type Socket } from 'node:net';
import { join } from 'node:path';
import { after, test, type TestContext } from 'node:test';
import { loadConfig } from '../../src/config/load.ts';
import { createLogger } from '../../src/log.ts';
import { createRelay } from '../../src/relay.ts';
import { scratchDir } from '../helpers/feed-helpers.ts';
import { pgServer, stopPgServer } from '../helpers/pg-harness.ts';

after(stopPgServer);

type Mode = 'pass' | 'silent' | 'refuse';

/**
 * A TCP relay to `target`: `pass` relays, `silent` keeps every connection open and relays
 * nothing more either way (what a cut link looks like), `refuse` closes every connection and
 * refuses new ones (a server that is down).
 */
async function linkTo(t: TestContext, target: { host: string; port: number }) {
  let mode: Mode = 'pass';
  const open = new Set<Socket>();
  let server: Server | null = null;
  let port = 0;
  const listen = () =>
    new Promise<void>((resolve) => {
      server = createServer((client) => {
        const upstream = connect(target);
        open.add(client);
        open.add(upstream);
        client.on('data', (c: Buffer) => mode === 'pass' && upstream.write(c));
        upstream.on('data', (c: Buffer) => mode === 'pass' && client.write(c));
        const end = () => {
          client.destroy();
          upstream.destroy();
          open.delete(client);
          open.delete(upstream);
        };
        for (const s of [client, upstream]) {
          s.on('error', end);
          s.on('close', end);
        }
      });
      server.listen(port, '127.0.0.1', () => {
        port = (server!.address() as { port: number }).port;
        resolve();
      });
    });
  await listen();
  const close = () => new Promise<void>((resolve) => (server === null ? resolve() : server.close(() => resolve())));
  t.after(async () => {
    for (const s of open) s.destroy();
    await close();
  });
  return {
    port: () => port,
    async set(next: Mode) {
      if (next === 'refuse') {
        for (const s of open) s.destroy();
        await close();
        server = null;
      } else if (mode === 'refuse') await listen();
      mode = next;
    },
  };
}

async function readyz(base: string): Promise<{ status: number; body: Record<string, unknown>; ms: number }> {
  const t0 = performance.now();
  const res = await fetch(`${base}/readyz`, { signal: AbortSignal.timeout(15_000) });
  return { status: res.status, body: (await res.json()) as Record<string, unknown>, ms: performance.now() - t0 };
}

test('PostgreSQL out of reach: /readyz answers 503 database_unreachable within seconds, whether the server refuses or answers nothing, and 200 again by itself', { timeout: 120_000 }, async (t) => {
  const server = await pgServer();
  const url = new URL(await server.createDatabase());
  const link = await linkTo(t, { host: server.host, port: server.port });
  url.port = String(link.port());
  const dir = scratchDir(t, 'hookrelay-pg-ready-');
  const config = loadConfig({
    env: {},
    overrides: { stateDir: dir, 'api.listen': '127.0.0.1:0', 'feed.path': join(dir, 'feed.jsonl'), 'database.url': url.href, 'instance.name': 'ready-a', 'database.poolSize': '3' },
  });
  const relay = createRelay(config, { log: createLogger('silent') });
  await relay.start();
  t.after(() => relay.stop());
  const base = `http://127.0.0.1:${relay.address().port}`;
  assert.equal((await readyz(base)).status, 200);

  // A cut: every connection open goes silent.
  await link.set('silent');
  const cut = await readyz(base);
  assert.equal(cut.status, 503, JSON.stringify(cut.body));
  assert.equal(cut.body.reason, 'database_unreachable', JSON.stringify(cut.body));
  assert.ok(cut.ms < 8000, `answered in ${Math.round(cut.ms)} ms`);
  // Asked again meanwhile, it answers as fast (it does not pile up probes on silent connections).
  const again = await readyz(base);
  assert.deepEqual([again.status, again.body.reason], [503, 'database_unreachable']);
  assert.ok(again.ms < 8000, `answered in ${Math.round(again.ms)} ms`);

  // The server refuses: the same answer, with what the driver said.
  await link.set('refuse');
  const down = await readyz(base);
  assert.deepEqual([down.status, down.body.reason], [503, 'database_unreachable'], JSON.stringify(down.body));
  assert.equal(typeof down.body.detail, 'string');
  assert.equal(typeof down.body.since, 'string');

  // Back: ready again by itself.
  await link.set('pass');
  const deadline = performance.now() + 60_000;
  let back = await readyz(base);
  while (back.status !== 200 && performance.now() < deadline) {
    await new Promise((r) => setTimeout(r, 250));
    back = await readyz(base);
  }
  assert.equal(back.status, 200, JSON.stringify(back.body));
});

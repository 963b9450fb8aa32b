/**
 * A webhook's rate limit end to end (issue 29), with the built CLI (`npm run build` first): a
 * `hookrelay serve` process on a SQLite file, real HTTPS receivers on 127.0.0.1, webhooks set
 * with `hookrelay webhook set --rate-limit`. Checked at the receivers, where it matters: no
 * one-second window (any window, each starting at a request's arrival) holds more requests
 * than the limit, over a backlog of 200; meanwhile an unlimited webhook of another
 * organization gets all its events long before the limited one is done; waiting costs no
 * attempt, no failure, no lease; a limit changed while a backlog waits, lowered or removed,
 * holds from the next claim on; `hookrelay status` and the metrics show what waits.
 */
import assert from 'node:assert/strict';
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { test, type TestContext } from 'node:test';
import Database from 'better-sqlite3';
import { RATE_WINDOW_MS } from '../../src/domain/rate-window.ts';
import { assertBuilt, databaseIn, runCli, scratchDir, spawnServe } from '../helpers/feed-helpers.ts';
import { arrivalWindow, busiestWindow, leastSlack, START_ALLOWANCE_MS, startTimedReceiver } from '../helpers/rate-limit-helpers.ts';
import { appendFeed, createTestTls, eventIdOf, feedLine, startReceiver, waitFor, type Receiver } from '../helpers/receivers.ts';


const PER_WEBHOOK = 4;

function setup(t: TestContext, caFile: string) {
  const dir = scratchDir(t, 'hookrelay-rate-');
  const stateDir = join(dir, 'state');
  mkdirSync(stateDir);
  const configFile = join(dir, 'hookrelay.json');
  writeFileSync(
    configFile,
    JSON.stringify({
      delivery: { allowNetworks: ['127.0.0.1/32'], caFile, concurrency: 16, perWebhookConcurrency: PER_WEBHOOK, pollInterval: '100ms', jitterPercent: 0 },
      feed: { pollInterval: 20 },
      metrics: { refreshInterval: '1s' },
      log: { level: 'info' },
    }),
  );
  const cli = (args: string[]) => runCli(t, [...args, '--config', configFile, '--state-dir', stateDir]);
  return { stateDir, configFile, cli, feed: join(stateDir, 'feed.jsonl') };
}

async function registered(cli: (args: string[]) => Promise<{ code: number | null; stdout: string; stderr: string }>, org: string, url: string, extra: string[] = []): Promise<void> {
  const r = await cli(['webhook', 'set', '--org', org, '--url', url, ...extra]);
  assert.equal(r.code, 0, r.stderr);
}

/** An install with acme's webhook limited to `limit` a second, at an HTTPS receiver of this test (the daemon not started). */
async function limitedInstall(t: TestContext, limit: number) {
  assertBuilt();
  const tls = createTestTls(t);
  const receiver = await startReceiver(t, tls);
  const s = setup(t, tls.caFile);
  assert.equal((await s.cli(['migrate'])).code, 0);
  assert.equal((await s.cli(['orgs', 'add', 'acme'])).code, 0);
  await registered(s.cli, 'acme', receiver.url, ['--rate-limit', String(limit)]);
  return { receiver, s };
}

function arrivals(receiver: Receiver): number[] {
  return receiver.requests.map((r) => r.receivedAt);
}

test('20/s over 200 events: no one-second window above 20 at the receiver, an unlimited webhook of another organization not slowed, and waiting is no attempt, no failure, no lease', { timeout: 180_000 }, async (t) => {
  assertBuilt();
  const tls = createTestTls(t);
  // The limited webhook's receiver in a process of its own: the other one's flood arrives in
  // this process, and must not delay the times the bound is checked on.
  const limited = await startTimedReceiver(t, tls);
  const free = await startReceiver(t, tls);
  const s = setup(t, tls.caFile);
  assert.equal((await s.cli(['migrate'])).code, 0);
  for (const org of ['acme', 'globex']) assert.equal((await s.cli(['orgs', 'add', org])).code, 0);
  await registered(s.cli, 'acme', limited.url, ['--rate-limit', '20']);
  await registered(s.cli, 'globex', free.url);
  const shown = await s.cli(['webhook', 'get', '--org', 'acme', '--json']);
  assert.equal(JSON.parse(shown.stdout).rate_limit, 20);

  const daemon = await spawnServe(t, s.stateDir, ['--config', s.configFile]);
  const db = new Database(databaseIn(s.stateDir), { readonly: true });
  t.after(() => db.close());
  const delivered = db.prepare("SELECT count(*) AS n FROM deliveries WHERE org_id = 'acme' AND status = 'delivered'");
  // Warm up: the connections the backlog will use are opened (a TLS handshake delays the first
  // request on each, which the limit, counting when requests are sent, cannot know of), and
  // kept alive (5 s, the receiver's keep-alive) into the backlog.
  appendFeed(s.feed, Array.from({ length: 20 }, (_, i) => feedLine('acme', `evt_warm_${i}`)));
  await waitFor('the warm-up delivered', () => (delivered.get() as { n: number }).n === 20, 30_000);
  // Both organizations' events in one append: ingested together, queued together.
  const lines = [];
  for (let i = 0; i < 200; i++) lines.push(feedLine('acme', `evt_a_${i}`), feedLine('globex', `evt_g_${i}`));
  appendFeed(s.feed, lines);

  // While acme's backlog waits: never more leased than can be in flight (nothing claimed
  // ahead, nothing leased to wait). Nothing heavier runs meanwhile: the arrival times are the
  // measurement.
  const leasedNow = db.prepare("SELECT count(*) AS n FROM deliveries WHERE org_id = 'acme' AND status = 'pending' AND lease_expires_at IS NOT NULL");
  let maxLeased = 0;
  for (const deadline = Date.now() + 120_000; (delivered.get() as { n: number }).n < 220; ) {
    maxLeased = Math.max(maxLeased, (leasedNow.get() as { n: number }).n);
    if (daemon.child.exitCode !== null) assert.fail(`the daemon exited: ${daemon.stderr()}`);
    if (Date.now() > deadline) assert.fail('acme\'s 200 deliveries were not all delivered within 2 minutes');
    await new Promise((r) => setTimeout(r, 25));
  }
  const got = await limited.arrivals();
  const acmeArrivals = got.map(([at]) => at);
  const backlog = got.filter(([, id]) => id.startsWith('evt_a_')).map(([at]) => at);
  assert.ok(maxLeased <= PER_WEBHOOK, `acme had ${maxLeased} deliveries leased at once: more than can be in flight`);

  // The bound, in every window: as the daemon started the attempts, and as the receiver got them.
  const started = (db.prepare("SELECT a.started_at AS at FROM delivery_attempts a JOIN deliveries d ON d.id = a.delivery_id WHERE d.org_id = 'acme'").all() as Array<{ at: number }>).map((r) => r.at);
  assert.equal(started.length, 220);
  const busiestStart = busiestWindow(started, RATE_WINDOW_MS - START_ALLOWANCE_MS);
  assert.ok(busiestStart.count <= 20, `${busiestStart.count} attempts started within ${RATE_WINDOW_MS - START_ALLOWANCE_MS} ms`);
  // At the receiver, the same bound, less what the way there took unevenly (arrivalWindow).
  const startOf = new Map(
    (db.prepare("SELECT e.id AS id, a.started_at AS at FROM delivery_attempts a JOIN deliveries d ON d.id = a.delivery_id JOIN events e ON e.seq = d.event_seq WHERE d.org_id = 'acme'").all() as Array<{ id: string; at: number }>).map((r) => [r.id, r.at]),
  );
  const transits = got.map(([at, id]) => at - startOf.get(id)!);
  // (The first burst after an idle spell starts a little later after its claim than the next
  // one does: seen on Node 24, two windows' first requests 996 ms apart at the receiver.)
  const width = arrivalWindow(transits);
  const busiest = busiestWindow(acmeArrivals, width);
  const t0 = Math.min(...acmeArrivals);
  t.diagnostic(`transit from start to arrival: ${Math.min(...transits)}-${Math.max(...transits)} ms; arrivals checked in windows of ${width} ms`);
  assert.ok(busiest.count <= 20, `${busiest.count} requests arrived within ${width} ms from +${busiest.from - t0} ms: ${[...acmeArrivals].sort((a, b) => a - b).map((a) => a - t0).join(' ')}`);
  assert.equal(new Set(got.map(([, id]) => id)).size, 220);
  assert.equal(got.length, 220);
  // The limit is what paced it: 200 at 20 a second take nine seconds at least after the first burst.
  const acmeTimes = [...backlog].sort((a, b) => a - b);
  assert.ok(acmeTimes[199]! - acmeTimes[0]! >= 9 * RATE_WINDOW_MS, 'the limited webhook was not paced');

  // Globex, without a limit, was not held back: all of it arrived before acme's 60th request
  // (which the limit keeps at least two seconds after acme's first).
  assert.equal(free.requests.length, 200);
  const lastFree = Math.max(...arrivals(free));
  assert.ok(lastFree < acmeTimes[59]!, `globex's last request arrived after acme's 60th (${lastFree - acmeTimes[59]!} ms later)`);

  // Waiting was not an attempt and not a failure: one attempt each, every one delivered.
  const rows = db.prepare("SELECT d.status, d.attempts, (SELECT count(*) FROM delivery_attempts a WHERE a.delivery_id = d.id) AS logged FROM deliveries d WHERE d.org_id = 'acme'");
  assert.equal(rows.all().length, 220);
  for (const r of rows.all() as Array<{ status: string; attempts: number; logged: number }>) assert.deepEqual([r.status, r.attempts, r.logged], ['delivered', 1, 1]);
  const health = db.prepare("SELECT status, consecutive_failures FROM webhooks WHERE org_id = 'acme'").get() as { status: string; consecutive_failures: number };
  assert.deepEqual(health, { status: 'active', consecutive_failures: 0 });
  const metrics = await (await fetch(`${daemon.baseUrl}/metrics`)).text();
  assert.match(metrics, /^hookrelay_delivery_attempts_total\{outcome="retry"\} 0$/m);
  t.diagnostic(`least slack: ${leastSlack(started, 20)} ms between starts, ${leastSlack(acmeArrivals, 20)} ms between arrivals`);
});

test('a limit changed while a backlog waits holds from the next claim: lowered, then removed', { timeout: 180_000 }, async (t) => {
  const { receiver, s } = await limitedInstall(t, 40);
  await spawnServe(t, s.stateDir, ['--config', s.configFile]);
  appendFeed(s.feed, Array.from({ length: 300 }, (_, i) => feedLine('acme', `evt_${i}`)));

  // Lowered to 3 a second once the backlog is under way.
  await waitFor('the first requests', () => receiver.requests.length >= 40, 30_000);
  await registered(s.cli, 'acme', receiver.url, ['--rate-limit', '3']);
  const loweredAt = Date.now();
  const before = receiver.requests.length;
  // The change was committed before the CLI exited, and what was claimed before it starts within
  // moments of its claim: every attempt started from half a second on was claimed under the new
  // limit (the window the old limit filled holds the first of them back about a second). The
  // bound as the daemon started them, and as the receiver got them (the window narrowed as in the
  // test above: a request stalled on its way arrives closer to the next ones).
  const underNewLimit = loweredAt + 500;
  const db = new Database(databaseIn(s.stateDir), { readonly: true });
  t.after(() => db.close());
  const starts = db.prepare("SELECT e.id AS id, a.started_at AS at FROM delivery_attempts a JOIN deliveries d ON d.id = a.delivery_id JOIN events e ON e.seq = d.event_seq WHERE d.org_id = 'acme'");
  const startOf = () => new Map((starts.all() as Array<{ id: string; at: number }>).map((r) => [r.id, r.at]));
  await waitFor('nine attempts under the lowered limit', () => [...startOf().values()].filter((at) => at >= underNewLimit).length >= 9, 30_000);
  const started = startOf();
  const startedAfter = [...started.values()].filter((at) => at >= underNewLimit);
  const busiestStart = busiestWindow(startedAfter, RATE_WINDOW_MS - START_ALLOWANCE_MS);
  assert.ok(busiestStart.count <= 3, `${busiestStart.count} attempts started within ${RATE_WINDOW_MS - START_ALLOWANCE_MS} ms under a limit of 3 (from ${new Date(busiestStart.from).toISOString()})`);
  const got = receiver.requests.flatMap((r) => {
    const at = started.get(eventIdOf(r) ?? '');
    return at !== undefined && at >= underNewLimit ? [{ arrived: r.receivedAt, transit: r.receivedAt - at }] : [];
  });
  const width = arrivalWindow(got.map((g) => g.transit));
  const busiest = busiestWindow(got.map((g) => g.arrived), width);
  assert.ok(busiest.count <= 3, `${busiest.count} requests arrived within ${width} ms under a limit of 3 (from ${new Date(busiest.from).toISOString()})`);
  assert.ok(receiver.requests.length < 300, 'the backlog drained before the limit was lowered: nothing tested');

  // Removed (set again without --rate-limit): the rest goes out as fast as the receiver takes it.
  await registered(s.cli, 'acme', receiver.url);
  const removedAt = Date.now();
  await waitFor('the whole backlog', () => new Set(receiver.requests.map(eventIdOf)).size === 300, 60_000);
  const rest = arrivals(receiver).filter((at) => at >= removedAt);
  assert.ok(busiestWindow(rest).count > 3, 'still held to 3 a second after the limit was removed');
  t.diagnostic(`${before} before lowering, ${rest.length} after removing`);
});

test('hookrelay status and the metrics show the deliveries waiting for a reached limit, and the limit', { timeout: 120_000 }, async (t) => {
  const { receiver, s } = await limitedInstall(t, 2);
  // A bad value: exit 2, one line naming the option, nothing changed.
  const bad = await s.cli(['webhook', 'set', '--org', 'acme', '--url', receiver.url, '--rate-limit', '0']);
  assert.equal(bad.code, 2);
  assert.match(bad.stderr, /^hookrelay: --rate-limit "0": give a whole number of deliveries per second from 1 to 10000, or "none" for no limit\n$/);
  assert.equal(JSON.parse((await s.cli(['webhook', 'get', '--org', 'acme', '--json'])).stdout).rate_limit, 2);
  const daemon = await spawnServe(t, s.stateDir, ['--config', s.configFile]);
  const listen = daemon.baseUrl.replace('http://', '');
  appendFeed(s.feed, Array.from({ length: 60 }, (_, i) => feedLine('acme', `evt_${i}`)));
  await waitFor('the first requests', () => receiver.requests.length >= 2, 30_000);

  // The window is full most of the time while the backlog waits: look until status says so.
  let acme: any;
  for (const deadline = Date.now() + 30_000; Date.now() < deadline; ) {
    const view = JSON.parse((await s.cli(['status', '--json', '--listen', listen])).stdout);
    acme = view.webhooks.find((w: { organization_id: string }) => w.organization_id === 'acme');
    if (acme.queue.rate_limited > 0) {
      assert.equal(view.queue.rate_limited, acme.queue.rate_limited);
      break;
    }
  }
  assert.equal(acme.rate_limit, 2);
  assert.ok(acme.queue.rate_limited > 0 && acme.queue.rate_limited <= 58, JSON.stringify(acme));
  let text = '';
  for (const deadline = Date.now() + 30_000; Date.now() < deadline && !/reached/.test(text); ) text = (await s.cli(['status', '--listen', listen])).stdout;
  assert.match(text, /^acme +active .* 2\/s \(reached: \d+ waiting\)/m);
  assert.match(text, /^queue: .*; \d+ due waiting for their webhook's rate limit$/m);

  let metrics = '';
  for (const deadline = Date.now() + 30_000; Date.now() < deadline && !/^hookrelay_webhook_rate_limited\{org="acme"\} [1-9]/m.test(metrics); ) {
    metrics = await (await fetch(`${daemon.baseUrl}/metrics`)).text();
    await new Promise((r) => setTimeout(r, 200));
  }
  assert.match(metrics, /^hookrelay_webhook_rate_limited\{org="acme"\} [1-9]\d*$/m);
  assert.match(metrics, /^hookrelay_deliveries_rate_limited [1-9]\d*$/m);
  // Waiting is not failing.
  assert.match(metrics, /^hookrelay_delivery_attempts_total\{outcome="retry"\} 0$/m);
});

/**
 * A webhook's rate limit across two instances on PostgreSQL, end to end (issue 29), with the
 * built CLI (`npm run build` first): two `hookrelay serve` processes, each with its own state
 * directory, feed file and instance.name, share one database (test/helpers/pg-harness.ts) and one
 * HTTPS receiver; the webhook's limit of 10 a second is set with `hookrelay webhook set
 * --rate-limit` against that database. Events are appended to both feeds. Checked: each
 * instance delivered a fair part of them (otherwise nothing is shown about sharing), every
 * event was delivered once with one attempt and no failure, and the two together kept the
 * limit: at most 10 attempts started in any one-second window (exactly, from the attempt rows
 * both wrote), at most 10 requests arrived at the receiver in any window (narrowed by the
 * measured unevenness of the way beyond RATE_MARGIN_MS, as test/e2e/rate-limit.e2e.test.ts does),
 * and the backlog took the 11 s the limit makes it take. Without the shared window (each
 * instance counting only its own starts) the two start up to 20 a second and this fails.
 */
import assert from 'node:assert/strict';
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, test, type TestContext } from 'node:test';
import pg from 'pg';
import { RATE_MARGIN_MS, RATE_WINDOW_MS } from '../../src/domain/rate-window.ts';
import { assertBuilt, runCli, scratchDir, spawnServe, type Daemon } from '../helpers/feed-helpers.ts';
import { pgServer, stopPgServer } from '../helpers/pg-harness.ts';
import { busiestWindow, leastSlack, START_ALLOWANCE_MS, startTimedReceiver } from '../helpers/rate-limit-helpers.ts';
import { appendFeed, createTestTls, feedLine } from '../helpers/receivers.ts';


after(stopPgServer);

const LIMIT = 10;
const PER_WEBHOOK = 4;
const WARM_UP_PER_FEED = 10;
const PER_FEED = 60;
const NAMES = ['rate-a', 'rate-b'] as const;
/** Each instance delivers at least this many of the backlog, or the test shows nothing about two instances sharing one window. */
const LEAST_SHARE = 20;

/** An instance's state directory, feed and config file, on `url`'s database under `name`. */
function instanceSetup(t: TestContext, name: string, url: string, caFile: string) {
  const dir = scratchDir(t, `hookrelay-rate-pg-${name}-`);
  const stateDir = join(dir, 'state');
  mkdirSync(stateDir);
  const configFile = join(dir, 'hookrelay.json');
  writeFileSync(
    configFile,
    JSON.stringify({
      database: { url, poolSize: 4 },
      instance: { name },
      delivery: { allowNetworks: ['127.0.0.1/32'], caFile, concurrency: 16, perWebhookConcurrency: PER_WEBHOOK, pollInterval: '200ms', jitterPercent: 0 },
      feed: { pollInterval: 20 },
      log: { level: 'info' },
    }),
  );
  return { name, stateDir, configFile, feed: join(stateDir, 'feed.jsonl') };
}

test(`two instances on one PostgreSQL database hold one webhook to ${LIMIT}/s together: no one-second window above ${LIMIT} (attempt starts exactly, arrivals), each event delivered once, both instances delivering`, { timeout: 240_000 }, async (t) => {
  assertBuilt();
  const url = await (await pgServer()).createDatabase();
  const tls = createTestTls(t);
  const receiver = await startTimedReceiver(t, tls);
  const setups = NAMES.map((name) => instanceSetup(t, name, url, tls.caFile));
  const cli = async (args: string[]) => {
    const r = await runCli(t, [...args, '--config', setups[0]!.configFile, '--state-dir', setups[0]!.stateDir]);
    assert.equal(r.code, 0, r.stderr);
    return r.stdout;
  };
  await cli(['orgs', 'add', 'acme']);
  await cli(['webhook', 'set', '--org', 'acme', '--url', receiver.url, '--rate-limit', String(LIMIT)]);
  // Read back through the other instance's configuration: the limit is in the shared database.
  const shown = await runCli(t, ['webhook', 'get', '--org', 'acme', '--json', '--config', setups[1]!.configFile, '--state-dir', setups[1]!.stateDir]);
  assert.equal(JSON.parse(shown.stdout).rate_limit, LIMIT, shown.stderr);

  const daemons: Daemon[] = [];
  for (const s of setups) daemons.push(await spawnServe(t, s.stateDir, ['--config', s.configFile]));
  const pool = new pg.Pool({ connectionString: url, max: 1 });
  pool.on('error', () => {});
  t.after(() => pool.end());
  const count = async (sql: string): Promise<number> => Number((await pool.query<{ n: string }>(sql)).rows[0]!.n);
  const delivered = () => count("SELECT count(*) AS n FROM deliveries WHERE org_id = 'acme' AND status = 'delivered'");
  const waitDelivered = async (what: string, n: number, limitMs: number): Promise<void> => {
    for (const deadline = Date.now() + limitMs; (await delivered()) < n; ) {
      for (const d of daemons) if (d.child.exitCode !== null) assert.fail(`a daemon exited: ${d.stderr()}`);
      if (Date.now() > deadline) assert.fail(`${what}: ${await delivered()} of ${n} delivered after ${limitMs / 1000} s`);
      await new Promise((r) => setTimeout(r, 100));
    }
  };

  // Warm-up, through both feeds: the connections the backlog will use are opened (a TLS
  // handshake delays the first request on each, which the limit, counting starts, cannot know
  // of) and kept alive (5 s, the receiver's keep-alive) into the backlog.
  const warm = WARM_UP_PER_FEED * setups.length;
  for (const s of setups) appendFeed(s.feed, Array.from({ length: WARM_UP_PER_FEED }, (_, i) => feedLine('acme', `evt_warm_${s.name}_${i}`)));
  await waitDelivered('the warm-up', warm, 60_000);

  // The backlog: both feeds at once, each instance ingesting its own; any instance may claim any delivery.
  for (const s of setups) appendFeed(s.feed, Array.from({ length: PER_FEED }, (_, i) => feedLine('acme', `evt_${s.name}_${i}`)));
  const total = warm + PER_FEED * setups.length;
  await waitDelivered(`all ${total} deliveries`, total, 120_000);

  // Each event stored once, delivered with one attempt (waiting for the limit is no attempt), no failure.
  const rows = (await pool.query<{ event_id: string; status: string; attempts: number; logged: string; outcomes: string[]; leased_by: string }>(
    `SELECT e.id AS event_id, d.status, d.attempts, d.leased_by,
       (SELECT count(*) FROM delivery_attempts a WHERE a.delivery_id = d.id) AS logged,
       (SELECT array_agg(a.outcome) FROM delivery_attempts a WHERE a.delivery_id = d.id) AS outcomes
     FROM deliveries d JOIN events e ON e.seq = d.event_seq WHERE d.org_id = 'acme' ORDER BY d.id`,
  )).rows;
  assert.equal(rows.length, total);
  assert.equal(new Set(rows.map((r) => r.event_id)).size, total);
  for (const r of rows) assert.deepEqual([r.event_id, r.status, r.attempts, Number(r.logged), r.outcomes], [r.event_id, 'delivered', 1, 1, ['delivered']]);
  const health = (await pool.query("SELECT status, consecutive_failures FROM webhooks WHERE org_id = 'acme'")).rows[0];
  assert.deepEqual(health, { status: 'active', consecutive_failures: 0 });

  // Both instances delivered a fair part of the backlog: the one that holds the delivery's last
  // lease (leased_by, kept after it is settled) is the one that sent its only attempt.
  const backlog = rows.filter((r) => !r.event_id.startsWith('evt_warm_'));
  const share = new Map<string, number>(NAMES.map((n) => [n, 0]));
  for (const r of backlog) share.set(r.leased_by, (share.get(r.leased_by) ?? 0) + 1);
  const shares = [...share].map(([n, k]) => `${n} ${k}`).join(', ');
  t.diagnostic(`backlog delivered by: ${shares}`);
  assert.deepEqual([...share.keys()].sort(), [...NAMES]);
  for (const [name, k] of share) assert.ok(k >= LEAST_SHARE, `${name} delivered ${k} of the backlog (${shares}): too few to show two instances sharing one window`);

  // The bound, as the two daemons started the attempts (each in its own clock, the same
  // machine's), exactly: the limit counts a claim in the database server's clock and the
  // attempt starts a few ms after its commit; RATE_MARGIN_MS (the 1.1 s span) absorbs the
  // difference between two claims' delays (in 9 runs, 29 to 90 ms to spare, once 1 ms).
  const attempts = (await pool.query<{ event_id: string; at: string; by: string }>(
    `SELECT e.id AS event_id, a.started_at AS at, d.leased_by AS by FROM delivery_attempts a
     JOIN deliveries d ON d.id = a.delivery_id JOIN events e ON e.seq = d.event_seq WHERE d.org_id = 'acme'`,
  )).rows.map((r) => ({ eventId: r.event_id, at: Number(r.at), by: r.by }));
  assert.equal(attempts.length, total);
  const starts = attempts.map((a) => a.at);
  const busiestStart = busiestWindow(starts, RATE_WINDOW_MS - START_ALLOWANCE_MS);
  const s0 = Math.min(...starts);
  const around = attempts
    .filter((a) => a.at >= busiestStart.from - RATE_WINDOW_MS && a.at < busiestStart.from + 2 * RATE_WINDOW_MS)
    .sort((a, b) => a.at - b.at)
    .map((a) => `+${a.at - s0}:${a.by}`)
    .join(' ');
  assert.ok(busiestStart.count <= LIMIT, `${busiestStart.count} attempts started within ${RATE_WINDOW_MS - START_ALLOWANCE_MS} ms from +${busiestStart.from - s0} ms, by both instances together: ${around}`);

  // At the receiver: every event once, and the bound less what the way there took unevenly
  // (see test/e2e/rate-limit.e2e.test.ts): the window narrowed by the spread of start-to-arrival
  // times beyond RATE_MARGIN_MS, measured per request.
  const got = await receiver.arrivals();
  assert.equal(got.length, total);
  assert.equal(new Set(got.map(([, id]) => id)).size, total);
  const startOf = new Map(attempts.map((a) => [a.eventId, a.at]));
  const transits = got.map(([at, id]) => at - startOf.get(id)!);
  const unevenBeyondMargin = Math.max(0, Math.max(...transits) - Math.min(...transits) - RATE_MARGIN_MS);
  const width = RATE_WINDOW_MS - unevenBeyondMargin;
  const arrivals = got.map(([at]) => at);
  const busiest = busiestWindow(arrivals, width);
  const a0 = Math.min(...arrivals);
  t.diagnostic(`transit from start to arrival: ${Math.min(...transits)}-${Math.max(...transits)} ms; arrivals checked in windows of ${width} ms`);
  assert.ok(width >= RATE_WINDOW_MS / 2, `the way to the receiver was too uneven (${Math.min(...transits)}-${Math.max(...transits)} ms) to check arrivals`);
  assert.ok(busiest.count <= LIMIT, `${busiest.count} requests arrived within ${width} ms from +${busiest.from - a0} ms: ${[...arrivals].sort((a, b) => a - b).map((a) => a - a0).join(' ')}`);

  // The limit is what paced it: 120 at 10 a second cannot start within less than 11 s.
  const backlogStarts = attempts.filter((a) => !a.eventId.startsWith('evt_warm_')).map((a) => a.at).sort((a, b) => a - b);
  const took = backlogStarts.at(-1)! - backlogStarts[0]!;
  assert.ok(took >= (backlogStarts.length / LIMIT - 1) * RATE_WINDOW_MS, `the backlog's ${backlogStarts.length} attempts started within ${took} ms: not paced`);
  t.diagnostic(`backlog started over ${took} ms; least slack: ${leastSlack(starts, LIMIT)} ms between starts, ${leastSlack(arrivals, LIMIT)} ms between arrivals`);
});

/**
 * Several instances on one PostgreSQL database, end to end, with the built CLI (`npm run
 * build` first): three `hookrelay serve` processes, each with its own state directory, its own
 * feed file and its own instance.name, share one database (test/helpers/pg-harness.ts) and one HTTPS
 * receiver. One of them is killed with SIGKILL while it has attempts in flight. Checked:
 * every event is delivered; per-request order holds across instances (a request's changes
 * reach the receiver in the order they were stored, and never two at once); the webhook's
 * concurrency cap holds across instances; an event present in two feeds is stored and sent
 * once; duplicates are only re-sends of the attempts in flight at the kill; the deliveries the
 * dead instance held are sent by the others once its leases lapse.
 */
import assert from 'node:assert/strict';
import { mkdirSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, test, type TestContext } from 'node:test';
import pg from 'pg';
import { assertBuilt, runCli, scratchDir, spawnServe, type Daemon } from '../helpers/feed-helpers.ts';
import { INSTANCE_LOCK_CLASS } from '../../src/store/pg/wakeups.ts';
import { pgServer, stopPgServer } from '../helpers/pg-harness.ts';
import { appendFeed, createTestTls, feedLine, startReceiver, waitFor, type FeedLine, type RecordedRequest } from '../helpers/receivers.ts';

after(stopPgServer);

const PER_WEBHOOK = 4;
const CONCURRENCY = 8;

interface Sent {
  readonly eventId: string;
  readonly requestId: string;
  readonly org: string;
  readonly index: number;
}

/** Polls an async probe until it returns a truthy number. */
async function waitForAsync(what: string, probe: () => Promise<number>, timeoutMs: number): Promise<number> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await probe();
    if (value > 0) return value;
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

/**
 * An instance's state directory, feed and config file: `url`'s database under `name`, trusting
 * the test CA and allowed to reach 127.0.0.1, plus `extra` (merged into the top level; its
 * `delivery` into the delivery section).
 */
function instanceSetup(t: TestContext, name: string, url: string, caFile: string, extra: { delivery?: Record<string, unknown>; [key: string]: unknown } = {}) {
  const dir = scratchDir(t, `hookrelay-scale-${name}-`);
  const stateDir = join(dir, 'state');
  mkdirSync(stateDir);
  const configFile = join(dir, 'hookrelay.json');
  const { delivery, ...rest } = extra;
  writeFileSync(
    configFile,
    JSON.stringify({
      database: { url, poolSize: 4 },
      instance: { name },
      delivery: { allowNetworks: ['127.0.0.1/32'], caFile, ...delivery },
      feed: { pollInterval: 20 },
      log: { level: 'info' },
      ...rest,
    }),
  );
  return { name, stateDir, configFile, feed: join(stateDir, 'feed.jsonl') };
}

function sentOf(req: RecordedRequest): Sent {
  const body = JSON.parse(req.body.toString('utf8')) as { data: { event_id: string; anticipation_request_id: string; organization_id: string } };
  return { eventId: body.data.event_id, requestId: body.data.anticipation_request_id, org: body.data.organization_id, index: req.index };
}

test('three instances on one database: every event delivered once a kill -9 has passed, order per request and the per-webhook cap held across instances', { timeout: 240_000 }, async (t: TestContext) => {
  assertBuilt();
  const url = await (await pgServer()).createDatabase();
  const tls = createTestTls(t);

  // The receiver answers after a short while, so that attempts overlap, and watches what
  // overlaps: two changes of one request at once, or more than the cap of one webhook.
  const inFlight = new Map<string, Set<string>>(); // org -> event ids being answered
  const requestInFlight = new Map<string, string>(); // request id -> event id being answered
  const violations: string[] = [];
  let maxPerOrg = 0;
  /** How long the receiver takes to answer: long until the kill, so that the instances surely have attempts in flight then. */
  let answerMs = 400;
  const receiver = await startReceiver(t, tls, async (req) => {
    const s = sentOf(req);
    const busy = requestInFlight.get(s.requestId);
    if (busy !== undefined && busy !== s.eventId) violations.push(`${s.eventId} sent while ${busy} of the same request was in flight`);
    requestInFlight.set(s.requestId, s.eventId);
    const set = inFlight.get(s.org) ?? new Set();
    inFlight.set(s.org, set);
    set.add(`${s.eventId}#${s.index}`);
    maxPerOrg = Math.max(maxPerOrg, set.size);
    await new Promise((resolve) => setTimeout(resolve, answerMs + (req.index % 5) * 5));
    set.delete(`${s.eventId}#${s.index}`);
    if (requestInFlight.get(s.requestId) === s.eventId) requestInFlight.delete(s.requestId);
    return { status: 200, body: 'ok' };
  });

  const names = ['host-a', 'host-b', 'host-c'];
  const setups = names.map((name) =>
    instanceSetup(t, name, url, tls.caFile, {
      delivery: {
        // The lease is timeout + 10 s: the dead instance's deliveries go out about 11 s after the kill.
        timeout: '1s',
        retrySchedule: ['1s', '1s', '1s'],
        jitterPercent: 0,
        // Long: the other instances must be woken by NOTIFY, not by their poll.
        pollInterval: '30s',
        concurrency: CONCURRENCY,
        perWebhookConcurrency: PER_WEBHOOK,
      },
    }),
  );
  const cli = (args: string[]) => runCli(t, [...args, '--config', setups[0]!.configFile, '--state-dir', setups[0]!.stateDir]);
  for (const org of ['acme', 'globex']) {
    assert.equal((await cli(['orgs', 'add', org])).code, 0);
    assert.equal((await cli(['webhook', 'set', '--org', org, '--url', receiver.url])).code, 0);
  }

  // Each instance's feed: changes of requests shared by all three (a request's changes come
  // from several hosts), plus one event in two feeds.
  const REQUESTS = 12;
  const PER_FEED = 60;
  const lines = setups.map((s, f) =>
    Array.from({ length: PER_FEED }, (_, i): FeedLine => {
      const r = (i + f) % REQUESTS;
      const org = r % 2 === 0 ? 'acme' : 'globex';
      return feedLine(org, `evt_${s.name}_${i}`, `ar_${r}`, i % 2 === 0 ? 'approved' : 'rejected');
    }),
  );
  const shared = feedLine('acme', 'evt_in_two_feeds', 'ar_shared');
  lines[0]!.push(shared);
  lines[1]!.push(shared);
  const total = PER_FEED * setups.length + 1;

  const daemons: Daemon[] = [];
  for (const s of setups) daemons.push(await spawnServe(t, s.stateDir, ['--config', s.configFile]));
  // Half of each feed first; the rest, to the survivors' feeds, once one is dead.
  for (const [f, s] of setups.entries()) appendFeed(s.feed, lines[f]!.slice(0, PER_FEED / 2));

  // Kill an instance while it has attempts in flight: the one holding leases (a webhook's
  // deliveries tend to be claimed by one instance at a time, see docs/scale-out.md).
  await waitFor('attempts in flight', () => receiver.requests.length >= 8, 60_000);
  const pool = new pg.Pool({ connectionString: url, max: 1 });
  pool.on('error', () => {});
  t.after(() => pool.end());
  const holder = async (): Promise<string | undefined> =>
    (await pool.query<{ leased_by: string }>("SELECT leased_by FROM deliveries WHERE status = 'pending' AND lease_expires_at > $1 LIMIT 1", [Date.now()])).rows[0]?.leased_by;
  let victimName: string | undefined;
  for (const deadline = Date.now() + 30_000; victimName === undefined && Date.now() < deadline; ) {
    victimName = await holder();
    if (victimName === undefined) await new Promise((r) => setTimeout(r, 10));
  }
  assert.ok(victimName !== undefined, 'no instance holds a lease');
  const v = names.indexOf(victimName);
  const victim = daemons[v]!;
  victim.child.kill('SIGKILL');
  await victim.exited;
  const heldAtKill = Number(
    (await pool.query("SELECT count(*) AS n FROM deliveries WHERE leased_by = $1 AND status = 'pending' AND lease_expires_at IS NOT NULL", [victimName])).rows[0].n,
  );
  const sentAtKill = receiver.requests.length;
  answerMs = 15;
  for (const [f, s] of setups.entries()) if (f !== v) appendFeed(s.feed, lines[f]!.slice(PER_FEED / 2));

  // The victim's second half was never written nor read: those events are not in the database.
  const expected = new Set<string>();
  for (const [f, l] of lines.entries()) for (const line of f !== v ? l : l.slice(0, PER_FEED / 2)) expected.add(line.event_id);
  await waitFor(
    `all ${expected.size} events to be delivered (the dead instance's after its leases lapse, about 11 s)`,
    () => {
      const got = new Set(receiver.requests.map((r) => sentOf(r).eventId));
      return [...expected].every((id) => got.has(id));
    },
    90_000,
    100,
  );
  assert.ok(total > expected.size);
  // Received is not recorded: what the dead instance sent but never recorded goes out again once its lease lapses.
  await waitForAsync(
    'every delivery to be recorded delivered',
    async () => Number((await pool.query("SELECT count(*) AS n FROM deliveries WHERE status <> 'delivered'")).rows[0].n) === 0 ? 1 : 0,
    60_000,
  );

  const rows = (await pool.query<{ id: string; request: string; status: string; n: string }>(
    `SELECT e.id, e.anticipation_request_id AS request, d.status, count(*) OVER (PARTITION BY e.id) AS n
     FROM events e JOIN deliveries d ON d.event_seq = e.seq ORDER BY e.seq, d.id`,
  )).rows;
  // Stored once each (the event in two feeds too), and all delivered.
  assert.equal(rows.length, expected.size);
  assert.deepEqual(new Set(rows.map((r) => r.id)), expected);
  assert.ok(rows.every((r) => r.status === 'delivered' && Number(r.n) === 1), JSON.stringify(rows.filter((r) => r.status !== 'delivered')));

  // Order per request: the first receipts of each request's changes follow the order they were stored.
  const firstReceipt = new Map<string, number>();
  for (const r of receiver.requests) {
    const s = sentOf(r);
    if (!firstReceipt.has(s.eventId)) firstReceipt.set(s.eventId, s.index);
  }
  const byRequest = new Map<string, string[]>();
  for (const r of rows) byRequest.set(r.request, [...(byRequest.get(r.request) ?? []), r.id]);
  for (const [request, ids] of byRequest) {
    const received = [...ids].sort((a, b) => firstReceipt.get(a)! - firstReceipt.get(b)!);
    assert.deepEqual(received, ids, `request ${request}: received out of the order stored`);
  }
  assert.deepEqual(violations, []);
  assert.ok(maxPerOrg <= PER_WEBHOOK, `${maxPerOrg} attempts at once for one webhook, more than perWebhookConcurrency ${PER_WEBHOOK}`);

  // Duplicates: only re-sends of what the dead instance held (leased) at the kill.
  const counts = new Map<string, number>();
  for (const r of receiver.requests) counts.set(sentOf(r).eventId, (counts.get(sentOf(r).eventId) ?? 0) + 1);
  const extra = [...counts.values()].reduce((sum, n) => sum + n - 1, 0);
  assert.ok(extra <= heldAtKill, `${extra} re-sends, more than the ${heldAtKill} deliveries ${victimName} held at the kill`);
  assert.ok(heldAtKill > 0 && sentAtKill > 0);
  const attemptsBy = (await pool.query<{ leased_by: string; n: string }>('SELECT leased_by, count(*) AS n FROM deliveries GROUP BY leased_by ORDER BY leased_by')).rows;
  t.diagnostic(`requests ${receiver.requests.length}, events ${expected.size}, held by ${victimName} at the kill ${heldAtKill}, re-sent ${extra}, most at once for one webhook ${maxPerOrg}; last holder: ${attemptsBy.map((r) => `${r.leased_by} ${r.n}`).join(', ')}`);

  // Every instance listened for the others' work, and kept its own feed position.
  for (const d of daemons) {
    const records = d.logRecords();
    assert.ok(records.some((r) => r.msg === 'listening for work queued by other instances'), 'wake-ups started');
  }
  const positions = (await pool.query<{ instance: string }>('SELECT instance FROM feed_positions ORDER BY instance')).rows.map((r) => r.instance);
  assert.deepEqual(positions, names);
});

/**
 * Issue 30, as an operator met it: a request's changes come from several application hosts, so
 * through several feeds, each read by its own instance. Every change of a request reaches the
 * receiver in occurred_at order, though the feeds are appended a few hundred milliseconds apart
 * (a feed appended earlier holds later changes of some requests), one instance is killed with
 * SIGKILL while it has attempts in flight and is started again; and a change that arrives later
 * than the window allows for is still sent, counted (status, the metric) and logged. Before the
 * reorder window, this case had 766 of 3,000 changes arrive after a later change of their request.
 */
test('three instances, three feeds: each request\'s changes reach the receiver in occurred_at order, across a kill -9 and a restart; a change later than the reorder window is sent, counted and logged', { timeout: 420_000 }, async (t: TestContext) => {
  assertBuilt();
  const url = await (await pgServer()).createDatabase();
  const tls = createTestTls(t);
  const receiver = await startReceiver(t, tls, async (req) => {
    await new Promise((resolve) => setTimeout(resolve, 10 + (req.index % 5) * 3));
    return { status: 200, body: 'ok' };
  });
  const ORGS = ['acme', 'globex', 'initech', 'umbrella'];
  const names = ['order-a', 'order-b', 'order-c'];
  // The window: 2 s, twice the default, for a loaded machine (the feeds below lag each other by up to 0.3 s).
  const WINDOW_MS = 2000;
  const setups = names.map((name) =>
    instanceSetup(t, name, url, tls.caFile, {
      // Long poll: the releases of the window must wake the dispatchers, not their poll.
      delivery: { timeout: '1s', retrySchedule: ['1s', '1s', '1s'], jitterPercent: 0, concurrency: 16, perWebhookConcurrency: 8, reorderWindow: `${WINDOW_MS}ms`, pollInterval: '30s' },
    }),
  );
  const cli = async (args: string[]) => {
    const r = await runCli(t, [...args, '--config', setups[0]!.configFile, '--state-dir', setups[0]!.stateDir]);
    assert.equal(r.code, 0, r.stderr);
    return r.stdout;
  };
  for (const org of ORGS) {
    await cli(['orgs', 'add', org]);
    await cli(['webhook', 'set', '--org', org, '--url', receiver.url]);
  }
  const daemons: Daemon[] = [];
  for (const s of setups) daemons.push(await spawnServe(t, s.stateDir, ['--config', s.configFile]));
  const pool = new pg.Pool({ connectionString: url, max: 1 });
  pool.on('error', () => {});
  t.after(() => pool.end());

  // 4 waves of 50 requests, 15 changes each, 20 ms apart; change j of request r goes to feed
  // (r + j) % 3. A wave's feeds are appended 150 ms apart, in an order that turns from wave to
  // wave: the feed appended first holds later changes of a third of the requests.
  const WAVES = 4;
  const PER_WAVE = 50;
  const CHANGES = 15;
  const occurred = new Map<string, number>(); // event id -> occurred_at
  const requestOf = new Map<string, string>(); // event id -> request
  const appendWave = async (w: number) => {
    const base = Date.now();
    const perFeed: FeedLine[][] = [[], [], []];
    for (let r = 0; r < PER_WAVE; r++) {
      const request = `ar_w${w}_${r}`;
      for (let j = 0; j < CHANGES; j++) {
        const id = `evt_w${w}_${r}_${j}`;
        const at = base + j * 20 + (r % 10);
        occurred.set(id, at);
        requestOf.set(id, request);
        perFeed[(r + j) % 3]!.push(feedLine(ORGS[r % ORGS.length]!, id, request, j % 2 === 0 ? 'approved' : 'submitted', { occurred_at: new Date(at).toISOString() }));
      }
    }
    for (let k = 0; k < 3; k++) {
      const f = (w + 2 - k + 3) % 3;
      appendFeed(setups[f]!.feed, perFeed[f]!.sort((a, b) => Date.parse(a.occurred_at!) - Date.parse(b.occurred_at!)));
      if (k < 2) await new Promise((resolve) => setTimeout(resolve, 150));
    }
  };
  const fileSize = (path: string) => statSync(path).size;
  /** Every feed committed to its end by its instance. */
  const feedsCommitted = async () => {
    const { rows } = await pool.query<{ instance: string; position: number }>('SELECT instance, position FROM feed_positions');
    const at = new Map(rows.map((r) => [r.instance, Number(r.position)]));
    return setups.every((s) => at.get(s.name) === fileSize(s.feed)) ? 1 : 0;
  };

  await appendWave(0);
  await appendWave(1);
  // Kill an instance that holds leases (attempts in flight) once every feed is read to its end:
  // what it had read is stored, and nothing is appended while it is down.
  await waitForAsync('every feed read to its end', feedsCommitted, 60_000);
  let victimName: string | undefined;
  for (const deadline = Date.now() + 60_000; victimName === undefined && Date.now() < deadline; ) {
    victimName = (await pool.query<{ leased_by: string }>("SELECT leased_by FROM deliveries WHERE status = 'pending' AND lease_expires_at > $1 LIMIT 1", [Date.now()])).rows[0]?.leased_by;
    if (victimName === undefined) await new Promise((r) => setTimeout(r, 5));
  }
  assert.ok(victimName !== undefined, 'no instance holds a lease');
  const v = names.indexOf(victimName);
  daemons[v]!.child.kill('SIGKILL');
  await daemons[v]!.exited;
  const heldAtKill = Number((await pool.query("SELECT count(*) AS n FROM deliveries WHERE leased_by = $1 AND status = 'pending' AND lease_expires_at IS NOT NULL", [victimName])).rows[0].n);
  // Started again under its name once PostgreSQL has ended the dead one's session (and its instance-name lock).
  await waitForAsync(
    `${victimName}'s instance-name lock to be let go`,
    async () =>
      Number((await pool.query("SELECT count(*) AS n FROM pg_locks WHERE locktype = 'advisory' AND classid::bigint = $1 AND objid::bigint = (hashtext($2)::bigint & 4294967295) AND objsubid = 2", [INSTANCE_LOCK_CLASS, victimName])).rows[0].n) === 0 ? 1 : 0,
    30_000,
  );
  daemons[v] = await spawnServe(t, setups[v]!.stateDir, ['--config', setups[v]!.configFile]);
  await appendWave(2);
  await appendWave(3);

  const total = WAVES * PER_WAVE * CHANGES;
  await waitFor(
    `all ${total} changes to arrive (what the killed instance held, once its leases lapse: about 11 s)`,
    () => new Set(receiver.requests.map((r) => sentOf(r).eventId)).size >= total,
    240_000,
    100,
  );
  await waitForAsync(
    'every delivery to be recorded delivered',
    async () => Number((await pool.query("SELECT count(*) AS n FROM deliveries WHERE status <> 'delivered'")).rows[0].n) === 0 ? 1 : 0,
    60_000,
  );
  const stored = (await pool.query<{ n: string }>('SELECT count(*) AS n FROM deliveries')).rows[0]!.n;
  assert.equal(Number(stored), total, 'one delivery per change');

  // Order per request: the first receipt of each change, in occurred_at order.
  const firstReceipt = new Map<string, number>();
  const receipts = new Map<string, number>();
  for (const r of receiver.requests) {
    const { eventId, index } = sentOf(r);
    if (!firstReceipt.has(eventId)) firstReceipt.set(eventId, index);
    receipts.set(eventId, (receipts.get(eventId) ?? 0) + 1);
  }
  const byRequest = new Map<string, string[]>();
  for (const [id, request] of requestOf) byRequest.set(request, [...(byRequest.get(request) ?? []), id]);
  let late = 0;
  for (const ids of byRequest.values()) {
    const arrived = [...ids].sort((a, b) => firstReceipt.get(a)! - firstReceipt.get(b)!);
    let latest = -Infinity;
    for (const id of arrived) {
      if (occurred.get(id)! < latest) late++;
      latest = Math.max(latest, occurred.get(id)!);
    }
  }
  assert.equal(late, 0, `${late} of ${total} changes reached the receiver after a later change of their request`);
  // Duplicates: only re-sends of what the killed instance held leased (attempts in flight, at most its delivery.concurrency).
  const resent = [...receipts.values()].reduce((sum, n) => sum + n - 1, 0);
  assert.ok(resent <= heldAtKill, `${resent} re-sends, more than the ${heldAtKill} deliveries ${victimName} held at the kill`);
  t.diagnostic(`changes ${total}, requests ${receiver.requests.length}, held by ${victimName} at the kill ${heldAtKill}, re-sent ${resent}`);
  const statusOf = async () => JSON.parse(await runCli(t, ['status', '--json', '--config', setups[0]!.configFile, '--state-dir', setups[0]!.stateDir]).then((r) => r.stdout)) as {
    queue: { out_of_order_deliveries: number };
    webhooks: Array<{ organization_id: string; queue: { out_of_order_deliveries: number } }>;
  };
  assert.equal((await statusOf()).queue.out_of_order_deliveries, 0);

  // A change that happened before the first change of ar_w0_0, read a minute late (its host's
  // feed was stuck, say): sent all the same, after the later ones, counted and logged.
  const lateId = 'evt_late_of_ar_w0_0';
  appendFeed(setups[(v + 1) % 3]!.feed, [feedLine('acme', lateId, 'ar_w0_0', 'submitted', { occurred_at: new Date(occurred.get('evt_w0_0_0')! - 1000).toISOString() })]);
  await waitFor('the late change to arrive', () => receiver.requests.some((r) => sentOf(r).eventId === lateId), 60_000);
  await waitForAsync('the late change to be counted', async () => ((await statusOf()).queue.out_of_order_deliveries === 1 ? 1 : 0), 30_000);
  const status = await statusOf();
  assert.deepEqual(status.webhooks.map((w) => [w.organization_id, w.queue.out_of_order_deliveries]), ORGS.map((o) => [o, o === 'acme' ? 1 : 0]));
  const warnings = daemons.flatMap((d) => d.logRecords()).filter((r) => r.level === 40 && r.requestId === 'ar_w0_0');
  assert.equal(warnings.length, 1, JSON.stringify(warnings));
  assert.match(String(warnings[0]!.msg), /sent after a later change/);
  assert.equal(warnings[0]!.eventId, lateId);
  let counted = 0;
  for (const d of daemons) {
    const text = await (await fetch(`${d.baseUrl}/metrics`)).text();
    const line = text.split('\n').find((l) => l.startsWith('hookrelay_out_of_order_deliveries_total '));
    assert.ok(line !== undefined, 'every daemon exports the counter');
    counted += Number(line.split(' ')[1]);
  }
  assert.equal(counted, 1, 'counted once, by the instance that claimed it');
});

test('the CLI moves a SQLite install to PostgreSQL (db copy), then works against database.url; SQLite-only commands say what to use instead', { timeout: 120_000 }, async (t: TestContext) => {
  assertBuilt();
  const url = await (await pgServer()).createDatabase();
  const stateDir = scratchDir(t, 'hookrelay-copy-cli-');
  const sqlite = (args: string[]) => runCli(t, [...args, '--state-dir', stateDir]);
  const onPg = (args: string[]) => runCli(t, [...args, '--state-dir', stateDir], { env: { HOOKRELAY_DATABASE_URL: url, HOOKRELAY_INSTANCE_NAME: 'relay-1' } });

  // A SQLite install with an organization, a webhook and ingested events.
  assert.equal((await sqlite(['migrate'])).code, 0);
  assert.equal((await sqlite(['orgs', 'add', 'acme'])).code, 0);
  assert.equal((await sqlite(['webhook', 'set', '--org', 'acme', '--url', 'https://hooks.example.com/acme'])).code, 0);
  const feed = join(stateDir, 'in.jsonl');
  appendFeed(feed, [feedLine('acme', 'evt_copy_1'), feedLine('acme', 'evt_copy_2'), feedLine('acme', 'evt_copy_3', 'ar_evt_copy_1')]);
  const ingested = await sqlite(['ingest', feed, '--json']);
  assert.equal(ingested.code, 0, ingested.stderr);
  assert.equal(JSON.parse(ingested.stdout).accepted, 3);

  // A missing --to and no database.url: told what to give.
  const noTarget = await sqlite(['db', 'copy', '--from', join(stateDir, 'hookrelay.db')]);
  assert.notEqual(noTarget.code, 0);
  assert.match(noTarget.stderr, /db copy needs a PostgreSQL database: --to-env NAME/);

  // The URL holds a password: from the environment, never the command line (test/store/copy.test.ts has the other ways).
  const copied = await runCli(t, ['db', 'copy', '--from', join(stateDir, 'hookrelay.db'), '--to-env', 'TARGET_URL', '--instance', 'relay-1', '--json', '--state-dir', stateDir], { env: { TARGET_URL: url } });
  assert.equal(copied.code, 0, copied.stderr);
  const report = JSON.parse(copied.stdout) as { rows: number; instance: string; tables: Array<{ table: string; rows: number }>; to: string };
  assert.equal(report.instance, 'relay-1');
  assert.equal(report.tables.find((x) => x.table === 'events')?.rows, 3);
  assert.equal(report.tables.find((x) => x.table === 'deliveries')?.rows, 3);
  assert.ok(!report.to.includes(new URL(url).password), 'the password is not printed');

  // Again into the same database: refused, nothing changed.
  const again = await runCli(t, ['db', 'copy', '--from', join(stateDir, 'hookrelay.db'), '--to-env', 'TARGET_URL', '--instance', 'relay-1', '--state-dir', stateDir], { env: { TARGET_URL: url } });
  assert.notEqual(again.code, 0);
  assert.match(again.stderr, /empty/);

  // The CLI on PostgreSQL sees what was copied.
  const webhook = await onPg(['webhook', 'get', '--org', 'acme', '--json']);
  assert.equal(webhook.code, 0, webhook.stderr);
  assert.equal(JSON.parse(webhook.stdout).webhook_url, 'https://hooks.example.com/acme');
  const list = await onPg(['deliveries', 'list', '--org', 'acme', '--json']);
  assert.equal(list.code, 0, list.stderr);
  assert.equal((JSON.parse(list.stdout) as unknown[]).length, 3);
  const migrate = await onPg(['migrate']);
  assert.equal(migrate.code, 0, migrate.stderr);
  assert.match(migrate.stdout, /^database postgres:\/\/.* is at schema version \d+\n$/);
  assert.ok(!migrate.stdout.includes(new URL(url).password));

  // SQLite-only maintenance names what to use on PostgreSQL.
  const backup = await onPg(['db', 'backup', join(stateDir, 'b.db')]);
  assert.notEqual(backup.code, 0);
  assert.match(backup.stderr, /pg_dump/);
});

test('the admin API answers the same on every instance: a webhook registered on one is read, rotated and replayed through another', { timeout: 120_000 }, async (t: TestContext) => {
  assertBuilt();
  const url = await (await pgServer()).createDatabase();
  const tls = createTestTls(t);
  const receiver = await startReceiver(t, tls);
  // The same JWT key on every instance (docs/scale-out.md): a token is accepted by any of them.
  const secret = 'scale-out-e2e-shared-hs256-secret-0123456789';
  const setups = ['api-a', 'api-b'].map((name) => instanceSetup(t, name, url, tls.caFile, { auth: { secret }, delivery: { pollInterval: '30s' } }));
  const cli = async (args: string[]) => {
    const r = await runCli(t, [...args, '--config', setups[0]!.configFile, '--state-dir', setups[0]!.stateDir]);
    assert.equal(r.code, 0, r.stderr);
    return r.stdout;
  };
  await cli(['orgs', 'add', 'acme']);
  await cli(['users', 'add', '--org', 'acme', '--email', 'admin@acme.test', '--role', 'saas_admin']);
  const { token } = JSON.parse(await cli(['token', 'issue', '--org', 'acme', '--email', 'admin@acme.test', '--json'])) as { token: string };
  const [a, b] = [await spawnServe(t, setups[0]!.stateDir, ['--config', setups[0]!.configFile]), await spawnServe(t, setups[1]!.stateDir, ['--config', setups[1]!.configFile])];
  const api = async (daemon: Daemon, method: string, path: string, body?: unknown) => {
    const res = await fetch(`${daemon.baseUrl}${path}`, {
      method,
      headers: { authorization: `Bearer ${token}`, version: 'v1.2', ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
    });
    return { status: res.status, body: (await res.json()) as Record<string, any> };
  };

  const registered = await api(a!, 'POST', '/webhook/register_webhook', { webhook_url: receiver.url, active_hmac: true });
  assert.ok(registered.status === 200 || registered.status === 201, JSON.stringify(registered.body));
  const seen = await api(b!, 'GET', '/webhook/get_webhook');
  assert.equal(seen.status, 200);
  assert.equal(seen.body.webhook_url, receiver.url);

  // A change read from a's feed is delivered (b is told through NOTIFY, a claims it itself).
  appendFeed(setups[0]!.feed, [feedLine('acme', 'evt_api_1')]);
  await waitFor('the event to arrive', () => receiver.requests.length >= 1, 30_000);
  const listed = await api(b!, 'GET', '/webhook/deliveries');
  assert.equal(listed.status, 200);
  const delivery = listed.body.data as Array<{ id: number; event_id: string }>;
  assert.ok(Array.isArray(delivery) && delivery.length === 1, JSON.stringify(listed.body));

  // Rotated on b: a signs with the new secret (and reads it back), the previous one still valid for a while.
  const rotated = await api(b!, 'POST', '/webhook/rotate_secret');
  assert.equal(rotated.status, 200, JSON.stringify(rotated.body));
  const read = await api(a!, 'GET', '/webhook/get_secret');
  assert.equal(read.body.secret, rotated.body.secret);

  // Replayed through b: the receiver gets the event again, signed with both secrets.
  const replayed = await api(b!, 'POST', `/webhook/deliveries/${delivery[0]!.id}/replay`);
  assert.ok(replayed.status === 200 || replayed.status === 202, JSON.stringify(replayed.body));
  await waitFor('the replay to arrive', () => receiver.requests.length >= 2, 30_000);
  const signatures = String(receiver.requests[1]!.headers['webhook-signature'] ?? '').split(' ');
  assert.equal(signatures.length, 2, 'signed with the new secret and the previous one during the grace period');
});

test('connections cut by the server (a restart, an administrator) are replaced: delivery and wake-ups go on', { timeout: 120_000 }, async (t: TestContext) => {
  assertBuilt();
  const url = await (await pgServer()).createDatabase();
  const tls = createTestTls(t);
  const receiver = await startReceiver(t, tls);
  const setup = instanceSetup(t, 'cut-a', url, tls.caFile, { delivery: { pollInterval: '30s' } });
  const cli = async (args: string[]) => {
    const r = await runCli(t, [...args, '--config', setup.configFile, '--state-dir', setup.stateDir]);
    assert.equal(r.code, 0, r.stderr);
  };
  await cli(['orgs', 'add', 'acme']);
  await cli(['webhook', 'set', '--org', 'acme', '--url', receiver.url]);
  const daemon = await spawnServe(t, setup.stateDir, ['--config', setup.configFile]);
  appendFeed(setup.feed, [feedLine('acme', 'evt_before_cut')]);
  await waitFor('the first event', () => receiver.requests.length >= 1, 30_000);

  // Every session of the daemon ends, the listening one included.
  const pool = new pg.Pool({ connectionString: url, max: 1 });
  pool.on('error', () => {});
  t.after(() => pool.end());
  const cut = await pool.query("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'hookrelay' AND pid <> pg_backend_pid()");
  assert.ok(cut.rows.length >= 2, `${cut.rows.length} sessions cut`);

  appendFeed(setup.feed, [feedLine('acme', 'evt_after_cut_1'), feedLine('acme', 'evt_after_cut_2')]);
  await waitFor('the events read after the cut', () => receiver.requests.length >= 3, 30_000).catch((err: unknown) => {
    throw new Error(`${String(err)}; daemon: ${daemon.logRecords().map((r) => String(r.msg)).join(' | ')}`);
  });
  await waitFor('the listening connection to be back', () => daemon.logRecords().some((r) => r.msg === 'listening to other instances again'), 30_000);
  // A CLI command's test event is announced through NOTIFY, to the new listening connection: sent at once, not at the 30 s poll.
  await cli(['webhook', 'test', '--org', 'acme']);
  await waitFor('the test event', () => receiver.requests.length >= 4, 10_000);
  assert.equal(daemon.child.exitCode, null, 'the daemon is still running');
});

/**
 * Crash safety end to end, with the built CLI (`npm run build` first): `hookrelay serve` is
 * killed with SIGKILL while the receiver holds its requests open, more feed lines arrive while
 * it is down, and a new daemon on the same state directory delivers every event at least once,
 * leaves nothing pending, and re-sends only the attempts that were in flight (once their lease,
 * delivery.timeout + 60 s, has lapsed).
 */
import assert from 'node:assert/strict';
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { test, type TestContext } from 'node:test';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { systemClock } from '../../src/domain/clock.ts';
import { openSqliteStore } from '../../src/store/sqlite/store.ts';
import { cleanEnv } from '../helpers/feed-helpers.ts';
import { tempDir } from '../helpers/helpers.ts';
import { appendFeed, createTestTls, eventIdOf, feedLine, startReceiver, waitFor } from '../helpers/receivers.ts';

const CLI = fileURLToPath(new URL('../../dist/cli.js', import.meta.url));
const run = promisify(execFile);


interface Daemon {
  readonly child: ChildProcess;
  readonly exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  output(): string;
}

/**
 * A test CA, a state directory and a config file for `hookrelay serve` (`config`, plus trust in
 * the CA and leave to reach 127.0.0.1); returns the CLI arguments that name them.
 */
function daemonSetup(t: TestContext, prefix: string, config: { delivery: Record<string, unknown>; feed?: Record<string, unknown>; log: Record<string, unknown> }) {
  assert.ok(existsSync(CLI), `${CLI} is missing; run npm run build first`);
  const tls = createTestTls(t);
  const dir = tempDir(t, prefix);
  const stateDir = join(dir, 'state');
  mkdirSync(stateDir);
  const configFile = join(dir, 'hookrelay.json');
  writeFileSync(configFile, JSON.stringify({ ...config, delivery: { allowNetworks: ['127.0.0.1/32'], caFile: tls.caFile, ...config.delivery } }));
  return { tls, stateDir, common: ['--state-dir', stateDir, '--config', configFile] };
}

test('a daemon killed mid-delivery loses nothing: every event is delivered, only in-flight attempts are sent again', { timeout: 150_000 }, async (t) => {
  const { tls, stateDir, common } = daemonSetup(t, 'hookrelay-crash-', {
    delivery: {
      // The lease is timeout + 10 s: the shortest timeout gives the shortest wait for in-flight re-sends.
      timeout: '1s',
      retrySchedule: ['1s', '1s', '1s'],
      jitterPercent: 0,
      pollInterval: '20ms',
      concurrency: 8,
      perWebhookConcurrency: 4,
    },
    feed: { pollInterval: 20 },
    log: { level: 'info' },
  });

  // The receiver answers the first event at once (a webhook gets its whole share of slots once
  // it has answered), then holds every request open until told otherwise.
  let holding = false;
  const receiver = await startReceiver(t, tls, () => (holding ? 'hang' : { status: 200 }));

  const daemons: Daemon[] = [];
  const serve = (): Daemon => {
    const child = spawn(process.execPath, [CLI, 'serve', ...common, '--listen', '127.0.0.1:0'], { env: cleanEnv(), stdio: ['ignore', 'pipe', 'pipe'] });
    let output = '';
    child.stdout!.setEncoding('utf8').on('data', (chunk: string) => (output += chunk));
    child.stderr!.setEncoding('utf8').on('data', (chunk: string) => (output += chunk));
    const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) => child.once('exit', (code, signal) => resolve({ code, signal })));
    const daemon = { child, exited, output: () => output };
    daemons.push(daemon);
    return daemon;
  };
  t.after(async () => {
    for (const d of daemons) {
      if (d.child.exitCode === null && d.child.signalCode === null) d.child.kill('SIGKILL');
      await d.exited;
    }
  });

  await run(process.execPath, [CLI, 'migrate', ...common], { env: cleanEnv() });
  await run(process.execPath, [CLI, 'orgs', 'add', 'org-a', ...common], { env: cleanEnv() });
  await run(process.execPath, [CLI, 'webhook', 'set', '--org', 'org-a', '--url', receiver.url, ...common], { env: cleanEnv() });
  const feedPath = join(stateDir, 'feed.jsonl');
  const before = Array.from({ length: 10 }, (_, i) => `evt_crash_${i}`);
  const after = Array.from({ length: 3 }, (_, i) => `evt_late_${i}`);

  // Phase 1: a first event is delivered; then four attempts in flight (the per-webhook cap),
  // held open by the receiver; SIGKILL.
  appendFeed(feedPath, [feedLine('org-a', 'evt_warm')]);
  const first = serve();
  await receiver.waitForRequests(1, 30_000).catch((err: unknown) => {
    throw new Error(`${String(err)}; daemon output: ${first.output()}`);
  });
  holding = true;
  appendFeed(
    feedPath,
    before.map((id) => feedLine('org-a', id)),
  );
  await receiver.waitForRequests(5, 30_000).catch((err: unknown) => {
    throw new Error(`${String(err)}; daemon output: ${first.output()}`);
  });
  first.child.kill('SIGKILL');
  assert.deepEqual(await first.exited, { code: null, signal: 'SIGKILL' });
  const inFlight = new Set(receiver.requests.slice(1).map((r) => eventIdOf(r)!));
  assert.equal(inFlight.size, 4, `expected four distinct events in flight, got ${[...inFlight].join(', ')}`);

  const store = openSqliteStore(join(stateDir, 'hookrelay.db'), systemClock);
  t.after(() => store.close());
  const rows = () =>
    store.db.prepare("SELECT e.id AS event_id, d.status, d.attempts, d.lease_expires_at FROM deliveries d JOIN events e ON e.seq = d.event_seq WHERE d.org_id = 'org-a'").all() as Array<{
      event_id: string;
      status: string;
      attempts: number;
      lease_expires_at: number | null;
    }>;
  const atKill = rows().filter((r) => r.event_id !== 'evt_warm');
  assert.equal(atKill.length, 10);
  assert.ok(atKill.every((r) => r.status === 'pending' && r.attempts === 0), 'an attempt was recorded before the kill');
  // Leased: the four in flight, and those claimed ahead for the webhook's next free slots (at
  // most as many again), which were never sent.
  const leased = new Set(atKill.filter((r) => r.lease_expires_at !== null && r.lease_expires_at > Date.now()).map((r) => r.event_id));
  for (const id of inFlight) assert.ok(leased.has(id), `${id} was in flight but not leased`);
  assert.ok(leased.size <= 8, `${leased.size} deliveries leased, expected at most 4 in flight and 4 claimed ahead`);

  // While the daemon is down: more feed lines; the receiver recovers.
  appendFeed(
    feedPath,
    after.map((id) => feedLine('org-a', id)),
  );
  holding = false;

  // Phase 2: a new daemon on the same state directory.
  const second = serve();
  const all = [...before, ...after];
  await waitFor(
    'every event to be delivered by the restarted daemon (in-flight ones after their lease lapses, about 11 s)',
    () => {
      if (second.child.exitCode !== null) throw new Error(`the restarted daemon exited: ${second.output()}`);
      const now = rows();
      return now.length === all.length + 1 && now.every((r) => r.status === 'delivered');
    },
    100_000,
    100,
  );

  const byEvent = new Map<string, number>();
  for (const r of receiver.requests) byEvent.set(eventIdOf(r)!, (byEvent.get(eventIdOf(r)!) ?? 0) + 1);
  // Every attempt the restarted daemon made is recorded; the first one recorded none (checked above).
  const recorded = new Map(
    (store.db.prepare("SELECT e.id AS event_id, count(a.id) AS n FROM deliveries d JOIN events e ON e.seq = d.event_seq LEFT JOIN delivery_attempts a ON a.delivery_id = d.id WHERE d.org_id = 'org-a' GROUP BY e.id").all() as Array<{ event_id: string; n: number }>).map(
      (r) => [r.event_id, r.n],
    ),
  );
  for (const id of all) {
    const answered = receiver.requestsFor(id).filter((r) => r.answeredStatus === 200);
    assert.ok(answered.length >= 1, `${id} was never delivered`);
    // Sent once, plus once more when it was in flight at the kill (its lease lapsed, then it went
    // out again). On a busy machine an attempt may also run past the 1 s deadline and be tried
    // again: such a send is an attempt the restarted daemon recorded. Nothing else is ever sent twice.
    const crashCopy = inFlight.has(id) ? 1 : 0;
    const sends = byEvent.get(id) ?? 0;
    const attempts = recorded.get(id) ?? 0;
    assert.ok(sends >= 1 + crashCopy && sends <= attempts + crashCopy, `${id} was sent ${sends} time(s), expected ${1 + crashCopy} (or up to ${attempts + crashCopy}, for the ${attempts} attempt(s) recorded)`);
    const copies = receiver.requestsFor(id);
    for (const copy of copies) {
      assert.equal(copy.headers['webhook-id'], id);
      assert.ok(copy.body.equals(copies[0]!.body), `${id}: a re-send changed the body`);
    }
  }
  const final = rows();
  assert.equal(final.filter((r) => r.status === 'pending').length, 0);
  assert.ok(final.every((r) => r.attempts === 1), 'an interrupted attempt was counted');
  assert.equal((store.db.prepare('SELECT count(*) AS n FROM events').get() as { n: number }).n, all.length + 1, 'the feed was read twice');

  // And it stops cleanly.
  second.child.kill('SIGTERM');
  assert.deepEqual(await second.exited, { code: 0, signal: null });
});

test('kill -9 in the middle of group commits under load: every event delivered, duplicates no more than the attempts in flight', { timeout: 150_000 }, async (t) => {
  const concurrency = 16;
  const { tls, stateDir, common } = daemonSetup(t, 'hookrelay-crash-load-', {
    delivery: { timeout: '1s', retrySchedule: ['1s', '1s', '1s'], jitterPercent: 0, concurrency, perWebhookConcurrency: 4 },
    log: { level: 'warn' },
  });
  const receiver = await startReceiver(t, tls);
  const orgs = ['org-a', 'org-b', 'org-c', 'org-d'];
  await run(process.execPath, [CLI, 'migrate', ...common], { env: cleanEnv() });
  for (const org of orgs) {
    await run(process.execPath, [CLI, 'orgs', 'add', org, ...common], { env: cleanEnv() });
    await run(process.execPath, [CLI, 'webhook', 'set', '--org', org, '--url', receiver.url, ...common], { env: cleanEnv() });
  }
  const children: ChildProcess[] = [];
  t.after(() => {
    for (const child of children) if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
  });
  const serve = () => {
    const child = spawn(process.execPath, [CLI, 'serve', ...common, '--listen', '127.0.0.1:0'], { env: cleanEnv(), stdio: ['ignore', 'ignore', 'pipe'] });
    let stderr = '';
    child.stderr!.setEncoding('utf8').on('data', (chunk: string) => (stderr += chunk));
    children.push(child);
    return { child, stderr: () => stderr, exited: new Promise<void>((resolve) => child.once('exit', () => resolve())) };
  };
  const ids = Array.from({ length: 2_000 }, (_, i) => `evt_load_${i}`);
  appendFeed(
    join(stateDir, 'feed.jsonl'),
    ids.map((id, i) => feedLine(orgs[i % orgs.length]!, id, `ar_${i % 200}`)),
  );

  const first = serve();
  await receiver.waitForRequests(600, 60_000);
  first.child.kill('SIGKILL');
  await first.exited;
  const beforeKill = receiver.requests.length;

  const second = serve();
  const store = openSqliteStore(join(stateDir, 'hookrelay.db'), systemClock);
  t.after(() => store.close());
  const delivered = () => (store.db.prepare("SELECT count(*) AS n FROM deliveries WHERE status = 'delivered'").get() as { n: number }).n;
  await waitFor('every event delivered after the restart (in-flight ones once their lease lapses, about 11 s)', () => delivered() === ids.length, 100_000, 100);

  const sent = new Map<string, number>();
  for (const r of receiver.requests) sent.set(eventIdOf(r)!, (sent.get(eventIdOf(r)!) ?? 0) + 1);
  for (const id of ids) assert.ok((sent.get(id) ?? 0) >= 1, `${id} never arrived`);
  const duplicates = receiver.requests.length - sent.size;
  assert.ok(duplicates <= concurrency, `${duplicates} duplicates (the kill came after ${beforeKill} requests); at most ${concurrency} attempts can be in flight or awaiting their commit`);
  // Per-request order held across the kill: the first arrival of each change follows the feed order of its request.
  const firstArrival = new Map<string, number>();
  receiver.requests.forEach((r, i) => firstArrival.has(eventIdOf(r)!) || firstArrival.set(eventIdOf(r)!, i));
  for (let request = 0; request < 200; request++) {
    const order = ids.filter((_, i) => i % 200 === request).map((id) => firstArrival.get(id)!);
    assert.deepEqual(order, [...order].sort((a, b) => a - b), `request ar_${request} received its changes out of order`);
  }
  assert.equal(second.stderr(), '', 'the daemon wrote to stderr');
  second.child.kill('SIGTERM');
  await second.exited;
  assert.equal(second.child.exitCode, 0);
});

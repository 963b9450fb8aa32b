/**
 * The daemon on a full disk and on a damaged database: /readyz answers 503 with the reason,
 * the state is logged once (not once per retry), nothing is lost or half-written (the feed
 * position is committed only with its events), and when space returns ingest and delivery
 * resume by themselves. A damaged database stops the daemon's writes and keeps it up (no loop);
 * damaged at start, it exits 65 with one line, which the unit does not restart.
 *
 * The full disk is a real one when this runs as root: a small tmpfs holds the state directory
 * (the feed lives elsewhere, as it would on a separate volume). Otherwise (or with
 * TEST_FULL_DISK=fault) the daemon's own connection is given a page limit
 * (PRAGMA max_page_count), which makes SQLite answer SQLITE_FULL the same way; the test says
 * which it used. Build first: the damaged-database cases spawn the built CLI.
 */
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { execFileSync, spawn } from 'node:child_process';
import { closeSync, existsSync, openSync, readFileSync, rmSync, writeSync } from 'node:fs';
import { join } from 'node:path';
import { before, test, type TestContext } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { loadConfig } from '../../src/config/load.ts';
import { systemClock } from '../../src/domain/clock.ts';
import { createLogger } from '../../src/log.ts';
import { createRelay } from '../../src/relay.ts';
import { createServices } from '../../src/services/services.ts';
import type { Db } from '../../src/store/sqlite/connection.ts';
import { openSqliteStore, type SqliteStore } from '../../src/store/sqlite/store.ts';
import { assertBuilt, CLI, cleanEnv, defer, scratchDir, spawnServe, WAIT_LIMIT_MS } from '../helpers/feed-helpers.ts';
import { damageHeader, damagePageOf, readyz, seededState, waitUntil } from '../helpers/db-helpers.ts';
import { appendFeed, createTestTls, eventIdOf, feedLine, startReceiver, waitFor } from '../helpers/receivers.ts';
import { repos } from '../helpers/sqlite-repos.ts';
import { BY_TEST } from '../helpers/audit-helpers.ts';

before(assertBuilt);

/** A disk the test can fill up and give space back on. */
interface SmallDisk {
  readonly kind: string;
  /** Where the state directory goes. */
  readonly dir: string;
  /** Wraps the daemon's store opening (fault injection only). */
  readonly openSqliteStore?: typeof openSqliteStore;
  fill(): void;
  free(): void;
}

/** Fills the file system of `file` (every free block, 1 MiB at a time, then what is left byte by byte). */
function fillUp(file: string): void {
  const fd = openSync(file, 'a');
  try {
    for (const chunk of [Buffer.alloc(1 << 20, 1), Buffer.alloc(4096, 1), Buffer.alloc(1, 1)]) {
      for (;;) {
        try {
          writeSync(fd, chunk);
        } catch (err) {
          if ((err as NodeJS.ErrnoException).code !== 'ENOSPC') throw err;
          break;
        }
      }
    }
  } finally {
    closeSync(fd);
  }
}

function tryMount(dir: string): boolean {
  if (process.env.TEST_FULL_DISK === 'fault' || process.getuid?.() !== 0) return false;
  try {
    execFileSync('mount', ['-t', 'tmpfs', '-o', 'size=24m,mode=0700', 'tmpfs', dir], { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
}

function smallDisk(t: TestContext): SmallDisk {
  const dir = scratchDir(t, 'hookrelay-disk-');
  if (tryMount(dir)) {
    // Registered after the directory's removal, so it runs before it.
    defer(t, () => execFileSync('umount', ['-l', dir]));
    const ballast = join(dir, 'ballast');
    return {
      kind: 'a 24 MiB tmpfs',
      dir,
      fill: () => fillUp(ballast),
      free() {
        rmSync(ballast);
      },
    };
  }
  let daemonDb: Db | null = null;
  return {
    kind: 'a fault-injected store (PRAGMA max_page_count on the daemon connection)',
    dir,
    openSqliteStore: (...args) => {
      const store = openSqliteStore(...args);
      daemonDb = store.db;
      return store;
    },
    fill() {
      // The database may not grow past the pages it has (the limit cannot go below them).
      daemonDb!.pragma(`max_page_count = ${daemonDb!.pragma('page_count', { simple: true }) as number}`);
    },
    free() {
      daemonDb!.pragma('max_page_count = 1073741823');
    },
  };
}

test('started on a full disk, the daemon waits for space (logged once) instead of exiting, then opens and serves', { timeout: 60_000 }, async (t) => {
  const mounted = scratchDir(t, 'hookrelay-disk-');
  const real = tryMount(mounted);
  if (real) defer(t, () => execFileSync('umount', [mounted]));
  t.diagnostic(real ? 'full disk: a 24 MiB tmpfs, filled' : 'full disk: an injected SQLITE_FULL at opening');
  const stateDir = join(mounted, 'state');
  const config = loadConfig({ env: {}, overrides: { stateDir, 'api.listen': '127.0.0.1:0', 'feed.path': join(scratchDir(t), 'feed.jsonl') } });
  // A database that exists, closed cleanly (no -wal or -shm file left: opening creates the -shm).
  await openSqliteStore(config.database.path, systemClock).close();
  let refusals = 0;
  let full = true;
  const ballast = join(mounted, 'ballast');
  if (real) fillUp(ballast);
  const records: Array<Record<string, unknown>> = [];
  const log = createLogger('info', { write: (line: string) => void records.push(JSON.parse(line) as Record<string, unknown>) });
  const relay = createRelay(config, {
    log,
    ...(real
      ? {}
      : {
          openSqliteStore: (...args: Parameters<typeof openSqliteStore>) => {
            if (full) {
              refusals++;
              throw Object.assign(new Error('database or disk is full'), { code: 'SQLITE_FULL' });
            }
            return openSqliteStore(...args);
          },
        }),
  });
  let started = false;
  const starting = relay.start().then(() => (started = true));
  defer(t, () => relay.stop());
  await sleep(2000);
  assert.equal(started, false, 'still waiting for space');
  const errors = records.filter((r) => r.level === 50);
  assert.deepEqual(errors.map((r) => r.msg), ['cannot open the database: the disk holding it is full; trying again every few seconds until space is freed (nothing is read or sent meanwhile)'], 'logged once');
  if (real) rmSync(ballast);
  full = false;
  await starting;
  assert.ok(records.some((r) => r.msg === 'database opened: the disk has room again'));
  assert.equal((await readyz(`http://127.0.0.1:${relay.address().port}`)).status, 200);
  if (!real) assert.ok(refusals >= 2, `tried again (${refusals} tries)`);
});

test('stopped while it waits for space to open the database, the daemon stops cleanly', async (t) => {
  const config = loadConfig({ env: {}, overrides: { stateDir: scratchDir(t), 'api.listen': '127.0.0.1:0', 'feed.path': join(scratchDir(t), 'feed.jsonl') } });
  const relay = createRelay(config, {
    log: createLogger('silent'),
    openSqliteStore: () => {
      throw Object.assign(new Error('database or disk is full'), { code: 'SQLITE_FULL' });
    },
  });
  const starting = relay.start();
  await sleep(300);
  const t0 = performance.now();
  await relay.stop();
  await starting;
  assert.ok(performance.now() - t0 < 2000, 'the wait ended at once');
  assert.throws(() => relay.address(), /not listening/);
});

const count = (store: SqliteStore, sql: string) => store.db.prepare(sql).pluck().get() as number;

test('a full disk: /readyz answers 503 disk_full, logged once; nothing is lost; ingest and delivery resume by themselves once space returns', { timeout: 120_000 }, async (t) => {
  const disk = smallDisk(t);
  t.diagnostic(`full disk: ${disk.kind}`);
  const tls = createTestTls(t);
  const receiver = await startReceiver(t, tls);
  const stateDir = join(disk.dir, 'state');
  const feedPath = join(scratchDir(t, 'hookrelay-disk-feed-'), 'feed.jsonl');
  const config = loadConfig({
    env: {},
    overrides: {
      stateDir,
      'feed.path': feedPath,
      'feed.pollInterval': '20',
      'feed.batchLines': '500',
      'api.listen': '127.0.0.1:0',
      'delivery.caFile': tls.caFile,
      'delivery.allowNetworks': '127.0.0.1/32',
      'delivery.pollInterval': '20ms',
      'delivery.jitterPercent': '0',
      'delivery.retrySchedule': '1s,1s,1s,1s,1s',
    },
  });
  const records: Array<Record<string, unknown>> = [];
  const log = createLogger('info', { write: (line: string) => void records.push(JSON.parse(line) as Record<string, unknown>) });
  const relay = createRelay(config, { log, ...(disk.openSqliteStore ? { openSqliteStore: disk.openSqliteStore } : {}) });
  await relay.start();
  defer(t, () => relay.stop());
  const baseUrl = `http://127.0.0.1:${relay.address().port}`;
  const store = openSqliteStore(config.database.path, systemClock);
  defer(t, () => store.close());
  const services = createServices(store, config);
  await services.orgs.add(BY_TEST, { id: 'acme' });
  await services.webhooks.register(BY_TEST, 'acme', { webhook_url: receiver.url });

  let next = 0;
  const append = (n: number) => {
    appendFeed(feedPath, Array.from({ length: n }, () => feedLine('acme', `evt_${next++}`, `ar_${next % 50}`, 'approved', { data: { note: 'x'.repeat(200) } })));
  };
  const delivered = () => new Set(receiver.requests.filter((r) => r.answeredStatus === 200).map((r) => eventIdOf(r)));
  append(200);
  await waitFor('the first 200 events to be delivered', () => delivered().size === 200, 30_000);
  assert.deepEqual(await readyz(baseUrl), { status: 200, body: { status: 'ready' } });

  disk.fill();
  // Lines keep arriving until a commit needs space that is not there.
  const full = await waitUntil(
    '/readyz to report the full disk',
    async () => {
      const r = await readyz(baseUrl);
      if (r.status === 503) return r;
      append(300);
      await sleep(50);
      return undefined;
    },
    60_000,
  );
  assert.equal(full.body.status, 'not_ready');
  assert.equal(full.body.reason, 'disk_full');
  assert.match(String(full.body.detail), /disk .* is full.*resume by themselves/);
  assert.ok(!Number.isNaN(Date.parse(String(full.body.since))));
  // More lines while full; retries meanwhile do not log again.
  append(300);
  await sleep(2500);
  assert.equal((await readyz(baseUrl)).status, 503);
  const storageRecords = () => records.filter((r) => r.subsystem === 'storage');
  assert.deepEqual(
    storageRecords().map((r) => [r.level, r.fault]),
    [[50, 'disk_full']],
    'the full disk is logged once, however often the writes are retried',
  );
  // What is committed is whole: the position counts exactly the lines stored with it.
  const committed = repos(store).feed.getPosition(feedPath)!.position;
  const bytesOfLines = readFileSync(feedPath).subarray(0, committed).toString('utf8').split('\n').length - 1;
  assert.equal(count(store, 'SELECT count(*) FROM events'), bytesOfLines, 'every line before the committed position is an event, and no other');

  disk.free();
  const total = next;
  await waitUntil('/readyz to answer 200 again', async () => (await readyz(baseUrl)).status === 200, 60_000);
  await waitFor(`all ${total} events to be delivered after space returned`, () => delivered().size === total, 60_000);
  assert.equal(count(store, 'SELECT count(*) FROM events'), total, 'every line became one event: none lost, none twice');
  // The receiver has answered the last ones; their outcomes are recorded by the next group commit.
  await waitFor('every outcome recorded', () => count(store, "SELECT count(*) FROM deliveries WHERE status <> 'delivered'") === 0, 10_000);
  for (let i = 0; i < total; i++) assert.ok(delivered().has(`evt_${i}`), `evt_${i} was delivered`);
  assert.deepEqual(
    storageRecords().map((r) => [r.level, r.fault ?? r.previous]),
    [
      [50, 'disk_full'],
      [30, 'disk_full'],
    ],
    'the recovery is logged once too',
  );
  assert.match(String(storageRecords()[1]!.msg), /writes resumed/);
});

/** A hash of the database file and its WAL (if any). */
function fingerprint(path: string): string {
  const hash = createHash('sha256').update(readFileSync(path));
  if (existsSync(`${path}-wal`)) hash.update(readFileSync(`${path}-wal`));
  return hash.digest('hex');
}

test('damaged data pages at run time: /readyz answers 503 database_damaged, one log line, no more writes; the daemon stays up and stops cleanly', { timeout: 60_000 }, async (t) => {
  const tls = createTestTls(t);
  const receiver = await startReceiver(t, tls);
  const { stateDir, db } = await seededState(t, receiver.url, 300);
  const page = damagePageOf(db, 'deliveries');
  t.diagnostic(`damaged page ${page} of deliveries`);

  const daemon = await spawnServe(t, stateDir, []);
  const ready = await waitUntil('/readyz to report the damage', async () => {
    const r = await readyz(daemon.baseUrl);
    return r.status === 503 ? r : undefined;
  });
  assert.equal(ready.body.reason, 'database_damaged');
  assert.match(String(ready.body.detail), /damaged.*stopped writing.*hookrelay db check.*backup/);
  const before = fingerprint(db);

  // New feed lines, the poll of the dispatcher, time: nothing more is written, nothing is logged again.
  appendFeed(join(stateDir, 'feed.jsonl'), Array.from({ length: 20 }, (_, i) => feedLine('acme', `evt_new_${i}`)));
  await sleep(2000);
  assert.equal(fingerprint(db), before, 'the database file and its WAL are left as they were');
  assert.equal((await fetch(`${daemon.baseUrl}/healthz`)).status, 200, 'the process is up: no crash, no restart loop');
  assert.equal((await readyz(daemon.baseUrl)).status, 503);
  const problems = daemon.logRecords().filter((r) => (r.level as number) >= 40);
  assert.deepEqual(
    problems.map((r) => [r.level, r.subsystem, r.fault]),
    [[60, 'storage', 'database_damaged']],
    `one log line for the damage, however often the writers would have retried: ${JSON.stringify(problems).slice(0, 2000)}`,
  );

  daemon.child.kill('SIGTERM');
  assert.deepEqual(await daemon.exited, { code: 0, signal: null });
});

test('a damaged database at start: serve exits 65 with one line on stderr, no stack trace (the unit does not restart it)', async (t) => {
  const { stateDir, db } = await seededState(t, 'https://hooks.example.com/hook', 10);
  damageHeader(db);
  const child = spawn(process.execPath, [CLI, 'serve', '--state-dir', stateDir, '--listen', '127.0.0.1:0'], { env: cleanEnv(), stdio: ['ignore', 'pipe', 'pipe'] });
  defer(t, () => {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
  });
  let stderr = '';
  child.stderr.setEncoding('utf8').on('data', (chunk: string) => (stderr += chunk));
  child.stdout.resume();
  const timer = setTimeout(() => child.kill('SIGKILL'), WAIT_LIMIT_MS);
  const code = await new Promise<number | null>((resolve) => child.once('close', (c) => resolve(c)));
  clearTimeout(timer);
  assert.equal(code, 65);
  const lines = stderr.trimEnd().split('\n');
  assert.equal(lines.length, 1, `one line: ${stderr}`);
  assert.match(lines[0]!, /^hookrelay: database .*hookrelay\.db is damaged \(file is not a database\); check it with `hookrelay db check` and restore the last good backup/);
  assert.doesNotMatch(stderr, /\n\s+at /);

  const unit = readFileSync(new URL('../../systemd/hookrelay.service', import.meta.url), 'utf8');
  assert.match(unit, /^RestartPreventExitStatus=.*\b65\b/m, 'the unit does not restart after exit 65');
});

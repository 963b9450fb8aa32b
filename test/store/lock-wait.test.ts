/**
 * Lock waits in the daemon (src/store/sqlite/lock-wait.ts): while another connection (a CLI command,
 * a backup) holds the database's write lock, the daemon's store waits for it on timers, never in
 * SQLite on the event loop, and runs the transaction once it has it. Real database files; a second better-sqlite3 connection plays the
 * other process, holding BEGIN IMMEDIATE for as long as a test needs.
 */
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { test, type TestContext } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import Database from 'better-sqlite3';
import { systemClock } from '../../src/domain/clock.ts';
import { createLogger } from '../../src/log.ts';
import { createStorageHealth } from '../../src/services/storage-health.ts';
import { isLockWait } from '../../src/store/sqlite/lock-wait.ts';
import { openSqliteStore } from '../../src/store/sqlite/store.ts';
import { assertProblem, call, roleOf, seedOrg, startRelay, tempDir } from '../helpers/helpers.ts';
import { repos } from '../helpers/sqlite-repos.ts';
import { feedLine, startDeliveryRig, startReceiver, waitForDelivery } from '../helpers/receivers.ts';
import { BY_TEST } from '../helpers/audit-helpers.ts';

/** Another connection to `path` that holds the write lock until `release` (or the end of the test). */
function holdLock(t: TestContext, path: string): { release(): void } {
  const other = new Database(path, { timeout: 0 });
  other.exec('BEGIN IMMEDIATE');
  const release = () => {
    if (other.inTransaction) other.exec('ROLLBACK');
  };
  t.after(() => {
    release();
    other.close();
  });
  return { release };
}

/**
 * The longest gap between ticks of a 5 ms interval while it runs: how long the event loop was
 * held (performance.now(), a monotonic clock). A wait for the lock inside SQLite holds it for as
 * long as the lock is held (300 ms and more in these tests); a busy 2-core machine holds it for
 * tens of ms at times, so the tests compare it with LOOP_HELD_BOUND_MS, between the two.
 */
const LOOP_HELD_BOUND_MS = 250;

function loopWatch(): { stop(): number } {
  let last = performance.now();
  let longest = 0;
  const timer = setInterval(() => {
    const now = performance.now();
    longest = Math.max(longest, now - last);
    last = now;
  }, 5);
  return {
    stop() {
      clearInterval(timer);
      return longest;
    },
  };
}

test("the daemon's connection does not wait in SQLite for a lock (the CLI's does): a write fails at once, before changing anything", async (t) => {
  const dir = tempDir(t);
  const path = join(dir, 'hookrelay.db');
  const daemon = openSqliteStore(path, systemClock, { busyTimeoutMs: 5000, waitForLocks: false });
  const cli = openSqliteStore(path, systemClock, { busyTimeoutMs: 300 });
  t.after(async () => {
    await daemon.close();
    await cli.close();
  });
  const lock = holdLock(t, path);
  let started = performance.now();
  // The transaction's function never runs: the lock is taken (BEGIN IMMEDIATE) before it.
  let ran = 0;
  const refused = await daemon
    .transaction(async (tx) => {
      ran++;
      return tx.orgs.insert({ id: 'acme', name: 'acme', createdAt: 1 });
    })
    .then(
      () => null,
      (err: unknown) => err,
    );
  assert.ok(isLockWait(refused), `a lock error, got ${String(refused)}`);
  assert.ok(performance.now() - started < 1_000, 'failed at once (waiting in SQLite would take busy_timeout, 5 s)');
  assert.equal(ran, 0, 'nothing ran in the refused transaction');
  started = performance.now();
  await assert.rejects(
    cli.transaction(async (tx) => {
      ran++;
      return tx.orgs.insert({ id: 'acme', name: 'acme', createdAt: 1 });
    }),
    (err) => isLockWait(err),
  );
  assert.ok(performance.now() - started >= 250, "the CLI's connection waited for its busy timeout");
  assert.equal(ran, 0, 'nothing ran in the refused transaction');
  lock.release();
  // Reads never wait for the writer (WAL), and nothing was written by the refused attempts.
  assert.equal(await daemon.read((tx) => tx.orgs.get('acme')), null);
  await daemon.transaction((tx) => tx.orgs.insert({ id: 'acme', name: 'acme', createdAt: 1 }));
  assert.equal((await cli.read((tx) => tx.orgs.get('acme')))?.id, 'acme');
});

test('a write transaction waits for the lock on timers, without holding the connection: reads go on, the event loop stays free, its function runs once; past maxWaitMs, or aborted, it is database_busy', async (t) => {
  const path = join(tempDir(t), 'hookrelay.db');
  // The store's default: wait as long as it takes.
  const store = openSqliteStore(path, systemClock, { waitForLocks: false, lockWait: {} });
  t.after(() => store.close());
  const lock = holdLock(t, path);
  const watch = loopWatch();
  const started = performance.now();
  let ran = 0;
  let settled = false;
  const write = store
    .transaction((tx) => {
      ran++;
      return tx.orgs.insert({ id: 'acme', name: 'acme', createdAt: 1 });
    })
    .finally(() => (settled = true));
  // Meanwhile the connection serves reads (the waiting write does not hold its turn).
  for (let i = 0; i < 5; i++) {
    assert.equal(await store.read((tx) => tx.orgs.get('acme')), null);
    assert.equal(settled, false, 'the write waits for the lock');
    await sleep(20);
  }
  assert.equal(ran, 0, 'nothing ran before the lock was got');
  lock.release();
  await write;
  const longest = watch.stop();
  assert.ok(performance.now() - started >= 90, 'it waited for the release');
  assert.equal(ran, 1, 'the transaction ran once');
  assert.ok(longest < LOOP_HELD_BOUND_MS, `the event loop was held ${longest.toFixed(1)} ms at most`);
  assert.equal((await store.read((tx) => tx.orgs.get('acme')))?.id, 'acme');

  holdLock(t, path);
  const insertOther = (tx: Parameters<Parameters<typeof store.transaction>[0]>[0]) => {
    ran++;
    return tx.orgs.insert({ id: 'other', name: 'other', createdAt: 1 });
  };
  const busy = (err: { code?: string; message: string }) => err.code === 'database_busy' && /locked by another process .* nothing was changed/.test(err.message);
  await assert.rejects(store.transaction(insertOther, { lockWait: { maxWaitMs: 200 } }), busy);
  const stop = new AbortController();
  setTimeout(() => stop.abort(), 50);
  await assert.rejects(store.transaction(insertOther, { lockWait: { signal: stop.signal } }), busy);
  assert.equal(ran, 1, 'a write that did not get the lock ran nothing');
  assert.equal(await store.read((tx) => tx.orgs.get('other')), null);
  // Anything but a lock is thrown at once, as it is.
  await assert.rejects(
    openSqliteStore(join(tempDir(t), 'other.db'), systemClock, { waitForLocks: false, lockWait: {} }).transaction(() => {
      throw new Error('a bug');
    }),
    /a bug/,
  );
});

test('a feed write waits for the lock without reporting a storage fault; a long wait is logged once, and its end', async (t) => {
  const path = join(tempDir(t), 'hookrelay.db');
  // As the daemon's store, whose writes wait database.busyTimeout (100 ms here) for the lock.
  const store = openSqliteStore(path, systemClock, { waitForLocks: false, lockWait: { maxWaitMs: 100 } });
  t.after(() => store.close());
  const records: Array<Record<string, unknown>> = [];
  const health = createStorageHealth(createLogger('info', { write: (line: string) => void records.push(JSON.parse(line) as Record<string, unknown>) }), Date.now);
  const lock = holdLock(t, path);
  setTimeout(() => {
    assert.equal(health.problem(), null, 'a lock is no storage fault: /readyz stays ready');
    lock.release();
  }, 400);
  await health.retrying('feed', () => store.transaction((tx) => tx.orgs.insert({ id: 'acme', name: 'acme', createdAt: 1 })));
  assert.equal((await store.read((tx) => tx.orgs.get('acme')))?.id, 'acme');
  const messages = records.map((r) => `${String(r.level)} ${String(r.msg)}`);
  assert.deepEqual(messages, [
    '40 the database has been locked by another process (a hookrelay CLI command, a backup?) for a while; this writer waits, nothing is lost',
    '30 the database lock was released: writes resumed',
  ]);
});

test('an API write while another process holds the lock waits for it on timers, serving other requests, then goes through', async (t) => {
  // A write that waited inside SQLite would hold the event loop for busyTimeoutMs (10 s here)
  // before anything else is answered; one that waits on timers lets the reads below through at
  // once. The bound between the two is generous, so a busy machine does not fail it.
  const relay = await startRelay(t, { 'database.busyTimeout': '10000' });
  const { admin, viewer } = await seedOrg(relay.services, 'org-a');
  const token = relay.token('org-a', admin);
  const lock = holdLock(t, relay.config.database.path);
  const started = performance.now();
  let settled = false;
  const write = call(relay.baseUrl, 'PUT', '/users/update_role', { token, body: { email: viewer, role_name: 'saas_admin' } }).finally(() => (settled = true));
  // Meanwhile the daemon answers: health, a read of the API.
  for (let i = 0; i < 5; i++) {
    const t0 = performance.now();
    assert.equal((await call(relay.baseUrl, 'GET', '/healthz')).status, 200);
    assert.equal((await call(relay.baseUrl, 'GET', '/users/get_roles', { token })).status, 200);
    assert.ok(performance.now() - t0 < 2_000, `answered while the write waits (took ${Math.round(performance.now() - t0)} ms)`);
    assert.equal(settled, false, 'the write waits for the lock');
    await sleep(40);
  }
  assert.equal(await roleOf(relay, 'org-a', viewer), 'saas_viewer', 'not written while the lock is held');
  lock.release();
  const res = await write;
  assert.equal(res.status, 200, res.text);
  assert.ok(performance.now() - started >= 200);
  assert.equal(await roleOf(relay, 'org-a', viewer), 'saas_admin');
});

test('past database.busyTimeout an API write answers 503 database_busy with Retry-After, and changes nothing', async (t) => {
  const relay = await startRelay(t, { 'database.busyTimeout': '300' });
  const { admin, viewer } = await seedOrg(relay.services, 'org-a');
  const token = relay.token('org-a', admin);
  holdLock(t, relay.config.database.path);
  const res = await call(relay.baseUrl, 'PUT', '/users/update_role', { token, body: { email: viewer, role_name: 'saas_admin' } });
  const body = assertProblem(res, 503, 'database_busy');
  assert.equal(res.headers.get('retry-after'), '1');
  assert.match(body.detail, /locked by another process .*nothing was changed: try again shortly/);
  assert.equal(await roleOf(relay, 'org-a', viewer), 'saas_viewer');
});

test('an attempt that ends while another process holds the lock is recorded once the lock is released, and sent once', async (t) => {
  const rig = await startDeliveryRig(t);
  let lock: { release(): void } | null = null;
  // The receiver takes the lock (as a CLI command would) before it answers: the outcome must wait for it.
  const receiver = await startReceiver(t, rig.tls, () => {
    lock = holdLock(t, rig.relay.config.database.path);
    return { status: 200 };
  });
  await rig.relay.services.orgs.add(BY_TEST, { id: 'org-a' });
  await rig.relay.services.webhooks.register(BY_TEST, 'org-a', { webhook_url: receiver.url });
  rig.feed(feedLine('org-a', 'evt_1'));
  await receiver.waitForRequests(1);
  const watch = loopWatch();
  await sleep(400);
  const held = watch.stop();
  assert.ok(held < LOOP_HELD_BOUND_MS, `the event loop stays free (held ${held.toFixed(1)} ms)`);
  assert.equal(repos(rig.relay.store).deliveries.list('org-a', { limit: 10 })[0]?.status, 'pending', 'its outcome waits for the lock');
  lock!.release();
  await waitForDelivery(rig.relay.store, 'org-a', 'evt_1', (d) => d.status === 'delivered', 'the outcome recorded');
  await sleep(200);
  assert.equal(receiver.requests.length, 1, 'sent once');
});

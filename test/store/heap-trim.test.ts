/**
 * Memory a burst freed goes back to the system: glibc keeps the pages that SQLite's page cache
 * and the batches freed in its arenas (resident) until malloc_trim releases them. The daemon
 * calls it once a burst is over (docs/benchmarks.md, "Memory"). These tests run on Linux with
 * glibc, as the project's CI and the systemd unit do.
 */
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { systemClock } from '../../src/domain/clock.ts';
import { openIngestPath } from '../../src/feed/ingest-path.ts';
import { createIngestService } from '../../src/services/ingest.ts';
import { BURST_CACHE_KIB, QUIET_CACHE_KIB } from '../../src/store/sqlite/connection.ts';
import { createHeapTrimmer } from '../../src/store/sqlite/heap-trim.ts';
import { openSqliteStore } from '../../src/store/sqlite/store.ts';
import { silentLog, tempDir } from '../helpers/helpers.ts';

const MiB = 2 ** 20;

function lines(batch: number, count: number) {
  return Array.from({ length: count }, (_, i) => ({
    bytes: Buffer.from(
      JSON.stringify({ organization_id: 'acme', anticipation_request_id: `ar_${batch}_${i}`, status: 'approved', event_id: `chg_${batch}_${i}`, data: { note: 'x'.repeat(1500) } }),
    ),
    position: null,
  }));
}

test('the pages a burst’s page cache freed stay resident until the trimmer gives them back', async (t) => {
  const store = openSqliteStore(join(tempDir(t), 'hookrelay.db'), systemClock);
  t.after(() => store.close());
  const trimmer = createHeapTrimmer(store.db);
  assert.equal(trimmer.available, true, 'Linux with glibc: malloc_trim can be called');

  // A burst as the daemon has it: the large page cache filled by about 35 MiB of events...
  store.db.pragma(`cache_size = -${BURST_CACHE_KIB}`);
  const ingest = createIngestService(store, silentLog);
  for (let batch = 0; batch < 20; batch++) await ingest.ingest('/feed.jsonl', lines(batch, 1000), null);
  // ...then shrunk back: SQLite frees the pages, glibc keeps them.
  store.db.pragma(`cache_size = -${QUIET_CACHE_KIB}`);
  store.db.pragma('shrink_memory');
  const before = process.memoryUsage.rss();

  assert.equal(trimmer.trim(), true);
  const after = process.memoryUsage.rss();
  assert.ok(before - after >= 16 * MiB, `RSS went from ${Math.round(before / MiB)} to ${Math.round(after / MiB)} MiB: the freed page cache was given back`);
  // The connection is unharmed, and a second trim with nothing to give back is fine too.
  assert.equal(store.db.prepare('SELECT count(*) FROM events').pluck().get(), 20_000);
  assert.equal(trimmer.trim(), true);
  assert.deepEqual(store.db.pragma('integrity_check'), [{ integrity_check: 'ok' }]);
});

test('without glibc the trimmer turns itself off at the first call and never fails', (t) => {
  const store = openSqliteStore(join(tempDir(t), 'hookrelay.db'), systemClock);
  t.after(() => store.close());

  const elsewhere = createHeapTrimmer(store.db, { platform: 'darwin' });
  assert.equal(elsewhere.available, false);
  assert.equal(elsewhere.trim(), false);

  // musl or a static build: no libc.so.6 to load.
  const musl = createHeapTrimmer(store.db, { library: 'libc-that-is-not-here.so.6' });
  assert.equal(musl.available, true, 'it only learns by trying');
  assert.equal(musl.trim(), false);
  assert.equal(musl.available, false);
  assert.equal(musl.trim(), false);
  assert.equal(store.db.prepare('SELECT 1').pluck().get(), 1, 'the connection is unharmed');
});

test('the daemon’s ingest path gives memory back once after a burst of large batches or a retention pass, not after small batches', async (t) => {
  const store = openSqliteStore(join(tempDir(t), 'hookrelay.db'), systemClock);
  t.after(() => store.close());
  const releases: Array<[number, number]> = [];
  const path = await openIngestPath(store, silentLog, { checkpointsWhileBusy: true, releaseAfterBurstMs: 100, onReleased: (b, a) => releases.push([b, a]) });
  t.after(() => path.close());

  await path.ingest.ingest('/feed.jsonl', lines(0, 10), null);
  await sleep(400);
  assert.equal(releases.length, 0, 'a small batch is no burst');

  // Three large batches close together: one release, after the last.
  for (let batch = 1; batch <= 3; batch++) await path.ingest.ingest('/feed.jsonl', lines(batch, 1000), null);
  const deadline = Date.now() + 10_000;
  while (releases.length === 0 && Date.now() < deadline) await sleep(20);
  await sleep(400);
  assert.equal(releases.length, 1, 'one release for the burst');
  const [before, after] = releases[0]!;
  assert.ok(after <= before, `RSS ${Math.round(before / MiB)} -> ${Math.round(after / MiB)} MiB`);

  // A retention pass is a burst too.
  path.checkpointsBusy();
  while (releases.length === 1 && Date.now() < deadline) await sleep(20);
  assert.equal(releases.length, 2);
});

test('a batch of few but long lines is a burst too: the large page cache is on while it is stored', async (t) => {
  const store = openSqliteStore(join(tempDir(t), 'hookrelay.db'), systemClock);
  t.after(() => store.close());
  const path = await openIngestPath(store, silentLog, { checkpointsWhileBusy: true });
  t.after(() => path.close());
  const cache = () => store.db.pragma('cache_size', { simple: true });
  assert.equal(cache(), -QUIET_CACHE_KIB);
  // 100 lines of about 1.6 KB: under 1,000 lines and under 256 KiB.
  await path.ingest.ingest('/feed.jsonl', lines(0, 100), null);
  assert.equal(cache(), -QUIET_CACHE_KIB, 'a small batch is no burst');
  // 200 such lines: over 256 KiB, as a batch of the file tailer is with long lines and a low feed.batchBytes.
  await path.ingest.ingest('/feed.jsonl', lines(1, 200), null);
  assert.equal(cache(), -BURST_CACHE_KIB, 'the burst page cache is on');
});

test('a one-shot ingest (hookrelay ingest) does not trim: it ends soon and gives everything back at exit', async (t) => {
  const store = openSqliteStore(join(tempDir(t), 'hookrelay.db'), systemClock);
  t.after(() => store.close());
  const oneShotReleases: number[] = [];
  const oneShot = await openIngestPath(store, silentLog, { releaseAfterBurstMs: 50, onReleased: () => oneShotReleases.push(1) });
  await oneShot.ingest.ingest('/other.jsonl', lines(9, 1000), null);
  await sleep(400);
  await oneShot.close();
  assert.equal(oneShotReleases.length, 0, 'a one-shot command ends soon and gives everything back at exit');
});

test('while the daemon delivers, memory is given back on request, but never in the middle of a burst', async (t) => {
  const store = openSqliteStore(join(tempDir(t), 'hookrelay.db'), systemClock);
  t.after(() => store.close());
  const releases: Array<[number, number]> = [];
  const path = await openIngestPath(store, silentLog, { checkpointsWhileBusy: true, releaseAfterBurstMs: 300, onReleased: (b, a) => releases.push([b, a]) });
  t.after(() => path.close());

  // Steady work (relay.ts asks every STEADY_RELEASE_MS while deliveries are recorded): released at once.
  const ms = path.releaseMemory();
  assert.equal(typeof ms, 'number', 'released now, and how long it took is told');
  assert.equal(releases.length, 1);

  // During a burst the request waits for the burst's own release, which comes once it is over.
  await path.ingest.ingest('/feed.jsonl', lines(1, 1000), null);
  assert.equal(path.releaseMemory(), null, 'not while large batches arrive');
  assert.equal(releases.length, 1);
  const deadline = Date.now() + 10_000;
  while (releases.length === 1 && Date.now() < deadline) await sleep(20);
  assert.equal(releases.length, 2, 'the burst’s release came');
  assert.equal(typeof path.releaseMemory(), 'number', 'after the burst, requests are served again');
});

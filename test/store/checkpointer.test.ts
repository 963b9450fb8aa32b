/**
 * Background WAL checkpoints: a worker thread with its own connection copies committed pages
 * into the database file, so the writer (the main thread) does not have to.
 */
import assert from 'node:assert/strict';
import { statSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { systemClock } from '../../src/domain/clock.ts';
import { createIngestService } from '../../src/services/ingest.ts';
import { BUSY_LINGER_MS, QUIET_AUTOCHECKPOINT_PAGES, SAFETY_NET_PAGES, startBackgroundCheckpoints } from '../../src/store/sqlite/checkpointer.ts';
import { BURST_CACHE_KIB, QUIET_CACHE_KIB } from '../../src/store/sqlite/connection.ts';
import { openSqliteStore } from '../../src/store/sqlite/store.ts';
import { silentLog, tempDir } from '../helpers/helpers.ts';

function feedLine(i: number): Buffer {
  return Buffer.from(JSON.stringify({ organization_id: 'acme', anticipation_request_id: `ar_${i}`, status: 'approved', event_id: `chg_${i}`, data: { note: 'x'.repeat(500) } }));
}

test('committed pages reach the database file through the checkpoint thread, and stop() restores the writer’s own checkpoints', async (t) => {
  const path = join(tempDir(t), 'hookrelay.db');
  const store = openSqliteStore(path, systemClock);
  t.after(() => store.close());
  // The thread's first checkpoint comes a second after its start: long after the five batches
  // below are written, even on a busy machine, so that they are all in the WAL when it is measured
  // (a checkpoint in between lets the writer start the WAL over, and the file stays smaller).
  const checkpoints = await startBackgroundCheckpoints(store.db, silentLog, { intervalMs: 1_000 });
  t.after(() => checkpoints.stop());
  // The writer now leaves checkpoints to the thread, up to the safety net.
  assert.equal(store.db.pragma('wal_autocheckpoint', { simple: true }), SAFETY_NET_PAGES);

  const sizeBefore = statSync(path).size;
  // About 3 MiB of events: far below the safety net, so only the thread can move them.
  const ingest = createIngestService(store, silentLog);
  for (let batch = 0; batch < 5; batch++) {
    await ingest.ingest('/feed.jsonl', Array.from({ length: 1000 }, (_, i) => ({ bytes: feedLine(batch * 1000 + i), position: null })), null);
  }
  const walSize = statSync(`${path}-wal`).size;
  assert.ok(walSize > 2 * 1024 * 1024, `the WAL holds the batches (${walSize} bytes)`);

  const deadline = Date.now() + 10_000;
  while (statSync(path).size < sizeBefore + 2 * 1024 * 1024 && Date.now() < deadline) await sleep(20);
  assert.ok(statSync(path).size >= sizeBefore + 2 * 1024 * 1024, `the database file grew from ${sizeBefore} to ${statSync(path).size} bytes without the writer checkpointing`);

  await checkpoints.stop();
  assert.equal(store.db.pragma('wal_autocheckpoint', { simple: true }), 4096);
  // The data is intact and readable on the writer's connection.
  assert.equal(store.db.prepare('SELECT count(*) FROM events').pluck().get(), 5000);
  assert.deepEqual(store.db.pragma('integrity_check'), [{ integrity_check: 'ok' }]);
});

test('whileBusy (the daemon): the large page cache and background checkpoints only during a burst of large batches, the small cache again after it', async (t) => {
  const path = join(tempDir(t), 'hookrelay.db');
  const store = openSqliteStore(path, systemClock);
  t.after(() => store.close());
  // A one-shot command (no whileBusy) keeps the large cache throughout.
  assert.equal(store.db.pragma('cache_size', { simple: true }), -BURST_CACHE_KIB);
  const checkpoints = await startBackgroundCheckpoints(store.db, silentLog, { whileBusy: true });
  t.after(() => checkpoints.stop());
  const state = () => ({ cache: store.db.pragma('cache_size', { simple: true }), autocheckpoint: store.db.pragma('wal_autocheckpoint', { simple: true }) });
  const quiet = { cache: -QUIET_CACHE_KIB, autocheckpoint: QUIET_AUTOCHECKPOINT_PAGES };
  assert.deepEqual(state(), quiet, 'quiet at start');

  checkpoints.busy();
  assert.deepEqual(state(), { cache: -BURST_CACHE_KIB, autocheckpoint: SAFETY_NET_PAGES }, 'a burst');
  const deadline = Date.now() + BUSY_LINGER_MS + 10_000;
  while (state().cache !== quiet.cache && Date.now() < deadline) await sleep(50);
  assert.deepEqual(state(), quiet, 'quiet again after the burst');
});

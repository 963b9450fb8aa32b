/**
 * End-to-end crash test of feed ingestion: the built daemon (`node dist/cli.js serve`) is
 * spawned on a large feed file, killed with SIGKILL once some but not all lines are committed,
 * and started again on the same state directory. Every line must then be stored exactly once.
 * Build first (`npm run build`).
 */
import assert from 'node:assert/strict';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { before, test } from 'node:test';
import { RELEASE_AFTER_BURST_MS } from '../../src/feed/ingest-path.ts';
import { IDLE_THREAD_MS } from '../../src/feed/line-parser.ts';
import { BUSY_LINGER_MS } from '../../src/store/sqlite/checkpointer.ts';
import { assertBuilt, databaseIn, feedLines, Probe, scratchDir, spawnServe, waitFor } from '../helpers/feed-helpers.ts';

before(assertBuilt);

test('kill -9 in the middle of a large file, then restart: every line stored exactly once, none read twice', async (t) => {
  const stateDir = scratchDir(t, 'hookrelay-feed-crash-');
  const path = join(stateDir, 'feed.jsonl');
  const total = 300_000;
  const lines = feedLines(total);
  writeFileSync(path, lines.text);

  const first = await spawnServe(t, stateDir, ['--feed', path]);
  const probe = new Probe(t, databaseIn(stateDir));
  // Kill it about a third of the way in: batches of 10,000 lines commit every few tens of ms.
  await waitFor('a third of the file to be committed', () => (probe.position(path) ?? 0) >= lines.positions[total / 3]!);
  first.child.kill('SIGKILL');
  assert.deepEqual(await first.exited, { code: null, signal: 'SIGKILL' });

  t.diagnostic(`killed with ${probe.eventCount()} of ${total} lines committed`);
  // The premise: killed in the middle, with a batch boundary as the committed state.
  const committed = probe.position(path)!;
  const eventsAtKill = probe.eventCount();
  assert.ok(committed < lines.bytes, `the daemon finished the file before it was killed (position ${committed} of ${lines.bytes})`);
  assert.ok(eventsAtKill > 0 && eventsAtKill < total);
  // The position and the rows of a batch are one transaction: the lines before the position, and only they, are stored.
  assert.equal(committed, lines.positions[eventsAtKill], 'committed position and stored events disagree');
  assert.deepEqual(probe.stats(path), { accepted: eventsAtKill, duplicates: 0, quarantined: 0 });

  const second = await spawnServe(t, stateDir, ['--feed', path]);
  await probe.waitForLines(path, total);
  assert.equal(probe.eventCount(), total);
  const positions = probe.store.db.prepare('SELECT source_position FROM events ORDER BY source_position').pluck().all();
  assert.deepEqual(positions, lines.positions, 'each line has exactly one event, at its own position');
  assert.equal(probe.store.db.prepare('SELECT count(DISTINCT id) FROM events').pluck().get(), total);
  // duplicates == 0: no line was processed twice (a re-read line would count as a duplicate).
  assert.deepEqual(probe.stats(path), { accepted: total, duplicates: 0, quarantined: 0 });
  assert.deepEqual(probe.rejects(), []);
  assert.equal(probe.position(path), lines.bytes);

  second.child.kill('SIGTERM');
  assert.deepEqual(await second.exited, { code: 0, signal: null });
});

test('the daemon gives memory back after a burst only once the parser thread has ended and SQLite\'s background checkpoints have stopped', () => {
  // ingest-path.ts cannot read BUSY_LINGER_MS (the feed imports no backend): this keeps the two in step.
  assert.ok(RELEASE_AFTER_BURST_MS > IDLE_THREAD_MS, `${RELEASE_AFTER_BURST_MS} ms is not past the parser thread's idle end (${IDLE_THREAD_MS} ms)`);
  assert.ok(RELEASE_AFTER_BURST_MS > BUSY_LINGER_MS, `${RELEASE_AFTER_BURST_MS} ms is not past the checkpoints' linger (${BUSY_LINGER_MS} ms)`);
});

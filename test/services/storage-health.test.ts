/**
 * Storage faults: which SQLite errors are faults of the storage (real errors from real SQLite
 * files), and how the daemon's storage health reports them: one log line per change of state,
 * the worst fault wins, damage is for good, and a write is retried (the same write) until it
 * goes through.
 */
import assert from 'node:assert/strict';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import Database from 'better-sqlite3';
import { createLogger } from '../../src/log.ts';
import { createStorageHealth, StorageFault, storageFaultOf } from '../../src/services/storage-health.ts';
import { tempDir } from '../helpers/helpers.ts';

function errorOf(fn: () => unknown): unknown {
  try {
    fn();
  } catch (err) {
    return err;
  }
  throw new Error('expected an error');
}

test('storageFaultOf: a full database, a file that is not one and a damaged one are faults; constraints and locks are not', (t) => {
  const dir = tempDir(t);
  const db = new Database(join(dir, 'a.db'));
  t.after(() => db.close());
  db.exec('CREATE TABLE t (x TEXT PRIMARY KEY)');
  db.pragma(`max_page_count = ${db.pragma('page_count', { simple: true }) as number}`);
  const full = errorOf(() => db.prepare('INSERT INTO t VALUES (?)').run('x'.repeat(100_000)));
  assert.equal((full as { code: string }).code, 'SQLITE_FULL');
  assert.equal(storageFaultOf(full), StorageFault.diskFull);
  // Wrapped (a HookrelayError's cause) it is still recognised.
  assert.equal(storageFaultOf(new Error('ingest failed', { cause: full })), StorageFault.diskFull);

  writeFileSync(join(dir, 'b.db'), 'this is not a database at all, not even close to one'.repeat(100));
  const notADb = errorOf(() => new Database(join(dir, 'b.db')).pragma('user_version'));
  assert.equal(storageFaultOf(notADb), StorageFault.damaged);

  db.pragma('max_page_count = 1073741823');
  db.prepare('INSERT INTO t VALUES (?)').run('a');
  const constraint = errorOf(() => db.prepare('INSERT INTO t VALUES (?)').run('a'));
  assert.equal(storageFaultOf(constraint), null);
  const other = new Database(join(dir, 'a.db'), { timeout: 0 });
  t.after(() => other.close());
  db.exec('BEGIN IMMEDIATE');
  const busy = errorOf(() => other.exec('BEGIN IMMEDIATE'));
  db.exec('ROLLBACK');
  assert.equal((busy as { code: string }).code, 'SQLITE_BUSY');
  assert.equal(storageFaultOf(busy), null);
  assert.equal(storageFaultOf(new Error('plain')), null);
});

test('storage health: logged once per change of state, the worst fault wins, damage stays; a write is retried until it goes through', async () => {
  const records: Array<Record<string, unknown>> = [];
  const health = createStorageHealth(createLogger('info', { write: (line: string) => void records.push(JSON.parse(line) as Record<string, unknown>) }), () => 1000);
  const sqlite = (code: string) => Object.assign(new Error(code), { code });

  assert.equal(health.problem(), null);
  assert.equal(health.failed('feed', new Error('a bug')), null, 'not a storage fault: nothing changes');
  assert.equal(health.problem(), null);
  for (let i = 0; i < 5; i++) assert.equal(health.failed('feed', sqlite('SQLITE_FULL')), StorageFault.diskFull);
  health.failed('dispatch', sqlite('SQLITE_IOERR_WRITE'));
  assert.deepEqual(
    { ...health.problem(), detail: undefined },
    { fault: 'disk_full', detail: undefined, since: 1000, parts: ['feed'] },
    'the full disk is worse than an I/O error',
  );
  health.succeeded('feed');
  assert.equal(health.problem()?.fault, 'io_error');
  health.succeeded('dispatch');
  assert.equal(health.problem(), null);
  assert.deepEqual(
    records.map((r) => [r.level, r.fault ?? r.previous]),
    [
      [50, 'disk_full'],
      [50, 'io_error'],
      [30, 'io_error'],
    ],
  );

  // The same write, tried again after a back-off, until it goes through.
  let tries = 0;
  const value = await health.retrying('feed', () => {
    if (++tries < 3) throw sqlite('SQLITE_FULL');
    return 'stored';
  });
  assert.deepEqual([value, tries, health.problem()], ['stored', 3, null]);
  await assert.rejects(
    health.retrying('feed', () => {
      throw new Error('a bug');
    }),
    /a bug/,
    'any other error is thrown at once',
  );

  health.failed('dispatch', sqlite('SQLITE_CORRUPT'));
  health.succeeded('dispatch');
  assert.equal(health.damaged(), true);
  assert.equal(health.problem()?.fault, 'database_damaged', 'damage does not go away by itself');
  // Nothing is written to a damaged database: the write waits, untried, until the caller stops.
  const controller = new AbortController();
  let written = false;
  const parked = health.retrying(
    'feed',
    () => {
      written = true;
    },
    controller.signal,
  );
  await new Promise((resolve) => setTimeout(resolve, 50));
  controller.abort();
  await assert.rejects(parked, /damaged/);
  assert.equal(written, false);
  assert.equal(records.filter((r) => r.fault === 'database_damaged').length, 1);
});

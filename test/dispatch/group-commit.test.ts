/**
 * Unit tests of the group commit (src/dispatch/group-commit.ts): its named modes and their
 * changes, outcomes handed in recorded together, a commit asked for during another one run
 * after it (committing-more-wanted), the window between group commits, a claim for new work
 * not waiting for it, a lock held by another SQLite connection waited out without losing
 * anything, close() recording what waits and refusing further work.
 *
 * The transaction is a real SQLite write (a temp file, a second connection holding the lock);
 * a write that finds the lock taken answers `database_busy`, as the store does once its own
 * wait ends (that wait is test/store/lock-wait.test.ts's); the claim side (CommitHost) is the
 * test's, recording what it is told.
 */
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { test, type TestContext } from 'node:test';
import Database from 'better-sqlite3';
import { ErrorCode, HookrelayError } from '../../src/domain/errors.ts';
import type { CommitBatch, CommitHost, CommitKind, PendingAttempt } from '../../src/dispatch/commit-batch.ts';
import { createGroupCommit } from '../../src/dispatch/group-commit.ts';
import type { ClaimedDelivery, FinishedAttempt, FlushResult, FlushWork } from '../../src/services/outbox.ts';
import { silentLog, tempDir } from '../helpers/helpers.ts';
import { waitFor } from '../helpers/receivers.ts';

const NOTHING: FlushResult = { claimed: [], drained: [], unsendable: [], contended: [], rateLimited: [] } as unknown as FlushResult;

/** An ended attempt of delivery `id` (only the id matters to the group commit). */
function ended(id: number): PendingAttempt {
  const delivery = { id } as ClaimedDelivery;
  return { delivery, finished: { delivery } as FinishedAttempt };
}

/** A flush that records each work's finished ids into a real SQLite table, one transaction per call. */
function sqliteFlush(t: TestContext) {
  const path = join(tempDir(t), 'gc.db');
  const db = new Database(path);
  db.pragma('journal_mode = WAL');
  db.pragma('busy_timeout = 0');
  db.exec('CREATE TABLE recorded (id INTEGER NOT NULL, kind TEXT NOT NULL)');
  t.after(() => db.close());
  const insert = db.prepare('INSERT INTO recorded (id, kind) VALUES (?, ?)');
  const works: FlushWork[] = [];
  const calls = { tries: 0 };
  const write = db.transaction((work: FlushWork) => {
    for (const f of work.finished) insert.run(f.delivery.id, 'finished');
    for (const d of work.released) insert.run(d.id, 'released');
  });
  return {
    path,
    works,
    calls,
    recorded: () => db.prepare('SELECT id FROM recorded ORDER BY id').pluck().all() as number[],
    flush: async (work: FlushWork): Promise<FlushResult> => {
      calls.tries++;
      try {
        write.immediate(work);
      } catch (err) {
        if ((err as { code?: string }).code === 'SQLITE_BUSY') throw new HookrelayError(ErrorCode.databaseBusy, 'locked', { cause: err });
        throw err;
      }
      works.push(work);
      return NOTHING;
    },
  };
}

function recordingHost(over: Partial<CommitHost<PendingAttempt>> = {}) {
  const seen = { plans: [] as CommitKind[], committed: 0 };
  const host: CommitHost<PendingAttempt> = {
    claiming: () => true,
    refresh: () => null,
    prepare: () => {},
    plan: (_batch: CommitBatch<PendingAttempt>, kind: CommitKind) => {
      seen.plans.push(kind);
      return null;
    },
    peek: async () => null,
    committed: () => {
      seen.committed++;
    },
    recordedAlone: () => {},
    ...over,
  };
  return { host, seen };
}

test('modes: stopped, then scheduled at start, committing, idle; outcomes handed in at once go out in one commit', async (t) => {
  const store = sqliteFlush(t);
  const gc = createGroupCommit<PendingAttempt>({ deliveries: store, log: silentLog, groupCommitMs: 0 });
  const { host, seen } = recordingHost();
  assert.equal(gc.mode, 'stopped');
  gc.start(host);
  assert.equal(gc.mode, 'scheduled');
  assert.throws(() => gc.start(host), /started while scheduled/);
  await waitFor('the first commit (nothing to write)', () => seen.committed === 1 && gc.mode === 'idle');
  gc.attemptEnded(ended(1));
  gc.attemptEnded(ended(2));
  gc.attemptCutShort({ delivery: { id: 3 } as ClaimedDelivery, finished: null });
  assert.equal(gc.mode, 'scheduled');
  await waitFor('the group commit', () => store.recorded().length === 3 && gc.mode === 'idle');
  assert.equal(store.works.length, 1);
  assert.deepEqual(store.recorded(), [1, 2, 3]);
  await gc.close();
  assert.equal(gc.mode, 'stopped');
});

test('a commit asked for while one is under way: committing-more-wanted, and it runs once that one has ended', async (t) => {
  const store = sqliteFlush(t);
  let release!: () => void;
  const gate = new Promise<void>((resolve) => (release = resolve));
  let first = true;
  const flush = async (work: FlushWork): Promise<FlushResult> => {
    if (first) {
      first = false;
      await gate;
    }
    return store.flush(work);
  };
  const gc = createGroupCommit<PendingAttempt>({ deliveries: { flush }, log: silentLog, groupCommitMs: 0 });
  const { host } = recordingHost();
  gc.start(host);
  await waitFor('idle after start', () => gc.mode === 'idle');
  gc.attemptEnded(ended(1));
  await waitFor('the first commit under way', () => gc.mode === 'committing');
  gc.attemptEnded(ended(2));
  await waitFor('the second one wanted', () => gc.mode === 'committing-more-wanted');
  assert.deepEqual(store.recorded(), []);
  release();
  await waitFor('both recorded, apart', () => store.works.length === 2 && gc.mode === 'idle');
  assert.deepEqual(
    store.works.map((w) => w.finished.map((f) => f.delivery.id)),
    [[1], [2]],
  );
  await gc.close();
});

test('the window: a group commit waits for it (scheduled), a claim for new work does not, close() records what waits', async (t) => {
  const store = sqliteFlush(t);
  const gc = createGroupCommit<PendingAttempt>({ deliveries: store, log: silentLog, groupCommitMs: 3_600_000 });
  const { host, seen } = recordingHost();
  gc.start(host);
  // The first commit of all is not held back (no commit before it).
  gc.attemptEnded(ended(1));
  await waitFor('the first group commit', () => store.recorded().length === 1 && gc.mode === 'idle');
  gc.attemptEnded(ended(2));
  assert.equal(gc.mode, 'scheduled');
  gc.requestClaim();
  await waitFor('the claim', () => seen.plans.includes('claim'));
  // The claim recorded nothing: the outcome waits for the group commit, which waits for its window.
  await waitFor('back to scheduled', () => gc.mode === 'scheduled');
  assert.deepEqual(store.recorded(), [1]);
  await gc.close();
  assert.equal(gc.mode, 'stopped');
  assert.deepEqual(store.recorded(), [1, 2]);
  // Closed: nothing more is taken or scheduled (an armed hour-long timer would keep this test alive).
  gc.request();
  gc.requestClaim();
  assert.equal(gc.mode, 'stopped');
});

test('a lock held by another connection: the commit keeps what it carries, tries again on a timer, and records it once released', async (t) => {
  const store = sqliteFlush(t);
  const other = new Database(store.path);
  t.after(() => other.close());
  const gc = createGroupCommit<PendingAttempt>({ deliveries: store, log: silentLog, groupCommitMs: 0 });
  const { host } = recordingHost();
  gc.start(host);
  await waitFor('idle after start', () => gc.mode === 'idle');
  other.exec('BEGIN IMMEDIATE');
  gc.attemptEnded(ended(1));
  gc.attemptEnded(ended(2));
  // Tried again and again while the lock is held: never idle meanwhile, nothing lost.
  await waitFor('several tries', () => store.calls.tries >= 5, 10_000, 5);
  assert.notEqual(gc.mode, 'idle');
  assert.deepEqual(store.recorded(), []);
  other.exec('COMMIT');
  await waitFor('recorded after the lock', () => store.recorded().length === 2 && gc.mode === 'idle');
  assert.equal(store.works.length, 1);
  await gc.close();
});

test('PostgreSQL cancels the statements (statement_timeout behind a lock, lock_timeout) for a while: the outcomes are kept and recorded together once it passes, never let go one by one', { timeout: 30_000 }, async (t) => {
  const store = sqliteFlush(t);
  let cancelled = 0;
  const flush = async (work: FlushWork): Promise<FlushResult> => {
    // The first five writes are cancelled by the server, alternately as a statement timeout and a lock timeout.
    if (cancelled < 5) {
      cancelled++;
      throw Object.assign(new Error(cancelled % 2 === 1 ? 'canceling statement due to statement timeout' : 'canceling statement due to lock timeout'), { code: cancelled % 2 === 1 ? '57014' : '55P03' });
    }
    return store.flush(work);
  };
  const errors: string[] = [];
  const log = { ...silentLog, error: (_obj: unknown, msg?: string) => void errors.push(msg ?? '') } as unknown as typeof silentLog;
  const gc = createGroupCommit<PendingAttempt>({ deliveries: { flush }, log, groupCommitMs: 0 });
  gc.start(recordingHost().host);
  gc.attemptEnded(ended(1));
  gc.attemptEnded(ended(2));
  await waitFor('both recorded once the cancellations are over', () => store.recorded().length === 2, 20_000);
  assert.deepEqual(store.recorded(), [1, 2]);
  assert.deepEqual(
    store.works.filter((w) => w.finished.length > 0).map((w) => w.finished.map((f) => f.delivery.id)),
    [[1, 2]],
    'together, in one commit',
  );
  assert.ok(!errors.some((m) => m.includes('let go')), JSON.stringify(errors));
  await gc.close();
});

test('the database out of reach while a commit only reads (the look for due work): one error logged, not one per try, and the tries back off', { timeout: 30_000 }, async () => {
  let failing = true;
  let peeks = 0;
  const { host } = recordingHost({
    plan: () => ({ wanted: [{ orgId: 'acme', upTo: 1 }], leaseMs: 30_000 }),
    peek: async () => {
      peeks++;
      if (failing) throw Object.assign(new Error('Connection terminated unexpectedly'), {});
      return null;
    },
  });
  const errors: string[] = [];
  const log = { ...silentLog, error: (_obj: unknown, msg?: string) => void errors.push(msg ?? '') } as unknown as typeof silentLog;
  const gc = createGroupCommit<PendingAttempt>({ deliveries: { flush: async () => NOTHING }, log, groupCommitMs: 0 });
  gc.start(host);
  await new Promise((r) => setTimeout(r, 2000));
  const during = peeks;
  failing = false;
  assert.ok(during >= 3 && during <= 8, `${during} tries in 2 s: backing off (100, 200, 400, 800 ms...)`);
  assert.equal(errors.length, 1, JSON.stringify(errors));
  await waitFor('a look that succeeds once it answers', () => peeks > during, 10_000);
  await gc.close();
});

/**
 * Fencing on PostgreSQL (issue 46): an attempt's outcome is applied, and a delivery given back,
 * only under the very lease the attempt ran under. Each lease of a delivery adds one to its
 * epoch (deliveries.lease_epoch), whichever instance takes it, and the statements that settle
 * and release check it in the same statement. leased_by alone (the instance's name) let an
 * instance whose lease lapsed overwrite a later lease of the same name: a daemon restarted
 * under its instance.name, or its own claim of the lapsed lease. Through the delivery service
 * the dispatcher uses (OutboxService.flush), on a real PostgreSQL (test/helpers/pg-harness.ts),
 * two stores opened under one name standing for the instance before and after its restart.
 * test/store/deliveries-contract.test.ts has the cross-instance case (host-a's late outcome
 * after host-b took the delivery over).
 */
import assert from 'node:assert/strict';
import { after, test, type TestContext } from 'node:test';
import { orderingKey } from '../../src/domain/ordering.ts';
import type { AttemptResult } from '../../src/domain/retry-policy.ts';
import { createLogger } from '../../src/log.ts';
import { createOutboxService, type ClaimedDelivery, type ClaimWanted, type FinishedAttempt, type FlushWork, type OutboxService } from '../../src/services/outbox.ts';
import { createPgPool } from '../../src/store/pg/pool.ts';
import { openPgStore, type PgStore } from '../../src/store/pg/store.ts';
import { pgServer, stopPgServer } from '../helpers/pg-harness.ts';

after(stopPgServer);

const T0 = Date.parse('2026-11-29T08:00:00.000Z');
const silentLog = createLogger('silent');
const serviceOptions = { failingAfterFailures: 5, disableAfterMs: 86_400_000 };
const multi = { timeout: 60_000 };
/** A clock the test moves. */
const testClock = (at: number) => {
  const clock = { at, now: () => clock.at };
  return clock;
};

const answer = (statusCode: number): AttemptResult => ({
  statusCode,
  error: statusCode === 200 ? null : 'http_status',
  errorDetail: statusCode === 200 ? null : `HTTP ${statusCode}`,
  responseBody: null,
  durationMs: 5,
  retryAfterMs: null,
  sentTimestamp: 1,
  sentSignature: null,
});
const delivered = (d: ClaimedDelivery, at: number): FinishedAttempt => ({ delivery: d, result: answer(200), outcome: { kind: 'delivered' }, startedAt: at });
const retried = (d: ClaimedDelivery, at: number, next: number): FinishedAttempt => ({ delivery: d, result: answer(500), outcome: { kind: 'retry', at: next }, startedAt: at });
const claimOnly = (upTo: number, leaseMs: number): FlushWork => ({ finished: [], released: [], claim: { wanted: [{ orgId: 'acme', upTo, cap: upTo } satisfies ClaimWanted], leaseMs } });

/**
 * A fresh database with acme's webhook and the changes `changes` ([event id, request id]) of
 * acme queued in order, and `open(name)` for a store of an instance of that name (each a pool
 * of its own: two stores of one name are the same instance before and after a restart).
 */
async function setup(t: TestContext, changes: ReadonlyArray<readonly [string, string]>) {
  const url = await (await pgServer()).createDatabase();
  const clock = testClock(T0);
  const stores: PgStore[] = [];
  const raw = createPgPool(url, { max: 1 });
  t.after(async () => {
    await raw.end();
    for (const s of stores) await s.close();
  });
  const open = async (name: string): Promise<{ store: PgStore; outbox: OutboxService }> => {
    const store = await openPgStore(url, clock, { instance: name, poolSize: 2 });
    stores.push(store);
    return { store, outbox: createOutboxService(store, silentLog, serviceOptions) };
  };
  const first = await open('host-a');
  const ids = await first.store.transaction(async (tx) => {
    await tx.orgs.insert({ id: 'acme', name: 'Acme', createdAt: 1 });
    await tx.webhooks.upsert('acme', 'https://acme.example.com/hook', true, 'whsec_acme', 1);
    const source = await tx.feed.sourceId('test');
    const out: number[] = [];
    for (const [i, [eventId, request]] of changes.entries()) {
      const at = T0 + i;
      const event = { id: eventId, orgId: 'acme', anticipationRequestId: request, occurredAt: at, details: '"status":"approved","previous_status":"submitted"', legacyId: null };
      const [seq] = await tx.feed.insertEvents([{ event, position: null }], source, at);
      if (typeof seq !== 'number') throw new Error(`event ${eventId} not stored`);
      out.push(await tx.deliveries.insert(seq, 'acme', orderingKey('acme', request), at));
    }
    return out;
  });
  /** The delivery's row as the database has it: status, attempts, whether it is leased, and by whom. */
  const row = async (id: number) =>
    (await raw.query<{ status: string; attempts: number; leased: boolean; leased_by: string | null }>('SELECT status, attempts, lease_expires_at IS NOT NULL AS leased, leased_by FROM deliveries WHERE id = $1', [id])).rows[0];
  return { clock, ids, open, first, row, raw };
}

test('the same instance name leasing a delivery again after its lease lapsed (a restart): the first lease\'s late outcome is not applied and does not end the newer lease', multi, async (t) => {
  const { clock, ids, open, first, row } = await setup(t, [
    ['evt_1', 'ar_1'],
    ['evt_2', 'ar_1'],
  ]);
  const [d1, d2] = ids as [number, number];
  // host-a leases evt_1 for a second, then stalls (or is killed) with its attempt in flight.
  const before = await first.outbox.flush(claimOnly(4, 1000));
  assert.deepEqual(before.claimed.map((d) => d.id), [d1], 'one change of a request at a time');
  // Restarted under the same name once the lease has lapsed: it leases evt_1 again.
  clock.at = T0 + 5000;
  const restarted = await open('host-a');
  const again = await restarted.outbox.flush(claimOnly(4, 60_000));
  assert.deepEqual(again.claimed.map((d) => d.id), [d1]);

  // The first lease's attempt ends late (the old process comes back): a failure recorded in
  // the log, not applied to the delivery, which stays leased by the newer lease.
  clock.at = T0 + 6000;
  const late = await first.outbox.flush({ finished: [retried(before.claimed[0]!, T0 + 10, T0 + 6000 + 3_600_000)], released: [], claim: null });
  assert.deepEqual(late.superseded, [{ id: d1, orgId: 'acme' }]);
  assert.deepEqual(await row(d1), { status: 'pending', attempts: 0, leased: true, leased_by: 'host-a' });
  assert.deepEqual((await first.store.read((tx) => tx.deliveries.attempts(d1))).map((a) => [a.attempt, a.outcome]), [[1, 'retry']], 'the attempt is in the log all the same');

  // A late success must not end the newer lease either: evt_2 would go out while evt_1's
  // newer attempt is still in flight.
  const lateSuccess = await first.outbox.flush({ finished: [delivered(before.claimed[0]!, T0 + 20)], released: [], claim: null });
  assert.deepEqual(lateSuccess.superseded, [{ id: d1, orgId: 'acme' }]);
  assert.deepEqual(await row(d1), { status: 'pending', attempts: 0, leased: true, leased_by: 'host-a' });
  const other = await open('host-b');
  assert.deepEqual((await other.outbox.flush(claimOnly(4, 60_000))).claimed, [], 'evt_2 waits for evt_1, evt_1 is leased');

  // The newer lease's outcome is applied, and evt_2 follows.
  const onTime = await restarted.outbox.flush({ finished: [delivered(again.claimed[0]!, T0 + 5010)], released: [], claim: { wanted: [{ orgId: 'acme', upTo: 4, cap: 4 }], leaseMs: 60_000 } });
  assert.deepEqual(onTime.superseded, []);
  assert.deepEqual(await row(d1), { status: 'delivered', attempts: 1, leased: false, leased_by: 'host-a' });
  assert.deepEqual(onTime.claimed.map((d) => d.id), [d2]);
});

test('a give-back under a lapsed lease does not end the newer lease of the same instance name', multi, async (t) => {
  const { clock, ids, open, first, row } = await setup(t, [['evt_1', 'ar_1']]);
  const [d1] = ids as [number];
  const before = await first.outbox.flush(claimOnly(4, 1000));
  assert.deepEqual(before.claimed.map((d) => d.id), [d1]);
  clock.at = T0 + 5000;
  const restarted = await open('host-a');
  assert.deepEqual((await restarted.outbox.flush(claimOnly(4, 60_000))).claimed.map((d) => d.id), [d1]);
  // The old process gives back what it claimed and never started (its shutdown, say).
  await first.outbox.flush({ finished: [], released: before.claimed, claim: null });
  assert.deepEqual(await row(d1), { status: 'pending', attempts: 0, leased: true, leased_by: 'host-a' }, 'still leased by the newer lease');
  const other = await open('host-b');
  assert.deepEqual((await other.outbox.flush(claimOnly(4, 60_000))).claimed, [], 'nobody else may send it meanwhile');
});

test('the lease epoch: one more at every lease, whoever takes it; an outcome under the current epoch is applied even after its lease lapsed, when nobody leased it since', multi, async (t) => {
  const { clock, ids, open, first, row, raw } = await setup(t, [
    ['evt_1', 'ar_1'],
    ['evt_2', 'ar_2'],
  ]);
  const [d1, d2] = ids as [number, number];
  const epoch = async (id: number) => Number((await raw.query<{ e: string }>('SELECT lease_epoch AS e FROM deliveries WHERE id = $1', [id])).rows[0]!.e);
  assert.deepEqual([await epoch(d1), await epoch(d2)], [0, 0], 'never leased');
  const a = await first.outbox.flush(claimOnly(1, 1000));
  assert.deepEqual(a.claimed.map((d) => [d.id, d.leaseEpoch]), [[d1, 1]]);
  // host-a's lease lapses and nobody takes evt_1 meanwhile: its late outcome is the truth.
  clock.at = T0 + 5000;
  const late = await first.outbox.flush({ finished: [retried(a.claimed[0]!, T0, T0 + 5000)], released: [], claim: null });
  assert.deepEqual(late.superseded, []);
  assert.deepEqual(await row(d1), { status: 'pending', attempts: 1, leased: false, leased_by: 'host-a' });
  // host-b leases both (evt_1's retry is due): one more epoch each, whoever held them before.
  const b = await open('host-b');
  const byB = await b.outbox.flush(claimOnly(2, 60_000));
  assert.deepEqual(byB.claimed.map((d) => [d.id, d.leaseEpoch]).sort(), [
    [d1, 2],
    [d2, 1],
  ]);
  assert.deepEqual([await epoch(d1), await epoch(d2)], [2, 1]);
  // The repository's own check: a settlement under an old epoch is not applied, under the current one it is.
  const settled = await b.store.transaction((tx) =>
    tx.deliveries.settleMany([
      { id: d1, settlement: { status: 'delivered', attempts: 2, nextAttemptAt: T0 + 5100, at: T0 + 5100, statusCode: 200, error: null }, epoch: 1 },
      { id: d2, settlement: { status: 'delivered', attempts: 1, nextAttemptAt: T0 + 5100, at: T0 + 5100, statusCode: 200, error: null }, epoch: 1 },
    ]),
  );
  assert.deepEqual(settled, [d1]);
  assert.equal(await b.store.transaction((tx) => tx.deliveries.settle(d1, { status: 'delivered', attempts: 2, nextAttemptAt: T0 + 5100, at: T0 + 5100, statusCode: 200, error: null }, 2)), true);
  assert.deepEqual(await row(d1), { status: 'delivered', attempts: 2, leased: false, leased_by: 'host-b' });
});

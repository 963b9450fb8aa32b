/**
 * A transaction left open by an instance that stopped talking mid-transaction (paused with
 * SIGSTOP, a frozen VM, a network cut) on PostgreSQL (issue 46): the server ends its session
 * after the store's idle-in-transaction timeout (IDLE_IN_TRANSACTION_TIMEOUT_MS, shortened
 * here), so that its locks, a webhook's claim turn among them, are free again for the other
 * instances instead of for as long as the server believes the connection alive; the stalled
 * transaction fails when its instance comes back (nothing of it was committed) with an error
 * the daemon waits out and tries again (transient).
 */
import assert from 'node:assert/strict';
import { after, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { systemClock } from '../../src/domain/clock.ts';
import { IDLE_IN_TRANSACTION_TIMEOUT_MS, openPgStore } from '../../src/store/pg/store.ts';
import { isTransientStoreError } from '../../src/store/storage-faults.ts';
import { pgServer, stopPgServer } from '../helpers/pg-harness.ts';

after(stopPgServer);

test('a transaction whose instance stopped talking loses its session after the idle-in-transaction timeout: the webhook\'s turn is free for the others, the stalled transaction fails (transient)', { timeout: 60_000 }, async (t) => {
  assert.ok(IDLE_IN_TRANSACTION_TIMEOUT_MS < 11_000, 'shorter than the shortest lease (delivery.timeout 1 s + 10 s)');
  const url = await (await pgServer()).createDatabase();
  const stalled = await openPgStore(url, systemClock, { instance: 'host-a', poolSize: 2, idleInTransactionTimeoutMs: 1000 });
  const other = await openPgStore(url, systemClock, { instance: 'host-b', poolSize: 2 });
  t.after(async () => {
    await stalled.close();
    await other.close();
  });
  await other.transaction(async (tx) => {
    await tx.orgs.insert({ id: 'acme', name: 'Acme', createdAt: 1 });
    await tx.webhooks.upsert('acme', 'https://acme.example.com/hook', true, 'whsec_acme', 1);
  });
  const turn = () => other.transaction(async (tx) => (await tx.deliveries.claimTurns(['acme'], Date.now())).has('acme'));

  // host-a takes acme's turn, then stops talking for 4 s with its transaction open.
  let holding!: () => void;
  const held = new Promise<void>((resolve) => (holding = resolve));
  const stalledTx = stalled.transaction(async (tx) => {
    assert.ok((await tx.deliveries.claimTurns(['acme'], Date.now())).has('acme'));
    holding();
    await sleep(4000);
    await tx.deliveries.claimTurns(['acme'], Date.now());
  });
  const outcome = stalledTx.then(
    () => null,
    (err: unknown) => err,
  );
  await held;
  assert.equal(await turn(), false, 'held by host-a meanwhile');
  await sleep(2000);
  assert.equal(await turn(), true, 'free again once the server ended the idle session');
  const err = await outcome;
  assert.ok(err instanceof Error, 'the stalled transaction failed');
  assert.ok(isTransientStoreError(err), `a transient error: ${String(err)}`);
});

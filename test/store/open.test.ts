/**
 * Opening the configured store (src/store/open.ts) and the mechanics every Store answers for
 * both backends, so that no caller branches on one: sharing work between instances
 * (Store.shareWork: LISTEN/NOTIFY on PostgreSQL, a no-op on SQLite) and the daemon's wait for a
 * database it cannot reach yet. Real SQLite files, a real PostgreSQL server (test/helpers/pg-harness.ts).
 */
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { after, test, type TestContext } from 'node:test';
import { loadConfig } from '../../src/config/load.ts';
import { systemClock } from '../../src/domain/clock.ts';
import { ErrorCode, HookrelayError } from '../../src/domain/errors.ts';
import { createLogger } from '../../src/log.ts';
import { createWorkSignal } from '../../src/services/work-signal.ts';
import { openStoreFor, openStoreWhenReachable } from '../../src/store/open.ts';
import type { Store } from '../../src/store/repos.ts';
import { pgServer, stopPgServer } from '../helpers/pg-harness.ts';
import { silentLog, tempDir } from '../helpers/helpers.ts';

after(stopPgServer);

function configFor(t: TestContext, overrides: Record<string, string> = {}) {
  return loadConfig({ env: {}, overrides: { stateDir: tempDir(t), ...overrides } });
}

async function until(what: string, probe: () => boolean, ms = 5000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!probe()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

test('SQLite: the daemon opens through the same call as on PostgreSQL; sharing work is a no-op that closes', async (t) => {
  const config = configFor(t);
  const controller = new AbortController();
  const store = (await openStoreWhenReachable(config, systemClock, { log: silentLog, signal: controller.signal }))!;
  t.after(() => store.close());
  assert.equal(store.backend, 'sqlite');
  const work = createWorkSignal();
  const heard: string[] = [];
  work.subscribe((orgId) => heard.push(orgId));
  const sharing = await store.shareWork(work, { log: silentLog, listen: { poll: () => assert.fail('nothing to poll for') } });
  work.notify('acme', 'queued');
  assert.deepEqual(heard, ['acme'], 'the signal works in-process as before');
  await sharing.close();
  const upkeep = await store.upkeep(silentLog, { whileBusy: true });
  upkeep.busy();
  assert.equal(typeof upkeep.trimHeap(), 'boolean');
  await upkeep.stop();
});

test("PostgreSQL: a command's store announces what it queues to the daemon's, which hears it; a second daemon under the same name is refused", async (t) => {
  const url = await (await pgServer()).createDatabase();
  const config = configFor(t, { 'database.url': url, 'instance.name': 'relay-1' });
  const daemon = (await openStoreWhenReachable(config, systemClock, { log: silentLog, signal: new AbortController().signal }))!;
  t.after(() => daemon.close());
  const daemonWork = createWorkSignal();
  const heard: string[] = [];
  daemonWork.subscribe((orgId) => heard.push(orgId));
  const listening = await daemon.shareWork(daemonWork, { log: silentLog, listen: { poll: () => {} } });
  t.after(() => listening.close());
  await assert.rejects(
    daemon.shareWork(createWorkSignal(), { log: silentLog, listen: { poll: () => {} } }),
    (err: unknown) => err instanceof HookrelayError && err.code === ErrorCode.config && /another hookrelay instance named "relay-1"/.test(err.message),
  );

  const command: Store = await openStoreFor(config, systemClock, { log: silentLog });
  t.after(() => command.close());
  const commandWork = createWorkSignal();
  const announcing = await command.shareWork(commandWork, { log: silentLog });
  commandWork.notify('acme', 'queued');
  await announcing.close();
  await until('the daemon to hear the command', () => heard.length === 1);
  assert.deepEqual(heard, ['acme']);
});

test('PostgreSQL: the daemon waits for a server it cannot reach (logged once) until it is stopped, then opens nothing', async (t) => {
  // A port nobody listens on: connection refused, which waiting may mend.
  const config = configFor(t, { 'database.url': 'postgres://hookrelay@127.0.0.1:1/hookrelay?sslmode=disable', 'instance.name': 'relay-1' });
  const records: Array<Record<string, unknown>> = [];
  const log = createLogger('info', { write: (line: string) => void records.push(JSON.parse(line) as Record<string, unknown>) });
  const controller = new AbortController();
  let settled = false;
  const opening = openStoreWhenReachable(config, systemClock, { log, signal: controller.signal }).finally(() => (settled = true));
  await until('the first failure to be logged', () => records.length > 0);
  await new Promise((r) => setTimeout(r, 700));
  assert.equal(settled, false, 'still waiting for the server');
  controller.abort();
  assert.equal(await opening, null);
  const errors = records.filter((r) => r.level === 50);
  assert.deepEqual(errors.map((r) => r.msg), ['cannot reach the PostgreSQL database; trying again every few seconds (nothing is read or sent meanwhile)'], 'logged once');
  assert.equal(JSON.stringify(records).includes('password'), false);
});

test('SQLite: what waiting cannot mend is thrown at once (a file that is not a database)', async (t) => {
  const dir = tempDir(t);
  const path = join(dir, 'not-a-database.db');
  const { writeFileSync } = await import('node:fs');
  writeFileSync(path, 'this is not a database, just some text that fills the header and more of it '.repeat(20));
  const config = configFor(t, { 'database.path': path });
  await assert.rejects(
    openStoreWhenReachable(config, systemClock, { log: silentLog, signal: new AbortController().signal }),
    (err: unknown) => err instanceof HookrelayError && err.code === ErrorCode.databaseDamaged,
  );
});

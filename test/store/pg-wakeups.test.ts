/**
 * LISTEN/NOTIFY between instances sharing a PostgreSQL database (src/store/pg/wakeups.ts), on a
 * real server (test/helpers/pg-harness.ts): work signalled in one instance reaches the others' work
 * signals and not its own twice; a second daemon under a name in use is refused; the name is
 * free again once its holder closes.
 */
import assert from 'node:assert/strict';
import { after, test, type TestContext } from 'node:test';
import { ErrorCode, HookrelayError } from '../../src/domain/errors.ts';
import { createWorkSignal, type WorkKind, type WorkSignal } from '../../src/services/work-signal.ts';
import { publishWork, startPgWakeups, workPayloads, type PgWakeups } from '../../src/store/pg/wakeups.ts';
import { pgServer, stopPgServer } from '../helpers/pg-harness.ts';
import { silentLog } from '../helpers/helpers.ts';

after(stopPgServer);

interface Heard {
  readonly orgId: string;
  readonly kind: WorkKind;
}

async function instance(t: TestContext, url: string, name: string): Promise<{ work: WorkSignal; heard: Heard[]; wakeups: PgWakeups; polls: number[] }> {
  const work = createWorkSignal();
  const heard: Heard[] = [];
  work.subscribe((orgId, kind) => heard.push({ orgId, kind }));
  const polls: number[] = [];
  const wakeups = await startPgWakeups({ url, instance: name, work, log: silentLog, poll: () => polls.push(Date.now()) });
  t.after(() => wakeups.close());
  return { work, heard, wakeups, polls };
}

async function until(what: string, probe: () => boolean, ms = 5000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!probe()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

test('work signalled in one instance wakes the others, once, and never comes back to its sender', async (t) => {
  const url = await (await pgServer()).createDatabase();
  const a = await instance(t, url, 'host-a');
  const b = await instance(t, url, 'host-b');
  const c = await instance(t, url, 'host-c');

  a.work.notify('acme', 'queued');
  a.work.notify('acme', 'queued'); // the same tick: sent once
  a.work.notify('globex', 'webhook');
  await until('b and c to hear a', () => b.heard.length >= 2 && c.heard.length >= 2);
  assert.deepEqual(b.heard, [
    { orgId: 'acme', kind: 'queued' },
    { orgId: 'globex', kind: 'webhook' },
  ]);
  assert.deepEqual(c.heard, b.heard);

  // b relays nothing back: what it heard from a is not sent again.
  b.work.notify('initech', 'queued');
  await until('a and c to hear b', () => a.heard.some((h) => h.orgId === 'initech') && c.heard.some((h) => h.orgId === 'initech'));
  await new Promise((r) => setTimeout(r, 200));
  assert.deepEqual(
    a.heard.map((h) => h.orgId),
    ['acme', 'acme', 'globex', 'initech'],
    'a heard its own three signals, then b, and nothing twice',
  );
  assert.deepEqual(
    c.heard.map((h) => h.orgId),
    ['acme', 'globex', 'initech'],
  );
});

test('a second instance under a name in use is refused, and the name is free again once its holder closes', async (t) => {
  const url = await (await pgServer()).createDatabase();
  const first = await instance(t, url, 'relay-1');
  await assert.rejects(
    startPgWakeups({ url, instance: 'relay-1', work: createWorkSignal(), log: silentLog, poll: () => {} }),
    (err: unknown) => err instanceof HookrelayError && err.code === ErrorCode.config && /another hookrelay instance named "relay-1" is running/.test(err.message) && !err.message.includes('hr:'),
  );
  await first.wakeups.close();
  const again = await instance(t, url, 'relay-1');
  const other = await instance(t, url, 'relay-2');
  other.work.notify('acme', 'queued');
  await until('the new relay-1 to hear relay-2', () => again.heard.length === 1);
});

test('a large burst of signals is split into payloads under the 8000-byte limit, each one whole', () => {
  const work = Array.from({ length: 2000 }, (_, i) => [`organization-${String(i).padStart(5, '0')}`, i % 7 === 0 ? 'webhook' : 'queued'] as const);
  const payloads = workPayloads('host-a/1a2b3c4d', work);
  assert.ok(payloads.length > 1);
  const back: Array<readonly [string, string]> = [];
  for (const p of payloads) {
    assert.ok(Buffer.byteLength(p) < 8000, `${Buffer.byteLength(p)} bytes`);
    const message = JSON.parse(p) as { i: string; w: Array<[string, string]> };
    assert.equal(message.i, 'host-a/1a2b3c4d');
    back.push(...message.w);
  }
  assert.deepEqual(back, work);
});

test("a CLI command run under the daemon's own instance name is heard by the daemon (the sender is the process, not the name)", async (t) => {
  const url = await (await pgServer()).createDatabase();
  const daemon = await instance(t, url, 'relay-1');
  const cliWork = createWorkSignal();
  const stop = publishWork(url, 'relay-1', cliWork, silentLog);
  cliWork.notify('acme', 'queued');
  await stop();
  await until('the daemon to hear the command', () => daemon.heard.length === 1);
  assert.deepEqual(daemon.heard, [{ orgId: 'acme', kind: 'queued' }]);
});

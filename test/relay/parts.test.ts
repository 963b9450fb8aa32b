/**
 * The daemon as an ordered list of parts (src/relay/parts.ts): started in order, stopped in
 * reverse, a stop that fails does not keep the other parts from stopping, and every failure is
 * reported together; a start that fails half-way stops what it had started, the failing part
 * included. And the daemon itself: a start refused half-way (the admin API's port taken after
 * the lock and the database were taken) leaves the state directory free for the next start.
 */
import assert from 'node:assert/strict';
import { createServer } from 'node:net';
import { describe, test } from 'node:test';
import { loadConfig } from '../../src/config/load.ts';
import { createRelay } from '../../src/relay.ts';
import { PartList, Slot, stopError, type DaemonPart } from '../../src/relay/parts.ts';
import { openSqliteStore } from '../../src/store/sqlite/store.ts';
import { silentLog, tempDir } from '../helpers/helpers.ts';

/** Parts that write what happens to them into `events`; `failing` names parts whose start or stop throws. */
function recorded(names: readonly string[], events: string[], failing: { start?: string; stop?: readonly string[] } = {}): DaemonPart[] {
  return names.map((name) => ({
    name,
    async start() {
      events.push(`start ${name}`);
      if (failing.start === name) throw new Error(`${name} would not start`);
    },
    async stop(deadlineMs: number) {
      events.push(`stop ${name} ${deadlineMs}`);
      if (failing.stop?.includes(name)) throw new Error(`${name} would not stop`);
    },
  }));
}

describe('PartList', () => {
  test('starts in order and stops in reverse, each once, with the deadline', async () => {
    const events: string[] = [];
    const list = new PartList(recorded(['store', 'api', 'feed'], events), () => false);
    await list.start();
    assert.deepEqual(await list.stop(250), []);
    assert.deepEqual(await list.stop(250), [], 'a second stop stops nothing');
    assert.deepEqual(events, ['start store', 'start api', 'start feed', 'stop feed 250', 'stop api 250', 'stop store 250']);
  });

  test('a part that fails to stop does not keep the others from stopping; every failure is reported, named', async () => {
    const events: string[] = [];
    const list = new PartList(recorded(['lock', 'store', 'api', 'feed'], events, { stop: ['feed', 'store'] }), () => false);
    await list.start();
    const failures = await list.stop(0);
    assert.deepEqual(
      failures.map((f) => f.part),
      ['feed', 'store'],
    );
    assert.deepEqual(events.slice(4), ['stop feed 0', 'stop api 0', 'stop store 0', 'stop lock 0']);
    const error = stopError(failures);
    assert.match(error.message, /2 part\(s\) failed \(feed, store\); the others stopped/);
    assert.deepEqual(
      error.errors.map((e: Error) => e.message),
      ['stopping feed failed: feed would not stop', 'stopping store failed: store would not stop'],
    );
  });

  test('a start that fails half-way counts the failing part as started: stop releases it and those before it, not those after', async () => {
    const events: string[] = [];
    const list = new PartList(recorded(['lock', 'store', 'api', 'feed'], events, { start: 'api' }), () => false);
    await assert.rejects(list.start(), /api would not start/);
    await list.stop(0);
    assert.deepEqual(events, ['start lock', 'start store', 'start api', 'stop api 0', 'stop store 0', 'stop lock 0']);
  });

  test('a stop requested while starting ends the start before the next part', async () => {
    const events: string[] = [];
    let stopRequested = false;
    const parts = recorded(['lock', 'store', 'api'], events);
    parts[1] = { ...parts[1]!, start: () => void (stopRequested = true) };
    const list = new PartList(parts, () => stopRequested);
    await list.start();
    await list.stop(0);
    assert.deepEqual(events, ['start lock', 'stop store 0', 'stop lock 0']);
  });

  test('two parts of one name are refused; a slot read before it is set names what is missing', () => {
    assert.throws(() => new PartList(recorded(['store', 'store'], []), () => false), /two daemon parts are named store/);
    const slot = new Slot<number>('the store');
    assert.throws(() => slot.get(), /the store is not running/);
    assert.equal(slot.peek(), null);
    slot.set(3);
    assert.equal(slot.get(), 3);
    assert.equal(slot.take(), 3);
    assert.equal(slot.take(), null);
  });
});

describe('the daemon', () => {
  test('a start refused half-way (the admin port taken once the state directory is locked) releases the lock and the database: the next start succeeds', async (t) => {
    const stateDir = tempDir(t);
    // A port free at the address check and taken before the admin API listens: held by a
    // server started when the database part has opened (the lock is then held).
    const blocker = createServer();
    await new Promise<void>((resolve) => blocker.listen(0, '127.0.0.1', resolve));
    const port = (blocker.address() as { port: number }).port;
    await new Promise<void>((resolve) => blocker.close(() => resolve()));
    const config = loadConfig({ env: {}, overrides: { stateDir, 'api.listen': `127.0.0.1:${port}`, 'log.level': 'silent', 'metrics.enabled': 'false' } });
    const relay = createRelay(config, {
      log: silentLog,
      openSqliteStore: (path, clock, options) => {
        blocker.listen(port, '127.0.0.1');
        return openSqliteStore(path, clock, options);
      },
    });
    await assert.rejects(relay.start(), /already in use/);
    await new Promise<void>((resolve) => blocker.close(() => resolve()));
    const again = createRelay(config, { log: silentLog });
    await again.start();
    assert.equal(again.address().port, port);
    await again.stop();
  });
});

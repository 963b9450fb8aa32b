/**
 * Standard input as the feed: the built daemon (`serve --feed -`) spawned with lines piped into
 * it (EOF stops reading, not the daemon; a restart remembers nothing but duplicates are still
 * skipped), and an in-process relay stopped in the middle of a line. Build first.
 */
import assert from 'node:assert/strict';
import { PassThrough } from 'node:stream';
import { before, test } from 'node:test';
import { assertBuilt, databaseIn, feedRelay, fields, jsonLine, Probe, scratchDir, spawnServe, waitFor } from '../helpers/feed-helpers.ts';

before(assertBuilt);

test('serve --feed -: lines piped in are ingested as they arrive; EOF stops reading but the daemon keeps running', async (t) => {
  const stateDir = scratchDir(t, 'hookrelay-feed-stdin-');
  const daemon = await spawnServe(t, stateDir, ['--feed', '-'], { stdin: true });
  const probe = new Probe(t, databaseIn(stateDir));
  const stdin = daemon.child.stdin!;

  const l0 = jsonLine(fields(0));
  const l1 = jsonLine(fields(1, { event_id: 'chg_1' }));
  const l2 = jsonLine(fields(2));
  const bad = '{"organization_id":"org-a",\n';
  const l3 = jsonLine(fields(3));
  const last = JSON.stringify(fields(4)); // no newline: complete at EOF
  // A line split across two writes.
  stdin.write(l0 + l1 + l2.slice(0, 25));
  await probe.waitForLines('stdin', 2);
  stdin.write(l2.slice(25) + bad + l3);
  await probe.waitForLines('stdin', 5);
  stdin.end(last);
  const closed = await waitFor('the end of standard input to be logged', () => daemon.logRecords().find((r) => r.msg === 'standard input closed: reading stopped, delivery continues'));
  assert.equal(closed.accepted, 5);
  assert.equal(closed.quarantined, 1);

  const starts = [0, l0.length, l0.length + l1.length];
  const badAt = l0.length + l1.length + l2.length;
  const l3At = badAt + bad.length;
  const lastAt = l3At + l3.length;
  assert.deepEqual(
    probe.events().map((e) => [e.anticipation_request_id, e.source, e.source_position]),
    [
      ['ar_0', 'stdin', starts[0]],
      ['ar_1', 'stdin', starts[1]],
      ['ar_2', 'stdin', starts[2]],
      ['ar_3', 'stdin', l3At],
      ['ar_4', 'stdin', lastAt],
    ],
  );
  assert.deepEqual(
    probe.rejects().map((r) => [r.source, r.position, r.reason, r.raw.toString()]),
    [['stdin', badAt, 'invalid_json', bad.slice(0, -1)]],
  );
  assert.deepEqual(probe.stats('stdin'), { accepted: 5, duplicates: 0, quarantined: 1 });
  assert.equal(probe.position('stdin'), null, 'nothing is remembered about a stream that cannot be re-read');

  // Still serving after EOF.
  const health = await fetch(`${daemon.baseUrl}/healthz`);
  assert.equal(health.status, 200);
  assert.deepEqual(await health.json(), { status: 'ok' });
  const ready = await fetch(`${daemon.baseUrl}/readyz`);
  assert.equal(ready.status, 200);
  await ready.arrayBuffer();
  assert.equal(daemon.child.exitCode, null);
  assert.equal(daemon.child.signalCode, null);

  daemon.child.kill('SIGTERM');
  assert.deepEqual(await daemon.exited, { code: 0, signal: null });

  // A restart resumes with what the producer sends next; lines sent again are duplicates, not new events.
  const again = await spawnServe(t, stateDir, ['--feed', '-'], { stdin: true });
  again.child.stdin!.end(l0 + l1 + jsonLine(fields(5)));
  await probe.waitForLines('stdin', 6 + 3);
  assert.deepEqual(probe.stats('stdin'), { accepted: 6, duplicates: 2, quarantined: 1 });
  assert.deepEqual(probe.requestIds(), ['ar_0', 'ar_1', 'ar_2', 'ar_3', 'ar_4', 'ar_5']);
  again.child.kill('SIGTERM');
  assert.deepEqual(await again.exited, { code: 0, signal: null });
});

test('stopped in the middle of a line on standard input: the partial line is quarantined as incomplete_line, not dropped', async (t) => {
  const input = new PassThrough();
  const relay = feedRelay(t, { 'feed.path': '-' }, { stdin: () => input });
  await relay.start();
  const probe = relay.probe();
  const complete = jsonLine(fields(0));
  const partial = '{"organization_id":"org-a","anticipation_request_id":"ar_1"';
  input.write(complete + partial);
  await probe.waitForLines('stdin', 1);
  await relay.stop();

  assert.deepEqual(probe.requestIds(), ['ar_0']);
  assert.deepEqual(
    probe.rejects().map((r) => ({ ...r, raw: r.raw.toString() })),
    [
      {
        source: 'stdin',
        position: complete.length,
        line_bytes: partial.length,
        raw: partial,
        reason: 'incomplete_line',
        detail: 'the reader stopped before this line was terminated',
        event_id: null,
      },
    ],
  );
  assert.deepEqual(probe.stats('stdin'), { accepted: 1, duplicates: 0, quarantined: 1 });
});

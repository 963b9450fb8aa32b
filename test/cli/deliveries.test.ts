/**
 * `hookrelay deliveries` and `hookrelay webhook test --kind` as an operator runs them: the built
 * CLI next to the built daemon, whose webhook is a plain HTTP receiver on 127.0.0.1 that fails
 * the first request and then answers 204. A delivery waiting an hour shows as "retrying, next
 * attempt at ..."; `deliveries retry` has it sent within seconds (the daemon finds it at its
 * next poll, this being another process); once delivered, a second retry is refused with what
 * to do instead. `webhook test --kind sample_status_change` sends the real event's shape, marked
 * as a test.
 */
import assert from 'node:assert/strict';
import { appendFileSync, writeFileSync } from 'node:fs';
import { createServer, type IncomingMessage } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { test, type TestContext } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { assertBuilt, defer, jsonLine, runCli, scratchDir, spawnServe, waitFor } from '../helpers/feed-helpers.ts';

/** A plain HTTP receiver on 127.0.0.1: 503 to the first request, 204 to the rest; keeps each body. */
async function flakyReceiver(t: TestContext): Promise<{ url: string; bodies: string[] }> {
  const bodies: string[] = [];
  const server = createServer((req: IncomingMessage, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      bodies.push(Buffer.concat(chunks).toString('utf8'));
      res.writeHead(bodies.length === 1 ? 503 : 204).end();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  defer(t, () => new Promise<void>((resolve) => server.close(() => resolve())));
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/hook`, bodies };
}

test('hookrelay deliveries retry: a delivery waiting an hour is sent within seconds; refused once delivered; webhook test --kind sample_status_change', async (t) => {
  assertBuilt();
  const dir = scratchDir(t, 'hookrelay-retry-');
  const stateDir = join(dir, 'var');
  const config = join(dir, 'hookrelay.json');
  writeFileSync(config, JSON.stringify({ delivery: { allowHttp: true, allowNetworks: ['127.0.0.1/32'], retrySchedule: ['1h'], jitterPercent: 0, pollInterval: '100ms' }, feed: { pollInterval: 20 } }));
  const common = ['--state-dir', stateDir, '--config', config];
  const cli = async (...args: string[]) => {
    const r = await runCli(t, [...args, ...common]);
    assert.equal(r.code, 0, `hookrelay ${args.join(' ')}: ${r.stderr}`);
    return r.stdout;
  };
  const receiver = await flakyReceiver(t);
  await cli('migrate');
  await cli('orgs', 'add', 'acme');
  await cli('webhook', 'set', '--org', 'acme', '--url', receiver.url);
  const daemon = await spawnServe(t, stateDir, ['--config', config]);
  appendFileSync(join(stateDir, 'feed.jsonl'), jsonLine({ event_id: 'evt_1', organization_id: 'acme', anticipation_request_id: 'ar_1', status: 'approved' }));
  await waitFor('the first attempt to fail', () => daemon.logRecords().some((r) => r.outcome === 'retry'));

  const listed = await cli('deliveries', 'list', '--org', 'acme');
  assert.match(listed, /^1 +retrying, next attempt at \d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z +1 +evt_1 +HTTP 503/m);
  const [waiting] = JSON.parse(await cli('deliveries', 'list', '--org', 'acme', '--status', 'retrying', '--json')) as Array<Record<string, any>>;
  assert.equal(waiting?.state, 'retrying');
  assert.equal(waiting?.status, 'failed');
  assert.ok(Date.parse(waiting.next_attempt_at) - Date.now() > 55 * 60_000, 'its next attempt is an hour away');

  const calledAt = Date.now();
  assert.match(await cli('deliveries', 'retry', '1', '--org', 'acme'), /^delivery 1 is due now: the daemon sends it at its next look/);
  await waitFor('the retry to reach the receiver', () => receiver.bodies.length >= 2);
  assert.ok(Date.now() - calledAt < 5_000, 'sent within seconds of the command');
  // The receiver has answered; the daemon's group commit records it a moment later.
  for (let i = 0; i < 50 && (JSON.parse(await cli('deliveries', 'show', '1', '--org', 'acme', '--json')) as { state: string }).state !== 'delivered'; i++) await sleep(100);
  const shown = await cli('deliveries', 'show', '1', '--org', 'acme');
  assert.match(shown, /^delivery 1: delivered, 2 attempt\(s\), event evt_1$/m);

  const again = await runCli(t, ['deliveries', 'retry', '1', '--org', 'acme', ...common]);
  assert.notEqual(again.code, 0);
  assert.match(again.stderr, /^hookrelay: delivery 1 was delivered: it has no next attempt to bring forward; to send its event again, replay it$/m);
  const usage = await runCli(t, ['deliveries', 'list', '--org', 'acme', '--status', 'sent', ...common]);
  assert.match(usage.stderr, /--status must be one of queued, retrying, delivered, failed_for_good, pending, failed, dead; got "sent"/);

  const sample = await cli('webhook', 'test', '--org', 'acme', '--kind', 'sample_status_change');
  assert.match(sample, /^queued sample status change evt_test_[0-9a-f]{32} as delivery 2;/);
  const body = JSON.parse(await waitFor('the sample to arrive', () => receiver.bodies[2]));
  assert.equal(body.type, 'anticipation_request.status_changed');
  assert.equal(body.test, true);
  assert.match(body.data.anticipation_request_id, /^ar_test_/);
  const bogus = await runCli(t, ['webhook', 'test', '--org', 'acme', '--kind', 'sample', ...common]);
  assert.match(bogus.stderr, /--kind must be one of webhook_test, sample_status_change; got "sample"/);
});

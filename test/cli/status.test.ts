/**
 * `hookrelay status` as an operator runs it: the built CLI spawned next to the built daemon
 * (up, then down), its --json fields and its human form; and where it looks for the daemon.
 */
import assert from 'node:assert/strict';
import { appendFileSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { join } from 'node:path';
import { test } from 'node:test';
import { readinessUrl } from '../../src/cli/status.ts';
import { assertBuilt, migrateCli, runCli, scratchDir, spawnServe, waitFor } from '../helpers/feed-helpers.ts';

const ISO_TIME = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/;

/** A port nothing listens on (bound, then released). */
async function closedPort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as { port: number };
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}

test('hookrelay status --json with the daemon up, then down: daemon, feed position and lag, queue, each webhook and why it fails', async (t) => {
  assertBuilt();
  const dir = scratchDir(t, 'hookrelay-status-');
  const stateDir = join(dir, 'var');
  const config = join(dir, 'hookrelay.json');
  // Deliveries to a closed port on 127.0.0.1 fail at once (connection refused); one failure makes a webhook failing.
  writeFileSync(config, JSON.stringify({ delivery: { allowHttp: true, allowNetworks: ['127.0.0.1/32'], failingAfterFailures: 1, retrySchedule: ['1h'], jitterPercent: 0 }, feed: { pollInterval: 20 } }));
  const common = ['--state-dir', stateDir, '--config', config];
  const cli = async (...args: string[]) => {
    const r = await runCli(t, [...args, ...common]);
    assert.equal(r.code, 0, `hookrelay ${args.join(' ')}: ${r.stderr}`);
    return r.stdout;
  };
  const refused = await closedPort();
  await cli('migrate');
  await cli('orgs', 'add', 'acme');
  await cli('orgs', 'add', 'beta');
  await cli('webhook', 'set', '--org', 'acme', '--url', `http://127.0.0.1:${refused}/hook?token=abc`, '--no-hmac');
  await cli('webhook', 'set', '--org', 'beta', '--url', 'https://hooks.beta.example/in', '--no-hmac');
  await cli('webhook', 'disable', '--org', 'beta');

  const feedPath = join(stateDir, 'feed.jsonl');
  const line = (org: string, id: string, request: string) => JSON.stringify({ event_id: id, organization_id: org, anticipation_request_id: request, status: 'approved' }) + '\n';
  const complete = line('acme', 'evt_1', 'ar_1') + line('acme', 'evt_2', 'ar_1') + line('acme', 'evt_3', 'ar_2') + line('beta', 'evt_4', 'ar_1');
  const partial = '{"event_id":"evt_5","organization_id":"acme"'; // no newline yet: not a line
  writeFileSync(feedPath, complete + partial);

  const daemon = await spawnServe(t, stateDir, ['--config', config]);
  const port = Number(new URL(daemon.baseUrl).port);
  // evt_1 and evt_3 are attempted and fail; evt_2 waits for evt_1 (same request); beta's is held.
  await waitFor('two failed attempts', () => daemon.logRecords().filter((r) => r.outcome === 'retry').length >= 2);

  const status = async (listenPort: number) => JSON.parse(await cli('status', '--json', '--listen', `127.0.0.1:${listenPort}`)) as Record<string, any>;
  const up = await status(port);
  assert.match(up.checked_at, ISO_TIME);
  assert.deepEqual(up.daemon, { url: `http://127.0.0.1:${port}/readyz`, reachable: true, ready: true, status_code: 200, error: null, degraded: [] });
  const completeBytes = Buffer.byteLength(complete);
  assert.deepEqual({ ...up.feed, updated_at: typeof up.feed.updated_at }, {
    path: feedPath,
    position: completeBytes,
    size: completeBytes + partial.length,
    lag_bytes: partial.length,
    rotated: false,
    accepted: 4,
    duplicates: 0,
    quarantined: 0,
    updated_at: 'string',
  });
  assert.deepEqual({ ...up.queue, oldest_due_at: typeof up.queue.oldest_due_at, oldest_due_age_seconds: typeof up.queue.oldest_due_age_seconds }, {
    pending: 4,
    new: 1,
    retrying: 2,
    held: 1,
    rate_limited: 0,
    oldest_due_at: 'string',
    oldest_due_age_seconds: 'number',
    // One instance on SQLite: never a change out of its request's order.
    out_of_order_deliveries: 0,
  });

  const [acme, beta] = up.webhooks;
  assert.equal(acme.organization_id, 'acme');
  assert.equal(acme.webhook_url, `http://127.0.0.1:${refused}/hook?token=abc`);
  assert.equal(acme.status, 'failing');
  assert.equal(acme.consecutive_failures, 2);
  assert.match(acme.failing_since, ISO_TIME);
  assert.equal(acme.last_success_at, null);
  assert.equal(acme.disabled_reason, null);
  assert.equal(acme.last_error.status_code, null);
  assert.match(acme.last_error.error, /ECONNREFUSED/);
  assert.match(acme.status_detail, /^failing since .*: 2 attempt\(s\) in a row failed; last error at .*ECONNREFUSED.*; it is disabled if no attempt succeeds by /);
  assert.deepEqual(acme.queue, { new: 1, retrying: 2, oldest_due_at: up.queue.oldest_due_at, rate_limited: 0, out_of_order_deliveries: 0 });
  assert.equal(acme.rate_limit, null);
  assert.equal(beta.organization_id, 'beta');
  assert.equal(beta.status, 'disabled');
  assert.equal(beta.disabled_reason, 'operator');
  assert.equal(beta.last_error, null);
  assert.match(beta.status_detail, /^disabled because the operator disabled it/);
  assert.deepEqual(beta.queue, { new: 1, retrying: 0, oldest_due_at: null, rate_limited: 0, out_of_order_deliveries: 0 });

  const human = await cli('status', '--listen', `127.0.0.1:${port}`);
  assert.match(human, new RegExp(`^daemon: +reachable at http://127\\.0\\.0\\.1:${port}/readyz, ready$`, 'm'));
  assert.match(human, new RegExp(`^feed: +${feedPath.replace(/[.*+?^${}()|[\]\\/]/g, '\\$&')}: committed ${completeBytes} of ${completeBytes + partial.length} bytes, lag ${partial.length} bytes; 4 accepted, 0 duplicate, 0 quarantined`, 'm'));
  assert.match(human, /^queue: +4 pending: 1 new, 2 retrying, 1 held \(disabled webhooks\); oldest due since \S+ \(\d+s\)$/m);
  assert.match(human, /^ORGANIZATION +STATUS +NEW +RETRYING +OLDEST DUE +RATE LIMIT +LAST ERROR$/m);
  assert.match(human, /^acme +failing +1 +2 +\S+ +.*ECONNREFUSED/m);
  assert.match(human, /^beta +disabled +1 +0 +- +- +-$/m);
  assert.match(human, /^ {2}acme: failing since /m);
  assert.match(human, /^ {2}beta: disabled because the operator disabled it/m);

  daemon.child.kill('SIGTERM');
  assert.deepEqual(await daemon.exited, { code: 0, signal: null });
  appendFileSync(feedPath, '\n'); // the partial line is now complete, and nobody reads it

  const down = await status(port);
  assert.equal(down.daemon.url, `http://127.0.0.1:${port}/readyz`);
  assert.equal(down.daemon.reachable, false);
  assert.equal(down.daemon.ready, false);
  assert.equal(down.daemon.status_code, null);
  assert.match(down.daemon.error, /ECONNREFUSED/);
  assert.equal(down.feed.lag_bytes, partial.length + 1);
  assert.deepEqual(down.queue.pending, 4);
  assert.deepEqual(down.webhooks.map((w: { status: string }) => w.status), ['failing', 'disabled']);
  assert.match(await cli('status', '--listen', `127.0.0.1:${port}`), new RegExp(`^daemon: +not reachable at http://127\\.0\\.0\\.1:${port}/readyz: connect ECONNREFUSED 127\\.0\\.0\\.1:${port}$`, 'm'));
});

test('hookrelay status with no webhook, no feed file, and a daemon that listens on port 0', async (t) => {
  assertBuilt();
  const dir = scratchDir(t, 'hookrelay-status-');
  await migrateCli(t, ['--state-dir', join(dir, 'var')]);
  const r = await runCli(t, ['status', '--state-dir', join(dir, 'var'), '--listen', '127.0.0.1:0']);
  assert.equal(r.code, 0, r.stderr);
  assert.match(r.stdout, /^daemon: +not reachable: api\.listen is 127\.0\.0\.1:0: with port 0 the daemon picks its port at start; pass --listen HOST:PORT$/m);
  assert.match(r.stdout, /^feed: +.*feed\.jsonl: no such file yet$/m);
  assert.match(r.stdout, /^queue: +0 pending: 0 new, 0 retrying, 0 held \(disabled webhooks\); nothing due$/m);
  assert.match(r.stdout, /^webhooks: none; register one with: hookrelay webhook set --org ORG --url URL$/m);
});

test('status asks the daemon on loopback when it listens on every address', () => {
  assert.equal(readinessUrl('127.0.0.1:8080'), 'http://127.0.0.1:8080/readyz');
  assert.equal(readinessUrl('0.0.0.0:8080'), 'http://127.0.0.1:8080/readyz');
  assert.equal(readinessUrl('[::]:8080'), 'http://[::1]:8080/readyz');
  assert.equal(readinessUrl('[::1]:9000'), 'http://[::1]:9000/readyz');
  assert.equal(readinessUrl('localhost:8080'), 'http://localhost:8080/readyz');
  assert.equal(readinessUrl('127.0.0.1:0'), null);
});

/**
 * `hookrelay listen` end to end, as a newcomer uses it: the built daemon, the built CLI's
 * listener in a process of its own, the setup it prints followed word for word, and a feed line
 * that arrives signed and verified. A forged request is refused; the answer status is the
 * user's to choose.
 */
import assert from 'node:assert/strict';
import type { ChildProcess } from 'node:child_process';
import { appendFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { before, test, type TestContext } from 'node:test';
import { assertBuilt, CLI, fields, jsonLine, runCli, scratchDir, spawnServe, spawnWatched } from '../helpers/feed-helpers.ts';

before(assertBuilt);

interface Listener {
  readonly child: ChildProcess;
  readonly url: string;
  output(): string;
  /** Resolves once a line matching `pattern` was printed. */
  waitFor(pattern: RegExp): Promise<string>;
}

async function startListener(t: TestContext, args: readonly string[]): Promise<Listener> {
  const listener = spawnWatched(t, process.execPath, [CLI, 'listen', '--port', '0', ...args]);
  const first = await listener.line(/^listening on /);
  const url = /^listening on (http:\/\/127\.0\.0\.1:\d+\/webhook) /.exec(first)![1]!;
  return { child: listener.child, url, output: listener.stdout, waitFor: (pattern) => listener.line(pattern) };
}

test('hookrelay listen: the setup it prints lets the daemon deliver to it; each delivery is verified and printed; a forged one is refused', { timeout: 120_000 }, async (t) => {
  const dir = scratchDir(t, 'hookrelay-listen-');
  const state = join(dir, 'state');
  const config = join(dir, 'hookrelay.json');
  const common = ['--config', config, '--state-dir', state];
  writeFileSync(config, '{}');
  await runCli(t, ['migrate', ...common]);
  await runCli(t, ['orgs', 'add', 'acme', ...common]);

  // Before the configuration allows it, listen says what to add, for this organization only.
  const first = await startListener(t, ['--org', 'acme', ...common]);
  // Both lines are waited for: the second may come in a later chunk of output than the first.
  await first.waitFor(/"organizationNetworks": \["acme=127\.0\.0\.1\/32"\]/);
  await first.waitFor(new RegExp(`hookrelay webhook set --org acme --url ${first.url.replace(/[.]/g, '\\.')}`));
  assert.match(first.output(), /\{ "delivery": \{ "allowHttp": true, "organizationNetworks": \["acme=127\.0\.0\.1\/32"\] \} \}/);
  first.child.kill('SIGINT');

  // The user follows it: the settings into the file both the daemon and the CLI read.
  writeFileSync(config, JSON.stringify({ delivery: { allowHttp: true, organizationNetworks: ['acme=127.0.0.1/32'] } }));
  const listener = await startListener(t, ['--org', 'acme', '--verbose', ...common]);
  await listener.waitFor(/already lets acme's webhook reach http:\/\/127\.0\.0\.1/);
  const set = await runCli(t, ['webhook', 'set', '--org', 'acme', '--url', listener.url, ...common]);
  assert.equal(set.code, 0, set.stderr);
  await spawnServe(t, state, ['--config', config]);

  appendFileSync(join(state, 'feed.jsonl'), jsonLine({ ...fields(1), event_id: 'evt_listen_1', organization_id: 'acme', anticipation_request_id: 'ar_listen', status: 'approved' }));
  const line = await listener.waitFor(/id evt_listen_1 /);
  assert.match(line, /^\S+Z {2}POST \/webhook {2}id evt_listen_1 {2}request ar_listen {2}status approved {2}signature ok {2}-> 204$/);
  // --verbose: the body follows its line.
  await listener.waitFor(/^ {2}\{"type":"anticipation_request\.status_changed".*"event_id":"evt_listen_1"/);

  // A request not signed with acme's secret: 401, and said so.
  const forged = await fetch(listener.url, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'webhook-id': 'evt_forged', 'webhook-timestamp': String(Math.floor(Date.now() / 1000)), 'webhook-signature': `v1,${Buffer.alloc(32).toString('base64')}` },
    body: '{"data":{"anticipation_request_id":"ar_x","status":"approved"}}',
  });
  assert.equal(forged.status, 401);
  assert.match(await listener.waitFor(/id evt_forged /), /signature FAILED: no v1 signature matches the secret .* -> 401$/);
  listener.child.kill('SIGINT');
  const code = await new Promise<number | null>((resolve) => listener.child.once('close', (c) => resolve(c)));
  assert.equal(code, 0, 'Ctrl-C ends listen cleanly');
});

test('hookrelay listen --status 500 answers what it is told, so that retries can be watched; a busy port is one clear line', async (t) => {
  const dir = scratchDir(t, 'hookrelay-listen-');
  const common = ['--state-dir', join(dir, 'state')];
  await runCli(t, ['migrate', ...common]);
  await runCli(t, ['orgs', 'add', 'acme', ...common]);
  const listener = await startListener(t, ['--org', 'acme', '--status', '500', ...common]);
  // No webhook registered yet: requests are shown as unsigned, answered as asked.
  const res = await fetch(listener.url, { method: 'POST', body: '{}' });
  assert.equal(res.status, 500);
  assert.match(await listener.waitFor(/unsigned/), /unsigned \(active_hmac is false\) {2}-> 500$/);
  const port = new URL(listener.url).port;
  const busy = await runCli(t, ['listen', '--org', 'acme', '--port', port, ...common]);
  assert.equal(busy.code, 2);
  assert.equal(busy.stderr, `hookrelay: port ${port} on 127.0.0.1 is already in use; choose another with --port\n`);
  const unknown = await runCli(t, ['listen', '--org', 'nobody', '--port', '0', ...common]);
  assert.notEqual(unknown.code, 0);
  assert.match(unknown.stderr, /organization "?nobody"? /);
});

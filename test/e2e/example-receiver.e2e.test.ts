/**
 * The example receiver of docs/delivery.md (docs/examples/receiver.mjs) against the real daemon:
 * run as its header says, it verifies and prints a relayed status change, and refuses a forged
 * request. Keeps the documentation's code working.
 */
import assert from 'node:assert/strict';
import { appendFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { before, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { assertBuilt, fields, freePort, jsonLine, runCli, scratchDir, spawnServe, spawnWatched } from '../helpers/feed-helpers.ts';

before(assertBuilt);

const EXAMPLE = fileURLToPath(new URL('../../docs/examples/receiver.mjs', import.meta.url));

test('docs/examples/receiver.mjs verifies a delivery from the daemon and refuses a forged one', { timeout: 120_000 }, async (t) => {
  const dir = scratchDir(t, 'hookrelay-example-');
  const state = join(dir, 'state');
  const config = join(dir, 'hookrelay.json');
  writeFileSync(config, JSON.stringify({ delivery: { allowHttp: true, organizationNetworks: ['acme=127.0.0.1/32'] } }));
  const common = ['--config', config, '--state-dir', state];
  await runCli(t, ['migrate', ...common]);
  await runCli(t, ['orgs', 'add', 'acme', ...common]);
  const port = await freePort();
  const set = await runCli(t, ['webhook', 'set', '--org', 'acme', '--url', `http://127.0.0.1:${port}/`, ...common]);
  assert.equal(set.code, 0, set.stderr);
  const secret = /signing secret .*: (whsec_\S+)/.exec(set.stdout)![1]!;

  const receiver = spawnWatched(t, process.execPath, [EXAMPLE], { env: { HOOKRELAY_SECRET: secret, PORT: String(port) } });
  const printed = async (pattern: RegExp): Promise<void> => void (await receiver.line(pattern));
  await printed(new RegExp(`receiver listening on http://127\\.0\\.0\\.1:${port}/`));

  await spawnServe(t, state, ['--config', config]);
  appendFileSync(join(state, 'feed.jsonl'), jsonLine({ ...fields(1), event_id: 'evt_example_1', organization_id: 'acme', anticipation_request_id: 'ar_9', status: 'approved', previous_status: 'submitted' }));
  await printed(/^verified evt_example_1: ar_9 submitted -> approved$/m);

  const forged = await fetch(`http://127.0.0.1:${port}/`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'webhook-id': 'evt_forged', 'webhook-timestamp': String(Math.floor(Date.now() / 1000)), 'webhook-signature': `v1,${Buffer.alloc(32).toString('base64')}` },
    body: '{}',
  });
  assert.equal(forged.status, 401);
  await printed(/^rejected evt_forged: /m);
});

/**
 * The Python example receiver of docs/delivery.md (docs/examples/receiver.py) against the real
 * daemon: run as its header says (`python3 receiver.py`), it verifies and prints relayed events,
 * keeps verifying through a secret rotation, and refuses forged, tampered, stale and oversized
 * requests. Keeps the documentation's code working; needs python3 3.9 or newer.
 */
import assert from 'node:assert/strict';
import { spawnSync, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { accessSync, appendFileSync, constants, writeFileSync } from 'node:fs';
import { request } from 'node:http';
import { delimiter, join } from 'node:path';
import { before, test, type TestContext } from 'node:test';
import { fileURLToPath } from 'node:url';
import { signatureHeader } from '../../src/domain/signature.ts';
import { assertBuilt, fields, freePort, jsonLine, runCli, scratchDir, spawnServe, spawnWatched, WAIT_LIMIT_MS } from '../helpers/feed-helpers.ts';

const EXAMPLE = fileURLToPath(new URL('../../docs/examples/receiver.py', import.meta.url));

/** python3 on PATH, else /usr/bin/python3, else null. */
function findPython(): string | null {
  const executable = (file: string) => {
    try {
      accessSync(file, constants.X_OK);
      return true;
    } catch {
      return false;
    }
  };
  for (const dir of (process.env.PATH ?? '').split(delimiter)) {
    if (dir !== '' && executable(join(dir, 'python3'))) return join(dir, 'python3');
  }
  return executable('/usr/bin/python3') ? '/usr/bin/python3' : null;
}

/** Why the test cannot run here, or false. */
function missingPython(python: string | null): string | false {
  if (python === null) return 'python3 not installed';
  const probe = spawnSync(python, ['-c', 'import sys; sys.exit(0 if sys.version_info >= (3, 9) else 1)'], { stdio: 'ignore' });
  if (probe.error !== undefined || probe.status === null) return 'python3 not installed';
  return probe.status === 0 ? false : 'python3 older than 3.9';
}

const PYTHON = findPython();
const MISSING = missingPython(PYTHON);

before(() => {
  // Not skipped: CI machines have python3 (Debian's python3 package); without it, say what to install.
  if (MISSING) throw new Error(`${MISSING}: this test runs docs/examples/receiver.py; install python3 3.9 or newer (apt-get install -y python3)`);
  assertBuilt();
});

interface Receiver {
  readonly child: ChildProcess;
  output(): string;
  /** Waits until the receiver has printed a line matching `pattern`. */
  printed(pattern: RegExp): Promise<void>;
  /** SIGTERMs it; resolves with its exit code. */
  stop(): Promise<number | null>;
}

/** Runs `python3 docs/examples/receiver.py` with HOOKRELAY_SECRET and PORT, as its header says. */
async function startReceiver(t: TestContext, secret: string, port: number): Promise<Receiver> {
  const receiver = spawnWatched(t, PYTHON!, [EXAMPLE], { env: { HOOKRELAY_SECRET: secret, PORT: String(port) } });
  const output = () => receiver.stdout() + receiver.stderr();
  const printed = async (pattern: RegExp): Promise<void> => void (await receiver.line(pattern));
  await printed(new RegExp(`receiver listening on http://127\\.0\\.0\\.1:${port}/`));
  return {
    child: receiver.child,
    output,
    printed,
    stop: async () => {
      receiver.child.kill('SIGTERM');
      const timer = setTimeout(() => receiver.child.kill('SIGKILL'), WAIT_LIMIT_MS);
      const code = await receiver.closed;
      clearTimeout(timer);
      return code;
    },
  };
}

const now = () => Math.floor(Date.now() / 1000);

/** The three headers of `body` as event `id`, signed with `secrets` at `timestamp`. */
function signed(secrets: readonly string[], id: string, body: string, timestamp = now()): { id: string; timestamp: number; signature: string } {
  return { id, timestamp, signature: signatureHeader(secrets, id, timestamp, body) };
}

/** POSTs `body` with the three Standard Webhooks headers straight to the receiver. */
async function post(port: number, headers: { id?: string; timestamp?: number; signature?: string }, body: string): Promise<number> {
  const res = await fetch(`http://127.0.0.1:${port}/`, {
    method: 'POST',
    headers: {
      'content-type': 'application/json',
      ...(headers.id !== undefined ? { 'webhook-id': headers.id } : {}),
      ...(headers.timestamp !== undefined ? { 'webhook-timestamp': String(headers.timestamp) } : {}),
      ...(headers.signature !== undefined ? { 'webhook-signature': headers.signature } : {}),
    },
    body,
  });
  await res.arrayBuffer();
  return res.status;
}

/** A status-change body like the daemon's, for event `id`. */
function eventBody(id: string, status = 'approved'): string {
  return JSON.stringify({ type: 'anticipation_request.status_changed', timestamp: new Date().toISOString(), data: { event_id: id, organization_id: 'acme', anticipation_request_id: 'ar_direct', occurred_at: new Date().toISOString(), status, previous_status: 'submitted' } });
}

const countOf = (text: string, pattern: RegExp) => text.match(new RegExp(pattern.source, 'gm'))?.length ?? 0;

test('docs/examples/receiver.py verifies deliveries from the daemon, through a secret rotation, and refuses forged ones', { timeout: 120_000 }, async (t) => {
  const dir = scratchDir(t, 'hookrelay-example-py-');
  const state = join(dir, 'state');
  const config = join(dir, 'hookrelay.json');
  writeFileSync(config, JSON.stringify({ delivery: { allowHttp: true, organizationNetworks: ['acme=127.0.0.1/32'] } }));
  const common = ['--config', config, '--state-dir', state];
  const cli = async (...args: string[]) => {
    const r = await runCli(t, [...args, ...common]);
    assert.equal(r.code, 0, `hookrelay ${args.join(' ')}: ${r.stderr}`);
    return r.stdout;
  };
  await cli('migrate');
  await cli('orgs', 'add', 'acme');
  const port = await freePort();
  const set = await cli('webhook', 'set', '--org', 'acme', '--url', `http://127.0.0.1:${port}/`);
  const secret = /signing secret .*: (whsec_\S+)/.exec(set)![1]!;

  let receiver = await startReceiver(t, secret, port);
  await spawnServe(t, state, ['--config', config]);

  // Relayed by the daemon, signed with the secret: verified and printed, with '-' for no previous status.
  appendFileSync(join(state, 'feed.jsonl'), jsonLine({ ...fields(1), event_id: 'evt_py_1', organization_id: 'acme', anticipation_request_id: 'ar_9', status: 'approved', previous_status: 'submitted' }));
  await receiver.printed(/^verified evt_py_1: ar_9 submitted -> approved$/m);
  const { previous_status: _omitted, ...withoutPrevious } = fields(2);
  appendFileSync(join(state, 'feed.jsonl'), jsonLine({ ...withoutPrevious, event_id: 'evt_py_2', organization_id: 'acme', anticipation_request_id: 'ar_10', status: 'submitted' }));
  await receiver.printed(/^verified evt_py_2: ar_10 - -> submitted$/m);
  // `hookrelay webhook test`: a webhook.test event, verified too.
  const testEvent = /queued test event (\S+) /.exec(await cli('webhook', 'test', '--org', 'acme'))![1]!;
  await receiver.printed(new RegExp(`^verified ${testEvent}: webhook\\.test$`, 'm'));

  // Sent by this test straight to the receiver. A correctly signed request verifies (so the
  // refusals below are about the signature, not the request's shape)...
  const body = eventBody('evt_direct_ok');
  assert.equal(await post(port, signed([secret], 'evt_direct_ok', body), body), 204);
  await receiver.printed(/^verified evt_direct_ok: ar_direct submitted -> approved$/m);
  // ...and again (an at-least-once retry): answered 2xx, not printed twice.
  assert.equal(await post(port, signed([secret], 'evt_direct_ok', body), body), 204);
  // Any of several signatures (a rotation): a foreign one first, then the right one.
  const other = `whsec_${randomBytes(24).toString('base64')}`;
  const both = eventBody('evt_direct_two');
  assert.equal(await post(port, signed([other, secret], 'evt_direct_two', both), both), 204);
  await receiver.printed(/^verified evt_direct_two: /m);

  // Forged: an all-zero signature (as the Node example's test sends).
  assert.equal(await post(port, { id: 'evt_forged', timestamp: now(), signature: `v1,${Buffer.alloc(32).toString('base64')}` }, '{}'), 401);
  await receiver.printed(/^rejected evt_forged: /m);
  // Tampered: signed for one body, another sent.
  const original = eventBody('evt_tampered', 'approved');
  const sent = eventBody('evt_tampered', 'rejected');
  assert.equal(await post(port, signed([secret], 'evt_tampered', original), sent), 401);
  await receiver.printed(/^rejected evt_tampered: /m);
  // Tampered id: the signature covers the webhook-id too.
  const idBody = eventBody('evt_id_a');
  assert.equal(await post(port, { ...signed([secret], 'evt_id_a', idBody), id: 'evt_id_b' }, idBody), 401);
  await receiver.printed(/^rejected evt_id_b: /m);
  // Signed with another secret.
  const foreign = eventBody('evt_foreign');
  assert.equal(await post(port, signed([other], 'evt_foreign', foreign), foreign), 401);
  await receiver.printed(/^rejected evt_foreign: /m);
  // Stale (a replay) and from the future: correctly signed, but more than 5 minutes off.
  const stale = eventBody('evt_stale');
  assert.equal(await post(port, signed([secret], 'evt_stale', stale, now() - 400), stale), 401);
  await receiver.printed(/^rejected evt_stale: webhook-timestamp /m);
  const future = eventBody('evt_future');
  assert.equal(await post(port, signed([secret], 'evt_future', future, now() + 400), future), 401);
  await receiver.printed(/^rejected evt_future: webhook-timestamp /m);
  // Unsigned.
  assert.equal(await post(port, { id: 'evt_unsigned', timestamp: now() }, foreign), 401);
  await receiver.printed(/^rejected evt_unsigned: /m);
  // Larger than the bound: refused before its body is read.
  const oversized = await new Promise<number>((resolve, reject) => {
    const req = request({ host: '127.0.0.1', port, method: 'POST', path: '/', headers: { 'content-length': String(2 * 1024 * 1024), 'webhook-id': 'evt_huge' } }, (res) => {
      res.resume();
      resolve(res.statusCode!);
      req.destroy();
    });
    req.on('error', reject);
    req.flushHeaders();
  });
  assert.equal(oversized, 413);
  await receiver.printed(/^rejected evt_huge: /m);
  // Not a POST.
  assert.equal((await fetch(`http://127.0.0.1:${port}/`)).status, 405);
  assert.equal(countOf(receiver.output(), /^verified evt_direct_ok: /), 1, receiver.output());
  assert.doesNotMatch(receiver.output(), /^verified evt_(forged|tampered|id_b|foreign|stale|future|unsigned|huge)/m);
  assert.doesNotMatch(receiver.output(), /Traceback/);

  // Secret rotation: during the grace period the daemon signs with both secrets (new first), so
  // the receiver still holding the previous secret verifies...
  const rotated = /^(whsec_\S+)$/m.exec(await cli('webhook', 'rotate-secret', '--org', 'acme'))![1]!;
  assert.notEqual(rotated, secret);
  appendFileSync(join(state, 'feed.jsonl'), jsonLine({ ...fields(3), event_id: 'evt_py_3', organization_id: 'acme', anticipation_request_id: 'ar_11', status: 'paid', previous_status: 'approved' }));
  await receiver.printed(/^verified evt_py_3: ar_11 approved -> paid$/m);
  // ...and stops cleanly on SIGTERM; restarted with the new secret, it verifies too.
  assert.equal(await receiver.stop(), 0, receiver.output());
  receiver = await startReceiver(t, rotated, port);
  appendFileSync(join(state, 'feed.jsonl'), jsonLine({ ...fields(4), event_id: 'evt_py_4', organization_id: 'acme', anticipation_request_id: 'ar_12', status: 'paid', previous_status: 'approved' }));
  await receiver.printed(/^verified evt_py_4: ar_12 approved -> paid$/m);
  // A request signed with the old secret alone is refused by the new one.
  const old = eventBody('evt_old_only');
  assert.equal(await post(port, signed([secret], 'evt_old_only', old), old), 401);
  await receiver.printed(/^rejected evt_old_only: /m);
  assert.equal(await receiver.stop(), 0, receiver.output());
});

/**
 * Issue 47, end to end with the built CLI: nothing from outside reaches the user's terminal as a
 * control. `hookrelay listen --verbose` gets requests, verified and not, whose bodies and headers
 * carry escape sequences (OSC `ESC ] 0 ; title BEL`, `ESC [ 2 J`), CSI as the C1 control U+009B
 * and the bidirectional override U+202E; the CLI's lists and shows print organization names,
 * e-mails, a webhook URL, event ids and error details holding them. Every output holds none of
 * those characters raw, and shows each one escaped (src/domain/terminal-text.ts); `--json`
 * gives the same values back. Last, the shape that keeps it so: no command of src/cli/ writes
 * to stdout or stderr but through shared.ts.
 */
import assert from 'node:assert/strict';
import { readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { connect } from 'node:net';
import { join } from 'node:path';
import { before, test, type TestContext } from 'node:test';
import Database from 'better-sqlite3';
import { Webhook } from 'standardwebhooks';
import { assertBuilt, CLI, runCli, scratchDir, spawnWatched } from '../helpers/feed-helpers.ts';

before(assertBuilt);

const ESC = '\x1b';
const BEL = '\x07';
const CSI = '\u009b';
const RLO = '\u202e';
/** What a terminal acts on or that makes a line read as something else: never in the CLI's output raw. */
const RAW = /[\u0000-\u0009\u000b-\u001f\u007f-\u009f\u00ad\u061c\u200b-\u200f\u2028\u2029\u202a-\u202e\u2060-\u206f\ufeff]/u;

function assertNothingRaw(output: string, what: string): void {
  const found = RAW.exec(output)?.[0];
  if (found !== undefined) assert.fail(`${what} holds U+${found.charCodeAt(0).toString(16).padStart(4, '0')} raw: ${JSON.stringify(output)}`);
}

async function cli(t: TestContext, args: readonly string[]): Promise<{ stdout: string; stderr: string }> {
  const r = await runCli(t, args);
  assert.equal(r.code, 0, `hookrelay ${args.join(' ')}: exit ${r.code}; stderr: ${r.stderr}`);
  return r;
}

/**
 * One HTTP/1.1 request written byte for byte (fetch would refuse or re-encode some of these
 * headers): `headers` values as Latin-1 strings, which is how Node's server reads them back.
 * Resolves to the answer's status.
 */
function post(url: string, headers: Record<string, string>, body: Buffer): Promise<number> {
  const { hostname, port, pathname } = new URL(url);
  const head = [`POST ${pathname} HTTP/1.1`, `Host: ${hostname}:${port}`, 'Connection: close', `Content-Length: ${body.length}`, ...Object.entries(headers).map(([n, v]) => `${n}: ${v}`), '', ''].join('\r\n');
  return new Promise((resolve, reject) => {
    const socket = connect(Number(port), hostname);
    let answer = '';
    socket.on('data', (chunk: Buffer) => (answer += chunk.toString('latin1')));
    socket.on('error', reject);
    socket.on('close', () => resolve(Number(/^HTTP\/1\.1 (\d{3})/.exec(answer)?.[1] ?? 0)));
    socket.end(Buffer.concat([Buffer.from(head, 'latin1'), body]));
  });
}

test('hookrelay listen --verbose: escape sequences, C1 and bidirectional controls in bodies and headers, verified or not, are printed escaped, never raw', { timeout: 60_000 }, async (t) => {
  const dir = scratchDir(t, 'hookrelay-terminal-');
  const common = ['--state-dir', join(dir, 'state')];
  await cli(t, ['migrate', ...common]);
  await cli(t, ['orgs', 'add', 'acme', ...common]);
  // A webhook with a signing secret (it need not be reachable): listen verifies with it.
  await cli(t, ['webhook', 'set', '--org', 'acme', '--url', 'https://hooks.example.com/acme', ...common]);
  const secret = (await cli(t, ['webhook', 'secret', '--org', 'acme', ...common])).stdout.trim();
  const listener = spawnWatched(t, process.execPath, [CLI, 'listen', '--org', 'acme', '--port', '0', '--verbose', ...common]);
  const url = /^listening on (http:\/\/127\.0\.0\.1:\d+\/webhook) /.exec(await listener.line(/^listening on /))![1]!;

  // 1. Not signed, not JSON: what any local process, or a web page's text/plain POST, can send.
  const plain = `${ESC}]0;pwned${BEL}${ESC}[2J${CSI}31mred ${RLO}evil\\u001b\r\nsecond line\ttab`;
  assert.equal(await post(url, { 'content-type': 'text/plain', 'webhook-id': `evt_${CSI}31m_plain` }, Buffer.from(plain, 'utf8')), 401);
  await listener.line(/id evt_\\u009b31m_plain /);
  await listener.line(/^ {2}second line\\ttab$/);

  // 2. Not signed, JSON whose strings decode to ESC, CSI and U+202E: the one-line summary shows them escaped.
  const json = JSON.stringify({ data: { anticipation_request_id: `ar_${ESC}]0;pwned${BEL}`, status: `${CSI}2J${RLO}devorppa` } });
  assert.equal(await post(url, { 'content-type': 'application/json', 'webhook-id': 'evt_json' }, Buffer.from(json, 'utf8')), 401);
  const jsonLine = await listener.line(/id evt_json /);
  assert.match(jsonLine, /request ar_\\u001b\]0;pwned\\u0007 {2}status \\u009b2J\\u202edevorppa {2}signature FAILED/);

  // 3. Signed with acme's secret, so verified: a JSON body with U+009B and U+202E raw in its
  // strings, a webhook-id with the C1 byte 0x9B and the UTF-8 bytes of U+202E (read as Latin-1:
  // U+00E2 U+0080 U+00AE). (Node's HTTP server refuses ESC and BEL in a header or the URL itself.)
  const id = `evt_${CSI}_${Buffer.from(RLO, 'utf8').toString('latin1')}_signed`;
  const signedBody = JSON.stringify({ type: 'anticipation_request.status_changed', data: { anticipation_request_id: 'ar_signed', status: `approved${RLO}`, note: `${CSI}31m${ESC}[2J` } });
  const timestamp = new Date();
  const signature = new Webhook(secret).sign(id, timestamp, signedBody);
  const signedHeaders = { 'content-type': 'application/json', 'webhook-id': id, 'webhook-timestamp': String(Math.floor(timestamp.getTime() / 1000)), 'webhook-signature': signature };
  assert.equal(await post(url, signedHeaders, Buffer.from(signedBody, 'utf8')), 204);
  const signedLine = await listener.line(/_signed /);
  assert.match(signedLine, /id evt_\\u009b_â\\u0080®_signed {2}request ar_signed {2}status approved\\u202e {2}signature ok {2}-> 204$/);
  // The body: still the same JSON, its characters as JSON's own escapes (ESC was escaped by JSON.stringify already).
  const bodyLine = await listener.line(/^ {2}\{"type":"anticipation_request\.status_changed"/);
  assert.equal(bodyLine, `  ${signedBody.replace(RLO, '\\u202e').replace(CSI, '\\u009b')}`);
  assert.deepEqual(JSON.parse(bodyLine), JSON.parse(signedBody));

  listener.child.kill('SIGINT');
  assert.equal(await listener.closed, 0);
  const output = listener.stdout();
  assertNothingRaw(output, 'listen\'s output');
  // The text/plain body, line by line: each escape shown, backslashes doubled, its line break kept.
  assert.ok(output.includes('  \\u001b]0;pwned\\u0007\\u001b[2J\\u009b31mred \\u202eevil\\\\u001b\\r\n  second line\\ttab\n'), output);
  assert.equal(listener.stderr(), '');
});

test('the CLI\'s lists and shows print names, e-mails, URLs, event ids and error details from outside escaped; --json gives the same values, escaped as JSON', { timeout: 60_000 }, async (t) => {
  const dir = scratchDir(t, 'hookrelay-terminal-');
  const state = join(dir, 'state');
  const common = ['--state-dir', state];
  await cli(t, ['migrate', ...common]);
  // Names and e-mails refuse C0 controls, but not C1 (U+009B) or U+202E: given as they come.
  const name = `Evil ${CSI}31m${RLO}proC`;
  const email = `ada${RLO}@acme.example`;
  const webhookUrl = `https://hooks.example.com/a${RLO}b${CSI}c`;
  const added = await cli(t, ['orgs', 'add', 'acme', '--name', name, ...common]);
  assert.equal(added.stdout, 'added organization acme (Evil \\u009b31m\\u202eproC)\n');
  assert.equal((await cli(t, ['users', 'add', '--org', 'acme', '--email', email, '--role', 'saas_admin', ...common])).stdout, 'added ada\\u202e@acme.example to acme as saas_admin\n');
  const registered = await cli(t, ['webhook', 'set', '--org', 'acme', '--url', webhookUrl, ...common]);
  assert.match(registered.stdout, /^registered https:\/\/hooks\.example\.com\/a\\u202eb\\u009bc for acme, no rate limit\n/);

  // An event, then what no input path takes any more but a database may hold (stored by an
  // older version, or said by a receiver): an event id with U+202E, errors with escape sequences.
  const feed = join(dir, 'feed.jsonl');
  writeFileSync(feed, `${JSON.stringify({ event_id: 'evt_plain', organization_id: 'acme', anticipation_request_id: 'ar_1', status: 'approved' })}\n${JSON.stringify({ event_id: `evt_${RLO}x`, organization_id: 'no such org!', anticipation_request_id: 'ar_2', status: 'approved' })}\n`);
  await cli(t, ['ingest', feed, ...common]);
  const eventId = `evt_${RLO}gnp.exe`;
  const lastError = `tls: ${ESC}]0;pwned${BEL}${ESC}[2J`;
  const db = new Database(join(state, 'hookrelay.db'));
  try {
    db.prepare('UPDATE events SET id = ? WHERE id = ?').run(eventId, 'evt_plain');
    const delivery = db.prepare('SELECT id FROM deliveries').get() as { id: number };
    db.prepare("UPDATE deliveries SET attempts = 1, last_error = ?, status = 'pending' WHERE id = ?").run(lastError, delivery.id);
    db.prepare("INSERT INTO delivery_attempts (delivery_id, attempt, started_at, duration_ms, url, error_class, error_detail, outcome) VALUES (?, 1, ?, 12, ?, ?, ?, 'retry')").run(
      delivery.id,
      Date.now(),
      webhookUrl,
      `tls${CSI}`,
      `${CSI}2J${RLO}certificate\nforged line`,
    );
  } finally {
    db.close();
  }

  const outputs: Record<string, string> = {};
  const run = async (args: string[]) => {
    const r = await cli(t, [...args, ...common]);
    outputs[args.join(' ')] = r.stdout + r.stderr;
    return r.stdout;
  };
  assert.match(await run(['orgs', 'list']), /^acme {2}Evil \\u009b31m\\u202eproC {2}\S+Z$/m);
  assert.match(await run(['users', 'list', '--org', 'acme']), /^ada\\u202e@acme\.example {2}saas_admin {2}\S+Z$/m);
  assert.match(await run(['webhook', 'get', '--org', 'acme']), /^webhook_url: https:\/\/hooks\.example\.com\/a\\u202eb\\u009bc$/m);
  const list = await run(['deliveries', 'list', '--org', 'acme']);
  assert.match(list, /evt_\\u202egnp\.exe {2}tls: \\u001b\]0;pwned\\u0007\\u001b\[2J$/m);
  const show = await run(['deliveries', 'show', '1', '--org', 'acme']);
  assert.match(show, /^delivery 1: (?:\w+|retrying, next attempt at \S+), 1 attempt\(s\), event evt_\\u202egnp\.exe$/m);
  // The detail's line feed does not start a line of its own: a receiver cannot forge one.
  assert.match(show, /^ {2}#1 \S+ tls\\u009b retry \(\\u009b2J\\u202ecertificate\\nforged line\)$/m);
  assert.equal(show.split('\n').length, 3, show);
  const rejects = await run(['feed', 'rejects']);
  assert.match(rejects, /invalid_field/);
  await run(['status']);

  // --json: the same values, with what a terminal acts on written as JSON escapes.
  const jsonOf = async (args: string[]) => {
    const text = await run([...args, '--json']);
    assert.ok(!text.includes(RLO) && !text.includes(CSI), `${args.join(' ')} --json: ${text}`);
    return JSON.parse(text) as unknown;
  };
  assert.equal((await jsonOf(['orgs', 'list']) as Array<{ name: string }>)[0]!.name, name);
  assert.equal((await jsonOf(['users', 'list', '--org', 'acme']) as Array<{ email: string }>)[0]!.email, email);
  assert.equal((await jsonOf(['webhook', 'get', '--org', 'acme']) as { webhook_url: string }).webhook_url, webhookUrl);
  const listed = (await jsonOf(['deliveries', 'list', '--org', 'acme'])) as Array<{ event_id: string; last_error: string }>;
  assert.deepEqual([listed[0]!.event_id, listed[0]!.last_error], [eventId, lastError]);
  const shown = (await jsonOf(['deliveries', 'show', '1', '--org', 'acme'])) as { attempt_log: Array<{ error_detail: string }> };
  assert.equal(shown.attempt_log[0]!.error_detail, `${CSI}2J${RLO}certificate\nforged line`);
  assert.equal(((await jsonOf(['feed', 'rejects'])) as Array<{ event_id: string }>)[0]!.event_id, `evt_${RLO}x`);
  assert.equal(((await jsonOf(['status'])) as { webhooks: Array<{ webhook_url: string }> }).webhooks[0]!.webhook_url, webhookUrl);

  for (const [command, output] of Object.entries(outputs)) assertNothingRaw(output, `hookrelay ${command}`);
});

test('an error message quoting a value (an argument a script passed on, an e-mail) is one line on stderr, escaped', async (t) => {
  const dir = scratchDir(t, 'hookrelay-terminal-');
  const common = ['--state-dir', join(dir, 'state')];
  await cli(t, ['migrate', ...common]);
  await cli(t, ['orgs', 'add', 'acme', ...common]);
  const errors = [
    // hookrelay's usage errors quote the argument;
    { args: ['deliveries', 'list', '--org', 'acme', '--status', `${ESC}]0;pwned${BEL}${ESC}[2J\nforged`], quoted: 'got "\\u001b]0;pwned\\u0007\\u001b[2J\\nforged"' },
    // commander's errors quote the option;
    { args: ['orgs', 'list', `--x${ESC}[2J${RLO}`], quoted: "unknown option '--x\\u001b[2J\\u202e'" },
    // a service's error quotes its input, escaped by the service already (excerpt): left as it is.
    { args: ['users', 'remove', '--org', 'acme', '--email', `x${CSI}2J${RLO}@acme.example`], quoted: '"x\\u009b2J\\u202e@acme.example"' },
  ];
  for (const { args, quoted } of errors) {
    const r = await runCli(t, [...args, ...common]);
    assert.notEqual(r.code, 0);
    assert.equal(r.stdout, '');
    assert.equal(r.stderr.split('\n').length, 2, r.stderr);
    assert.ok(r.stderr.includes(quoted), `${r.stderr} quotes ${quoted}`);
    assertNothingRaw(r.stderr, `the error of ${args.slice(0, 2).join(' ')}`);
  }
});

test('the output boundary: no command of src/cli/ writes to stdout or stderr itself; shared.ts\'s say, sayError, print and table escape', () => {
  const dir = join(import.meta.dirname, '..', '..', 'src', 'cli');
  const offenders: string[] = [];
  for (const file of readdirSync(dir).filter((f) => f.endsWith('.ts'))) {
    // shared.ts is the boundary; progress.ts draws its own line (its own ESC [ K) from counts only.
    if (file === 'shared.ts' || file === 'progress.ts') continue;
    const text = readFileSync(join(dir, file), 'utf8');
    for (const match of text.matchAll(/process\.(?:stdout|stderr)\.write\(|\bconsole\.(?:log|error|warn|info)\(/g)) offenders.push(`src/cli/${file}: ${match[0]}`);
  }
  assert.deepEqual(offenders, [], 'write through say / sayError / print (src/cli/shared.ts): they escape what a terminal would act on');
});

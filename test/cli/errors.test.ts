/**
 * The built CLI (`node dist/cli.js`) as an operator meets it: global options before or after
 * the command, every kind of mistake answered with one line on stderr (never a stack trace) and
 * a documented exit code, start-up failures that exit at once, ingest's closing summary with
 * its rate, and progress shown on a terminal only. Build first (`npm test` does).
 */
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { chmodSync, existsSync, mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { before, test } from 'node:test';
import { assertBuilt, CLI, cleanEnv, defer, fields, jsonLine, migrateCli, runCli, scratchDir, spawnServe, WAIT_LIMIT_MS, type CliResult, type Exit } from '../helpers/feed-helpers.ts';

before(assertBuilt);

const EXIT_RUNTIME = 1;
const EXIT_USAGE = 2;
/** The user a root test process runs the CLI as, so that file permissions apply. */
const NOBODY = 65534;
const isRoot = process.getuid?.() === 0;

/** The command failed with `code` and exactly one line on stderr, "hookrelay: ...", matching `pattern`; no stack trace, nothing on stdout but log lines. */
function assertOneLine(what: string, result: CliResult, code: number, pattern: RegExp): void {
  assert.equal(result.code, code, `${what}: exit ${result.code} (${result.signal}); stderr: ${result.stderr}`);
  assert.doesNotMatch(result.stderr, /^\s+at /m, `${what}: a stack trace on stderr: ${result.stderr}`);
  const lines = result.stderr.split('\n');
  assert.equal(lines.length, 2, `${what}: expected one line on stderr, got ${JSON.stringify(result.stderr)}`);
  assert.equal(lines[1], '');
  assert.match(lines[0]!, /^hookrelay: \S/, what);
  assert.match(lines[0]!, pattern, what);
  for (const line of result.stdout.split('\n').filter((l) => l !== '')) assert.ok(line.startsWith('{'), `${what}: stdout holds more than log lines: ${result.stdout}`);
}

const ok = (what: string, result: CliResult): string => {
  assert.equal(result.code, 0, `${what}: exit ${result.code}; stderr: ${result.stderr}`);
  return result.stdout;
};

test('--config and --state-dir work before and after the command, for nested commands and serve alike', async (t) => {
  const dir = scratchDir(t, 'hookrelay-cli-errors-');
  writeFileSync(join(dir, 'conf.json'), JSON.stringify({ stateDir: join(dir, 'from-config') }));
  const database = join(dir, 'from-config', 'hookrelay.db');

  assert.match(ok('--config before migrate', await runCli(t, ['--config', join(dir, 'conf.json'), 'migrate'])), new RegExp(`migrated ${database} from 0 to \\d+\\n`));
  assert.match(ok('--config after migrate', await runCli(t, ['migrate', '--config', join(dir, 'conf.json')])), new RegExp(`database ${database} is at schema version \\d+\\n`));
  ok('--state-dir before migrate', await runCli(t, ['--state-dir', join(dir, 'flag'), 'migrate']));
  ok('--state-dir before orgs add', await runCli(t, ['--state-dir', join(dir, 'flag'), 'orgs', 'add', 'acme']));
  ok('--state-dir between', await runCli(t, ['orgs', '--state-dir', join(dir, 'flag'), 'add', 'globex']));
  const orgs = JSON.parse(ok('--state-dir after orgs list', await runCli(t, ['orgs', 'list', '--json', '--state-dir', join(dir, 'flag')]))) as Array<{ id: string }>;
  assert.deepEqual(orgs.map((o) => o.id), ['acme', 'globex']);
  // The flag wins over the config file, wherever each is given.
  const mixed = JSON.parse(ok('--config before, --state-dir after', await runCli(t, ['--config', join(dir, 'conf.json'), 'orgs', 'list', '--json', '--state-dir', join(dir, 'flag')])));
  assert.equal(mixed.length, 2);

  // The daemon reads --config given before `serve`: a broken file is refused, naming the key.
  writeFileSync(join(dir, 'bad.json'), JSON.stringify({ bogus: true }));
  assertOneLine('--config x serve', await runCli(t, ['--config', join(dir, 'bad.json'), 'serve']), EXIT_USAGE, /unknown key "bogus"/);
  assertOneLine('serve --config x', await runCli(t, ['serve', '--config', join(dir, 'bad.json')]), EXIT_USAGE, /unknown key "bogus"/);

  // Help lists the global options under every command.
  const help = ok('orgs list --help', await runCli(t, ['orgs', 'list', '--help']));
  assert.match(help, /Global Options:[\s\S]*--config <file>[\s\S]*--state-dir <dir>/);
});

test('usage mistakes: one line naming the problem and where to look, exit 2, nothing created', async (t) => {
  const dir = scratchDir(t, 'hookrelay-cli-errors-');
  const cases: Array<{ args: string[]; stderr: RegExp }> = [
    { args: ['orgs', 'list', '--bogus'], stderr: /unknown option '--bogus'; see: hookrelay orgs list --help$/ },
    { args: ['--bogus', 'orgs', 'list'], stderr: /unknown option '--bogus'/ },
    { args: ['orgs', 'list', '--jsn'], stderr: /unknown option '--jsn' \(did you mean --json\?\)/ },
    { args: ['frobnicate'], stderr: /unknown command 'frobnicate'; see: hookrelay --help$/ },
    { args: ['orgs', 'frob'], stderr: /unknown command 'frob'; see: hookrelay orgs --help$/ },
    { args: ['orgs', 'add'], stderr: /missing required argument 'id'; see: hookrelay orgs add --help$/ },
    { args: ['ingest'], stderr: /missing required argument 'file'/ },
    { args: ['users', 'add', '--org', 'acme', '--role', 'saas_admin'], stderr: /required option '--email <email>' not specified/ },
    { args: ['serve', '--log-level', 'loud'], stderr: /'loud' is invalid\. Allowed choices are fatal, .*silent; see: hookrelay serve --help$/ },
    { args: ['orgs', 'list', '--config'], stderr: /option '--config <file>' argument missing/ },
    // An option of serve given to the program: unknown there.
    { args: ['--listen', '127.0.0.1:0', 'serve'], stderr: /unknown option '--listen'/ },
    { args: ['feed', 'rejects', '--limit', 'lots'], stderr: /--limit must be an integer from 1 to 10000; got "lots"/ },
    { args: ['feed', 'rejects', '--after', '-3'], stderr: /--after must be a non-negative integer; got "-3"/ },
    { args: ['deliveries', 'list', '--org', 'acme', '--status', 'lost'], stderr: /--status must be one of queued, retrying, delivered, failed_for_good, pending, failed, dead; got "lost"/ },
    { args: ['deliveries', 'show', 'twelve', '--org', 'acme'], stderr: /the delivery id must be a positive integer; got "twelve"/ },
    { args: ['deliveries', 'recover', '--org', 'acme', '--since', 'yesterday'], stderr: /--since must be an RFC 3339 date-time/ },
    // An impossible date is refused, not rolled over to 2 March (as the API refuses it).
    { args: ['deliveries', 'recover', '--org', 'acme', '--since', '2026-02-30T00:00:00Z'], stderr: /--since must be an RFC 3339 date-time that exists.*; got "2026-02-30T00:00:00Z"/ },
    { args: ['deliveries', 'recover', '--org', 'acme', '--since', '2026-11-22T00:00:00Z', '--until', '2026-11-22T24:00:00Z'], stderr: /--until must be an RFC 3339 date-time that exists/ },
    { args: ['token', 'issue', '--org', 'acme', '--email', 'ada@acme.test', '--ttl', 'forever'], stderr: /--ttl must be a duration .*"forever"/ },
    { args: ['ingest', join(dir, 'missing.jsonl')], stderr: new RegExp(`cannot read ${join(dir, 'missing.jsonl')}: no such file; give a JSONL file, or - for standard input`) },
    { args: ['ingest', dir], stderr: /it is a directory/ },
  ];
  for (const { args, stderr } of cases) {
    const result = await runCli(t, args, { cwd: dir });
    assertOneLine(`hookrelay ${args.join(' ')}`, result, EXIT_USAGE, stderr);
    assert.equal(result.stdout, '');
  }
  assert.equal(existsSync(join(dir, 'var')), false, 'a rejected command line must not create the state directory');
});

test('messages that say what was wrong: a missing config file, a misspelt variable, a missing file to check, a replay of a queued event', async (t) => {
  const dir = scratchDir(t, 'hookrelay-cli-errors-');
  const state = join(dir, 'state');
  assertOneLine(
    'missing --config',
    await runCli(t, ['orgs', 'list', '--config', join(dir, 'nope.json')]),
    EXIT_USAGE,
    /^hookrelay: config file .*nope\.json does not exist; check the path given by --config or HOOKRELAY_CONFIG, or leave both out/,
  );
  // A slip of the keyboard is named, with the closest real name, on one short line (not the list of all names).
  const misspelt = await runCli(t, ['orgs', 'list', '--state-dir', state], { env: { HOOKRELAY_DELIVERY_CONCURENCY: '3' } });
  assertOneLine('misspelt variable', misspelt, EXIT_USAGE, /unknown environment variable HOOKRELAY_DELIVERY_CONCURENCY; did you mean HOOKRELAY_DELIVERY_CONCURRENCY\? docs\/configuration\.md lists/);
  assert.ok(misspelt.stderr.length < 250, `${misspelt.stderr.length} characters`);
  assertOneLine('far from any name', await runCli(t, ['orgs', 'list', '--state-dir', state], { env: { HOOKRELAY_WHATEVER_ELSE: '1' } }), EXIT_USAGE, /unknown environment variable HOOKRELAY_WHATEVER_ELSE; docs\/configuration\.md lists/);
  // A file named on the command line that is not there: check the path (no advice about --config).
  assertOneLine('db check of a missing file', await runCli(t, ['db', 'check', join(dir, 'missing.db'), '--state-dir', state]), EXIT_USAGE, /^hookrelay: there is no database file at .*missing\.db; check the path$/);

  // A replay of an event whose delivery is still pending says so, as the API does (not "id the event has ...").
  ok('migrate', await runCli(t, ['migrate', '--state-dir', state]));
  ok('orgs add', await runCli(t, ['orgs', 'add', 'acme', '--state-dir', state]));
  ok('webhook set', await runCli(t, ['webhook', 'set', '--org', 'acme', '--url', 'https://receiver.invalid/hook', '--state-dir', state]));
  writeFileSync(join(dir, 'feed.jsonl'), '{"event_id":"evt_1","organization_id":"acme","anticipation_request_id":"ar_1","status":"approved","previous_status":"submitted","occurred_at":"2026-11-23T10:00:00.000Z"}\n');
  ok('ingest', await runCli(t, ['ingest', join(dir, 'feed.jsonl'), '--state-dir', state]));
  assertOneLine('replay of a queued event', await runCli(t, ['deliveries', 'replay', '1', '--org', 'acme', '--state-dir', state]), EXIT_USAGE, /^hookrelay: delivery 1's event is already queued \(a delivery of it is pending\); replay it once that one is delivered or dead, or retry that one now if it is waiting for its next attempt$/);
});

test('one daemon per state directory: a second serve is refused naming the first one\'s pid (exit 2); a busy port is refused before any state is created (exit 1)', async (t) => {
  const dir = scratchDir(t, 'hookrelay-cli-errors-');
  const state = join(dir, 'state');
  const first = await spawnServe(t, state, []);
  assertOneLine(
    'second serve on the same state directory',
    await runCli(t, ['serve', '--state-dir', state, '--listen', '127.0.0.1:0']),
    EXIT_USAGE,
    new RegExp(`^hookrelay: another hookrelay daemon \\(pid ${first.child.pid}\\) is running on the state directory .*state; stop it first .*--state-dir\\)$`),
  );
  // The first one is untouched, and the CLI still works beside it.
  assert.equal((await fetch(`${first.baseUrl}/healthz`)).status, 200);
  ok('orgs list beside the daemon', await runCli(t, ['orgs', 'list', '--state-dir', state]));
  // The lock ends with its process, however it ends: after a SIGKILL a new daemon starts.
  first.child.kill('SIGKILL');
  await first.exited;
  const next = await spawnServe(t, state, []);
  assert.equal((await fetch(`${next.baseUrl}/healthz`)).status, 200);

  // Its port taken: refused at once, and the state directory it was given is never created.
  const port = Number(new URL(next.baseUrl).port);
  const other = join(dir, 'other-state');
  assertOneLine(
    'serve on a busy port',
    await runCli(t, ['serve', '--state-dir', other, '--listen', `127.0.0.1:${port}`]),
    EXIT_RUNTIME,
    new RegExp(`^hookrelay: the admin API address 127\\.0\\.0\\.1:${port} is already in use \\(another hookrelay daemon\\? \`hookrelay status --listen 127\\.0\\.0\\.1:${port}\` tells\\); stop that process, or choose another address with --listen or api\\.listen$`),
  );
  assert.equal(existsSync(other), false, 'a refused start created its state directory');
});

test('a state directory that cannot be created (/proc/nope, a file in the way) ends serve and migrate at once with one line; other commands find no install there', async (t) => {
  const dir = scratchDir(t, 'hookrelay-cli-errors-');
  writeFileSync(join(dir, 'file'), '');
  const noInstall = (stateDir: string) => new RegExp(`^hookrelay: no hookrelay install here: the state directory ${stateDir} does not exist\\. .*--state-dir DIR.*\`hookrelay migrate\` creates a new install$`);
  const cases: Array<{ args: string[]; stderr: RegExp }> = [
    { args: ['serve', '--listen', '127.0.0.1:0', '--state-dir', '/proc/nope'], stderr: /cannot create .* \/proc\/nope: \/proc does not allow creating directories in it \(ENOENT\); choose another state directory/ },
    { args: ['--state-dir', '/proc/nope', 'migrate'], stderr: /cannot create .* \/proc\/nope: \/proc does not allow creating directories in it \(ENOENT\); choose another state directory/ },
    // Only serve and migrate create a state directory: the others say there is no install.
    { args: ['--state-dir', '/proc/nope', 'orgs', 'list'], stderr: noInstall('/proc/nope') },
    { args: ['serve', '--listen', '127.0.0.1:0', '--state-dir', join(dir, 'file', 'var')], stderr: /a part of the path is a file, not a directory \(ENOTDIR\)/ },
    { args: ['migrate', '--state-dir', join(dir, 'file', 'var')], stderr: /a part of the path is a file, not a directory \(ENOTDIR\)/ },
    { args: ['ingest', '-', '--state-dir', join(dir, 'file', 'var')], stderr: noInstall(join(dir, 'file', 'var')) },
  ];
  for (const { args, stderr } of cases) {
    // Before the fix, /proc/nope spun in a synchronous loop and ignored SIGTERM: the time limit
    // of runCli() would SIGKILL it and the exit code would not match.
    const result = await runCli(t, args, { cwd: dir, input: '' });
    assertOneLine(`hookrelay ${args.join(' ')}`, result, EXIT_USAGE, stderr);
  }

  // SIGTERM right after the start is honoured, whatever the daemon was doing.
  const child = spawn(process.execPath, [CLI, 'serve', '--listen', '127.0.0.1:0', '--state-dir', '/proc/nope'], { env: cleanEnv(), stdio: 'ignore' });
  defer(t, () => {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
  });
  const exited = new Promise<Exit>((resolve) => child.once('exit', (code, signal) => resolve({ code, signal })));
  child.kill('SIGTERM');
  const timer = setTimeout(() => child.kill('SIGKILL'), WAIT_LIMIT_MS);
  const exit = await exited;
  clearTimeout(timer);
  assert.notEqual(exit.signal, 'SIGKILL', 'serve ignored SIGTERM');
});

test('an unwritable state directory: one line naming the path, the permission missing and what to do', async (t) => {
  const dir = scratchDir(t, 'hookrelay-cli-errors-');
  // As root, permissions do not stop this process: the CLI runs as nobody instead.
  const as = isRoot ? { uid: NOBODY } : {};
  chmodSync(dir, 0o755);
  const locked = join(dir, 'locked');
  mkdirSync(locked, { mode: 0o555 });
  chmodSync(locked, 0o555);
  // Writable again before the directory is removed (cleanups run last registered first).
  defer(t, () => {
    for (const sub of ['locked', 'read-only']) if (existsSync(join(dir, sub))) chmodSync(join(dir, sub), 0o755);
  });
  const user = isRoot ? 'nobody' : String(spawnSync('id', ['-un']).stdout).trim();

  const serve = await runCli(t, ['serve', '--listen', '127.0.0.1:0', '--state-dir', join(locked, 'var')], { ...as, cwd: dir });
  // serve takes the daemon lock in the state directory first, so that is what it tries to create.
  assertOneLine('serve in a locked directory', serve, EXIT_USAGE, new RegExp(`cannot create the state directory ${join(locked, 'var')}: permission denied \\(EACCES\\): user ${user} needs write permission on ${locked} \\(owner uid \\d+, mode 0555\\); choose another state directory .* or fix the permissions`));
  // migrate, which creates the database directory, says the same.
  const migrate = await runCli(t, ['migrate', '--state-dir', join(locked, 'var')], { ...as, cwd: dir });
  assertOneLine('migrate in a locked directory', migrate, EXIT_USAGE, new RegExp(`cannot create the database directory ${join(locked, 'var')}: permission denied \\(EACCES\\): user ${user} needs write permission on ${locked} \\(owner uid \\d+, mode 0555\\); choose another state directory .* or fix the permissions`));
  // The other commands create nothing: there is no install there.
  assertOneLine('orgs add in a locked directory', await runCli(t, ['orgs', 'add', 'acme', '--state-dir', join(locked, 'var')], { ...as, cwd: dir }), EXIT_USAGE, new RegExp(`^hookrelay: no hookrelay install here: the state directory ${join(locked, 'var')} does not exist\\.`));

  // A database file this user may not open (made by root, or made unreadable).
  const othersDb = join(dir, 'others');
  mkdirSync(othersDb, { mode: 0o777 });
  chmodSync(othersDb, 0o777);
  ok('migrate', await runCli(t, ['migrate', '--state-dir', othersDb]));
  if (!isRoot) chmodSync(join(othersDb, 'hookrelay.db'), 0o000);
  assertOneLine('orgs list on a database of another user', await runCli(t, ['orgs', 'list', '--state-dir', othersDb], { ...as, cwd: dir }), EXIT_USAGE, new RegExp(`cannot use the database ${join(othersDb, 'hookrelay.db')}: permission denied \\(EACCES\\): user ${user} needs read and write permission on it \\(owner uid \\d+, mode 0[0-7]{3}\\); choose another state directory`));

  // The service's own state directory (mode 0700, as systemd's StateDirectory=) run as another
  // user: the install exists but cannot be looked into, which is said as such, not as missing.
  const privateDir = join(dir, 'private');
  mkdirSync(privateDir, { mode: 0o777 });
  ok('migrate in the private directory', await runCli(t, ['migrate', '--state-dir', privateDir]));
  chmodSync(privateDir, 0o700);
  if (!isRoot) chmodSync(privateDir, 0o000);
  const hidden = await runCli(t, ['orgs', 'list', '--state-dir', privateDir], { ...as, cwd: dir });
  assert.doesNotMatch(hidden.stderr, /does not exist/, 'an install this user cannot look into is reported as missing');
  assertOneLine('orgs list in a state directory of mode 0700 of another user', hidden, EXIT_USAGE, new RegExp(`${privateDir}.*permission denied \\(EACCES\\).*user ${user}`));
  chmodSync(privateDir, 0o755);

  // The database is this user's, but its directory is not writable: SQLite cannot create its -wal file.
  const readOnly = join(dir, 'read-only');
  mkdirSync(readOnly, { mode: 0o755 });
  if (isRoot) spawnSync('chown', [String(NOBODY), readOnly]);
  ok('migrate as the directory owner', await runCli(t, ['migrate', '--state-dir', readOnly], as));
  if (isRoot) spawnSync('chown', ['0', readOnly]);
  chmodSync(readOnly, 0o555);
  const orgs = await runCli(t, ['orgs', 'list', '--state-dir', readOnly], { ...as, cwd: dir });
  assertOneLine('orgs list in a read-only state directory', orgs, EXIT_USAGE, new RegExp(`cannot open the database ${join(readOnly, 'hookrelay.db')}: user ${user} cannot create files in ${readOnly} \\(owner uid \\d+, mode 0555\\) \\(EACCES\\), and SQLite keeps its -wal and -shm files next to the database`));
});

test('ingest ends with its time and rate, in human and --json output', async (t) => {
  const dir = scratchDir(t, 'hookrelay-cli-errors-');
  const path = join(dir, 'feed.jsonl');
  writeFileSync(path, Array.from({ length: 50 }, (_, i) => jsonLine(fields(i, { event_id: `chg_${i}` }))).join('') + 'nope\n');

  await migrateCli(t, ['--state-dir', join(dir, 'var')]);
  const human = ok('ingest', await runCli(t, ['ingest', path, '--state-dir', join(dir, 'var')]));
  assert.match(human, /^50 accepted, 0 duplicate, 1 quarantined \(50 of the accepted are undeliverable: their organization has no webhook\)\n51 lines in \d+\.\d\d s, \d+ lines\/s\nsee: hookrelay feed rejects\n$/);

  const again = JSON.parse(ok('ingest --json', await runCli(t, ['ingest', path, '--json', '--state-dir', join(dir, 'var')]))) as Record<string, unknown>;
  assert.deepEqual(Object.keys(again).sort(), ['accepted', 'duplicates', 'lines', 'lines_per_second', 'quarantined', 'seconds', 'undeliverable']);
  assert.deepEqual({ ...again, seconds: 0, lines_per_second: 0 }, { accepted: 0, duplicates: 50, quarantined: 1, undeliverable: 0, lines: 51, seconds: 0, lines_per_second: 0 });
  assert.ok(typeof again.seconds === 'number' && again.seconds > 0, `seconds: ${String(again.seconds)}`);
  assert.ok(typeof again.lines_per_second === 'number' && Number.isInteger(again.lines_per_second) && again.lines_per_second > 0);
});

/** Runs the CLI on a pseudo-terminal (util-linux `script`): what the terminal shows, stdout and stderr together. */
function onTerminal(args: readonly string[], cwd: string): { status: number | null; output: string } {
  const command = [process.execPath, CLI, ...args].map((a) => `'${a.replaceAll("'", "'\\''")}'`).join(' ');
  const result = spawnSync('script', ['-qec', command, '/dev/null'], { cwd, env: { ...cleanEnv(), TERM: 'xterm' }, encoding: 'utf8', timeout: WAIT_LIMIT_MS });
  return { status: result.status, output: result.stdout };
}

test('Ctrl-C during ingest: what was read is stored and summed up, the rest is said to be unread, exit 130', async (t) => {
  const dir = scratchDir(t, 'hookrelay-cli-errors-');
  const state = join(dir, 'state');
  ok('migrate', await runCli(t, ['migrate', '--state-dir', state]));
  const child = spawn(process.execPath, [CLI, 'ingest', '-', '--state-dir', state], { env: cleanEnv(), stdio: ['pipe', 'pipe', 'pipe'] });
  defer(t, () => {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
  });
  let stdout = '';
  let stderr = '';
  child.stdout!.setEncoding('utf8').on('data', (chunk: string) => (stdout += chunk));
  child.stderr!.setEncoding('utf8').on('data', (chunk: string) => (stderr += chunk));
  const exited = new Promise<Exit>((resolve) => child.once('close', (code, signal) => resolve({ code, signal })));
  // Twenty lines, then the producer goes quiet without closing its end: only the signal ends it.
  child.stdin!.write(Array.from({ length: 20 }, (_, i) => jsonLine(fields(i))).join(''));
  const stored = async (): Promise<number> => {
    const status = await runCli(t, ['feed', 'status', '--json', '--state-dir', state]);
    return (JSON.parse(status.stdout || '{"sources":[]}') as { sources: Array<{ accepted: number }> }).sources[0]?.accepted ?? 0;
  };
  const deadline = performance.now() + WAIT_LIMIT_MS;
  while ((await stored()) < 20) assert.ok(performance.now() < deadline, 'the twenty lines were not stored in time');
  child.kill('SIGINT');
  const timer = setTimeout(() => child.kill('SIGKILL'), WAIT_LIMIT_MS);
  const exit = await exited;
  clearTimeout(timer);
  assert.equal(exit.code, 130, `exit ${exit.code} (${exit.signal}); stderr: ${stderr}`);
  assert.match(stdout, /^20 accepted, 0 duplicate, 0 quarantined/m);
  assert.match(stderr, /^hookrelay: ingest interrupted \(SIGINT\) after 20 line\(s\), all of them stored as counted above; what was not sent yet was not read\n$/);
});

test('output into a pipe closed early (| head -1) ends quietly: no EPIPE stack trace, exit 0', async (t) => {
  const dir = scratchDir(t, 'hookrelay-cli-errors-');
  const state = join(dir, 'state');
  ok('migrate', await runCli(t, ['migrate', '--state-dir', state]));
  for (let i = 0; i < 3; i++) ok('orgs add', await runCli(t, ['orgs', 'add', `org-${i}`, '--state-dir', state]));
  // The reader is gone before the command writes (closed as soon as the process is spawned,
  // long before Node.js has started): its first write meets a closed pipe, EPIPE.
  const child = spawn(process.execPath, [CLI, 'orgs', 'list', '--state-dir', state], { env: cleanEnv(), stdio: ['ignore', 'pipe', 'pipe'] });
  child.stdout!.destroy();
  let stderr = '';
  child.stderr!.setEncoding('utf8').on('data', (chunk: string) => (stderr += chunk));
  const code = await new Promise<number | null>((resolve) => child.once('close', (c) => resolve(c)));
  assert.equal(stderr, '', 'nothing on stderr');
  assert.equal(code, 0);
});

test('long operations show progress on a terminal, rewritten in place and cleared, and nothing without one', async (t) => {
  const dir = scratchDir(t, 'hookrelay-cli-errors-');
  const state = join(dir, 'var');
  const path = join(dir, 'feed.jsonl');
  writeFileSync(path, Array.from({ length: 3000 }, (_, i) => jsonLine(fields(i, { organization_id: 'acme', event_id: `chg_${i}` }))).join(''));
  await migrateCli(t, ['--state-dir', state]);
  ok('orgs add', await runCli(t, ['orgs', 'add', 'acme', '--state-dir', state]));
  ok('webhook set', await runCli(t, ['webhook', 'set', '--org', 'acme', '--url', 'https://hooks.example.com/acme', '--state-dir', state]));

  const ingest = onTerminal(['ingest', path, '--state-dir', state], dir);
  assert.equal(ingest.status, 0, ingest.output);
  // The progress line (lines, and the percentage of the file's size), then erased before the summary.
  assert.match(ingest.output, /\ringest: 3000 lines(, \d+ lines\/s)?, 100 %\x1b\[K/);
  assert.match(ingest.output, /\r\x1b\[K3000 accepted, 0 duplicate, 0 quarantined\r?\n3000 lines in /);

  const recover = onTerminal(['deliveries', 'recover', '--org', 'acme', '--since', '2000-01-01T00:00:00Z', '--state-dir', state], dir);
  assert.equal(recover.status, 0, recover.output);
  assert.match(recover.output, /\rrecover: \d+ events(, \d+ events\/s)?, \d+ %\x1b\[K/);
  assert.match(recover.output, /\r\x1b\[K0 event\(s\) queued again, 0 failed delivery\(ies\) made due now/);

  // Not a terminal (a pipe, as under systemd or in a script): stderr stays empty.
  const piped = await runCli(t, ['ingest', path, '--state-dir', state]);
  assert.equal(ok('ingest, piped', piped).split('\n')[0], '0 accepted, 3000 duplicate, 0 quarantined');
  assert.equal(piped.stderr, '');
  const recoverPiped = await runCli(t, ['deliveries', 'recover', '--org', 'acme', '--since', '2000-01-01T00:00:00Z', '--state-dir', state]);
  assert.equal(ok('recover, piped', recoverPiped), '0 event(s) queued again, 0 failed delivery(ies) made due now\n');
  assert.equal(recoverPiped.stderr, '');
});

test('runtime errors keep exit code 1 and one line', async (t) => {
  const dir = scratchDir(t, 'hookrelay-cli-errors-');
  await migrateCli(t, ['--state-dir', join(dir, 'var')]);
  const result = await runCli(t, ['webhook', 'get', '--org', 'acme', '--state-dir', join(dir, 'var')]);
  assertOneLine('webhook get without a webhook', result, EXIT_RUNTIME, /"acme" has no webhook/);
});

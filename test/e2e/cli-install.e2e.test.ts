/**
 * The CLI works on an existing install only: run where there is none (the wrong working
 * directory, a mistyped --state-dir), each command that opens the database refuses in one line
 * that names the state directory (or the database) it looked at and says how to point at the
 * daemon's, and creates nothing. Only `serve` and `migrate` create an install; once `migrate`
 * has, the same commands work, from its directory or from any other given --state-dir,
 * HOOKRELAY_STATE_DIR or --config. On PostgreSQL (database.url) there is nothing to find.
 * The built CLI, spawned as a user runs it (`npm test` builds it first).
 */
import assert from 'node:assert/strict';
import { mkdirSync, readdirSync, realpathSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, test, type TestContext } from 'node:test';
import { assertBuilt, CLI, fields, jsonLine, runCli, scratchDir, spawnWatched, type CliResult } from '../helpers/feed-helpers.ts';
import { pgServer, stopPgServer } from '../helpers/pg-harness.ts';

before(assertBuilt);
after(stopPgServer);

const EXIT_USAGE = 2;

/** The feed file `ingest` reads, in the working directory: one valid line for organization x. */
const FEED = 'feed.jsonl';

/** Every command kind that opens the database, as a user types it in the daemon's directory. */
const COMMANDS: readonly (readonly string[])[] = [
  ['orgs', 'list'],
  ['status'],
  ['token', 'issue', '--org', 'x', '--email', 'ada@x.test'],
  ['ingest', FEED],
  ['webhook', 'get', '--org', 'x'],
  ['deliveries', 'list', '--org', 'x'],
  ['listen', '--org', 'x', '--port', '0'],
  ['db', 'prune'],
];

const escape = (text: string) => text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');

/** A fresh working directory (its real path: what the CLI resolves ./var against) holding the feed file. */
function workDir(t: TestContext): string {
  const dir = realpathSync(scratchDir(t, 'hookrelay-install-'));
  writeFileSync(join(dir, FEED), jsonLine(fields(1, { organization_id: 'x', event_id: 'evt_install_1' })));
  return dir;
}

/** Every file and directory under `dir`, relative to it, sorted. */
function listing(dir: string): string[] {
  return (readdirSync(dir, { recursive: true }) as string[]).sort();
}

/** Exit 2, nothing on stdout, and one line on stderr: no install at `where` ("the state directory /abs"), and what to do. */
function assertNoInstall(what: string, result: CliResult, where: string): void {
  assert.equal(result.code, EXIT_USAGE, `${what}: exit ${result.code} (${result.signal}); stdout: ${result.stdout}; stderr: ${result.stderr}`);
  assert.equal(result.stdout, '', `${what} printed on stdout`);
  const lines = result.stderr.split('\n');
  assert.equal(lines.length, 2, `${what}: expected one line on stderr, got ${JSON.stringify(result.stderr)}`);
  assert.equal(lines[1], '');
  const line = lines[0]!;
  assert.match(line, new RegExp(`^hookrelay: no hookrelay install here: ${escape(where)} does not exist\\. `), what);
  assert.match(line, /--state-dir DIR/, `${what}: the line does not say how to point at the daemon's state`);
  assert.match(line, /`hookrelay migrate`/, `${what}: the line does not say what creates an install`);
}

test('where there is no install, every command that opens the database refuses in one line naming the absolute state directory, and creates nothing', async (t) => {
  const dir = workDir(t);
  const before = listing(dir);
  for (const args of COMMANDS) {
    const what = `hookrelay ${args.join(' ')}`;
    assertNoInstall(what, await runCli(t, args, { cwd: dir }), `the state directory ${join(dir, 'var')}`);
    assert.deepEqual(listing(dir), before, `${what} created something (no ./var, database or jwt-secret may appear)`);
  }
  // A state directory named on the command line or in the environment that is not there: the same, naming it.
  const elsewhere = join(dir, 'typo', 'state');
  assertNoInstall('orgs list --state-dir', await runCli(t, ['orgs', 'list', '--state-dir', elsewhere], { cwd: dir }), `the state directory ${elsewhere}`);
  assertNoInstall('HOOKRELAY_STATE_DIR', await runCli(t, ['orgs', 'list'], { cwd: dir, env: { HOOKRELAY_STATE_DIR: elsewhere } }), `the state directory ${elsewhere}`);
  assert.deepEqual(listing(dir), before);
});

test('a state directory without its database: the line names the database, and the directory stays empty', async (t) => {
  const dir = workDir(t);
  const stateDir = join(dir, 'var');
  mkdirSync(stateDir);
  for (const args of COMMANDS) {
    const what = `hookrelay ${args.join(' ')}`;
    assertNoInstall(what, await runCli(t, args, { cwd: dir }), `the database ${join(stateDir, 'hookrelay.db')}`);
    assert.deepEqual(listing(stateDir), [], `${what} created something in the state directory`);
  }
});

/**
 * Runs `listen` until it listens, sends it an unsigned request (refused: organization x's
 * webhook signs, and its secret is read from the install), then Ctrl-C: it must end cleanly.
 */
async function listenWorks(t: TestContext, args: readonly string[], cwd: string): Promise<void> {
  const listener = spawnWatched(t, process.execPath, [CLI, ...args], { cwd });
  const what = `hookrelay ${args.join(' ')}`;
  const listening = /^listening on (http:\/\/127\.0\.0\.1:\d+\/webhook) for organization x/.exec(await listener.line(/^listening on http:\/\/127\.0\.0\.1:\d+\/webhook for organization x/))!;
  // Answered once its start-up is over (its Ctrl-C handler in place).
  const res = await fetch(listening[1]!, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{}' });
  assert.equal(res.status, 401, `${what}: an unsigned request must be refused; stdout: ${listener.stdout()}`);
  await res.arrayBuffer();
  listener.child.kill('SIGINT');
  assert.equal(await listener.closed, 0, `${what}: Ctrl-C must end it cleanly; stderr: ${listener.stderr()}`);
}

test('migrate creates the install; then the same commands work, there and from another directory given --state-dir, HOOKRELAY_STATE_DIR or --config', async (t) => {
  const dir = workDir(t);
  const stateDir = join(dir, 'var');
  const database = join(stateDir, 'hookrelay.db');
  const run = async (args: readonly string[], options: { cwd?: string; env?: Record<string, string> } = { cwd: dir }) => {
    const result = await runCli(t, args, options);
    assert.equal(result.code, 0, `hookrelay ${args.join(' ')}: exit ${result.code} (${result.signal}); stderr: ${result.stderr}`);
    return result.stdout;
  };

  assert.match(await run(['migrate']), new RegExp(`^migrated ${escape(database)} from 0 to \\d+\\n$`));
  assert.ok(listing(dir).includes(join('var', 'hookrelay.db')), `no database after migrate: ${listing(dir).join(', ')}`);
  // The JWT secret too, as the daemon's first start would: `token issue` works before that start.
  assert.ok(listing(dir).includes(join('var', 'jwt-secret')), `no JWT secret after migrate: ${listing(dir).join(', ')}`);
  await run(['orgs', 'add', 'x']);
  await run(['users', 'add', '--org', 'x', '--email', 'ada@x.test', '--role', 'saas_admin']);
  await run(['webhook', 'set', '--org', 'x', '--url', 'https://hooks.example.com/x']);

  for (const args of COMMANDS) {
    if (args[0] === 'listen') await listenWorks(t, args, dir);
    else await run(args);
  }
  // What they did is in the install: the ingested line, its delivery.
  assert.match(await run(['deliveries', 'list', '--org', 'x']), /evt_install_1/);

  // From another working directory, pointed at the install: the same data, and nothing created there.
  const other = realpathSync(scratchDir(t, 'hookrelay-install-other-'));
  writeFileSync(join(other, 'hookrelay.json'), JSON.stringify({ stateDir }));
  const ways: Array<{ what: string; args: string[]; env?: Record<string, string> }> = [
    { what: '--state-dir', args: ['orgs', 'list', '--json', '--state-dir', stateDir] },
    { what: 'HOOKRELAY_STATE_DIR', args: ['orgs', 'list', '--json'], env: { HOOKRELAY_STATE_DIR: stateDir } },
    { what: '--config', args: ['orgs', 'list', '--json', '--config', join(other, 'hookrelay.json')] },
  ];
  for (const { what, args, env } of ways) {
    const orgs = JSON.parse(await run(args, { cwd: other, ...(env ? { env } : {}) })) as Array<{ id: string }>;
    assert.deepEqual(orgs.map((o) => o.id), ['x'], what);
  }
  await run(['token', 'issue', '--org', 'x', '--email', 'ada@x.test', '--state-dir', stateDir], { cwd: other });
  await listenWorks(t, ['listen', '--org', 'x', '--port', '0', '--state-dir', stateDir], other);
  assert.deepEqual(listing(other), ['hookrelay.json'], 'a command pointed at the install created something in its working directory');
});

test('on PostgreSQL (database.url) there is no local install to require: the commands work from any directory', { timeout: 120_000 }, async (t) => {
  const url = await (await pgServer()).createDatabase();
  const dir = workDir(t);
  const env = { HOOKRELAY_DATABASE_URL: url };
  for (const args of [['orgs', 'add', 'x'], ['orgs', 'list', '--json'], ['deliveries', 'list', '--org', 'x'], ['status']]) {
    const result = await runCli(t, args, { cwd: dir, env });
    assert.equal(result.code, 0, `hookrelay ${args.join(' ')} on PostgreSQL: exit ${result.code}; stderr: ${result.stderr}`);
  }
  const orgs = JSON.parse((await runCli(t, ['orgs', 'list', '--json'], { cwd: dir, env })).stdout) as Array<{ id: string }>;
  assert.deepEqual(orgs.map((o) => o.id), ['x']);
  // The JWT secret generated in a state directory is the daemon's: a token signed with a second
  // one, made here, would be refused. `token issue` says where it looked instead.
  await runCli(t, ['users', 'add', '--org', 'x', '--email', 'ada@x.test', '--role', 'saas_admin'], { cwd: dir, env });
  const token = await runCli(t, ['token', 'issue', '--org', 'x', '--email', 'ada@x.test'], { cwd: dir, env });
  assert.equal(token.code, 1, `token issue without the daemon's JWT secret: exit ${token.code}; stderr: ${token.stderr}`);
  assert.equal(token.stdout, '');
  assert.equal(token.stderr, `hookrelay: there is no JWT secret at ${join(dir, 'var', 'jwt-secret')}: the daemon generates it at its first start (or \`hookrelay migrate\`); point at the daemon's install with --state-dir or --config, or set auth.secret or auth.secretFile\n`);
  assert.deepEqual(listing(dir), [FEED], 'nothing is created in the working directory');
});

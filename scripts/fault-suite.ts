/**
 * Fault injection: proves that nothing is lost. The built daemon (`npm start`'s way) relays a
 * feed that a writer keeps appending to, to an HTTPS receiver in its own process that verifies
 * every signature and records every `webhook-id` it answers 200; meanwhile the daemon is
 * killed, stopped and starved, and the receiver misbehaves. At the end the ids written are
 * compared with the ids received: zero missing in every scenario, duplicates reported and
 * checked against the attempts that can be in flight at each kill.
 *
 *   node --import tsx scripts/fault-suite.ts [--quick] [--skip-disk-full] [--kills N] [--rate LINES_PER_S] [--stop-seconds S] [--log-level L] [--json FILE]
 *
 * Scenarios, in order, the writer appending all along:
 *   kill      `kill -9` at a random moment, N times (100 by default; 5 with --quick), during ingest and delivery
 *   500       the receiver answers 500 for a while
 *   hang      the receiver never answers (the attempt deadline ends each attempt)
 *   cut       the receiver closes connections without answering
 *   429       the receiver answers 429 with Retry-After: 1
 *   rotate    the feed renamed away (rotation by rename); the writer goes on in a new file
 *   truncate  the feed truncated in place once hookrelay has read all of it (see docs/feed.md on copytruncate)
 *   bad lines a malformed and an oversized line in the middle (quarantined, not lost)
 *   SIGTERM   during heavy delivery (a burst), then a restart
 *   SIGSTOP   the daemon frozen for 60 s (3 s with --quick), then SIGCONT
 *   disk full the state directory (a tmpfs of its own, so as root only; --skip-disk-full leaves it
 *             out) filled up under the running daemon, which is then restarted on the full
 *             disk (it must wait for space, not exit), then freed again.
 *
 * The last full run and its command are in docs/benchmarks.md ("Fault injection"). A quick run
 * is part of `npm test` (test/e2e/fault-suite.e2e.test.ts).
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { appendFileSync, closeSync, existsSync, mkdirSync, mkdtempSync, openSync, readFileSync, renameSync, rmSync, statfsSync, statSync, truncateSync, unlinkSync, writeFileSync, writeSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { parseArgs, promisify } from 'node:util';
import Database from 'better-sqlite3';
import type { ReceiverMode } from './bench-delivery-receiver.ts';
import { cleanEnv, createTls, startReceiverProcess, startScriptNodeFlags } from './receiver-control.ts';

const execFileAsync = promisify(execFile);
const CLI = fileURLToPath(new URL('../dist/cli.js', import.meta.url));

const { values } = parseArgs({
  options: {
    quick: { type: 'boolean', default: false },
    kills: { type: 'string' },
    rate: { type: 'string' },
    'stop-seconds': { type: 'string' },
    json: { type: 'string' },
    'skip-disk-full': { type: 'boolean', default: false },
    'log-level': { type: 'string', default: 'warn' },
  },
});
const quick = values.quick === true;
const options = {
  kills: Number(values.kills ?? (quick ? 5 : 100)),
  rate: Number(values.rate ?? (quick ? 300 : 1000)),
  stopSeconds: Number(values['stop-seconds'] ?? (quick ? 3 : 60)),
  faultSeconds: quick ? 2 : 5,
  burst: quick ? 2_000 : 20_000,
  json: values.json === undefined ? null : resolve(values.json),
};
const ORGS = 4;
const CAPACITY = 5_000_000;
/** What the daemon may have in flight at once: at most that many re-sends per kill. */
const CONCURRENCY = 16;
const orgId = (i: number) => `org-${i}`;

if (!existsSync(CLI)) throw new Error(`${CLI} is missing; run npm run build first`);
const dir = mkdtempSync(join(tmpdir(), 'hookrelay-fault-'));
const stateDir = join(dir, 'state');
mkdirSync(stateDir);
// As root, the state directory is a tmpfs of its own, so that the disk-full scenario fills only it.
const diskFull = values['skip-disk-full'] !== true && process.getuid?.() === 0;
const TMPFS_MIB = quick ? 256 : 2048;
if (diskFull) await execFileAsync('mount', ['-t', 'tmpfs', '-o', `size=${TMPFS_MIB}m`, 'tmpfs', stateDir]);
const feedPath = join(dir, 'feed.jsonl');
const configPath = join(dir, 'hookrelay.json');
const tls = createTls(join(dir, 'tls'));
const receiver = startReceiverProcess();
const log: string[] = [];
const say = (line: string) => {
  console.log(line);
  log.push(line);
};

/** One daemon process at a time; `stderr` keeps what it printed there (it must all be JSON). */
let daemon: { child: ChildProcess; exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }> } | null = null;
const stderrLines: string[] = [];

function startDaemon(): void {
  // Its log (JSON lines on standard output) goes to a file, kept with the temp dir when the run fails.
  const out = openSync(join(dir, 'daemon.log'), 'a');
  const child = spawn(process.execPath, [...startScriptNodeFlags(), CLI, 'serve', '--config', configPath, '--state-dir', stateDir, '--listen', '127.0.0.1:0'], {
    env: cleanEnv(),
    stdio: ['ignore', out, 'pipe'],
  });
  closeSync(out);
  let rest = '';
  child.stderr!.setEncoding('utf8').on('data', (chunk: string) => {
    const lines = (rest + chunk).split('\n');
    rest = lines.pop()!;
    stderrLines.push(...lines.filter((l) => l !== ''));
  });
  daemon = { child, exited: new Promise((r) => child.once('exit', (code, signal) => r({ code, signal }))) };
}

async function signalDaemon(signal: NodeJS.Signals): Promise<{ code: number | null; signal: NodeJS.Signals | null }> {
  const d = daemon!;
  daemon = null;
  d.child.kill(signal);
  return d.exited;
}

const cli = (...args: string[]) => execFileAsync(process.execPath, [CLI, ...args, '--config', configPath, '--state-dir', stateDir], { env: cleanEnv() });

/** The writer: `rate` lines a second, in ticks of 50 ms, each line an `evt-fault-N` of one of the organizations. */
let written = 0;
let writing = true;
function lines(count: number): string {
  let text = '';
  for (let k = 0; k < count; k++, written++) {
    const n = written;
    text +=
      `{"event_id":"evt-fault-${n}","organization_id":"${orgId(n % ORGS)}","anticipation_request_id":"ar-${Math.floor(n / ORGS) % 500}",` +
      `"status":"approved","previous_status":"submitted","occurred_at":"2026-11-24T10:00:00.000Z","data":{"appended_at":${Date.now()}}}\n`;
  }
  return text;
}
const writer = setInterval(() => {
  if (writing) appendFileSync(feedPath, lines(Math.max(1, Math.round(options.rate / 20))));
}, 50);

/** The committed feed position of the current file and its size: equal once the daemon has read it all. */
function committed(): { position: number; size: number } {
  const db = new Database(join(stateDir, 'hookrelay.db'), { readonly: true });
  try {
    const row = db.prepare('SELECT position FROM feed_positions WHERE source = ?').get(feedPath) as { position: number } | undefined;
    return { position: row?.position ?? -1, size: existsSync(feedPath) ? statSync(feedPath).size : 0 };
  } finally {
    db.close();
  }
}

async function until(what: string, probe: () => boolean | Promise<boolean>, limitMs: number): Promise<void> {
  const deadline = Date.now() + limitMs;
  while (!(await probe())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(100);
  }
}

const behave = async (mode: ReceiverMode) => receiver.call({ type: 'behave', mode });
const scenarios: Array<{ name: string; detail: string }> = [];
const done = (name: string, detail: string) => {
  scenarios.push({ name, detail });
  say(`  ${name}: ${detail}`);
};

let failed: string | null = null;
try {
  const { port } = await receiver.call({ type: 'start', keyPem: tls.keyPem, certPem: tls.certPem });
  await receiver.call({ type: 'expect', phase: 'fault', count: CAPACITY });
  writeFileSync(
    configPath,
    JSON.stringify({
      delivery: {
        caFile: tls.caFile,
        allowNetworks: ['127.0.0.1/32'],
        concurrency: CONCURRENCY,
        perWebhookConcurrency: 4,
        timeout: '2s',
        // Enough retries that nothing dies during the run, however long the receiver misbehaves.
        retrySchedule: ['1s', ...Array<string>(40).fill('2s')],
        jitterPercent: 0,
        maxRetryAfter: '2s',
        pollInterval: '100ms',
      },
      feed: { path: feedPath, pollInterval: 50 },
      log: { level: values['log-level'] },
    }),
  );
  await cli('migrate'); // the CLI works only on an existing install
  const secrets: Record<string, string> = {};
  for (let i = 0; i < ORGS; i++) {
    await cli('orgs', 'add', orgId(i));
    await cli('webhook', 'set', '--org', orgId(i), '--url', `https://127.0.0.1:${port}/hook/${orgId(i)}`);
    secrets[orgId(i)] = (await cli('webhook', 'secret', '--org', orgId(i))).stdout.trim();
  }
  await receiver.call({ type: 'secrets', secrets });
  say(`fault suite: ${quick ? 'quick' : 'full'} run, ${options.kills} kills, writer at ${options.rate} lines/s, ${ORGS} organizations, temp dir ${dir}`);

  startDaemon();
  for (let i = 0; i < options.kills; i++) {
    await sleep(150 + Math.random() * (quick ? 800 : 1500));
    await signalDaemon('SIGKILL');
    startDaemon();
  }
  done('kill', `${options.kills} kill -9 at random moments (150-${quick ? 950 : 1650} ms apart)`);

  for (const mode of ['error500', 'hang', 'cut', 'throttle'] as const) {
    await behave(mode);
    await sleep(options.faultSeconds * 1000);
    await behave('ok');
    done(mode, `the receiver ${mode === 'error500' ? 'answered 500' : mode === 'hang' ? 'never answered' : mode === 'cut' ? 'closed connections without answering' : 'answered 429, Retry-After: 1'} for ${options.faultSeconds} s`);
  }

  renameSync(feedPath, `${feedPath}.1`);
  await sleep(1000);
  done('rotate', 'the feed renamed away; the writer went on in a new file');

  writing = false;
  await until('the daemon to read the whole feed before truncating it', () => {
    const c = committed();
    return c.position === c.size;
  }, 60_000);
  truncateSync(feedPath, 0);
  writing = true;
  await sleep(1000);
  done('truncate', 'the feed truncated in place once read to its end; the writer went on');

  appendFileSync(feedPath, '{"event_id": "evt-broken", this is not JSON\n');
  appendFileSync(feedPath, `{"data":"${'x'.repeat(1_100_000)}"}\n`);
  done('bad lines', 'a malformed line and a 1.1 MB line (over feed.maxLineBytes) in the middle of the feed');

  appendFileSync(feedPath, lines(options.burst));
  await sleep(1500);
  const term = await signalDaemon('SIGTERM');
  if (term.code !== 0) throw new Error(`SIGTERM: the daemon exited with ${term.code ?? term.signal}, not 0`);
  const stoppedAt = committed().position;
  startDaemon();
  // The next faults are for a running daemon (one still loading its modules has no SIGTERM handler
  // yet): it has started once it commits feed lines the writer went on writing.
  await until('the restarted daemon to read the feed', () => committed().position > stoppedAt, 60_000);
  done('SIGTERM', `${options.burst} lines at once, SIGTERM 1.5 s later (exit 0), restarted`);

  daemon!.child.kill('SIGSTOP');
  await sleep(options.stopSeconds * 1000);
  daemon!.child.kill('SIGCONT');
  done('SIGSTOP', `the daemon frozen for ${options.stopSeconds} s, then SIGCONT`);

  if (diskFull) {
    // Running again first: the state directory fills up under a daemon that ingests and delivers.
    await sleep(1000);
    const filler = join(stateDir, 'filler');
    const chunk = Buffer.alloc(4 << 20, 0x66);
    const fd = openSync(filler, 'w');
    try {
      for (const size of [4 << 20, 4096, 1]) {
        for (;;) {
          try {
            writeSync(fd, chunk, 0, size);
          } catch (err) {
            if ((err as NodeJS.ErrnoException).code !== 'ENOSPC') throw err;
            break;
          }
        }
      }
    } finally {
      closeSync(fd);
    }
    const left = statfsSync(stateDir);
    await sleep(options.faultSeconds * 1000);
    // Then restarted while the disk is still full: it must wait for space, not exit.
    const stopped = await signalDaemon('SIGTERM');
    if (stopped.code !== 0) throw new Error(`SIGTERM on a full disk: the daemon exited with ${stopped.code ?? stopped.signal}, not 0`);
    startDaemon();
    await sleep(options.faultSeconds * 1000);
    const restarted = daemon as { child: ChildProcess } | null;
    if (restarted === null || restarted.child.exitCode !== null) throw new Error('the daemon started on a full disk exited');
    unlinkSync(filler);
    // Where SQLite must grow its -shm file to open the database, the daemon waits to open it; else it opens it and waits to write.
    const how = readFileSync(join(dir, 'daemon.log'), 'utf8').includes('cannot open the database: the disk holding it is full') ? 'waited for space to open its database' : 'opened its database and waited for space to write';
    done('disk full', `the state directory (a ${TMPFS_MIB} MiB tmpfs) full (${left.bavail * left.bsize} bytes left) for ${options.faultSeconds} s under a running daemon, then a restart on the full disk (${options.faultSeconds} s more: it ${how}), then freed`);
  } else {
    say('  disk full: skipped (it mounts a tmpfs for the state directory: run as root)');
  }

  writing = false;
  clearInterval(writer);
  // In-flight attempts of the last kill wait for their lease (timeout + 10 s) before being sent again.
  const drainStarted = Date.now();
  await until('every written event to arrive', async () => (await receiver.phase('fault')).unique >= written, 180_000).catch(() => {});
  const drainSeconds = (Date.now() - drainStarted) / 1000;
  await signalDaemon('SIGTERM');

  const arrivals = await receiver.phase('fault');
  const stats = await receiver.stats([]);
  const db = new Database(join(stateDir, 'hookrelay.db'), { readonly: true });
  const quarantined = (db.prepare('SELECT count(*) AS n FROM feed_rejects').get() as { n: number }).n;
  db.close();
  const missing = written - arrivals.unique;
  const duplicateBound = options.kills * CONCURRENCY;
  const notJson = stderrLines.filter((l) => {
    try {
      JSON.parse(l);
      return false;
    } catch {
      return true;
    }
  });
  const report = {
    date: new Date().toISOString(),
    command: `node --import tsx scripts/fault-suite.ts${quick ? ' --quick' : ''}${diskFull ? '' : ' --skip-disk-full'} --kills ${options.kills} --rate ${options.rate} --stop-seconds ${options.stopSeconds}`,
    scenarios,
    written,
    arrived: arrivals.unique,
    missing,
    duplicates: arrivals.duplicates,
    duplicateBound,
    quarantined,
    requests: stats.requests,
    misbehaved: stats.misbehaved,
    signatureFailures: stats.signatureFailures,
    unexpected: stats.unexpected,
    stderrLines: stderrLines.length,
    stderrNotJson: notJson.length,
    drainSeconds,
  };
  say(`written ${written}, arrived ${arrivals.unique}, missing ${missing}, duplicates ${arrivals.duplicates} (bound ${duplicateBound}: ${options.kills} kills x ${CONCURRENCY} in flight), quarantined ${quarantined}, drained in ${drainSeconds.toFixed(1)} s`);
  say(`receiver: ${stats.requests} requests, ${stats.misbehaved} answered otherwise on purpose, ${stats.signatureFailures} signature failures, ${stats.unexpected} unexpected; daemon stderr: ${stderrLines.length} lines, ${notJson.length} not JSON`);
  const problems = [
    missing !== 0 ? `${missing} events missing` : null,
    arrivals.duplicates > duplicateBound ? `${arrivals.duplicates} duplicates, over the bound of ${duplicateBound}` : null,
    quarantined !== 2 ? `${quarantined} lines quarantined, expected 2 (the malformed and the oversized one)` : null,
    stats.signatureFailures !== 0 ? `${stats.signatureFailures} signature failures` : null,
    stats.unexpected !== 0 ? `${stats.unexpected} unexpected requests` : null,
    notJson.length !== 0 ? `${notJson.length} stderr lines that are not JSON, such as ${JSON.stringify(notJson[0]!.slice(0, 200))}` : null,
  ].filter((p): p is string => p !== null);
  if (options.json !== null) {
    mkdirSync(dirname(options.json), { recursive: true });
    writeFileSync(options.json, JSON.stringify({ ...report, problems }, null, 1) + '\n');
  }
  if (problems.length > 0) failed = problems.join('; ');
} catch (err) {
  failed = err instanceof Error ? err.message : String(err);
} finally {
  clearInterval(writer);
  if (daemon !== null) await signalDaemon('SIGKILL');
  await receiver.stop();
  // The database is kept for a look when the run failed: copied out of the tmpfs first.
  if (failed !== null && diskFull) await execFileAsync('cp', ['-a', stateDir, `${stateDir}-kept`]).catch(() => {});
  if (diskFull) await execFileAsync('umount', [stateDir]).catch(() => {});
  if (failed === null) rmSync(dir, { recursive: true, force: true });
}
if (failed !== null) {
  console.log(`FAILED: ${failed} (temp dir ${dir} kept)`);
  process.exitCode = 1;
} else say('passed: nothing lost');

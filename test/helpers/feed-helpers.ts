/**
 * Fixtures for the feed tests: feed lines, an in-process relay that can be stopped and started
 * again on the same state directory, a second database connection for assertions, bounded
 * polling of the database, and the built CLI run or spawned as a user would (an install created
 * with `migrate` first, as the CLI's other commands require).
 */
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { createServer, type AddressInfo } from 'node:net';
import { join } from 'node:path';
import type { Readable } from 'node:stream';
import type { TestContext } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { cleanEnv } from '../../scripts/receiver-control.ts';
import { loadConfig, type Config } from '../../src/config/load.ts';
import { systemClock } from '../../src/domain/clock.ts';
import { storedBody } from '../../src/domain/feed-event.ts';
import { createLogger } from '../../src/log.ts';
import { createRelay, type Relay } from '../../src/relay.ts';
import { openSqliteStore, type SqliteStore } from '../../src/store/sqlite/store.ts';
import { repos } from './sqlite-repos.ts';

export const CLI = fileURLToPath(new URL('../../dist/cli.js', import.meta.url));
/** Upper bound of any wait; only reached when something is broken (then the test fails). */
export const WAIT_LIMIT_MS = 30_000;

const cleanups = new WeakMap<TestContext, Array<() => unknown>>();

/**
 * Runs `fn` when the test ends, in reverse order of registration (t.after runs hooks in
 * registration order, which would remove a temp dir before the process using it is killed).
 */
export function defer(t: TestContext, fn: () => unknown): void {
  let stack = cleanups.get(t);
  if (stack === undefined) {
    const fns: Array<() => unknown> = [];
    cleanups.set(t, fns);
    stack = fns;
    t.after(async () => {
      for (const cleanup of fns.reverse()) await cleanup();
    });
  }
  stack.push(fn);
}

/** A fresh directory, removed when the test ends (after everything registered later is stopped). */
export function scratchDir(t: TestContext, prefix = 'hookrelay-feed-'): string {
  const dir = mkdtempSync(join(tmpdir(), prefix));
  defer(t, () => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

export function assertBuilt(): void {
  if (!existsSync(CLI)) throw new Error(`${CLI} is missing; run npm run build first`);
}

/** The fields of a valid feed line, for request number `i`. */
export function fields(i: number, extra: Record<string, unknown> = {}): Record<string, unknown> {
  return { organization_id: 'org-a', anticipation_request_id: `ar_${i}`, status: 'approved', previous_status: 'submitted', ...extra };
}

/** One feed line with its newline. */
export function jsonLine(value: unknown): string {
  return JSON.stringify(value) + '\n';
}

/** `count` valid lines (request numbers `from`..), and the byte offset at which each one starts. */
export function feedLines(count: number, from = 0, extra: Record<string, unknown> = {}): { text: string; positions: number[]; bytes: number } {
  const parts: string[] = [];
  const positions: number[] = [];
  let offset = 0;
  for (let i = from; i < from + count; i++) {
    const text = jsonLine(fields(i, extra));
    positions.push(offset);
    offset += Buffer.byteLength(text);
    parts.push(text);
  }
  return { text: parts.join(''), positions, bytes: offset };
}

/** Polls `probe` (every 10 ms, at most `limitMs`) until it returns something other than undefined/false. */
export async function waitFor<T>(what: string, probe: () => T | undefined | false, limitMs = WAIT_LIMIT_MS): Promise<T> {
  const deadline = Date.now() + limitMs;
  for (;;) {
    const value = probe();
    if (value !== undefined && value !== false) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(10);
  }
}

/** Read-side queries on a second connection, as the CLI would make them. */
export class Probe {
  readonly store: SqliteStore;
  constructor(t: TestContext, databasePath: string) {
    this.store = openSqliteStore(databasePath, systemClock);
    defer(t, () => this.store.close());
  }

  eventCount(): number {
    return (this.store.db.prepare('SELECT count(*) AS n FROM events').get() as { n: number }).n;
  }

  /** Stored events in seq order, each with its webhook body (`payload`) and the status in it. */
  events(): Array<{ id: string; anticipation_request_id: string; status: string; source: string; source_position: number | null; payload: string }> {
    const rows = this.store.db
      .prepare(
        'SELECT e.id, e.org_id, e.anticipation_request_id, e.occurred_at, e.payload, s.name AS source, e.source_position FROM events e JOIN feed_sources s ON s.id = e.source_id ORDER BY e.seq',
      )
      .all() as Array<{ id: string; org_id: string; anticipation_request_id: string; occurred_at: number; payload: string; source: string; source_position: number | null }>;
    return rows.map((r) => {
      const body = storedBody({ id: r.id, orgId: r.org_id, anticipationRequestId: r.anticipation_request_id, occurredAt: r.occurred_at, payload: r.payload });
      const status = (JSON.parse(body) as { data: { status: string } }).data.status;
      return { id: r.id, anticipation_request_id: r.anticipation_request_id, status, source: r.source, source_position: r.source_position, payload: body };
    });
  }

  /** Each stored request id (events of `fields(i)` lines carry `ar_i`). */
  requestIds(): string[] {
    return this.events().map((e) => e.anticipation_request_id);
  }

  rejects(): Array<{ source: string; position: number | null; line_bytes: number; raw: Buffer; reason: string; detail: string; event_id: string | null }> {
    return this.store.db.prepare('SELECT source, position, line_bytes, raw, reason, detail, event_id FROM feed_rejects ORDER BY id').all() as never;
  }

  stats(source: string): { accepted: number; duplicates: number; quarantined: number } | undefined {
    return this.store.db.prepare('SELECT accepted, duplicates, quarantined FROM feed_stats WHERE source = ?').get(source) as never;
  }

  /** The committed position of `source`, or null before the first commit. */
  position(source: string): number | null {
    return repos(this.store).feed.getPosition(source)?.position ?? null;
  }

  deliveries(): Array<{ event_id: string; org_id: string; status: string; ordering_key: number }> {
    return this.store.db
      .prepare('SELECT e.id AS event_id, d.org_id, d.status, d.ordering_key FROM deliveries d JOIN events e ON e.seq = d.event_seq ORDER BY d.id')
      .all() as never;
  }

  /** Waits until `source` has accepted + duplicate + quarantined `lines` lines in total. */
  async waitForLines(source: string, lines: number): Promise<{ accepted: number; duplicates: number; quarantined: number }> {
    return waitFor(`${lines} lines of ${source} to be committed`, () => {
      const s = this.stats(source);
      return s !== undefined && s.accepted + s.duplicates + s.quarantined >= lines ? s : undefined;
    });
  }
}

export interface FeedRelay {
  readonly config: Config;
  readonly stateDir: string;
  start(): Promise<void>;
  stop(): Promise<void>;
  /** The second connection (opened on first use, after the relay created the database). */
  probe(): Probe;
  /** The relay's log records so far (level info and above). */
  logRecords(): Array<Record<string, unknown>>;
  /** http://127.0.0.1:PORT of the running relay's admin API. */
  baseUrl(): string;
}

/**
 * An in-process relay over `stateDir` (a new temp dir by default) that the test may stop and
 * start again, as a restart of the daemon. Overrides are dotted config paths. Stopped when the
 * test ends. The feed polls every 20 ms unless overridden.
 */
export function feedRelay(
  t: TestContext,
  overrides: Record<string, string>,
  options: { stateDir?: string; stdin?: () => Readable } = {},
): FeedRelay {
  const stateDir = options.stateDir ?? scratchDir(t, 'hookrelay-feed-state-');
  const config = loadConfig({
    env: {},
    overrides: { stateDir, 'api.listen': '127.0.0.1:0', 'log.level': 'silent', 'feed.pollInterval': '20', ...overrides },
  });
  let running: Relay | null = null;
  let probe: Probe | null = null;
  const records: Array<Record<string, unknown>> = [];
  const log = createLogger('info', { write: (line: string) => void records.push(JSON.parse(line) as Record<string, unknown>) });
  defer(t, async () => {
    await running?.stop();
    running = null;
  });
  return {
    config,
    stateDir,
    async start() {
      assert.equal(running, null, 'the relay is already running');
      const relay = createRelay(config, { log, ...(options.stdin ? { stdin: options.stdin() } : {}) });
      await relay.start();
      running = relay;
    },
    async stop() {
      await running?.stop();
      running = null;
    },
    probe() {
      probe ??= new Probe(t, config.database.path);
      return probe;
    },
    logRecords: () => records,
    baseUrl() {
      assert.notEqual(running, null, 'the relay is not running');
      return `http://127.0.0.1:${running!.address().port}`;
    },
  };
}

/** The caller's environment without anything that would change hookrelay's behaviour (shared with the scripts). */
export { cleanEnv };

export interface Exit {
  readonly code: number | null;
  readonly signal: NodeJS.Signals | null;
}

export interface CliResult extends Exit {
  readonly stdout: string;
  readonly stderr: string;
}

/**
 * Runs one CLI command to completion, with `input` (if any) on its standard input; `env` adds
 * variables, `uid` runs it as that user (and group id: only when the tests run as root).
 */
export async function runCli(t: TestContext, args: readonly string[], options: { input?: string | Buffer; cwd?: string; env?: Record<string, string>; uid?: number } = {}): Promise<CliResult> {
  const child = spawn(process.execPath, [CLI, ...args], {
    env: { ...cleanEnv(), ...options.env },
    ...(options.cwd !== undefined ? { cwd: options.cwd } : {}),
    ...(options.uid !== undefined ? { uid: options.uid, gid: options.uid } : {}),
    stdio: [options.input === undefined ? 'ignore' : 'pipe', 'pipe', 'pipe'],
  });
  killAtEnd(t, child);
  let stdout = '';
  let stderr = '';
  child.stdout!.setEncoding('utf8').on('data', (chunk: string) => (stdout += chunk));
  child.stderr!.setEncoding('utf8').on('data', (chunk: string) => (stderr += chunk));
  if (options.input !== undefined) child.stdin!.end(options.input);
  const timer = setTimeout(() => child.kill('SIGKILL'), WAIT_LIMIT_MS);
  const { code, signal } = await new Promise<Exit>((resolve, reject) => {
    child.once('error', reject);
    child.once('close', (code, signal) => resolve({ code, signal }));
  });
  clearTimeout(timer);
  return { code, signal, stdout, stderr };
}

/**
 * Creates an install the way a user does, with `hookrelay migrate` and `args` (the same
 * --state-dir / --config as the commands that follow): the other commands work only on an
 * existing one. Fails the test if migrate fails.
 */
export async function migrateCli(t: TestContext, args: readonly string[], options: { cwd?: string; env?: Record<string, string>; uid?: number } = {}): Promise<CliResult> {
  const result = await runCli(t, ['migrate', ...args], options);
  assert.equal(result.code, 0, `hookrelay migrate ${args.join(' ')}: exit ${result.code} (${result.signal}); stderr: ${result.stderr}`);
  return result;
}

function exitOf(child: ChildProcess): Promise<Exit> {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve({ code: child.exitCode, signal: child.signalCode });
  return new Promise((resolve) => child.once('exit', (code, signal) => resolve({ code, signal })));
}

/** SIGKILLs `child` when the test ends unless it has exited by then. */
function killAtEnd(t: TestContext, child: ChildProcess): void {
  defer(t, async () => {
    if (child.exitCode !== null || child.signalCode !== null) return;
    const exit = exitOf(child);
    child.kill('SIGKILL');
    await exit;
  });
}

/** A TCP port free on 127.0.0.1 now, for a process that takes its port as an argument. */
export async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}

/** A long-running process of a test (a receiver, `hookrelay listen`) whose output is watched. */
export interface WatchedProcess {
  readonly child: ChildProcess;
  /** What it printed on stdout, and on stderr. */
  stdout(): string;
  stderr(): string;
  /** The first stdout line matching `pattern`, once printed; fails the test when the process exits first or after WAIT_LIMIT_MS. */
  line(pattern: RegExp): Promise<string>;
  /** Resolves with its exit code once it has ended and its pipes are read to the end. */
  readonly closed: Promise<number | null>;
}

/** Spawns `command` (SIGKILLed when the test ends, unless it has exited) and collects what it prints. */
export function spawnWatched(t: TestContext, command: string, args: readonly string[], options: { cwd?: string; env?: Record<string, string> } = {}): WatchedProcess {
  const child = spawn(command, args, { env: { ...cleanEnv(), ...options.env }, ...(options.cwd !== undefined ? { cwd: options.cwd } : {}), stdio: ['ignore', 'pipe', 'pipe'] });
  killAtEnd(t, child);
  const closed = new Promise<number | null>((resolve) => child.once('close', (code) => resolve(code)));
  let out = '';
  let err = '';
  child.stdout!.setEncoding('utf8').on('data', (chunk: string) => (out += chunk));
  child.stderr!.setEncoding('utf8').on('data', (chunk: string) => (err += chunk));
  const what = [command, ...args].map((a) => a.split('/').pop()).join(' ');
  return {
    child,
    stdout: () => out,
    stderr: () => err,
    closed,
    async line(pattern) {
      const deadline = performance.now() + WAIT_LIMIT_MS;
      for (;;) {
        const found = out.split('\n').find((l) => pattern.test(l));
        if (found !== undefined) return found;
        assert.ok(child.exitCode === null && child.signalCode === null, `${what} exited (${child.exitCode ?? child.signalCode}) before printing ${pattern}; stdout: ${out}; stderr: ${err}`);
        assert.ok(performance.now() < deadline, `${what} did not print ${pattern}; stdout: ${out}; stderr: ${err}`);
        await new Promise((resolve) => setTimeout(resolve, 20));
      }
    },
  };
}

export interface Daemon {
  readonly child: ChildProcess;
  readonly baseUrl: string;
  /** JSON log records written to stdout so far. */
  logRecords(): Array<Record<string, unknown>>;
  stderr(): string;
  /** Resolves with how the process ended ('close': its pipes are read to the end). */
  readonly exited: Promise<Exit>;
}

/**
 * Spawns `node dist/cli.js serve --state-dir D --listen 127.0.0.1:0 ...args` with no HOOKRELAY_*
 * variable but those of `options.env`, and waits until it logs "admin API listening".
 * `options.nodeArgs` go before the script (`--import` a preload). SIGKILLed when the test ends.
 */
export async function spawnServe(
  t: TestContext,
  stateDir: string,
  args: readonly string[],
  options: { stdin?: boolean; env?: Record<string, string>; nodeArgs?: readonly string[] } = {},
): Promise<Daemon> {
  const child = spawn(process.execPath, [...(options.nodeArgs ?? []), CLI, 'serve', '--state-dir', stateDir, '--listen', '127.0.0.1:0', ...args], {
    env: { ...cleanEnv(), ...options.env },
    stdio: [options.stdin ? 'pipe' : 'ignore', 'pipe', 'pipe'],
  });
  killAtEnd(t, child);
  let stdout = '';
  let stderr = '';
  child.stderr!.setEncoding('utf8').on('data', (chunk: string) => (stderr += chunk));
  const exited = new Promise<Exit>((resolve) => child.once('close', (code, signal) => resolve({ code, signal })));
  const logRecords = () =>
    stdout
      .split('\n')
      .filter((l) => l.startsWith('{'))
      .map((l) => JSON.parse(l) as Record<string, unknown>);
  const port = await new Promise<number>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`the daemon did not start listening; stdout: ${stdout}; stderr: ${stderr}`)), WAIT_LIMIT_MS);
    child.stdout!.setEncoding('utf8').on('data', (chunk: string) => {
      stdout += chunk;
      const listening = logRecords().find((r) => r.msg === 'admin API listening');
      if (listening) {
        clearTimeout(timer);
        resolve(listening.port as number);
      }
    });
    void exited.then(({ code, signal }) => {
      clearTimeout(timer);
      reject(new Error(`the daemon exited (${code}, ${signal}) before listening; stderr: ${stderr}`));
    });
  });
  return { child, baseUrl: `http://127.0.0.1:${port}`, logRecords, stderr: () => stderr, exited };
}

export function databaseIn(stateDir: string): string {
  return join(stateDir, 'hookrelay.db');
}

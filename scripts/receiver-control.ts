/**
 * What the scripts that drive a real daemon against a real receiver share (bench-delivery.ts,
 * fault-suite.ts): the test TLS material, and the receiver process (bench-delivery-receiver.ts)
 * started with fork and driven over IPC.
 */
import { execFileSync, fork, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import type { PhaseArrivals, ReceiverCommand, ReceiverReply, ReceiverStats } from './bench-delivery-receiver.ts';

const TSX = import.meta.resolve('tsx');

/** The Node flags `npm start` gives the daemon: what stands between `node` and `dist/cli.js` in package.json's start script. */
export function startScriptNodeFlags(): string[] {
  const start = (JSON.parse(readFileSync(fileURLToPath(new URL('../package.json', import.meta.url)), 'utf8')) as { scripts: { start: string } }).scripts.start;
  const words = start.split(/\s+/);
  const node = words.indexOf('node');
  const cli = words.findIndex((w) => w.endsWith('cli.js'));
  if (node === -1 || cli <= node) throw new Error(`cannot read the node flags of the start script: ${start}`);
  return words.slice(node + 1, cli);
}

/** The caller's environment minus what would change hookrelay's or a child's behaviour. */
export function cleanEnv(): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const [name, value] of Object.entries(process.env)) {
    if (value === undefined || name.startsWith('HOOKRELAY_') || name.startsWith('OTEL_') || name === 'NODE_OPTIONS' || name === 'NODE_TEST_CONTEXT') continue;
    env[name] = value;
  }
  return env;
}

// ---------------------------------------------------------------------------------------------
// TLS material: a P-256 CA and a server certificate it signed (subjectAltName IP:127.0.0.1, DNS:localhost), made with the openssl CLI; the tests' certificates too (test/helpers/receivers.ts)

export function createTls(dir: string, name = 'hookrelay bench CA', altNames = 'IP:127.0.0.1,DNS:localhost'): { caFile: string; caPem: string; caKeyFile: string; certPem: string; keyPem: string } {
  mkdirSync(dir, { recursive: true });
  const file = (f: string) => join(dir, f);
  const openssl = (...args: string[]) => execFileSync('openssl', args, { cwd: dir, stdio: ['ignore', 'ignore', 'pipe'] });
  const ec = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-256', '-nodes'];
  openssl(
    'req', '-x509', ...ec, '-keyout', file('ca.key'), '-out', file('ca.pem'), '-days', '2', '-subj', `/CN=${name}`,
    '-addext', 'basicConstraints=critical,CA:TRUE', '-addext', 'keyUsage=critical,keyCertSign,cRLSign',
  );
  openssl('req', ...ec, '-keyout', file('server.key'), '-out', file('server.csr'), '-subj', '/CN=127.0.0.1');
  writeFileSync(
    file('server.ext'),
    [`subjectAltName=${altNames}`, 'basicConstraints=critical,CA:FALSE', 'keyUsage=critical,digitalSignature', 'extendedKeyUsage=serverAuth', ''].join('\n'),
  );
  openssl(
    'x509', '-req', '-in', file('server.csr'), '-CA', file('ca.pem'), '-CAkey', file('ca.key'), '-set_serial', `0x${randomBytes(8).toString('hex')}`,
    '-days', '2', '-extfile', file('server.ext'), '-out', file('server.pem'),
  );
  return {
    caFile: file('ca.pem'),
    caPem: readFileSync(file('ca.pem'), 'utf8'),
    caKeyFile: file('ca.key'),
    certPem: readFileSync(file('server.pem'), 'utf8'),
    keyPem: readFileSync(file('server.key'), 'utf8'),
  };
}

// ---------------------------------------------------------------------------------------------
// The receiver process

/** A receiver command without its id (distributes over the union). */
type Command = ReceiverCommand extends infer C ? (C extends ReceiverCommand ? Omit<C, 'id'> : never) : never;

/**
 * Requests to a forked child over IPC, each answered by one reply with the same `id`: `call`
 * sends a command and resolves with its reply (rejects when the reply says it failed, or when
 * the child exits first). `name` says who failed in the errors.
 */
export function ipcCaller<C extends object, R extends { readonly id: number; readonly ok: boolean; readonly error?: string }>(child: ChildProcess, name: string): (command: C) => Promise<R> {
  let nextId = 1;
  const waiting = new Map<number, { resolve: (r: R) => void; reject: (e: Error) => void }>();
  child.on('message', (reply: R) => {
    const w = waiting.get(reply.id);
    waiting.delete(reply.id);
    if (!w) return;
    if (reply.ok) w.resolve(reply);
    else w.reject(new Error(`${name}: ${reply.error ?? 'failed'}`));
  });
  child.on('exit', (code, signal) => {
    for (const w of waiting.values()) w.reject(new Error(`the ${name} exited (${code ?? signal})`));
    waiting.clear();
  });
  return (command) =>
    new Promise((resolvePromise, reject) => {
      const id = nextId++;
      waiting.set(id, { resolve: resolvePromise, reject });
      child.send({ ...command, id });
    });
}

export function startReceiverProcess() {
  const child = fork(fileURLToPath(new URL('./bench-delivery-receiver.ts', import.meta.url)), [], {
    execArgv: ['--import', TSX],
    env: cleanEnv(),
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
  });
  const call = ipcCaller<Command, ReceiverReply>(child, 'receiver');
  return {
    child,
    call,
    async stats(phases: readonly string[], latencies = false): Promise<ReceiverStats> {
      return (await call({ type: 'stats', phases, latencies })).stats!;
    },
    async phase(phase: string, latencies = false): Promise<PhaseArrivals> {
      return (await call({ type: 'stats', phases: [phase], latencies })).stats!.phases[phase]!;
    },
    async stop(): Promise<void> {
      if (child.exitCode !== null || child.signalCode !== null) return;
      const exited = new Promise((r) => child.once('exit', r));
      await call({ type: 'exit' }).catch(() => {});
      await Promise.race([exited, sleep(5000, undefined, { ref: false })]);
      if (child.exitCode === null) child.kill('SIGKILL');
    },
  };
}
export type ReceiverProcess = ReturnType<typeof startReceiverProcess>;

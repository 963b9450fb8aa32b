/**
 * The webhook receiver of the delivery benchmark (scripts/bench-delivery.ts), in a process of
 * its own so that verifying and recording does not compete with the orchestrator's event loop.
 * Started with child_process.fork and driven over IPC (see `ReceiverCommand`).
 *
 * It serves HTTPS on 127.0.0.1, one path per organization (`/hook/<org>`), verifies every
 * request's Standard Webhooks signature with the `standardwebhooks` package and that org's
 * secret, answers 200 at once (400 when verification fails, 404 for an unknown path), and
 * records per event its arrival count and, for the first arrival, arrival time minus the
 * `data.appended_at` the feed line carried. Event ids are `evt-<phase>-<n>`: the phase names an
 * expected set, `n` indexes typed arrays (one byte of arrival count, one float of latency per
 * event), so a million events cost about 9 MB and nothing grows with the number of requests.
 *
 * `down` closes the listening socket and destroys every open connection (clients then get
 * ECONNREFUSED); `up` listens again on the same port.
 */
import { createServer, type Server } from 'node:https';
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import { writeFileSync } from 'node:fs';
import { Webhook } from 'standardwebhooks';

/**
 * How verified requests are answered (the fault suite): `ok` 200 (the only answer that counts an
 * arrival), `error500` 500, `hang` never, `cut` the connection closed without an answer,
 * `throttle` 429 with Retry-After: 1.
 */
export type ReceiverMode = 'ok' | 'error500' | 'hang' | 'cut' | 'throttle';

/** Messages from the orchestrator; each is answered by a `ReceiverReply` with the same `id`. */
export type ReceiverCommand =
  | { readonly id: number; readonly type: 'start'; readonly keyPem: string; readonly certPem: string }
  | { readonly id: number; readonly type: 'secrets'; readonly secrets: Readonly<Record<string, string>> }
  | { readonly id: number; readonly type: 'expect'; readonly phase: string; readonly count: number }
  | { readonly id: number; readonly type: 'down' }
  | { readonly id: number; readonly type: 'behave'; readonly mode: ReceiverMode }
  | { readonly id: number; readonly type: 'up' }
  | { readonly id: number; readonly type: 'stats'; readonly phases: readonly string[]; readonly latencies: boolean }
  | { readonly id: number; readonly type: 'exit' };

export interface ReceiverReply {
  readonly id: number;
  readonly ok: boolean;
  readonly error?: string;
  readonly port?: number;
  readonly stats?: ReceiverStats;
}

/** Latency from `data.appended_at` to arrival, in ms, over the first arrival of each event. */
export interface LatencySummary {
  readonly count: number;
  readonly p50: number;
  readonly p90: number;
  readonly p99: number;
  readonly max: number;
  readonly mean: number;
}

export interface PhaseArrivals {
  readonly expected: number;
  /** Events that arrived at least once. */
  readonly unique: number;
  /** Arrivals of an event that had already arrived. */
  readonly duplicates: number;
  /** Requests of this phase, duplicates included. */
  readonly requests: number;
  /** Epoch ms of the first and last arrival (duplicates included), and of the last first arrival; null before any. */
  readonly firstArrival: number | null;
  readonly lastArrival: number | null;
  readonly lastNewArrival: number | null;
  readonly missing: number;
  /** Up to 10 ids of events that have not arrived. */
  readonly missingSample: readonly string[];
  readonly latency: LatencySummary | null;
}

export interface ReceiverStats {
  /** Every request answered, any path, ceilings included. */
  readonly requests: number;
  readonly signatureFailures: number;
  /** Requests not answered 200 on purpose (`behave`). */
  readonly misbehaved: number;
  /** Requests to an unknown path, without a parsable event id, or for an event outside every expected phase. */
  readonly unexpected: number;
  /** Requests whose event id is `evt-ceiling-...` (the ceiling runs). */
  readonly ceilingRequests: number;
  /** Mean body size of the daemon's deliveries (ceilings excluded), in bytes. */
  readonly meanBodyBytes: number;
  /** Up to 10 descriptions of failed verifications or unexpected requests. */
  readonly problems: readonly string[];
  readonly phases: Readonly<Record<string, PhaseArrivals>>;
}

interface PhaseRecord {
  readonly expected: number;
  /** Arrivals per event index, saturating at 255. */
  readonly arrivals: Uint8Array;
  /** Latency of the first arrival per event index, in ms; NaN until then or without appended_at. */
  readonly latencies: Float64Array;
  unique: number;
  duplicates: number;
  requests: number;
  firstArrival: number | null;
  lastArrival: number | null;
  lastNewArrival: number | null;
}

const nowMs = () => performance.timeOrigin + performance.now();

const verifiers = new Map<string, Webhook>();
const phases = new Map<string, PhaseRecord>();
/** appended_at of each phase's event 0 (see dumpLatencies). */
const firstAppended = new Map<string, number>();
const sockets = new Set<Socket>();
const problems: string[] = [];
let requests = 0;
let mode: ReceiverMode = 'ok';
/** Requests answered otherwise than 200 (see ReceiverMode). */
let misbehaved = 0;
let signatureFailures = 0;
let unexpected = 0;
let ceilingRequests = 0;
let bodyBytes = 0;
let bodies = 0;
let server: Server | null = null;
let port = 0;

function problem(text: string): void {
  if (problems.length < 10) problems.push(text);
}

function answer(res: ServerResponse, status: number): void {
  res.writeHead(status, { 'content-type': 'text/plain', 'content-length': '2' });
  res.end(status === 200 ? 'ok' : 'no');
}

function record(eventId: string, appendedAt: unknown, arrival: number): boolean {
  const dash = eventId.lastIndexOf('-');
  if (!eventId.startsWith('evt-') || dash <= 4) return false;
  const phaseName = eventId.slice(4, dash);
  const index = Number(eventId.slice(dash + 1));
  if (phaseName === 'ceiling') {
    ceilingRequests++;
    return true;
  }
  const phase = phases.get(phaseName);
  if (!phase || !Number.isInteger(index) || index < 0 || index >= phase.expected) return false;
  phase.requests++;
  phase.firstArrival ??= arrival;
  phase.lastArrival = arrival;
  const seen = phase.arrivals[index]!;
  if (seen === 0) {
    phase.unique++;
    phase.lastNewArrival = arrival;
    if (typeof appendedAt === 'number') phase.latencies[index] = arrival - appendedAt;
    if (typeof appendedAt === 'number' && index === 0) firstAppended.set(phaseName, appendedAt);
  } else {
    phase.duplicates++;
  }
  if (seen < 255) phase.arrivals[index] = seen + 1;
  return true;
}

function handle(req: IncomingMessage, res: ServerResponse): void {
  const chunks: Buffer[] = [];
  req.on('data', (chunk: Buffer) => chunks.push(chunk));
  req.on('end', () => {
    const arrival = nowMs();
    requests++;
    const body = Buffer.concat(chunks);
    const match = /^\/hook\/([^/?]+)$/.exec(req.url ?? '');
    const verifier = match ? verifiers.get(match[1]!) : undefined;
    if (!verifier) {
      unexpected++;
      problem(`unknown path ${req.method ?? ''} ${req.url ?? ''}`);
      answer(res, 404);
      return;
    }
    let payload: unknown;
    try {
      payload = verifier.verify(body, req.headers as Record<string, string>);
    } catch (err) {
      signatureFailures++;
      problem(`signature check failed for ${req.url ?? ''} webhook-id ${String(req.headers['webhook-id'])}: ${(err as Error).message}`);
      answer(res, 400);
      return;
    }
    if (mode !== 'ok') {
      misbehaved++;
      if (mode === 'error500') answer(res, 500);
      else if (mode === 'throttle') {
        res.writeHead(429, { 'retry-after': '1', 'content-type': 'text/plain' });
        res.end('slow down');
      } else if (mode === 'cut') req.socket.destroy();
      // hang: no answer; the daemon's attempt deadline ends it.
      return;
    }
    const data = (payload as { data?: { event_id?: unknown; appended_at?: unknown } } | null)?.data;
    const eventId = data?.event_id;
    if (typeof eventId !== 'string' || !record(eventId, data?.appended_at, arrival)) {
      unexpected++;
      problem(`unexpected event ${String(eventId)} at ${req.url ?? ''}`);
    } else if (!eventId.startsWith('evt-ceiling-')) {
      bodyBytes += body.length;
      bodies++;
    }
    answer(res, 200);
  });
}

/**
 * With BENCH_LATENCY_DUMP=PREFIX in the environment (a diagnostic, docs/benchmarks.md): the
 * phase's latencies in event order (a Float64Array, NaN for an event not arrived) go to
 * PREFIX-<phase>.f64, and the appended_at of its first event (epoch ms) to PREFIX-<phase>.t0, to
 * see when in a run the slow arrivals fell.
 */
function dumpLatencies(name: string, phase: PhaseRecord): void {
  const prefix = process.env.BENCH_LATENCY_DUMP;
  if (!prefix) return;
  writeFileSync(`${prefix}-${name}.f64`, phase.latencies);
  writeFileSync(`${prefix}-${name}.t0`, String(firstAppended.get(name) ?? ''));
}

function listen(srv: Server, onPort: number): Promise<number> {
  return new Promise((resolve, reject) => {
    srv.once('error', reject);
    srv.listen(onPort, '127.0.0.1', () => {
      srv.off('error', reject);
      resolve((srv.address() as AddressInfo).port);
    });
  });
}

/** Percentiles of the first arrivals, by sorting a copy: about 100 ms for a million, once per phase. */
function summarise(latencies: Float64Array, arrivals: Uint8Array): LatencySummary | null {
  let n = 0;
  for (let i = 0; i < latencies.length; i++) if (arrivals[i]! > 0 && !Number.isNaN(latencies[i]!)) n++;
  if (n === 0) return null;
  const values = new Float64Array(n);
  let k = 0;
  let sum = 0;
  for (let i = 0; i < latencies.length; i++) {
    const v = latencies[i]!;
    if (arrivals[i]! > 0 && !Number.isNaN(v)) {
      values[k++] = v;
      sum += v;
    }
  }
  values.sort();
  const at = (q: number) => values[Math.min(n - 1, Math.max(0, Math.ceil(q * n) - 1))]!;
  const round = (v: number) => Math.round(v * 100) / 100;
  return { count: n, p50: round(at(0.5)), p90: round(at(0.9)), p99: round(at(0.99)), max: round(values[n - 1]!), mean: round(sum / n) };
}

function phaseStats(name: string, phase: PhaseRecord, withLatencies: boolean): PhaseArrivals {
  const missingSample: string[] = [];
  let missing = 0;
  for (let i = 0; i < phase.expected; i++) {
    if (phase.arrivals[i] === 0) {
      missing++;
      if (missingSample.length < 10) missingSample.push(`evt-${name}-${i}`);
    }
  }
  return {
    expected: phase.expected,
    unique: phase.unique,
    duplicates: phase.duplicates,
    requests: phase.requests,
    firstArrival: phase.firstArrival,
    lastArrival: phase.lastArrival,
    lastNewArrival: phase.lastNewArrival,
    missing,
    missingSample,
    latency: withLatencies ? summarise(phase.latencies, phase.arrivals) : null,
  };
}

async function run(command: ReceiverCommand): Promise<Omit<ReceiverReply, 'id' | 'ok'>> {
  switch (command.type) {
    case 'start': {
      server = createServer({ key: command.keyPem, cert: command.certPem }, handle);
      server.on('connection', (socket: Socket) => {
        sockets.add(socket);
        socket.once('close', () => sockets.delete(socket));
      });
      // A TLS or socket error of one client (a connection cut by `down`, say) is not ours to report.
      server.on('tlsClientError', () => {});
      port = await listen(server, 0);
      return { port };
    }
    case 'secrets':
      for (const [org, secret] of Object.entries(command.secrets)) verifiers.set(org, new Webhook(secret));
      return {};
    case 'expect':
      phases.set(command.phase, {
        expected: command.count,
        arrivals: new Uint8Array(command.count),
        latencies: new Float64Array(command.count).fill(Number.NaN),
        unique: 0,
        duplicates: 0,
        requests: 0,
        firstArrival: null,
        lastArrival: null,
        lastNewArrival: null,
      });
      return {};
    case 'behave':
      mode = command.mode;
      return {};
    case 'down': {
      const srv = server;
      if (!srv?.listening) return {};
      const closed = new Promise<void>((resolve) => srv.close(() => resolve()));
      for (const socket of sockets) socket.destroy();
      await closed;
      return {};
    }
    case 'up':
      if (!server) throw new Error('not started');
      if (!server.listening) await listen(server, port);
      return { port };
    case 'stats': {
      const out: Record<string, PhaseArrivals> = {};
      for (const name of command.phases) {
        const phase = phases.get(name);
        if (phase) out[name] = phaseStats(name, phase, command.latencies);
        if (phase && command.latencies) dumpLatencies(name, phase);
      }
      return {
        stats: { requests, signatureFailures, misbehaved, unexpected, ceilingRequests, meanBodyBytes: bodies === 0 ? 0 : Math.round(bodyBytes / bodies), problems, phases: out },
      };
    }
    case 'exit':
      setImmediate(() => process.exit(0));
      return {};
  }
}

if (!process.send) throw new Error('bench-delivery-receiver.ts is started by scripts/bench-delivery.ts (child_process.fork with IPC)');
process.on('message', (command: ReceiverCommand) => {
  run(command).then(
    (reply) => process.send!({ id: command.id, ok: true, ...reply } satisfies ReceiverReply),
    (err: unknown) => process.send!({ id: command.id, ok: false, error: err instanceof Error ? err.message : String(err) } satisfies ReceiverReply),
  );
});
// The orchestrator died: do not outlive it.
process.on('disconnect', () => process.exit(0));

/**
 * One ceiling run of the delivery benchmark (scripts/bench-delivery.ts), in a process of its
 * own: POSTs pre-signed webhook requests to the benchmark's receiver from `concurrency` loops
 * at once, each waiting for its answer and reading it to the end, with no database and no
 * signing, and reports requests per second. Started with child_process.fork; gets a
 * `CeilingJob` over IPC and answers with a `CeilingResult`, then exits.
 *
 * - `undici`: the client every delivery attempt of hookrelay goes through, built by
 *   `createDeliveryClient` (src/dispatch/http-client.ts) and called as the deliverer calls it:
 *   `dispatcher.request({ origin, path, method, headers, body, signal })`, the signal aborted by
 *   an attempt deadline, the body read to its end.
 * - `got`: the client hookrelay used before issue 26 (got 14 on keep-alive node:https agents,
 *   LIFO, one TLS context, `got.stream` as the deliverer called it), kept here as a reference
 *   point: got is a devDependency for this script only.
 * - `raw`: `https.request` with a keep-alive `https.Agent` (LIFO, one TLS context with the same CA):
 *   what node:http itself can do.
 */
import { Agent, request as httpsRequest } from 'node:https';
import { createSecureContext } from 'node:tls';
import got, { type Request } from 'got';
import { createDeliveryClient, deliverySecureContext } from '../src/dispatch/http-client.ts';

export type CeilingClient = 'undici' | 'got' | 'raw';

export interface CeilingJob {
  readonly client: CeilingClient;
  /** Requests sent round-robin (one per organization, each with its own path and signature). */
  readonly requests: ReadonlyArray<{ readonly url: string; readonly headers: Readonly<Record<string, string>>; readonly body: string }>;
  readonly caPem: string;
  readonly userAgent: string;
  readonly concurrency: number;
  /** Stop after this many timed requests... */
  readonly total: number;
  /** ...or after this many seconds, whichever comes first (0: no time limit). */
  readonly seconds: number;
  /** Untimed requests first, so that the timed ones find the connections open. */
  readonly warmup: number;
  /** Deadline of one request, in ms (hookrelay's delivery.timeout). */
  readonly timeoutMs: number;
}

export interface CeilingResult {
  readonly client: CeilingClient;
  readonly requests: number;
  /** Answers other than 200, and errors. */
  readonly failures: number;
  readonly firstFailure: string | null;
  readonly seconds: number;
  readonly requestsPerSecond: number;
  /** CPU time of this process per timed request, in ms. */
  readonly cpuMsPerRequest: number;
}

type Send = (index: number) => Promise<number>;

/**
 * Runs one request under a deadline the way the deliverer does (src/dispatch/deliverer.ts):
 * an AbortController and a timer cleared when the request is over. (AbortSignal.timeout,
 * which the deliverer used before, costs more: its timer is tracked for the garbage collector.)
 */
async function withDeadline<T>(timeoutMs: number, run: (signal: AbortSignal) => Promise<T>): Promise<T> {
  const controller = new AbortController();
  const timer = setTimeout(() => controller.abort(new Error('deadline')), timeoutMs);
  try {
    return await run(controller.signal);
  } finally {
    clearTimeout(timer);
  }
}

function undiciSender(job: CeilingJob): { send: Send; close: () => void } {
  const client = createDeliveryClient({ extraCa: job.caPem, connectionsPerOrigin: job.concurrency, connectTimeoutMs: job.timeoutMs });
  const targets = job.requests.map((r) => {
    const url = new URL(r.url);
    return { origin: url.origin, path: url.pathname, body: r.body, headers: { ...r.headers, 'user-agent': job.userAgent } };
  });
  return {
    send(index) {
      const t = targets[index % targets.length]!;
      return withDeadline(job.timeoutMs, async (signal) => {
        const res = await client.dispatcher.request({ origin: t.origin, path: t.path, method: 'POST', headers: t.headers, body: t.body, signal });
        for await (const chunk of res.body as AsyncIterable<Buffer>) void chunk;
        return res.statusCode;
      });
    },
    close: () => void client.destroy(),
  };
}

function gotSender(job: CeilingJob): { send: Send; close: () => void } {
  const secureContext = deliverySecureContext(job.caPem);
  const https = new Agent({ keepAlive: true, scheduling: 'lifo', ...(secureContext ? { secureContext } : {}) });
  const client = got.extend({
    method: 'POST',
    agent: { https },
    followRedirect: false,
    throwHttpErrors: false,
    retry: { limit: 0 },
    decompress: false,
    headers: { 'user-agent': job.userAgent },
  });
  const urls = job.requests.map((r) => new URL(r.url));
  return {
    send(index) {
      const r = job.requests[index % job.requests.length]!;
      return withDeadline(job.timeoutMs, async (signal) => {
        const stream: Request = client.stream(urls[index % urls.length]!, { body: r.body, headers: r.headers, signal });
        const status = await new Promise<number>((resolve, reject) => {
          stream.once('response', (res: { statusCode: number }) => resolve(res.statusCode));
          stream.once('error', reject);
        });
        for await (const chunk of stream as AsyncIterable<Buffer>) void chunk;
        return status;
      });
    },
    close: () => https.destroy(),
  };
}

function rawSender(job: CeilingJob): { send: Send; close: () => void } {
  const agent = new Agent({ keepAlive: true, scheduling: 'lifo', secureContext: createSecureContext({ ca: job.caPem }) });
  const targets = job.requests.map((r) => {
    const url = new URL(r.url);
    const body = Buffer.from(r.body);
    return { url, body, headers: { ...r.headers, 'content-length': String(body.length), 'user-agent': job.userAgent } };
  });
  return {
    send(index) {
      const t = targets[index % targets.length]!;
      return withDeadline(
        job.timeoutMs,
        (signal) =>
          new Promise<number>((resolve, reject) => {
            const req = httpsRequest({ agent, method: 'POST', host: t.url.hostname, port: t.url.port, path: t.url.pathname, headers: t.headers, signal }, (res) => {
              res.on('data', () => {});
              res.on('end', () => resolve(res.statusCode ?? 0));
              res.on('error', reject);
            });
            req.on('error', reject);
            req.end(t.body);
          }),
      );
    },
    close: () => agent.destroy(),
  };
}

async function run(job: CeilingJob): Promise<CeilingResult> {
  const senders = { undici: undiciSender, got: gotSender, raw: rawSender };
  const { send, close } = senders[job.client](job);
  let failures = 0;
  let firstFailure: string | null = null;
  const fail = (why: string) => {
    failures++;
    firstFailure ??= why;
  };
  let next = 0;
  let limit = job.warmup;
  let deadline = Number.POSITIVE_INFINITY;
  const loop = async () => {
    while (next < limit && performance.now() < deadline) {
      const index = next++;
      try {
        const status = await send(index);
        if (status !== 200) fail(`HTTP ${status}`);
      } catch (err) {
        fail(`${(err as NodeJS.ErrnoException).code ?? ''} ${(err as Error).message}`.trim());
      }
    }
  };
  const loops = (n: number) => Promise.all(Array.from({ length: n }, loop));
  await loops(job.concurrency);
  failures = 0;
  firstFailure = null;
  next = 0;
  limit = job.total;
  const cpu = process.cpuUsage();
  const started = performance.now();
  if (job.seconds > 0) deadline = started + job.seconds * 1000;
  await loops(job.concurrency);
  const seconds = (performance.now() - started) / 1000;
  const used = process.cpuUsage(cpu);
  close();
  return {
    client: job.client,
    requests: next,
    failures,
    firstFailure,
    seconds: Number(seconds.toFixed(3)),
    requestsPerSecond: Math.round(next / seconds),
    cpuMsPerRequest: Number(((used.user + used.system) / 1000 / next).toFixed(4)),
  };
}

if (!process.send) throw new Error('bench-delivery-ceiling.ts is started by scripts/bench-delivery.ts (child_process.fork with IPC)');
process.once('message', (job: CeilingJob) => {
  run(job).then(
    (result) => process.send!({ ok: true, result }, () => process.exit(0)),
    (err: unknown) => process.send!({ ok: false, error: err instanceof Error ? (err.stack ?? err.message) : String(err) }, () => process.exit(1)),
  );
});
// The orchestrator died: do not outlive it.
process.on('disconnect', () => process.exit(1));

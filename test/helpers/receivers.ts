/**
 * Fixtures for the delivery tests: a throw-away certificate authority and server certificate
 * made with the `openssl` CLI, real HTTPS receivers on 127.0.0.1:0 whose answers the test
 * controls request by request (recording method, headers and the exact body bytes), a
 * receiver that never answers, one that sends its answer a byte at a time, and small helpers
 * to feed events and to wait on the database with a bounded deadline.
 */
import { appendFileSync, mkdtempSync, rmSync } from 'node:fs';
import type { IncomingHttpHeaders } from 'node:http';
import { createServer as createHttpServer, type IncomingMessage } from 'node:http';
import { createServer as createHttpsServer, type Server as HttpsServer } from 'node:https';
import { connect as netConnect, type AddressInfo, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { TestContext } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { createServer as createTlsServer, type Server as TlsServer, type TLSSocket } from 'node:tls';
import { createTls } from '../../scripts/receiver-control.ts';
import type { AttemptRow, DeliveryRow } from '../../src/store/values.ts';
import type { Logger } from '../../src/log.ts';
import type { SqliteStore as Store } from '../../src/store/sqlite/store.ts';
import { repos } from './sqlite-repos.ts';
import { startRelay, type RunningRelay } from './helpers.ts';

/** PEM material of a test CA and of a server certificate it signed for 127.0.0.1 and localhost. */
export interface TestTls {
  /** The CA certificate file, for delivery.caFile. */
  readonly caFile: string;
  readonly caPem: string;
  readonly caKeyFile: string;
  readonly certPem: string;
  readonly keyPem: string;
  /** The directory holding these files (removed when the test ends). */
  readonly dir: string;
}

/**
 * Makes a P-256 test CA and a server certificate (subjectAltName IP:127.0.0.1, DNS:localhost)
 * with the openssl CLI, in a temp directory removed when the test ends.
 */
export function createTestTls(t: TestContext, altNames?: string): TestTls {
  const dir = mkdtempSync(join(tmpdir(), 'hookrelay-tls-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  return { ...createTls(dir, 'hookrelay test CA', altNames), dir };
}

/** One request as the receiver saw it. */
export interface RecordedRequest {
  /** 0-based order of arrival at this receiver. */
  readonly index: number;
  readonly method: string;
  readonly path: string;
  readonly headers: IncomingHttpHeaders;
  /** The exact body bytes received. */
  readonly body: Buffer;
  /** Date.now() when the whole body had arrived (before any answer was sent). */
  readonly receivedAt: number;
  /** The status the receiver answered, once it has (undefined while held or never answered). */
  answeredStatus?: number;
  /** SHA-256 fingerprint of the client certificate the connection presented (mutual TLS), or null. */
  readonly clientCertificate?: string | null;
}

/** What the receiver does with a request: an answer, or `hang` (never answer; the socket is held until the test ends). */
export type Answer = { readonly status: number; readonly headers?: Readonly<Record<string, string>>; readonly body?: string | Buffer } | 'hang';
export type Responder = (req: RecordedRequest) => Answer | Promise<Answer>;

export interface Receiver {
  /** https://127.0.0.1:<port>/hook */
  readonly url: string;
  readonly port: number;
  /** Every request, in order of arrival. */
  readonly requests: RecordedRequest[];
  /** TCP connections accepted so far (any, even ones that never sent a request). */
  connections(): number;
  /** TCP connections open now (accepted and not yet closed by either side). */
  openConnections(): number;
  /** Replaces the responder for the requests that arrive from now on. */
  respond(responder: Responder): void;
  /** Resolves with the first `count` requests once they have arrived; throws after `timeoutMs`. */
  waitForRequests(count: number, timeoutMs?: number): Promise<RecordedRequest[]>;
  /** Requests whose body parses to an event with this `data.event_id`. */
  requestsFor(eventId: string): RecordedRequest[];
  /** Ends every connection now (held requests included) and stops listening. */
  close(): Promise<void>;
}

const ok: Responder = () => ({ status: 200, body: 'ok' });

/** The event id carried by a request body, or null when it is not one of our events. */
export function eventIdOf(req: Pick<RecordedRequest, 'body'>): string | null {
  try {
    const parsed = JSON.parse(req.body.toString('utf8')) as { data?: { event_id?: unknown } };
    return typeof parsed.data?.event_id === 'string' ? parsed.data.event_id : null;
  } catch {
    return null;
  }
}

function trackSockets(server: HttpsServer | TlsServer, sockets: Set<Socket>, counter: { n: number }): void {
  // 'connection' fires for the raw TCP socket, before any TLS handshake.
  server.on('connection', (socket: Socket) => {
    counter.n++;
    sockets.add(socket);
    socket.once('close', () => sockets.delete(socket));
  });
}

async function listen(server: HttpsServer | TlsServer): Promise<number> {
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      server.off('error', reject);
      resolve();
    });
  });
  return (server.address() as AddressInfo).port;
}

async function shutdown(server: HttpsServer | TlsServer, sockets: Set<Socket>): Promise<void> {
  if (!server.listening) return;
  const closed = new Promise<void>((resolve) => server.close(() => resolve()));
  for (const socket of sockets) socket.destroy();
  await closed;
}

/**
 * A real HTTPS server on 127.0.0.1:0 using the test certificate. Each request is recorded
 * (with its exact body bytes) and answered by the current responder (default: 200 "ok").
 * Closed when the test ends.
 */
export async function startReceiver(t: TestContext, tls: TestTls, responder: Responder = ok, serverOptions: { readonly requestCert?: boolean; readonly rejectUnauthorized?: boolean; readonly ca?: string } = {}): Promise<Receiver> {
  let current = responder;
  const requests: RecordedRequest[] = [];
  const sockets = new Set<Socket>();
  const counter = { n: 0 };
  const waiters = new Set<() => void>();
  const server = createHttpsServer({ key: tls.keyPem, cert: tls.certPem, ...serverOptions }, (req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (chunk: Buffer) => chunks.push(chunk));
    req.on('end', () => {
      const recorded: RecordedRequest = {
        index: requests.length,
        method: req.method ?? '',
        path: req.url ?? '',
        headers: req.headers,
        body: Buffer.concat(chunks),
        receivedAt: Date.now(),
        clientCertificate: serverOptions.requestCert ? ((req.socket as TLSSocket).getPeerCertificate?.()?.fingerprint256 ?? null) || null : null,
      };
      requests.push(recorded);
      const answering = current;
      for (const wake of waiters) wake();
      void Promise.resolve()
        .then(() => answering(recorded))
        .then(
          (answer) => {
            if (answer === 'hang' || res.destroyed) return;
            recorded.answeredStatus = answer.status;
            res.writeHead(answer.status, { 'content-type': 'text/plain', ...answer.headers });
            res.end(answer.body ?? '');
          },
          () => res.destroy(),
        );
    });
  });
  trackSockets(server, sockets, counter);
  const port = await listen(server);
  const receiver: Receiver = {
    url: `https://127.0.0.1:${port}/hook`,
    port,
    requests,
    connections: () => counter.n,
    openConnections: () => sockets.size,
    respond(next) {
      current = next;
    },
    async waitForRequests(count, timeoutMs = 10_000) {
      const deadline = Date.now() + timeoutMs;
      while (requests.length < count) {
        const left = deadline - Date.now();
        if (left <= 0) throw new Error(`the receiver got ${requests.length} request(s) within ${timeoutMs} ms, expected ${count}`);
        await new Promise<void>((resolve) => {
          const timer = setTimeout(resolve, Math.min(left, 50));
          const wake = () => {
            clearTimeout(timer);
            waiters.delete(wake);
            resolve();
          };
          waiters.add(wake);
        });
      }
      return requests.slice(0, count);
    },
    requestsFor: (eventId) => requests.filter((r) => eventIdOf(r) === eventId),
    close: () => shutdown(server, sockets),
  };
  t.after(() => receiver.close());
  return receiver;
}

/** A receiver that accepts the request and never answers (until the test ends). */
export function startHangingReceiver(t: TestContext, tls: TestTls): Promise<Receiver> {
  return startReceiver(t, tls, () => 'hang');
}

export interface TricklingReceiver {
  readonly url: string;
  readonly port: number;
  /** Requests (connections that sent something) so far. */
  requests(): number;
  /** TCP connections open now (accepted and not yet closed by either side). */
  openConnections(): number;
  close(): Promise<void>;
}

/**
 * A TLS server that reads the request and answers `HTTP/1.1 200 OK` very slowly: with
 * `headersFirst` the status line and headers go out at once and then the body one byte every
 * `intervalMs`; without it, the whole answer, status line included, a byte at a time. The
 * answer never ends on its own (a 1 MiB body), so only a deadline on the whole attempt (not an
 * idle timeout) stops the client.
 */
export async function startTricklingReceiver(t: TestContext, tls: TestTls, options: { headersFirst: boolean; intervalMs?: number }): Promise<TricklingReceiver> {
  const interval = options.intervalMs ?? 50;
  const sockets = new Set<Socket>();
  const counter = { n: 0 };
  let requests = 0;
  const timers = new Set<NodeJS.Timeout>();
  const server = createTlsServer({ key: tls.keyPem, cert: tls.certPem }, (socket: TLSSocket) => {
    let started = false;
    socket.on('error', () => {});
    socket.on('data', () => {
      if (started) return;
      started = true;
      requests++;
      const head = 'HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: 1048576\r\n\r\n';
      let pending = options.headersFirst ? '' : head;
      if (options.headersFirst) socket.write(head);
      const timer = setInterval(() => {
        if (socket.destroyed) {
          clearInterval(timer);
          timers.delete(timer);
          return;
        }
        if (pending.length > 0) {
          socket.write(pending.slice(0, 1));
          pending = pending.slice(1);
        } else {
          socket.write('.');
        }
      }, interval);
      timers.add(timer);
    });
  });
  trackSockets(server, sockets, counter);
  const port = await listen(server);
  const receiver: TricklingReceiver = {
    url: `https://127.0.0.1:${port}/hook`,
    port,
    requests: () => requests,
    openConnections: () => sockets.size,
    async close() {
      for (const timer of timers) clearInterval(timer);
      timers.clear();
      await shutdown(server, sockets);
    },
  };
  t.after(() => receiver.close());
  return receiver;
}

/** One line of the status-change feed. */
export interface FeedLine {
  readonly event_id: string;
  readonly organization_id: string;
  readonly anticipation_request_id: string;
  readonly status: string;
  readonly previous_status?: string | null;
  readonly occurred_at?: string;
  readonly data?: Record<string, unknown>;
}

/** Appends lines to the feed file the relay tails. */
export function appendFeed(feedPath: string, lines: readonly FeedLine[]): void {
  appendFileSync(feedPath, lines.map((line) => JSON.stringify(line) + '\n').join(''));
}

/** A feed line with defaults for what the test does not care about. */
export function feedLine(orgId: string, eventId: string, requestId = `ar_${eventId}`, status = 'approved', extra: Partial<FeedLine> = {}): FeedLine {
  return { event_id: eventId, organization_id: orgId, anticipation_request_id: requestId, status, previous_status: 'pending', occurred_at: '2026-11-22T08:30:00.000Z', ...extra };
}

/**
 * Polls `probe` every `intervalMs` until it returns something other than undefined, null or
 * false, and returns that; fails with `what` after `timeoutMs`.
 */
export async function waitFor<T>(what: string, probe: () => T | undefined | null | false, timeoutMs = 10_000, intervalMs = 20): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = probe();
    if (value !== undefined && value !== null && value !== false) return value;
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await sleep(intervalMs);
  }
}

/** The organization's deliveries, oldest first, read through a store connection. */
export function deliveriesOf(store: Store, orgId: string): DeliveryRow[] {
  return repos(store).deliveries.list(orgId, { limit: 10_000 }).reverse();
}

/** The deliveries of one event, oldest first. */
export function deliveriesOfEvent(store: Store, orgId: string, eventId: string): DeliveryRow[] {
  return deliveriesOf(store, orgId).filter((d) => d.eventId === eventId);
}

/** Waits until the event has a delivery matching `predicate` and returns it. */
export function waitForDelivery(store: Store, orgId: string, eventId: string, predicate: (d: DeliveryRow) => boolean, what: string, timeoutMs = 10_000): Promise<DeliveryRow> {
  return waitFor(`${what} (event ${eventId})`, () => deliveriesOfEvent(store, orgId, eventId).find(predicate), timeoutMs);
}

export function attemptsOf(store: Store, deliveryId: number): AttemptRow[] {
  return repos(store).deliveries.attempts(deliveryId);
}

/**
 * Delivery settings that keep the tests fast: the dispatcher and the feed tailer poll every
 * 20 ms, no jitter, and two one-second retries (the shortest the schedule accepts).
 */
export const FAST_DELIVERY: Readonly<Record<string, string>> = {
  'delivery.pollInterval': '20ms',
  'feed.pollInterval': '20',
  'delivery.jitterPercent': '0',
  'delivery.retrySchedule': '1s,1s',
};

export interface DeliveryRig {
  readonly tls: TestTls;
  readonly relay: RunningRelay;
  /** Appends lines to the relay's feed file. */
  feed(...lines: FeedLine[]): void;
}

/**
 * A test CA, and an in-process relay that trusts it (delivery.caFile), may reach 127.0.0.1
 * (delivery.allowNetworks) and polls fast; `overrides` win over all of these.
 */
export async function startDeliveryRig(t: TestContext, overrides: Record<string, string> = {}, options: { log?: Logger } = {}): Promise<DeliveryRig> {
  const tls = createTestTls(t);
  const relay = await startRelay(t, { 'delivery.caFile': tls.caFile, 'delivery.allowNetworks': '127.0.0.1/32', ...FAST_DELIVERY, ...overrides }, options);
  return { tls, relay, feed: (...lines) => appendFeed(relay.config.feed.path, lines) };
}

/** One CONNECT a test proxy was asked for. */
export interface Tunnel {
  /** What the CONNECT asked for: HOST:PORT, an address ([v6]:port) or a name. */
  readonly authority: string;
  /** The Proxy-Authorization header it carried, if any. */
  readonly proxyAuthorization: string | undefined;
  /** The status the proxy answered. */
  readonly status: number;
}

export interface ConnectProxy {
  /** http://127.0.0.1:<port> (add credentials with proxyUrl). */
  readonly url: string;
  readonly port: number;
  /** Every CONNECT, in order of arrival. */
  readonly tunnels: Tunnel[];
  /** Requests that were not CONNECT (absolute-form proxying): a test expects none. */
  readonly plainRequests: string[];
  /** TCP connections accepted. */
  connections(): number;
  close(): Promise<void>;
}

/**
 * A real HTTP CONNECT proxy on 127.0.0.1:0, in the test: each CONNECT is recorded, answered
 * `refuse(authority)` when that returns a status (407, 403...), or 407 when `credentials`
 * ("user:password") are set and the Proxy-Authorization is not theirs; otherwise the proxy
 * connects to HOST:PORT itself (resolving a name the way this process does), answers 200 and
 * pipes both ways. Closed when the test ends.
 */
export async function startConnectProxy(t: TestContext, options: { credentials?: string; refuse?: (authority: string) => number | null } = {}): Promise<ConnectProxy> {
  const tunnels: Tunnel[] = [];
  const plainRequests: string[] = [];
  const sockets = new Set<Socket>();
  const counter = { n: 0 };
  const server = createHttpServer((req, res) => {
    plainRequests.push(`${req.method} ${req.url}`);
    res.writeHead(405).end();
  });
  const expected = options.credentials === undefined ? undefined : `Basic ${Buffer.from(options.credentials).toString('base64')}`;
  server.on('connect', (req: IncomingMessage, client: Socket, head: Buffer) => {
    sockets.add(client);
    client.on('error', () => {});
    client.once('close', () => sockets.delete(client));
    const authority = req.url ?? '';
    const proxyAuthorization = req.headers['proxy-authorization'];
    const refusal = options.refuse?.(authority) ?? (expected !== undefined && proxyAuthorization !== expected ? 407 : null);
    if (refusal !== null) {
      tunnels.push({ authority, proxyAuthorization, status: refusal });
      client.end(`HTTP/1.1 ${refusal} Refused\r\n${refusal === 407 ? 'Proxy-Authenticate: Basic realm="test"\r\n' : ''}Content-Length: 0\r\n\r\n`);
      return;
    }
    const colon = authority.lastIndexOf(':');
    const host = authority.slice(0, colon).replace(/^\[(.*)\]$/, '$1');
    const upstream = netConnect({ host, port: Number(authority.slice(colon + 1)) });
    sockets.add(upstream);
    upstream.once('close', () => sockets.delete(upstream));
    upstream.once('connect', () => {
      tunnels.push({ authority, proxyAuthorization, status: 200 });
      client.write('HTTP/1.1 200 Connection Established\r\n\r\n');
      if (head.length > 0) upstream.write(head);
      upstream.pipe(client);
      client.pipe(upstream);
    });
    upstream.on('error', () => {
      if (!tunnels.some((x) => x.authority === authority && x.status === 200)) tunnels.push({ authority, proxyAuthorization, status: 502 });
      client.end('HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n');
    });
    client.once('close', () => upstream.destroy());
    upstream.once('close', () => client.destroy());
  });
  server.on('connection', (socket: Socket) => {
    counter.n++;
    sockets.add(socket);
    socket.on('error', () => {});
    socket.once('close', () => sockets.delete(socket));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as AddressInfo).port;
  const proxy: ConnectProxy = {
    url: `http://127.0.0.1:${port}`,
    port,
    tunnels,
    plainRequests,
    connections: () => counter.n,
    async close() {
      if (!server.listening) return;
      const closed = new Promise<void>((resolve) => server.close(() => resolve()));
      for (const socket of sockets) socket.destroy();
      await closed;
    },
  };
  t.after(() => proxy.close());
  return proxy;
}

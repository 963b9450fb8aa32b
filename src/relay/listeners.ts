import { createServer, type RequestListener, type Server } from 'node:http';
import { createServer as createNetServer } from 'node:net';
import { parseListen } from '../domain/listen.ts';

/** A listener of the daemon, as its errors name it: what it serves, and the setting of its address. */
export interface Listener {
  readonly what: string;
  readonly setting: string;
}
export const ADMIN_LISTENER: Listener = { what: 'the admin API', setting: '--listen or api.listen' };
export const METRICS_LISTENER: Listener = { what: 'the metrics', setting: 'metrics.listen' };

/** A request's headers must have arrived this long after its connection opened (docs/api.md, "Limits"). */
export const HEADERS_TIMEOUT_MS = 15_000;
/** A whole request (headers and body) must have arrived this long after its connection opened. */
export const REQUEST_TIMEOUT_MS = 30_000;
/**
 * How often the server looks for requests past those times. Node's default, 30 s, lets a slow
 * request (a client that sends a byte now and then) hold its connection up to 30 s longer than
 * either: 45 s for the headers, 60 s in all.
 */
const TIMEOUT_CHECK_INTERVAL_MS = 500;

/**
 * The refusal of an address another process listens on: which setting to change, and how to see
 * who holds it. A failure at run time (exit status 1: the address may be free again at the
 * next start), not a configuration error.
 */
function addressInUse(listener: Listener, listenAddress: string, cause: unknown): Error {
  return new Error(
    `${listener.what} address ${listenAddress} is already in use (another hookrelay daemon? \`hookrelay status --listen ${listenAddress}\` tells); stop that process, or choose another address with ${listener.setting}`,
    { cause },
  );
}

/** An HTTP server for `handler`, listening on `listenAddress` (HOST:PORT) once this resolves. */
export async function listen(handler: RequestListener, listenAddress: string, listener: Listener): Promise<Server> {
  const server = createServer({ headersTimeout: HEADERS_TIMEOUT_MS, requestTimeout: REQUEST_TIMEOUT_MS, connectionsCheckingInterval: TIMEOUT_CHECK_INTERVAL_MS }, handler);
  const { host, port } = parseListen(listenAddress);
  await new Promise<void>((resolve, reject) => {
    server.once('error', (err: NodeJS.ErrnoException) => reject(err.code === 'EADDRINUSE' ? addressInUse(listener, listenAddress, err) : err));
    server.listen(port, host, () => {
      server.removeAllListeners('error');
      resolve();
    });
  });
  return server;
}

/**
 * Fails at once when another process listens on `listenAddress`, before anything is created or
 * opened (a daemon started twice by mistake must not touch the state directory first). The
 * real listener is opened later, once the services exist; a port taken in between is refused
 * the same way then.
 */
export async function probeListen(listenAddress: string, listener: Listener): Promise<void> {
  const { host, port } = parseListen(listenAddress);
  if (port === 0) return;
  const probe = createNetServer();
  await new Promise<void>((resolve, reject) => {
    probe.once('error', (err: NodeJS.ErrnoException) => reject(err.code === 'EADDRINUSE' ? addressInUse(listener, listenAddress, err) : err));
    probe.listen({ port, host, exclusive: true }, () => resolve());
  });
  await new Promise<void>((resolve) => probe.close(() => resolve()));
}

/** Stops accepting, lets requests in progress finish for up to `deadlineMs`, then cuts them. */
export async function close(server: Server, deadlineMs: number): Promise<void> {
  const closing = new Promise<void>((resolve) => server.close(() => resolve()));
  server.closeIdleConnections();
  const timer = setTimeout(() => server.closeAllConnections(), deadlineMs);
  await closing;
  clearTimeout(timer);
}

/**
 * Deliveries through an egress proxy (delivery.proxy): an undici connector that opens each
 * connection as a CONNECT tunnel, HTTPS and plain HTTP alike, after the network guard has
 * resolved and checked the webhook's name. Nothing reaches the proxy for a name the guard
 * refuses; with ProxyTarget "address" the tunnel goes to the very address the guard checked.
 *
 * A connector of our own rather than undici's ProxyAgent: ProxyAgent hands the name to the
 * proxy before anything is resolved here (the URL policy would never see the address), and
 * sends plain-HTTP requests in absolute form, which the proxy resolves and pins as it likes.
 */
import { STATUS_CODES } from 'node:http';
import { connect as netConnect, isIP, type Socket } from 'node:net';
import { connect as tlsConnect, type SecureContext } from 'node:tls';
import type { buildConnector } from 'undici';
import type { EgressProxy, ProxyTarget } from '../domain/egress-proxy.ts';
import type { NetworkGuard } from './network-guard.ts';

export const PROXY_ERROR_CODE = 'EHOOKRELAY_PROXY';

/**
 * A failure of the egress proxy, before any request reached the receiver: unreachable, closed,
 * or it refused the tunnel. Its message is for the attempt log, which the tenant reads: it
 * names neither the proxy (the operator's) nor its credentials, and quotes nothing the proxy
 * sent but its status code.
 */
export class ProxyError extends Error {
  readonly code = PROXY_ERROR_CODE;
  /** The proxy's answer to CONNECT, when it answered. */
  readonly statusCode: number | null;
  constructor(message: string, statusCode: number | null = null, cause?: unknown) {
    super(message, cause === undefined ? undefined : { cause });
    this.name = 'ProxyError';
    this.statusCode = statusCode;
  }
}

/** Most bytes of the proxy's answer to CONNECT read before giving up on it. */
const MAX_CONNECT_RESPONSE_BYTES = 16 * 1024;

/** Why a CONNECT answered `status` failed, in words an operator acts on. */
function refusedBecause(status: number): string {
  const phrase = STATUS_CODES[status] ?? 'unknown status';
  if (status === 407) return `the egress proxy asked for credentials (407 ${phrase}): the user and password in delivery.proxy are missing or wrong`;
  if (status === 403) return `the egress proxy refused the tunnel to this receiver (403 ${phrase}): its rules do not allow it`;
  return `the egress proxy refused the tunnel to this receiver (${status} ${phrase})`;
}

export interface TunnelOptions {
  readonly proxy: EgressProxy;
  readonly target: ProxyTarget;
  /** The guard of the route: resolves the webhook's name and refuses it when any address is refused. */
  readonly guard: NetworkGuard;
  /** The TLS context of every delivery connection (delivery.caFile), or undefined for Node's roots. */
  readonly secureContext: SecureContext | undefined;
  /** Longest wait for the whole connection (proxy, CONNECT, TLS), in ms. */
  readonly timeoutMs: number;
}


/**
 * Resolves `hostname` through the guard: its first checked address (an IP literal as it is,
 * checked before by the deliverer). One address, where a direct connection tries each in turn:
 * a tunnel is one request to the proxy, and the guard has checked them all.
 */
function resolveChecked(guard: NetworkGuard, hostname: string): Promise<string> {
  if (isIP(hostname) !== 0) return Promise.resolve(hostname);
  return new Promise((resolve, reject) => {
    guard.lookup(hostname, { all: true }, (err, addresses) => {
      if (err) return reject(err);
      const first = Array.isArray(addresses) ? addresses[0]?.address : addresses;
      if (first === undefined || first === '') return reject(Object.assign(new Error(`${hostname} has no address`), { code: 'ENOTFOUND' }));
      resolve(first);
    });
  });
}

/**
 * An undici `connect` function: resolve and check the webhook's host (guard), open a TCP
 * connection to the proxy, ask it to CONNECT to the checked address or the name (with
 * Proxy-Authorization when the URL has credentials), then, for https, TLS to the receiver
 * inside the tunnel, with the receiver's name as SNI and as the name its certificate must
 * carry. Hands undici the socket to speak HTTP on, or the error.
 */
export function createTunnelConnector(options: TunnelOptions): buildConnector.connector {
  const { proxy } = options;
  return function connect(params: buildConnector.Options, callback: buildConnector.Callback): void {
    const https = params.protocol === 'https:';
    const port = params.port === undefined || params.port === '' ? (https ? 443 : 80) : Number(params.port);
    const hostname = params.hostname;
    let done = false;
    let socket: Socket | null = null;
    const finish = (err: Error | null, result: Socket | null) => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      if (err !== null) {
        socket?.destroy();
        callback(err, null);
      } else callback(null, result!);
    };
    const timer = setTimeout(() => {
      finish(Object.assign(new ProxyError('no tunnel through the egress proxy within the attempt deadline'), { code: 'UND_ERR_CONNECT_TIMEOUT' }), null);
    }, options.timeoutMs);
    // The attempt has its own deadline; this one only frees the socket, and must not hold a stopping daemon.
    timer.unref();

    resolveChecked(options.guard, hostname).then((address) => {
      if (done) return;
      const host = options.target === 'address' ? address : hostname;
      const authority = `${isIP(host) === 6 ? `[${host}]` : host}:${port}`;
      const raw = netConnect({ host: proxy.hostname, port: proxy.port });
      socket = raw;
      raw.setNoDelay(true);
      // Kept for the socket's whole life (undici and TLS add their own): an error after the
      // tunnel is handed over finds this one done and is theirs to report.
      raw.on('error', (err: NodeJS.ErrnoException) => {
        finish(new ProxyError(`the egress proxy could not be reached or dropped the connection (${err.code ?? err.name})`, null, err), null);
      });
      raw.once('connect', () => {
        const lines = [`CONNECT ${authority} HTTP/1.1`, `Host: ${authority}`];
        if (proxy.authorization !== null) lines.push(`Proxy-Authorization: ${proxy.authorization}`);
        raw.write(lines.join('\r\n') + '\r\n\r\n');
      });
      let head = Buffer.alloc(0);
      const onData = (chunk: Buffer) => {
        head = Buffer.concat([head, chunk]);
        const end = head.indexOf('\r\n\r\n');
        if (end === -1) {
          if (head.length > MAX_CONNECT_RESPONSE_BYTES) finish(new ProxyError('the egress proxy answered CONNECT with a header over 16 KiB'), null);
          return;
        }
        raw.off('data', onData);
        raw.off('end', onEnd);
        const status = /^HTTP\/1\.[01] (\d{3})/.exec(head.subarray(0, Math.min(end, 64)).toString('latin1'));
        if (status === null) return finish(new ProxyError('the egress proxy answered CONNECT with something other than HTTP'), null);
        const code = Number(status[1]);
        if (code < 200 || code > 299) return finish(new ProxyError(refusedBecause(code), code), null);
        // Anything after the answer's head is the receiver's already (a plain-HTTP receiver does not speak first; a server may).
        const rest = head.subarray(end + 4);
        if (rest.length > 0) raw.unshift(rest);
        if (!https) return finish(null, raw);
        const secure = tlsConnect({
          socket: raw,
          host: hostname,
          ...(isIP(hostname) === 0 ? { servername: hostname } : {}),
          ...(options.secureContext ? { secureContext: options.secureContext } : {}),
          ALPNProtocols: ['http/1.1'],
        });
        socket = secure;
        secure.once('secureConnect', () => finish(null, secure));
        secure.once('error', (err) => finish(err, null));
      };
      const onEnd = () => finish(new ProxyError('the egress proxy closed the connection without answering CONNECT'), null);
      raw.on('data', onData);
      raw.once('end', onEnd);
    }, (err: Error) => finish(err, null));
  };
}

import type { LookupFunction } from 'node:net';
import { createSecureContext, rootCertificates, type SecureContext } from 'node:tls';
import { Agent, type Dispatcher } from 'undici';
import type { ClientCertificateMaterial } from '../domain/client-certificate.ts';
import type { EgressProxy, ProxyTarget } from '../domain/egress-proxy.ts';
import type { NetworkGuard } from './network-guard.ts';
import { createTunnelConnector } from './proxy-tunnel.ts';

export interface DeliveryClientOptions {
  /** PEM text of extra trusted CAs (delivery.caFile), added to Node's bundled roots; null for the roots alone. */
  readonly extraCa: string | null;
  /** Resolves webhook host names (the network guard's checked lookup); Node's own when absent. */
  readonly lookup?: LookupFunction;
  /**
   * Most connections kept to one origin (scheme, host and port): delivery.concurrency, since no
   * more attempts than that are ever in flight at once. Fewer are opened when fewer are needed.
   */
  readonly connectionsPerOrigin: number;
  /** Longest wait for a connection (TCP and TLS), in ms: the attempt deadline. */
  readonly connectTimeoutMs: number;
  /**
   * An egress proxy every connection goes through, in a CONNECT tunnel opened after `guard`
   * has resolved and checked the host (proxy-tunnel.ts); `lookup` is then not used.
   */
  readonly proxy?: { readonly proxy: EgressProxy; readonly target: ProxyTarget; readonly guard: NetworkGuard } | undefined;
  /**
   * A client certificate every connection presents when the receiver asks for one (mutual TLS):
   * in the TLS context, so that no connection of this client is made without it, and none of
   * another client (another certificate, or none) carries it.
   */
  readonly clientCertificate?: ClientCertificateMaterial | undefined;
}

export interface DeliveryClient {
  /** An undici dispatcher with every option of a delivery connection already set, and the send-by gate (SEND_BY). */
  readonly dispatcher: Dispatcher;
  /** Closes every kept-alive connection (the daemon is stopping, or the TLS material changed). */
  destroy(): Promise<void>;
  /** Closes its connections once the requests on them have ended (a client certificate replaced): nothing is cut short. */
  close(): Promise<void>;
}

/**
 * An idle kept-alive connection is closed after this long, or after what the receiver's own
 * `Keep-Alive: timeout=N` asks (less a second), up to IDLE_SOCKET_MAX_MS. A receiver that closes
 * idle connections sooner without saying so makes one attempt meet a closed connection: that is
 * retried at once inside the attempt (the deliverer's TRANSIENT_CODES).
 */
export const IDLE_SOCKET_MS = 10_000;
export const IDLE_SOCKET_MAX_MS = 60_000;

/**
 * One TLS secure context for every connection. With `extraCa` set, building a context means
 * parsing Node's bundled root certificates plus the operator's, which per connection, or worse
 * per attempt, dominated the cost of a delivery (docs/benchmarks.md, "Figures behind the code's choices"). Built once here, it is shared by every socket of the dispatcher.
 */
export function deliverySecureContext(extraCa: string | null, clientCertificate?: ClientCertificateMaterial): SecureContext | undefined {
  const identity = clientCertificate === undefined ? {} : { cert: clientCertificate.certificate, key: clientCertificate.privateKey };
  if (extraCa === null) return clientCertificate === undefined ? undefined : createSecureContext(identity);
  return createSecureContext({ ca: [...rootCertificates, extraCa], ...identity });
}

/**
 * The HTTP client every delivery attempt goes through: an undici Agent (a keep-alive connection
 * pool per receiver origin, HTTP/1.1, no pipelining), one TLS context built at start, and host
 * names resolved through `lookup`, which hands the socket only addresses it has checked (the
 * connection goes where the URL policy looked: no DNS rebinding between check and connect).
 * undici never follows redirects, retries nothing on its own (a POST is not idempotent) and does
 * not decompress: what delivery wants. Its own headers and body timeouts are off: an attempt has
 * one overall deadline, the deliverer's AbortSignal.
 *
 * The benchmark (scripts/bench-delivery.ts) measures this same client as the ceiling of what
 * hookrelay can deliver, so a change here shows in both.
 */
/**
 * A request option: the latest moment (performance.now()) the request's first byte may be
 * written. Checked when undici is about to write it, on the connection it got, which is the
 * last code that runs before the bytes go out: a request that got there later (its connection
 * slow to open, the process paused meanwhile) fails with NotSentInTime, and nothing of it is
 * sent. Absent: no limit.
 */
export const SEND_BY: unique symbol = Symbol('hookrelay.sendBy');
export type SendByOptions = Dispatcher.RequestOptions & { readonly [SEND_BY]?: number };

/** A request refused by the send-by gate: not one byte of it was written. */
export class NotSentInTime extends Error {
  readonly code = 'HOOKRELAY_NOT_SENT_IN_TIME';
  constructor(lateMs: number) {
    super(`not sent: its send-by time had passed ${lateMs} ms before it could be written`);
    this.name = 'NotSentInTime';
  }
}

/**
 * The send-by gate (see SEND_BY) around the handler undici's request() makes, in undici's
 * handler interface that request() speaks (onConnect...), so that undici passes it through as
 * it is: onConnect, the moment undici is about to write the request on its connection, is
 * checked against the time. (A composed interceptor speaks the other interface and converts
 * each call back and forth: it cost a quarter more client CPU per request.)
 */
function gated(handler: Dispatcher.DispatchHandler, sendBy: number): Dispatcher.DispatchHandler {
  return {
    onConnect(abort) {
      const late = performance.now() - sendBy;
      if (late > 0) abort(new NotSentInTime(Math.round(late)));
      else handler.onConnect?.(abort);
    },
    onError: (err) => handler.onError?.(err),
    onUpgrade: (statusCode, headers, socket) => handler.onUpgrade?.(statusCode, headers, socket),
    onResponseStarted: () => handler.onResponseStarted?.(),
    onHeaders: (statusCode, headers, resume, statusText) => handler.onHeaders?.(statusCode, headers, resume, statusText) ?? true,
    onData: (chunk) => handler.onData?.(chunk) ?? true,
    onComplete: (trailers) => handler.onComplete?.(trailers),
    onBodySent: (chunkSize, totalBytesSent) => handler.onBodySent?.(chunkSize, totalBytesSent),
  };
}

/** An undici Agent whose requests may carry a send-by time (SEND_BY). */
class SendByAgent extends Agent {
  override dispatch(options: Agent.DispatchOptions, handler: Dispatcher.DispatchHandler): boolean {
    const sendBy = (options as SendByOptions)[SEND_BY];
    return super.dispatch(options, sendBy === undefined ? handler : gated(handler, sendBy));
  }
}

export function createDeliveryClient(options: DeliveryClientOptions): DeliveryClient {
  const secureContext = deliverySecureContext(options.extraCa, options.clientCertificate);
  const agent = new SendByAgent({
    connections: options.connectionsPerOrigin,
    pipelining: 1,
    keepAliveTimeout: IDLE_SOCKET_MS,
    keepAliveMaxTimeout: IDLE_SOCKET_MAX_MS,
    headersTimeout: 0,
    bodyTimeout: 0,
    connect: options.proxy
      ? createTunnelConnector({ ...options.proxy, secureContext, timeoutMs: options.connectTimeoutMs })
      : {
          timeout: options.connectTimeoutMs,
          ...(secureContext ? { secureContext } : {}),
          ...(options.lookup ? { lookup: options.lookup } : {}),
        },
  });
  return {
    dispatcher: agent,
    async destroy() {
      await agent.destroy();
    },
    async close() {
      await agent.close();
    },
  };
}

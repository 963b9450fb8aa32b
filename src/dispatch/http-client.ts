import { Agent as HttpAgent } from 'node:http';
import { Agent as HttpsAgent } from 'node:https';
import type { LookupFunction } from 'node:net';
import { createSecureContext, rootCertificates, type SecureContext } from 'node:tls';
import got, { type Got } from 'got';

export interface DeliveryClientOptions {
  /** PEM text of extra trusted CAs (delivery.caFile), added to Node's bundled roots; null for the roots alone. */
  readonly extraCa: string | null;
  /** Resolves webhook host names (the network guard's checked lookup); Node's own when absent. */
  readonly lookup?: LookupFunction;
  /** Sent as `user-agent`. */
  readonly userAgent: string;
}

export interface DeliveryClient {
  /** got, with every option of a delivery attempt that does not change per request already set. */
  readonly got: Got;
  /** Closes every kept-alive connection (the daemon is stopping, or the TLS material changed). */
  destroy(): void;
}

/**
 * One TLS secure context for every connection. With `extraCa` set, building a context means
 * parsing Node's ~145 bundled root certificates plus the operator's: about 137 ms of CPU and
 * a few MB each time (measured), which per connection, or worse per attempt, dominated the cost
 * of a delivery. Built once here, it is shared by every socket of the agent.
 */
export function deliverySecureContext(extraCa: string | null): SecureContext | undefined {
  if (extraCa === null) return undefined;
  return createSecureContext({ ca: [...rootCertificates, extraCa] });
}

/**
 * The HTTP client every delivery attempt goes through: keep-alive agents (one connection pool
 * per receiver host and port, reused across attempts), one TLS context built at start, and
 * got set as delivery needs it: POST, no redirects followed, no exception on HTTP errors, no
 * retry of its own (in-attempt reconnects are p-retry's, the schedule is the database's), no
 * decompression, and host names resolved through `lookup`.
 *
 * The benchmark (scripts/bench-delivery.ts) measures this same client as the ceiling of what
 * hookrelay can deliver, so a change here shows in both.
 */
export function createDeliveryClient(options: DeliveryClientOptions): DeliveryClient {
  const secureContext = deliverySecureContext(options.extraCa);
  const agentOptions = { keepAlive: true, scheduling: 'lifo' as const };
  const http = new HttpAgent(agentOptions);
  const https = new HttpsAgent({ ...agentOptions, ...(secureContext ? { secureContext } : {}) });
  const instance = got.extend({
    method: 'POST',
    agent: { http, https },
    followRedirect: false,
    throwHttpErrors: false,
    retry: { limit: 0 },
    decompress: false,
    headers: { 'user-agent': options.userAgent },
    ...(options.lookup ? { dnsLookup: options.lookup } : {}),
  });
  return {
    got: instance,
    destroy() {
      http.destroy();
      https.destroy();
    },
  };
}

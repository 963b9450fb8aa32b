import { createHash, timingSafeEqual } from 'node:crypto';
import type { Context } from 'koa';
import { ErrorCode } from '../domain/errors.ts';
import { isLoopbackHost, parseListen } from '../domain/listen.ts';
import { AuthError, bearerCredentials } from './auth.ts';
import { requireOwnHost, type ListenerIdentity } from './host-check.ts';
import { problem } from './problem.ts';

/** What GET /metrics serves, and on which terms. */
export interface MetricsEndpoint {
  /** The bearer token scrapes must send, or null (then only a loopback listener, or an explicit opt-in, serves them). */
  readonly token: string | null;
  /** metrics.allowUnauthenticated: without a token, on any address. */
  readonly allowUnauthenticated: boolean;
  render(): Promise<{ readonly contentType: string; readonly body: string }>;
}

/**
 * Why `listener` refuses to serve metrics, or null: no token, no opt-in, and bound to an address
 * that is not loopback. Judged by the address it actually bound, not by the name it was given:
 * `localhost:8083` that resolved to a LAN address is not loopback.
 */
export function metricsRefusal(endpoint: MetricsEndpoint, listener: ListenerIdentity): string | null {
  if (endpoint.token !== null || endpoint.allowUnauthenticated) return null;
  const bound = listener.bound();
  const address = bound?.address ?? parseListen(listener.listen).host;
  if (isLoopbackHost(address)) return null;
  const where = parseListen(listener.listen).host.toLowerCase() === address.toLowerCase() ? listener.listen : `${listener.listen} (bound to ${address})`;
  return `GET /metrics is refused: this listener is at ${where}, which is not a loopback address, and no metrics token is set. Set metrics.tokenFile (or HOOKRELAY_METRICS_TOKEN), serve metrics on a loopback address of their own (metrics.listen), or set metrics.allowUnauthenticated on a network you trust`;
}

/** Compares two secrets in constant time (their SHA-256 digests, so that the lengths do not show either). */
function sameSecret(given: string, expected: string): boolean {
  const digest = (s: string) => createHash('sha256').update(s).digest();
  return timingSafeEqual(digest(given), digest(expected));
}

/**
 * The handler of GET /metrics on `listener`: a Host that does not name the listener (403, see
 * host-check.ts), the refusal (403), then the token when one is set (401), then the text
 * exposition.
 */
export function metricsHandler(endpoint: MetricsEndpoint, listener: ListenerIdentity): (ctx: Context) => Promise<void> {
  return async function serveMetrics(ctx) {
    requireOwnHost(ctx, listener, 'GET /metrics');
    const refusal = metricsRefusal(endpoint, listener);
    if (refusal !== null) throw problem(ErrorCode.forbidden, refusal);
    if (endpoint.token !== null) {
      const header = ctx.get('Authorization');
      if (header.trim() === '') throw new AuthError(ErrorCode.missingToken, 'Send the metrics token: Authorization: Bearer <metrics.token>');
      const given = bearerCredentials(header);
      if (given === null || !sameSecret(given, endpoint.token)) throw new AuthError(ErrorCode.invalidToken, 'This is not the metrics token (metrics.token or metrics.tokenFile)');
    }
    const { contentType, body } = await endpoint.render();
    ctx.type = contentType;
    ctx.body = body;
  };
}

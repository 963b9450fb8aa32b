import { createHash, timingSafeEqual } from 'node:crypto';
import type { Context } from 'koa';
import { ErrorCode } from '../domain/errors.ts';
import { AuthError, bearerCredentials } from './auth.ts';
import { problem } from './problem.ts';

/** What GET /metrics serves, and on which terms. */
export interface MetricsEndpoint {
  /** The bearer token scrapes must send, or null (then only a loopback listener, or an explicit opt-in, serves them). */
  readonly token: string | null;
  /** Why this listener refuses to serve metrics (no token on an address that is not loopback), or null. */
  readonly refusal: string | null;
  render(): Promise<{ readonly contentType: string; readonly body: string }>;
}

/** Compares two secrets in constant time (their SHA-256 digests, so that the lengths do not show either). */
function sameSecret(given: string, expected: string): boolean {
  const digest = (s: string) => createHash('sha256').update(s).digest();
  return timingSafeEqual(digest(given), digest(expected));
}

/** The handler of GET /metrics: refusal (403), then the token when one is set (401), then the text exposition. */
export function metricsHandler(endpoint: MetricsEndpoint): (ctx: Context) => Promise<void> {
  return async function serveMetrics(ctx) {
    if (endpoint.refusal !== null) throw problem(ErrorCode.forbidden, endpoint.refusal);
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

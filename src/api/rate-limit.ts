import { createHash } from 'node:crypto';
import type { Context, Middleware, Next } from 'koa';
import { ErrorCode, type HookrelayError } from '../domain/errors.ts';
import { bearerCredentials } from './auth.ts';
import { problem, writeProblem } from './problem.ts';

const MAX_TRACKED = 10_000;

/** A rate of requests: `burst` at once, refilled at `perMinute`; 0 per minute is no limit. */
export interface RateLimitOptions {
  readonly perMinute: number;
  readonly burst: number;
  /**
   * The clock refills are measured on, in ms: performance.now() by default, monotonic, so that a
   * step of the wall clock (NTP, a VM restored) neither empties every bucket for as long as it
   * stepped back (a negative refill) nor fills them all at once when it steps forward.
   */
  readonly monotonicMs?: () => number;
}

/**
 * Token buckets by key, at most MAX_TRACKED of them (the oldest is forgotten first). take()
 * spends one request of a key's bucket: null when there was one, else the seconds to wait.
 */
function tokenBuckets(options: RateLimitOptions): (key: string) => number | null {
  const buckets = new Map<string, { tokens: number; at: number }>();
  const perMs = options.perMinute / 60_000;
  const monotonicMs = options.monotonicMs ?? (() => performance.now());
  return (key) => {
    const now = monotonicMs();
    let bucket = buckets.get(key);
    if (bucket === undefined) {
      if (buckets.size >= MAX_TRACKED) buckets.delete(buckets.keys().next().value!);
      bucket = { tokens: options.burst, at: now };
      buckets.set(key, bucket);
    } else {
      bucket.tokens = Math.min(options.burst, bucket.tokens + (now - bucket.at) * perMs);
      bucket.at = now;
    }
    if (bucket.tokens < 1) return Math.max(1, Math.ceil((1 - bucket.tokens) / perMs / 1000));
    bucket.tokens -= 1;
    return null;
  };
}

function rateLimited(retryAfter: number, message: string): HookrelayError {
  return problem(ErrorCode.rateLimited, message, { retry_after_seconds: retryAfter });
}

/**
 * A token bucket per bearer token: `burst` requests at once, refilled at `perMinute`. The key
 * is a hash of the token's signed part (`header.payload`), never of the raw header or the whole
 * token, so spelling the scheme `bearer`, adding spaces or re-encoding the signature (base64url
 * has spare bits) does not buy a fresh bucket. It runs after authentication, so only verified
 * tokens get a bucket and a flood of made-up tokens cannot push real clients' buckets out.
 * `perMinute` 0 disables the limit. Refills are measured on a monotonic clock (RateLimitOptions).
 */
export function rateLimit(options: RateLimitOptions) {
  const take = tokenBuckets(options);

  return async function limitRate(ctx: Context, next: Next): Promise<void> {
    const token = options.perMinute === 0 ? null : bearerCredentials(ctx.get('Authorization'));
    if (token === null) return next();
    const signed = token.lastIndexOf('.') === -1 ? token : token.slice(0, token.lastIndexOf('.'));
    const retryAfter = take(createHash('sha256').update(signed).digest('base64url'));
    if (retryAfter !== null) {
      ctx.set('Retry-After', String(retryAfter));
      throw rateLimited(retryAfter, `Rate limit of ${options.perMinute} requests per minute exceeded for this token; retry after ${retryAfter} s`);
    }
    return next();
  };
}

/**
 * The same rate for answers 404 that no token paid for (a path that does not exist, a console
 * file that does not exist), per client address: a flood of them (a scanner, a script gone
 * wrong) is answered 429 like any other flood once the address's burst is spent, without
 * touching the per-token buckets. A 404 to a verified token (an unknown delivery, say) is
 * counted in that token's bucket instead. Must run outside the middleware that turns errors
 * into answers, so that it sees the final status.
 */
export function notFoundRateLimit(options: RateLimitOptions): Middleware {
  const take = tokenBuckets(options);
  return async function limitNotFound(ctx: Context, next: Next): Promise<void> {
    await next();
    if (options.perMinute === 0 || ctx.status !== 404 || ctx.state.principal !== undefined) return;
    const retryAfter = take(ctx.ip);
    if (retryAfter === null) return;
    ctx.set('Retry-After', String(retryAfter));
    writeProblem(
      ctx,
      rateLimited(retryAfter, `Rate limit of ${options.perMinute} requests per minute exceeded for paths that do not exist, from this address; retry after ${retryAfter} s`),
    );
  };
}

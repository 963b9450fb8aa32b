import { createHash } from 'node:crypto';
import type { Context, Next } from 'koa';
import { ErrorCode } from '../domain/errors.ts';
import { bearerCredentials } from './auth.ts';
import { problem } from './problem.ts';

const MAX_TRACKED = 10_000;

/**
 * A token bucket per bearer token: `burst` requests at once, refilled at `perMinute`. The key
 * is a hash of the token's signed part (`header.payload`), never of the raw header or the whole
 * token, so spelling the scheme `bearer`, adding spaces or re-encoding the signature (base64url
 * has spare bits) does not buy a fresh bucket. It runs after authentication, so only verified
 * tokens get a bucket and a flood of made-up tokens cannot push real clients' buckets out.
 * `perMinute` 0 disables the limit.
 *
 * Refills are measured on a monotonic clock (`monotonicMs`, performance.now() by default): a
 * step of the wall clock (NTP, a VM restored) neither empties every bucket for as long as it
 * stepped back (a negative refill) nor fills them all at once when it steps forward.
 */
export function rateLimit(options: { perMinute: number; burst: number; monotonicMs?: () => number }) {
  const monotonicMs = options.monotonicMs ?? (() => performance.now());
  const buckets = new Map<string, { tokens: number; at: number }>();
  const perMs = options.perMinute / 60_000;

  return async function limitRate(ctx: Context, next: Next): Promise<void> {
    const token = options.perMinute === 0 ? null : bearerCredentials(ctx.get('Authorization'));
    if (token === null) return next();
    const signed = token.lastIndexOf('.') === -1 ? token : token.slice(0, token.lastIndexOf('.'));
    const key = createHash('sha256').update(signed).digest('base64url');
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
    if (bucket.tokens < 1) {
      const retryAfter = Math.max(1, Math.ceil((1 - bucket.tokens) / perMs / 1000));
      ctx.set('Retry-After', String(retryAfter));
      throw problem(ErrorCode.rateLimited, `Rate limit of ${options.perMinute} requests per minute exceeded for this token; retry after ${retryAfter} s`, {
        retry_after_seconds: retryAfter,
      });
    }
    bucket.tokens -= 1;
    return next();
  };
}

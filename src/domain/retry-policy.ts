/**
 * What happens after a delivery attempt. A pure function of the attempt's result, the attempt
 * number and the policy, so the schedule is testable without a clock.
 */

export interface RetryPolicy {
  /** Delays after the 1st, 2nd, ... failed attempt, in ms; after the last one the delivery is dead. */
  readonly scheduleMs: readonly number[];
  /** Relative jitter applied to each delay (0.2 = +-20 %). */
  readonly jitter: number;
  /** Least wait after a timeout or a 429, in ms. */
  readonly minBackoffAfterThrottleMs: number;
  /** Retry-After values are clamped to this many ms. */
  readonly maxRetryAfterMs: number;
}

/** Why an attempt failed, when it did. */
export const AttemptError = {
  blocked: 'blocked_address',
  invalidUrl: 'invalid_url',
  dns: 'dns_error',
  connection: 'connection_error',
  tls: 'tls_error',
  timeout: 'timeout',
  http: 'http_status',
  /** The egress proxy could not be reached, or refused the tunnel (407, 403...): no request reached the receiver. */
  proxy: 'proxy_error',
  /**
   * The request itself cannot be sent: a header value HTTP cannot carry (an event id, and so its
   * webhook-id, holding characters beyond Latin-1). Found before anything is sent; no retry can
   * change it, so the delivery is dead at once (see decideOutcome and concernsReceiver).
   */
  invalidRequest: 'invalid_request',
  /**
   * No access token for the receiver (OAuth2): the token service refused, failed or could not
   * be reached; no request reached the receiver. Retried on the schedule; it counts towards
   * the webhook's health (the receiver's side cannot be reached as it asks).
   */
  oauth2: 'oauth2_token_failed',
  /**
   * The webhook's sealed credentials (client certificate key, OAuth2 client secret) do not open
   * here: the credential key is missing or another one (docs/operations.md). Nothing was sent;
   * retried on the schedule, and not the receiver's failure (its health is left alone).
   */
  credentials: 'credentials_unavailable',
} as const;
export type AttemptError = (typeof AttemptError)[keyof typeof AttemptError];

export interface AttemptResult {
  /** HTTP status, when a response arrived. */
  readonly statusCode: number | null;
  readonly error: AttemptError | null;
  readonly errorDetail: string | null;
  /** Up to 20 KiB of the response body. */
  readonly responseBody: string | null;
  readonly durationMs: number;
  /** Parsed Retry-After header, in ms from now. */
  readonly retryAfterMs: number | null;
  /**
   * The `webhook-timestamp` (seconds) of the request the attempt sent, or was sending when it
   * ended (a timeout, a closed connection); null when it sent nothing: refused by the URL or
   * address policy, or ended by a DNS, TLS or connection failure before any request went out.
   */
  readonly sentTimestamp: number | null;
  /** The `webhook-signature` header of that request; null when it sent nothing or sent it unsigned. */
  readonly sentSignature: string | null;
}

export type DeliveryOutcome =
  | { readonly kind: 'delivered' }
  | { readonly kind: 'retry'; readonly at: number }
  | { readonly kind: 'dead' }
  /** The receiver said 410 Gone: the webhook is disabled; this delivery is held, not dropped. */
  | { readonly kind: 'disable' };

export function isSuccess(result: AttemptResult): boolean {
  return result.statusCode !== null && result.statusCode >= 200 && result.statusCode < 300;
}

/**
 * Whether the attempt says anything about the receiver, and so counts towards its webhook's
 * health (consecutive failures, failing, disabled after delivery.disableAfter) and the
 * dispatcher's caution with it (one attempt at a time, the pause after a failure). Not an
 * `invalid_request`: the request never left hookrelay, the receiver did nothing wrong, and a
 * webhook marked failing (or disabled) for an event it never saw would hold up its healthy
 * deliveries for nothing. Nor `credentials_unavailable`: the operator's credential key is at fault.
 */
export function concernsReceiver(result: AttemptResult): boolean {
  return result.error !== AttemptError.invalidRequest && result.error !== AttemptError.credentials;
}

/**
 * @param attempt 1-based number of the attempt that produced `result` (within this delivery's schedule)
 * @param now epoch ms
 * @param random a number in [0, 1), for jitter
 */
export function decideOutcome(result: AttemptResult, attempt: number, policy: RetryPolicy, now: number, random: number): DeliveryOutcome {
  if (isSuccess(result)) return { kind: 'delivered' };
  if (result.statusCode === 410) return { kind: 'disable' };
  // What no retry can change goes dead at once, so its request's later changes go on now
  // rather than after the whole schedule (27.6 hours by default).
  if (result.error === AttemptError.invalidRequest) return { kind: 'dead' };
  const base = policy.scheduleMs[attempt - 1];
  if (base === undefined) return { kind: 'dead' };
  let delay = base * (1 + policy.jitter * (2 * random - 1));
  const throttled = result.statusCode === 429 || result.statusCode === 503;
  if (throttled && result.retryAfterMs !== null) delay = Math.max(delay, Math.min(result.retryAfterMs, policy.maxRetryAfterMs));
  if (result.statusCode === 429 || result.error === AttemptError.timeout) delay = Math.max(delay, policy.minBackoffAfterThrottleMs);
  return { kind: 'retry', at: now + Math.round(delay) };
}

/** An HTTP-date (RFC 9110 section 5.6.7) starts with a day name, in all three of its forms. */
const HTTP_DATE = /^(Mon|Tue|Wed|Thu|Fri|Sat|Sun)[a-z]*,? /i;

/** Parses Retry-After (delta-seconds or an HTTP date) into ms from `now`; null when absent or invalid. */
export function parseRetryAfter(value: string | undefined, now: number): number | null {
  if (value === undefined || value.trim() === '') return null;
  const text = value.trim();
  if (/^\d+$/.test(text)) return Number(text) * 1000;
  // Date.parse alone accepts almost anything ("1.5" is a day in 2001): only HTTP dates count.
  if (!HTTP_DATE.test(text)) return null;
  // HTTP dates are GMT; the asctime form does not say so and Date.parse would read it as local time.
  const date = Date.parse(/\bGMT$/i.test(text) ? text : `${text} GMT`);
  return Number.isNaN(date) ? null : Math.max(0, date - now);
}

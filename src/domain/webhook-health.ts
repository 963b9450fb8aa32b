import { formatDuration } from './duration.ts';
import { iso } from './iso.ts';
import type { WebhookStatus } from './types.ts';

/** Why a webhook is disabled (webhooks.disabled_reason). */
export const DisabledReason = {
  /** The receiver answered 410 Gone. */
  gone: 'gone',
  /** Failing without a success for `delivery.disableAfter`. */
  failingTooLong: 'failing_too_long',
  /** `hookrelay webhook disable`. */
  operator: 'operator',
} as const;
export type DisabledReason = (typeof DisabledReason)[keyof typeof DisabledReason];

/** A failed attempt, as the status report and the API show it. */
export interface RecentFailure {
  /** Epoch ms. */
  readonly at: number;
  readonly statusCode: number | null;
  readonly error: string;
}

/** What a sentence about a webhook's health needs. Times in epoch ms. */
export interface HealthFacts {
  readonly status: WebhookStatus;
  readonly consecutiveFailures: number;
  readonly failingSince: number | null;
  readonly lastSuccessAt: number | null;
  readonly disabledReason: string | null;
  readonly lastFailure: RecentFailure | null;
  /** `delivery.disableAfter`, ms. */
  readonly disableAfterMs: number;
}

/** Why the webhook was disabled, as a phrase ("the receiver answered 410 Gone"). */
export function disabledReasonText(reason: string | null, disableAfterMs: number): string {
  switch (reason) {
    case DisabledReason.gone:
      return 'the receiver answered 410 Gone';
    case DisabledReason.failingTooLong:
      return `it failed without a success for ${formatDuration(disableAfterMs)} (delivery.disableAfter)`;
    case DisabledReason.operator:
      return 'the operator disabled it (hookrelay webhook disable)';
    default:
      return 'no reason recorded';
  }
}

/**
 * One sentence that says what the webhook's status means and why it has it: what an operator
 * or an integrator reads first (status report, GET /webhook/get_webhook).
 */
export function healthSentence(h: HealthFacts): string {
  const last = h.lastFailure ? `; last error at ${iso(h.lastFailure.at)}: ${h.lastFailure.error}` : '';
  switch (h.status) {
    case 'disabled':
      return `disabled because ${disabledReasonText(h.disabledReason, h.disableAfterMs)}${last}. Deliveries are held, not dropped; registering the webhook again or \`hookrelay webhook enable\` sends them`;
    case 'failing': {
      const since = h.failingSince === null ? '' : ` since ${iso(h.failingSince)}`;
      const until = h.failingSince === null ? '' : `; it is disabled if no attempt succeeds by ${iso(h.failingSince + h.disableAfterMs)}`;
      return `failing${since}: ${h.consecutiveFailures} attempt(s) in a row failed${last}${until}`;
    }
    case 'active':
      if (h.consecutiveFailures > 0) return `active, but the last ${h.consecutiveFailures} attempt(s) failed${last}`;
      return h.lastSuccessAt === null ? 'active; no delivery has succeeded yet' : `active; last success at ${iso(h.lastSuccessAt)}`;
  }
}

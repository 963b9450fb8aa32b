/**
 * Retry now (DeliveryLogService.retryNow): a delivery waiting for its next attempt (failed, not
 * dead) is made due at once. What is not waiting is refused with `delivery_not_waiting`, in words
 * that say what to do instead. Per-request order is the claim's to keep (DeliveriesRepo.dueRows):
 * the delivery keeps its place before its request's later changes, which stay held back behind it.
 */
import { ErrorCode, HookrelayError } from '../domain/errors.ts';
import { WebhookStatus } from '../domain/types.ts';
import type { Store, Tx } from '../store/repos.ts';
import { DeliveryStatus, type DeliveryRow, type DeliveryWaitState } from '../store/values.ts';
import { requireWebhook } from './webhooks.ts';

/** The answer for an id the organization has no delivery with: another organization's delivery gets the same. */
export function deliveryNotFound(id: number): HookrelayError {
  return new HookrelayError(ErrorCode.deliveryNotFound, `no delivery ${id} for this organization`);
}

/** Retry-now in the caller's transaction: the delivery made due, and its ordering key for the dispatcher's wake-up. */
export async function bringForward(store: Store, tx: Tx, orgId: string, id: number): Promise<{ row: DeliveryRow; orderingKey: number }> {
  await requireWebhook(tx, orgId);
  const state = await tx.deliveries.waitState(orgId, id);
  if (state === null) throw deliveryNotFound(id);
  const refused = notWaiting(id, state);
  if (refused !== null) throw refused;
  // Retries are due by the raw clock (see DeliveriesRepo.dueRows). False: leased since the read (another instance).
  if (!(await tx.deliveries.retryNow(orgId, id, store.clock.now()))) throw notWaitingError(inFlight(id));
  return { row: (await tx.deliveries.get(orgId, id))!, orderingKey: state.orderingKey };
}

function notWaitingError(message: string): HookrelayError {
  return new HookrelayError(ErrorCode.deliveryNotWaiting, message);
}

const inFlight = (id: number) => `delivery ${id} is being attempted now (in flight): wait for that attempt's outcome; if it fails, retry it then`;

/**
 * Why a delivery cannot be retried now, and what to do instead; null when it is waiting for its
 * next attempt: failed (pending, attempted), not leased, not held back by an earlier change of
 * its request, its webhook not disabled.
 */
export function notWaiting(id: number, s: DeliveryWaitState): HookrelayError | null {
  if (s.status === DeliveryStatus.delivered) return notWaitingError(`delivery ${id} was delivered: it has no next attempt to bring forward; to send its event again, replay it`);
  if (s.status === DeliveryStatus.dead) {
    return notWaitingError(
      `delivery ${id} failed for good (dead after ${s.attempts} attempt(s)): it has no next attempt to bring forward; replay it to send its event again, as a new delivery with the same webhook-id`,
    );
  }
  if (s.leased) return notWaitingError(inFlight(id));
  if (s.webhookStatus === WebhookStatus.disabled) {
    return notWaitingError(`the webhook is disabled, so delivery ${id} is held with the others: enable the webhook and the held deliveries go out at once`);
  }
  if (s.heldBy !== null) {
    return notWaitingError(
      `delivery ${id} is queued behind delivery ${s.heldBy}, an earlier change of the same request, which goes first (a request's changes are sent in order): retry delivery ${s.heldBy} now instead`,
    );
  }
  if (s.attempts === 0) return notWaitingError(`delivery ${id} has not been attempted yet: it is queued and goes out as soon as the webhook takes it; there is no retry to bring forward`);
  return null;
}

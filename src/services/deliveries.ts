import { randomUUID } from 'node:crypto';
import { ErrorCode, HookrelayError, validationError } from '../domain/errors.ts';
import { orderingKey, testOrderingKey } from '../domain/ordering.ts';
import { isSuccess, type AttemptResult, type DeliveryOutcome } from '../domain/retry-policy.ts';
import { generateWebhookSecret } from '../domain/secrets.ts';
import { WebhookStatus } from '../domain/types.ts';
import type { Logger } from '../log.ts';
import { DeliveryStatus, type DeliveryRow, type DueDelivery, type ListFilter } from '../store/deliveries-repo.ts';
import type { Store } from '../store/store.ts';

export const TEST_EVENT_TYPE = 'webhook.test';

/** A delivery claimed for one attempt: what to send and where. */
export interface ClaimedDelivery extends DueDelivery {
  readonly secrets: readonly string[];
}

export interface DeliveryServiceOptions {
  readonly failingAfterFailures: number;
  readonly disableAfterMs: number;
  readonly secretRotationGraceMs: number;
}

/** The public state of a delivery: `failed` is a pending delivery whose last attempt failed. */
export function publicStatus(row: Pick<DeliveryRow, 'status' | 'attempts'>): 'pending' | 'failed' | 'delivered' | 'dead' {
  return row.status === DeliveryStatus.pending && row.attempts > 0 ? 'failed' : row.status;
}

function notFound(id: number | string): HookrelayError {
  return new HookrelayError(ErrorCode.deliveryNotFound, `no delivery ${id} for this organization`);
}

/**
 * The delivery outbox: claiming under a lease and recording outcomes (for the dispatcher),
 * and the delivery log, replay, recovery, test events and webhook health (for API and CLI).
 */
export function createDeliveryService(store: Store, log: Logger, options: DeliveryServiceOptions) {
  const { deliveries, webhooks } = store;
  let roundRobin = 0;

  function requireWebhook(orgId: string) {
    const webhook = webhooks.get(orgId);
    if (!webhook) throw new HookrelayError(ErrorCode.webhookNotConfigured, `organization "${orgId}" has no webhook; register one first`);
    return webhook;
  }

  return {
    /**
     * Leases up to `limit` due deliveries until now + `leaseMs`, at most `capacity(orgId)` of
     * each organization, going round the organizations from a different one each time so that
     * none waits behind another's backlog. Within an organization: oldest due first, and at
     * most one delivery per anticipation request (a later change waits for the earlier one).
     */
    claim(limit: number, leaseMs: number, capacity: (orgId: string) => number): ClaimedDelivery[] {
      return store.transaction(() => {
        const now = store.clock.now();
        const taken: ClaimedDelivery[] = [];
        const orgs = webhooks.deliverableOrgIds();
        const first = orgs.length === 0 ? 0 : roundRobin++ % orgs.length;
        for (let i = 0; i < orgs.length && taken.length < limit; i++) {
          const orgId = orgs[(first + i) % orgs.length]!;
          const room = Math.min(capacity(orgId), limit - taken.length);
          if (room <= 0) continue;
          let took = 0;
          const keys = new Set<number>();
          let secrets: readonly string[] | null = null;
          for (;;) {
            const page = deliveries.due(orgId, now, room * 4);
            for (const d of page) {
              if (took >= room) break;
              if (keys.has(d.orderingKey)) continue;
              keys.add(d.orderingKey);
              deliveries.lease(d.id, now + leaseMs, now);
              secrets ??= webhooks.signingSecrets(orgId, now);
              taken.push({ ...d, secrets });
              took++;
            }
            // A row left in the page waits behind a delivery of its request leased just now,
            // which the next query sees; so a full page with room left is worth another look.
            if (took >= room || page.length < room * 4) break;
          }
        }
        return taken;
      });
    },

    /** Records one attempt and applies its outcome, atomically. */
    complete(d: ClaimedDelivery, result: AttemptResult, outcome: DeliveryOutcome, startedAt: number): void {
      store.transaction(() => {
        const now = store.clock.now();
        const attempts = d.attempts + 1;
        deliveries.insertAttempt({
          deliveryId: d.id,
          attempt: attempts,
          startedAt,
          durationMs: result.durationMs,
          url: d.url,
          statusCode: result.statusCode,
          errorClass: result.error,
          errorDetail: result.errorDetail,
          responseBody: result.responseBody,
          outcome: outcome.kind === 'disable' ? 'disabled' : outcome.kind,
        });
        const error = result.errorDetail;
        switch (outcome.kind) {
          case 'delivered':
            deliveries.settle(d.id, { status: DeliveryStatus.delivered, attempts, nextAttemptAt: now, at: now, statusCode: result.statusCode, error: null });
            break;
          case 'retry':
            deliveries.settle(d.id, { status: DeliveryStatus.pending, attempts, nextAttemptAt: outcome.at, at: now, statusCode: result.statusCode, error });
            break;
          case 'dead':
            deliveries.settle(d.id, { status: DeliveryStatus.dead, attempts, nextAttemptAt: now, at: now, statusCode: result.statusCode, error });
            break;
          case 'disable':
            // Held, not dropped: it goes out as soon as the webhook is enabled again.
            deliveries.settle(d.id, { status: DeliveryStatus.pending, attempts, nextAttemptAt: now, at: now, statusCode: result.statusCode, error });
            webhooks.setStatus(d.orgId, WebhookStatus.disabled, 'gone', now);
            break;
        }
        if (isSuccess(result)) webhooks.recordSuccess(d.orgId, now);
        else if (outcome.kind !== 'disable') webhooks.recordFailure(d.orgId, now, options.failingAfterFailures, options.disableAfterMs);
      });
      const level = outcome.kind === 'delivered' ? 'debug' : 'warn';
      log[level](
        { delivery: d.id, org: d.orgId, eventId: d.eventId, attempt: d.attempts + 1, status: result.statusCode, error: result.error, detail: result.errorDetail, outcome: outcome.kind, ms: result.durationMs },
        'delivery attempt',
      );
    },

    /** Gives a claimed delivery back without counting an attempt (the daemon is stopping). */
    release(d: ClaimedDelivery): void {
      store.transaction(() => deliveries.release(d.id, store.clock.now()));
    },

    list(orgId: string, filter: ListFilter): DeliveryRow[] {
      return deliveries.list(orgId, filter);
    },

    get(orgId: string, id: number) {
      const row = deliveries.get(orgId, id);
      if (!row) throw notFound(id);
      return { delivery: row, attempts: deliveries.attempts(id) };
    },

    /** Queues the delivery's event again (same webhook-id) with a fresh retry schedule. */
    replay(orgId: string, id: number): DeliveryRow {
      return store.transaction(() => {
        requireWebhook(orgId);
        const row = deliveries.get(orgId, id);
        if (!row) throw notFound(id);
        const ref = deliveries.eventOf(id)!;
        if (deliveries.hasPendingDelivery(ref.eventSeq)) {
          throw validationError(`delivery ${id}'s event is already queued; wait for it or see GET /webhook/deliveries`, [{ name: 'id', reason: 'the event has a pending delivery' }]);
        }
        const now = store.clock.now();
        const newId = store.deliveries.insert(ref.eventSeq, orgId, ref.orderingKey, now);
        return deliveries.get(orgId, newId)!;
      });
    },

    /**
     * Re-queues every event of the organization received in [since, until) that was never
     * delivered: dead and undeliverable ones get a new delivery, failed ones are made due now.
     */
    recover(orgId: string, since: number, until?: number): { requeued: number; hurried: number } {
      // Without `until`: everything received so far, which may be later than the clock if it stepped back.
      const end = until ?? store.feed.receivedAt(store.clock.now()) + 1;
      if (!(since < end)) throw validationError('"since" must be before "until"', [{ name: 'since', reason: 'must be before until' }]);
      return store.transaction(() => {
        requireWebhook(orgId);
        const now = store.clock.now();
        const { from, to } = store.feed.seqRange(since, end);
        let requeued = 0;
        for (const e of deliveries.recoverable(orgId, from, to)) {
          const key = e.type === TEST_EVENT_TYPE ? testOrderingKey(orgId, e.eventId) : orderingKey(orgId, e.anticipationRequestId);
          store.deliveries.insert(e.eventSeq, orgId, key, now);
          requeued++;
        }
        return { requeued, hurried: deliveries.hurryFailed(orgId, from, to, now) };
      });
    },

    /** Stores and queues a `webhook.test` event for the organization's webhook. */
    sendTest(orgId: string): DeliveryRow {
      return store.transaction(() => {
        requireWebhook(orgId);
        const now = store.feed.receivedAt(store.clock.now());
        const id = `evt_test_${randomUUID().replaceAll('-', '')}`;
        const timestamp = new Date(now).toISOString();
        const payload = JSON.stringify({ type: TEST_EVENT_TYPE, timestamp, data: { event_id: id, organization_id: orgId, message: 'Test notification from hookrelay' } });
        const seq = deliveries.insertTestEvent(id, orgId, payload, now);
        const deliveryId = store.deliveries.insert(seq, orgId, testOrderingKey(orgId, id), now);
        return deliveries.get(orgId, deliveryId)!;
      });
    },

    /** New signing secret; the previous one keeps signing for the grace period. Returns the new secret once. */
    rotateSecret(orgId: string): { secret: string; previousSecretExpiresAt: number } {
      return store.transaction(() => {
        const webhook = webhooks.getWithSecret(orgId);
        if (!webhook) throw new HookrelayError(ErrorCode.webhookNotConfigured, `organization "${orgId}" has no webhook; register one first`);
        if (!webhook.activeHmac) throw new HookrelayError(ErrorCode.secretNotConfigured, 'HMAC signing is off for this webhook; register it with active_hmac true first');
        const now = store.clock.now();
        const secret = generateWebhookSecret();
        const previousSecretExpiresAt = now + options.secretRotationGraceMs;
        webhooks.rotateSecret(orgId, secret, previousSecretExpiresAt, now);
        return { secret, previousSecretExpiresAt };
      });
    },

    /** Operator switch: `disabled` holds deliveries; `active` releases them. */
    setEnabled(orgId: string, enabled: boolean): void {
      store.transaction(() => {
        requireWebhook(orgId);
        webhooks.setStatus(orgId, enabled ? WebhookStatus.active : WebhookStatus.disabled, enabled ? null : 'operator', store.clock.now());
      });
    },
  };
}
export type DeliveryService = ReturnType<typeof createDeliveryService>;

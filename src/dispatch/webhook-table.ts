/**
 * The dispatcher's memory of webhooks: one Hook per organization with a deliverable webhook
 * (or attempts still holding its slots), what the claim plan reads (claim-plan.ts), with the
 * attempts that hold its slots and the deliveries leased ahead for it. In memory only: it is
 * rebuilt from the database at start (the list of webhooks) and as commits report their
 * queues (drained, next retry).
 */
import type { ClaimedDelivery, OutboxService, FinishedAttempt, FlushResult } from '../services/outbox.ts';
import type { WebhookState } from './claim-plan.ts';
import type { GroupCommit } from './group-commit.ts';

/** One webhook as the dispatcher keeps it: its state for the claim plan, with its attempts and buffer. */
export interface Hook extends WebhookState {
  readonly attempts: Set<Attempt>;
  readonly ready: Array<{ readonly delivery: ClaimedDelivery; readonly leasedMono: number }>;
}

export interface Attempt {
  readonly delivery: ClaimedDelivery;
  readonly hook: Hook;
  /** Epoch ms, from the injected clock. */
  readonly startedAt: number;
  /** performance.now() at start, for the slow check (immune to clock steps). */
  readonly startedMono: number;
  readonly controller: AbortController;
  finished: FinishedAttempt | null;
  running: Promise<void> | null;
}

export function createWebhookTable(deliveries: Pick<OutboxService, 'deliverableWebhooks'>, commits: Pick<GroupCommit<Attempt>, 'giveBack' | 'request'>) {
  const hooks = new Map<string, Hook>();
  /** The list of webhooks is read again before the next commit. */
  let refreshWanted = true;
  /** Webhooks changed (re-registered, enabled): they start over as unknown at the next read. */
  const reset = new Set<string>();

  function hookFor(orgId: string): Hook {
    let hook = hooks.get(orgId);
    if (!hook) {
      hook = { orgId, deliverable: false, attempts: new Set(), ready: [], hasWork: true, retryAt: null, failing: false, proven: false, failures: 0, pausedUntil: 0, rateLimit: null, rateUntil: 0 };
      hooks.set(orgId, hook);
    }
    return hook;
  }

  /** Gives back the deliveries buffered for `hook` (at the next commit), to be claimed again. */
  function unbuffer(hook: Hook): void {
    for (const r of hook.ready) commits.giveBack(r.delivery);
    if (hook.ready.length > 0) {
      hook.hasWork = true;
      commits.request();
    }
    hook.ready.length = 0;
  }

  /** Reads which webhooks may receive deliveries (a small read, no write). */
  async function refresh(): Promise<void> {
    refreshWanted = false;
    const deliverable = await deliveries.deliverableWebhooks();
    for (const hook of hooks.values()) hook.deliverable = false;
    for (const { orgId, status, lastSuccessAt, rateLimit } of deliverable) {
      const known = hooks.has(orgId);
      const hook = hookFor(orgId);
      hook.deliverable = true;
      if (hook.rateLimit !== rateLimit) {
        // A new limit is judged anew at the next claim; deliveries claimed ahead without one go back.
        if (rateLimit !== null) unbuffer(hook);
        hook.rateLimit = rateLimit;
        hook.rateUntil = 0;
        hook.hasWork = true;
      }
      if (!known || reset.has(orgId)) {
        hook.failing = status === 'failing';
        // A webhook that was re-registered or enabled starts over as unknown.
        hook.proven = status === 'active' && lastSuccessAt !== null && !reset.has(orgId);
        hook.failures = 0;
        hook.pausedUntil = 0;
        hook.hasWork = true;
        unbuffer(hook);
      }
    }
    reset.clear();
    for (const [orgId, hook] of hooks) {
      if (hook.deliverable) continue;
      unbuffer(hook);
      if (hook.attempts.size === 0) hooks.delete(orgId);
    }
  }

  function applyDrained(drained: FlushResult['drained']): void {
    for (const { orgId, nextRetryAt } of drained) {
      const hook = hooks.get(orgId);
      if (!hook) continue;
      hook.hasWork = false;
      hook.retryAt = nextRetryAt;
    }
  }

  /**
   * Work was queued for `hook`: a change of a request with a delivery in flight or claimed
   * ahead waits behind it, so that delivery's end must bring the webhook another look. With
   * the ordering keys queued, only those deliveries; without (replay, recovery, the poll), all.
   */
  function markHoldingBack(hook: Hook, keys: ReadonlySet<number> | undefined): void {
    for (const a of hook.attempts) if (keys === undefined || keys.has(a.delivery.orderingKey)) a.delivery.holdsBack = true;
    for (const r of hook.ready) if (keys === undefined || keys.has(r.delivery.orderingKey)) r.delivery.holdsBack = true;
  }

  return {
    hooks,
    hookFor,
    unbuffer,
    refresh,
    applyDrained,
    markHoldingBack,
    get refreshWanted(): boolean {
      return refreshWanted;
    },
    /** The list is read again before the next commit; `changed`: that webhook starts over as unknown. */
    wantRefresh(changed?: string): void {
      refreshWanted = true;
      if (changed !== undefined) reset.add(changed);
    },
  };
}
export type WebhookTable = ReturnType<typeof createWebhookTable>;

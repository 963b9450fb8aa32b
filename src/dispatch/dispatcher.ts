import { setTimeout as sleep } from 'node:timers/promises';
import type { Clock } from '../domain/clock.ts';
import { decideOutcome, type RetryPolicy } from '../domain/retry-policy.ts';
import type { Logger } from '../log.ts';
import type { ClaimedDelivery, DeliveryService } from '../services/deliveries.ts';
import type { Deliverer } from './deliverer.ts';

export interface DispatcherOptions {
  readonly deliveries: DeliveryService;
  readonly deliverer: Deliverer;
  readonly policy: RetryPolicy;
  readonly clock: Clock;
  readonly log: Logger;
  /** Attempts in flight at once, in all. */
  readonly concurrency: number;
  /** Attempts in flight at once per webhook (organization). */
  readonly perWebhookConcurrency: number;
  /** Lease of a claimed delivery: longer than an attempt can take, so only a crash lets it lapse. */
  readonly leaseMs: number;
  readonly pollIntervalMs: number;
}

/**
 * Claims due deliveries under a lease and runs their attempts within a global and a
 * per-webhook concurrency cap. Schedules live in the database (next_attempt_at), so the
 * dispatcher itself holds nothing a crash could lose: a killed daemon's leases lapse and those
 * deliveries are attempted again.
 */
export function createDispatcher(options: DispatcherOptions) {
  const log = options.log.child({ subsystem: 'dispatch' });
  const inFlight = new Map<number, Promise<void>>();
  const perOrg = new Map<string, number>();
  let loop: Promise<void> | null = null;
  let wakeUp: (() => void) | null = null;

  function wake(): void {
    wakeUp?.();
  }

  async function attempt(d: ClaimedDelivery, signal: AbortSignal): Promise<void> {
    const startedAt = options.clock.now();
    try {
      const result = await options.deliverer.deliver({ url: d.url, eventId: d.eventId, payload: d.payload, secrets: d.secrets }, signal);
      if (signal.aborted && result.statusCode === null) {
        // Cut short by shutdown: not the receiver's fault, so it does not count.
        options.deliveries.release(d);
        return;
      }
      const outcome = decideOutcome(result, d.attempts + 1, options.policy, options.clock.now(), Math.random());
      options.deliveries.complete(d, result, outcome, startedAt);
    } catch (err) {
      log.error({ err, delivery: d.id }, 'recording a delivery attempt failed; its lease will lapse and it will be attempted again');
    }
  }

  function fill(signal: AbortSignal): void {
    const free = options.concurrency - inFlight.size;
    if (free <= 0) return;
    const claimed = options.deliveries.claim(free, options.leaseMs, (orgId) => options.perWebhookConcurrency - (perOrg.get(orgId) ?? 0));
    for (const d of claimed) {
      perOrg.set(d.orgId, (perOrg.get(d.orgId) ?? 0) + 1);
      const running = attempt(d, signal).finally(() => {
        inFlight.delete(d.id);
        const left = (perOrg.get(d.orgId) ?? 1) - 1;
        if (left === 0) perOrg.delete(d.orgId);
        else perOrg.set(d.orgId, left);
        wake();
      });
      inFlight.set(d.id, running);
    }
  }

  async function run(loopSignal: AbortSignal, attemptSignal: AbortSignal): Promise<void> {
    while (!loopSignal.aborted) {
      try {
        fill(attemptSignal);
      } catch (err) {
        log.error({ err }, 'claiming deliveries failed; trying again shortly');
      }
      await new Promise<void>((resolve) => {
        wakeUp = resolve;
        sleep(options.pollIntervalMs, undefined, { signal: loopSignal }).then(resolve, resolve);
      });
      wakeUp = null;
    }
  }

  let loopController: AbortController | null = null;
  let attemptController: AbortController | null = null;

  return {
    start(): void {
      loopController = new AbortController();
      attemptController = new AbortController();
      loop = run(loopController.signal, attemptController.signal);
      log.info({ concurrency: options.concurrency, perWebhook: options.perWebhookConcurrency }, 'dispatcher started');
    },
    /** Looks for due deliveries now (new events were queued, a webhook was enabled). */
    wake,
    /**
     * Stops claiming, lets attempts in flight finish for up to `drainMs`, then aborts the rest
     * (they are released, not counted, and go out after the next start).
     */
    async stop(drainMs = 10_000): Promise<void> {
      if (!loopController || !attemptController) return;
      const attempts = attemptController;
      loopController.abort();
      wake();
      await loop;
      const timer = setTimeout(() => attempts.abort(), drainMs);
      await Promise.allSettled([...inFlight.values()]);
      clearTimeout(timer);
      loopController = null;
      attemptController = null;
      log.info('dispatcher stopped');
    },
  };
}
export type Dispatcher = ReturnType<typeof createDispatcher>;

/**
 * The attempts in flight and the slots they hold. One attempt is three steps: start (take a
 * slot, build what it needs), run (the deliverer's request), judge (its outcome, and what it
 * teaches about the webhook); the outcome then goes to the group commit, and the slot is freed
 * by the dispatcher once that commit has recorded it.
 */
import type { Clock } from '../domain/clock.ts';
import { concernsReceiver, decideOutcome, isSuccess, type AttemptResult, type DeliveryOutcome, type RetryPolicy } from '../domain/retry-policy.ts';
import { loggableUrl } from '../domain/validation.ts';
import { iso } from '../domain/iso.ts';
import type { Logger } from '../log.ts';
import type { ClaimedDelivery, FinishedAttempt } from '../services/outbox.ts';
import { getsOneAttemptAtATime, pauseAfterFailure } from './claim-plan.ts';
import type { AttemptTracing } from './attempt-tracing.ts';
import { NotSentInTime, type Deliverer } from './deliverer.ts';
import type { GroupCommit } from './group-commit.ts';
import type { Attempt, Hook, WebhookTable } from './webhook-table.ts';

export interface AttemptRunnerOptions {
  readonly deliverer: Pick<Deliverer, 'deliver'>;
  readonly policy: RetryPolicy;
  readonly clock: Clock;
  readonly log: Logger;
  readonly commits: Pick<GroupCommit<Attempt>, 'attemptEnded' | 'attemptCutShort' | 'giveBack' | 'request'>;
  readonly webhooks: WebhookTable;
  /** Attempts in flight at once, in all. */
  readonly concurrency: number;
  /** Attempts in flight at once per webhook, while it answers. */
  readonly perWebhook: number;
  /** An attempt running this long (ms) makes its webhook slow. */
  readonly slowMs: number;
  /** A delivery claimed ahead that waited longer than this (ms) is given back rather than started: its lease must outlast its attempt. */
  readonly claimedAheadMaxAgeMs: number;
  /** The attempts' spans while tracing is on (null: off, and an attempt costs a null check). */
  readonly tracing?: AttemptTracing | null;
  /** How long a claim's lease lasts (ms), counted from before its commit began. */
  readonly leaseMs: number;
  /** The deliverer's deadline for one attempt (ms, `delivery.timeout`); 0: the lease only must not have lapsed (less the margin). */
  readonly attemptTimeoutMs: number;
}

/**
 * What an attempt's start leaves of its lease at the least, beyond the attempt's own deadline
 * (ms): the instances' clocks may differ by this much (the lease is written in the claiming
 * instance's clock and judged lapsed in another's), and timers fire a little late.
 */
export const LEASE_SEND_MARGIN_MS = 1000;

/**
 * How long after its claim's commit began (ms) a delivery may still start its attempt: so
 * long that the attempt, which the deliverer ends at `attemptTimeoutMs`, ends before the lease
 * does, with LEASE_SEND_MARGIN_MS to spare. Throws when the lease leaves no such time (a
 * configuration that could never send anything).
 */
export function startWithinMs(leaseMs: number, attemptTimeoutMs: number): number {
  const within = leaseMs - attemptTimeoutMs - LEASE_SEND_MARGIN_MS;
  if (within <= 0) throw new Error(`a lease of ${leaseMs} ms leaves no time to start an attempt of up to ${attemptTimeoutMs} ms (margin ${LEASE_SEND_MARGIN_MS} ms)`);
  return within;
}

export class AttemptRunner {
  readonly #options: AttemptRunnerOptions;
  /** Slots held: attempts running, or ended and waiting for the commit of their outcome. */
  #slotsUsed = 0;
  /** Attempts whose run has not ended yet (stop() waits for them). */
  readonly #inFlight = new Set<Attempt>();
  /** See startWithinMs. */
  readonly #startWithinMs: number;

  readonly #tracing: AttemptTracing | null;

  constructor(options: AttemptRunnerOptions) {
    this.#options = options;
    this.#tracing = options.tracing ?? null;
    this.#startWithinMs = startWithinMs(options.leaseMs, options.attemptTimeoutMs);
  }

  /** Slots free in this instance (may be negative for a moment: see the plan's free slots). */
  get freeSlots(): number {
    return this.#options.concurrency - this.#slotsUsed;
  }

  get slotFree(): boolean {
    return this.#slotsUsed < this.#options.concurrency;
  }

  /**
   * Takes a slot of `hook` and runs one attempt of `d`, whose lease counts from
   * `leaseStartMono` (performance.now() before its claim's commit began) at the latest; true
   * when it started. A delivery whose lease could lapse before its attempt ends is not sent:
   * another instance may take it over once the lease lapses, and send it, or a later change
   * of its request, meanwhile, so that what this one sends would reach the receiver late, out
   * of order. It is given back (under its lease, fenced by the store: a lease already taken
   * over is left alone) and claimed again under a fresh lease. This happens when the commit
   * that claimed it took most of the lease (the database answered late, the process was
   * paused), or it waited too long claimed ahead. The database fences the outcome (see
   * DeliveriesRepo.settle); only this check keeps the request itself from going out late.
   */
  start(d: ClaimedDelivery, hook: Hook, leaseStartMono: number): boolean {
    const sinceLease = performance.now() - leaseStartMono;
    if (sinceLease > this.#startWithinMs) {
      this.#options.log.warn(
        { delivery: d.id, org: d.orgId, eventId: d.eventId, sinceLeaseMs: Math.round(sinceLease), startWithinMs: this.#startWithinMs },
        'a claimed delivery is not sent: its lease could lapse before its attempt ends (its claim took too long, or the process was paused); it is given back and claimed again',
      );
      this.#options.commits.giveBack(d);
      hook.hasWork = true;
      this.#options.commits.request();
      return false;
    }
    const a: Attempt = {
      delivery: d,
      hook,
      startedAt: this.#options.clock.now(),
      startedMono: performance.now(),
      sendBy: leaseStartMono + this.#startWithinMs,
      controller: new AbortController(),
      finished: null,
      running: null,
    };
    hook.attempts.add(a);
    this.#slotsUsed++;
    this.#inFlight.add(a);
    a.running = this.#run(a).finally(() => this.#inFlight.delete(a));
    return true;
  }

  /** After the commit that recorded `a` (or gave it back). */
  freeSlot(a: Attempt): void {
    if (a.hook.attempts.delete(a)) this.#slotsUsed--;
  }

  /**
   * Starts deliveries claimed ahead while slots are free: one webhook at a time in a rotating
   * order, each up to its own slots, so that a webhook with a deep queue does not take every
   * slot that frees. A webhook held to one attempt at a time starts nothing from here (it has
   * nothing claimed ahead: what it had went back when it failed).
   */
  startClaimedAhead(mono: number): void {
    let free = this.freeSlots;
    if (free <= 0) return;
    const waiting = [...this.#options.webhooks.hooks.values()].filter((h) => h.claimedAhead.length > 0);
    if (waiting.length === 0) return;
    const { perWebhook, slowMs, claimedAheadMaxAgeMs, commits } = this.#options;
    const first = this.#options.webhooks.nextRoundStart(waiting.length);
    let progress = true;
    while (free > 0 && progress) {
      progress = false;
      for (let i = 0; i < waiting.length && free > 0; i++) {
        const hook = waiting[(first + i) % waiting.length]!;
        if (hook.claimedAhead.length === 0 || hook.attempts.size >= perWebhook || getsOneAttemptAtATime(hook, mono, slowMs)) continue;
        const next = hook.claimedAhead.shift()!;
        if (mono - next.leasedMono > claimedAheadMaxAgeMs) {
          commits.giveBack(next.delivery);
          commits.request();
        } else if (this.start(next.delivery, hook, next.leaseStartMono)) free--;
        progress = true;
      }
    }
  }

  /**
   * Lets the attempts in flight finish for up to `deadlineMs`, then aborts the rest (cut short:
   * given back, not counted) and waits for their hand-over to the group commit.
   */
  async drain(deadlineMs: number): Promise<void> {
    if (this.#inFlight.size === 0) return;
    const all = () => Promise.allSettled([...this.#inFlight].map((a) => a.running));
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([all(), new Promise<void>((resolve) => (timer = setTimeout(resolve, deadlineMs)))]);
    clearTimeout(timer);
    for (const a of this.#inFlight) a.controller.abort(new Error('the daemon is stopping'));
    await all();
  }

  /** One attempt: the request, then its judgement, handed to the group commit. */
  async #run(a: Attempt): Promise<void> {
    const d = a.delivery;
    const traced = this.#tracing === null ? null : this.#tracing.start(d);
    let result: AttemptResult;
    try {
      result = await this.#options.deliverer.deliver(
        { orgId: d.orgId, url: d.url, eventId: d.eventId, payload: d.payload, secrets: d.secrets, headers: d.headers, clientCertificate: d.clientCertificate, oauth2: d.oauth2, trace: traced?.headers, sendBy: a.sendBy },
        a.controller.signal,
      );
    } catch (err) {
      if (err instanceof NotSentInTime) {
        // Its send-by time passed before its first byte could go out: nothing was sent, so it
        // is no attempt; given back under its lease and claimed again (see start()).
        this.#options.log.warn({ delivery: d.id, org: d.orgId, eventId: d.eventId, detail: err.message }, 'a claimed delivery is not sent: its lease could lapse before its attempt ends (its connection opened late, or the process was paused); it is given back and claimed again');
      } else {
        // deliver() reports every other failure as a result; reaching here is a bug. Give the delivery back uncounted.
        this.#options.log.error({ err, delivery: d.id }, 'delivery attempt threw; the delivery is given back and will be attempted again');
      }
      traced?.span.end();
      this.#options.commits.attemptCutShort(a);
      return;
    }
    const finished = this.#judge(a, result);
    traced?.end(result, finished === null ? null : finished.outcome);
    if (finished === null) this.#options.commits.attemptCutShort(a);
    else {
      a.finished = finished;
      this.#options.commits.attemptEnded(a);
    }
  }

  /** The attempt's outcome, once its webhook has learned from it; null when shutdown cut it short (not the receiver's fault, so it does not count). */
  #judge(a: Attempt, result: AttemptResult): FinishedAttempt | null {
    if (a.controller.signal.aborted && result.statusCode === null) return null;
    const d = a.delivery;
    const now = this.#options.clock.now();
    const outcome = decideOutcome(result, d.attempts + 1, this.#options.policy, now, Math.random());
    this.#learn(a.hook, result, outcome, d.url, now);
    return { delivery: d, result, outcome, startedAt: a.startedAt };
  }

  /** What a finished attempt teaches about its webhook (in memory; the database keeps its own health columns). */
  #learn(hook: Hook, result: AttemptResult, outcome: DeliveryOutcome, url: string, now: number): void {
    if (isSuccess(result)) {
      hook.failing = false;
      hook.proven = true;
      hook.failures = 0;
      hook.pausedUntil = 0;
      return;
    }
    // A request that could not be sent says nothing of the receiver: no pause, no caution.
    if (!concernsReceiver(result)) return;
    // What was claimed ahead goes back: a failing webhook gets one attempt at a time.
    this.#options.webhooks.returnClaimedAhead(hook);
    if (outcome.kind === 'disable') {
      hook.deliverable = false;
      this.#options.webhooks.wantRefresh();
      return;
    }
    hook.failing = true;
    hook.failures++;
    const pause = pauseAfterFailure(hook.failures, result.statusCode, result.retryAfterMs, this.#options.policy.maxRetryAfterMs);
    const until = performance.now() + pause;
    if (pause > 0 && until > hook.pausedUntil) {
      hook.pausedUntil = until;
      const throttled = result.statusCode === 429 || result.statusCode === 503;
      this.#options.log.info(
        { org: hook.orgId, url: loggableUrl(url), until: iso(now + pause), failures: hook.failures, status: result.statusCode },
        throttled ? 'webhook asked to slow down: paused' : 'webhook failing: paused before its next attempt',
      );
    }
  }
}

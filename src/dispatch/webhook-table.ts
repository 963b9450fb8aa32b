/**
 * The dispatcher's memory of webhooks: one Hook per organization with a deliverable webhook
 * (or attempts still holding its slots), what the claim plan reads (claim-plan.ts), with the
 * attempts that hold its slots and the deliveries claimed ahead for it. In memory only: it is
 * rebuilt from the database at start (the list of webhooks) and as commits report their
 * queues (drained, next retry).
 */
import type { ClaimedDelivery, OutboxService, FinishedAttempt, FlushResult } from '../services/outbox.ts';
import type { DeliverableWebhook } from '../store/values.ts';
import type { WebhookState } from './claim-plan.ts';
import type { GroupCommit } from './group-commit.ts';

/** A delivery leased ahead for a healthy webhook, waiting in memory for one of its slots. */
export interface ClaimedAhead {
  readonly delivery: ClaimedDelivery;
  /** performance.now() when its lease was taken: one that waited too long is given back, not started. */
  readonly leasedMono: number;
  /** performance.now() before the claim's commit began, which its lease counts from at the latest (see AttemptRunner.start). */
  readonly leaseStartMono: number;
}

/** One webhook as the dispatcher keeps it: its state for the claim plan, with its attempts and the deliveries claimed ahead. */
export interface Hook extends WebhookState {
  readonly attempts: Set<Attempt>;
  readonly claimedAhead: ClaimedAhead[];
}

export interface Attempt {
  readonly delivery: ClaimedDelivery;
  readonly hook: Hook;
  /** Epoch ms, from the injected clock. */
  readonly startedAt: number;
  /** performance.now() at start, for the slow check (immune to clock steps). */
  readonly startedMono: number;
  /** performance.now() after which its request must not start going out (DeliveryRequest.sendBy). */
  readonly sendBy: number;
  readonly controller: AbortController;
  /** Set once the attempt has ended with an outcome (it keeps its slot until that is committed). */
  finished: FinishedAttempt | null;
  /** The attempt's run, from its start to its hand-over to the group commit (stop() waits for it). */
  running: Promise<void> | null;
}

export class WebhookTable {
  /** Wake-ups counted (woken()): their order against the reads of a commit. */
  #wakes = 0;
  /** By organization id. */
  readonly hooks = new Map<string, Hook>();
  readonly #deliveries: Pick<OutboxService, 'deliverableWebhooks'>;
  readonly #commits: Pick<GroupCommit<Attempt>, 'giveBack' | 'request'>;
  /** The list of webhooks is read again before the next commit. */
  #refreshWanted = true;
  /** Webhooks changed (re-registered, enabled): they start over as unknown at the next read. */
  readonly #startingOver = new Set<string>();
  /** Where the next round over the webhooks starts (see nextRoundStart). */
  #rotation = 0;

  constructor(deliveries: Pick<OutboxService, 'deliverableWebhooks'>, commits: Pick<GroupCommit<Attempt>, 'giveBack' | 'request'>) {
    this.#deliveries = deliveries;
    this.#commits = commits;
  }

  /** The list is read again before the next commit. */
  get refreshWanted(): boolean {
    return this.#refreshWanted;
  }

  /** The list is read again before the next commit; `changed`: that webhook starts over as unknown. */
  wantRefresh(changed?: string): void {
    this.#refreshWanted = true;
    if (changed !== undefined) this.#startingOver.add(changed);
  }

  /**
   * The index in a list of `count` webhooks where the next round starts: it moves on at each
   * call (each commit's claim plan, each start of deliveries claimed ahead), so no webhook
   * always comes last.
   */
  nextRoundStart(count: number): number {
    return this.#rotation++ % count;
  }

  hookFor(orgId: string): Hook {
    let hook = this.hooks.get(orgId);
    if (!hook) {
      hook = { orgId, deliverable: false, attempts: new Set(), claimedAhead: [], hasWork: true, wokenAt: 0, retryAt: null, failing: false, proven: false, failures: 0, pausedUntil: 0, rateLimit: null, rateUntil: 0 };
      this.hooks.set(orgId, hook);
    }
    return hook;
  }

  /** Gives back the deliveries claimed ahead for `hook` (at the next commit), to be claimed again. */
  returnClaimedAhead(hook: Hook): void {
    for (const r of hook.claimedAhead) this.#commits.giveBack(r.delivery);
    if (hook.claimedAhead.length > 0) {
      hook.hasWork = true;
      this.#commits.request();
    }
    hook.claimedAhead.length = 0;
  }

  /** Reads which webhooks may receive deliveries (a small read, no write). */
  async refresh(): Promise<void> {
    this.#refreshWanted = false;
    const deliverable = await this.#deliveries.deliverableWebhooks();
    for (const hook of this.hooks.values()) hook.deliverable = false;
    for (const webhook of deliverable) this.#update(webhook);
    this.#startingOver.clear();
    for (const [orgId, hook] of this.hooks) {
      if (hook.deliverable) continue;
      this.returnClaimedAhead(hook);
      if (hook.attempts.size === 0) this.hooks.delete(orgId);
    }
  }

  /** One webhook of the list just read. */
  #update({ orgId, status, lastSuccessAt, rateLimit }: DeliverableWebhook): void {
    const known = this.hooks.has(orgId);
    const hook = this.hookFor(orgId);
    hook.deliverable = true;
    if (hook.rateLimit !== rateLimit) {
      // A new limit is judged anew at the next claim; deliveries claimed ahead without one go back.
      if (rateLimit !== null) this.returnClaimedAhead(hook);
      hook.rateLimit = rateLimit;
      hook.rateUntil = 0;
      hook.hasWork = true;
    }
    if (!known || this.#startingOver.has(orgId)) {
      hook.failing = status === 'failing';
      // A webhook that was re-registered or enabled starts over as unknown.
      hook.proven = status === 'active' && lastSuccessAt !== null && !this.#startingOver.has(orgId);
      hook.failures = 0;
      hook.pausedUntil = 0;
      hook.hasWork = true;
      this.returnClaimedAhead(hook);
    }
  }

  /**
   * Work queued for `hook` now (a wake-up): it has work, and a read of its queue that began
   * before this moment cannot say it has none (noteDrained's `readFrom`).
   */
  woken(hook: Hook): void {
    hook.hasWork = true;
    hook.wokenAt = ++this.#wakes;
  }

  /** The wake-ups so far: a commit notes it when it starts, before its reads (noteDrained's `readFrom`). */
  wakeMark(): number {
    return this.#wakes;
  }

  /**
   * Queues read to their end: no work until something wakes them, but their next retry. A
   * webhook woken after `readFrom` (the wakeMark() taken before the read) keeps its work: the
   * read may predate what woke it (a change committed while the read ran), and clearing it
   * would lose that wake-up until the next poll.
   */
  noteDrained(drained: FlushResult['drained'], readFrom = Number.POSITIVE_INFINITY): void {
    for (const { orgId, nextRetryAt } of drained) {
      const hook = this.hooks.get(orgId);
      if (!hook) continue;
      hook.retryAt = nextRetryAt;
      if (hook.wokenAt > readFrom) continue;
      hook.hasWork = false;
    }
  }

  /**
   * Work was queued for `hook`: a change of a request with a delivery in flight or claimed
   * ahead waits behind it, so that delivery's end must bring the webhook another look. With
   * the ordering keys queued, only those deliveries; without (replay, recovery, the poll), all.
   */
  markHoldingBack(hook: Hook, keys: ReadonlySet<number> | undefined): void {
    for (const a of hook.attempts) if (keys === undefined || keys.has(a.delivery.orderingKey)) a.delivery.holdsBack = true;
    for (const r of hook.claimedAhead) if (keys === undefined || keys.has(r.delivery.orderingKey)) r.delivery.holdsBack = true;
  }
}

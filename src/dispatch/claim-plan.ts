/**
 * The fairness plan: which organizations a commit claims for, and how many deliveries each.
 *
 * Pure: no I/O, no timers, no store, no clock of its own. The dispatcher keeps what it knows of
 * each webhook in memory (WebhookState) and passes the moments in (`now`, epoch ms from the
 * injected clock; `mono`, performance.now() ms for pauses and slowness, immune to clock steps).
 * Nothing here changes the state it is given; the unit tests (test/dispatch/claim-plan.test.ts)
 * build states by hand.
 */
import type { ClaimWanted } from '../services/outbox.ts';

/** After a webhook's second failure in a row, the wait before its next attempt doubles from this... */
export const WEBHOOK_PAUSE_BASE_MS = 500;
/** ...up to this. */
export const WEBHOOK_PAUSE_MAX_MS = 5_000;

/** How long a webhook waits before its next attempt after `failures` failed attempts in a row. */
export function webhookPauseMs(failures: number): number {
  if (failures < 2) return 0;
  return Math.min(WEBHOOK_PAUSE_BASE_MS * 2 ** (failures - 2), WEBHOOK_PAUSE_MAX_MS);
}

/**
 * The pause (ms, 0: none) before a failing webhook's next attempt: the pause after `failures`
 * failures in a row, or a 429 or 503's Retry-After (capped at `maxRetryAfterMs`) when longer.
 */
export function pauseAfterFailure(failures: number, statusCode: number | null, retryAfterMs: number | null, maxRetryAfterMs: number): number {
  const pause = webhookPauseMs(failures);
  if ((statusCode === 429 || statusCode === 503) && retryAfterMs !== null) return Math.max(pause, Math.min(retryAfterMs, maxRetryAfterMs));
  return pause;
}

/** What the plan reads of an attempt holding a slot. */
export interface AttemptState {
  /** performance.now() at its start. */
  readonly startedMono: number;
  /** Null while it runs; set once it has ended (it keeps its slot until its outcome is committed). */
  readonly finished: unknown;
}

/** What the dispatcher knows of one webhook; in memory only, rebuilt from the database at start. */
export interface WebhookState {
  readonly orgId: string;
  /** In the last list of webhooks that are not disabled. */
  deliverable: boolean;
  /** Attempts that hold a slot of this webhook: running, or ended and waiting for their group commit. Oldest first. */
  readonly attempts: ReadonlySet<AttemptState>;
  /**
   * Deliveries claimed (leased) ahead for this healthy webhook, oldest first, started as its
   * slots free up: one claim query serves several attempts. At most perWebhookConcurrency.
   */
  readonly claimedAhead: readonly unknown[];
  /** It may have due deliveries that were not claimed yet. */
  hasWork: boolean;
  /** The wake-up count (WebhookTable.woken) when work was last queued for it; 0: never. */
  wokenAt: number;
  /** When its next known retry falls due (epoch ms), once its queue was read to the end. */
  retryAt: number | null;
  /** Its last attempt failed: one attempt at a time until one succeeds. */
  failing: boolean;
  /** It has answered an attempt with success (in this process, or as the database remembers it): it may have all its slots. */
  proven: boolean;
  /** Failed attempts in a row. */
  failures: number;
  /** No attempt starts before this (performance.now() ms): a Retry-After, or the pause after failures. */
  pausedUntil: number;
  /**
   * Its rate limit (deliveries per second), as the last list of webhooks said; null: none. A
   * webhook with one claims only what starts at once (nothing ahead), and what it claims
   * starts at once or is given back: the limit counts a delivery when it is claimed.
   */
  rateLimit: number | null;
  /** Its rate limit is reached: nothing of it is claimed before this (performance.now() ms). */
  rateUntil: number;
}

/** The fixed rules of a dispatcher, from its options. */
export interface ClaimRules {
  /** Attempts in flight at once per webhook, while it answers (`delivery.perWebhookConcurrency`). */
  readonly perWebhook: number;
  /** Slots that failing or slow webhooks may take together (half of `delivery.concurrency`, at least 1). */
  readonly failingOrSlowCap: number;
  /** An attempt running this long (ms) makes its webhook slow. */
  readonly slowMs: number;
  /** Several instances share the database (PostgreSQL): claim only what can start here now. */
  readonly sharedDatabase: boolean;
}

/** The slots failing or slow webhooks may take together: half of `concurrency`, at least one. */
export function failingOrSlowCapOf(concurrency: number): number {
  return Math.max(1, Math.floor(concurrency / 2));
}

/** Its oldest attempt has been running for `slowMs` or more. */
export function isSlow(hook: WebhookState, mono: number, slowMs: number): boolean {
  for (const a of hook.attempts) return a.finished === null && mono - a.startedMono >= slowMs;
  return false;
}

/**
 * Held to one attempt at a time: failing or slow (these share at most half of the slots), or
 * not yet known to answer (so that a receiver that hangs from its first request holds one
 * slot, not its whole share).
 */
export function getsOneAttemptAtATime(hook: WebhookState, mono: number, slowMs: number): boolean {
  return hook.failing || !hook.proven || isSlow(hook, mono, slowMs);
}

/** Its next known retry has fallen due while nothing holds it back: it has work again (the caller clears `retryAt`). */
export function retryFellDue(hook: WebhookState, now: number, mono: number): boolean {
  return hook.deliverable && hook.pausedUntil <= mono && hook.rateUntil <= mono && hook.retryAt !== null && hook.retryAt <= now;
}

/** Where a delivery a commit just claimed goes (see placeClaimed). */
export type Placement = 'start' | 'keep-ahead' | 'give-back';

/**
 * What becomes of a delivery a commit just claimed for `hook`: `start` now, `keep-ahead`
 * (leased ahead, started as a slot frees), or `give-back` (a rate-limited webhook without a
 * free slot: the claim counted it against the limit, so it is sent now or never later, as a
 * late start would crowd the next second's).
 *
 * @param slotFreeHere a slot is free in this instance (slots used < `delivery.concurrency`)
 */
export function placeClaimed(rules: ClaimRules, hook: WebhookState, mono: number, slotFreeHere: boolean): Placement {
  if (getsOneAttemptAtATime(hook, mono, rules.slowMs)) return hook.attempts.size === 0 && hook.claimedAhead.length === 0 ? 'start' : 'keep-ahead';
  if (hook.rateLimit === null) return 'keep-ahead';
  return hook.attempts.size < rules.perWebhook && slotFreeHere ? 'start' : 'give-back';
}

/**
 * How long (ms) until something of `hooks` becomes due without a wake-up: a known retry (wall
 * clock, `now`), or the end of a pause or a reached rate limit for a webhook with work
 * (monotonic, `mono`). Infinity: nothing. Only moments still to come: what is due already
 * waits for a slot, and the end of an attempt (which frees one) asks for a commit anyway.
 */
export function nextWakeDelay(hooks: Iterable<WebhookState>, now: number, mono: number): number {
  let delay = Infinity;
  for (const hook of hooks) {
    if (!hook.deliverable) continue;
    // A pause and a reached rate limit both hold its claims back.
    const paused = Math.max(hook.pausedUntil, hook.rateUntil) - mono;
    if (hook.hasWork && paused > 0) delay = Math.min(delay, paused);
    if (hook.retryAt !== null) {
      const at = Math.max(hook.retryAt - now, paused);
      if (at > 0) delay = Math.min(delay, at);
    }
  }
  return delay;
}

/**
 * Slots of failing or slow webhooks still taken once the commit has recorded what ended:
 * attempts still running, less those cut short and given back in it (`cutShort`).
 */
export function failingOrSlowInFlight(hooks: Iterable<WebhookState>, mono: number, slowMs: number, cutShort: readonly AttemptState[]): number {
  let used = 0;
  for (const hook of hooks) {
    if (hook.attempts.size === 0 || !(hook.failing || isSlow(hook, mono, slowMs))) continue;
    for (const a of hook.attempts) if (a.finished === null && !cutShort.includes(a)) used++;
  }
  return used;
}

/** The webhooks that may claim now, each group in the rotated order (see planClaims). */
interface Candidates {
  /** Not yet known to answer: one delivery each. */
  readonly untried: ClaimWanted[];
  /** Failing or slow: one delivery each, within the half of the slots these share. */
  readonly failingOrSlow: ClaimWanted[];
  /** Answering well: up to their slots, and as many again claimed ahead (none ahead when rate-limited). */
  readonly healthy: ClaimWanted[];
}

function candidatesOf(rules: ClaimRules, hooks: readonly WebhookState[], first: number, mono: number): Candidates {
  const perWebhook = rules.perWebhook;
  const found: Candidates = { untried: [], failingOrSlow: [], healthy: [] };
  for (let i = 0; i < hooks.length; i++) {
    const hook = hooks[(first + i) % hooks.length]!;
    if (!hook.deliverable || hook.pausedUntil > mono || hook.rateUntil > mono || !hook.hasWork) continue;
    const rateFlag = hook.rateLimit !== null ? { rateLimited: true } : {};
    if (getsOneAttemptAtATime(hook, mono, rules.slowMs)) {
      if (hook.attempts.size === 0 && hook.claimedAhead.length === 0) (hook.failing || hook.proven ? found.failingOrSlow : found.untried).push({ orgId: hook.orgId, upTo: 1, cap: 1, ...rateFlag });
      continue;
    }
    const held = hook.attempts.size + hook.claimedAhead.length;
    if (hook.rateLimit !== null) {
      // Nothing claimed ahead: a delivery counts against the limit when it is claimed, so it
      // must start then (see the dispatcher's placement of what a commit claimed).
      const claimable = perWebhook - held;
      if (claimable > 0) found.healthy.push({ orgId: hook.orgId, upTo: claimable, cap: claimable, rateLimited: true });
      continue;
    }
    const claimable = 2 * perWebhook - held;
    if (held === 0 || claimable >= Math.ceil(perWebhook / 2)) found.healthy.push({ orgId: hook.orgId, upTo: claimable, cap: Math.max(0, perWebhook - held) });
  }
  return found;
}

/**
 * The organizations to claim for now, each with how many deliveries to lease. Webhooks held
 * to one attempt at a time come first, one each while slots are free: webhooks not yet known
 * to answer (they may well be healthy), then failing or slow ones while the half of the slots
 * these may hold together lasts; then the healthy ones, whose deliveries claimed ahead are
 * topped up to their slots plus as many again once they have run half down. Each group in the
 * order of `hooks` rotated to start at `first`: the caller moves `first` on from one commit to
 * the next, so no webhook always comes last.
 *
 * Skipped: webhooks not deliverable (disabled), paused, at their rate limit, or without work.
 *
 * @param first index in `hooks` where this commit's order starts (0 when `hooks` is empty)
 * @param freeSlots slots free in this instance once the commit has recorded what ended
 * @param failingOrSlowUsed slots failing or slow webhooks hold (see failingOrSlowInFlight)
 */
export function planClaims(rules: ClaimRules, hooks: readonly WebhookState[], first: number, mono: number, freeSlots: number, failingOrSlowUsed: number): ClaimWanted[] {
  const { untried, failingOrSlow, healthy } = candidatesOf(rules, hooks, first, mono);
  // A delivery of a webhook held to one attempt starts as soon as it is claimed: it needs a free slot.
  let freeLeft = freeSlots;
  let failingOrSlowLeft = rules.failingOrSlowCap - failingOrSlowUsed;
  const wanted: ClaimWanted[] = [];
  for (const w of untried) {
    if (freeLeft <= 0) break;
    freeLeft--;
    wanted.push(w);
  }
  for (const w of failingOrSlow) {
    if (freeLeft <= 0 || failingOrSlowLeft <= 0) break;
    freeLeft--;
    failingOrSlowLeft--;
    wanted.push(w);
  }
  if (rules.sharedDatabase) {
    // Each healthy webhook's claim is capped to the slots free here, handed out in the
    // rotating order, after what the ones held to one attempt took.
    const capped: ClaimWanted[] = [];
    for (const w of healthy) {
      if (freeLeft <= 0) break;
      const cap = Math.min(w.cap ?? w.upTo, freeLeft);
      if (cap <= 0) continue;
      freeLeft -= cap;
      capped.push({ ...w, cap });
    }
    return wanted.concat(capped);
  }
  // One instance: a healthy webhook claims ahead, but one with a rate limit only what the
  // slots free now can start.
  const rest: ClaimWanted[] = [];
  for (const w of healthy) {
    if (w.rateLimited !== true) rest.push(w);
    else if (freeLeft > 0) {
      const cap = Math.min(w.upTo, freeLeft);
      freeLeft -= cap;
      rest.push({ ...w, upTo: cap, cap });
    }
  }
  return wanted.concat(rest);
}

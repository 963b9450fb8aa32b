/**
 * Unit tests of the claim plan (src/dispatch/claim-plan.ts), a pure module: webhook states built
 * by hand, the plan read back. Rotation fairness, the global and per-webhook caps, the half of
 * the slots for failing or slow webhooks, unknown webhooks first, rate-limited webhooks claiming
 * only what starts at once, disabled and paused webhooks skipped, the shared-database caps,
 * and the rules around the plan (pauses, placement of what was claimed, the wake-up delay).
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import {
  getsOneAttemptAtATime,
  isSlow,
  failingOrSlowCapOf,
  nextWakeDelay,
  pauseAfterFailure,
  placeClaimed,
  planClaims,
  retryFellDue,
  failingOrSlowInFlight,
  webhookPauseMs,
  WEBHOOK_PAUSE_BASE_MS,
  WEBHOOK_PAUSE_MAX_MS,
  type AttemptState,
  type ClaimRules,
  type WebhookState,
} from '../../src/dispatch/claim-plan.ts';

const MONO = 1_000_000;
const NOW = 1_700_000_000_000;

/** A healthy webhook with work, nothing in flight, nothing claimed ahead; `over` changes what the test needs. */
function hook(orgId: string, over: Partial<Omit<WebhookState, 'attempts' | 'claimedAhead'>> & { running?: number; runningSince?: number; ended?: number; claimedAhead?: number } = {}): WebhookState {
  const { running = 0, runningSince = MONO, ended = 0, claimedAhead = 0, ...rest } = over;
  const attempts = new Set<AttemptState>();
  for (let i = 0; i < running; i++) attempts.add({ startedMono: runningSince, finished: null });
  for (let i = 0; i < ended; i++) attempts.add({ startedMono: runningSince, finished: {} });
  return {
    orgId,
    deliverable: true,
    attempts,
    claimedAhead: Array.from({ length: claimedAhead }, () => ({})),
    hasWork: true,
    wokenAt: 0,
    retryAt: null,
    failing: false,
    proven: true,
    failures: 0,
    pausedUntil: 0,
    rateLimit: null,
    rateUntil: 0,
    ...rest,
  };
}

function rules(over: Partial<ClaimRules> = {}): ClaimRules {
  return { perWebhook: 4, failingOrSlowCap: failingOrSlowCapOf(8), slowMs: 2_000, sharedDatabase: false, ...over };
}

/** orgId -> [upTo, cap] of the plan, in plan order. */
function summary(wanted: ReturnType<typeof planClaims>): Array<[string, number, number | undefined]> {
  return wanted.map((w) => [w.orgId, w.upTo, w.cap]);
}

describe('rotation', () => {
  test('each webhook comes first in turn as the cursor moves on, in the order of the list', () => {
    const hooks = ['a', 'b', 'c'].map((o) => hook(o));
    const orders = [0, 1, 2, 3].map((first) => planClaims(rules(), hooks, first % hooks.length, MONO, 8, 0).map((w) => w.orgId));
    assert.deepEqual(orders, [
      ['a', 'b', 'c'],
      ['b', 'c', 'a'],
      ['c', 'a', 'b'],
      ['a', 'b', 'c'],
    ]);
  });

  test('with fewer free slots than webhooks held to one attempt, the rotation decides who is served: over a full turn, each one is', () => {
    const hooks = ['a', 'b', 'c', 'd'].map((o) => hook(o, { proven: false }));
    const served = new Map<string, number>();
    for (let first = 0; first < hooks.length; first++) {
      const wanted = planClaims(rules(), hooks, first, MONO, 1, 0);
      assert.equal(wanted.length, 1);
      served.set(wanted[0]!.orgId, (served.get(wanted[0]!.orgId) ?? 0) + 1);
    }
    assert.deepEqual([...served.entries()].sort(), [
      ['a', 1],
      ['b', 1],
      ['c', 1],
      ['d', 1],
    ]);
  });

  test('no webhooks: an empty plan', () => {
    assert.deepEqual(planClaims(rules(), [], 0, MONO, 8, 0), []);
  });
});

describe('healthy webhooks and the per-webhook cap', () => {
  test('an empty healthy webhook claims up to twice its slots, capped to its slots', () => {
    assert.deepEqual(summary(planClaims(rules(), [hook('a')], 0, MONO, 8, 0)), [['a', 8, 4]]);
  });

  test('its deliveries claimed ahead are topped up only once they have run half down', () => {
    // perWebhook 4: upTo = 8 - held, claimed again when upTo >= 2.
    assert.deepEqual(summary(planClaims(rules(), [hook('a', { running: 4, claimedAhead: 3 })], 0, MONO, 8, 0)), []);
    assert.deepEqual(summary(planClaims(rules(), [hook('a', { running: 4, claimedAhead: 2 })], 0, MONO, 8, 0)), [['a', 2, 0]]);
    assert.deepEqual(summary(planClaims(rules(), [hook('a', { running: 1 })], 0, MONO, 8, 0)), [['a', 7, 3]]);
  });

  test('without work, or disabled, or paused, or at its rate limit: skipped', () => {
    const hooks = [
      hook('idle', { hasWork: false }),
      hook('disabled', { deliverable: false }),
      hook('paused', { pausedUntil: MONO + 1 }),
      hook('at-its-limit', { rateLimit: 10, rateUntil: MONO + 1 }),
      hook('ok'),
    ];
    assert.deepEqual(
      planClaims(rules(), hooks, 0, MONO, 8, 0).map((w) => w.orgId),
      ['ok'],
    );
    // A pause that has ended no longer holds it back.
    assert.deepEqual(
      planClaims(rules(), [hook('paused', { pausedUntil: MONO })], 0, MONO, 8, 0).map((w) => w.orgId),
      ['paused'],
    );
  });

  test('one instance: healthy webhooks claim ahead whatever the free slots (what is claimed ahead waits for slots)', () => {
    assert.deepEqual(summary(planClaims(rules(), [hook('a'), hook('b')], 0, MONO, 1, 0)), [
      ['a', 8, 4],
      ['b', 8, 4],
    ]);
  });
});

describe('webhooks held to one attempt at a time: unknown, failing, slow', () => {
  test('a webhook not yet known to answer gets one attempt, ahead of the healthy ones, and none while it has one', () => {
    const hooks = [hook('healthy'), hook('new', { proven: false })];
    assert.deepEqual(summary(planClaims(rules(), hooks, 0, MONO, 8, 0)), [
      ['new', 1, 1],
      ['healthy', 8, 4],
    ]);
    assert.deepEqual(summary(planClaims(rules(), [hook('new', { proven: false, running: 1 })], 0, MONO, 8, 0)), []);
  });

  test('failing webhooks together take at most half of the slots; unknown ones come first and count against the free slots', () => {
    const failing = ['f1', 'f2', 'f3', 'f4', 'f5', 'f6'].map((o) => hook(o, { failing: true }));
    // concurrency 8: half is 4.
    assert.deepEqual(
      planClaims(rules(), failing, 0, MONO, 8, 0).map((w) => w.orgId),
      ['f1', 'f2', 'f3', 'f4'],
    );
    // Three of their slots already taken: one more.
    assert.deepEqual(
      planClaims(rules(), failing, 0, MONO, 8, 3).map((w) => w.orgId),
      ['f1'],
    );
    // Two free slots, an unknown webhook takes the first.
    assert.deepEqual(
      planClaims(rules(), [...failing, hook('new', { proven: false })], 0, MONO, 2, 0).map((w) => w.orgId),
      ['new', 'f1'],
    );
    // No free slot: no webhook held to one attempt claims.
    assert.deepEqual(planClaims(rules(), [...failing, hook('new', { proven: false })], 0, MONO, 0, 0), []);
  });

  test('a webhook whose oldest attempt runs for slowMs is slow: held to one attempt, and its slots count as failing or slow', () => {
    const slow = hook('slow', { running: 2, runningSince: MONO - 2_000 });
    const young = hook('young', { running: 2, runningSince: MONO - 1_999 });
    assert.equal(isSlow(slow, MONO, 2_000), true);
    assert.equal(isSlow(young, MONO, 2_000), false);
    assert.equal(getsOneAttemptAtATime(slow, MONO, 2_000), true);
    assert.equal(getsOneAttemptAtATime(young, MONO, 2_000), false);
    // An attempt that has ended (waiting for its commit) is not slow.
    assert.equal(isSlow(hook('ended', { ended: 1, runningSince: MONO - 10_000 }), MONO, 2_000), false);
    // Slow with attempts in flight: nothing more for it; the young one tops up.
    assert.deepEqual(summary(planClaims(rules(), [slow, young], 0, MONO, 8, 0)), [['young', 6, 2]]);
    const failing = hook('failing', { failing: true, running: 1 });
    assert.equal(failingOrSlowInFlight([slow, young, failing], MONO, 2_000, []), 3);
    // What the commit gives back no longer holds a slot.
    const back = [...slow.attempts][0]!;
    assert.equal(failingOrSlowInFlight([slow, young, failing], MONO, 2_000, [back]), 2);
  });

  test('failingOrSlowCapOf: half of the slots, at least one', () => {
    assert.deepEqual([1, 2, 3, 8, 9].map(failingOrSlowCapOf), [1, 1, 1, 4, 4]);
  });
});

describe('rate-limited webhooks', () => {
  test('one instance: a rate-limited webhook claims nothing ahead, only what the free slots can start now', () => {
    const hooks = [hook('plain'), hook('rated', { rateLimit: 5 })];
    assert.deepEqual(planClaims(rules(), hooks, 0, MONO, 3, 0), [
      { orgId: 'plain', upTo: 8, cap: 4 },
      { orgId: 'rated', upTo: 3, cap: 3, rateLimited: true },
    ]);
    assert.deepEqual(planClaims(rules(), [hook('rated', { rateLimit: 5, running: 4 })], 0, MONO, 3, 0), []);
    assert.deepEqual(planClaims(rules(), [hook('rated', { rateLimit: 5 })], 0, MONO, 0, 0), []);
  });

  test('a webhook held to one attempt with a rate limit says so in its claim', () => {
    assert.deepEqual(planClaims(rules(), [hook('new', { proven: false, rateLimit: 5 })], 0, MONO, 8, 0), [{ orgId: 'new', upTo: 1, cap: 1, rateLimited: true }]);
  });
});

describe('shared database', () => {
  test('each healthy claim is capped to the slots free here, handed out in the rotating order', () => {
    const shared = rules({ sharedDatabase: true });
    const hooks = [hook('a'), hook('b'), hook('c')];
    assert.deepEqual(summary(planClaims(shared, hooks, 0, MONO, 6, 0)), [
      ['a', 8, 4],
      ['b', 8, 2],
    ]);
    assert.deepEqual(summary(planClaims(shared, hooks, 2, MONO, 6, 0)), [
      ['c', 8, 4],
      ['a', 8, 2],
    ]);
    // Webhooks held to one attempt take their slot first.
    assert.deepEqual(summary(planClaims(shared, [hook('a'), hook('new', { proven: false })], 0, MONO, 3, 0)), [
      ['new', 1, 1],
      ['a', 8, 2],
    ]);
    // A webhook whose own slots are all taken claims nothing.
    assert.deepEqual(summary(planClaims(shared, [hook('full', { running: 4 }), hook('b')], 0, MONO, 3, 0)), [['b', 8, 3]]);
  });
});

describe('rules around the plan', () => {
  test('webhookPauseMs: none for one failure, then doubling from the base up to the maximum', () => {
    assert.equal(webhookPauseMs(0), 0);
    assert.equal(webhookPauseMs(1), 0);
    assert.equal(webhookPauseMs(2), WEBHOOK_PAUSE_BASE_MS);
    assert.equal(webhookPauseMs(3), 2 * WEBHOOK_PAUSE_BASE_MS);
    assert.equal(webhookPauseMs(50), WEBHOOK_PAUSE_MAX_MS);
  });

  test("pauseAfterFailure: a 429 or 503's Retry-After when longer, capped; other statuses ignore it", () => {
    assert.equal(pauseAfterFailure(1, 429, 3_000, 60_000), 3_000);
    assert.equal(pauseAfterFailure(1, 503, 120_000, 60_000), 60_000);
    assert.equal(pauseAfterFailure(3, 429, 10, 60_000), webhookPauseMs(3));
    assert.equal(pauseAfterFailure(1, 500, 3_000, 60_000), 0);
    assert.equal(pauseAfterFailure(1, null, null, 60_000), 0);
  });

  test('placeClaimed: a webhook held to one attempt starts its one delivery; a healthy one keeps it ahead; a rate-limited one starts or gives back', () => {
    const r = rules();
    assert.equal(placeClaimed(r, hook('new', { proven: false }), MONO, true), 'start');
    assert.equal(placeClaimed(r, hook('new', { proven: false, running: 1 }), MONO, true), 'keep-ahead');
    assert.equal(placeClaimed(r, hook('a'), MONO, true), 'keep-ahead');
    assert.equal(placeClaimed(r, hook('rated', { rateLimit: 5 }), MONO, true), 'start');
    assert.equal(placeClaimed(r, hook('rated', { rateLimit: 5 }), MONO, false), 'give-back');
    assert.equal(placeClaimed(r, hook('rated', { rateLimit: 5, running: 4 }), MONO, true), 'give-back');
  });

  test('retryFellDue: a known retry now due, unless the webhook is disabled, paused or at its rate limit', () => {
    assert.equal(retryFellDue(hook('a', { retryAt: NOW }), NOW, MONO), true);
    assert.equal(retryFellDue(hook('a', { retryAt: NOW + 1 }), NOW, MONO), false);
    assert.equal(retryFellDue(hook('a', { retryAt: null }), NOW, MONO), false);
    assert.equal(retryFellDue(hook('a', { retryAt: NOW, deliverable: false }), NOW, MONO), false);
    assert.equal(retryFellDue(hook('a', { retryAt: NOW, pausedUntil: MONO + 1 }), NOW, MONO), false);
    assert.equal(retryFellDue(hook('a', { retryAt: NOW, rateUntil: MONO + 1 }), NOW, MONO), false);
  });

  test('nextWakeDelay: the earliest retry or end of a pause still to come; disabled webhooks and past moments ignored', () => {
    assert.equal(nextWakeDelay([hook('a', { hasWork: false })], NOW, MONO), Infinity);
    assert.equal(nextWakeDelay([hook('a', { retryAt: NOW + 500 }), hook('b', { pausedUntil: MONO + 200 })], NOW, MONO), 200);
    // A pause holds back a retry that falls due during it.
    assert.equal(nextWakeDelay([hook('a', { hasWork: false, retryAt: NOW + 100, pausedUntil: MONO + 300 })], NOW, MONO), 300);
    assert.equal(nextWakeDelay([hook('a', { rateUntil: MONO + 40 })], NOW, MONO), 40);
    assert.equal(nextWakeDelay([hook('a', { retryAt: NOW + 50, deliverable: false })], NOW, MONO), Infinity);
    assert.equal(nextWakeDelay([hook('a', { retryAt: NOW - 1, pausedUntil: MONO - 1 })], NOW, MONO), Infinity);
  });
});

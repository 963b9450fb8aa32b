/**
 * Unit tests of the dispatcher (src/dispatch/dispatcher.ts) on its own, without the relay: a
 * real SQLite store on a temp file with the outbox service the daemon uses (so claims, leases
 * and rate limits are the real ones), the work signal ingestion notifies, and an in-process
 * deliverer (our Deliverer interface) whose answers each test gives at once or holds.
 *
 * What a user relies on: nothing is sent before its lease is committed, and each delivery is
 * sent once; a webhook gets its own slots and no more, within the global cap; a failing
 * webhook gets one attempt at a time and waits between them while others keep their slots; a
 * rate limit holds back claims, not only sends; stop() lets attempts finish within its deadline,
 * gives back the rest uncounted and leaves nothing leased; announced work goes out at once, the
 * poll finds what nobody announced, and an idle dispatcher writes nothing.
 */
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { test, type TestContext } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { loadConfig } from '../../src/config/load.ts';
import { WEBHOOK_PAUSE_BASE_MS } from '../../src/dispatch/claim-plan.ts';
import { NotSentInTime, type DeliveryRequest } from '../../src/dispatch/deliverer.ts';
import { createDispatcher, type Dispatcher, type DispatcherOptions } from '../../src/dispatch/dispatcher.ts';
import { systemClock, type Clock } from '../../src/domain/clock.ts';
import { AttemptError, type AttemptResult, type RetryPolicy } from '../../src/domain/retry-policy.ts';
import { createIngestService } from '../../src/services/ingest.ts';
import type { FlushWork } from '../../src/services/outbox.ts';
import { createServices } from '../../src/services/services.ts';
import { createWorkSignal, nobodyListens, type WorkSignal } from '../../src/services/work-signal.ts';
import { openSqliteStore, type SqliteStore } from '../../src/store/sqlite/store.ts';
import { silentLog, tempDir } from '../helpers/helpers.ts';
import { waitFor } from '../helpers/receivers.ts';
import { BY_TEST } from '../helpers/audit-helpers.ts';

function answer(statusCode: number): AttemptResult {
  const ok = statusCode >= 200 && statusCode < 300;
  return { statusCode, error: ok ? null : AttemptError.http, errorDetail: ok ? null : `HTTP ${statusCode}`, responseBody: '', durationMs: 1, retryAfterMs: null, sentTimestamp: 1, sentSignature: null };
}
const OK = answer(200);
const FAILED = answer(500);
/** What the deliverer reports for an attempt the daemon's shutdown aborted. */
const CUT_SHORT: AttemptResult = { statusCode: null, error: AttemptError.connection, errorDetail: 'aborted: the daemon is stopping', responseBody: null, durationMs: 1, retryAfterMs: null, sentTimestamp: null, sentSignature: null };

/** Retries an hour away: a failed delivery does not come back within a test unless the test says so. */
const FAR_RETRIES: RetryPolicy = { scheduleMs: [3_600_000], jitter: 0, minBackoffAfterThrottleMs: 60_000, maxRetryAfterMs: 3_600_000 };

/** One request the dispatcher made. */
interface Request {
  readonly orgId: string;
  readonly eventId: string;
  /** performance.now() when it arrived. */
  readonly at: number;
  answered: boolean;
  answer(result: AttemptResult): void;
}

/**
 * An in-process deliverer: records each request, counts what is in flight (in all and per
 * webhook, with the most ever seen), and answers as `answerAtOnce` says (null: held until the
 * test answers). A shutdown abort ends a held request as the real deliverer does.
 */
class TestDeliverer {
  readonly requests: Request[] = [];
  readonly inFlight = new Map<string, number>();
  readonly mostInFlight = new Map<string, number>();
  mostInFlightInAll = 0;
  #inFlightInAll = 0;
  answerAtOnce: (orgId: string, eventId: string) => AttemptResult | null = () => OK;
  /** Called as a request arrives, before any answer. */
  onRequest: (r: Request) => void = () => {};

  deliver(request: DeliveryRequest, shutdown?: AbortSignal): Promise<AttemptResult> {
    return new Promise((resolve) => {
      const { orgId, eventId } = request;
      const n = (this.inFlight.get(orgId) ?? 0) + 1;
      this.inFlight.set(orgId, n);
      this.mostInFlight.set(orgId, Math.max(n, this.mostInFlight.get(orgId) ?? 0));
      this.mostInFlightInAll = Math.max(this.mostInFlightInAll, ++this.#inFlightInAll);
      const r: Request = {
        orgId,
        eventId,
        at: performance.now(),
        answered: false,
        answer: (result) => {
          if (r.answered) return;
          r.answered = true;
          this.inFlight.set(orgId, this.inFlight.get(orgId)! - 1);
          this.#inFlightInAll--;
          resolve(result);
        },
      };
      this.requests.push(r);
      shutdown?.addEventListener('abort', () => r.answer(CUT_SHORT), { once: true });
      this.onRequest(r);
      const now = this.answerAtOnce(orgId, eventId);
      if (now !== null) r.answer(now);
    });
  }

  held(orgId?: string): Request[] {
    return this.requests.filter((r) => !r.answered && (orgId === undefined || r.orgId === orgId));
  }

  /** Starts counting the most in flight anew. */
  resetMost(): void {
    this.mostInFlight.clear();
    this.mostInFlightInAll = 0;
  }
}

/** A delivery as the database has it. */
interface Row {
  readonly eventId: string;
  readonly status: string;
  readonly attempts: number;
  /** Epoch ms; null: not leased. */
  readonly leaseExpiresAt: number | null;
}

interface RigOptions {
  /** Organizations with a webhook, and its rate limit (deliveries per second) if any. */
  readonly orgs: Readonly<Record<string, number | null>>;
  readonly clock?: Clock;
  readonly dispatcher?: Partial<Omit<DispatcherOptions, 'deliveries' | 'deliverer' | 'clock' | 'log' | 'work'>>;
  /** Runs after each write transaction has committed, before the dispatcher hears of it: a slow answer of the database. */
  readonly afterFlush?: (work: FlushWork) => Promise<void>;
}

/** The dispatcher's options unless a test says otherwise: polls a minute apart (only wake-ups explain a prompt delivery), no attempt counts as slow. */
const DEFAULTS = { concurrency: 8, perWebhookConcurrency: 4, leaseMs: 30_000, pollIntervalMs: 60_000, groupCommitMs: 5, slowAttemptMs: 60_000, policy: FAR_RETRIES } as const;

async function startRig(t: TestContext, options: RigOptions) {
  const clock = options.clock ?? systemClock;
  const store: SqliteStore = openSqliteStore(join(tempDir(t, 'hookrelay-dispatcher-'), 'hookrelay.db'), clock);
  t.after(() => store.close());
  const work = createWorkSignal();
  const config = loadConfig({ env: {}, overrides: { stateDir: tempDir(t), 'delivery.allowNetworks': '127.0.0.1/32' } });
  const services = createServices(store, config, silentLog, work);
  for (const [orgId, rateLimit] of Object.entries(options.orgs)) {
    await services.orgs.add(BY_TEST, { id: orgId });
    await services.webhooks.register(BY_TEST, orgId, { webhook_url: `https://127.0.0.1:9/${orgId}`, rate_limit: rateLimit });
  }
  const deliverer = new TestDeliverer();
  const outbox = services.outbox;
  /** Every write transaction the dispatcher asked for, every read for due work, and the organizations each claim or read was for. */
  const seen = { flushes: [] as FlushWork[], peeks: 0, claimedFor: [] as string[] };
  const dispatcherOptions: DispatcherOptions = {
    ...DEFAULTS,
    ...options.dispatcher,
    deliveries: {
      flush: (w, o) => {
        seen.flushes.push(w);
        for (const { orgId } of w.claim?.wanted ?? []) seen.claimedFor.push(orgId);
        const afterFlush = options.afterFlush;
        if (afterFlush === undefined) return outbox.flush(w, o);
        return outbox.flush(w, o).then(async (result) => {
          await afterFlush(w);
          return result;
        });
      },
      peek: (orgIds) => {
        seen.peeks++;
        seen.claimedFor.push(...orgIds);
        return outbox.peek(orgIds);
      },
      deliverableWebhooks: () => outbox.deliverableWebhooks(),
      logDeliveredSummary: () => outbox.logDeliveredSummary(),
    },
    deliverer,
    clock,
    log: silentLog,
    work,
  };
  const started: Dispatcher[] = [];
  /** A dispatcher over this store, started; stopped when the test ends. */
  const startDispatcher = (): Dispatcher => {
    const dispatcher = createDispatcher(dispatcherOptions);
    started.push(dispatcher);
    dispatcher.start();
    return dispatcher;
  };
  t.after(async () => {
    for (const d of started) await d.stop(0);
  });

  let line = 0;
  /** Queues `count` events for `orgId`, each a request of its own; ingestion announces them unless `signal` is nobodyListens (another process). */
  const queue = async (orgId: string, count: number, prefix: string, signal: WorkSignal = work): Promise<string[]> => {
    const ids = Array.from({ length: count }, (_, i) => `${prefix}_${i}`);
    const lines = ids.map((id) => ({ bytes: Buffer.from(JSON.stringify({ organization_id: orgId, anticipation_request_id: `ar_${id}`, status: 'approved', event_id: id })), position: line++ }));
    await createIngestService(store, silentLog, signal).ingest('test', lines, null);
    return ids;
  };
  const rows = (orgId: string): Row[] =>
    store.db
      .prepare('SELECT e.id AS eventId, d.status, d.attempts, d.lease_expires_at AS leaseExpiresAt FROM deliveries d JOIN events e ON e.seq = d.event_seq WHERE d.org_id = ? ORDER BY d.id')
      .all(orgId) as Row[];
  const row = (orgId: string, eventId: string): Row | undefined => rows(orgId).find((r) => r.eventId === eventId);
  const delivered = (orgId: string): number => rows(orgId).filter((r) => r.status === 'delivered').length;
  /** Delivers one event to each of `orgIds`: a webhook not yet known to answer gets one attempt at a time until it has answered once. */
  const makeKnown = async (...orgIds: string[]): Promise<void> => {
    for (const orgId of orgIds) await queue(orgId, 1, `evt_known_${orgId}`);
    await waitFor('a first delivery to each webhook', () => orgIds.every((o) => delivered(o) === 1));
  };
  return { store, clock, deliverer, seen, startDispatcher, queue, rows, row, delivered, makeKnown };
}

test('claim and lease: a request goes out only once its delivery is leased in the database, for longer than an attempt; each is sent once and recorded', async (t) => {
  const rig = await startRig(t, { orgs: { 'org-a': null } });
  rig.startDispatcher();
  const leaseLeftWhenSent: number[] = [];
  rig.deliverer.onRequest = (r) => leaseLeftWhenSent.push((rig.row(r.orgId, r.eventId)?.leaseExpiresAt ?? 0) - Date.now());
  const ids = await rig.queue('org-a', 5, 'evt_lease');
  await waitFor('five deliveries recorded delivered', () => rig.delivered('org-a') === 5);

  assert.deepEqual(rig.deliverer.requests.map((r) => r.eventId).sort(), ids.sort(), 'each delivery sent once');
  assert.equal(leaseLeftWhenSent.length, 5);
  // The lease was committed before the request went out, for the lease the dispatcher was given.
  for (const left of leaseLeftWhenSent) assert.ok(left > 30_000 - 5_000 && left <= 30_000, `lease left when sent: ${left} ms`);
  // Recorded: one attempt each, and no lease left behind.
  assert.deepEqual(
    rig.rows('org-a').map((r) => [r.status, r.attempts, r.leaseExpiresAt]),
    ids.map(() => ['delivered', 1, null]),
  );
});

test('a claim whose commit took most of its lease (the database answered late): what it leased is not sent under that lease, but given back and sent under a fresh one', async (t) => {
  // startWithinMs: 3000 - 1000 - 1000 = 1 s after the claim's commit began.
  let slowClaims = 1;
  const rig = await startRig(t, {
    orgs: { 'org-a': null },
    dispatcher: { leaseMs: 3000, attemptTimeoutMs: 1000 },
    afterFlush: async (w) => {
      if (w.claim !== null && slowClaims > 0) {
        slowClaims--;
        await sleep(1500);
      }
    },
  });
  rig.startDispatcher();
  const leaseLeftWhenSent: number[] = [];
  rig.deliverer.onRequest = (r) => leaseLeftWhenSent.push((rig.row(r.orgId, r.eventId)?.leaseExpiresAt ?? 0) - Date.now());
  const [id] = await rig.queue('org-a', 1, 'evt_slow_claim');
  await waitFor('the delivery recorded delivered', () => rig.delivered('org-a') === 1, 15_000);
  assert.equal(rig.deliverer.requests.length, 1, 'sent once');
  assert.ok(leaseLeftWhenSent[0]! > 2000, `sent with ${leaseLeftWhenSent[0]} ms of its lease left: under the fresh lease, not the late one`);
  assert.ok(
    rig.seen.flushes.some((w) => w.released.some((d) => d.eventId === id)),
    'the late claim was given back',
  );
  assert.deepEqual(rig.rows('org-a').map((r) => [r.status, r.attempts, r.leaseExpiresAt]), [['delivered', 1, null]]);
});

test('a request the deliverer could not start sending by its send-by time (NotSentInTime): no attempt is counted, the delivery is given back and sent under a fresh lease', async (t) => {
  const rig = await startRig(t, { orgs: { 'org-a': null }, dispatcher: { leaseMs: 30_000, attemptTimeoutMs: 5_000 } });
  const sendBys: number[] = [];
  const deliver = rig.deliverer.deliver.bind(rig.deliverer);
  let refuse = 1;
  rig.deliverer.deliver = (request, shutdown) => {
    sendBys.push((request.sendBy ?? Number.NaN) - performance.now());
    if (refuse-- > 0) return Promise.reject(new NotSentInTime(10));
    return deliver(request, shutdown);
  };
  rig.startDispatcher();
  const [id] = await rig.queue('org-a', 1, 'evt_not_sent');
  await waitFor('the delivery recorded delivered', () => rig.delivered('org-a') === 1, 15_000);
  assert.equal(rig.deliverer.requests.length, 1, 'sent once, the second time');
  assert.deepEqual(rig.rows('org-a').map((r) => [r.status, r.attempts]), [['delivered', 1]], 'the refused one is no attempt');
  assert.ok(rig.seen.flushes.some((w) => w.released.some((d) => d.eventId === id)), 'given back');
  // The send-by time handed to the deliverer: the lease less the attempt's deadline less the margin (30 - 5 - 1 s).
  for (const left of sendBys) assert.ok(left > 20_000 && left <= 24_000, `send-by ${Math.round(left)} ms away`);
});

test('per-webhook slots: a webhook that answers gets perWebhookConcurrency attempts at once and no more, another webhook its own', async (t) => {
  const rig = await startRig(t, { orgs: { 'org-a': null, 'org-b': null }, dispatcher: { concurrency: 8, perWebhookConcurrency: 2 } });
  rig.startDispatcher();
  await rig.makeKnown('org-a', 'org-b');
  rig.deliverer.answerAtOnce = () => null;
  rig.deliverer.resetMost();
  await rig.queue('org-a', 6, 'evt_a');
  await rig.queue('org-b', 6, 'evt_b');
  await waitFor('two attempts of each webhook in flight', () => rig.deliverer.held('org-a').length === 2 && rig.deliverer.held('org-b').length === 2);
  // Held, they keep their slots: nothing more of theirs starts.
  await sleep(150);
  assert.equal(rig.deliverer.held().length, 4);
  // Each answer frees a slot for the next delivery of the same webhook, until all are sent.
  await waitFor('every delivery sent and recorded', () => {
    for (const r of rig.deliverer.held()) r.answer(OK);
    return rig.delivered('org-a') === 7 && rig.delivered('org-b') === 7;
  });
  assert.equal(rig.deliverer.mostInFlight.get('org-a'), 2);
  assert.equal(rig.deliverer.mostInFlight.get('org-b'), 2);
  assert.equal(rig.deliverer.requests.length, 14, 'a delivery was sent twice');
});

test('the global cap: all webhooks together never have more than `concurrency` attempts in flight', async (t) => {
  const rig = await startRig(t, { orgs: { 'org-a': null, 'org-b': null }, dispatcher: { concurrency: 3, perWebhookConcurrency: 2 } });
  rig.startDispatcher();
  await rig.makeKnown('org-a', 'org-b');
  rig.deliverer.answerAtOnce = () => null;
  rig.deliverer.resetMost();
  await rig.queue('org-a', 4, 'evt_a');
  await rig.queue('org-b', 4, 'evt_b');
  await waitFor('three attempts in flight', () => rig.deliverer.held().length === 3);
  await sleep(150);
  assert.equal(rig.deliverer.held().length, 3);
  await waitFor('every delivery sent and recorded', () => {
    for (const r of rig.deliverer.held()) r.answer(OK);
    return rig.delivered('org-a') === 5 && rig.delivered('org-b') === 5;
  });
  assert.equal(rig.deliverer.mostInFlightInAll, 3);
});

test('a failing webhook: one attempt at a time, a pause after two failures in a row, and a healthy webhook keeps all its slots meanwhile', async (t) => {
  const rig = await startRig(t, { orgs: { 'org-a': null, 'org-b': null } });
  rig.startDispatcher();
  await rig.makeKnown('org-a', 'org-b');
  // org-a's first failure.
  rig.deliverer.answerAtOnce = (orgId) => (orgId === 'org-a' ? FAILED : null);
  await rig.queue('org-a', 1, 'evt_fail');
  await waitFor('the failed attempt recorded', () => rig.row('org-a', 'evt_fail_0')?.attempts === 1);
  // Failing now: of four due deliveries one is claimed and attempted; the healthy webhook
  // starts four at once.
  rig.deliverer.answerAtOnce = () => null;
  rig.deliverer.resetMost();
  await rig.queue('org-a', 4, 'evt_a');
  await rig.queue('org-b', 4, 'evt_b');
  await waitFor('one attempt of the failing webhook and four of the healthy one', () => rig.deliverer.held('org-a').length === 1 && rig.deliverer.held('org-b').length === 4);
  await sleep(150);
  assert.equal(rig.deliverer.held('org-a').length, 1);
  assert.equal(rig.rows('org-a').filter((r) => r.leaseExpiresAt !== null).length, 1, 'a failing webhook claims one delivery at a time');
  for (const r of rig.deliverer.held('org-b')) r.answer(OK);
  // Its second failure in a row: it waits before its next attempt.
  const [second] = rig.deliverer.held('org-a');
  const failedAt = performance.now();
  second!.answer(FAILED);
  const next = await waitFor('the next attempt of the failing webhook', () => rig.deliverer.held('org-a')[0], 5_000, 5);
  assert.ok(next.at - failedAt >= WEBHOOK_PAUSE_BASE_MS - 5, `the next attempt came ${Math.round(next.at - failedAt)} ms after the second failure`);
  // A success makes it healthy again: what is left goes out.
  rig.deliverer.answerAtOnce = () => OK;
  next.answer(OK);
  await waitFor('the rest of the failing webhook delivered', () => rig.delivered('org-a') === 1 + 3 && rig.delivered('org-b') === 1 + 4);
  assert.equal(rig.deliverer.mostInFlight.get('org-a'), 1);
  assert.equal(rig.deliverer.mostInFlight.get('org-b'), 4);
});

test('a rate-limited webhook: once its limit for the second is claimed, its other deliveries are not claimed (pending, unleased) until the window moves on', async (t) => {
  // A clock that stands still unless the test moves it: the rate window moves only when told.
  const clock = { at: Date.now(), now: () => clock.at };
  const rig = await startRig(t, { orgs: { 'org-r': 2 }, clock });
  rig.startDispatcher();
  await rig.queue('org-r', 6, 'evt_rate');
  await waitFor('two delivered', () => rig.delivered('org-r') === 2);
  // More work announced while the limit is reached is not even asked for.
  const asked = rig.seen.claimedFor.length;
  await rig.queue('org-r', 1, 'evt_rate_more');
  await sleep(300);
  assert.deepEqual(rig.seen.claimedFor.slice(asked), [], 'a claim or a read for a webhook at its rate limit');
  assert.equal(rig.deliverer.requests.length, 2);
  assert.deepEqual(
    rig.rows('org-r').filter((r) => r.status === 'pending').map((r) => [r.attempts, r.leaseExpiresAt]),
    [
      [0, null],
      [0, null],
      [0, null],
      [0, null],
      [0, null],
    ],
  );
  // A second and more later, two more go out: the dispatcher looks again once the wait the claim reported has passed.
  clock.at += 1_200;
  await waitFor('four delivered', () => rig.delivered('org-r') === 4, 5_000);
  await sleep(300);
  assert.equal(rig.deliverer.requests.length, 4);
});

test('stop(): an attempt that ends within the deadline is recorded, one still running is aborted at it and given back uncounted, nothing stays leased', async (t) => {
  const rig = await startRig(t, { orgs: { 'org-a': null }, dispatcher: { perWebhookConcurrency: 2 } });
  const first = rig.startDispatcher();
  await rig.makeKnown('org-a');
  rig.deliverer.answerAtOnce = () => null;
  // Two start; two more are claimed ahead and wait for a slot; one is left unclaimed.
  const ids = await rig.queue('org-a', 5, 'evt_stop');
  await waitFor('two attempts in flight', () => rig.deliverer.held('org-a').length === 2);
  await waitFor('four leased', () => rig.rows('org-a').filter((r) => r.leaseExpiresAt !== null).length === 4);
  const [quick, hung] = rig.deliverer.held('org-a');
  setTimeout(() => quick!.answer(OK), 100);
  const stopAt = performance.now();
  await first.stop(400);
  const took = performance.now() - stopAt;
  assert.ok(took >= 400 - 5 && took < 400 + 2_000, `stop took ${Math.round(took)} ms`);
  // Nothing started after stop began.
  assert.equal(rig.deliverer.requests.length, 1 + 2);
  const byEvent = new Map(rig.rows('org-a').map((r) => [r.eventId, r]));
  assert.deepEqual(byEvent.get(quick!.eventId), { eventId: quick!.eventId, status: 'delivered', attempts: 1, leaseExpiresAt: null });
  assert.deepEqual(byEvent.get(hung!.eventId), { eventId: hung!.eventId, status: 'pending', attempts: 0, leaseExpiresAt: null }, 'the aborted attempt counted');
  // The two claimed ahead and the one never claimed: pending, unleased, never attempted.
  const others = ids.filter((id) => id !== quick!.eventId && id !== hung!.eventId).map((id) => byEvent.get(id));
  assert.deepEqual(
    others.map((r) => [r?.status, r?.attempts, r?.leaseExpiresAt]),
    [
      ['pending', 0, null],
      ['pending', 0, null],
      ['pending', 0, null],
    ],
  );
  // The next start sends what was given back, each once.
  rig.deliverer.answerAtOnce = () => OK;
  rig.startDispatcher();
  await waitFor('the rest delivered after a restart', () => rig.delivered('org-a') === 1 + 5);
  assert.deepEqual(rig.rows('org-a').map((r) => r.attempts), [1, 1, 1, 1, 1, 1]);
});

test('wake-ups: announced work goes out at once though the poll is a minute away; work nobody announced waits for the poll', async (t) => {
  const rig = await startRig(t, { orgs: { 'org-a': null } });
  const dispatcher = rig.startDispatcher();
  await rig.makeKnown('org-a');
  const queuedAt = performance.now();
  await rig.queue('org-a', 1, 'evt_announced');
  await waitFor('the announced event delivered', () => rig.row('org-a', 'evt_announced_0')?.status === 'delivered', 2_000, 5);
  assert.ok(performance.now() - queuedAt < 1_000);
  // Queued by another process (the CLI): no wake-up reaches the dispatcher.
  await rig.queue('org-a', 1, 'evt_quiet', nobodyListens);
  await sleep(300);
  assert.equal(rig.row('org-a', 'evt_quiet_0')?.attempts, 0);
  // What the poll timer does.
  dispatcher.poll();
  await waitFor('the unannounced event delivered after the poll', () => rig.row('org-a', 'evt_quiet_0')?.status === 'delivered', 2_000, 5);
});

test('a retry falling due wakes the dispatcher by its own timer, not the poll', async (t) => {
  const rig = await startRig(t, { orgs: { 'org-a': null }, dispatcher: { policy: { ...FAR_RETRIES, scheduleMs: [300] } } });
  rig.startDispatcher();
  await rig.makeKnown('org-a');
  let answers = 0;
  rig.deliverer.answerAtOnce = () => (answers++ === 0 ? FAILED : OK);
  await rig.queue('org-a', 1, 'evt_retry');
  await waitFor('delivered on its retry', () => rig.row('org-a', 'evt_retry_0')?.status === 'delivered', 5_000, 5);
  const [tried, retried] = rig.deliverer.requests.filter((r) => r.eventId === 'evt_retry_0');
  assert.ok(retried!.at - tried!.at >= 300 - 5, `retried ${Math.round(retried!.at - tried!.at)} ms after the first attempt`);
  assert.equal(rig.row('org-a', 'evt_retry_0')?.attempts, 2);
});

test('the poll finds work queued by another process within its interval; an idle dispatcher reads and writes nothing', async (t) => {
  const rig = await startRig(t, { orgs: { 'org-a': null }, dispatcher: { pollIntervalMs: 50 } });
  rig.startDispatcher();
  await rig.makeKnown('org-a');
  const queuedAt = performance.now();
  await rig.queue('org-a', 1, 'evt_polled', nobodyListens);
  await waitFor('delivered by the poll', () => rig.row('org-a', 'evt_polled_0')?.status === 'delivered', 2_000, 5);
  assert.ok(performance.now() - queuedAt < 1_000);
  // Once the outcomes are recorded, the polls only read.
  let writes = -1;
  for (let i = 0; i < 30 && rig.seen.flushes.length !== writes; i++) {
    writes = rig.seen.flushes.length;
    await sleep(100);
  }
  const peeks = rig.seen.peeks;
  await sleep(400);
  assert.ok(rig.seen.peeks >= peeks + 3, `polls read ${rig.seen.peeks - peeks} times`);
  assert.equal(rig.seen.flushes.length, writes, 'an idle poll wrote');
});

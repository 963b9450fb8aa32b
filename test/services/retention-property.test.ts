/**
 * Retention never removes undelivered work: a property test over random histories. Each
 * history (seeded, so a failure names the seed that reproduces it) has organizations with and
 * without a webhook, one of them disabled (its pending deliveries are held), events received
 * over 60 days, deliveries in every state (fresh, failing, leased, held, dead, delivered; an
 * event replayed has several), attempts, and quarantined lines. After a prune in small batches:
 * every delivery that is not delivered is still there with its event and attempts; an event no
 * delivery was queued for is still there; everything delivered before the cutoff, received
 * before it, is gone with its deliveries and attempts; nothing else changed. A dry run first
 * counts exactly what the prune then removes, and removes nothing.
 */
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { test } from 'node:test';
import type { Clock } from '../../src/domain/clock.ts';
import { parseFeedLine } from '../../src/domain/feed-event.ts';
import { orderingKey } from '../../src/domain/ordering.ts';
import { WebhookStatus } from '../../src/domain/types.ts';
import { createIngestService } from '../../src/services/ingest.ts';
import { createRetentionService } from '../../src/services/retention.ts';
import { DeliveryStatus } from '../../src/store/values.ts';
import { openSqliteStore, type SqliteStore as Store } from '../../src/store/sqlite/store.ts';
import { silentLog, snapshot, tempDir } from '../helpers/helpers.ts';
import { repos } from '../helpers/sqlite-repos.ts';

const DAY = 86_400_000;
const NOW = Date.UTC(2026, 10, 23);
const RETENTION = 30 * DAY;
const CUTOFF = NOW - RETENTION;
const ITERATIONS = 150;

/** mulberry32: a small seeded PRNG, so that every history can be built again from its seed. */
function prng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const STATES = ['fresh', 'failing', 'leased', 'dead', 'delivered', 'delivered', 'delivered'] as const;
type State = (typeof STATES)[number];

interface ModelDelivery {
  id: number;
  state: State;
  org: string;
  /** When it was last changed (settled or leased). */
  at: number;
  attempts: number[];
}
interface ModelEvent {
  seq: number;
  receivedAt: number;
  deliveries: ModelDelivery[];
}

/** Builds a random history in `store` through its repositories (one transaction); returns the model of it. */
function randomHistory(store: Store, random: () => number): { events: ModelEvent[]; rejects: Array<{ id: number; receivedAt: number }> } {
  const repo = repos(store);
  const pick = <T>(xs: readonly T[]): T => xs[Math.floor(random() * xs.length)]!;
  const between = (lo: number, hi: number) => lo + Math.floor(random() * (hi - lo));
  const events: ModelEvent[] = [];
  const rejects: Array<{ id: number; receivedAt: number }> = [];
  const orgs = ['active', 'disabled', 'nohook'];
  const triesByDelivery = new Map<number, number>();
  const triesOf = (d: ModelDelivery) => triesByDelivery.get(d.id)!;
  const queueDelivery = (event: ModelEvent, org: string, request: number) => {
    const id = repo.deliveries.insert(event.seq, org, orderingKey(org, `ar_${request % 7}`), event.receivedAt);
    const state = pick(STATES);
    // Fresh: never tried; leased: being tried, maybe not for the first time; the others: tried.
    triesByDelivery.set(id, state === 'fresh' ? 0 : state === 'leased' ? between(0, 2) : between(1, 4));
    const at = random() < 0.5 ? between(event.receivedAt, Math.max(event.receivedAt + 1, CUTOFF)) : between(event.receivedAt, NOW + 1);
    event.deliveries.push({ id, state, org, at, attempts: [] });
  };
  store.db.transaction(() => {
    for (const org of orgs) {
      repo.orgs.insert({ id: org, name: org, createdAt: 0 });
      if (org !== 'nohook') repo.webhooks.upsert(org, `https://hooks.example/${org}`, false, null, 0);
    }
    repo.webhooks.setStatus('disabled', WebhookStatus.disabled, 'test', 0);
    const source = repo.feed.sourceId('feed');
    const count = between(1, 60);
    // Received times grow along seq, as ingestion guarantees; spread over 60 days around the
    // cutoff, or (a quiet feed) all before it.
    const end = random() < 0.3 ? NOW - between(31, 60) * DAY : NOW;
    let receivedAt = end - 60 * DAY;
    for (let i = 0; i < count; i++) {
      receivedAt += between(0, Math.floor((60 * DAY) / count));
      const org = pick(orgs);
      const parsed = parseFeedLine(Buffer.from(JSON.stringify({ organization_id: org, anticipation_request_id: `ar_${i % 7}`, status: 'approved', event_id: `e_${i}` })), receivedAt);
      assert.ok(parsed.ok);
      const seq = repo.feed.insertEvents([{ event: parsed.event, position: null }], source, receivedAt)[0]!;
      const event: ModelEvent = { seq, receivedAt, deliveries: [] };
      events.push(event);
      // Interleaved quarantined lines.
      if (random() < 0.2) {
        repo.feed.insertRejects([{ source: 'feed', position: null, lineBytes: 3, raw: Buffer.from('bad'), reason: 'invalid_json', detail: 'x', eventId: null, receivedAt }]);
        rejects.push({ id: store.db.prepare('SELECT max(id) FROM feed_rejects').pluck().get() as number, receivedAt });
      }
      if (org === 'nohook') continue;
      // Usually one delivery; a replayed or recovered event has more.
      const n = random() < 0.8 ? 1 : between(2, 4);
      for (let k = 0; k < n; k++) queueDelivery(event, org, i);
    }
    // Replays and recoveries later on: old events get new deliveries, with the newest ids.
    const queued = events.filter((e) => e.deliveries.length > 0);
    for (let r = between(0, 4); r > 0 && queued.length > 0; r--) {
      const event = pick(queued);
      queueDelivery(event, event.deliveries[0]!.org, event.seq);
    }
    // Attempts in an order of their own (a retry of an old delivery after newer ones were tried),
    // then each delivery is put in its state.
    const all = events.flatMap((e) => e.deliveries);
    const tries = all.flatMap((d) => Array.from({ length: triesOf(d) }, () => d));
    for (let k = tries.length - 1; k > 0; k--) {
      const j = Math.floor(random() * (k + 1));
      [tries[k], tries[j]] = [tries[j]!, tries[k]!];
    }
    for (const d of tries) {
      repo.deliveries.insertAttempts([{ deliveryId: d.id, attempt: d.attempts.length + 1, startedAt: d.at, durationMs: 5, url: 'https://hooks.example/', statusCode: 500, errorClass: null, errorDetail: null, responseBody: 'x'.repeat(between(0, 100)), outcome: 'retry', sentTimestamp: null, sentSignature: null }]);
      d.attempts.push(store.db.prepare('SELECT max(id) FROM delivery_attempts').pluck().get() as number);
    }
    for (const d of all) {
      if (d.state === 'leased') repo.deliveries.lease([d.id], d.at + 30_000, d.at);
      else if (d.state !== 'fresh') {
        const status = d.state === 'failing' ? DeliveryStatus.pending : d.state === 'dead' ? DeliveryStatus.dead : DeliveryStatus.delivered;
        repo.deliveries.settle(d.id, { status, attempts: d.attempts.length, nextAttemptAt: d.at + 5000, at: d.at, statusCode: status === DeliveryStatus.delivered ? 200 : 500, error: null });
      }
    }
  })();
  return { events, rejects };
}

/** What the rules say must be left: the seqs, delivery ids, attempt ids and reject ids. */
function expectedAfterPrune(model: ReturnType<typeof randomHistory>) {
  const maxSeq = Math.max(0, ...model.events.map((e) => e.seq));
  const allDeliveries = model.events.flatMap((e) => e.deliveries);
  const maxDelivery = Math.max(0, ...allDeliveries.map((d) => d.id));
  const maxAttempt = Math.max(0, ...allDeliveries.flatMap((d) => d.attempts));
  const maxReject = Math.max(0, ...model.rejects.map((r) => r.id));
  const gone = (e: ModelEvent) =>
    e.receivedAt < CUTOFF &&
    e.seq !== maxSeq &&
    e.deliveries.length > 0 &&
    e.deliveries.every((d) => d.state === 'delivered' && d.at < CUTOFF && d.id !== maxDelivery && !d.attempts.includes(maxAttempt));
  const kept = model.events.filter((e) => !gone(e));
  return {
    seqs: kept.map((e) => e.seq),
    deliveries: kept.flatMap((e) => e.deliveries.map((d) => d.id)).sort((a, b) => a - b),
    attempts: kept.flatMap((e) => e.deliveries.flatMap((d) => d.attempts)).sort((a, b) => a - b),
    rejects: model.rejects.filter((r) => r.receivedAt >= CUTOFF || r.id === maxReject).map((r) => r.id),
    removed: {
      events: model.events.length - kept.length,
      deliveries: allDeliveries.length - kept.flatMap((e) => e.deliveries).length,
      attempts: allDeliveries.flatMap((d) => d.attempts).length - kept.flatMap((e) => e.deliveries.flatMap((d) => d.attempts)).length,
      quarantinedLines: model.rejects.filter((r) => r.receivedAt < CUTOFF && r.id !== maxReject).length,
    },
  };
}

const ids = (store: Store, sql: string) => store.db.prepare(sql).pluck().all() as number[];

test(`retention over ${ITERATIONS} random histories removes exactly what was delivered before the cutoff, never undelivered work`, async (t) => {
  const dir = tempDir(t, 'hookrelay-retention-');
  const clock: Clock = { now: () => NOW };
  let removedSomething = 0;
  let keptUndelivered = 0;
  for (let seed = 1; seed <= ITERATIONS; seed++) {
    const random = prng(seed);
    const store = openSqliteStore(join(dir, `h${seed}.db`), clock);
    try {
      const model = randomHistory(store, random);
      const expected = expectedAfterPrune(model);
      const retention = createRetentionService(store, { deliveredEventsMs: RETENTION, quarantinedLinesMs: RETENTION, batchSize: 1 + Math.floor(random() * 12) });

      const newest = store.db.prepare('SELECT (SELECT max(seq) FROM events) AS seq, (SELECT max(id) FROM deliveries) AS delivery, (SELECT max(id) FROM delivery_attempts) AS attempt').get() as { seq: number; delivery: number; attempt: number };
      const before = snapshot(store);
      const dry = await retention.prune({ dryRun: true });
      assert.deepEqual(snapshot(store), before, `seed ${seed}: a dry run changes nothing`);
      assert.deepEqual(dry.removed, expected.removed, `seed ${seed}: the dry run counts what the rules remove`);

      const result = await retention.prune();
      assert.deepEqual(result.removed, expected.removed, `seed ${seed}: the prune reports what it removed`);
      assert.deepEqual(ids(store, 'SELECT seq FROM events ORDER BY seq'), expected.seqs, `seed ${seed}: events left`);
      assert.deepEqual(ids(store, 'SELECT id FROM deliveries ORDER BY id'), expected.deliveries, `seed ${seed}: deliveries left`);
      assert.deepEqual(ids(store, 'SELECT id FROM delivery_attempts ORDER BY id'), expected.attempts, `seed ${seed}: attempts left`);
      assert.deepEqual(ids(store, 'SELECT id FROM feed_rejects ORDER BY id'), expected.rejects, `seed ${seed}: quarantined lines left`);
      assert.deepEqual(store.db.pragma('foreign_key_check'), [], `seed ${seed}: no delivery or attempt lost its parent`);

      // The property itself, straight from the model: undelivered work and what it needs is all there.
      const left = new Set(ids(store, 'SELECT id FROM deliveries'));
      const leftSeqs = new Set(ids(store, 'SELECT seq FROM events'));
      const leftAttempts = new Set(ids(store, 'SELECT id FROM delivery_attempts'));
      for (const e of model.events) {
        if (e.deliveries.length === 0) assert.ok(leftSeqs.has(e.seq), `seed ${seed}: event ${e.seq} (never queued) is kept`);
        for (const d of e.deliveries) {
          if (d.state === 'delivered') continue;
          keptUndelivered++;
          assert.ok(left.has(d.id), `seed ${seed}: ${d.state} delivery ${d.id} is kept`);
          assert.ok(leftSeqs.has(e.seq), `seed ${seed}: the event of ${d.state} delivery ${d.id} is kept`);
          for (const a of d.attempts) assert.ok(leftAttempts.has(a), `seed ${seed}: attempt ${a} of ${d.state} delivery ${d.id} is kept`);
        }
        const oldAndDone = e.receivedAt < CUTOFF && e.deliveries.length > 0 && e.deliveries.every((d) => d.state === 'delivered' && d.at < CUTOFF);
        if (oldAndDone && leftSeqs.has(e.seq)) {
          // Only holding a newest row (whose id must not be handed out again) keeps such an event.
          const holdsNewest = e.seq === newest.seq || e.deliveries.some((d) => d.id === newest.delivery || d.attempts.includes(newest.attempt));
          assert.ok(holdsNewest, `seed ${seed}: event ${e.seq} was delivered before the cutoff but kept`);
        }
      }
      if (result.removed.events > 0) removedSomething++;

      const again = await retention.prune();
      assert.deepEqual(again.removed, { events: 0, deliveries: 0, attempts: 0, quarantinedLines: 0 }, `seed ${seed}: a second prune finds nothing`);
    } finally {
      await store.close();
    }
  }
  // The histories did exercise both sides of the rule.
  assert.ok(removedSomething > ITERATIONS / 2, `most histories had something to remove (${removedSomething})`);
  assert.ok(keptUndelivered > ITERATIONS, `the histories held undelivered deliveries (${keptUndelivered})`);
});

test('a feed line read again after its event was pruned is a new event: retention forgets ids (docs/operations.md, "Retention")', async (t) => {
  const clock = { at: NOW - 40 * DAY, now: () => clock.at };
  const store = openSqliteStore(join(tempDir(t, 'hookrelay-retention-'), 'hookrelay.db'), clock);
  t.after(() => store.close());
  repos(store).orgs.insert({ id: 'acme', name: 'Acme', createdAt: 0 });
  repos(store).webhooks.upsert('acme', 'https://hooks.example/acme', false, null, 0);
  const ingest = createIngestService(store, silentLog);
  const line = (id: string) => ({ bytes: Buffer.from(JSON.stringify({ organization_id: 'acme', anticipation_request_id: 'ar_1', status: 'approved', event_id: id })), position: null });
  assert.equal((await ingest.ingest('feed', [line('evt_old'), line('evt_newest')], null)).accepted, 2);
  for (const id of store.db.prepare('SELECT id FROM deliveries').pluck().all() as number[]) {
    repos(store).deliveries.settle(id, { status: DeliveryStatus.delivered, attempts: 1, nextAttemptAt: clock.at, at: clock.at, statusCode: 200, error: null });
  }
  // Before retention removes it, the same line is a duplicate.
  assert.deepEqual(await ingest.ingest('feed', [line('evt_old')], null), { accepted: 0, duplicates: 1, quarantined: 0, undeliverable: 0 });

  clock.at = NOW;
  const retention = createRetentionService(store, { deliveredEventsMs: RETENTION, quarantinedLinesMs: RETENTION, batchSize: 100 });
  assert.equal((await retention.prune()).removed.events, 1, 'evt_old goes; evt_newest holds the newest rows');
  // Read again, it is stored and queued anew: the receiver gets the same webhook-id a second time.
  assert.deepEqual(await ingest.ingest('feed', [line('evt_old')], null), { accepted: 1, duplicates: 0, quarantined: 0, undeliverable: 0 });
  assert.equal(store.db.prepare("SELECT count(*) FROM deliveries d JOIN events e ON e.seq = d.event_seq WHERE e.id = 'evt_old' AND d.status = 'pending'").pluck().get(), 1);
});

/**
 * Retry now (DeliveryLogService.retryNow) and the sample test event (sendTest's
 * `sample_status_change`), through the service over each backend (a fresh SQLite file, a fresh
 * PostgreSQL database): a delivery waiting an hour for its next attempt is due at once, the
 * dispatcher hears of its request, and the request's later change stays queued behind it; what
 * is not waiting is refused with `delivery_not_waiting` saying what to do instead, changing
 * nothing; another organization's delivery is not found. Seeded through the repositories, on a
 * clock the test holds still.
 */
import assert from 'node:assert/strict';
import { after, describe, test, type TestContext } from 'node:test';
import type { AuditContext } from '../../src/domain/audit.ts';
import { EVENT_TYPE, storedBody, type StorableEvent } from '../../src/domain/feed-event.ts';
import { orderingKey } from '../../src/domain/ordering.ts';
import { WebhookStatus } from '../../src/domain/types.ts';
import type { WorkKind, WorkSignal } from '../../src/domain/work.ts';
import { createLogger } from '../../src/log.ts';
import { createAuditTrail } from '../../src/services/audit.ts';
import { createDeliveryLogService } from '../../src/services/delivery-log.ts';
import { TestKind } from '../../src/services/test-events.ts';
import { deliveryView } from '../../src/services/views.ts';
import type { Store } from '../../src/store/repos.ts';
import { DeliveryStatus, type Settlement } from '../../src/store/values.ts';
import { stopPgServer } from '../helpers/pg-harness.ts';
import { STORE_BACKENDS } from '../helpers/store-backends.ts';

after(stopPgServer);

const T0 = 1_700_000_000_000;
const HOUR = 3_600_000;
const by: AuditContext = { actor: { kind: 'cli', name: 'tester', orgId: null }, requestId: null, source: null };

interface Heard {
  readonly orgId: string;
  readonly kind: WorkKind;
  readonly keys: readonly number[] | undefined;
}

/** A work signal that remembers what it was told. */
function recordingSignal(): WorkSignal & { heard: Heard[] } {
  const heard: Heard[] = [];
  return { heard, notify: (orgId, kind, keys) => void heard.push({ orgId, kind, keys: keys && [...keys] }), subscribe: () => () => {} };
}

async function open(t: TestContext, backend: (typeof STORE_BACKENDS)[number]) {
  const clock = { now: () => T0 + 10_000 };
  const { store } = await backend.open(t, clock);
  await store.transaction(async (tx) => {
    for (const id of ['acme', 'globex']) {
      await tx.orgs.insert({ id, name: id, createdAt: 1 });
      await tx.webhooks.upsert(id, `https://${id}.example.com/hook`, true, `whsec_${id}`, 1);
    }
  });
  const work = recordingSignal();
  const log = createLogger('silent');
  const audit = createAuditTrail(store, log);
  const service = createDeliveryLogService(store, { userAgent: 'hookrelay/test' }, audit, work);
  /** The audit trail's entries of retry-now, oldest first: [target, outcome, code]. */
  const retries = async () => (await audit.list({ action: 'delivery.retry', limit: 100 })).reverse().map((e) => [e.target, e.outcome, e.code]);
  return { store, work, service, retries };
}

const storable = (id: string, request: string): StorableEvent => ({ id, orgId: 'acme', anticipationRequestId: request, occurredAt: T0, details: '"status":"approved","previous_status":null', legacyId: null });

/** Stores acme's changes (event id, request) and queues a delivery of each, in order, at T0; returns the delivery ids. */
function queue(store: Store, changes: ReadonlyArray<readonly [string, string]>): Promise<number[]> {
  return store.transaction(async (tx) => {
    const seqs = await tx.feed.insertEvents(
      changes.map(([id, request]) => ({ event: storable(id, request), position: null })),
      await tx.feed.sourceId('feed.jsonl'),
      await tx.feed.receivedAt(T0),
    );
    const ids: number[] = [];
    for (const [i, [, request]] of changes.entries()) ids.push(await tx.deliveries.insert(seqs[i]!, 'acme', orderingKey('acme', request), T0));
    return ids;
  });
}

/** An attempt's end, as the dispatcher records it: leased, then settled. */
function settle(store: Store, id: number, s: Partial<Settlement> & Pick<Settlement, 'status'>): Promise<void> {
  const settlement: Settlement = { attempts: 1, nextAttemptAt: T0 + 1000, at: T0 + 1000, statusCode: 500, error: 'HTTP 500', ...s };
  return store.transaction(async (tx) => {
    await tx.deliveries.lease([id], T0 + 60_000, T0 + 500);
    assert.equal(await tx.deliveries.settle(id, settlement), true);
  });
}
/** Failed, its next attempt an hour away. */
const failedForAnHour = { status: DeliveryStatus.pending, nextAttemptAt: T0 + HOUR } as const;

const dueIds = (store: Store, at: number) => store.read(async (tx) => (await tx.deliveries.dueRows('acme', at, 10)).map((r) => r.id));

/** `promise` is refused with `code`, its message matching `message`. */
async function refused(promise: Promise<unknown>, code: string, message: RegExp): Promise<void> {
  await assert.rejects(promise, (err: unknown) => {
    const e = err as { code?: string; message?: string };
    assert.equal(e.code, code, e.message);
    assert.match(e.message ?? '', message);
    return true;
  });
}

for (const backend of STORE_BACKENDS) {
  describe(`retry now, ${backend.name}`, () => {
    test('a delivery waiting an hour is due at once; its request\'s later change stays behind it until it is done', async (t) => {
      const { store, work, service, retries } = await open(t, backend);
      const [first, later, other] = await queue(store, [
        ['evt_1', 'ar_1'],
        ['evt_2', 'ar_1'],
        ['evt_3', 'ar_2'],
      ]);
      await settle(store, first!, failedForAnHour);
      const now = T0 + 10_000;
      assert.deepEqual(await dueIds(store, now), [other], 'the failed one waits an hour, its later change behind it');
      const before = await service.get('acme', first!);
      assert.equal(deliveryView(before.delivery).state, 'retrying');

      const due = await service.retryNow(by, 'acme', first!);
      assert.equal(due.id, first);
      assert.equal(due.nextAttemptAt, now, 'due at the clock');
      assert.equal(due.attempts, 1, 'its attempts and schedule are kept');
      assert.deepEqual(work.heard, [{ orgId: 'acme', kind: 'queued', keys: [orderingKey('acme', 'ar_1')] }], 'the dispatcher hears of its request');
      assert.deepEqual(await retries(), [[`delivery ${first}`, 'ok', null]], 'audited: one entry');

      const dueNow = await dueIds(store, now);
      assert.ok(dueNow.includes(first!), `due now: ${dueNow}`);
      assert.ok(!dueNow.includes(later!), 'the later change of its request is still held back behind it');
      await settle(store, first!, { status: DeliveryStatus.delivered, attempts: 2, statusCode: 204, error: null });
      assert.ok((await dueIds(store, now)).includes(later!), 'once it is delivered, the later change goes');
    });

    test('what is not waiting is refused, saying what to do instead, and nothing changes', async (t) => {
      const { store, work, service, retries } = await open(t, backend);
      const [delivered, dead, fresh, leased, earlier, behind, held] = await queue(store, [
        ['evt_d', 'ar_d'],
        ['evt_x', 'ar_x'],
        ['evt_f', 'ar_f'],
        ['evt_l', 'ar_l'],
        ['evt_e1', 'ar_e'],
        ['evt_e2', 'ar_e'],
        ['evt_h', 'ar_h'],
      ]);
      await settle(store, delivered!, { status: DeliveryStatus.delivered, statusCode: 204, error: null });
      await settle(store, dead!, { status: DeliveryStatus.dead, attempts: 3 });
      await settle(store, leased!, failedForAnHour);
      await store.transaction((tx) => tx.deliveries.lease([leased!], T0 + 60_000, T0 + 5000));
      // Both changes of ar_e were tried (the earlier one is waiting): the later one is queued behind it.
      await settle(store, earlier!, failedForAnHour);
      await settle(store, behind!, failedForAnHour);
      const code = 'delivery_not_waiting';
      await refused(service.retryNow(by, 'acme', delivered!), code, /was delivered: .*replay it/);
      await refused(service.retryNow(by, 'acme', dead!), code, /failed for good \(dead after 3 attempt\(s\)\).*replay it/);
      await refused(service.retryNow(by, 'acme', fresh!), code, /has not been attempted yet/);
      await refused(service.retryNow(by, 'acme', leased!), code, /being attempted now \(in flight\)/);
      await refused(service.retryNow(by, 'acme', behind!), code, new RegExp(`queued behind delivery ${earlier}, an earlier change of the same request.*retry delivery ${earlier} now instead`));
      assert.equal((await service.get('acme', behind!)).delivery.nextAttemptAt, T0 + HOUR, 'a refusal changes nothing');

      await settle(store, held!, failedForAnHour);
      await store.transaction((tx) => tx.webhooks.setStatus('acme', WebhookStatus.disabled, 'operator', T0 + 6000));
      await refused(service.retryNow(by, 'acme', held!), code, /webhook is disabled.*enable the webhook/);

      // Another organization's delivery, and one that does not exist: not found, as for every read.
      await refused(service.retryNow(by, 'globex', earlier!), 'delivery_not_found', /no delivery/);
      await refused(service.retryNow(by, 'acme', held! + 1000), 'delivery_not_found', /no delivery/);
      assert.deepEqual(work.heard, [], 'nothing was queued');
      const audited = await retries();
      assert.equal(audited.length, 8, 'each refusal audited once');
      assert.deepEqual(audited[0], [`delivery ${delivered}`, 'failed', code]);
    });

    test('a sample status change: the real event\'s shape, marked as a test, about a made-up request, ordered on its own', async (t) => {
      const { store, service } = await open(t, backend);
      const d = await service.sendTest(by, 'acme', TestKind.sampleStatusChange);
      const view = deliveryView(d);
      assert.equal(view.event_type, EVENT_TYPE);
      assert.match(view.anticipation_request_id ?? '', /^ar_test_[0-9a-f]{12}$/);
      assert.equal(view.state, 'queued');
      const event = (await store.read((tx) => tx.feed.storedEvents([d.eventId]))).get(d.eventId)!;
      const body = JSON.parse(storedBody(event));
      assert.deepEqual(Object.keys(body), ['type', 'test', 'timestamp', 'data']);
      assert.equal(body.type, EVENT_TYPE);
      assert.equal(body.test, true);
      assert.deepEqual(Object.keys(body.data), ['event_id', 'organization_id', 'anticipation_request_id', 'occurred_at', 'status', 'previous_status']);
      assert.equal(body.data.event_id, d.eventId);
      assert.equal(body.data.anticipation_request_id, view.anticipation_request_id);
      assert.equal(body.data.organization_id, 'acme');
      // Nothing waits for it: a waiting change of a real request does not hold it back, and it holds nothing back.
      assert.ok((await dueIds(store, T0 + 10_000)).includes(d.id));
      const plain = deliveryView(await service.sendTest(by, 'acme'));
      assert.equal(plain.event_type, 'webhook.test');
      assert.equal(plain.anticipation_request_id, null);
    });
  });
}

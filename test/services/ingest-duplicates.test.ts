/**
 * The duplicate check of ingestion (services/ingest.ts): a line whose event_id is stored is a
 * duplicate only when it would send the same notification. The common case (the same line read
 * again) is decided by comparing stored columns, so these cases pin down that a difference in
 * any column of the body is still a conflict, and that content equal as JSON is still a
 * duplicate, whether or not it is the same bytes.
 */
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { test } from 'node:test';
import { systemClock } from '../../src/domain/clock.ts';
import { createIngestService, type RawLine } from '../../src/services/ingest.ts';
import { openSqliteStore } from '../../src/store/sqlite/store.ts';
import { createLogger } from '../../src/log.ts';
import { silentLog, tempDir } from '../helpers/helpers.ts';

const line = (value: unknown): RawLine => ({ bytes: Buffer.from(typeof value === 'string' ? value : JSON.stringify(value)), position: null });

const original = {
  event_id: 'chg_1',
  organization_id: 'org-a',
  anticipation_request_id: 'ar_1',
  status: 'approved',
  previous_status: 'submitted',
  occurred_at: '2026-11-22T08:30:00.000Z',
  data: { amount_cents: 1200, tags: ['a', 'b'] },
};

test('the same event_id: equal content (same bytes, other key order or spacing, other time zone) is a duplicate; any other column is a conflict', async (t) => {
  const store = openSqliteStore(join(tempDir(t), 'hookrelay.db'), systemClock);
  t.after(() => store.close());
  const ingest = createIngestService(store, silentLog);
  assert.deepEqual(await ingest.ingest('feed', [line(original)], null), { accepted: 1, duplicates: 0, quarantined: 0, undeliverable: 1 });

  const duplicates = [
    line(original),
    line('{ "data": {"tags": ["a", "b"], "amount_cents": 1200}, "occurred_at": "2026-11-22T10:30:00+02:00", "previous_status": "submitted", "status": "approved", "anticipation_request_id": "ar_1", "organization_id": "org-a", "event_id": "chg_1" }'),
  ];
  assert.deepEqual(await ingest.ingest('feed', duplicates, null), { accepted: 0, duplicates: 2, quarantined: 0, undeliverable: 0 });

  const conflicts = [
    { ...original, organization_id: 'org-b' },
    { ...original, anticipation_request_id: 'ar_2' },
    { ...original, occurred_at: '2026-11-22T08:30:00.001Z' },
    { ...original, status: 'rejected' },
    { ...original, previous_status: null },
    { ...original, data: { amount_cents: 1201, tags: ['a', 'b'] } },
    { ...original, data: undefined },
  ];
  assert.deepEqual(await ingest.ingest('feed', conflicts.map(line), null), { accepted: 0, duplicates: 0, quarantined: conflicts.length, undeliverable: 0 });
  assert.deepEqual(
    (await ingest.rejects(0, 100)).map((r) => r.reason),
    conflicts.map(() => 'event_id_conflict'),
  );
});

test('a line without occurred_at read again later is a duplicate (the stored time stands in for the missing one); with another time it is not', async (t) => {
  let now = Date.UTC(2026, 10, 22, 9, 0, 0);
  const store = openSqliteStore(join(tempDir(t), 'hookrelay.db'), { now: () => now });
  t.after(() => store.close());
  const ingest = createIngestService(store, silentLog);
  const { occurred_at: _, ...timeless } = original;
  assert.equal((await ingest.ingest('feed', [line(timeless)], null)).accepted, 1);
  now += 60_000;
  assert.deepEqual(await ingest.ingest('feed', [line(timeless)], null), { accepted: 0, duplicates: 1, quarantined: 0, undeliverable: 0 });
  // The stored event's time is the first reading's; a line that names another one conflicts.
  assert.equal((await ingest.ingest('feed', [line({ ...timeless, occurred_at: new Date(now).toISOString() })], null)).quarantined, 1);
});

test('events of an organization without a webhook (or that does not exist) are stored and said at warn, once per organization in ten minutes', async (t) => {
  const store = openSqliteStore(join(tempDir(t), 'hookrelay.db'), systemClock);
  t.after(() => store.close());
  const records: Array<Record<string, unknown>> = [];
  const ingest = createIngestService(store, createLogger('info', { write: (text: string) => void records.push(JSON.parse(text) as Record<string, unknown>) }), undefined, { noticeUndeliverable: true });
  const of = (orgId: string, n: number) => line({ ...original, event_id: `chg_${orgId}_${n}`, organization_id: orgId });
  assert.deepEqual(await ingest.ingest('feed', [of('ghost', 1), of('ghost', 2), of('typo-org', 1)], null), { accepted: 3, duplicates: 0, quarantined: 0, undeliverable: 3 });
  assert.deepEqual(await ingest.ingest('feed', [of('ghost', 3)], null), { accepted: 1, duplicates: 0, quarantined: 0, undeliverable: 1 });
  const notices = records.filter((r) => r.level === 40).map((r) => ({ organization: r.organization, events: r.events, msg: r.msg }));
  assert.deepEqual(
    notices.map((n) => [n.organization, n.events]),
    [
      ['ghost', 2],
      ['typo-org', 1],
    ],
    'one notice per organization for the first batch; the next batch of the same organization within ten minutes is not said again',
  );
  assert.match(String(notices[0]!.msg), /no webhook \(or does not exist\): they are kept, not delivered; check the feed's organization_id, or register its webhook and recover them/);
});

/**
 * Integration tests of the file tailer inside a real relay (in-process, real files in temp
 * directories, real SQLite): resume after a restart, rotation, truncation, rewrite in place,
 * partial lines, duplicates and conflicts, every kind of bad line, start position, a file
 * that appears late, the outbox rows, and a 100,000-line file. The relay polls the feed every
 * 20 ms; the tests wait for rows in the database, never for a fixed time.
 */
import assert from 'node:assert/strict';
import { appendFileSync, renameSync, statSync, truncateSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, test, type TestContext } from 'node:test';
import { systemClock } from '../../src/domain/clock.ts';
import { orderingKey } from '../../src/domain/ordering.ts';
import { createIngestService, MAX_QUARANTINED_BYTES, type RawLine } from '../../src/services/ingest.ts';
import { createServices } from '../../src/services/services.ts';
import { openSqliteStore } from '../../src/store/sqlite/store.ts';
import { loadConfig } from '../../src/config/load.ts';
import { defer, feedLines, feedRelay, fields, jsonLine, scratchDir, waitFor, type FeedRelay } from '../helpers/feed-helpers.ts';
import { silentLog } from '../helpers/helpers.ts';
import { repos } from '../helpers/sqlite-repos.ts';
import { BY_TEST } from '../helpers/audit-helpers.ts';

function feedPath(t: TestContext): string {
  return join(scratchDir(t, 'hookrelay-feed-'), 'feed.jsonl');
}

/** `ar_from` .. `ar_(from+count-1)`. */
function requestIds(from: number, count: number): string[] {
  return Array.from({ length: count }, (_, i) => `ar_${from + i}`);
}

function sizeOf(path: string): number {
  return statSync(path).size;
}

function inodeOf(path: string): string {
  return String(statSync(path, { bigint: true }).ino);
}

async function startOn(t: TestContext, path: string, overrides: Record<string, string> = {}): Promise<FeedRelay> {
  const relay = feedRelay(t, { 'feed.path': path, ...overrides });
  await relay.start();
  return relay;
}

/** A feed of `count` valid lines, a relay started on it, and its probe once every line is committed. */
async function startWithLines(t: TestContext, count: number): Promise<{ path: string; relay: FeedRelay; probe: ReturnType<FeedRelay['probe']> }> {
  const path = feedPath(t);
  writeFileSync(path, feedLines(count).text);
  const relay = await startOn(t, path);
  const probe = relay.probe();
  await probe.waitForLines(path, count);
  return { path, relay, probe };
}

describe('restarts', () => {
  test('after a restart only the lines appended meanwhile are ingested; nothing twice', async (t) => {
    const { path, relay, probe } = await startWithLines(t, 100);
    await relay.stop();
    assert.equal(probe.position(path), sizeOf(path));

    const more = feedLines(50, 100);
    const before = sizeOf(path);
    appendFileSync(path, more.text);
    await relay.start();
    await probe.waitForLines(path, 150);

    assert.deepEqual(probe.requestIds(), requestIds(0, 150));
    assert.deepEqual(
      probe.events().slice(100).map((e) => e.source_position),
      more.positions.map((p) => before + p),
    );
    assert.deepEqual(probe.stats(path), { accepted: 150, duplicates: 0, quarantined: 0 });
    assert.equal(probe.position(path), sizeOf(path));
    assert.deepEqual(probe.rejects(), []);
  });

  test('stopped in the middle of a file, the reader stops after the batch in progress and resumes after it', async (t) => {
    const path = feedPath(t);
    const lines = feedLines(50_000);
    writeFileSync(path, lines.text);
    const relay = await startOn(t, path, { 'feed.batchLines': '100' });
    const probe = relay.probe();
    await waitFor('the first batch', () => (probe.position(path) ?? 0) > 0);
    await relay.stop();
    // 500 batches of 100 lines, each its own fsync'd transaction: a stop that honoured the
    // request only at the end of the file would have committed them all.
    const committed = probe.eventCount();
    assert.ok(committed < 50_000, `the reader kept reading after stop() (${committed} lines committed)`);
    assert.equal(committed % 100, 0, 'only whole batches are committed');
    assert.equal(probe.position(path), lines.positions[committed]);

    await relay.start();
    await probe.waitForLines(path, 50_000);
    assert.equal(probe.eventCount(), 50_000);
    const positions = probe.store.db.prepare('SELECT source_position AS p FROM events ORDER BY source_position').pluck().all();
    assert.deepEqual(positions, lines.positions);
    assert.deepEqual(probe.stats(path), { accepted: 50_000, duplicates: 0, quarantined: 0 });
  });

  test('a partial last line is not consumed; completed after a restart it is one event, no reject', async (t) => {
    const path = feedPath(t);
    const first = feedLines(5);
    const sixth = jsonLine(fields(5, { event_id: 'chg_6' }));
    const cut = 30;
    writeFileSync(path, first.text + sixth.slice(0, cut));
    const relay = await startOn(t, path);
    const probe = relay.probe();
    await probe.waitForLines(path, 5);
    assert.equal(probe.position(path), first.bytes, 'the partial line is not consumed');
    await relay.stop();

    await relay.start();
    appendFileSync(path, sixth.slice(cut));
    await probe.waitForLines(path, 6);
    assert.deepEqual(probe.requestIds(), requestIds(0, 6));
    const last = probe.events()[5]!;
    assert.equal(last.id, 'chg_6');
    assert.equal(last.source_position, first.bytes);
    assert.deepEqual(probe.stats(path), { accepted: 6, duplicates: 0, quarantined: 0 });
    assert.deepEqual(probe.rejects(), []);
    assert.equal(probe.position(path), sizeOf(path));
  });

  test('a partial line completed while running is read when its newline arrives', async (t) => {
    const path = feedPath(t);
    const line = jsonLine(fields(0));
    writeFileSync(path, line.slice(0, 10));
    const relay = await startOn(t, path);
    const probe = relay.probe();
    await waitFor('the first commit', () => probe.position(path) === 0);
    appendFileSync(path, line.slice(10, 40));
    appendFileSync(path, line.slice(40));
    await probe.waitForLines(path, 1);
    assert.deepEqual(probe.requestIds(), ['ar_0']);
    assert.deepEqual(probe.rejects(), []);
  });
});

describe('rotation and truncation', () => {
  test('rotation by rename while running: the old file is read to its end (its cut-off last line quarantined), then the new one from its start', async (t) => {
    const path = feedPath(t);
    const old = feedLines(10);
    writeFileSync(path, old.text);
    const relay = await startOn(t, path);
    const probe = relay.probe();
    await probe.waitForLines(path, 10);

    // The producer writes more, then the file is rotated before the reader has seen those lines.
    const tail = feedLines(5, 10);
    const partial = '{"organization_id":"org-a","anticip';
    appendFileSync(path, tail.text + partial);
    renameSync(path, `${path}.1`);
    const fresh = feedLines(7, 100);
    writeFileSync(path, fresh.text);

    await probe.waitForLines(path, 23);
    assert.deepEqual(probe.requestIds(), [...requestIds(0, 15), ...requestIds(100, 7)]);
    assert.deepEqual(
      probe.events().map((e) => e.source_position),
      [...old.positions, ...tail.positions.map((p) => old.bytes + p), ...fresh.positions],
    );
    const rejects = probe.rejects();
    assert.equal(rejects.length, 1);
    assert.deepEqual(
      { ...rejects[0], raw: rejects[0]!.raw.toString() },
      {
        source: path,
        position: old.bytes + tail.bytes,
        line_bytes: partial.length,
        raw: partial,
        reason: 'incomplete_line',
        detail: 'the feed was rotated before this line was terminated',
        event_id: null,
      },
    );
    assert.deepEqual(probe.stats(path), { accepted: 22, duplicates: 0, quarantined: 1 });
    const saved = repos(probe.store).feed.getPosition(path)!;
    assert.equal(saved.ino, inodeOf(path));
    assert.equal(saved.position, fresh.bytes);

    // And the new file keeps being followed.
    appendFileSync(path, feedLines(1, 107).text);
    await probe.waitForLines(path, 24);
    assert.equal(probe.requestIds().at(-1), 'ar_107');
  });

  test('rotation by rename (mv feed feed.1 && touch feed) while stopped: the old file is finished first, then the new one read from its start', async (t) => {
    const { path, relay, probe } = await startWithLines(t, 10);
    await relay.stop();

    appendFileSync(path, feedLines(5, 10).text);
    renameSync(path, `${path}.1`);
    writeFileSync(path, '');
    await relay.start();
    await probe.waitForLines(path, 15);
    writeFileSync(path, feedLines(3, 100).text, { flag: 'a' });
    await probe.waitForLines(path, 18);

    assert.deepEqual(probe.requestIds(), [...requestIds(0, 15), ...requestIds(100, 3)]);
    assert.deepEqual(probe.stats(path), { accepted: 18, duplicates: 0, quarantined: 0 });
    assert.deepEqual(probe.rejects(), []);
    assert.equal(repos(probe.store).feed.getPosition(path)!.ino, inodeOf(path));
  });

  test('copytruncate while running: truncation is detected and the file read again from 0', async (t) => {
    const { path, probe } = await startWithLines(t, 10);
    const inode = inodeOf(path);

    truncateSync(path, 0);
    await waitFor('the truncation to be detected', () => probe.position(path) === 0);
    const after = feedLines(4, 200);
    appendFileSync(path, after.text);
    await probe.waitForLines(path, 14);

    assert.equal(inodeOf(path), inode, 'truncated in place');
    assert.deepEqual(probe.requestIds(), [...requestIds(0, 10), ...requestIds(200, 4)]);
    assert.deepEqual(probe.events().slice(10).map((e) => e.source_position), after.positions);
    assert.deepEqual(probe.stats(path), { accepted: 14, duplicates: 0, quarantined: 0 });
    assert.equal(probe.position(path), after.bytes);
  });

  test('copytruncate followed at once by new lines (shorter than before): read from 0', async (t) => {
    const { path, probe } = await startWithLines(t, 10);

    truncateSync(path, 0);
    appendFileSync(path, feedLines(2, 300).text);
    await probe.waitForLines(path, 12);
    assert.deepEqual(probe.requestIds(), [...requestIds(0, 10), ...requestIds(300, 2)]);
    assert.deepEqual(probe.stats(path), { accepted: 12, duplicates: 0, quarantined: 0 });
    assert.deepEqual(probe.rejects(), []);
  });

  test('truncated while stopped: read from 0 on the next start', async (t) => {
    const { path, relay, probe } = await startWithLines(t, 10);
    await relay.stop();

    truncateSync(path, 0);
    appendFileSync(path, feedLines(2, 400).text);
    await relay.start();
    await probe.waitForLines(path, 12);
    assert.deepEqual(probe.requestIds(), [...requestIds(0, 10), ...requestIds(400, 2)]);
    assert.deepEqual(probe.stats(path), { accepted: 12, duplicates: 0, quarantined: 0 });
  });

  test('rewritten in place with other first bytes and more data than before, while running: read from 0, never from the old offset', async (t) => {
    const { path, probe } = await startWithLines(t, 3);
    const inode = inodeOf(path);

    // Same inode (O_TRUNC then write), other content, larger than the committed position.
    const rewritten = feedLines(40, 500, { status: 'rejected' });
    writeFileSync(path, rewritten.text);
    assert.equal(inodeOf(path), inode);
    await probe.waitForLines(path, 43);
    // Let the reader look at the file again (idle polls) before checking nothing else happened.
    appendFileSync(path, feedLines(1, 999).text);
    await probe.waitForLines(path, 44);

    assert.deepEqual(probe.rejects().map((r) => `${r.reason}@${r.position}`), []);
    assert.deepEqual(probe.requestIds(), [...requestIds(0, 3), ...requestIds(500, 40), 'ar_999']);
    assert.deepEqual(probe.stats(path), { accepted: 44, duplicates: 0, quarantined: 0 });
  });

  test('same inode with different first bytes after a restart (rewritten, or inode reused): read from its start', async (t) => {
    const { path, relay, probe } = await startWithLines(t, 3);
    await relay.stop();
    const inode = inodeOf(path);

    const rewritten = feedLines(20, 600, { status: 'paid' });
    writeFileSync(path, rewritten.text);
    assert.equal(inodeOf(path), inode);
    assert.ok(rewritten.bytes > probe.position(path)!, 'the new file is longer than the committed position');
    await relay.start();
    await probe.waitForLines(path, 23);
    assert.deepEqual(probe.requestIds(), [...requestIds(0, 3), ...requestIds(600, 20)]);
    assert.deepEqual(probe.stats(path), { accepted: 23, duplicates: 0, quarantined: 0 });
    assert.deepEqual(probe.rejects(), []);
  });
  test('truncated while stopped and rewritten with the same first 256 bytes, longer than before: every new line is read (the bytes before the position differ)', async (t) => {
    const path = feedPath(t);
    const before = feedLines(100);
    writeFileSync(path, before.text);
    const relay = await startOn(t, path);
    const probe = relay.probe();
    await probe.waitForLines(path, 100);
    await relay.stop();
    const inode = inodeOf(path);

    // The same first three lines (over 256 bytes), then 300 other ones: past the old position.
    const head = feedLines(3);
    assert.ok(head.bytes > 256);
    const rest = feedLines(300, 1000);
    writeFileSync(path, head.text + rest.text);
    assert.equal(inodeOf(path), inode);
    assert.ok(head.bytes + rest.bytes > before.bytes, 'the new file is longer than the committed position');
    await relay.start();
    await probe.waitForLines(path, 403);
    assert.deepEqual(probe.requestIds(), [...requestIds(0, 100), ...requestIds(1000, 300)]);
    assert.deepEqual(probe.stats(path), { accepted: 400, duplicates: 3, quarantined: 0 });
    assert.deepEqual(probe.rejects(), []);
  });

  test('rewritten while running with the same first bytes and other bytes before the position: read from 0, never from the old offset', async (t) => {
    const { path, probe } = await startWithLines(t, 10);
    const inode = inodeOf(path);

    writeFileSync(path, feedLines(3).text + feedLines(40, 700).text);
    assert.equal(inodeOf(path), inode);
    // 10 lines, then the 43 of the new file (its first 3 are duplicates of the old ones).
    await probe.waitForLines(path, 53);
    appendFileSync(path, feedLines(1, 999).text);
    await probe.waitForLines(path, 54);
    assert.deepEqual(probe.rejects().map((r) => `${r.reason}@${r.position}`), []);
    assert.deepEqual(probe.requestIds(), [...requestIds(0, 10), ...requestIds(700, 40), 'ar_999']);
    assert.deepEqual(probe.stats(path), { accepted: 51, duplicates: 3, quarantined: 0 });
  });
});

describe('duplicates, conflicts and bad lines', () => {
  test('the same line twice, and the same event_id with the same content in another key order, are counted duplicates; other content is a conflict', async (t) => {
    const path = feedPath(t);
    const lines = [
      jsonLine(fields(0)), // derived id
      jsonLine(fields(0)), // the same line: duplicate
      '{"event_id":"chg_1","organization_id":"org-a","anticipation_request_id":"ar_1","status":"approved","occurred_at":"2026-11-22T08:30:00Z","data":{"x":1,"y":[1,2]}}\n',
      '{ "data": {"y": [1, 2], "x": 1}, "occurred_at": "2026-11-22T10:30:00+02:00", "status": "approved", "anticipation_request_id": "ar_1", "organization_id": "org-a", "event_id": "chg_1" }\n',
      '{"event_id":"chg_1","organization_id":"org-a","anticipation_request_id":"ar_1","status":"rejected","occurred_at":"2026-11-22T08:30:00Z","data":{"x":1,"y":[1,2]}}\n',
      jsonLine({ event_id: 'chg_2', ...fields(2) }), // no occurred_at
    ];
    writeFileSync(path, lines.join(''));
    const relay = await startOn(t, path);
    const probe = relay.probe();
    await probe.waitForLines(path, 6);

    // Later (another batch, another ingestion time): chg_2 again, without occurred_at, is still a duplicate.
    const size = sizeOf(path);
    appendFileSync(path, jsonLine({ ...fields(2), event_id: 'chg_2' }));
    await probe.waitForLines(path, 7);

    const events = probe.events();
    assert.deepEqual(
      events.map((e) => [e.anticipation_request_id, e.status]),
      [
        ['ar_0', 'approved'],
        ['ar_1', 'approved'],
        ['ar_2', 'approved'],
      ],
    );
    assert.match(events[0]!.id, /^evt_[0-9a-f]{32}$/);
    assert.deepEqual(events.map((e) => e.id).slice(1), ['chg_1', 'chg_2']);
    assert.deepEqual(probe.stats(path), { accepted: 3, duplicates: 3, quarantined: 1 });
    const conflictAt = Buffer.byteLength(lines.slice(0, 4).join(''));
    assert.deepEqual(
      probe.rejects().map((r) => ({ ...r, raw: r.raw.toString() })),
      [
        {
          source: path,
          position: conflictAt,
          line_bytes: Buffer.byteLength(lines[4]!) - 1,
          raw: lines[4]!.slice(0, MAX_QUARANTINED_BYTES),
          reason: 'event_id_conflict',
          detail: 'event_id "chg_1" was already ingested with different content',
          event_id: 'chg_1',
        },
      ],
    );
    assert.equal(probe.position(path), size + Buffer.byteLength(jsonLine({ ...fields(2), event_id: 'chg_2' })));
  });

  test('every kind of bad line is quarantined with its position, length, raw bytes (bounded) and reason, and never blocks the lines behind it', async (t) => {
    const path = feedPath(t);
    const longLine = Buffer.from(JSON.stringify({ ...fields(99), data: { blob: 'q'.repeat(40_000) } }));
    const lines: Array<{ bytes: Buffer; reason: string | null; detail?: string | RegExp; eventId?: string }> = [
      { bytes: Buffer.from(JSON.stringify(fields(0))), reason: null },
      { bytes: Buffer.concat([Buffer.from('{"organization_id":"org-a","status":"'), Buffer.from([0xff, 0xfe]), Buffer.from('"}')]), reason: 'invalid_utf8', detail: 'the line is not valid UTF-8' },
      { bytes: Buffer.from(JSON.stringify(fields(1))), reason: null },
      { bytes: Buffer.from('{"organization_id": "org-a", oops}'), reason: 'invalid_json', detail: /^not valid JSON: / },
      { bytes: Buffer.from('[1,2,3]'), reason: 'not_an_object', detail: 'each line must be one JSON object' },
      { bytes: Buffer.from('{"organization_id":"org-a","status":"approved"}'), reason: 'missing_field', detail: '"anticipation_request_id" is required' },
      {
        bytes: Buffer.from(JSON.stringify({ ...fields(50), occurred_at: 'last tuesday', event_id: 'chg_bad_date' })),
        reason: 'invalid_field',
        detail: '"occurred_at" must be an RFC 3339 date-time such as 2026-11-22T08:30:00Z',
        eventId: 'chg_bad_date',
      },
      { bytes: Buffer.from(JSON.stringify({ ...fields(51), organization_id: 'no spaces allowed' })), reason: 'invalid_field', detail: /^"organization_id" must be 1-64 characters/ },
      { bytes: Buffer.from(JSON.stringify({ ...fields(52), amount: 5 })), reason: 'unknown_field', detail: 'unknown field "amount"; put extra fields under "data"' },
      { bytes: longLine, reason: 'line_too_long', detail: `the line is ${longLine.length} bytes, over the limit of 1024 (feed.maxLineBytes)` },
      { bytes: Buffer.from(JSON.stringify(fields(2))), reason: null },
      { bytes: Buffer.from(JSON.stringify({ ...fields(3), event_id: 'chg_x' })), reason: null },
      { bytes: Buffer.from(JSON.stringify({ ...fields(3), event_id: 'chg_x', status: 'other' })), reason: 'event_id_conflict', eventId: 'chg_x' },
      { bytes: Buffer.from(''), reason: 'invalid_json', detail: /^not valid JSON: / },
      { bytes: Buffer.from(JSON.stringify(fields(4))), reason: null },
    ];
    const positions: number[] = [];
    let offset = 0;
    for (const line of lines) {
      positions.push(offset);
      offset += line.bytes.length + 1;
    }
    writeFileSync(path, Buffer.concat(lines.flatMap((l) => [l.bytes, Buffer.from('\n')])));
    const relay = await startOn(t, path, { 'feed.maxLineBytes': '1024' });
    const probe = relay.probe();
    await probe.waitForLines(path, lines.length);

    // And a last line cut off by a rotation.
    const cut = Buffer.from('{"organization_id":"org-a","anticipation_req');
    appendFileSync(path, cut);
    renameSync(path, `${path}.1`);
    writeFileSync(path, jsonLine(fields(5)));
    await probe.waitForLines(path, lines.length + 2);

    assert.deepEqual(probe.requestIds(), ['ar_0', 'ar_1', 'ar_2', 'ar_3', 'ar_4', 'ar_5']);
    const rejects = probe.rejects();
    const expected = lines.flatMap((l, i) => (l.reason === null ? [] : [{ ...l, position: positions[i]! }]));
    assert.equal(rejects.length, expected.length + 1);
    for (const [i, want] of expected.entries()) {
      const got = rejects[i]!;
      assert.equal(got.reason, want.reason, `reject ${i}`);
      assert.equal(got.position, want.position, `${want.reason}: position`);
      assert.equal(got.line_bytes, want.bytes.length, `${want.reason}: length`);
      assert.equal(got.source, path);
      assert.equal(got.event_id, want.eventId ?? null, `${want.reason}: event_id`);
      if (typeof want.detail === 'string') assert.equal(got.detail, want.detail);
      else if (want.detail) assert.match(got.detail, want.detail);
      const keptBytes = Math.min(want.bytes.length, MAX_QUARANTINED_BYTES);
      assert.ok(got.raw.equals(want.bytes.subarray(0, keptBytes)), `${want.reason}: raw bytes`);
    }
    const tooLong = rejects.find((r) => r.reason === 'line_too_long')!;
    assert.equal(tooLong.raw.length, MAX_QUARANTINED_BYTES);
    assert.equal(tooLong.line_bytes, longLine.length);
    assert.deepEqual(
      { ...rejects.at(-1)!, raw: rejects.at(-1)!.raw.toString() },
      { source: path, position: offset, line_bytes: cut.length, raw: cut.toString(), reason: 'incomplete_line', detail: 'the feed was rotated before this line was terminated', event_id: null },
    );
    assert.deepEqual(probe.stats(path), { accepted: 6, duplicates: 0, quarantined: expected.length + 1 });
  });

  test('lines ingested by the service: an organization with a webhook gets a pending outbox row per event; one without keeps its events, undeliverable', async (t) => {
    const stateDir = scratchDir(t, 'hookrelay-feed-state-');
    const config = loadConfig({ env: {}, overrides: { stateDir } });
    const store = openSqliteStore(config.database.path, systemClock);
    defer(t, () => store.close());
    const services = createServices(store, config);
    await services.orgs.add(BY_TEST, { id: 'org-hooked' });
    await services.webhooks.register(BY_TEST, 'org-hooked', { webhook_url: 'https://hooks.example.com/hookrelay' });
    await services.orgs.add(BY_TEST, { id: 'org-quiet' });

    const raw = (value: unknown, position: number): RawLine => ({ bytes: Buffer.from(JSON.stringify(value)), position });
    const ingest = createIngestService(store, silentLog);
    const counts = await ingest.ingest(
      'test-source',
      [
        raw({ ...fields(1), organization_id: 'org-hooked', event_id: 'chg_h1' }, 0),
        raw({ ...fields(2), organization_id: 'org-quiet', event_id: 'chg_q1' }, 100),
        raw({ ...fields(3), organization_id: 'org-hooked', event_id: 'chg_h2' }, 200),
        raw({ ...fields(4), organization_id: 'org-unknown', event_id: 'chg_u1' }, 300),
        raw({ ...fields(1), organization_id: 'org-hooked', event_id: 'chg_h1' }, 400),
      ],
      null,
    );
    assert.deepEqual(counts, { accepted: 4, duplicates: 1, quarantined: 0, undeliverable: 2 });

    const deliveries = store.db
      .prepare('SELECT e.id AS event_id, d.org_id, d.status, d.attempts, d.ordering_key FROM deliveries d JOIN events e ON e.seq = d.event_seq ORDER BY d.id')
      .all();
    assert.deepEqual(deliveries, [
      { event_id: 'chg_h1', org_id: 'org-hooked', status: 'pending', attempts: 0, ordering_key: orderingKey('org-hooked', 'ar_1') },
      { event_id: 'chg_h2', org_id: 'org-hooked', status: 'pending', attempts: 0, ordering_key: orderingKey('org-hooked', 'ar_3') },
    ]);
    assert.deepEqual(store.db.prepare('SELECT id FROM events ORDER BY seq').pluck().all(), ['chg_h1', 'chg_q1', 'chg_h2', 'chg_u1']);
    assert.deepEqual(await ingest.undeliverable(), [
      { orgId: 'org-quiet', events: 1 },
      { orgId: 'org-unknown', events: 1 },
    ]);
    assert.deepEqual(
      (await ingest.stats()).map((s) => ({ ...s, updatedAt: 0 })),
      [{ source: 'test-source', accepted: 4, duplicates: 1, quarantined: 0, updatedAt: 0 }],
    );
  });
});

describe('start position and a late file', () => {
  test('startPosition end: the first start skips the existing lines (not a partial last one); later starts resume from the committed position', async (t) => {
    const path = feedPath(t);
    const existing = feedLines(5);
    const partialLine = jsonLine(fields(5));
    writeFileSync(path, existing.text + partialLine.slice(0, 20));
    const relay = await startOn(t, path, { 'feed.startPosition': 'end' });
    const probe = relay.probe();
    await waitFor('the starting position to be committed', () => probe.position(path) !== null);
    assert.equal(probe.position(path), existing.bytes);

    appendFileSync(path, partialLine.slice(20) + feedLines(2, 6).text);
    await probe.waitForLines(path, 3);
    await relay.stop();
    appendFileSync(path, feedLines(2, 8).text);
    await relay.start();
    await probe.waitForLines(path, 5);

    assert.deepEqual(probe.requestIds(), requestIds(5, 5));
    assert.deepEqual(probe.stats(path), { accepted: 5, duplicates: 0, quarantined: 0 });
    assert.equal(probe.position(path), sizeOf(path));
  });

  test('a feed file that does not exist yet is waited for, then read from its start', async (t) => {
    const path = feedPath(t);
    const relay = await startOn(t, path);
    const probe = relay.probe();
    await waitFor('the reader to look for the file', () => relay.logRecords().some((r) => r.msg === 'waiting for the feed file to appear'));
    assert.equal(probe.position(path), null);
    const lines = feedLines(4);
    writeFileSync(path, lines.text);
    await probe.waitForLines(path, 4);
    assert.deepEqual(probe.requestIds(), requestIds(0, 4));
    assert.equal(probe.position(path), lines.bytes);
  });

  test('with startPosition end, a file that appears after the start is read from its start: all of it is new', async (t) => {
    const path = feedPath(t);
    const relay = await startOn(t, path, { 'feed.startPosition': 'end' });
    const probe = relay.probe();
    await waitFor('the reader to look for the file', () => relay.logRecords().some((r) => r.msg === 'waiting for the feed file to appear'));
    writeFileSync(path, feedLines(3).text);
    await probe.waitForLines(path, 3);
    assert.deepEqual(probe.requestIds(), requestIds(0, 3));
  });
});

test('a 100,000-line file is ingested completely, each line once', async (t) => {
  const path = feedPath(t);
  const lines = feedLines(100_000);
  writeFileSync(path, lines.text);
  const relay = await startOn(t, path);
  const probe = relay.probe();
  await probe.waitForLines(path, 100_000);
  assert.equal(probe.eventCount(), 100_000);
  assert.equal(probe.store.db.prepare('SELECT count(DISTINCT anticipation_request_id) FROM events').pluck().get(), 100_000);
  assert.deepEqual(probe.stats(path), { accepted: 100_000, duplicates: 0, quarantined: 0 });
  assert.equal(probe.position(path), lines.bytes);
});

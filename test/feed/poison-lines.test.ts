/**
 * One feed line must never stop the feed (issue 47): lines nested thousands of levels deep,
 * their duplicates, a re-read of the file after it is replaced, `hookrelay ingest` of such a
 * file, a stored event nested deeper than the call stack reaches, and event ids no HTTP header
 * can carry. Every such line is quarantined with its reason and the lines around it are stored.
 * And whatever makes the reader fail over and over at one position, /readyz says so (503 with
 * the reason), as do `hookrelay status` and the metrics, until it gets past.
 */
import assert from 'node:assert/strict';
import { appendFileSync, renameSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { before, describe, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import Database from 'better-sqlite3';
import { canonicalJson, MAX_DATA_DEPTH, parseFeedLine, sameNotification } from '../../src/domain/feed-event.ts';
import { createIngestService, type RawLine } from '../../src/services/ingest.ts';
import type { Clock } from '../../src/domain/clock.ts';
import { openSqliteStore } from '../../src/store/sqlite/store.ts';
import { repos } from '../helpers/sqlite-repos.ts';
import { assertBuilt, databaseIn, fields, jsonLine, Probe, runCli, scratchDir, spawnServe } from '../helpers/feed-helpers.ts';
import { silentLog, tempDir } from '../helpers/helpers.ts';

const RECEIVED_AT = Date.UTC(2026, 10, 28);

/** `depth` arrays inside one another: [[[...]]]. */
const nestedArrays = (depth: number): string => '['.repeat(depth) + ']'.repeat(depth);
/** `depth` objects inside one another: {"a":{"a":...{}}}. */
const nestedObjects = (depth: number): string => '{"a":'.repeat(depth - 1) + '{}' + '}'.repeat(depth - 1);

/** A feed line (without newline) whose data holds `inner` as the value of "x". */
function lineWith(inner: string, eventId: string, request = 'ar_deep'): string {
  return `{"organization_id":"org-a","anticipation_request_id":"${request}","status":"approved","event_id":"${eventId}","data":{"x":${inner}}}`;
}

/** Polls `probe` every 50 ms for at most 30 s until it resolves to something other than undefined. */
async function eventually<T>(what: string, probe: () => Promise<T | undefined>): Promise<T> {
  const deadline = Date.now() + 30_000;
  for (;;) {
    const value = await probe();
    if (value !== undefined) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(50);
  }
}

function rejectOf(line: string): { reason: string; detail: string } {
  const parsed = parseFeedLine(Buffer.from(line), RECEIVED_AT);
  assert.equal(parsed.ok, false, `accepted: ${line.slice(0, 80)}`);
  return parsed as never;
}

describe('nesting', () => {
  test('data nested 10,000 and 100,000 levels, arrays and objects, is refused as nesting_too_deep, never thrown', () => {
    for (const depth of [5_000, 10_000, 100_000]) {
      for (const inner of [nestedArrays(depth), nestedObjects(depth)]) {
        const reject = rejectOf(lineWith(inner, `chg_${depth}`));
        assert.equal(reject.reason, 'nesting_too_deep');
        assert.match(reject.detail, new RegExp(`more than ${MAX_DATA_DEPTH} levels deep`));
      }
    }
  });

  test(`data nested ${MAX_DATA_DEPTH} levels is accepted, one more is not (data itself is level 1)`, () => {
    // data is level 1, its "x" level 2: an inner value of MAX - 1 levels makes MAX.
    const fits = parseFeedLine(Buffer.from(lineWith(nestedArrays(MAX_DATA_DEPTH - 1), 'chg_fits')), RECEIVED_AT);
    assert.equal(fits.ok, true);
    assert.equal(rejectOf(lineWith(nestedArrays(MAX_DATA_DEPTH), 'chg_over')).reason, 'nesting_too_deep');
    assert.equal(rejectOf(lineWith(nestedObjects(MAX_DATA_DEPTH), 'chg_over_obj')).reason, 'nesting_too_deep');
  });

  test('a number JSON reads as infinite is refused rather than sent as null', () => {
    for (const n of ['1e400', '-1e400']) {
      const reject = rejectOf(lineWith(`[1, {"n": ${n}}]`, 'chg_inf'));
      assert.equal(reject.reason, 'invalid_field');
      assert.match(reject.detail, /too large for JSON/);
    }
    // Large but finite: kept as the number it reads as.
    const big = parseFeedLine(Buffer.from(lineWith('123456789012345678901234567890', 'chg_big')), RECEIVED_AT);
    assert.equal(big.ok, true);
  });

  test('canonicalJson has no depth limit of its own: a value nested 100,000 levels gives its text, keys sorted', () => {
    const deep = JSON.parse(nestedArrays(100_000)) as unknown;
    assert.equal(canonicalJson(deep), nestedArrays(100_000));
    const objects = JSON.parse(nestedObjects(100_000)) as unknown;
    assert.equal(canonicalJson(objects), nestedObjects(100_000));
    assert.equal(canonicalJson({ b: [1, { d: null, c: 'x' }], a: true, e: {} }), '{"a":true,"b":[1,{"c":"x","d":null}],"e":{}}');
    assert.equal(canonicalJson([]), '[]');
    assert.equal(canonicalJson('s"'), '"s\\""');
    assert.ok(sameNotification(`{"a":${nestedArrays(50_000)},"b":1}`, `{"b":1,"a":${nestedArrays(50_000)}}`));
    assert.ok(!sameNotification(`{"a":${nestedArrays(50_000)}}`, `{"a":${nestedArrays(50_001)}}`));
  });
});

describe('event ids a header can carry', () => {
  const base = { organization_id: 'org-a', anticipation_request_id: 'ar_1', status: 'approved' };
  test('an event_id outside Latin-1, with a bidi or C1 control, or with a space at either end is refused, naming the character', () => {
    for (const [id, named] of [
      ['evt_日本', 'U+65E5'],
      ['evt_\u202Egnp.exe', 'U+202E'],
      ['evt_\u2066x', 'U+2066'],
      ['evt_😀', 'U+1F600'],
      ['evt_\u0085', 'U+0085'],
      ['evt_\u009b2J', 'U+009B'],
      [' evt_1', 'space at either end'],
      ['evt_1 ', 'space at either end'],
    ] as const) {
      const parsed = parseFeedLine(Buffer.from(JSON.stringify({ ...base, event_id: id })), RECEIVED_AT);
      assert.equal(parsed.ok, false, id);
      assert.ok(!parsed.ok && parsed.reason === 'invalid_field', id);
      assert.ok(!parsed.ok && parsed.detail.includes('webhook-id header') && parsed.detail.includes(named === 'space at either end' ? 'begins or ends with a space' : named), `${id}: ${!parsed.ok && parsed.detail}`);
      // The quarantine still says which event it was.
      assert.ok(!parsed.ok && parsed.eventId === id);
    }
  });

  test('ids of printable ASCII and Latin-1 letters, spaces inside, are accepted', () => {
    for (const id of ['evt_1', 'chg_é_ñ', 'a b', 'x!#$%&*+-.^_`|~', '\u00a0nbsp\u00ff']) {
      const parsed = parseFeedLine(Buffer.from(JSON.stringify({ ...base, event_id: id })), RECEIVED_AT);
      assert.ok(parsed.ok, id);
    }
  });
});

describe('ingest', () => {
  /**
   * A file of `good` lines around deep ones: a line nested 10,000 levels, the same line again,
   * one nested 100,000 levels (objects), and a non-Latin-1 event id.
   */
  function poisonFile(): { text: string; good: number; bad: number } {
    const deep = lineWith(nestedArrays(10_000), 'chg_deep_1');
    const text =
      jsonLine(fields(1, { event_id: 'chg_good_1' })) +
      `${deep}\n` +
      jsonLine(fields(2, { event_id: 'chg_good_2' })) +
      `${deep}\n` +
      `${lineWith(nestedObjects(100_000), 'chg_deep_2')}\n` +
      jsonLine(fields(3, { event_id: 'evt_日本' })) +
      jsonLine(fields(4, { event_id: 'chg_good_3' }));
    return { text, good: 3, bad: 4 };
  }

  test('a batch holding deep lines and their duplicate stores the lines around them and quarantines each deep one', async (t) => {
    const store = openSqliteStore(join(tempDir(t), 'hookrelay.db'), { now: () => RECEIVED_AT } as Clock);
    t.after(() => store.close());
    const ingest = createIngestService(store, silentLog);
    const { text } = poisonFile();
    const lines: RawLine[] = text
      .split('\n')
      .filter((l) => l !== '')
      .map((l, i) => ({ bytes: Buffer.from(l), position: i }));
    assert.deepEqual(await ingest.ingest('feed', lines, null), { accepted: 3, duplicates: 0, quarantined: 4, undeliverable: 3 });
    const rejects = repos(store).feed.listRejects(0, 10);
    assert.deepEqual(
      rejects.map((r) => [r.position, r.reason, r.eventId]),
      [
        [1, 'nesting_too_deep', 'chg_deep_1'],
        [3, 'nesting_too_deep', 'chg_deep_1'],
        [4, 'nesting_too_deep', 'chg_deep_2'],
        [5, 'invalid_field', 'evt_日本'],
      ],
    );
    // Again, as a file read twice: duplicates for the good lines, the same quarantine for the others.
    assert.deepEqual(await ingest.ingest('feed', lines, null), { accepted: 0, duplicates: 3, quarantined: 4, undeliverable: 0 });
  });

  test('a stored event nested deeper than the call stack reaches (accepted before the limit) is compared with a line of the same id without overflowing', async (t) => {
    const store = openSqliteStore(join(tempDir(t), 'hookrelay.db'), { now: () => RECEIVED_AT } as Clock);
    t.after(() => store.close());
    const ingest = createIngestService(store, silentLog);
    assert.deepEqual(await ingest.ingest('feed', [{ bytes: Buffer.from(JSON.stringify(fields(1, { event_id: 'chg_old' }))), position: 0 }], null), {
      accepted: 1,
      duplicates: 0,
      quarantined: 0,
      undeliverable: 1,
    });
    // As the code before the limit stored it: the details with data 20,000 levels deep.
    const deepDetails = `"status":"approved","previous_status":"submitted","x":${nestedArrays(20_000)}`;
    store.db.prepare('UPDATE events SET payload = ? WHERE id = ?').run(deepDetails, 'chg_old');
    // The same id with other content: a conflict, found by comparing the two bodies as JSON values.
    const counts = await ingest.ingest('feed', [{ bytes: Buffer.from(JSON.stringify(fields(1, { event_id: 'chg_old', status: 'rejected' }))), position: 1 }], null);
    assert.deepEqual(counts, { accepted: 0, duplicates: 0, quarantined: 1, undeliverable: 0 });
    assert.equal(repos(store).feed.listRejects(0, 10)[0]!.reason, 'event_id_conflict');
  });

  describe('the daemon and the CLI', () => {
    before(assertBuilt);

    test('the daemon reads past deep lines, and past them again when the file is replaced by a copy; its position always moves on', async (t) => {
      const stateDir = scratchDir(t);
      const path = join(stateDir, 'feed.jsonl');
      const { text, good, bad } = poisonFile();
      writeFileSync(path, text);
      const daemon = await spawnServe(t, stateDir, ['--feed', path]);
      const probe = new Probe(t, databaseIn(stateDir));
      assert.deepEqual(await probe.waitForLines(path, good + bad), { accepted: good, duplicates: 0, quarantined: bad });
      assert.equal(probe.position(path), Buffer.byteLength(text));
      assert.deepEqual(
        probe.rejects().map((r) => r.reason),
        ['nesting_too_deep', 'nesting_too_deep', 'nesting_too_deep', 'invalid_field'],
      );

      // Replaced by a copy (a new inode): read again from its start.
      writeFileSync(`${path}.new`, text);
      renameSync(`${path}.new`, path);
      assert.deepEqual(await probe.waitForLines(path, 2 * (good + bad)), { accepted: good, duplicates: good, quarantined: 2 * bad });
      const ready = await fetch(`${daemon.baseUrl}/readyz`);
      assert.equal(ready.status, 200);
      assert.equal(
        daemon.logRecords().filter((r) => r.msg?.toString().startsWith('feed reader failed')).length,
        0,
        'the reader never failed',
      );
      daemon.child.kill('SIGTERM');
      assert.deepEqual(await daemon.exited, { code: 0, signal: null });
    });

    test('hookrelay ingest of such a file commits the lines around the deep ones and exits 0', async (t) => {
      const stateDir = scratchDir(t);
      const path = join(stateDir, 'feed.jsonl');
      const { text, good, bad } = poisonFile();
      writeFileSync(path, text);
      assert.equal((await runCli(t, ['migrate', '--state-dir', stateDir])).code, 0);
      const result = await runCli(t, ['ingest', path, '--json', '--state-dir', stateDir]);
      assert.equal(result.code, 0, result.stderr);
      assert.doesNotMatch(result.stderr, /call stack/);
      const counts = JSON.parse(result.stdout) as Record<string, number>;
      assert.equal(counts.accepted, good);
      assert.equal(counts.quarantined, bad);
      const probe = new Probe(t, databaseIn(stateDir));
      assert.deepEqual(
        probe.events().map((e) => e.id),
        ['chg_good_1', 'chg_good_2', 'chg_good_3'],
      );
    });

    test('a reader that keeps failing at one position makes /readyz 503 with the reason, shows in status and the metrics, and recovers once it gets past', async (t) => {
      const stateDir = scratchDir(t);
      const path = join(stateDir, 'feed.jsonl');
      writeFileSync(path, jsonLine(fields(1, { event_id: 'chg_before' })));
      const daemon = await spawnServe(t, stateDir, ['--feed', path]);
      const probe = new Probe(t, databaseIn(stateDir));
      await probe.waitForLines(path, 1);
      const committed = probe.position(path);

      // A fault that is no line's doing and that storage health does not know: a trigger that
      // refuses one event. The reader fails on the batch holding it, restarts, fails again...
      const db = new Database(databaseIn(stateDir));
      t.after(() => db.close());
      db.exec("CREATE TRIGGER refuse_one BEFORE INSERT ON events WHEN NEW.id = 'chg_refused' BEGIN SELECT RAISE(ABORT, 'refused by a test trigger'); END");
      appendFileSync(path, jsonLine(fields(2, { event_id: 'chg_refused' })) + jsonLine(fields(3, { event_id: 'chg_after' })));

      const notReady = await eventually('/readyz to answer 503', async () => {
        const res = await fetch(`${daemon.baseUrl}/readyz`);
        return res.status === 503 ? ((await res.json()) as { reason: string; detail: string }) : undefined;
      });
      assert.equal(notReady.reason, 'feed_reader_failing');
      assert.match(notReady.detail, new RegExp(`at byte ${committed} of .*feed\\.jsonl \\(refused by a test trigger\\)`));
      assert.equal(probe.position(path), committed, 'nothing after the failing batch was committed');

      const metrics = await (await fetch(`${daemon.baseUrl}/metrics`)).text();
      assert.match(metrics, /^hookrelay_feed_reader_stuck 1$/m);
      const failures = Number(/^hookrelay_feed_reader_failures_total (\d+)$/m.exec(metrics)?.[1]);
      assert.ok(failures >= 3, metrics);

      const status = await runCli(t, ['status', '--state-dir', stateDir, '--listen', daemon.baseUrl.replace('http://', ''), '--json']);
      const view = JSON.parse(status.stdout) as { daemon: { ready: boolean; error: string } };
      assert.equal(view.daemon.ready, false);
      assert.match(view.daemon.error, /503: feed_reader_failing/);

      // The fault is gone: the reader gets past, and the daemon is ready again.
      db.exec('DROP TRIGGER refuse_one');
      await probe.waitForLines(path, 3);
      assert.deepEqual(
        probe.events().map((e) => e.id),
        ['chg_before', 'chg_refused', 'chg_after'],
      );
      await eventually('/readyz to answer 200', async () => (await fetch(`${daemon.baseUrl}/readyz`)).status === 200 || undefined);
      assert.match(await (await fetch(`${daemon.baseUrl}/metrics`)).text(), /^hookrelay_feed_reader_stuck 0$/m);
      daemon.child.kill('SIGTERM');
      assert.deepEqual(await daemon.exited, { code: 0, signal: null });
    });
  });
});

/**
 * `hookrelay db check | backup | prune`, with the built CLI (`npm run build` first), as an
 * operator runs them next to a running daemon: check on a healthy file, a damaged data page and
 * a damaged header; a backup taken while the daemon ingests and delivers opens, passes
 * integrity_check and holds one consistent snapshot; prune in batches, repeated while the daemon
 * delivers to a real receiver (and prunes on its own), loses nothing and never touches
 * undelivered work.
 */
import assert from 'node:assert/strict';
import { mkdirSync, readdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { before, test, type TestContext } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import Database from 'better-sqlite3';
import { systemClock } from '../../src/domain/clock.ts';
import { SCHEMA_VERSION } from '../../src/store/sqlite/connection.ts';
import { openSqliteStore } from '../../src/store/sqlite/store.ts';
import { damageHeader, damagePageOf, readyz, seededState } from '../helpers/db-helpers.ts';
import { assertBuilt, databaseIn, defer, migrateCli, runCli, scratchDir, spawnServe } from '../helpers/feed-helpers.ts';
import { appendFeed, createTestTls, eventIdOf, feedLine, startReceiver, waitFor, type TestTls } from '../helpers/receivers.ts';
import { repos } from '../helpers/sqlite-repos.ts';

before(assertBuilt);

test('db check: ok on a healthy file (exit 0); a damaged data page or header is reported, exit 65', async (t) => {
  const { stateDir, db } = await seededState(t, 'https://hooks.example.com/hook', 300);
  const common = ['--state-dir', stateDir];

  const healthy = await runCli(t, ['db', 'check', ...common]);
  assert.equal(healthy.code, 0, healthy.stderr);
  assert.match(healthy.stdout, /hookrelay\.db: ok\n/);
  assert.match(healthy.stdout, new RegExp(`schema version ${SCHEMA_VERSION} \\(this hookrelay: ${SCHEMA_VERSION}\\)`));
  const json = await runCli(t, ['db', 'check', '--json', ...common]);
  assert.equal(json.code, 0);
  const report = JSON.parse(json.stdout) as Record<string, any>;
  assert.equal(report.ok, true);
  assert.deepEqual(report.integrity, ['ok']);
  assert.deepEqual(report.foreign_keys, []);
  assert.equal(report.schema_version, SCHEMA_VERSION);
  assert.ok(report.disk.pages > 0 && report.disk.page_size === 16384 && report.disk.file_bytes === report.disk.pages * report.disk.page_size);

  const page = damagePageOf(db, 'deliveries');
  const damaged = await runCli(t, ['db', 'check', ...common]);
  assert.equal(damaged.code, 65, damaged.stdout + damaged.stderr);
  assert.match(damaged.stdout, /hookrelay\.db: DAMAGED\n/);
  assert.match(damaged.stdout, new RegExp(`integrity_check found \\d+ problem\\(s\\):[\\s\\S]*page ${page}\\b`), damaged.stdout);
  assert.match(damaged.stdout, /restore the last good backup/);
  assert.equal(damaged.stderr, '');
  // A command that meets the damaged page says so in one line, with the same exit code.
  const listing = await runCli(t, ['deliveries', 'list', '--org', 'acme', '--limit', '10000', ...common]);
  assert.equal(listing.code, 65, listing.stderr);
  assert.equal(listing.stderr, 'hookrelay: the database is damaged (database disk image is malformed (SQLITE_CORRUPT)); check it with `hookrelay db check` and restore the last good backup (docs/operations.md)\n');
  const damagedJson = JSON.parse((await runCli(t, ['db', 'check', '--json', ...common])).stdout) as Record<string, any>;
  assert.equal(damagedJson.ok, false);
  assert.ok(damagedJson.integrity.some((m: string) => m.includes(`page ${page}`)), JSON.stringify(damagedJson.integrity));

  damageHeader(db);
  const header = await runCli(t, ['db', 'check', ...common]);
  assert.equal(header.code, 65);
  assert.match(header.stdout, /DAMAGED\n  cannot be read as a database: file is not a database\n/);
  // Every other command refuses it in one line, with the same exit code.
  const list = await runCli(t, ['orgs', 'list', ...common]);
  assert.equal(list.code, 65);
  assert.match(list.stderr, /^hookrelay: database .* is damaged \(file is not a database\); check it with `hookrelay db check`/);
  assert.equal(list.stderr.trimEnd().split('\n').length, 1);

  const none = await runCli(t, ['db', 'check', '--state-dir', join(stateDir, 'nowhere')]);
  assert.equal(none.code, 2);
  assert.match(none.stderr, /^hookrelay: there is no database at .*nowhere\/hookrelay\.db; pass the daemon's --config and --state-dir/);
});

/** Config for a daemon that trusts the test CA, may reach 127.0.0.1 and polls fast; plus `extra` sections. */
function daemonConfig(t: TestContext, tls: TestTls, extra: Record<string, Record<string, unknown>> = {}): string {
  const file = join(scratchDir(t, 'hookrelay-db-config-'), 'hookrelay.json');
  writeFileSync(
    file,
    JSON.stringify({
      ...extra,
      delivery: { caFile: tls.caFile, allowNetworks: ['127.0.0.1/32'], pollInterval: '20ms', jitterPercent: 0, retrySchedule: ['1s'], ...extra.delivery },
      feed: { pollInterval: 20, batchLines: 200, ...extra.feed },
    }),
  );
  return file;
}

test('db backup while the daemon ingests and delivers: the copy opens, passes integrity_check and holds one consistent snapshot; an existing file is kept unless --force', { timeout: 120_000 }, async (t) => {
  const tls = createTestTls(t);
  const receiver = await startReceiver(t, tls);
  const stateDir = scratchDir(t, 'hookrelay-backup-');
  const config = daemonConfig(t, tls);
  const common = ['--state-dir', stateDir, '--config', config];
  await migrateCli(t, common);
  for (const args of [['orgs', 'add', 'acme'], ['webhook', 'set', '--org', 'acme', '--url', receiver.url]]) assert.equal((await runCli(t, [...args, ...common])).code, 0);
  const daemon = await spawnServe(t, stateDir, ['--config', config]);
  const feed = join(stateDir, 'feed.jsonl');

  // A writer that keeps appending while the backups are taken.
  let written = 0;
  let writing = true;
  /** Byte offset of the end of each line written: ends[n] is where line n + 1 begins. */
  const ends = [0];
  const writer = (async () => {
    while (writing) {
      const lines = Array.from({ length: 100 }, () => feedLine('acme', `evt_${written++}`, `ar_${written % 40}`, 'approved', { data: { note: 'y'.repeat(300) } }));
      for (const line of lines) ends.push(ends.at(-1)! + Buffer.byteLength(JSON.stringify(line) + '\n'));
      appendFeed(feed, lines);
      await sleep(10);
    }
  })();
  defer(t, async () => {
    writing = false;
    await writer;
  });
  await waitFor('some events to be delivered', () => receiver.requests.length >= 500, 30_000);

  const backups = scratchDir(t, 'hookrelay-backups-');
  const file = join(backups, 'hookrelay-backup.db');
  const first = await runCli(t, ['db', 'backup', file, ...common]);
  assert.equal(first.code, 0, first.stderr);
  assert.match(first.stdout, new RegExp(`^backup written to ${file} \\(\\d+\\.\\d MiB in \\d+\\.\\d s\\)\\n$`));
  assert.equal(first.stderr, '', 'no progress output when stderr is not a terminal');
  assert.equal(statSync(file).mode & 0o777, 0o600, 'the backup holds signing secrets: private');
  const checked = await runCli(t, ['db', 'check', file, ...common]);
  assert.equal(checked.code, 0, checked.stdout);
  assert.match(checked.stdout, new RegExp(`^${file}: ok\n`), 'db check FILE checks the backup');

  const snapshotOf = (path: string) => {
    const copy = new Database(path, { readonly: true, fileMustExist: true });
    try {
      assert.equal(copy.pragma('integrity_check', { simple: true }), 'ok');
      assert.deepEqual(copy.pragma('foreign_key_check'), []);
      assert.equal(copy.pragma('user_version', { simple: true }), SCHEMA_VERSION);
      const events = copy.prepare('SELECT count(*) FROM events').pluck().get() as number;
      const stats = copy.prepare('SELECT accepted FROM feed_stats WHERE source = ?').pluck().get(feed) as number;
      const position = copy.prepare('SELECT position FROM feed_positions WHERE source = ?').pluck().get(feed) as number;
      const deliveries = copy.prepare('SELECT count(*) FROM deliveries').pluck().get() as number;
      const delivered = copy.prepare("SELECT count(*) FROM deliveries WHERE status = 'delivered'").pluck().get() as number;
      const webhook = copy.prepare("SELECT url, secret FROM webhooks WHERE org_id = 'acme'").get() as { url: string; secret: string };
      return { events, stats, position, deliveries, delivered, webhook };
    } finally {
      copy.close();
    }
  };
  const a = snapshotOf(file);
  assert.ok(a.events >= 500, `the backup holds the events (${a.events})`);
  // One snapshot: the lines counted, the position committed with them and the events agree.
  assert.equal(a.stats, a.events);
  assert.equal(a.deliveries, a.events);
  assert.equal(a.position, ends[a.events], 'the committed position is the end of the last stored line');
  assert.ok(a.delivered > 0);
  assert.equal(a.webhook.url, receiver.url);
  assert.match(a.webhook.secret, /^whsec_/);

  // Refused without --force, and nothing is changed.
  const again = await runCli(t, ['db', 'backup', file, ...common]);
  assert.equal(again.code, 2);
  assert.equal(again.stderr, `hookrelay: ${file} already exists; choose another file, or pass --force to replace it\n`);
  assert.deepEqual(snapshotOf(file), a);

  const forced = await runCli(t, ['db', 'backup', file, '--force', ...common]);
  assert.equal(forced.code, 0, forced.stderr);
  const b = snapshotOf(file);
  assert.ok(b.events > a.events, `the new backup is a newer snapshot (${b.events} > ${a.events})`);
  assert.equal(b.stats, b.events);
  assert.equal(b.position, ends[b.events]);
  assert.deepEqual(readdirSync(backups), ['hookrelay-backup.db'], 'no temporary file is left behind');

  const missingDir = await runCli(t, ['db', 'backup', join(backups, 'no', 'such', 'x.db'), ...common]);
  assert.equal(missingDir.code, 2);
  assert.match(missingDir.stderr, /^hookrelay: the backup's directory .*no\/such does not exist; create it first, or choose another file\n$/);

  writing = false;
  await writer;
  assert.equal((await readyz(daemon.baseUrl)).status, 200);
  assert.deepEqual(daemon.logRecords().filter((r) => (r.level as number) >= 50), [], 'the daemon logged no error while backed up');
});

test('db prune in batches, again and again while the daemon delivers and prunes on its own: nothing is lost, undelivered work stays', { timeout: 180_000 }, async (t) => {
  const tls = createTestTls(t);
  // Three events are refused: after one retry they are dead (kept, with both attempts). (Few: a
  // webhook failing again and again waits up to 5 s between attempts.)
  const REFUSED = new Set(['evt_7', 'evt_507', 'evt_1007']);
  const receiver = await startReceiver(t, tls, (req) => ({ status: REFUSED.has(eventIdOf(req)!) ? 500 : 200 }));
  const stateDir = scratchDir(t, 'hookrelay-prune-');
  const config = daemonConfig(t, tls, { retention: { enabled: true, deliveredEvents: '1s', quarantinedLines: '1s', interval: '1s', batchSize: 10 } });
  const common = ['--state-dir', stateDir, '--config', config];
  await migrateCli(t, common);
  for (const args of [
    ['orgs', 'add', 'acme'],
    ['webhook', 'set', '--org', 'acme', '--url', receiver.url],
    ['orgs', 'add', 'held'],
    ['webhook', 'set', '--org', 'held', '--url', receiver.url],
    ['webhook', 'disable', '--org', 'held'],
  ]) {
    const r = await runCli(t, [...args, ...common]);
    assert.equal(r.code, 0, r.stderr);
  }
  const daemon = await spawnServe(t, stateDir, ['--config', config]);
  const feed = join(stateDir, 'feed.jsonl');

  const TOTAL = 1500;
  const acme = Array.from({ length: TOTAL }, (_, i) => i).filter((i) => i % 25 !== 0);
  const refused = acme.filter((i) => REFUSED.has(`evt_${i}`));
  const accepted = acme.filter((i) => !REFUSED.has(`evt_${i}`));
  const allSent = () => {
    const ok = new Set(receiver.requests.filter((r) => r.answeredStatus === 200).map(eventIdOf));
    return accepted.every((i) => ok.has(`evt_${i}`)) && refused.every((i) => receiver.requestsFor(`evt_${i}`).length === 2);
  };
  let done = false;
  // The operator's prune, run again and again (one at a time) while the feed is written and delivered.
  const pruneRuns: Array<{ code: number | null; stdout: string; stderr: string }> = [];
  const pruning = (async () => {
    while (!done) pruneRuns.push(await runCli(t, ['db', 'prune', '--delivered-older-than', '1s', ...common]));
  })();
  defer(t, async () => {
    done = true;
    await pruning;
  });
  for (let next = 0; next < TOTAL; ) {
    appendFeed(
      feed,
      Array.from({ length: 50 }, () => {
        const i = next++;
        return i % 25 === 0 ? feedLine('held', `evt_held_${i}`) : feedLine('acme', `evt_${i}`, `ar_${i % 30}`);
      }),
    );
    await sleep(150);
  }
  await waitFor('every accepted event to be delivered and every refused one to be tried twice', () => allSent(), 120_000).catch((err: unknown) => {
    const ok = new Set(receiver.requests.filter((r) => r.answeredStatus === 200).map(eventIdOf));
    const missing = accepted.filter((i) => !ok.has(`evt_${i}`)).map((i) => `evt_${i}`);
    const tries = refused.filter((i) => receiver.requestsFor(`evt_${i}`).length !== 2).map((i) => `evt_${i}:${receiver.requestsFor(`evt_${i}`).length}`);
    const conn = new Database(databaseIn(stateDir), { readonly: true });
    const rows = conn.prepare(`SELECT e.id, d.status, d.attempts, d.next_attempt_at, d.lease_expires_at FROM deliveries d JOIN events e ON e.seq = d.event_seq WHERE e.id IN (${missing.slice(0, 10).map(() => '?').join(',') || "''"})`).all(...missing.slice(0, 10));
    const counts = conn.prepare('SELECT status, count(*) AS n FROM deliveries GROUP BY status').all();
    const events = conn.prepare('SELECT count(*) FROM events').pluck().get();
    conn.close();
    throw new Error(`${String(err)}; missing ${missing.length}: ${missing.slice(0, 10).join(' ')}; rows ${JSON.stringify(rows)}; counts ${JSON.stringify(counts)} events ${events}; tries ${tries.slice(0, 10).join(' ')}; log ${JSON.stringify(daemon.logRecords().filter((r) => (r.level as number) >= 40 && r.subsystem !== 'dispatch').slice(0, 5))}`);
  });
  const store = openSqliteStore(databaseIn(stateDir), systemClock);
  defer(t, () => store.close());
  await waitFor('every refused event to be dead', () => store.db.prepare("SELECT count(*) FROM deliveries WHERE status = 'dead'").pluck().get() === refused.length, 30_000);
  await sleep(1100);
  done = true;
  await pruning;
  pruneRuns.push(await runCli(t, ['db', 'prune', '--delivered-older-than', '1s', '--json', ...common]));

  for (const run of pruneRuns) assert.equal(run.code, 0, `every prune run succeeded next to the daemon: ${run.stderr}`);
  assert.ok(pruneRuns.length >= 2, `prune ran again and again while the daemon delivered (${pruneRuns.length})`);
  const removedBy = (r: { stdout: string }) => (r.stdout.startsWith('{') ? (JSON.parse(r.stdout) as { events: number }).events : Number(/^removed (\d+) event/.exec(r.stdout)![1]));
  const removedByCli = pruneRuns.reduce((n, r) => n + removedBy(r), 0);
  const removedByDaemon = daemon.logRecords().filter((r) => r.subsystem === 'retention').reduce((n, r) => n + ((r.events as number) ?? 0), 0);
  t.diagnostic(`${pruneRuns.length} prune runs removed ${removedByCli} events; the daemon's own retention ${removedByDaemon}`);
  assert.ok(removedByCli > 0, 'the CLI pruned events while the daemon ran');

  // Nothing lost, nothing sent twice: each accepted event was answered 200 exactly once.
  for (const i of accepted) assert.equal(receiver.requestsFor(`evt_${i}`).filter((r) => r.answeredStatus === 200).length, 1, `evt_${i} delivered once`);
  // Undelivered work stays: dead deliveries with their events and both attempts; held ones untouched.
  const rows = store.db
    .prepare('SELECT e.id AS event, d.status, d.attempts, (SELECT count(*) FROM delivery_attempts a WHERE a.delivery_id = d.id) AS logged FROM deliveries d JOIN events e ON e.seq = d.event_seq ORDER BY d.id')
    .all() as Array<{ event: string; status: string; attempts: number; logged: number }>;
  const byStatus = (status: string) => rows.filter((r) => r.status === status);
  assert.deepEqual(
    byStatus('dead').map((r) => [r.event, r.attempts, r.logged]),
    refused.map((i) => [`evt_${i}`, 2, 2]),
  );
  assert.deepEqual(
    byStatus('pending').map((r) => r.event),
    Array.from({ length: TOTAL }, (_, i) => i).filter((i) => i % 25 === 0).map((i) => `evt_held_${i}`),
    'the disabled webhook\'s deliveries are held, not pruned',
  );
  // Everything delivered more than a second ago is gone, but for the newest rows (their ids are never handed out again).
  assert.ok(byStatus('delivered').length <= 2, `delivered rows left: ${JSON.stringify(byStatus('delivered'))}`);
  assert.equal(store.db.prepare('SELECT count(*) FROM events').pluck().get(), byStatus('dead').length + byStatus('pending').length + byStatus('delivered').length);
  assert.deepEqual(store.db.pragma('foreign_key_check'), []);
  // The only errors logged are the refused events going dead, each once; in any order, since when
  // each one goes dead depends on the timing of its retries.
  const byEvent = (a: unknown[], b: unknown[]) => String(a[0]).localeCompare(String(b[0]));
  assert.deepEqual(
    daemon
      .logRecords()
      .filter((r) => (r.level as number) >= 50)
      .map((r) => [r.eventId, r.outcome])
      .sort(byEvent),
    refused.map((i) => [`evt_${i}`, 'dead']).sort(byEvent),
  );
  assert.equal((await readyz(daemon.baseUrl)).status, 200);
});

test('db prune --dry-run counts what db prune then removes, and removes nothing', async (t) => {
  const stateDir = scratchDir(t, 'hookrelay-dry-');
  mkdirSync(stateDir, { recursive: true });
  const db = databaseIn(stateDir);
  {
    const store = openSqliteStore(db, { now: () => Date.now() - 40 * 86_400_000 });
    const r = repos(store);
    r.orgs.insert({ id: 'acme', name: 'Acme', createdAt: 0 });
    r.webhooks.upsert('acme', 'https://hooks.example.com/hook', false, null, 0);
    const old = Date.now() - 40 * 86_400_000;
    store.db.transaction(() => {
      const source = r.feed.sourceId('feed');
      for (let i = 0; i < 30; i++) {
        const [seq] = r.feed.insertEvents([{ event: { id: `evt_${i}`, orgId: 'acme', anticipationRequestId: `ar_${i}`, occurredAt: old, details: '{"status":"approved"}', legacyId: null }, position: null }], source, old + i);
        const id = r.deliveries.insert(seq!, 'acme', i, old + i);
        r.deliveries.insertAttempts([{ deliveryId: id, attempt: 1, startedAt: old + i, durationMs: 3, url: 'https://hooks.example.com/hook', statusCode: 200, errorClass: null, errorDetail: null, responseBody: 'ok', outcome: 'delivered', sentTimestamp: null, sentSignature: null }]);
        // Every third one is still failing: kept.
        r.deliveries.settle(id, { status: i % 3 === 0 ? 'pending' : 'delivered', attempts: 1, nextAttemptAt: old + 5000, at: old + i, statusCode: 200, error: null });
        r.feed.insertRejects([{ source: 'feed', position: i, lineBytes: 1, raw: Buffer.from('x'), reason: 'invalid_json', detail: 'x', eventId: null, receivedAt: old + i }]);
      }
    })();
    await store.close();
  }
  const dry = await runCli(t, ['db', 'prune', '--dry-run', '--json', '--state-dir', stateDir]);
  assert.equal(dry.code, 0, dry.stderr);
  const counted = JSON.parse(dry.stdout) as Record<string, unknown>;
  // 20 delivered events, but the newest delivered one (evt_29 holds the newest rows) is kept; 29 of 30 quarantined lines.
  assert.deepEqual([counted.dry_run, counted.events, counted.deliveries, counted.attempts, counted.quarantined_lines], [true, 19, 19, 19, 29]);
  const human = await runCli(t, ['db', 'prune', '--dry-run', '--state-dir', stateDir]);
  assert.match(human.stdout, /^would remove 19 event\(s\), 19 delivery\(ies\), 19 attempt\(s\), 29 quarantined line\(s\): events delivered before \S+Z, lines quarantined before \S+Z/);
  const pruned = JSON.parse((await runCli(t, ['db', 'prune', '--json', '--state-dir', stateDir])).stdout) as Record<string, unknown>;
  assert.deepEqual([pruned.dry_run, pruned.events, pruned.deliveries, pruned.attempts, pruned.quarantined_lines], [false, 19, 19, 19, 29]);
  const after = JSON.parse((await runCli(t, ['db', 'prune', '--dry-run', '--json', '--state-dir', stateDir])).stdout) as Record<string, unknown>;
  assert.deepEqual([after.events, after.quarantined_lines], [0, 0]);

  const bad = await runCli(t, ['db', 'prune', '--delivered-older-than', 'soon', '--state-dir', stateDir]);
  assert.equal(bad.code, 2);
  assert.equal(bad.stderr, 'hookrelay: --delivered-older-than must be a duration of at least 1s, such as 12h or 7d; got "soon"\n');
});

test('db backup --dir DIR --keep N (the nightly timer\'s command): a dated copy with the generated JWT secret beside it, private, the oldest beyond N removed; FILE and --dir together, or --keep alone, are usage errors', async (t) => {
  const { stateDir } = await seededState(t, 'https://hooks.example.com/hook', 20);
  const common = ['--state-dir', stateDir];
  const dir = join(scratchDir(t, 'hookrelay-nightly-'), 'backups');
  const names = () => readdirSync(dir).sort();
  const taken: string[] = [];
  for (let i = 0; i < 4; i++) {
    const r = await runCli(t, ['db', 'backup', '--dir', dir, '--keep', '2', '--json', ...common]);
    assert.equal(r.code, 0, r.stderr);
    const out = JSON.parse(r.stdout) as { path: string; jwt_secret: string | null; credential_key: string | null; removed: string[] };
    assert.match(out.path, /\/hookrelay-\d{8}T\d{6}Z\.db$/);
    assert.equal(out.jwt_secret, out.path.replace(/\.db$/, '.jwt-secret'), 'the generated secret is copied beside it');
    assert.equal(readFileSync(out.jwt_secret!, 'utf8'), readFileSync(join(stateDir, 'jwt-secret'), 'utf8'));
    assert.equal(statSync(out.jwt_secret!).mode & 0o777, 0o600);
    // The credential key too (issue 43): without it, the webhooks' sealed credentials restore unreadable.
    assert.equal(out.credential_key, out.path.replace(/\.db$/, '.credential-key'));
    assert.equal(readFileSync(out.credential_key!, 'utf8'), readFileSync(join(stateDir, 'credential-key'), 'utf8'));
    assert.equal(statSync(out.credential_key!).mode & 0o777, 0o600);
    assert.equal(statSync(out.path).mode & 0o777, 0o600);
    assert.equal(statSync(dir).mode & 0o777, 0o700, 'made private when missing');
    taken.push(out.path);
    if (i < 3) await sleep(1100); // the names are to the second
  }
  const kept = taken.slice(-2).flatMap((path) => [path.replace(/.*\//, ''), path.replace(/.*\//, '').replace(/\.db$/, '.jwt-secret'), path.replace(/.*\//, '').replace(/\.db$/, '.credential-key')]).sort();
  assert.deepEqual(names(), kept, 'the newest two and their secrets');
  const copy = new Database(taken.at(-1)!, { readonly: true });
  t.after(() => copy.close());
  assert.equal(copy.pragma('integrity_check', { simple: true }), 'ok');

  const both = await runCli(t, ['db', 'backup', join(dir, 'x.db'), '--dir', dir, ...common]);
  assert.equal(both.code, 2);
  assert.match(both.stderr, /give either FILE or --dir DIR, not both/);
  const keepAlone = await runCli(t, ['db', 'backup', join(dir, 'y.db'), '--keep', '3', ...common]);
  assert.equal(keepAlone.code, 2);
  assert.match(keepAlone.stderr, /--keep applies to --dir/);
  assert.deepEqual(names(), kept, 'a refused command writes nothing');
});

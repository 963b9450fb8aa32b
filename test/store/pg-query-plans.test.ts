/**
 * The PostgreSQL delivery queries use the indexes they were written for, as the SQLite ones are
 * checked with EXPLAIN QUERY PLAN (store-delivery-queues.test.ts, status-service.test.ts): on
 * a database with a realistic spread (most deliveries delivered, a few fresh, retried, leased or
 * dead, over twenty organizations) and fresh statistics, EXPLAIN shows each query reading the
 * deliveries through its partial index, never by a sequential scan of the table; and so for the
 * console's reads: the delivery log's parts and the chart's attempts.
 */
import assert from 'node:assert/strict';
import { after, test } from 'node:test';
import { systemClock } from '../../src/domain/clock.ts';
import { PG_ATTEMPT_COUNTS_SQL, PG_DUE_SQL, PG_LEASE_SQL, PG_QUEUE_GAUGE_SQL, pgListStatement } from '../../src/store/pg/deliveries-repo.ts';
import { createPgPool } from '../../src/store/pg/pool.ts';
import { openPgStore } from '../../src/store/pg/store.ts';
import { pgServer, stopPgServer } from '../helpers/pg-harness.ts';

after(stopPgServer);

interface PlanNode {
  'Node Type': string;
  'Relation Name'?: string;
  'Index Name'?: string;
  Plans?: PlanNode[];
}

/** Every node of a plan, depth first. */
function nodes(plan: PlanNode): PlanNode[] {
  return [plan, ...(plan.Plans ?? []).flatMap(nodes)];
}

const sqlOf = (statement: { sql: string; values: unknown[] }) => ({ sql: statement.sql, params: statement.values });

test('the PostgreSQL delivery queries read deliveries through their partial indexes', { timeout: 60_000 }, async (t) => {
  const url = await (await pgServer()).createDatabase();
  const store = await openPgStore(url, systemClock, { instance: 'plans', poolSize: 2 });
  const pool = createPgPool(url, { max: 1 });
  t.after(async () => {
    await pool.end();
    await store.close();
  });
  const now = 1_800_000_000_000;
  await pool.query(`
    INSERT INTO organizations (id, name, created_at) SELECT 'org_' || i, 'Org ' || i, 1 FROM generate_series(0, 19) i;
    INSERT INTO webhooks (org_id, url, active_hmac, created_at, updated_at) SELECT 'org_' || i, 'https://hooks.example.com/' || i, true, 1, 1 FROM generate_series(0, 19) i;
    INSERT INTO feed_sources (id, instance, name) VALUES (1, 'plans', 'feed.jsonl');
    INSERT INTO events (seq, id, org_id, anticipation_request_id, occurred_at, payload, source_id, received_at)
      SELECT i, 'evt_' || i, 'org_' || (i % 20), 'ar_' || (i % 997), 1, '"status":"approved","previous_status":null', 1, i FROM generate_series(1, 40000) i;
    INSERT INTO deliveries (id, event_seq, org_id, ordering_key, status, attempts, next_attempt_at, lease_expires_at, leased_by, created_at, updated_at, order_at, release_at)
      SELECT i, i, 'org_' || (i % 20), i % 997,
        CASE WHEN k < 90 THEN 'delivered' WHEN k = 99 THEN 'dead' ELSE 'pending' END,
        CASE WHEN k < 90 OR k >= 95 THEN 1 ELSE 0 END,
        ${now} + (i % 7) * 1000,
        CASE WHEN k = 98 THEN ${now} + 60000 END,
        CASE WHEN k = 98 THEN 'other' END,
        i, i, i,
        -- Most fresh deliveries are held by the reorder window (released ones are claimed at once).
        CASE WHEN k = 90 THEN i + 1000 ELSE ${now} + 500 END
      FROM (SELECT i, (i / 20) % 100 AS k FROM generate_series(1, 40000) i) s;
    INSERT INTO delivery_attempts (delivery_id, attempt, started_at, duration_ms, url, status_code, outcome)
      SELECT id, 1, id * 1000, 10, 'https://hooks.example.com/', 200, CASE WHEN status = 'delivered' THEN 'delivered' ELSE 'retry' END
      FROM deliveries WHERE attempts > 0;
    ANALYZE`);

  const explain = async (sql: string, params: unknown[]): Promise<PlanNode[]> => {
    const { rows } = await pool.query<{ 'QUERY PLAN': Array<{ Plan: PlanNode }> }>(`EXPLAIN (FORMAT JSON) ${sql}`, params);
    return nodes(rows[0]!['QUERY PLAN'][0]!.Plan);
  };
  const cases: Array<{ name: string; sql: string; params: unknown[]; indexes: string[]; scanned?: string[] }> = [
    // Fresh ones by release time (the reorder window's held changes are not visited), a request's pending changes in order.
    { name: 'due rows', sql: PG_DUE_SQL, params: ['org_3', now, 18], indexes: ['deliveries_org_release', 'deliveries_org_due', 'deliveries_request_pending'] },
    { name: 'next release', sql: PG_QUEUE_GAUGE_SQL.nextRelease, params: ['org_3', 20_000], indexes: ['deliveries_org_release'] },
    // A first lease looks for a later change of the request already sent.
    { name: 'lease', sql: PG_LEASE_SQL, params: [[100, 200, 300], now + 25_000, now, 'plans'], indexes: ['deliveries_pkey', 'deliveries_request_sent'] },
    // Either index of the fresh deliveries (here, a hundred of them: the planner may read them by release time and sort).
    { name: 'count fresh', sql: PG_QUEUE_GAUGE_SQL.countFreshChunk, params: ['org_3', 0, 5000], indexes: ['deliveries_org_fresh|deliveries_org_release'] },
    { name: 'count tried', sql: PG_QUEUE_GAUGE_SQL.countTriedChunk, params: ['org_3', 0, 5000], indexes: ['deliveries_org_status'] },
    { name: 'oldest fresh', sql: PG_QUEUE_GAUGE_SQL.oldestFresh, params: ['org_3', now], indexes: ['deliveries_org_release'] },
    { name: 'earliest retry', sql: PG_QUEUE_GAUGE_SQL.earliestRetry, params: ['org_3', now], indexes: ['deliveries_org_due'] },
    { name: 'due retries', sql: PG_QUEUE_GAUGE_SQL.countDueRetries, params: ['org_3', now, 100_000], indexes: ['deliveries_org_due'] },
    { name: 'recent failure', sql: PG_QUEUE_GAUGE_SQL.recentFailure, params: ['org_3', 'dead', 2000], indexes: ['deliveries_org_status'] },
    { name: 'leases elsewhere', sql: PG_QUEUE_GAUGE_SQL.leasedElsewhere, params: [['org_3', 'org_4'], now, 'plans'], indexes: ['deliveries_org_leased'] },
    // The console's chart: an hour of attempts from the start-time index. How their deliveries
    // are joined is the planner's choice by the counts (a hash join over the organization's
    // deliveries when the window holds more attempts than it has deliveries, as here).
    { name: 'attempt counts', sql: PG_ATTEMPT_COUNTS_SQL, params: ['org_3', 20_000_000, 23_600_000, 60_000], indexes: ['delivery_attempts_started'], scanned: ['deliveries'] },
    // The delivery log: each part through its own index, within an id range (a cursor deep down, a time window).
    ...(
      [
        ['log', { limit: 51 }, ['deliveries_org_fresh', 'deliveries_org_status']],
        ['log deep down', { limit: 51, beforeId: 20_000 }, ['deliveries_org_fresh', 'deliveries_org_status']],
        ['log, pending', { limit: 51, status: 'pending' }, ['deliveries_org_fresh', 'deliveries_org_status']],
        ['log, failed', { limit: 51, status: 'failed' }, ['deliveries_org_status']],
        // Nine in ten delivered here: the planner may rather read the primary key backwards, and stop as soon.
        ['log, delivered', { limit: 51, status: 'delivered' }, ['deliveries_org_status|deliveries_pkey']],
        ['log, dead', { limit: 51, status: 'dead' }, ['deliveries_org_status']],
        ['log, a time window', { limit: 51, since: 10_000, until: 11_000, fromId: 10_000, beforeId: 11_000 }, ['deliveries_org_fresh', 'deliveries_org_status']],
        ['log, a request searched by id (a chunk of the ids)', { limit: 51, requestId: 'ar_3', fromId: 20_000, beforeId: 22_000 }, ['deliveries_pkey']],
      ] as const
      // A hundred fresh deliveries per organization here: the planner may read them through
      // either partial index of fresh deliveries, by id or by release time, and sort them.
    ).map(([name, filter, indexes]) => ({ name, ...sqlOf(pgListStatement('org_3', filter)), indexes: indexes.map((i) => (i === 'deliveries_org_fresh' ? 'deliveries_org_fresh|deliveries_org_release' : i)) })),
  ];
  for (const c of cases) {
    const plan = await explain(c.sql, c.params);
    const used = new Set(plan.map((n) => n['Index Name']).filter((n): n is string => n !== undefined));
    // An entry `a|b`: either index.
    for (const index of c.indexes) assert.ok(index.split('|').some((i) => used.has(i)), `${c.name}: expected ${index}, plan uses ${[...used].join(', ') || 'no index'}`);
    const scans = plan.filter(
      (n) => n['Node Type'] === 'Seq Scan' && (n['Relation Name'] === 'deliveries' || n['Relation Name'] === 'delivery_attempts') && !c.scanned?.includes(n['Relation Name']),
    );
    assert.deepEqual(scans, [], `${c.name}: a sequential scan of deliveries or attempts`);
  }
  // Every organization has some of each state (per organization, 90 % delivered, 5 % fresh, 3 %
  // retried, 1 % leased, 1 % dead): the plans above are for a queue with work in it.
  const due = await store.read((tx) => tx.deliveries.dueRows('org_3', now + 10_000, 18));
  assert.equal(due.length, 18);
});

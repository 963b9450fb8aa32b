/**
 * The SQL both backends share (src/store/sql.ts): written once, it reads the same on SQLite and
 * PostgreSQL but for how each spells a parameter, and SQLite's one-row gauge lookups keep the
 * `+@org` that plans them once (docs/benchmarks.md, "The claim planned once"). The plans
 * themselves are checked on real databases by status-service.test.ts (SQLite) and
 * pg-query-plans.test.ts (PostgreSQL); the answers by the contract suites. Pure functions here.
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { PG_QUEUE_GAUGE_SQL } from '../../src/store/pg/deliveries-repo.ts';
import { ATTEMPT_INSERT, EVENT_INSERT, insertRowsSql, latestFailure, named, numbered, oldestDue, positional } from '../../src/store/sql.ts';
import { SQLITE_QUEUE_GAUGE_SQL } from '../../src/store/sqlite/deliveries-repo.ts';

/** A SQLite statement with its named parameters spelt as PostgreSQL's numbered ones, in the order given. */
function asNumbered(sql: string, names: readonly string[]): string {
  return names.reduce((text, name, i) => text.replaceAll(new RegExp(`\\+?@${name}\\b`, 'g'), `$${i + 1}`), sql);
}

describe('SQL written once for both backends', () => {
  test('named spells @name, numbered spells $1, $2, ... in the order of the values', () => {
    assert.deepEqual(named('org', 'now'), { org: '@org', now: '@now' });
    assert.deepEqual(numbered('org', 'now', 'limit'), { org: '$1', now: '$2', limit: '$3' });
    assert.deepEqual(positional('org', 'id'), { org: '?', id: '?' });
  });

  test('insertRowsSql: one column list, a row per statement on SQLite, the batch unnested in its order on PostgreSQL', () => {
    const columns = ATTEMPT_INSERT.columns.map((c) => c.name).join(', ');
    assert.equal(insertRowsSql('sqlite', ATTEMPT_INSERT), `INSERT INTO delivery_attempts (${columns})\n  VALUES (${ATTEMPT_INSERT.columns.map(() => '?').join(', ')})`);
    const pg = insertRowsSql('postgres', ATTEMPT_INSERT);
    assert.match(pg, /^INSERT INTO delivery_attempts \(delivery_id, attempt, .*, sent_signature\)\n  SELECT u\.delivery_id, u\.attempt, .*, u\.sent_signature\n/);
    assert.match(pg, /FROM unnest\(\$1::bigint\[\], \$2::int\[\], .*, \$12::text\[\]\) WITH ORDINALITY AS u \(delivery_id, .*, sent_signature, ordinality\)\n  ORDER BY u\.ordinality$/);
  });

  test("insertRowsSql: a batch's own values are passed once, after the arrays, and the conflict clause ends both", () => {
    const sqlite = insertRowsSql('sqlite', EVENT_INSERT);
    assert.equal(sqlite.match(/\?/g)?.length, EVENT_INSERT.columns.length);
    assert.match(sqlite, /ON CONFLICT \(id\) DO NOTHING$/);
    const pg = insertRowsSql('postgres', EVENT_INSERT);
    assert.match(pg, /SELECT u\.id, u\.org_id, u\.anticipation_request_id, u\.occurred_at, u\.payload, \$9::bigint, u\.source_position, \$10::bigint, u\.traceparent, u\.tracestate\n/);
    assert.match(pg, /unnest\(\$1::text\[\], \$2::text\[\], \$3::text\[\], \$4::bigint\[\], \$5::text\[\], \$6::bigint\[\], \$7::text\[\], \$8::text\[\]\)/);
    assert.match(pg, /ORDER BY u\.ordinality\n  ON CONFLICT \(id\) DO NOTHING$/);
  });

  test('the queue gauges both backends share are the same statement but for the parameters', () => {
    const shared = {
      countFreshChunk: ['org', 'after', 'limit'],
      countTriedChunk: ['org', 'after', 'limit'],
      countDueRetries: ['org', 'now', 'limit'],
      earliestRetry: ['org', 'now'],
      recentFailure: ['org', 'status', 'limit'],
    } as const;
    for (const [name, params] of Object.entries(shared)) {
      const gauge = name as keyof typeof shared;
      assert.equal(asNumbered(SQLITE_QUEUE_GAUGE_SQL[gauge], params), PG_QUEUE_GAUGE_SQL[gauge], name);
    }
  });

  test("SQLite's one-row gauge lookups spell the organization +@org, the counts a bare @org", () => {
    for (const name of ['oldestFresh', 'earliestRetry'] as const) assert.match(SQLITE_QUEUE_GAUGE_SQL[name], /org_id = \+@org\b/, name);
    for (const name of ['countFreshChunk', 'countTriedChunk', 'countDueRetries', 'recentFailure'] as const) assert.match(SQLITE_QUEUE_GAUGE_SQL[name], /org_id = @org\b/, name);
  });

  test('oldestDue: the oldest fresh delivery, or the earliest retry once it is due, whichever is older', () => {
    assert.equal(oldestDue(null, null, 100), null);
    assert.equal(oldestDue(50, null, 100), 50);
    assert.equal(oldestDue(null, 80, 100), 80);
    assert.equal(oldestDue(null, 120, 100), null, 'a retry not yet due is not due');
    assert.equal(oldestDue(50, 120, 100), 50);
    assert.equal(oldestDue(90, 80, 100), 80);
    assert.equal(oldestDue(70, 80, 100), 70);
  });

  test('latestFailure: the latest of the rows found, null when none was', () => {
    assert.equal(latestFailure([undefined, undefined]), null);
    assert.deepEqual(latestFailure([{ at: 5, code: 500, error: 'a' }, undefined]), { at: 5, statusCode: 500, error: 'a' });
    assert.deepEqual(latestFailure([{ at: 5, code: 500, error: 'a' }, { at: 9, code: null, error: 'b' }]), { at: 9, statusCode: null, error: 'b' });
    assert.deepEqual(latestFailure([{ at: 9, code: 502, error: 'c' }, { at: 9, code: null, error: 'd' }]), { at: 9, statusCode: 502, error: 'c' }, 'a tie keeps the first (pending before dead)');
  });
});

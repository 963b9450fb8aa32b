/**
 * What the metrics gauges and `hookrelay status` cost with a large backlog: builds a database
 * with N queued deliveries (default 1,000,000, spread over 16 organizations, a tenth of them
 * tried and waiting for a retry), then prints the query plan of every gauge read, and times a
 * full read of the gauges (status.queue(), then a whole /metrics exposition) together with the
 * longest the event loop was held meanwhile (a 1 ms timer's worst lateness); then times pages of
 * the delivery log (GET /webhook/deliveries, the console's table) at the front and deep down,
 * of one organization as built and of another once settled (nine in ten delivered), and the
 * console's chart of attempts (GET /webhook/stats) over a million attempts in a day.
 *
 *   node --import tsx scripts/bench-metrics.ts [--deliveries 1000000] [--orgs 16] [--runs 3] [--keep DIR]
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { systemClock } from '../src/domain/clock.ts';
import { orderingKey } from '../src/domain/ordering.ts';
import { createLogger } from '../src/log.ts';
import { createMetrics } from '../src/metrics/metrics.ts';
import { createStatusService } from '../src/services/status.ts';
import { SQLITE_QUEUE_GAUGE_SQL as QUEUE_GAUGE_SQL } from '../src/store/sqlite/deliveries-repo.ts';
import { openSqliteStore } from '../src/store/sqlite/store.ts';
import { createDeliveryLogService, type LogQuery } from '../src/services/delivery-log.ts';
import { createAuditTrail } from '../src/services/audit.ts';

const { values } = parseArgs({ options: { deliveries: { type: 'string' }, orgs: { type: 'string' }, runs: { type: 'string' }, keep: { type: 'string' } } });
const total = Number(values.deliveries ?? 1_000_000);
const orgCount = Number(values.orgs ?? 16);
const runs = Number(values.runs ?? 3);
const dir = values.keep ?? mkdtempSync(join(tmpdir(), 'hookrelay-bench-metrics-'));
const store = openSqliteStore(join(dir, 'hookrelay.db'), systemClock);
const db = store.db;

if ((db.prepare('SELECT count(*) FROM deliveries').pluck().get() as number) < total) {
  const started = performance.now();
  const orgs = Array.from({ length: orgCount }, (_, i) => `org-${i}`);
  await store.transaction(async (tx) => {
    for (const org of orgs) {
      await tx.orgs.insert({ id: org, name: org, createdAt: 0 });
      await tx.webhooks.upsert(org, `https://hooks.example/${org}`, false, null, 0);
    }
  });
  const source = await store.transaction((tx) => tx.feed.sourceId('bench'));
  const event = db.prepare('INSERT INTO events (id, org_id, anticipation_request_id, occurred_at, payload, source_id, source_position, received_at) VALUES (?, ?, ?, ?, ?, ?, NULL, ?)');
  const delivery = db.prepare("INSERT INTO deliveries (event_seq, org_id, ordering_key, status, attempts, next_attempt_at, created_at, updated_at) VALUES (?, ?, ?, 'pending', ?, ?, ?, ?)");
  const now = Date.now();
  for (let from = 0; from < total; from += 50_000) {
    db.transaction(() => {
      for (let i = from; i < Math.min(total, from + 50_000); i++) {
        const org = orgs[i % orgCount]!;
        const seq = Number(event.run(`evt_bench_${i}`, org, `ar_${i}`, now, '{"status":"approved"}', source, now - total + i).lastInsertRowid);
        const tried = i % 10 === 0;
        delivery.run(seq, org, orderingKey(org, `ar_${i}`), tried ? 1 : 0, tried ? now + 3_600_000 : now - total + i, now - total + i, now - total + i);
      }
    })();
  }
  console.log(`built ${total} queued deliveries over ${orgCount} organizations in ${((performance.now() - started) / 1000).toFixed(1)} s (${dir})`);
}

console.log('\nquery plans of the gauge reads:');
for (const [name, sql] of Object.entries(QUEUE_GAUGE_SQL)) {
  const params = { org: 'org-0', after: 0, limit: 10_000, now: Date.now(), status: 'pending' };
  const used = Object.fromEntries(Object.entries(params).filter(([k]) => sql.includes(`@${k}`)));
  const plan = (db.prepare(`EXPLAIN QUERY PLAN ${sql}`).all(used) as Array<{ detail: string }>).map((r) => r.detail).join(' | ');
  console.log(`  ${name}: ${plan}`);
}

/** Runs `fn` while a 1 ms timer measures how late it fires: the longest the event loop was held. */
async function timed<T>(fn: () => Promise<T>): Promise<{ result: T; ms: number; heldMs: number }> {
  let last = performance.now();
  let held = 0;
  const timer = setInterval(() => {
    const t = performance.now();
    held = Math.max(held, t - last);
    last = t;
  }, 1);
  const started = performance.now();
  const result = await fn();
  const ms = performance.now() - started;
  clearInterval(timer);
  held = Math.max(held, performance.now() - last);
  return { result, ms, heldMs: held };
}

const status = createStatusService(store, { disableAfterMs: 5 * 86_400_000 });
const metrics = createMetrics({ status, feedPath: null, refreshIntervalMs: 0, perOrganization: true, version: 'bench', log: createLogger('warn') });
console.log(`\n${runs} run(s):`);
for (let run = 1; run <= runs; run++) {
  const q = await timed(() => status.queue());
  const m = await timed(() => metrics.render());
  const t = q.result.totals;
  console.log(
    `  run ${run}: status.queue() ${q.ms.toFixed(0)} ms (event loop held at most ${q.heldMs.toFixed(1)} ms), counted ${t.new} new + ${t.retrying} retrying + ${t.held} held; ` +
      `whole /metrics exposition ${m.ms.toFixed(0)} ms (held at most ${m.heldMs.toFixed(1)} ms)`,
  );
}
// The delivery log as the console and GET /webhook/deliveries page through it: 50 rows a page,
// keyset on the delivery id (the cursor), with and without filters, at the front of one
// organization's million-row share and deep into it.
const deliveryLog = createDeliveryLogService(store, { userAgent: 'bench' }, createAuditTrail(store, createLogger('silent')));
const reads = Math.max(runs, 5);
/** Times each page `reads` times; prints the median, the rows and the longest the event loop was held. */
async function timePages(orgId: string, pages: ReadonlyArray<[string, LogQuery]>): Promise<void> {
  for (const [what, query] of pages) {
    const times: number[] = [];
    let rows = 0;
    let held = 0;
    let more = false;
    for (let i = 0; i < reads; i++) {
      const r = await timed(() => deliveryLog.page(orgId, query));
      times.push(r.ms);
      held = Math.max(held, r.heldMs);
      rows = r.result.deliveries.length;
      more = r.result.nextBeforeId !== null;
    }
    times.sort((a, b) => a - b);
    console.log(`  ${what}: ${times[Math.floor(times.length / 2)]!.toFixed(2)} ms (${rows} rows${more ? ', more' : ''}; event loop held at most ${held.toFixed(1)} ms)`);
  }
}
/**
 * Times a search by request to its end, as a client follows next_cursor: the calls it takes, the
 * time of the first and of all, the deliveries found; the median of `reads` searches.
 */
async function timeSearch(orgId: string, what: string, requestId: string): Promise<void> {
  const firsts: number[] = [];
  const totals: number[] = [];
  let calls = 0;
  let found = 0;
  let held = 0;
  for (let i = 0; i < reads; i++) {
    let beforeId: number | undefined;
    let total = 0;
    calls = 0;
    found = 0;
    do {
      const r = await timed(() => deliveryLog.page(orgId, { limit: 50, requestId, beforeId }));
      if (calls === 0) firsts.push(r.ms);
      total += r.ms;
      calls++;
      found += r.result.deliveries.length;
      held = Math.max(held, r.heldMs);
      beforeId = r.result.nextBeforeId ?? undefined;
    } while (beforeId !== undefined);
    totals.push(total);
  }
  const median = (xs: number[]) => xs.sort((a, b) => a - b)[Math.floor(xs.length / 2)]!.toFixed(1);
  console.log(`  ${what}: ${median(totals)} ms to the end of the log in ${calls} call(s), ${median(firsts)} ms the first (${found} found; event loop held at most ${held.toFixed(1)} ms)`);
}
/** The organization's ids and queue times: where half-way down is. */
function halfWay(orgId: string): { id: number; at: number; requestId: string; requestIdInWindow: string } {
  const r = db.prepare('SELECT min(id) AS low, max(id) AS high, min(created_at) AS first, max(created_at) AS last FROM deliveries WHERE org_id = ?').get(orgId) as { low: number; high: number; first: number; last: number };
  const id = Math.floor((r.low + r.high) / 2);
  const at = Math.floor((r.first + r.last) / 2);
  const requestOf = (where: string, value: number) =>
    db.prepare(`SELECT e.anticipation_request_id FROM deliveries d JOIN events e ON e.seq = d.event_seq WHERE d.org_id = ? AND ${where} ORDER BY d.id DESC LIMIT 1`).pluck().get(orgId, value) as string;
  return { id, at, requestId: requestOf('d.id <= ?', id), requestIdInWindow: requestOf('d.created_at < ?', at - 30_000) };
}
const org0 = halfWay('org-0');
console.log(`
the delivery log of org-0 (${Math.round(total / orgCount)} deliveries, a tenth tried and failed, the rest never attempted), a page of 50, median of ${reads} reads:`);
await timePages('org-0', [
  ['first page', { limit: 50 }],
  ['a page half-way down (cursor)', { limit: 50, beforeId: org0.id }],
  ['status=pending, half-way down', { limit: 50, status: 'pending', beforeId: org0.id }],
  ['status=failed (one in ten)', { limit: 50, status: 'failed' }],
  ['status=delivered (none)', { limit: 50, status: 'delivered' }],
  ['since/until, a one-minute window half-way', { limit: 50, since: org0.at - 60_000, until: org0.at }],
  ['request_id within that window', { limit: 50, since: org0.at - 60_000, until: org0.at, requestId: org0.requestIdInWindow }],
]);
await timeSearch('org-0', 'request_id of a delivery half-way down, the whole log searched', org0.requestId);

// A settled log: org-1's deliveries tried once each, nine in ten delivered, one in ten failed
// (waiting for a retry in an hour).
const settled = db.prepare("SELECT count(*) FROM deliveries WHERE org_id = 'org-1' AND attempts > 0").pluck().get() as number;
if (settled === 0) {
  db.transaction(() => {
    db.prepare("UPDATE deliveries SET status = 'delivered', attempts = 1, last_attempt_at = created_at + 100, last_status_code = 200, updated_at = created_at + 100 WHERE org_id = 'org-1' AND (id / 16) % 10 <> 0").run();
    db.prepare("UPDATE deliveries SET attempts = 1, next_attempt_at = created_at + 3600000, last_attempt_at = created_at + 100, last_status_code = 500, last_error = 'HTTP 500', updated_at = created_at + 100 WHERE org_id = 'org-1' AND (id / 16) % 10 = 0").run();
  })();
}
const org1 = halfWay('org-1');
console.log(`
the delivery log of org-1 (the same share, settled: nine in ten delivered, a tenth failed), a page of 50, median of ${reads} reads:`);
await timePages('org-1', [
  ['first page', { limit: 50 }],
  ['a page half-way down (cursor)', { limit: 50, beforeId: org1.id }],
  ['status=delivered, half-way down', { limit: 50, status: 'delivered', beforeId: org1.id }],
  ['status=failed (one in ten)', { limit: 50, status: 'failed' }],
  ['since/until, a one-minute window half-way', { limit: 50, since: org1.at - 60_000, until: org1.at }],
]);

// The console's chart (GET /webhook/stats): a million attempts over a day, one per delivery, in
// the order of the deliveries (nine in ten delivered), read at the end of that day (a clock of
// its own, so that a kept database gives the same figures later).
const DAY = 86_400_000;
if ((db.prepare('SELECT count(*) FROM delivery_attempts').pluck().get() as number) < total) {
  const started = performance.now();
  const first = Date.now() - DAY;
  const insert = db.prepare("INSERT INTO delivery_attempts (delivery_id, attempt, started_at, duration_ms, url, status_code, error_class, error_detail, response_body, outcome) VALUES (?, 1, ?, 20, 'https://hooks.example/', ?, ?, ?, '', ?)");
  const deliveryIds = db.prepare('SELECT id FROM deliveries ORDER BY id').pluck().all() as number[];
  for (let from = 0; from < deliveryIds.length; from += 50_000) {
    db.transaction(() => {
      for (let i = from; i < Math.min(deliveryIds.length, from + 50_000); i++) {
        const ok = i % 10 !== 0;
        insert.run(deliveryIds[i]!, first + Math.floor((i * DAY) / deliveryIds.length), ok ? 200 : 500, ok ? null : 'http_status', ok ? null : 'HTTP 500', ok ? 'delivered' : 'retry');
      }
    })();
  }
  console.log(`\nadded ${deliveryIds.length} attempts over a day in ${((performance.now() - started) / 1000).toFixed(1)} s`);
}
const endOfDay = (db.prepare('SELECT max(started_at) FROM delivery_attempts').pluck().get() as number) + 1;
const chartStore = openSqliteStore(join(dir, 'hookrelay.db'), { now: () => endOfDay });
const chart = createDeliveryLogService(chartStore, { userAgent: 'bench' }, createAuditTrail(chartStore, createLogger('silent')));
console.log(`
the chart of org-0 (GET /webhook/stats) with a million attempts in the last day (${Math.round(total / orgCount)} of them org-0's), median of ${reads} reads:`);
for (const window of ['1h', '24h'] as const) {
  const times: number[] = [];
  let held = 0;
  let counted = 0;
  for (let i = 0; i < reads; i++) {
    const r = await timed(() => chart.attemptStats('org-0', window));
    times.push(r.ms);
    held = Math.max(held, r.heldMs);
    counted = r.result.buckets.reduce((n, b) => n + b.succeeded + b.failed, 0);
  }
  times.sort((a, b) => a - b);
  console.log(`  window=${window}: ${times[Math.floor(times.length / 2)]!.toFixed(1)} ms (${counted} attempts counted; event loop held at most ${held.toFixed(1)} ms)`);
}
chartStore.close();
store.close();
if (values.keep === undefined) rmSync(dir, { recursive: true, force: true });

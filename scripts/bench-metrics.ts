/**
 * What the metrics gauges and `hookrelay status` cost with a large backlog: builds a database
 * with N queued deliveries (default 1,000,000, spread over 16 organizations, a tenth of them
 * tried and waiting for a retry), then prints the query plan of every gauge read, and times a
 * full read of the gauges (status.queue(), then a whole /metrics exposition) together with the
 * longest the event loop was held meanwhile (a 1 ms timer's worst lateness); then times pages of
 * the delivery log (GET /webhook/deliveries, the console's table) at the front and deep down.
 *
 *   node --import tsx scripts/bench-metrics.ts [--deliveries 1000000] [--orgs 16] [--runs 3] [--keep DIR]
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { systemClock } from '../src/domain/clock.ts';
import { createLogger } from '../src/log.ts';
import { createMetrics } from '../src/metrics/metrics.ts';
import { createStatusService } from '../src/services/status.ts';
import { QUEUE_GAUGE_SQL } from '../src/store/deliveries-repo.ts';
import { openStore } from '../src/store/store.ts';
import { createDeliveryService } from '../src/services/deliveries.ts';
import type { ListFilter } from '../src/store/repos.ts';

const { values } = parseArgs({ options: { deliveries: { type: 'string' }, orgs: { type: 'string' }, runs: { type: 'string' }, keep: { type: 'string' } } });
const total = Number(values.deliveries ?? 1_000_000);
const orgCount = Number(values.orgs ?? 16);
const runs = Number(values.runs ?? 3);
const dir = values.keep ?? mkdtempSync(join(tmpdir(), 'hookrelay-bench-metrics-'));
const store = openStore(join(dir, 'hookrelay.db'), systemClock);
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
        delivery.run(seq, org, i, tried ? 1 : 0, tried ? now + 3_600_000 : now - total + i, now - total + i, now - total + i);
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
const deliveries = createDeliveryService(store, createLogger('warn'), { failingAfterFailures: 5, disableAfterMs: 5 * 86_400_000, secretRotationGraceMs: 86_400_000 });
const ids = db.prepare("SELECT min(id) AS low, max(id) AS high FROM deliveries WHERE org_id = 'org-0'").get() as { low: number; high: number };
const deep = Math.floor((ids.low + ids.high) / 2);
const at = Date.now() - Math.floor(total / 2);
const pages: Array<[string, ListFilter]> = [
  ['first page', { limit: 51 }],
  ['a page half-way down (cursor)', { limit: 51, beforeId: deep }],
  ['status=pending, half-way down', { limit: 51, status: 'pending', beforeId: deep }],
  ['status=failed (one in ten)', { limit: 51, status: 'failed' }],
  ['status=delivered (none)', { limit: 51, status: 'delivered' }],
  ['since/until, a window half-way', { limit: 51, since: at - 60_000, until: at }],
];
console.log(`
the delivery log of org-0 (${Math.round(total / orgCount)} deliveries), a page of 50, median of ${Math.max(runs, 5)} reads:`);
for (const [what, filter] of pages) {
  const times: number[] = [];
  let rows = 0;
  for (let i = 0; i < Math.max(runs, 5); i++) {
    const r = await timed(() => deliveries.list('org-0', filter));
    times.push(r.ms);
    rows = r.result.length;
  }
  times.sort((a, b) => a - b);
  console.log(`  ${what}: ${times[Math.floor(times.length / 2)]!.toFixed(2)} ms (${rows} rows)`);
}
store.close();
if (values.keep === undefined) rmSync(dir, { recursive: true, force: true });

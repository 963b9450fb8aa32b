/**
 * The disk a million events take, and what retention does to it: ingests N feed lines (~300
 * bytes each, every organization with a webhook, so every event gets a delivery) through the
 * daemon's file tailer, marks every delivery delivered with one attempt (its stored response
 * body `--response-bytes` long), and reports the file sizes and what each table and index takes
 * (dbstat) after each step. Then prunes, as the daemon does (batches separated by a pause at
 * least as long as the batch, WAL checkpoints on their own thread meanwhile): first a slice of the events with each of the `--batch` sizes,
 * reporting per batch how long it held the thread (p50, p99, max) and the event loop's longest
 * delay meanwhile; then the rest. Then the sizes again (the file does not shrink: its pages
 * go to the free list), optionally a second ingest of N lines into the pruned file
 * (`--refill`: the free pages are reused), and a compacted copy (VACUUM INTO, what
 * `hookrelay db backup` writes).
 *
 *   node --max-semi-space-size=4 --import tsx scripts/bench-retention.ts \
 *     [--lines N] [--batch 100,500,2000] [--response-bytes B] [--refill] [--json FILE]
 */
import { CONFIG_SCHEMA } from '../src/config/schema.ts';
import { mkdtempSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { monitorEventLoopDelay } from 'node:perf_hooks';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { writeBenchFeed } from './bench-feed.ts';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Clock } from '../src/domain/clock.ts';
import { createFileTailer } from '../src/feed/file-tailer.ts';
import { createWorkerLineParser } from '../src/feed/line-parser.ts';
import { createLogger } from '../src/log.ts';
import { createIngestService } from '../src/services/ingest.ts';
import { createRetentionService } from '../src/services/retention.ts';
import { DeliveryStatus } from '../src/store/values.ts';
import { backupDatabase } from '../src/store/sqlite/maintenance.ts';
import { openSqliteStore, type SqliteStore as Store } from '../src/store/sqlite/store.ts';
import type { Tx, TransactionOptions } from '../src/store/repos.ts';
import { createSqliteDeliveriesRepo as createDeliveriesRepo } from '../src/store/sqlite/deliveries-repo.ts';

const { values } = parseArgs({
  options: {
    lines: { type: 'string', default: '1000000' },
    batch: { type: 'string', default: '100,500,2000' },
    'response-bytes': { type: 'string', default: '100' },
    refill: { type: 'boolean', default: false },
    json: { type: 'string' },
  },
});
const lines = Number(values.lines);
const batchSizes = values.batch.split(',').map(Number);
const responseBytes = Number(values['response-bytes']);
const DAY = 86_400_000;
const RETENTION_MS = 30 * DAY;
const log = createLogger('warn');
const mib = (bytes: number) => Math.round((bytes / 1048576) * 10) / 10;

const writeFeed = (path: string, from: number, n: number) => writeBenchFeed(path, from, n, (i) => `evt-${i}`, 'x'.repeat(55));

const size = (path: string) => {
  try {
    return statSync(path).size;
  } catch {
    return 0;
  }
};

interface Sizes {
  fileMiB: number;
  walMiB: number;
  pages: number;
  freePages: number;
  bytesPerEvent: number | null;
  /** MiB per table or index (dbstat), largest first. */
  objects: Record<string, number>;
}

function sizes(store: Store, events: number): Sizes {
  store.db.pragma('wal_checkpoint(TRUNCATE)');
  const path = store.db.name;
  const pageSize = store.db.pragma('page_size', { simple: true }) as number;
  const objects = store.db.prepare('SELECT name, sum(pgsize) AS bytes FROM dbstat GROUP BY name ORDER BY bytes DESC').all() as Array<{ name: string; bytes: number }>;
  const pages = store.db.pragma('page_count', { simple: true }) as number;
  const freePages = store.db.pragma('freelist_count', { simple: true }) as number;
  return {
    fileMiB: mib(size(path)),
    walMiB: mib(size(`${path}-wal`)),
    pages,
    freePages,
    bytesPerEvent: events > 0 ? Math.round(((pages - freePages) * pageSize) / events) : null,
    objects: Object.fromEntries(objects.filter((o) => o.bytes >= 1048576).map((o) => [o.name, mib(o.bytes)])),
  };
}

async function ingest(store: Store, feedPath: string, feedBytes: number): Promise<number> {
  const checkpoints = await store.upkeep(log, { whileBusy: false });
  const parser = createWorkerLineParser(log);
  const service = createIngestService(store, log);
  const tailer = createFileTailer({ path: feedPath, ingest: service, log, maxLineBytes: 1 << 20, batchLines: CONFIG_SCHEMA.feed.batchLines.default, batchBytes: CONFIG_SCHEMA.feed.batchBytes.default, pollIntervalMs: 50, startPosition: 'start', parser });
  const started = performance.now();
  tailer.start();
  while (((await service.position(feedPath))?.position ?? 0) < feedBytes) await sleep(20);
  await tailer.stop();
  await parser.close();
  await checkpoints.stop();
  return (performance.now() - started) / 1000;
}

/** Every pending delivery becomes delivered, one second after its event was received, with one attempt. */
function deliverAll(store: Store): number {
  const started = performance.now();
  const body = 'r'.repeat(responseBytes);
  const page = store.db.prepare<[number], { id: number; received_at: number }>(
    "SELECT d.id, e.received_at FROM deliveries d JOIN events e ON e.seq = d.event_seq WHERE d.id > ? AND d.status = 'pending' ORDER BY d.id LIMIT 5000",
  );
  const deliveries = createDeliveriesRepo(store.db);
  for (let after = 0; ; ) {
    const rows = page.all(after);
    if (rows.length === 0) break;
    store.db.transaction(() => {
      for (const { id, received_at } of rows) {
        const at = received_at + 1000;
        deliveries.lease([id], at + 30_000, at);
        deliveries.insertAttempts([{ deliveryId: id, attempt: 1, startedAt: at, durationMs: 12, url: 'https://hooks.example.com/hookrelay', statusCode: 200, errorClass: null, errorDetail: null, responseBody: body, outcome: 'delivered', sentTimestamp: null, sentSignature: null }]);
        deliveries.settle(id, { status: DeliveryStatus.delivered, attempts: 1, nextAttemptAt: at, at, statusCode: 200, error: null });
      }
    })();
    after = rows[rows.length - 1]!.id;
  }
  return (performance.now() - started) / 1000;
}

function quantile(sorted: number[], q: number): number {
  if (sorted.length === 0) return 0;
  return sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))]!;
}

/** Prunes with `batchSize` as of `now`, timing every batch (one transaction each) and the event loop's delay. */
async function prune(store: Store, now: number, batchSize: number) {
  const durations: number[] = [];
  const timed: Store = {
    ...store,
    clock: { now: () => now } satisfies Clock,
    async transaction<T>(fn: (tx: Tx) => Promise<T>, options?: TransactionOptions): Promise<T> {
      const t0 = performance.now();
      try {
        return await store.transaction(fn, options);
      } finally {
        durations.push(performance.now() - t0);
      }
    },
  };
  // As in the daemon: WAL checkpoints on their own thread while the batches come (see relay.ts).
  const checkpoints = await store.upkeep(log, { whileBusy: true });
  const delay = monitorEventLoopDelay({ resolution: 1 });
  delay.enable();
  const result = await createRetentionService(timed, { deliveredEventsMs: RETENTION_MS, quarantinedLinesMs: RETENTION_MS, batchSize }).prune({ pauseMs: 5, onBatch: () => checkpoints.busy() });
  delay.disable();
  await checkpoints.stop();
  durations.sort((a, b) => a - b);
  const r = (x: number) => Math.round(x * 10) / 10;
  return {
    batchSize,
    events: result.removed.events,
    deliveries: result.removed.deliveries,
    attempts: result.removed.attempts,
    batches: durations.length,
    batchMs: { p50: r(quantile(durations, 0.5)), p99: r(quantile(durations, 0.99)), max: r(durations.at(-1) ?? 0) },
    eventLoopDelayMaxMs: r(delay.max / 1e6),
    seconds: r(result.elapsedMs / 1000),
    eventsPerSecond: Math.round(result.removed.events / (result.elapsedMs / 1000)),
  };
}

const dir = mkdtempSync(join(tmpdir(), 'hookrelay-bench-retention-'));
const report: Record<string, unknown> = { lines, responseBytes };
try {
  const dbPath = join(dir, 'hookrelay.db');
  const store = openSqliteStore(dbPath, { now: () => Date.now() });
  await store.transaction(async (tx) => {
    for (let o = 0; o < 50; o++) {
      await tx.orgs.insert({ id: `org-${o}`, name: `org-${o}`, createdAt: 0 });
      await tx.webhooks.upsert(`org-${o}`, 'https://hooks.example.com/hookrelay', true, 'whsec_x', 0);
    }
  });
  const feedPath = join(dir, 'feed.jsonl');
  const feedBytes = await writeFeed(feedPath, 0, lines);
  console.log(`feed: ${lines} lines, ${mib(feedBytes)} MiB`);

  const ingestSeconds = await ingest(store, feedPath, feedBytes);
  report.afterIngest = sizes(store, lines);
  console.log(`ingested in ${ingestSeconds.toFixed(1)} s; events with pending deliveries:`, report.afterIngest);

  const deliverSeconds = deliverAll(store);
  report.afterDelivery = sizes(store, lines);
  console.log(`marked delivered (one attempt, ${responseBytes}-byte response) in ${deliverSeconds.toFixed(1)} s:`, report.afterDelivery);

  // Received times, to move the cutoff through the events slice by slice.
  const { first, last } = store.db.prepare('SELECT min(received_at) AS first, max(received_at) AS last FROM events').get() as { first: number; last: number };
  const slices = batchSizes.length + 1;
  const runs = [];
  for (let i = 0; i < batchSizes.length; i++) {
    // Events delivered before first + span * (i + 1) / slices go now (delivered = received + 1 s).
    const cutoff = first + 1000 + ((last - first) * (i + 1)) / slices;
    const run = await prune(store, cutoff + RETENTION_MS, batchSizes[i]!);
    runs.push(run);
    console.log(`prune, batch ${run.batchSize}:`, run);
  }
  const rest = await prune(store, last + 1000 + RETENTION_MS + 1, 500);
  runs.push(rest);
  console.log('prune of the rest, batch 500:', rest);
  report.prunes = runs;
  const left = store.db.prepare('SELECT count(*) FROM events').pluck().get() as number;
  report.afterPrune = sizes(store, left);
  console.log(`after pruning (${left} event(s) left: the newest is always kept):`, report.afterPrune);

  if (values.refill) {
    const refillPath = join(dir, 'feed-2.jsonl');
    const refillBytes = await writeFeed(refillPath, lines, lines);
    const refillSeconds = await ingest(store, refillPath, refillBytes);
    report.afterRefill = sizes(store, lines + left);
    console.log(`ingested ${lines} more lines into the pruned file in ${refillSeconds.toFixed(1)} s:`, report.afterRefill);
  }

  const backup = await backupDatabase(dbPath, join(dir, 'compact.db'));
  report.compactCopy = { MiB: mib(backup.bytes), seconds: Math.round(backup.ms / 100) / 10 };
  console.log('compacted copy (VACUUM INTO, as hookrelay db backup writes):', report.compactCopy);
  store.close();
} finally {
  rmSync(dir, { recursive: true, force: true });
}
if (values.json) writeFileSync(values.json, JSON.stringify(report, null, 2) + '\n');

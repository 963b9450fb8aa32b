/**
 * Durable ingest throughput: writes N feed lines (~300 bytes each) to a temp file, then lets
 * the real file tailer commit them to a fresh SQLite database (WAL, synchronous=FULL) and
 * reports lines/s from first read to the last committed position, and peak RSS.
 *
 *   node --import tsx scripts/bench-ingest.ts [--lines N] [--runs R] [--batch B] [--json FILE]
 *
 * The parse-only rate of the same line shape is measured in the same process first, so the
 * ratio between the two is not skewed by what else the (shared) machine is doing.
 */
import { existsSync, mkdtempSync, rmSync, statSync, writeFileSync, createWriteStream } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { setTimeout as sleep } from 'node:timers/promises';
import { once } from 'node:events';
import { systemClock } from '../src/domain/clock.ts';
import { parseFeedLine } from '../src/domain/feed-event.ts';
import { createFileTailer } from '../src/feed/file-tailer.ts';
import { createWorkerLineParser, inlineLineParser } from '../src/feed/line-parser.ts';
import { createLogger } from '../src/log.ts';
import { createIngestService } from '../src/services/ingest.ts';
import { openStore } from '../src/store/store.ts';

const { values } = parseArgs({
  options: {
    lines: { type: 'string', default: '1000000' },
    runs: { type: 'string', default: '3' },
    batch: { type: 'string', default: '10000' },
    json: { type: 'string' },
    // Parse on the calling thread instead of the worker thread, for comparison.
    inline: { type: 'boolean', default: false },
  },
});
const lines = Number(values.lines);
const runs = Number(values.runs);
const batchLines = Number(values.batch);

async function writeFeed(path: string, n: number): Promise<number> {
  const out = createWriteStream(path);
  // About 300 bytes a line, as the issue specifies.
  const filler = 'x'.repeat(55);
  for (let i = 0; i < n; i++) {
    const line =
      JSON.stringify({
        organization_id: `org-${i % 50}`,
        anticipation_request_id: `ar-${(i * 7919) % 1_000_003}`,
        status: i % 3 === 0 ? 'approved' : 'pending_review',
        previous_status: 'submitted',
        occurred_at: new Date(1_790_000_000_000 + i * 1000).toISOString(),
        event_id: `evt-${i}`,
        data: { amount_cents: i * 13, currency: 'EUR', note: filler },
      }) + '\n';
    if (!out.write(line)) await once(out, 'drain');
  }
  out.end();
  await once(out, 'finish');
  return statSync(path).size;
}

const log = createLogger('warn');

/** Parse-only rate on 200k lines of the same shape, measured in this run for the ratio. */
function measureParseOnly(): number {
  const sample = 200_000;
  // About 300 bytes a line, as the issue specifies.
  const filler = 'x'.repeat(55);
  const buffers = Array.from({ length: sample }, (_, i) =>
    Buffer.from(JSON.stringify({ organization_id: `org-${i % 50}`, anticipation_request_id: `ar-${i}`, status: 'approved', previous_status: 'submitted', occurred_at: new Date(1_790_000_000_000 + i * 1000).toISOString(), event_id: `evt-${i}`, data: { amount_cents: i, currency: 'EUR', note: filler } })),
  );
  const started = performance.now();
  for (const b of buffers) parseFeedLine(b, 0);
  return Math.round(sample / ((performance.now() - started) / 1000));
}
const results: Array<{ run: number; lines: number; seconds: number; linesPerSecond: number; peakRssMiB: number }> = [];
const dir = mkdtempSync(join(tmpdir(), 'hookrelay-bench-'));
try {
  const feedPath = process.env.FEED ?? join(dir, 'feed.jsonl');
  const size = process.env.FEED && existsSync(feedPath) ? statSync(feedPath).size : await writeFeed(feedPath, lines);
  console.log(`feed: ${lines} lines, ${(size / 1024 / 1024).toFixed(1)} MiB (${Math.round(size / lines)} bytes/line); batch ${batchLines}`);
  for (let run = 1; run <= runs; run++) {
    const dbPath = join(dir, `run-${run}.db`);
    const store = openStore(dbPath, systemClock); if (process.env.CKPT) store.db.pragma('wal_autocheckpoint = ' + process.env.CKPT);
    // Half of the organizations have a webhook, so half of the events also get an outbox row.
    for (let o = 0; o < 50; o += 2) {
      store.orgs.insert({ id: `org-${o}`, name: `org-${o}`, createdAt: 0 });
      store.webhooks.upsert(`org-${o}`, 'https://example.com/hook', true, 'whsec_x', 0);
    }
    const ingest = createIngestService(store, log);
    const parser = values.inline ? inlineLineParser : createWorkerLineParser(log);
    const tailer = createFileTailer({ path: feedPath, ingest, log, maxLineBytes: 1 << 20, batchLines, pollIntervalMs: 50, startPosition: 'start', parser });
    await parser.parse([], 0);
    global.gc?.();
    let peakRss = process.memoryUsage().rss;
    const started = performance.now();
    tailer.start();
    while ((ingest.position(feedPath)?.position ?? 0) < size) {
      await sleep(20);
      peakRss = Math.max(peakRss, process.memoryUsage().rss);
    }
    const seconds = (performance.now() - started) / 1000;
    await tailer.stop();
    await parser.close();
    const accepted = ingest.stats().reduce((n, s) => n + s.accepted, 0);
    if (accepted !== lines) throw new Error(`expected ${lines} accepted lines, found ${accepted}`);
    store.close();
    rmSync(dbPath, { force: true });
    rmSync(dbPath + '-wal', { force: true });
    rmSync(dbPath + '-shm', { force: true });
    const r = { run, lines, seconds: Number(seconds.toFixed(3)), linesPerSecond: Math.round(lines / seconds), peakRssMiB: Math.round(peakRss / 1024 / 1024) };
    results.push(r);
    console.log(`run ${run}: ${r.linesPerSecond} lines/s (${r.seconds} s), peak RSS ${r.peakRssMiB} MiB`);
  }
} finally {
  rmSync(dir, { recursive: true, force: true });
}
// Measured after the runs, so its buffers do not count in their peak RSS.
const parseOnly = measureParseOnly();
const sorted = results.map((r) => r.linesPerSecond).sort((a, b) => a - b);
const median = sorted[Math.floor(sorted.length / 2)]!;
const peakRss = Math.max(...results.map((r) => r.peakRssMiB));
console.log(`median: ${median} lines/s over ${runs} runs; peak RSS ${peakRss} MiB`);
console.log(`parsing alone (same line shape, in memory): ${parseOnly} lines/s, so durable ingest runs at ${(median / parseOnly * 100).toFixed(0)} % of parse speed`);
if (values.json) {
  writeFileSync(values.json, JSON.stringify({ lines, batchLines, runs: results, medianLinesPerSecond: median, peakRssMiB: peakRss, parseOnlyLinesPerSecond: parseOnly }, null, 2) + '\n');
}

/**
 * Durable ingest throughput: writes N feed lines (~300 bytes each) to a temp file, then lets
 * the real file tailer commit them to a fresh SQLite database (WAL, synchronous=FULL) and
 * reports lines/s from first read to the last committed position, peak RSS, and bytes written.
 *
 *   node --max-semi-space-size=4 --import tsx scripts/bench-ingest.ts \
 *     [--lines N] [--runs R] [--batch B] [--batch-bytes BYTES] [--ids sequential|uuid|none] [--compare] [--json FILE]
 *
 * The daemon's design is measured: parsing on a worker thread pipelined with the commits, and
 * WAL checkpoints on a thread of their own. `--compare` also runs, alternating with it in the
 * same process on the same file, the single-threaded design (parse on the main thread, the
 * writer checkpoints itself every 4096 pages), so the ratio between the two is measured side by
 * side on this shared, noisy machine. The parse-only rate of the same line shape is measured in
 * the same process too. `--max-semi-space-size=4` is what `npm start` and the systemd unit use.
 *
 * `--ids` chooses the lines' event ids: `sequential` (evt-0, evt-1, ...; the default), `uuid`
 * (random UUIDs) or `none` (no event_id: hookrelay derives one from the line, a hash). Random ids
 * land all over the id index instead of at its end; the line length stays about 300 bytes.
 *
 * `--again` then ingests the same lines a second time into the same database (from a copy of
 * the file, so the tailer reads it from the start): every line is a duplicate. It reports that
 * rate next to the first one and their ratio, which should be about 1 or more.
 */
import { CONFIG_SCHEMA } from '../src/config/schema.ts';
import { copyFileSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { randomUUID } from 'node:crypto';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { writeBenchFeed } from './bench-feed.ts';
import { setTimeout as sleep } from 'node:timers/promises';
import { systemClock } from '../src/domain/clock.ts';
import { parseFeedLine } from '../src/domain/feed-event.ts';
import { createFileTailer } from '../src/feed/file-tailer.ts';
import { createWorkerLineParser, inlineLineParser } from '../src/feed/line-parser.ts';
import { createLogger } from '../src/log.ts';
import { createIngestService } from '../src/services/ingest.ts';
import { openSqliteStore } from '../src/store/sqlite/store.ts';

const { values } = parseArgs({
  options: {
    lines: { type: 'string', default: '1000000' },
    runs: { type: 'string', default: '3' },
    batch: { type: 'string', default: String(CONFIG_SCHEMA.feed.batchLines.default) },
    'batch-bytes': { type: 'string', default: String(CONFIG_SCHEMA.feed.batchBytes.default) },
    compare: { type: 'boolean', default: false },
    again: { type: 'boolean', default: false },
    ids: { type: 'string', default: 'sequential' },
    json: { type: 'string' },
  },
});
const lines = Number(values.lines);
const runs = Number(values.runs);
const batchLines = Number(values.batch);
const batchBytes = Number(values['batch-bytes']);
const ids = values.ids;
if (ids !== 'sequential' && ids !== 'uuid' && ids !== 'none') throw new Error(`--ids must be sequential, uuid or none, not ${ids}`);

type Variant = 'pipelined' | 'single-threaded';
const variants: Variant[] = values.compare ? ['pipelined', 'single-threaded'] : ['pipelined'];

async function writeFeed(path: string, n: number): Promise<number> {
  // About 300 bytes a line, as the issue specifies: a UUID is 26 characters longer than evt-N,
  // and a line without event_id 24 shorter.
  const filler = 'x'.repeat(ids === 'uuid' ? 29 : ids === 'none' ? 79 : 55);
  return writeBenchFeed(path, 0, n, (i) => (ids === 'sequential' ? `evt-${i}` : ids === 'uuid' ? randomUUID() : undefined), filler);
}

const log = createLogger('warn');

/** Parse-only rate on 200k lines of the same shape, measured in this run for the ratio. */
function measureParseOnly(): number {
  const sample = 200_000;
  const filler = 'x'.repeat(55);
  const buffers = Array.from({ length: sample }, (_, i) =>
    Buffer.from(JSON.stringify({ organization_id: `org-${i % 50}`, anticipation_request_id: `ar-${i}`, status: 'approved', previous_status: 'submitted', occurred_at: new Date(1_790_000_000_000 + i * 1000).toISOString(), event_id: `evt-${i}`, data: { amount_cents: i, currency: 'EUR', note: filler } })),
  );
  const started = performance.now();
  for (const b of buffers) parseFeedLine(b, 0);
  return Math.round(sample / ((performance.now() - started) / 1000));
}

/** Bytes this process has caused to be written to storage so far (Linux). */
function writtenBytes(): number {
  return Number(/write_bytes: (\d+)/.exec(readFileSync('/proc/self/io', 'utf8'))?.[1] ?? Number.NaN);
}

interface Result {
  variant: Variant;
  run: number;
  lines: number;
  seconds: number;
  linesPerSecond: number;
  peakRssMiB: number;
  writtenMiB: number;
  /** With --again: the rate of the second ingest of the same lines (all duplicates). */
  againLinesPerSecond?: number;
  againSeconds?: number;
}

async function measure(variant: Variant, run: number, feedPath: string, size: number, dir: string): Promise<Result> {
  const dbPath = join(dir, `${variant}-${run}.db`);
  const store = openSqliteStore(dbPath, systemClock);
  // Half of the organizations have a webhook, so half of the events also get an outbox row.
  await store.transaction(async (tx) => {
    for (let o = 0; o < 50; o += 2) {
      await tx.orgs.insert({ id: `org-${o}`, name: `org-${o}`, createdAt: 0 });
      await tx.webhooks.upsert(`org-${o}`, 'https://example.com/hook', true, 'whsec_x', 0);
    }
  });
  const pipelined = variant === 'pipelined';
  const checkpoints = pipelined ? await store.upkeep(log, { whileBusy: false }) : null;
  const parser = pipelined ? createWorkerLineParser(log) : inlineLineParser;
  // The daemon starts its parser thread once, at start-up: not part of the figure.
  await parser.parse([], 0);
  const ingest = createIngestService(store, log);
  let peakRss = process.memoryUsage().rss;
  /** Tails `path` from its start until every byte is committed; returns the seconds it took. */
  const tail = async (path: string): Promise<number> => {
    const tailer = createFileTailer({ path, ingest, log, maxLineBytes: 1 << 20, batchLines, batchBytes, pollIntervalMs: 50, startPosition: 'start', parser });
    global.gc?.();
    const started = performance.now();
    tailer.start();
    while (((await ingest.position(path))?.position ?? 0) < size) {
      await sleep(20);
      peakRss = Math.max(peakRss, process.memoryUsage().rss);
    }
    const seconds = (performance.now() - started) / 1000;
    await tailer.stop();
    return seconds;
  };
  const written = writtenBytes();
  const seconds = await tail(feedPath);
  const writtenMiB = Math.round((writtenBytes() - written) / 1024 / 1024);
  const accepted = (await ingest.stats()).reduce((n, s) => n + s.accepted, 0);
  if (accepted !== lines) throw new Error(`expected ${lines} accepted lines, found ${accepted}`);
  const again = values.again ? await tail(`${feedPath}.again`) : null;
  if (again !== null) {
    const duplicates = (await ingest.stats()).reduce((n, s) => n + s.duplicates, 0);
    if (duplicates !== lines) throw new Error(`expected ${lines} duplicate lines the second time, found ${duplicates}`);
  }
  await parser.close();
  await checkpoints?.stop();
  await store.close();
  for (const suffix of ['', '-wal', '-shm']) rmSync(dbPath + suffix, { force: true });
  const result: Result = { variant, run, lines, seconds: Number(seconds.toFixed(3)), linesPerSecond: Math.round(lines / seconds), peakRssMiB: Math.round(peakRss / 1024 / 1024), writtenMiB };
  if (again !== null) Object.assign(result, { againSeconds: Number(again.toFixed(3)), againLinesPerSecond: Math.round(lines / again) });
  return result;
}

function median(numbers: number[]): number {
  const sorted = [...numbers].sort((a, b) => a - b);
  const mid = Math.floor(sorted.length / 2);
  return sorted.length % 2 === 1 ? sorted[mid]! : Math.round((sorted[mid - 1]! + sorted[mid]!) / 2);
}

const results: Result[] = [];
const dir = mkdtempSync(join(tmpdir(), 'hookrelay-bench-'));
try {
  const feedPath = join(dir, 'feed.jsonl');
  const size = await writeFeed(feedPath, lines);
  if (values.again) copyFileSync(feedPath, `${feedPath}.again`);
  console.log(`feed: ${lines} lines, ${(size / 1024 / 1024).toFixed(1)} MiB (${Math.round(size / lines)} bytes/line), ${ids} event ids; batches of ${batchLines} lines or ${batchBytes} bytes; ${variants.join(' vs ')}`);
  for (let run = 1; run <= runs; run++) {
    // Alternate the variants (and their order) so both see the same machine.
    const order = run % 2 === 1 ? variants : [...variants].reverse();
    for (const variant of order) {
      const r = await measure(variant, run, feedPath, size, dir);
      results.push(r);
      console.log(`run ${run} ${variant}: ${r.linesPerSecond} lines/s (${r.seconds} s), peak RSS ${r.peakRssMiB} MiB, ${r.writtenMiB} MiB written` +
        (r.againLinesPerSecond === undefined ? '' : `; again (all duplicates): ${r.againLinesPerSecond} lines/s (${r.againSeconds} s)`));
    }
  }
} finally {
  rmSync(dir, { recursive: true, force: true });
}
// Measured after the runs, so its buffers do not count in their peak RSS.
const parseOnly = measureParseOnly();
const summary = variants.map((variant) => {
  const mine = results.filter((r) => r.variant === variant);
  const again = mine.flatMap((r) => (r.againLinesPerSecond === undefined ? [] : [r.againLinesPerSecond]));
  return { variant, medianLinesPerSecond: median(mine.map((r) => r.linesPerSecond)), ...(again.length > 0 ? { medianAgainLinesPerSecond: median(again) } : {}), peakRssMiB: Math.max(...mine.map((r) => r.peakRssMiB)), medianWrittenMiB: median(mine.map((r) => r.writtenMiB)) };
});
for (const s of summary) {
  console.log(`median ${s.variant}: ${s.medianLinesPerSecond} lines/s over ${runs} runs; peak RSS ${s.peakRssMiB} MiB; ${s.medianWrittenMiB} MiB written`);
  if (s.medianAgainLinesPerSecond !== undefined) {
    console.log(`median ${s.variant} again (all duplicates): ${s.medianAgainLinesPerSecond} lines/s; first / again ${(s.medianLinesPerSecond / s.medianAgainLinesPerSecond).toFixed(2)}`);
  }
}
if (values.compare) {
  const ratios = Array.from({ length: runs }, (_, i) => {
    const [a, b] = variants.map((v) => results.find((r) => r.variant === v && r.run === i + 1)!.linesPerSecond);
    return a! / b!;
  });
  console.log(`pipelined / single-threaded, per run: ${ratios.map((r) => r.toFixed(2)).join(', ')}; median ${[...ratios].sort((a, b) => a - b)[Math.floor(ratios.length / 2)]!.toFixed(2)}`);
}
console.log(`parsing alone (same line shape, in memory, one thread): ${parseOnly} lines/s`);
if (values.json) {
  writeFileSync(values.json, JSON.stringify({ lines, batchLines, batchBytes, ids, runs: results, summary, parseOnlyLinesPerSecond: parseOnly }, null, 2) + '\n');
}

import type { Readable } from 'node:stream';
import { RejectReason, type ParsedLines } from '../domain/feed-event.ts';
import type { Logger } from '../log.ts';
import { addCounts, emptyCounts, type IngestCounts, type IngestService, type Lines } from '../services/ingest.ts';
import type { StorageHealth } from '../services/storage-health.ts';
import { BatchPipeline } from './batch-pipeline.ts';
import { BatchFiller } from './line-batch.ts';
import { inlineLineParser, type LineParser } from './line-parser.ts';
import { LineSplitter, type SplitLine } from './line-splitter.ts';

export interface StreamReadOptions {
  readonly source: string;
  readonly ingest: IngestService;
  readonly maxLineBytes: number;
  readonly batchLines: number;
  /** A batch is also committed once it holds this many bytes of lines (see FileTailerOptions.batchBytes); no limit by default. */
  readonly batchBytes?: number;
  readonly log: Logger;
  readonly signal?: AbortSignal;
  /** Parses batches (on a worker thread, see line-parser.ts); by default on this thread. */
  readonly parser?: LineParser;
  /** Hears of storage faults; with it, a commit that fails on a full disk is tried again (the lines cannot be read twice). */
  readonly health?: StorageHealth;
}

/** What a stream's lines go through: the splitter that cuts them, the batch they fill, the pipeline that parses and commits batches. */
interface StreamPass {
  readonly splitter: LineSplitter;
  readonly batches: BatchFiller;
  readonly pipeline: BatchPipeline<null>;
}

/**
 * Ingests a stream that cannot be re-read (standard input, or a file read once by
 * `hookrelay ingest`): lines are committed in batches as they arrive; at the end of the
 * stream a final line without a newline is taken as complete. Nothing is remembered
 * between runs: a restart resumes with whatever the producer sends next.
 */
export async function ingestStream(input: Readable, options: StreamReadOptions): Promise<IngestCounts> {
  const total = emptyCounts();
  const pipeline = new BatchPipeline<null>(options.parser ?? inlineLineParser, options.ingest.now, async (lines, parsed) => {
    addCounts(total, await commitBatch(lines, parsed, options));
  });
  const batches = new BatchFiller(options.batchLines, options.batchBytes ?? Infinity, (lines) => pipeline.submit(lines, null));
  const pass: StreamPass = { splitter: new LineSplitter(options.maxLineBytes), batches, pipeline };
  const onAbort = () => input.destroy();
  options.signal?.addEventListener('abort', onAbort, { once: true });
  try {
    await commitArrivals(input, pass, options.signal);
    const last = lastLineOf(pass.splitter, options.signal?.aborted === true);
    if (last) batches.add(last.line);
    await batches.flush();
    await pipeline.drain();
  } finally {
    await pipeline.abandon();
    options.signal?.removeEventListener('abort', onAbort);
  }
  return total;
}

/**
 * Commits the lines of each chunk as it arrives rather than wait for a full batch: a slow
 * producer's lines must not sit in memory, nor the buffers a burst of them took. Returns at
 * the end of the stream, or when stopped.
 */
async function commitArrivals(input: Readable, pass: StreamPass, signal: AbortSignal | undefined): Promise<void> {
  try {
    for await (const data of input as AsyncIterable<Buffer | string>) {
      await pass.batches.push(pass.splitter, typeof data === 'string' ? Buffer.from(data) : data);
      await pass.batches.flush();
      await pass.pipeline.drain();
      pass.batches.dropSpare();
    }
  } catch (err) {
    if (!signal?.aborted) throw err;
  }
}

/**
 * The unterminated rest of the stream, if any, as its last line. At the end of the stream the
 * last line is complete; when the reader is stopped mid-line it is not, and since it cannot be
 * read again it is quarantined rather than dropped.
 */
function lastLineOf(splitter: LineSplitter, stopped: boolean): SplitLine | null {
  if (!stopped) return splitter.takeIncomplete();
  return splitter.takeIncomplete({ reason: RejectReason.incompleteLine, detail: 'the reader stopped before this line was terminated' });
}

/** Stores a batch with no position (a stream is not read again); with `health`, tried again after a storage fault. */
function commitBatch(lines: Lines, parsed: ParsedLines, options: StreamReadOptions): Promise<IngestCounts> {
  const commit = () => options.ingest.ingest(options.source, lines, null, parsed);
  return options.health ? options.health.retrying('feed', commit, options.signal) : commit();
}

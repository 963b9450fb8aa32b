import type { Readable } from 'node:stream';
import { RejectReason } from '../domain/feed-event.ts';
import type { Logger } from '../log.ts';
import { addCounts, emptyCounts, type IngestCounts, type IngestService, type Lines } from '../services/ingest.ts';
import type { StorageHealth } from '../services/storage-health.ts';
import { BatchPipeline } from './batch-pipeline.ts';
import { BatchFiller } from './line-batch.ts';
import { inlineLineParser, type LineParser } from './line-parser.ts';
import { LineSplitter } from './line-splitter.ts';

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

/**
 * Ingests a stream that cannot be re-read (standard input, or a file read once by
 * `hookrelay ingest`): lines are committed in batches as they arrive; at the end of the
 * stream a final line without a newline is taken as complete. Nothing is remembered
 * between runs: a restart resumes with whatever the producer sends next.
 */
export async function ingestStream(input: Readable, options: StreamReadOptions): Promise<IngestCounts> {
  const total = emptyCounts();
  const splitter = new LineSplitter(options.maxLineBytes);
  const commit = (lines: Lines, parsed: Parameters<IngestService['ingest']>[3]) => options.ingest.ingest(options.source, lines, null, parsed);
  const pipeline = new BatchPipeline<null>(options.parser ?? inlineLineParser, options.ingest.now, async (lines, parsed) => {
    const { health } = options;
    addCounts(total, health ? await health.retrying('feed', () => commit(lines, parsed), options.signal) : await commit(lines, parsed));
  });
  const batches = new BatchFiller(options.batchLines, options.batchBytes ?? Infinity, (lines) => pipeline.submit(lines, null));
  const onAbort = () => input.destroy();
  options.signal?.addEventListener('abort', onAbort, { once: true });
  try {
    try {
      for await (const data of input as AsyncIterable<Buffer | string>) {
        await batches.push(splitter, typeof data === 'string' ? Buffer.from(data) : data);
        // Commit what has arrived rather than wait for a full batch: a slow producer's lines
        // must not sit in memory, nor the buffers a burst of them took.
        await batches.flush();
        await pipeline.drain();
        batches.dropSpare();
      }
    } catch (err) {
      if (!options.signal?.aborted) throw err;
    }
    // At the end of the stream the last line is complete; when we are stopped mid-line it
    // is not, and since it cannot be read again it is quarantined rather than dropped.
    const last = options.signal?.aborted
      ? splitter.takeIncomplete({ reason: RejectReason.incompleteLine, detail: 'the reader stopped before this line was terminated' })
      : splitter.takeIncomplete();
    if (last) batches.add(last.line);
    await batches.flush();
    await pipeline.drain();
  } finally {
    await pipeline.abandon();
    options.signal?.removeEventListener('abort', onAbort);
  }
  return total;
}

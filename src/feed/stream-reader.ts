import type { Readable } from 'node:stream';
import { RejectReason } from '../domain/feed-event.ts';
import type { Logger } from '../log.ts';
import { addCounts, emptyCounts, type IngestCounts, type IngestService, type RawLine } from '../services/ingest.ts';
import { inlineLineParser, type LineParser } from './line-parser.ts';
import { LineSplitter } from './line-splitter.ts';

export interface StreamReadOptions {
  readonly source: string;
  readonly ingest: IngestService;
  readonly maxLineBytes: number;
  readonly batchLines: number;
  readonly log: Logger;
  readonly signal?: AbortSignal;
  /** Parses batches (on a worker thread, see line-parser.ts); by default on this thread. */
  readonly parser?: LineParser;
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
  const parser = options.parser ?? inlineLineParser;
  let batch: RawLine[] = [];
  const flush = async () => {
    if (batch.length === 0) return;
    const lines = batch;
    batch = [];
    const parsed = await parser.parse(lines, options.ingest.now());
    addCounts(total, options.ingest.ingest(options.source, lines, null, parsed));
  };
  const onAbort = () => input.destroy();
  options.signal?.addEventListener('abort', onAbort, { once: true });
  try {
    for await (const chunk of input as AsyncIterable<Buffer | string>) {
      for (const { line } of splitter.push(typeof chunk === 'string' ? Buffer.from(chunk) : chunk)) {
        batch.push(line);
        if (batch.length >= options.batchLines) await flush();
      }
      // Commit what has arrived rather than wait for a full batch: a slow producer's lines
      // must not sit in memory.
      await flush();
    }
  } catch (err) {
    if (!options.signal?.aborted) throw err;
  } finally {
    // At the end of the stream the last line is complete; when we are stopped mid-line it
    // is not, and since it cannot be read again it is quarantined rather than dropped.
    const last = options.signal?.aborted
      ? splitter.takeIncomplete({ reason: RejectReason.incompleteLine, detail: 'the reader stopped before this line was terminated' })
      : splitter.takeIncomplete();
    if (last) batch.push(last.line);
    await flush();
    options.signal?.removeEventListener('abort', onAbort);
  }
  return total;
}

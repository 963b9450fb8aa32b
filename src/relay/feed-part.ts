import { createFileTailer } from '../feed/file-tailer.ts';
import type { IngestPath } from '../feed/ingest-path.ts';
import { ingestStream } from '../feed/stream-reader.ts';
import type { Metrics } from '../metrics/metrics.ts';
import type { DaemonPart } from './parts.ts';
import type { RunningFeed, Wiring } from './wiring.ts';

/** The ingest path, counting what each committed batch did. */
function countedIngest(path: IngestPath, metrics: Metrics): IngestPath {
  const { ingest } = path;
  return {
    ...path,
    ingest: {
      ...ingest,
      async ingest(source, lines, position, parsed) {
        const counts = await ingest.ingest(source, lines, position, parsed);
        metrics.ingested(counts);
        return counts;
      },
    },
  };
}

/** The feed: the tailed file (feed.path), or standard input (`-`), which cannot be read again. */
export function feedReader(w: Wiring): DaemonPart {
  return {
    name: 'feed reader',
    start() {
      const metrics = w.metrics.peek();
      const path = w.ingestPath.get();
      w.feed.set(startFeed(w, metrics === null ? path : countedIngest(path, metrics)));
    },
    async stop() {
      await w.feed.take()?.stop();
    },
  };
}

function startFeed(w: Wiring, { ingest, parser }: IngestPath): RunningFeed {
  const { feed: options } = w.config;
  const { log, health, feedFaults } = w;
  if (options.path !== '-') {
    const tailer = createFileTailer({ ...options, pollIntervalMs: options.pollInterval, path: options.path, ingest, log, parser, health, faults: feedFaults });
    tailer.start();
    return { stop: () => tailer.stop(), problem: () => tailer.problem() };
  }
  const controller = new AbortController();
  const feedLog = log.child({ subsystem: 'feed', feed: 'stdin' });
  const done = ingestStream(w.deps.stdin ?? process.stdin, { ...options, source: 'stdin', ingest, log, parser, signal: controller.signal, health }).then(
    (counts) => feedLog.info(counts, 'standard input closed: reading stopped, delivery continues'),
    (err: unknown) => {
      // Standard input cannot be read again: not ready until a restart, and said why.
      feedFaults.ended(err, 'standard input');
      feedLog.error({ err }, 'reading standard input failed: reading stopped, delivery continues; /readyz answers 503 until the daemon restarts');
    },
  );
  return {
    async stop() {
      controller.abort();
      await done;
    },
    problem: () => feedFaults.problem(),
  };
}

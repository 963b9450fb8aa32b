import { open, type FileHandle } from 'node:fs/promises';
import { resolve } from 'node:path';
import type { Readable } from 'node:stream';
import type { Command } from 'commander';
import { LINE_EXCERPT_BYTES, lineExcerpt } from '../domain/feed-event.ts';
import { openIngestPath, type IngestPath } from '../feed/ingest-path.ts';
import { sourceBytes } from '../feed/line-batch.ts';
import { ingestStream } from '../feed/stream-reader.ts';
import { createIngestService, type IngestService } from '../services/ingest.ts';
import type { Store } from '../store/repos.ts';
import { rateSummary, startProgress } from './progress.ts';
import { iso } from '../domain/iso.ts';
import { terminalSafe } from '../domain/terminal-text.ts';
import { cliLogger, configFrom, jsonOption, limitOption, openConfiguredStore, optionsOf, print, sayError, table, UsageError, withServices } from './shared.ts';

/** Opens the file to ingest; what is wrong with it is a usage error (exit 2), said in one line. */
async function openInput(file: string): Promise<{ input: Readable; source: string; size: number | null }> {
  const source = resolve(file);
  let handle: FileHandle;
  try {
    handle = await open(source, 'r');
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    const why = code === 'ENOENT' ? 'no such file' : code === 'EACCES' ? 'permission denied (the file must be readable by this user)' : code === 'ENOTDIR' ? 'a part of the path is not a directory' : `${(err as Error).message}`;
    throw new UsageError(`cannot read ${source}: ${why}; give a JSONL file, or - for standard input`);
  }
  const stat = await handle.stat();
  if (stat.isDirectory()) {
    await handle.close();
    throw new UsageError(`cannot read ${source}: it is a directory; give a JSONL file, or - for standard input`);
  }
  // Large reads make full batches, so parsing and committing overlap (see BatchPipeline).
  return { input: handle.createReadStream({ highWaterMark: 4 << 20 }), source, size: stat.isFile() ? stat.size : null };
}

/** `ingest` and the `feed` group (quarantined lines, counts per source). */
export function registerFeedCommands(program: Command): void {
  jsonOption(program.command('ingest').description('ingest a JSONL file (or - for standard input) once and exit').argument('<file>', 'file to read, or -')).action(
    (file: string, _options: unknown, cmd: Command) => ingestCommand(file, cmd),
  );

  const feed = program.command('feed').description('the status-change feed');
  jsonOption(feed.command('rejects').description('list quarantined feed lines'))
    .option('--after <id>', 'only rejects with a larger id', '0')
    .option('--limit <n>', 'at most this many', '100')
    .action((_options: unknown, cmd: Command) => {
      const options = optionsOf<{ after: string; limit: string }>(cmd);
      const after = Number(options.after);
      if (!Number.isInteger(after) || after < 0) throw new UsageError(`--after must be a non-negative integer; got "${options.after}"`);
      const limit = limitOption(options.limit);
      return withServices(options, async ({ store, log }) => {
        const rejects = await createIngestService(store, log).rejects(after, limit);
        const view = rejects.map((r) => ({
          id: r.id,
          source: r.source,
          position: r.position,
          reason: r.reason,
          detail: r.detail,
          event_id: r.eventId,
          line_bytes: r.lineBytes,
          // Escaped, and no longer than what is kept (a row stored by an older version may hold 16 KiB).
          raw: lineExcerpt(r.raw, r.lineBytes),
          raw_truncated: Math.min(r.raw.length, LINE_EXCERPT_BYTES) < r.lineBytes,
          received_at: iso(r.receivedAt),
        }));
        print(options, view, () =>
          view.length === 0
            ? 'no quarantined lines'
            : // The detail is hookrelay's sentence (what it quotes of the line is escaped: excerpt), the raw excerpt is escaped already (lineExcerpt).
              view.map((r) => `#${r.id} ${terminalSafe(r.source)}@${r.position ?? '-'} ${r.reason}: ${r.detail}\n    ${r.raw}`).join('\n'),
        );
      });
    });
  jsonOption(feed.command('status').description('lines accepted, duplicate and quarantined; undeliverable events')).action((_options: unknown, cmd: Command) => {
    const options = optionsOf(cmd);
    return withServices(options, async ({ store, log }) => {
      const ingest = createIngestService(store, log);
      const stats = await ingest.stats();
      const undeliverable = await ingest.undeliverable();
      const view = {
        sources: await Promise.all(
          stats.map(async (s) => ({ source: s.source, accepted: s.accepted, duplicates: s.duplicates, quarantined: s.quarantined, updated_at: iso(s.updatedAt), position: (await ingest.position(s.source))?.position ?? null })),
        ),
        undeliverable: undeliverable.map((u) => ({ organization_id: u.orgId, events: u.events })),
      };
      print(options, view, () => {
        const lines = view.sources.length === 0 ? ['no feed lines read yet'] : [table([['SOURCE', 'ACCEPTED', 'DUPLICATE', 'QUARANTINED', 'POSITION'], ...view.sources.map((s) => [s.source, String(s.accepted), String(s.duplicates), String(s.quarantined), String(s.position ?? '-')])])];
        if (view.undeliverable.length > 0) lines.push('', 'undeliverable events (organization without webhook):', ...view.undeliverable.map((u) => `  ${terminalSafe(u.organization_id)}: ${u.events}`));
        return lines.join('\n');
      });
    });
  });
}

/** The ingest service of `path`, counting the lines and bytes it stores for the progress line. */
function countedForProgress(path: IngestPath, size: number | null): { ingest: IngestService; lines: () => number; end: () => void } {
  const progress = startProgress('ingest', { unit: 'lines' });
  let lines = 0;
  let bytes = 0;
  const ingest: IngestService = {
    ...path.ingest,
    async ingest(...args) {
      const counts = await path.ingest.ingest(...args);
      lines += args[1].length;
      bytes += sourceBytes(args[1]);
      progress.update(lines, size === null || size === 0 ? undefined : bytes / size);
      return counts;
    },
  };
  return { ingest, lines: () => lines, end: () => progress.end() };
}

/**
 * Ctrl-C (or SIGTERM) stops the reading: what was read is committed (a line cut in the middle is
 * quarantined, not dropped), the summary says what was stored, and the exit status is 130 (143
 * for SIGTERM), as for any command a signal interrupted.
 */
function interruptible(): { signal: AbortSignal; interruptedBy: () => NodeJS.Signals | null; release: () => void } {
  const interrupt = new AbortController();
  let interruptedBy: NodeJS.Signals | null = null;
  const onSignal = (signal: NodeJS.Signals) => {
    interruptedBy ??= signal;
    interrupt.abort();
  };
  process.once('SIGINT', onSignal);
  process.once('SIGTERM', onSignal);
  return {
    signal: interrupt.signal,
    interruptedBy: () => interruptedBy,
    release() {
      process.off('SIGINT', onSignal);
      process.off('SIGTERM', onSignal);
    },
  };
}

/** `hookrelay ingest FILE`: the file (or standard input) read once into the store, with a summary. */
async function ingestCommand(file: string, cmd: Command): Promise<void> {
  const options = optionsOf(cmd);
  const config = configFrom(options);
  // The input first: a file that cannot be read changes nothing, not even the state directory.
  const { input, source, size } = file === '-' ? { input: process.stdin, source: 'stdin', size: null } : await openInput(file);
  let store: Store;
  try {
    store = await openConfiguredStore(config);
  } catch (err) {
    if (input !== process.stdin) input.destroy();
    throw err;
  }
  try {
    const log = cliLogger(config);
    const path = await openIngestPath(store, log, { reorderWindowMs: config.delivery.reorderWindow, orderHoldMs: config.delivery.orderHold });
    const { ingest, lines, end } = countedForProgress(path, size);
    const started = performance.now();
    const interrupt = interruptible();
    const counts = await ingestStream(input, { ...config.feed, source, ingest, log, parser: path.parser, signal: interrupt.signal }).finally(async () => {
      interrupt.release();
      end();
      await path.close();
    });
    const interruptedBy = interrupt.interruptedBy();
    const rate = rateSummary(lines(), 'lines', (performance.now() - started) / 1000);
    print(options, { ...counts, lines: lines(), seconds: rate.seconds, lines_per_second: rate.perSecond, ...(interruptedBy === null ? {} : { interrupted: interruptedBy }) }, () =>
      `${counts.accepted} accepted, ${counts.duplicates} duplicate, ${counts.quarantined} quarantined` +
      (counts.undeliverable > 0 ? ` (${counts.undeliverable} of the accepted are undeliverable: their organization has no webhook)` : '') +
      `\n${rate.text}` +
      (counts.quarantined > 0 ? '\nsee: hookrelay feed rejects' : ''),
    );
    if (interruptedBy !== null) {
      sayError(
        `ingest interrupted (${interruptedBy}) after ${lines()} line(s), all of them stored as counted above; ` +
          `${source === 'stdin' ? 'what was not sent yet was not read' : 'run the same command again to read the rest (lines already stored count as duplicates)'}`,
      );
      process.exitCode = interruptedBy === 'SIGINT' ? 130 : 143;
    }
  } finally {
    await store.close();
  }
}

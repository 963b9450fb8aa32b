import { createReadStream } from 'node:fs';
import { resolve } from 'node:path';
import type { Command } from 'commander';
import { openIngestPath } from '../feed/ingest-path.ts';
import { ingestStream } from '../feed/stream-reader.ts';
import { createIngestService } from '../services/ingest.ts';
import { cliLogger, configFrom, iso, jsonOption, limitOption, openConfiguredStore, optionsOf, print, table, UsageError, withServices } from './shared.ts';

/** `ingest` and the `feed` group (quarantined lines, counts per source). */
export function registerFeedCommands(program: Command): void {
  jsonOption(program.command('ingest').description('ingest a JSONL file (or - for standard input) once and exit').argument('<file>', 'file to read, or -')).action(
    async (file: string, _options: unknown, cmd: Command) => {
      const options = optionsOf(cmd);
      const config = configFrom(options);
      const store = openConfiguredStore(config);
      try {
        const log = cliLogger(config);
        const source = file === '-' ? 'stdin' : resolve(file);
        // Large reads make full batches, so parsing and committing overlap (see BatchPipeline).
        const input = file === '-' ? process.stdin : createReadStream(source, { highWaterMark: 4 << 20 });
        const path = await openIngestPath(store, log);
        const counts = await ingestStream(input, { ...config.feed, source, ingest: path.ingest, log, parser: path.parser }).finally(() => path.close());
        print(options, counts, () =>
          `${counts.accepted} accepted, ${counts.duplicates} duplicate, ${counts.quarantined} quarantined` +
          (counts.undeliverable > 0 ? ` (${counts.undeliverable} of the accepted are undeliverable: their organization has no webhook)` : '') +
          (counts.quarantined > 0 ? '\nsee: hookrelay feed rejects' : ''),
        );
      } finally {
        store.close();
      }
    },
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
      withServices(options, ({ store, log }) => {
        const rejects = createIngestService(store, log).rejects(after, limit);
        const view = rejects.map((r) => ({
          id: r.id,
          source: r.source,
          position: r.position,
          reason: r.reason,
          detail: r.detail,
          event_id: r.eventId,
          line_bytes: r.lineBytes,
          raw: r.raw.toString('utf8'),
          raw_truncated: r.raw.length < r.lineBytes,
          received_at: iso(r.receivedAt),
        }));
        print(options, view, () =>
          view.length === 0
            ? 'no quarantined lines'
            : view.map((r) => `#${r.id} ${r.source}@${r.position ?? '-'} ${r.reason}: ${r.detail}\n    ${r.raw.slice(0, 200)}${r.raw_truncated || r.raw.length > 200 ? '...' : ''}`).join('\n'),
        );
      });
    });
  jsonOption(feed.command('status').description('lines accepted, duplicate and quarantined; undeliverable events')).action((_options: unknown, cmd: Command) => {
    const options = optionsOf(cmd);
    withServices(options, ({ store, log }) => {
      const ingest = createIngestService(store, log);
      const stats = ingest.stats();
      const undeliverable = ingest.undeliverable();
      const view = {
        sources: stats.map((s) => ({ source: s.source, accepted: s.accepted, duplicates: s.duplicates, quarantined: s.quarantined, updated_at: iso(s.updatedAt), position: ingest.position(s.source)?.position ?? null })),
        undeliverable: undeliverable.map((u) => ({ organization_id: u.orgId, events: u.events })),
      };
      print(options, view, () => {
        const lines = view.sources.length === 0 ? ['no feed lines read yet'] : [table([['SOURCE', 'ACCEPTED', 'DUPLICATE', 'QUARANTINED', 'POSITION'], ...view.sources.map((s) => [s.source, String(s.accepted), String(s.duplicates), String(s.quarantined), String(s.position ?? '-')])])];
        if (view.undeliverable.length > 0) lines.push('', 'undeliverable events (organization without webhook):', ...view.undeliverable.map((u) => `  ${u.organization_id}: ${u.events}`));
        return lines.join('\n');
      });
    });
  });
}

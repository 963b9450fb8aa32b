import type { Command } from 'commander';
import type { Recovered } from '../services/delivery-log.ts';
import { deliveryView } from '../services/views.ts';
import { startProgress } from './progress.ts';
import { iso } from '../domain/iso.ts';
import { terminalSafe } from '../domain/terminal-text.ts';
import { cliId, cliTime, jsonOption, limitOption, optionsOf, print, say, table, UsageError, withServices } from './shared.ts';

const STATUSES = ['pending', 'failed', 'delivered', 'dead'] as const;

export function registerDeliveriesCommands(program: Command): void {
  const deliveries = program.command('deliveries').description('the delivery log');
  jsonOption(deliveries.command('list').description("an organization's deliveries, newest first"))
    .requiredOption('--org <id>', 'organization id')
    .option('--status <status>', 'pending, failed, delivered or dead')
    .option('--limit <n>', 'at most this many', '50')
    .action((_options: unknown, cmd: Command) => {
      const options = optionsOf<{ org: string; status?: string; limit: string }>(cmd);
      const limit = limitOption(options.limit);
      const status = options.status as (typeof STATUSES)[number] | undefined;
      if (status !== undefined && !STATUSES.includes(status)) throw new UsageError(`--status must be one of ${STATUSES.join(', ')}; got "${options.status}"`);
      return withServices(options, async ({ services }) => {
        const rows = (await services.deliveryLog.list(options.org, { status, limit })).map(deliveryView);
        print(options, rows, () =>
          rows.length === 0 ? 'no deliveries' : table([['ID', 'STATUS', 'ATTEMPTS', 'EVENT', 'LAST ERROR'], ...rows.map((r) => [String(r.id), r.status, String(r.attempts), r.event_id, r.last_error ?? ''])]),
        );
      });
    });
  jsonOption(deliveries.command('show').description('one delivery with its attempts').argument('<id>', 'delivery id'))
    .requiredOption('--org <id>', 'organization id')
    .action((id: string, _options: unknown, cmd: Command) => {
      const options = optionsOf<{ org: string }>(cmd);
      const deliveryId = cliId(id);
      return withServices(options, async ({ services }) => {
        const { delivery, attempts } = await services.deliveryLog.get(options.org, deliveryId);
        const view = { ...deliveryView(delivery), attempt_log: attempts.map((a) => ({ attempt: a.attempt, started_at: iso(a.startedAt), duration_ms: a.durationMs, status_code: a.statusCode, error: a.errorClass, error_detail: a.errorDetail, outcome: a.outcome })) };
        print(options, view, () =>
          [
            `delivery ${view.id}: ${view.status}, ${view.attempts} attempt(s), event ${terminalSafe(view.event_id)}`,
            ...view.attempt_log.map((a) => `  #${a.attempt} ${a.started_at} ${a.status_code ?? terminalSafe(a.error ?? '')} ${a.outcome}${a.error_detail ? ` (${terminalSafe(a.error_detail)})` : ''}`),
          ].join('\n'),
        );
      });
    });
  deliveries
    .command('replay')
    .description("queue a delivery's event again")
    .argument('<id>', 'delivery id')
    .requiredOption('--org <id>', 'organization id')
    .action((id: string, _options: unknown, cmd: Command) => {
      const options = optionsOf<{ org: string }>(cmd);
      const deliveryId = cliId(id);
      return withServices(options, async ({ services }) => {
        const d = await services.deliveryLog.replay(options.org, deliveryId);
        say(`event ${terminalSafe(d.eventId)} queued again as delivery ${d.id}`);
      });
    });
  deliveries
    .command('recover')
    .description('queue again every failed, dead or undeliverable event received in a window')
    .requiredOption('--org <id>', 'organization id')
    .requiredOption('--since <time>', 'RFC 3339 start of the window')
    .option('--until <time>', 'RFC 3339 end of the window (default now)')
    .action((_options: unknown, cmd: Command) => {
      const options = optionsOf<{ org: string; since: string; until?: string }>(cmd);
      const since = cliTime('--since', options.since);
      const until = options.until === undefined ? undefined : cliTime('--until', options.until);
      return withServices(options, async ({ services }) => {
        // In chunks, one transaction each: the daemon's writer never waits long for this one.
        const progress = startProgress('recover', { unit: 'events' });
        let r: Recovered;
        try {
          r = await services.deliveryLog.recover(options.org, since, until, { onChunk: (done, total) => progress.update(done, total === 0 ? 1 : done / total) });
        } finally {
          progress.end();
        }
        say(`${r.requeued} event(s) queued again, ${r.retriedNow} failed delivery(ies) made due now`);
      });
    });
}

import type { Command } from 'commander';
import { statusOfName, type Recovered } from '../services/delivery-log.ts';
import { deliveryView } from '../services/views.ts';
import { startProgress } from './progress.ts';
import { iso } from '../domain/iso.ts';
import { terminalSafe } from '../domain/terminal-text.ts';
import { cliId, cliTime, jsonOption, limitOption, optionsOf, print, say, table, UsageError, withServices } from './shared.ts';

/** The --status names: the states (the words the table shows), and the API's v1 status names they stand for. */
const STATUS_NAMES = ['queued', 'retrying', 'delivered', 'failed_for_good', 'pending', 'failed', 'dead'] as const;

/** A delivery's state as the table and `show` say it: "retrying, next attempt at ..." is told from "failed for good" at a glance. */
export function stateText(d: { state: string; next_attempt_at: string | null }): string {
  if (d.state === 'retrying') return `retrying, next attempt at ${d.next_attempt_at}`;
  return d.state.replaceAll('_', ' ');
}

export function registerDeliveriesCommands(program: Command): void {
  const deliveries = program.command('deliveries').description('the delivery log');
  jsonOption(deliveries.command('list').description("an organization's deliveries, newest first"))
    .requiredOption('--org <id>', 'organization id')
    .option('--status <status>', 'queued, retrying, delivered or failed_for_good (or the API\'s v1 names: pending, failed, dead)')
    .option('--limit <n>', 'at most this many', '50')
    .action((_options: unknown, cmd: Command) => {
      const options = optionsOf<{ org: string; status?: string; limit: string }>(cmd);
      const limit = limitOption(options.limit);
      const status = options.status === undefined ? undefined : statusOfName(options.status);
      if (status === null) throw new UsageError(`--status must be one of ${STATUS_NAMES.join(', ')}; got "${options.status}"`);
      return withServices(options, async ({ services }) => {
        const rows = (await services.deliveryLog.list(options.org, { status, limit })).map(deliveryView);
        // The trace ids, when some delivery of the page has one (the producer's trace, or the daemon's).
        const traced = rows.some((r) => r.trace_id !== null);
        print(options, rows, () =>
          rows.length === 0
            ? 'no deliveries'
            : table([
                ['ID', 'STATUS', 'ATTEMPTS', 'EVENT', 'LAST ERROR', ...(traced ? ['TRACE'] : [])],
                ...rows.map((r) => [String(r.id), stateText(r), String(r.attempts), r.event_id, r.last_error ?? '', ...(traced ? [r.trace_id ?? '-'] : [])]),
              ]),
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
            `delivery ${view.id}: ${stateText(view)}, ${view.attempts} attempt(s), event ${terminalSafe(view.event_id)}${view.trace_id === null ? '' : `, trace ${view.trace_id}`}`,
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
      return withServices(options, async ({ services, by }) => {
        const d = await services.deliveryLog.replay(by, options.org, deliveryId);
        say(`event ${terminalSafe(d.eventId)} queued again as delivery ${d.id}`);
      });
    });
  jsonOption(deliveries.command('retry').description('retry now: a delivery waiting for its next attempt is made due at once (order kept: later changes of its request stay behind it)').argument('<id>', 'delivery id'))
    .requiredOption('--org <id>', 'organization id')
    .action((id: string, _options: unknown, cmd: Command) => {
      const options = optionsOf<{ org: string }>(cmd);
      const deliveryId = cliId(id);
      return withServices(options, async ({ services, by }) => {
        const d = await services.deliveryLog.retryNow(by, options.org, deliveryId);
        print(options, deliveryView(d), () => `delivery ${d.id} is due now: the daemon sends it at its next look (at once on PostgreSQL; on SQLite within delivery.pollInterval)`);
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
      return withServices(options, async ({ services, by }) => {
        // In chunks, one transaction each: the daemon's writer never waits long for this one.
        const progress = startProgress('recover', { unit: 'events' });
        let r: Recovered;
        try {
          r = await services.deliveryLog.recover(by, options.org, since, until, { onChunk: (done, total) => progress.update(done, total === 0 ? 1 : done / total) });
        } finally {
          progress.end();
        }
        say(`${r.requeued} event(s) queued again, ${r.retriedNow} failed delivery(ies) made due now`);
      });
    });
}

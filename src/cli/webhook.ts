import type { Command } from 'commander';
import { HIDDEN_HEADER_VALUE, parseHeaderLine } from '../domain/webhook-headers.ts';
import { excerpt } from '../domain/errors.ts';
import { TestKind } from '../services/test-events.ts';
import { deliveryView, webhookView } from '../services/views.ts';
import { iso } from '../domain/iso.ts';
import { terminalSafe } from '../domain/terminal-text.ts';
import { jsonOption, optionsOf, print, say, UsageError, withServices } from './shared.ts';
import { RATE_LIMIT_MAX, RATE_LIMIT_MIN } from '../domain/rate-window.ts';

/** The headers of webhookView in one line: "X-Env: prod, Authorization: (set; value hidden)", or "none". */
function headersLine(headers: Readonly<Record<string, string | null>>): string {
  const entries = Object.entries(headers);
  return entries.length === 0 ? 'none' : entries.map(([name, value]) => `${terminalSafe(name)}: ${value === null ? HIDDEN_HEADER_VALUE : terminalSafe(value)}`).join(', ');
}

/** Collects the repeated `--header 'Name: value'` options as the object register_webhook takes; the service checks them. */
function headerOptions(lines: readonly string[]): Record<string, string> {
  const headers: Record<string, string> = {};
  for (const line of lines) {
    const pair = parseHeaderLine(line);
    if (pair === null) throw new UsageError(`--header must be "Name: value", such as --header 'X-Environment: production'; one has no colon after a name (it is not repeated here: it may hold a credential)`);
    const [name, value] = pair;
    // Two spellings of one name both reach the check, which refuses them as the API does.
    if (Object.hasOwn(headers, name)) throw new UsageError(`--header ${excerpt(name)} is given twice; give each header once`);
    headers[name] = value;
  }
  return headers;
}

/**
 * `--rate-limit`: a whole number in range, or `none` (as when left out: a registration sets
 * every setting). Refused before anything is opened, with what to write instead.
 */
export function parseRateLimitOption(value: string | undefined): number | null {
  if (value === undefined || value.trim().toLowerCase() === 'none') return null;
  const n = /^\s*\d+\s*$/.test(value) ? Number(value) : NaN;
  if (!Number.isSafeInteger(n) || n < RATE_LIMIT_MIN || n > RATE_LIMIT_MAX) {
    throw new UsageError(`--rate-limit ${JSON.stringify(value.slice(0, 40))}: give a whole number of deliveries per second from ${RATE_LIMIT_MIN} to ${RATE_LIMIT_MAX}, or "none" for no limit`);
  }
  return n;
}

export function registerWebhookCommands(program: Command): void {
  const webhook = program.command('webhook').description("an organization's webhook");
  jsonOption(webhook.command('get').description('show the webhook configuration'))
    .requiredOption('--org <id>', 'organization id')
    .action((_options: unknown, cmd: Command) => {
      const options = optionsOf<{ org: string }>(cmd);
      return withServices(options, async ({ services }) => {
        const view = webhookView(await services.webhooks.get(options.org));
        print(options, view, () => Object.entries(view).map(([k, v]) => `${k}: ${k === 'headers' ? headersLine(view.headers) : terminalSafe(String(v))}`).join('\n'));
      });
    });
  webhook
    .command('set')
    .description('register or replace the webhook (the whole of it: headers not given again are removed)')
    .requiredOption('--org <id>', 'organization id')
    .requiredOption('--url <url>', 'https URL of the receiver')
    .option('--no-hmac', 'do not sign deliveries')
    .option('--header <header>', "a header sent on every delivery, 'Name: value' (repeat for more, at most 20; none given: none sent)", (line: string, all: string[]) => [...all, line], [] as string[])
    .option('--rate-limit <n>', `at most n deliveries start per second (${RATE_LIMIT_MIN}-${RATE_LIMIT_MAX}); "none", or leaving it out, for no limit`)
    .action((_options: unknown, cmd: Command) => {
      const options = optionsOf<{ org: string; url: string; hmac: boolean; header: string[]; rateLimit?: string }>(cmd);
      const rateLimit = parseRateLimitOption(options.rateLimit);
      const headers = headerOptions(options.header);
      return withServices(options, async ({ services, by }) => {
        const result = await services.webhooks.register(by, options.org, { webhook_url: options.url, active_hmac: options.hmac, headers, rate_limit: rateLimit });
        const url = terminalSafe(result.webhook.url);
        const what = result.created ? `registered ${url} for ${options.org}` : `replaced ${terminalSafe(result.replacedUrl ?? '')} with ${url} for ${options.org}`;
        say(what + (result.webhook.rateLimit === null ? ', no rate limit' : `, at most ${result.webhook.rateLimit} deliveries per second`));
        say(`headers: ${headersLine(webhookView(result.webhook).headers)}`);
        if (result.removedHeaders.length > 0) say(`removed headers (not given again): ${result.removedHeaders.map(terminalSafe).join(', ')}`);
        if (result.newSecret) say(`signing secret (shown once; also: hookrelay webhook secret --org ${options.org}): ${result.newSecret}`);
      });
    });
  webhook
    .command('secret')
    .description('print the signing secret')
    .requiredOption('--org <id>', 'organization id')
    .action((_options: unknown, cmd: Command) => {
      const options = optionsOf<{ org: string }>(cmd);
      return withServices(options, async ({ services }) => {
        say(await services.webhooks.getSecret(options.org));
      });
    });
  jsonOption(webhook.command('test').description('queue a test event for the webhook (the daemon sends it): webhook.test, or a sample status change in the real shape'))
    .requiredOption('--org <id>', 'organization id')
    .option('--kind <kind>', `what to send: ${Object.values(TestKind).join(' (default) or ')} (the real anticipation_request.status_changed shape, marked "test": true, about a made-up request)`, TestKind.webhookTest)
    .action((_options: unknown, cmd: Command) => {
      const options = optionsOf<{ org: string; kind: string }>(cmd);
      const kind = Object.values(TestKind).find((k) => k === options.kind);
      if (kind === undefined) throw new UsageError(`--kind must be one of ${Object.values(TestKind).join(', ')}; got "${options.kind}"`);
      return withServices(options, async ({ services, by }) => {
        const d = await services.deliveryLog.sendTest(by, options.org, kind);
        const what = kind === TestKind.sampleStatusChange ? 'sample status change' : 'test event';
        print(options, deliveryView(d), () => `queued ${what} ${terminalSafe(d.eventId)} as delivery ${d.id}; see: hookrelay deliveries show ${d.id} --org ${options.org}`);
      });
    });
  for (const [name, enabled] of [['enable', true], ['disable', false]] as const) {
    webhook
      .command(name)
      .description(enabled ? 'enable the webhook: held deliveries go out' : 'disable the webhook: deliveries are held, not dropped')
      .requiredOption('--org <id>', 'organization id')
      .action((_options: unknown, cmd: Command) => {
        const options = optionsOf<{ org: string }>(cmd);
        return withServices(options, async ({ services, by }) => {
          await services.webhooks.setEnabled(by, options.org, enabled);
          say(`webhook of ${options.org} ${enabled ? 'enabled' : 'disabled'}`);
        });
      });
  }
  webhook
    .command('rotate-secret')
    .description('new signing secret; the previous one signs too during the grace period')
    .requiredOption('--org <id>', 'organization id')
    .action((_options: unknown, cmd: Command) => {
      const options = optionsOf<{ org: string }>(cmd);
      return withServices(options, async ({ services, by }) => {
        const r = await services.webhooks.rotateSecret(by, options.org);
        say(`${r.secret}\nprevious secret keeps signing until ${iso(r.previousSecretExpiresAt)}`);
      });
    });
}

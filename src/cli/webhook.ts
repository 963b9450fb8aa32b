import type { Command } from 'commander';
import { HIDDEN_HEADER_VALUE, parseHeaderLine } from '../domain/webhook-headers.ts';
import { excerpt } from '../domain/errors.ts';
import { TestKind } from '../services/test-events.ts';
import { deliveryView, webhookView } from '../services/views.ts';
import { iso } from '../domain/iso.ts';
import { terminalSafe } from '../domain/terminal-text.ts';
import { jsonOption, optionsOf, print, say, UsageError, withServices } from './shared.ts';
import { RATE_LIMIT_MAX, RATE_LIMIT_MIN } from '../domain/rate-window.ts';
import { receiverAuthOptions, type ReceiverAuthOptions } from './webhook-auth.ts';

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

type View = ReturnType<typeof webhookView>;

/** The client certificate of webhookView in one line, or "none". */
function certificateLine(c: View['client_certificate']): string {
  return c === null ? 'none' : `${terminalSafe(c.subject)} (SHA-256 ${c.fingerprint_sha256}, ${c.key_type}, valid until ${c.not_after}; issuer ${terminalSafe(c.issuer)})`;
}

/** The OAuth2 settings of webhookView in one line (never the secret), or "none". */
function oauth2Line(o: View['oauth2']): string {
  if (o === null) return 'none';
  const extra = [o.scope === null ? null : `scope ${o.scope}`, o.audience === null ? null : `audience ${o.audience}`, o.client_auth].filter((x) => x !== null);
  return terminalSafe(`client ${o.client_id} at ${o.token_url} (${extra.join(', ')}; client secret set, hidden)`);
}

/** One line of `webhook get`. */
function viewLine(view: View, key: string, value: unknown): string {
  if (key === 'headers') return `${key}: ${headersLine(view.headers)}`;
  if (key === 'client_certificate') return `${key}: ${certificateLine(view.client_certificate)}`;
  if (key === 'oauth2') return `${key}: ${oauth2Line(view.oauth2)}`;
  return `${key}: ${terminalSafe(String(value))}`;
}

export function registerWebhookCommands(program: Command): void {
  const webhook = program.command('webhook').description("an organization's webhook");
  jsonOption(webhook.command('get').description('show the webhook configuration'))
    .requiredOption('--org <id>', 'organization id')
    .action((_options: unknown, cmd: Command) => {
      const options = optionsOf<{ org: string }>(cmd);
      return withServices(options, async ({ services }) => {
        const view = webhookView(await services.webhooks.get(options.org));
        print(options, view, () => Object.entries(view).map(([k, v]) => viewLine(view, k, v)).join('\n'));
      });
    });
  webhook
    .command('set')
    .description('register or replace the webhook (the whole of it: headers not given again are removed; the client certificate and OAuth2 credentials are kept unless given again or removed with --no-client-cert, --no-oauth2)')
    .requiredOption('--org <id>', 'organization id')
    .requiredOption('--url <url>', 'https URL of the receiver')
    .option('--no-hmac', 'do not sign deliveries')
    .option('--header <header>', "a header sent on every delivery, 'Name: value' (repeat for more, at most 20; none given: none sent)", (line: string, all: string[]) => [...all, line], [] as string[])
    .option('--rate-limit <n>', `at most n deliveries start per second (${RATE_LIMIT_MIN}-${RATE_LIMIT_MAX}); "none", or leaving it out, for no limit`)
    .option('--client-cert <file>', 'PEM client certificate (and intermediates) every delivery presents (mutual TLS); left out: the webhook keeps the one it has')
    .option('--client-key <file>', "PEM private key of --client-cert (unencrypted; left out: read from --client-cert's file)")
    .option('--no-client-cert', 'remove the client certificate')
    .option('--oauth2-token-url <url>', 'OAuth2 token endpoint: deliveries carry an access token from it (client credentials); left out: the webhook keeps its OAuth2 settings')
    .option('--oauth2-client-id <id>', 'OAuth2 client id')
    .option('--oauth2-client-secret-file <file>', 'file holding the OAuth2 client secret (never on the command line)')
    .option('--oauth2-scope <scopes>', 'OAuth2 scopes to ask for, space-separated')
    .option('--oauth2-audience <audience>', 'sent as audience in the token request')
    .option('--oauth2-client-auth <method>', 'client_secret_basic (the default) or client_secret_post')
    .option('--no-oauth2', 'remove the OAuth2 client credentials')
    .action((_options: unknown, cmd: Command) => {
      const options = optionsOf<{ org: string; url: string; hmac: boolean; header: string[]; rateLimit?: string } & ReceiverAuthOptions>(cmd);
      const rateLimit = parseRateLimitOption(options.rateLimit);
      const headers = headerOptions(options.header);
      const auth = receiverAuthOptions(options);
      return withServices(options, async ({ services, by }) => {
        const result = await services.webhooks.register(by, options.org, { webhook_url: options.url, active_hmac: options.hmac, headers, rate_limit: rateLimit, ...auth });
        const url = terminalSafe(result.webhook.url);
        const what = result.created ? `registered ${url} for ${options.org}` : `replaced ${terminalSafe(result.replacedUrl ?? '')} with ${url} for ${options.org}`;
        say(what + (result.webhook.rateLimit === null ? ', no rate limit' : `, at most ${result.webhook.rateLimit} deliveries per second`));
        say(`headers: ${headersLine(webhookView(result.webhook).headers)}`);
        if (result.removedHeaders.length > 0) say(`removed headers (not given again): ${result.removedHeaders.map(terminalSafe).join(', ')}`);
        const view = webhookView(result.webhook);
        say(`client certificate: ${certificateLine(view.client_certificate)}`);
        say(`oauth2: ${oauth2Line(view.oauth2)}`);
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

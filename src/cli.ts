#!/usr/bin/env node
import { Command, CommanderError, Option } from 'commander';
import { loadConfig, type Config } from './config/load.ts';
import { parseDuration } from './domain/duration.ts';
import { systemClock } from './domain/clock.ts';
import { ErrorCode, isHookrelayError } from './domain/errors.ts';
import { createLogger, logFatalErrors, syslogPrefixWanted, type Logger } from './log.ts';
import { createRelay } from './relay.ts';
import { loadAuthKeys } from './services/auth-keys.ts';
import { createServices, type Services } from './services/services.ts';
import { issueToken } from './services/tokens.ts';
import { createWorkerLineParser } from './feed/line-parser.ts';
import { startBackgroundCheckpoints } from './store/checkpointer.ts';
import { ingestStream } from './feed/stream-reader.ts';
import { createIngestService } from './services/ingest.ts';
import { createReadStream } from 'node:fs';
import { resolve } from 'node:path';
import { openStore, type Store } from './store/store.ts';
import { VERSION } from './version.ts';
import { registerStatusCommands } from './cli/status.ts';
import { deliveryView, webhookView } from './services/views.ts';

/** Exit codes: 0 success, 1 runtime error, 2 usage or configuration error. */
const EXIT_RUNTIME = 1;
const EXIT_USAGE = 2;

class UsageError extends Error {}

interface CommonOptions {
  config?: string;
  stateDir?: string;
  listen?: string;
  feed?: string;
  logLevel?: string;
  json?: boolean;
}

function configFrom(options: CommonOptions): Config {
  return loadConfig({
    configFile: options.config,
    overrides: { stateDir: options.stateDir, 'api.listen': options.listen, 'log.level': options.logLevel, 'feed.path': options.feed },
  });
}

/** Logger for one-shot commands: stderr, so stdout carries only the command's output. */
function cliLogger(config: Config): Logger {
  return createLogger(config.log.level === 'info' ? 'warn' : config.log.level, process.stderr);
}

/** Opens the store for a one-shot command and closes it afterwards, whatever happens. */
function withServices<T>(options: CommonOptions, fn: (ctx: { config: Config; store: Store; services: Services; log: Logger }) => T): T {
  const config = configFrom(options);
  const store = openStore(config.database.path, systemClock, { busyTimeoutMs: config.database.busyTimeoutMs });
  try {
    return fn({ config, store, services: createServices(store, config), log: cliLogger(config) });
  } finally {
    store.close();
  }
}

function print(options: CommonOptions, json: unknown, human: () => string): void {
  process.stdout.write(options.json ? JSON.stringify(json, null, 2) + '\n' : human() + '\n');
}

function table(rows: readonly (readonly string[])[]): string {
  const widths = rows[0]!.map((_, i) => Math.max(...rows.map((r) => r[i]!.length)));
  return rows.map((r) => r.map((cell, i) => cell.padEnd(widths[i]!)).join('  ').trimEnd()).join('\n');
}

const iso = (ms: number) => new Date(ms).toISOString();

function common(cmd: Command, extra: { json?: boolean } = {}): Command {
  cmd.option('--config <file>', 'JSON config file (also HOOKRELAY_CONFIG)');
  cmd.option('--state-dir <dir>', 'state directory (default ./var)');
  if (extra.json) cmd.option('--json', 'print JSON');
  return cmd;
}

export function buildProgram(): Command {
  const program = new Command('hookrelay')
    .description('Self-hosted webhook relay: admin API, feed ingestion and signed delivery')
    .version(VERSION)
    .showHelpAfterError('(run with --help for usage)')
    .exitOverride();
  program.configureOutput({ writeErr: (text) => process.stderr.write(text) });

  common(program.command('serve').description('run the daemon: admin API, feed reader'))
    .option('--listen <host:port>', 'admin API address (default 127.0.0.1:8080)')
    .option('--feed <path>', 'JSONL feed file to tail, or - for standard input (default <state-dir>/feed.jsonl)')
    .addOption(new Option('--log-level <level>', 'log level').choices(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']))
    .action(async (options: CommonOptions) => {
      const config = configFrom(options);
      const log = createLogger(config.log.level, undefined, { syslogPrefix: syslogPrefixWanted(config.log.syslogPrefix, config.log.journalStream) });
      logFatalErrors(log);
      // Node writes its process warnings to stderr as plain text; the daemon's output is JSON
      // lines (journald, log shippers), so they go to the log instead.
      process.removeAllListeners('warning');
      process.on('warning', (warning) => log.warn({ warning: { name: warning.name, message: warning.message, code: (warning as NodeJS.ErrnoException).code } }, 'Node.js warning'));
      const relay = createRelay(config, { log });
      let stopping: Promise<void> | null = null;
      const shutdown = (signal: string) => {
        if (stopping) return;
        log.info({ signal }, 'shutting down');
        stopping = relay.stop().then(
          () => process.exit(0),
          (err: unknown) => {
            log.error({ err }, 'error during shutdown');
            process.exit(EXIT_RUNTIME);
          },
        );
      };
      process.on('SIGTERM', () => shutdown('SIGTERM'));
      process.on('SIGINT', () => shutdown('SIGINT'));
      log.info({ version: VERSION, stateDir: config.stateDir }, 'hookrelay starting');
      await relay.start();
    });

  common(program.command('migrate').description('apply pending database migrations and exit')).action((options: CommonOptions) => {
    withServices(options, ({ store, config }) => {
      // Opening the store applies pending migrations; report what it did.
      const { from, to } = store.migrated;
      process.stdout.write(from === to ? `database ${config.database.path} is at schema version ${to}\n` : `migrated ${config.database.path} from ${from} to ${to}\n`);
    });
  });

  common(program.command('ingest').description('ingest a JSONL file (or - for standard input) once and exit').argument('<file>', 'file to read, or -'), { json: true })
    .action(async (file: string, options: CommonOptions) => {
      const config = configFrom(options);
      const store = openStore(config.database.path, systemClock, { busyTimeoutMs: config.database.busyTimeoutMs });
      try {
        const log = cliLogger(config);
        const source = file === '-' ? 'stdin' : resolve(file);
        // Large reads make full batches, so parsing and committing overlap (see BatchPipeline).
        const input = file === '-' ? process.stdin : createReadStream(source, { highWaterMark: 4 << 20 });
        const parser = createWorkerLineParser(log);
        const checkpoints = await startBackgroundCheckpoints(store.db, log);
        const counts = await ingestStream(input, { ...config.feed, source, ingest: createIngestService(store, log), log, parser }).finally(async () => {
          await parser.close();
          await checkpoints.stop();
        });
        print(options, counts, () =>
          `${counts.accepted} accepted, ${counts.duplicates} duplicate, ${counts.quarantined} quarantined` +
          (counts.undeliverable > 0 ? ` (${counts.undeliverable} of the accepted are undeliverable: their organization has no webhook)` : '') +
          (counts.quarantined > 0 ? '\nsee: hookrelay feed rejects' : ''),
        );
      } finally {
        store.close();
      }
    });

  const feedCmd = program.command('feed').description('the status-change feed');
  common(feedCmd.command('rejects').description('list quarantined feed lines'), { json: true })
    .option('--after <id>', 'only rejects with a larger id', '0')
    .option('--limit <n>', 'at most this many', '100')
    .action((options: CommonOptions & { after: string; limit: string }) => {
      const after = Number(options.after);
      const limit = Number(options.limit);
      if (!Number.isInteger(after) || after < 0) throw new UsageError(`--after must be a non-negative integer; got "${options.after}"`);
      if (!Number.isInteger(limit) || limit < 1 || limit > 10_000) throw new UsageError(`--limit must be an integer from 1 to 10000; got "${options.limit}"`);
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
  common(feedCmd.command('status').description('lines accepted, duplicate and quarantined; undeliverable events'), { json: true }).action((options: CommonOptions) => {
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

  const orgs = program.command('orgs').description('manage organizations');
  common(orgs.command('add').description('add an organization').argument('<id>', 'organization id (the "org" claim of tokens)'))
    .option('--name <name>', 'display name')
    .action((id: string, options: CommonOptions & { name?: string }) => {
      withServices(options, ({ services }) => {
        const org = services.orgs.add({ id, name: options.name });
        process.stdout.write(`added organization ${org.id} (${org.name})\n`);
      });
    });
  common(orgs.command('list').description('list organizations'), { json: true }).action((options: CommonOptions) => {
    withServices(options, ({ services }) => {
      const list = services.orgs.list();
      print(options, list.map((o) => ({ id: o.id, name: o.name, created_at: iso(o.createdAt) })), () =>
        list.length === 0 ? 'no organizations; add one with: hookrelay orgs add ID' : table([['ID', 'NAME', 'CREATED'], ...list.map((o) => [o.id, o.name, iso(o.createdAt)])]),
      );
    });
  });

  const users = program.command('users').description('manage users');
  common(users.command('add').description('add a user to an organization'))
    .requiredOption('--org <id>', 'organization id')
    .requiredOption('--email <email>', 'e-mail (unique per organization, case-insensitive)')
    .requiredOption('--role <role>', 'role name, see: hookrelay roles list')
    .action((options: CommonOptions & { org: string; email: string; role: string }) => {
      withServices(options, ({ services }) => {
        const user = services.users.add({ orgId: options.org, email: options.email, roleName: options.role });
        process.stdout.write(`added ${user.email} to ${user.orgId} as ${user.roleName}\n`);
      });
    });
  common(users.command('list').description("list an organization's users"), { json: true })
    .requiredOption('--org <id>', 'organization id')
    .action((options: CommonOptions & { org: string }) => {
      withServices(options, ({ services }) => {
        const list = services.users.list(options.org);
        print(options, list.map((u) => ({ email: u.email, role_name: u.roleName, created_at: iso(u.createdAt), updated_at: iso(u.updatedAt) })), () =>
          list.length === 0 ? `no users in ${options.org}` : table([['EMAIL', 'ROLE', 'UPDATED'], ...list.map((u) => [u.email, u.roleName, iso(u.updatedAt)])]),
        );
      });
    });
  common(users.command('set-role').description("change a user's role"))
    .requiredOption('--org <id>', 'organization id')
    .requiredOption('--email <email>', 'e-mail of the user')
    .requiredOption('--role <role>', 'new role name')
    .action((options: CommonOptions & { org: string; email: string; role: string }) => {
      withServices(options, ({ services }) => {
        const change = services.users.setRole(options.org, { email: options.email, role_name: options.role });
        process.stdout.write(change.changed ? `${change.user.email}: ${change.previousRoleName} -> ${change.user.roleName}\n` : `${change.user.email} already has the role ${change.user.roleName}\n`);
      });
    });
  common(users.command('remove').description('remove a user'))
    .requiredOption('--org <id>', 'organization id')
    .requiredOption('--email <email>', 'e-mail of the user')
    .option('--force', 'remove even the last user who can manage users')
    .action((options: CommonOptions & { org: string; email: string; force?: boolean }) => {
      withServices(options, ({ services }) => {
        const user = services.users.remove(options.org, options.email, { force: options.force === true });
        process.stdout.write(`removed ${user.email} from ${user.orgId}\n`);
      });
    });

  const roles = program.command('roles').description('manage roles');
  common(roles.command('list').description('list roles and their permissions'), { json: true }).action((options: CommonOptions) => {
    withServices(options, ({ services }) => {
      const list = services.roles.list();
      print(options, list.map((r) => ({ name: r.name, description: r.description, permissions: r.permissions, builtin: r.builtin })), () =>
        table([['NAME', 'PERMISSIONS', 'DESCRIPTION'], ...list.map((r) => [r.name, r.permissions.join(','), r.description])]),
      );
    });
  });
  common(roles.command('add').description('add a role').argument('<name>', 'role name (lower-case letters, digits, _)'))
    .requiredOption('--description <text>', 'what the role is for')
    .option('--permissions <list>', 'comma-separated: roles:read, users:manage, webhook:read, webhook:manage', '')
    .action((name: string, options: CommonOptions & { description: string; permissions: string }) => {
      withServices(options, ({ services }) => {
        const permissions = options.permissions.split(',').map((p) => p.trim()).filter((p) => p !== '');
        const role = services.roles.add({ name, description: options.description, permissions });
        process.stdout.write(`added role ${role.name} (${role.permissions.join(', ') || 'no permissions'})\n`);
      });
    });

  const token = program.command('token').description('access tokens for the admin API');
  common(token.command('issue').description('print a JWT the daemon accepts'), { json: true })
    .requiredOption('--org <id>', 'organization id')
    .requiredOption('--email <email>', 'e-mail of an existing user')
    .option('--ttl <duration>', 'lifetime, such as 15m, 1h, 7d (default auth.tokenTtl)')
    .action((options: CommonOptions & { org: string; email: string; ttl?: string }) => {
      withServices(options, ({ config, store, services, log }) => {
        let ttlMs = config.auth.tokenTtl;
        if (options.ttl !== undefined) {
          const parsed = parseDuration(options.ttl);
          if (parsed === null || parsed < 1000) throw new UsageError(`--ttl must be a duration such as 15m, 1h or 7d; got "${options.ttl}"`);
          ttlMs = parsed;
        }
        const keys = loadAuthKeys(config, log);
        const issued = issueToken({ keys, auth: config.auth, users: services.users, clock: store.clock }, { orgId: options.org, email: options.email, ttlMs });
        print(options, { token: issued.token, expires_at: iso(issued.expiresAt) }, () => issued.token);
      });
    });

  const webhook = program.command('webhook').description("an organization's webhook");
  common(webhook.command('get').description('show the webhook configuration'), { json: true })
    .requiredOption('--org <id>', 'organization id')
    .action((options: CommonOptions & { org: string }) => {
      withServices(options, ({ services }) => {
        const w = services.webhooks.get(options.org);
        const view = webhookView(w);
        print(options, view, () => Object.entries(view).map(([k, v]) => `${k}: ${String(v)}`).join('\n'));
      });
    });
  common(webhook.command('set').description('register or replace the webhook'))
    .requiredOption('--org <id>', 'organization id')
    .requiredOption('--url <url>', 'https URL of the receiver')
    .option('--no-hmac', 'do not sign deliveries')
    .action((options: CommonOptions & { org: string; url: string; hmac: boolean }) => {
      withServices(options, ({ services }) => {
        const result = services.webhooks.register(options.org, { webhook_url: options.url, active_hmac: options.hmac });
        process.stdout.write(result.created ? `registered ${result.webhook.url} for ${options.org}\n` : `replaced ${result.replacedUrl} with ${result.webhook.url} for ${options.org}\n`);
        if (result.newSecret) process.stdout.write(`signing secret (shown once; also: hookrelay webhook secret --org ${options.org}): ${result.newSecret}\n`);
      });
    });
  common(webhook.command('secret').description('print the signing secret'))
    .requiredOption('--org <id>', 'organization id')
    .action((options: CommonOptions & { org: string }) => {
      withServices(options, ({ services }) => {
        process.stdout.write(services.webhooks.getSecret(options.org) + '\n');
      });
    });

  common(webhook.command('test').description('queue a webhook.test event for the webhook (the daemon sends it)'), { json: true })
    .requiredOption('--org <id>', 'organization id')
    .action((options: CommonOptions & { org: string }) => {
      withServices(options, ({ services }) => {
        const d = services.deliveries.sendTest(options.org);
        print(options, deliveryView(d), () => `queued test event ${d.eventId} as delivery ${d.id}; see: hookrelay deliveries show ${d.id} --org ${options.org}`);
      });
    });
  for (const [name, enabled] of [['enable', true], ['disable', false]] as const) {
    common(webhook.command(name).description(enabled ? 'enable the webhook: held deliveries go out' : 'disable the webhook: deliveries are held, not dropped'))
      .requiredOption('--org <id>', 'organization id')
      .action((options: CommonOptions & { org: string }) => {
        withServices(options, ({ services }) => {
          services.deliveries.setEnabled(options.org, enabled);
          process.stdout.write(`webhook of ${options.org} ${enabled ? 'enabled' : 'disabled'}\n`);
        });
      });
  }
  common(webhook.command('rotate-secret').description('new signing secret; the previous one signs too during the grace period'))
    .requiredOption('--org <id>', 'organization id')
    .action((options: CommonOptions & { org: string }) => {
      withServices(options, ({ services }) => {
        const r = services.deliveries.rotateSecret(options.org);
        process.stdout.write(`${r.secret}\nprevious secret keeps signing until ${iso(r.previousSecretExpiresAt)}\n`);
      });
    });

  const deliveries = program.command('deliveries').description('the delivery log');
  common(deliveries.command('list').description("an organization's deliveries, newest first"), { json: true })
    .requiredOption('--org <id>', 'organization id')
    .option('--status <status>', 'pending, failed, delivered or dead')
    .option('--limit <n>', 'at most this many', '50')
    .action((options: CommonOptions & { org: string; status?: string; limit: string }) => {
      const limit = Number(options.limit);
      if (!Number.isInteger(limit) || limit < 1 || limit > 10_000) throw new UsageError(`--limit must be an integer from 1 to 10000; got "${options.limit}"`);
      if (options.status !== undefined && !['pending', 'failed', 'delivered', 'dead'].includes(options.status)) {
        throw new UsageError(`--status must be one of pending, failed, delivered, dead; got "${options.status}"`);
      }
      withServices(options, ({ services }) => {
        const rows = services.deliveries.list(options.org, { status: options.status as 'pending' | undefined, limit }).map(deliveryView);
        print(options, rows, () =>
          rows.length === 0 ? 'no deliveries' : table([['ID', 'STATUS', 'ATTEMPTS', 'EVENT', 'LAST ERROR'], ...rows.map((r) => [String(r.id), r.status, String(r.attempts), r.event_id, r.last_error ?? ''])]),
        );
      });
    });
  common(deliveries.command('show').description('one delivery with its attempts').argument('<id>', 'delivery id'), { json: true })
    .requiredOption('--org <id>', 'organization id')
    .action((id: string, options: CommonOptions & { org: string }) => {
      withServices(options, ({ services }) => {
        const { delivery, attempts } = services.deliveries.get(options.org, cliId(id));
        const view = { ...deliveryView(delivery), attempt_log: attempts.map((a) => ({ attempt: a.attempt, started_at: iso(a.startedAt), duration_ms: a.durationMs, status_code: a.statusCode, error: a.errorClass, error_detail: a.errorDetail, outcome: a.outcome })) };
        print(options, view, () =>
          [`delivery ${view.id}: ${view.status}, ${view.attempts} attempt(s), event ${view.event_id}`, ...view.attempt_log.map((a) => `  #${a.attempt} ${a.started_at} ${a.status_code ?? a.error} ${a.outcome}${a.error_detail ? ` (${a.error_detail})` : ''}`)].join('\n'),
        );
      });
    });
  common(deliveries.command('replay').description("queue a delivery's event again").argument('<id>', 'delivery id'))
    .requiredOption('--org <id>', 'organization id')
    .action((id: string, options: CommonOptions & { org: string }) => {
      withServices(options, ({ services }) => {
        const d = services.deliveries.replay(options.org, cliId(id));
        process.stdout.write(`event ${d.eventId} queued again as delivery ${d.id}\n`);
      });
    });
  common(deliveries.command('recover').description('queue again every failed, dead or undeliverable event received in a window'))
    .requiredOption('--org <id>', 'organization id')
    .requiredOption('--since <time>', 'RFC 3339 start of the window')
    .option('--until <time>', 'RFC 3339 end of the window (default now)')
    .action((options: CommonOptions & { org: string; since: string; until?: string }) => {
      const since = cliTime('--since', options.since);
      const until = options.until === undefined ? undefined : cliTime('--until', options.until);
      withServices(options, ({ services }) => {
        const r = services.deliveries.recover(options.org, since, until);
        process.stdout.write(`${r.requeued} event(s) queued again, ${r.hurried} failed delivery(ies) made due now\n`);
      });
    });

  registerStatusCommands(program);
  return program;
}

function cliId(text: string): number {
  if (!/^\d{1,15}$/.test(text)) throw new UsageError(`the delivery id must be a positive integer; got "${text}"`);
  return Number(text);
}

function cliTime(flag: string, text: string): number {
  const ms = /^\d{4}-\d{2}-\d{2}/.test(text) ? Date.parse(text) : Number.NaN;
  if (Number.isNaN(ms)) throw new UsageError(`${flag} must be an RFC 3339 date-time such as 2026-11-22T08:00:00Z; got "${text}"`);
  return ms;
}

/** Maps an error to one line on stderr and an exit code. */
function fail(err: unknown): number {
  if (err instanceof CommanderError) {
    // commander already printed its message (or the help / version text).
    return err.exitCode === 0 ? 0 : EXIT_USAGE;
  }
  if (err instanceof UsageError) {
    process.stderr.write(`hookrelay: ${err.message}\n`);
    return EXIT_USAGE;
  }
  if (isHookrelayError(err)) {
    const details = err.invalidParams.map((p) => `${p.name} ${p.reason}`).join('; ');
    const message = err.code === ErrorCode.validation && details !== '' ? details : err.message;
    process.stderr.write(`hookrelay: ${message}\n`);
    return err.code === ErrorCode.config || err.code === ErrorCode.validation ? EXIT_USAGE : EXIT_RUNTIME;
  }
  const e = err as NodeJS.ErrnoException;
  process.stderr.write(`hookrelay: ${e?.message ?? String(err)}${e?.code ? ` (${e.code})` : ''}\n`);
  return EXIT_RUNTIME;
}

try {
  await buildProgram().parseAsync(process.argv);
} catch (err) {
  process.exitCode = fail(err);
}

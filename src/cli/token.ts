import type { Command } from 'commander';
import { parseDuration } from '../domain/duration.ts';
import { loadAuthKeys } from '../services/auth-keys.ts';
import { issueAuditedToken } from '../services/tokens.ts';
import { iso } from '../domain/iso.ts';
import { jsonOption, optionsOf, print, UsageError, withServices, type CommandContext } from './shared.ts';

/** `--ttl`'s value in ms (at least 1 s), or null when not given. */
export function ttlOption(text: string | undefined, examples: string): number | null {
  if (text === undefined) return null;
  const ttl = parseDuration(text);
  if (ttl === null || ttl < 1000) throw new UsageError(`--ttl must be a duration such as ${examples}; got "${text}"`);
  return ttl;
}

/** A token for an existing user, signed with the install's keys (never generating a secret: see loadAuthKeys). */
export function issueUserToken({ config, store, services, log, by }: CommandContext, orgId: string, email: string, ttlMs: number, purpose: 'token' | 'console_link' = 'token') {
  const keys = loadAuthKeys(config, log, { create: false });
  return issueAuditedToken({ keys, auth: config.auth, users: services.users, clock: store.clock, audit: services.audit }, by, { orgId, email, ttlMs, purpose });
}

export function registerTokenCommands(program: Command): void {
  const token = program.command('token').description('access tokens for the admin API');
  jsonOption(token.command('issue').description('print a JWT the daemon accepts'))
    .requiredOption('--org <id>', 'organization id')
    .requiredOption('--email <email>', 'e-mail of an existing user')
    .option('--ttl <duration>', 'lifetime, such as 15m, 1h, 7d (default auth.tokenTtl)')
    .action((_options: unknown, cmd: Command) => {
      const options = optionsOf<{ org: string; email: string; ttl?: string }>(cmd);
      const ttl = ttlOption(options.ttl, '15m, 1h or 7d');
      return withServices(options, async (ctx) => {
        const issued = await issueUserToken(ctx, options.org, options.email, ttl ?? ctx.config.auth.tokenTtl);
        print(options, { token: issued.token, expires_at: iso(issued.expiresAt) }, () => issued.token);
      });
    });
}

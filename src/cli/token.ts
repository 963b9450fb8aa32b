import type { Command } from 'commander';
import { parseDuration } from '../domain/duration.ts';
import { loadAuthKeys } from '../services/auth-keys.ts';
import { issueToken } from '../services/tokens.ts';
import { iso, jsonOption, optionsOf, print, UsageError, withServices } from './shared.ts';

export function registerTokenCommands(program: Command): void {
  const token = program.command('token').description('access tokens for the admin API');
  jsonOption(token.command('issue').description('print a JWT the daemon accepts'))
    .requiredOption('--org <id>', 'organization id')
    .requiredOption('--email <email>', 'e-mail of an existing user')
    .option('--ttl <duration>', 'lifetime, such as 15m, 1h, 7d (default auth.tokenTtl)')
    .action((_options: unknown, cmd: Command) => {
      const options = optionsOf<{ org: string; email: string; ttl?: string }>(cmd);
      const ttl = options.ttl === undefined ? null : parseDuration(options.ttl);
      if (options.ttl !== undefined && (ttl === null || ttl < 1000)) throw new UsageError(`--ttl must be a duration such as 15m, 1h or 7d; got "${options.ttl}"`);
      return withServices(options, async ({ config, store, services, log }) => {
        const ttlMs = ttl ?? config.auth.tokenTtl;
        const keys = loadAuthKeys(config, log, { create: false });
        const issued = await issueToken({ keys, auth: config.auth, users: services.users, clock: store.clock }, { orgId: options.org, email: options.email, ttlMs });
        print(options, { token: issued.token, expires_at: iso(issued.expiresAt) }, () => issued.token);
      });
    });
}

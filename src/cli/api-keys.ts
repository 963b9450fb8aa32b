import type { Command } from 'commander';
import { parseDuration } from '../domain/duration.ts';
import { iso } from '../domain/iso.ts';
import { apiKeyView } from '../services/views.ts';
import { terminalSafe } from '../domain/terminal-text.ts';
import { jsonOption, optionsOf, print, say, table, UsageError, withServices } from './shared.ts';

/** `--expires`' value in ms, or null when not given (the bounds are the service's). */
function expiresOption(text: string | undefined): number | null {
  if (text === undefined) return null;
  const ms = parseDuration(text);
  if (ms === null || !/[smhd]\s*$/.test(text)) throw new UsageError(`--expires must be a duration such as 30d, 12h or 90m; got "${text}"`);
  return ms;
}

function registerCreate(keys: Command): void {
  jsonOption(keys.command('create').description('create an API key for a machine; the key is printed once'))
    .requiredOption('--org <id>', 'organization id')
    .requiredOption('--name <name>', 'key name, unique among the organization\'s keys not revoked')
    .requiredOption('--role <role>', 'role name, see: hookrelay roles list')
    .option('--expires <duration>', 'lifetime, such as 30d or 12h, at most 365d (default: until revoked)')
    .action((_options: unknown, cmd: Command) => {
      const options = optionsOf<{ org: string; name: string; role: string; expires?: string }>(cmd);
      const expiresInMs = expiresOption(options.expires);
      return withServices(options, async ({ services, by }) => {
        // The operator at the server may give any role, as `users add` does.
        const created = await services.apiKeys.create(by, { orgId: options.org, name: options.name, roleName: options.role, expiresInMs, creatorPermissions: null });
        print(options, { key: created.key, ...apiKeyView(created.apiKey) }, () =>
          [
            created.key,
            `API key ${terminalSafe(created.apiKey.name)} (${created.apiKey.prefix}) of ${terminalSafe(created.apiKey.orgId)}, role ${created.apiKey.roleName}, ${created.apiKey.expiresAt === null ? 'no expiry' : `expires ${iso(created.apiKey.expiresAt)}`}.`,
            'Store the key now: it is not shown again. Send it as: Authorization: Bearer <key>',
          ].join('\n'),
        );
      });
    });
}

export function registerApiKeyCommands(program: Command): void {
  const keys = program.command('api-key').description("manage an organization's API keys");
  registerCreate(keys);
  jsonOption(keys.command('list').description("list an organization's API keys (never the keys themselves)"))
    .requiredOption('--org <id>', 'organization id')
    .action((_options: unknown, cmd: Command) => {
      const options = optionsOf<{ org: string }>(cmd);
      return withServices(options, async ({ services }) => {
        const list = await services.apiKeys.list(options.org);
        const when = (ms: number | null, none: string) => (ms === null ? none : iso(ms));
        print(options, list.map(apiKeyView), () =>
          list.length === 0
            ? `no API keys in ${terminalSafe(options.org)}`
            : table([['NAME', 'PREFIX', 'ROLE', 'EXPIRES', 'LAST USED'], ...list.map((k) => [k.name, k.prefix, k.roleName, when(k.expiresAt, 'never'), when(k.lastUsedAt, 'never')])]),
        );
      });
    });
  keys
    .command('revoke')
    .description('revoke an API key: the next request with it is refused')
    .requiredOption('--org <id>', 'organization id')
    .argument('<name>', 'key name')
    .action((name: string, _options: unknown, cmd: Command) => {
      const options = optionsOf<{ org: string }>(cmd);
      return withServices(options, async ({ services, by }) => {
        const key = await services.apiKeys.revoke(by, options.org, name);
        say(`revoked API key ${terminalSafe(key.name)} (${key.prefix}) of ${terminalSafe(key.orgId)}`);
      });
    });
}

import type { Command } from 'commander';
import { terminalSafe } from '../domain/terminal-text.ts';
import { jsonOption, optionsOf, print, say, table, withServices } from './shared.ts';

export function registerRolesCommands(program: Command): void {
  const roles = program.command('roles').description('manage roles');
  jsonOption(roles.command('list').description('list roles and their permissions')).action((_options: unknown, cmd: Command) => {
    const options = optionsOf(cmd);
    return withServices(options, async ({ services }) => {
      const list = await services.roles.list();
      print(options, list.map((r) => ({ name: r.name, description: r.description, permissions: r.permissions, builtin: r.builtin })), () =>
        table([['NAME', 'PERMISSIONS', 'DESCRIPTION'], ...list.map((r) => [r.name, r.permissions.join(','), r.description])]),
      );
    });
  });
  roles
    .command('add')
    .description('add a role')
    .argument('<name>', 'role name (lower-case letters, digits, _)')
    .requiredOption('--description <text>', 'what the role is for')
    .option('--permissions <list>', 'comma-separated: roles:read, users:manage, webhook:read, webhook:manage', '')
    .action((name: string, _options: unknown, cmd: Command) => {
      const options = optionsOf<{ description: string; permissions: string }>(cmd);
      return withServices(options, async ({ services, by }) => {
        const permissions = options.permissions.split(',').map((p) => p.trim()).filter((p) => p !== '');
        const role = await services.roles.add(by, { name, description: options.description, permissions });
        say(`added role ${role.name} (${terminalSafe(role.permissions.join(', ')) || 'no permissions'})`);
      });
    });
}

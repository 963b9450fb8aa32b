import type { Command } from 'commander';
import { iso } from '../domain/iso.ts';
import { terminalSafe } from '../domain/terminal-text.ts';
import { jsonOption, optionsOf, print, say, table, withServices } from './shared.ts';

export function registerUsersCommands(program: Command): void {
  const users = program.command('users').description('manage users');
  users
    .command('add')
    .description('add a user to an organization')
    .requiredOption('--org <id>', 'organization id')
    .requiredOption('--email <email>', 'e-mail (unique per organization, case-insensitive)')
    .requiredOption('--role <role>', 'role name, see: hookrelay roles list')
    .action((_options: unknown, cmd: Command) => {
      const options = optionsOf<{ org: string; email: string; role: string }>(cmd);
      return withServices(options, async ({ services, by }) => {
        const user = await services.users.add(by, { orgId: options.org, email: options.email, roleName: options.role });
        say(`added ${terminalSafe(user.email)} to ${user.orgId} as ${user.roleName}`);
      });
    });
  jsonOption(users.command('list').description("list an organization's users"))
    .requiredOption('--org <id>', 'organization id')
    .action((_options: unknown, cmd: Command) => {
      const options = optionsOf<{ org: string }>(cmd);
      return withServices(options, async ({ services }) => {
        const list = await services.users.list(options.org);
        print(options, list.map((u) => ({ email: u.email, role_name: u.roleName, created_at: iso(u.createdAt), updated_at: iso(u.updatedAt) })), () =>
          list.length === 0 ? `no users in ${terminalSafe(options.org)}` : table([['EMAIL', 'ROLE', 'UPDATED'], ...list.map((u) => [u.email, u.roleName, iso(u.updatedAt)])]),
        );
      });
    });
  users
    .command('set-role')
    .description("change a user's role")
    .requiredOption('--org <id>', 'organization id')
    .requiredOption('--email <email>', 'e-mail of the user')
    .requiredOption('--role <role>', 'new role name')
    .action((_options: unknown, cmd: Command) => {
      const options = optionsOf<{ org: string; email: string; role: string }>(cmd);
      return withServices(options, async ({ services, by }) => {
        const change = await services.users.setRole(by, options.org, { email: options.email, role_name: options.role });
        const email = terminalSafe(change.user.email);
        say(change.changed ? `${email}: ${change.previousRoleName} -> ${change.user.roleName}` : `${email} already has the role ${change.user.roleName}`);
      });
    });
  users
    .command('remove')
    .description('remove a user')
    .requiredOption('--org <id>', 'organization id')
    .requiredOption('--email <email>', 'e-mail of the user')
    .option('--force', 'remove even the last user who can manage users')
    .action((_options: unknown, cmd: Command) => {
      const options = optionsOf<{ org: string; email: string; force?: boolean }>(cmd);
      return withServices(options, async ({ services, by }) => {
        const user = await services.users.remove(by, options.org, options.email, { force: options.force === true });
        say(`removed ${terminalSafe(user.email)} from ${user.orgId}`);
      });
    });
}

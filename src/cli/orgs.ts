import type { Command } from 'commander';
import { iso } from '../domain/iso.ts';
import { terminalSafe } from '../domain/terminal-text.ts';
import { jsonOption, optionsOf, print, say, table, withServices } from './shared.ts';

export function registerOrgsCommands(program: Command): void {
  const orgs = program.command('orgs').description('manage organizations');
  orgs
    .command('add')
    .description('add an organization')
    .argument('<id>', 'organization id (the "org" claim of tokens)')
    .option('--name <name>', 'display name')
    .action((id: string, _options: unknown, cmd: Command) => {
      const options = optionsOf<{ name?: string }>(cmd);
      return withServices(options, async ({ services, by }) => {
        const org = await services.orgs.add(by, { id, name: options.name });
        say(`added organization ${org.id} (${terminalSafe(org.name)})`);
      });
    });
  jsonOption(orgs.command('list').description('list organizations')).action((_options: unknown, cmd: Command) => {
    const options = optionsOf(cmd);
    return withServices(options, async ({ services }) => {
      const list = await services.orgs.list();
      print(options, list.map((o) => ({ id: o.id, name: o.name, created_at: iso(o.createdAt) })), () =>
        list.length === 0 ? 'no organizations; add one with: hookrelay orgs add ID' : table([['ID', 'NAME', 'CREATED'], ...list.map((o) => [o.id, o.name, iso(o.createdAt)])]),
      );
    });
  });
}

import type { Command } from 'commander';
import { isWildcardHost, localBaseUrl, parseListen } from '../domain/listen.ts';
import { iso } from '../domain/iso.ts';
import { jsonOption, optionsOf, print, sayError, UsageError, withServices } from './shared.ts';
import { issueUserToken, ttlOption } from './token.ts';

/** Lifetime of a console link unless --ttl: long enough for a debugging session, short enough to leak little. */
export const CONSOLE_LINK_TTL_MS = 60 * 60 * 1000;

/**
 * The console's sign-in link for a token: the token rides in the fragment, which the browser
 * never sends to a server (so no access log or proxy sees it); the page moves it into its
 * session storage and removes it from the address bar.
 */
export function consoleLink(base: string, token: string): string {
  return `${base.replace(/\/+$/, '')}/console/#token=${token}`;
}

/** `hookrelay console link`: a URL that signs a user into the browser console. */
export function registerConsoleCommands(program: Command): void {
  const group = program.command('console').description('the delivery console in the browser (docs/console.md)');
  jsonOption(group.command('link').description('print a link that signs this user into the console (a token in the fragment)'))
    .requiredOption('--org <id>', 'organization id')
    .requiredOption('--email <email>', 'e-mail of an existing user of the organization')
    .option('--ttl <duration>', 'lifetime of the link, such as 15m, 1h, 8h (default 1h, at most auth.maxTokenLifetime)')
    .option('--listen <host:port>', "the daemon's admin API address (default api.listen; console.publicUrl wins when set)")
    .action((_options: unknown, cmd: Command) => {
      const options = optionsOf<{ org: string; email: string; ttl?: string }>(cmd);
      const ttl = ttlOption(options.ttl, '15m, 1h or 8h') ?? CONSOLE_LINK_TTL_MS;
      return withServices(options, async (ctx) => {
        const { config } = ctx;
        let base = config.console.publicUrl;
        if (base === null) {
          base = localBaseUrl(config.api.listen);
          if (base === null) throw new UsageError(`api.listen is ${config.api.listen}: with port 0 the daemon picks its port at start; pass --listen HOST:PORT, or set console.publicUrl`);
          if (isWildcardHost(parseListen(config.api.listen).host)) {
            sayError(`the daemon listens on every address (${config.api.listen}); this link works on this machine: elsewhere, put this machine's name in it, or set console.publicUrl`);
          }
        }
        const issued = await issueUserToken(ctx, options.org, options.email, ttl, 'console_link');
        const url = consoleLink(base, issued.token);
        print(options, { url, expires_at: iso(issued.expiresAt) }, () => url);
      });
    });
}

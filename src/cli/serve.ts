import type { Command } from 'commander';
import { databaseName } from '../store/open.ts';
import { createLogger, logFatalErrors, syslogPrefixWanted } from '../log.ts';
import { createRelay } from '../relay.ts';
import { VERSION } from '../version.ts';
import { ensureGeneratedSecret } from '../services/auth-keys.ts';
import { ensureCredentialKey } from '../services/credential-key.ts';
import { configFrom, EXIT_RUNTIME, logLevelOption, optionsOf, say, withCreatedServices } from './shared.ts';

/** `serve` (the daemon) and `migrate` (its database schema). */
export function registerServeCommands(program: Command): void {
  program
    .command('serve')
    .description('run the daemon: admin API, feed reader')
    .option('--listen <host:port>', 'admin API address (default 127.0.0.1:8080)')
    .option('--feed <path>', 'JSONL feed file to tail, or - for standard input (default <state-dir>/feed.jsonl)')
    .addOption(logLevelOption())
    .action(async (_options: unknown, cmd: Command) => {
      const config = configFrom(optionsOf(cmd));
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
      for (const notice of config.notices) log.warn(notice);
      await relay.start();
    });

  program
    .command('migrate')
    .description('create the install if there is none (state directory, database, JWT secret, credential key), apply pending database migrations, and exit')
    .action((_options: unknown, cmd: Command) => {
      return withCreatedServices(optionsOf(cmd), ({ store, config, log }) => {
        // What the daemon's first start would create, so that `token issue` works before it.
        ensureGeneratedSecret(config, log);
        ensureCredentialKey(config, log);
        // Opening the store applies pending migrations; report what it did.
        // A pre-upgrade copy, if one was taken, was reported on stderr when the store was opened.
        const { from, to } = store.migrated;
        const name = databaseName(config);
        say(from === to ? `database ${name} is at schema version ${to}` : `migrated ${name} from ${from} to ${to}`);
      });
    });
}

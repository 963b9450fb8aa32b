#!/usr/bin/env node
/**
 * The one process entry: builds the commander program from the command groups in src/cli/
 * (see src/cli/shared.ts for how to add one) and maps any error to one line and an exit code.
 */
import { Command } from 'commander';
import { registerApiKeyCommands } from './cli/api-keys.ts';
import { registerAuditCommands } from './cli/audit.ts';
import { registerConsoleCommands } from './cli/console.ts';
import { registerDbCommands } from './cli/db.ts';
import { registerDeliveriesCommands } from './cli/deliveries.ts';
import { registerFeedCommands } from './cli/feed.ts';
import { registerOrgsCommands } from './cli/orgs.ts';
import { registerRolesCommands } from './cli/roles.ts';
import { registerServeCommands } from './cli/serve.ts';
import { registerListenCommand } from './cli/listen.ts';
import { registerStatusCommands } from './cli/status.ts';
import { addGlobalOptions, fail, oneLineErrors } from './cli/shared.ts';
import { registerTokenCommands } from './cli/token.ts';
import { registerUsersCommands } from './cli/users.ts';
import { registerWebhookCommands } from './cli/webhook.ts';
import { VERSION } from './version.ts';
import { SCHEMA_VERSIONS } from './store/open.ts';

/** `hookrelay --version`: the version, the Node.js it runs on (the packages bring their own) and the schemas it writes. */
export const VERSION_LINE = `hookrelay ${VERSION} (Node.js ${process.version} ${process.arch}, SQLite schema ${SCHEMA_VERSIONS.sqlite}, PostgreSQL schema ${SCHEMA_VERSIONS.postgres})`;

export function buildProgram(): Command {
  const program = new Command('hookrelay')
    .description('Self-hosted webhook relay: admin API, feed ingestion and signed delivery')
    .version(VERSION_LINE)
    .configureHelp({ showGlobalOptions: true })
    .exitOverride();
  addGlobalOptions(program);

  registerServeCommands(program);
  registerFeedCommands(program);
  registerOrgsCommands(program);
  registerUsersCommands(program);
  registerRolesCommands(program);
  registerTokenCommands(program);
  registerWebhookCommands(program);
  registerDeliveriesCommands(program);
  registerDbCommands(program);
  registerStatusCommands(program);
  registerListenCommand(program);
  registerConsoleCommands(program);
  registerAuditCommands(program);
  registerApiKeyCommands(program);

  oneLineErrors(program);
  return program;
}

// A reader that goes away early (`hookrelay deliveries list | head -1`) ends the output, not the
// command with an unhandled EPIPE and a stack trace: what was done is done, the rest unread.
process.stdout.on('error', (err: NodeJS.ErrnoException) => {
  if (err.code !== 'EPIPE') throw err;
  process.exit(process.exitCode ?? 0);
});

try {
  await buildProgram().parseAsync(process.argv);
} catch (err) {
  process.exitCode = fail(err);
}

/**
 * What every command group of the CLI shares: the global options, the configuration, opening the
 * store, printing (human text or `--json`), and turning any error into one line on stderr and an
 * exit code.
 *
 * To add a command group (the way commander's own examples split a CLI):
 *   1. Create src/cli/<group>.ts exporting `register<Group>Commands(program: Command): void`,
 *      which adds its commands with `program.command('<group>')`.
 *   2. In an action, read the options with `optionsOf<...>(cmd)` (the command's own options plus
 *      the global ones, `--config` and `--state-dir`, given before or after the command), open the
 *      database with `withServices` (or `withStore`), print with `print` (add `--json` with
 *      `jsonOption`) and `table`, or `say` for a line of text: never `process.stdout.write`
 *      (test/cli/terminal-text.test.ts checks). Show progress of long work with `startProgress`
 *      (./progress.ts). A value from outside (an id, a name, a URL, an error from a receiver: text
 *      hookrelay did not write) goes into a line through `terminalSafe`; tables and `--json` do it
 *      themselves, and `print` and `say` escape whatever control a command still lets through.
 *   3. Throw `UsageError` for a bad argument (exit 2) and let `HookrelayError`s through: `fail`
 *      maps them to one line and an exit code. Never print a stack trace.
 *   4. Add one `register<Group>Commands(program)` line to buildProgram in src/cli.ts, and document
 *      the commands in the README's CLI section.
 */
import { statSync } from 'node:fs';
import { resolve } from 'node:path';
import { type Command, CommanderError, Option } from 'commander';
import { loadConfig, type Config } from '../config/load.ts';
import { systemClock } from '../domain/clock.ts';
import { ErrorCode, excerpt, HookrelayError, isHookrelayError } from '../domain/errors.ts';
import { RFC3339_EXPECTED, rfc3339Ms } from '../domain/rfc3339.ts';
import { escapeTerminalControls, terminalSafe, terminalSafeJson } from '../domain/terminal-text.ts';
import { createLogger, type Logger } from '../log.ts';
import { createServices, type Services } from '../services/services.ts';
import { cliAuditContext } from '../services/audit.ts';
import type { AuditContext } from '../domain/audit.ts';
import { StorageFault, storageFaultOf } from '../store/storage-faults.ts';
import { databaseFile, openStoreFor } from '../store/open.ts';
import type { Store, WorkSharing } from '../store/repos.ts';
import { createWorkSignal } from '../services/work-signal.ts';

/** Exit codes (docs/operations.md): 0 success, 1 runtime error, 2 usage or configuration error, 65 damaged database. */
export const EXIT_OK = 0;
export const EXIT_RUNTIME = 1;
export const EXIT_USAGE = 2;
/**
 * The database is damaged (`db check`, or any command, the daemon included, that cannot open it):
 * sysexits' EX_DATAERR. The systemd unit does not restart after it (RestartPreventExitStatus=65):
 * a restart cannot repair the file.
 */
export const EXIT_DATABASE_DAMAGED = 65;

/** A mistake in the command line that hookrelay itself detects: one line, exit 2. */
export class UsageError extends Error {}

/** The options every command accepts, before or after its name (defined on the program). */
export interface GlobalOptions {
  config?: string;
  stateDir?: string;
}

/** Options a command may add and that feed the configuration. */
export interface CommonOptions extends GlobalOptions {
  listen?: string;
  feed?: string;
  logLevel?: string;
  json?: boolean;
}

/** Adds the global options to the program; subcommands read them through `optionsOf`. */
export function addGlobalOptions(program: Command): Command {
  return program
    .option('--config <file>', 'JSON config file (also HOOKRELAY_CONFIG)')
    .option('--state-dir <dir>', 'state directory (default ./var)');
}

/** The command's own options merged with the global ones. */
export function optionsOf<T extends object = object>(cmd: Command): T & CommonOptions {
  return cmd.optsWithGlobals<T & CommonOptions>();
}

export function jsonOption(cmd: Command): Command {
  return cmd.option('--json', 'print JSON');
}

export function logLevelOption(): Option {
  return new Option('--log-level <level>', 'log level').choices(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']);
}

export function configFrom(options: CommonOptions): Config {
  return loadConfig({
    configFile: options.config,
    overrides: { stateDir: options.stateDir, 'api.listen': options.listen, 'log.level': options.logLevel, 'feed.path': options.feed },
  });
}

/** Logger for one-shot commands: stderr, so stdout carries only the command's output. */
export function cliLogger(config: Config): Logger {
  return createLogger(config.log.level === 'info' ? 'warn' : config.log.level, process.stderr);
}

function isMissing(path: string): boolean {
  try {
    statSync(path);
    return false;
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    return code === 'ENOENT' || code === 'ENOTDIR';
  }
}

/**
 * Refuses to work on an install that does not exist: only `serve` and `migrate` create one. A
 * command run from the wrong directory would otherwise make a second install there (a database,
 * a JWT secret) and answer from it ("No organizations") while the daemon works elsewhere. On
 * PostgreSQL the database is the server's; nothing is created by accident.
 */
export function requireInstall(config: Config): void {
  const file = databaseFile(config);
  if (file === null) return;
  const database = resolve(file);
  // Only a path that is not there: one that cannot be read (a state directory of mode 0700 and
  // another user) is left to opening, whose error names the permission missing.
  if (!isMissing(database)) return;
  const stateDir = resolve(config.stateDir);
  const where = isMissing(stateDir) ? `the state directory ${stateDir} does not exist` : `the database ${database} does not exist`;
  throw new HookrelayError(
    ErrorCode.config,
    `no hookrelay install here: ${where}. Run the command from the daemon's working directory, or point at its state with --state-dir DIR or --config FILE (HOOKRELAY_STATE_DIR, HOOKRELAY_CONFIG); \`hookrelay serve\` or \`hookrelay migrate\` creates a new install`,
  );
}

/** Opens the configured store for a one-shot command; the install must exist (requireInstall). */
export function openConfiguredStore(config: Config): Promise<Store> {
  requireInstall(config);
  return openCreatingStore(config);
}

/** Opens the configured store, creating the install when there is none: `migrate` only. */
async function openCreatingStore(config: Config): Promise<Store> {
  const store = await openStoreFor(config, systemClock, { log: cliLogger(config) });
  // The first command after an upgrade may be a CLI command rather than the daemon: it says where it copied the database.
  const { backup } = store.migrated;
  if (backup) process.stderr.write(`hookrelay: upgrade: copied the database to ${backup} before opening it with this version (restore it to go back: docs/operations.md, "Roll back")\n`);
  return store;
}

export interface CommandContext {
  readonly config: Config;
  readonly store: Store;
  readonly services: Services;
  readonly log: Logger;
  /** Who acts, for the audit trail: the Unix user running the command (every write method of the services takes it first). */
  readonly by: AuditContext;
}

/**
 * Opens the store for a one-shot command, runs `fn`, and closes it afterwards, whatever
 * happens. Work the command queues or webhooks it changes are announced to the daemons sharing
 * the database (Store.shareWork: PostgreSQL), which then act at once; a daemon on SQLite finds
 * them at its next poll.
 */
async function withOpened<T>(options: CommonOptions, quiet: boolean, fn: (ctx: CommandContext) => T | Promise<T>, create = false): Promise<T> {
  const config = configFrom(options);
  const store = await (create ? openCreatingStore(config) : openConfiguredStore(config));
  const log = cliLogger(config);
  const work = createWorkSignal();
  let sharing: WorkSharing | null = null;
  try {
    sharing = await store.shareWork(work, { log });
    return await fn({ config, store, services: createServices(store, config, quiet ? undefined : log, work), log, by: cliAuditContext() });
  } finally {
    await sharing?.close();
    await store.close();
  }
}

/** Opens the store for a one-shot command and closes it afterwards, whatever happens. */
export function withStore<T>(options: CommonOptions, fn: (ctx: CommandContext) => T | Promise<T>): Promise<T> {
  return withOpened(options, false, fn);
}

/** `withStore` whose services log nothing of their own (the command prints what it did). */
export function withServices<T>(options: CommonOptions, fn: (ctx: CommandContext) => T | Promise<T>): Promise<T> {
  return withOpened(options, true, fn);
}

/** `withServices` that creates the install when there is none (`migrate`). */
export function withCreatedServices<T>(options: CommonOptions, fn: (ctx: CommandContext) => T | Promise<T>): Promise<T> {
  return withOpened(options, true, fn, true);
}

/**
 * Writes text to stdout, the CLI's one way there: `text` is what the command composed, around
 * values it showed with terminalSafe; a control character or an invisible one that still
 * reached it (a value a command forgot to escape) is escaped here, line feeds kept, so that
 * nothing the terminal would act on (ESC, CSI, a carriage return, a bidirectional control)
 * reaches it raw.
 */
export function say(text: string): void {
  process.stdout.write(escapeTerminalControls(text, true) + '\n');
}

/** Writes "hookrelay: MESSAGE" on stderr, as one line: whatever a message quotes is escaped (see `say`), a line feed too. */
export function sayError(message: string): void {
  process.stderr.write(`hookrelay: ${escapeTerminalControls(message)}\n`);
}

/**
 * Prints `json` with `--json`, otherwise the human text (through `say`). The JSON is
 * JSON.stringify's, its DEL, C1, bidirectional and invisible characters written as `\uNNNN`
 * escapes (terminalSafeJson): the same JSON values, and nothing raw that a terminal acts on.
 */
export function print(options: CommonOptions, json: unknown, human: () => string): void {
  if (options.json) process.stdout.write(terminalSafeJson(JSON.stringify(json, null, 2)) + '\n');
  else say(human());
}

/**
 * Rows as aligned columns, the first one the header. Each cell is shown with terminalSafe: a
 * value from outside can neither act on the terminal nor break its row or column.
 */
export function table(rows: readonly (readonly string[])[]): string {
  const cells = rows.map((r) => r.map(terminalSafe));
  const widths = cells[0]!.map((_, i) => Math.max(...cells.map((r) => r[i]!.length)));
  return cells.map((r) => r.map((cell, i) => cell.padEnd(widths[i]!)).join('  ').trimEnd()).join('\n');
}

/** A `--limit` value: an integer from 1 to 10000. */
export function limitOption(text: string): number {
  const limit = Number(text);
  if (!Number.isInteger(limit) || limit < 1 || limit > 10_000) throw new UsageError(`--limit must be an integer from 1 to 10000; got "${text}"`);
  return limit;
}

export function cliId(text: string): number {
  if (!/^\d{1,15}$/.test(text)) throw new UsageError(`the delivery id must be a positive integer; got "${text}"`);
  return Number(text);
}

export function cliTime(flag: string, text: string): number {
  // Strict, as the API reads its time filters: an impossible date (2026-02-30) is refused, not rolled over.
  const ms = rfc3339Ms(text);
  if (Number.isNaN(ms)) throw new UsageError(`${flag} must be ${RFC3339_EXPECTED}; got ${excerpt(text)}`);
  return ms;
}

/** "hookrelay orgs list" for the command `orgs list`. */
function commandPath(cmd: Command): string {
  const names: string[] = [];
  for (let c: Command | null = cmd; c !== null; c = c.parent) names.unshift(c.name());
  return names.join(' ');
}

/**
 * Makes commander's own errors (unknown option or command, missing argument, invalid choice)
 * one line like hookrelay's: "hookrelay: unknown option '--jsn' (did you mean --json?); see:
 * hookrelay orgs list --help". Call once every command is registered.
 */
export function oneLineErrors(program: Command): void {
  const visit = (cmd: Command) => {
    cmd.showHelpAfterError(false);
    cmd.configureOutput({
      writeErr: (text) => process.stderr.write(text),
      outputError: (text, write) => {
        const message = text
          .trim()
          .replace(/^error: /, '')
          .split('\n')
          .map((line) => line.trim().replace(/^\(Did you mean/, '(did you mean'))
          .filter((line) => line !== '')
          .join(' ')
          .replace(/\.$/, '');
        write(`hookrelay: ${escapeTerminalControls(message)}; see: ${commandPath(cmd)} --help\n`);
      },
    });
    for (const sub of cmd.commands) visit(sub);
  };
  visit(program);
}

/** Describes an error nobody anticipated, in one line: message and errno code, never a stack. */
function oneLine(err: unknown): string {
  const e = err as NodeJS.ErrnoException | null | undefined;
  const message = (e && typeof e === 'object' && typeof e.message === 'string' ? e.message : String(err)).split('\n')[0]!;
  return e && typeof e === 'object' && typeof e.code === 'string' && !message.includes(e.code) ? `${message} (${e.code})` : message;
}

/** Maps an error to one line on stderr and an exit code. */
export function fail(err: unknown): number {
  if (err instanceof CommanderError) {
    // commander already printed its message (one line, see oneLineErrors), or the help / version text.
    return err.exitCode === 0 ? EXIT_OK : EXIT_USAGE;
  }
  if (err instanceof UsageError) {
    sayError(err.message);
    return EXIT_USAGE;
  }
  if (isHookrelayError(err)) {
    // A validation error's message says it best when it is about one thing ("delivery 7's event
    // is already queued; ..."); a generic one ("the request body is invalid") is replaced by what
    // was wrong with each part.
    const details = err.invalidParams.map((p) => `${p.name} ${p.reason}`).join('; ');
    const generic = /\bis invalid$/.test(err.message);
    const message = err.code === ErrorCode.validation && details !== '' && generic ? details : err.message;
    sayError(message);
    if (err.code === ErrorCode.databaseDamaged) return EXIT_DATABASE_DAMAGED;
    // A database a newer hookrelay wrote is not mended by restarting either: exit 2, which the unit does not restart.
    return err.code === ErrorCode.config || err.code === ErrorCode.validation || err.code === ErrorCode.databaseTooNew ? EXIT_USAGE : EXIT_RUNTIME;
  }
  if (storageFaultOf(err) === StorageFault.damaged) {
    // A damaged page met in the middle of a command (one found when opening is a HookrelayError, above).
    sayError(`the database is damaged (${oneLine(err)}); check it with \`hookrelay db check\` and restore the last good backup (docs/operations.md)`);
    return EXIT_DATABASE_DAMAGED;
  }
  sayError(oneLine(err));
  return EXIT_RUNTIME;
}

import type { Command } from 'commander';
import type { Config } from '../config/load.ts';
import { systemClock } from '../domain/clock.ts';
import { parseDuration } from '../domain/duration.ts';
import { createRetentionService, type PrunedRows } from '../services/retention.ts';
import { backupDatabase, checkDatabase, type CheckReport } from '../store/maintenance.ts';
import { openStore } from '../store/store.ts';

/**
 * Exit code of a command that found the database damaged (`db check`, or any command, the
 * daemon included, that cannot open it): sysexits' EX_DATAERR. The systemd unit does not
 * restart the daemon after it (RestartPreventExitStatus=65): a restart cannot repair the file.
 */
export const EXIT_DATABASE_DAMAGED = 65;

interface DbOptions {
  config?: string;
  stateDir?: string;
  json?: boolean;
}

/** What the db commands need from the CLI around them. */
export interface DbCommandDeps {
  /** Adds --config and --state-dir (and --json with `json`) to a command. */
  readonly common: (cmd: Command, extra?: { json?: boolean }) => Command;
  readonly configFrom: (options: DbOptions) => Config;
  /** An error that the CLI prints as one line and exits 2 with. */
  readonly usageError: (message: string) => Error;
}

/** One line on standard error, rewritten in place, only when it is a terminal. */
function progressLine(): { update(text: string): void; done(): void } {
  const tty = process.stderr.isTTY === true;
  let shown = false;
  return {
    update(text) {
      if (!tty) return;
      process.stderr.write(`\r\x1b[2K${text}`);
      shown = true;
    },
    done() {
      if (shown) process.stderr.write('\r\x1b[2K');
      shown = false;
    },
  };
}

const mib = (bytes: number) => `${(bytes / 1048576).toFixed(1)} MiB`;

function rowsText(r: PrunedRows): string {
  return `${r.events} event(s), ${r.deliveries} delivery(ies), ${r.attempts} attempt(s), ${r.quarantinedLines} quarantined line(s)`;
}

function checkText(r: CheckReport): string {
  const lines = [`${r.path}: ${r.ok ? 'ok' : 'DAMAGED'}`];
  if (r.error !== null && r.integrity.length === 0) lines.push(`  cannot be read as a database: ${r.error}`);
  if (r.integrity.length > 0 && !(r.integrity.length === 1 && r.integrity[0] === 'ok')) {
    lines.push(`  integrity_check found ${r.integrity.length}${r.integrity.length >= 100 ? '+' : ''} problem(s):`, ...r.integrity.slice(0, 20).map((m) => `    ${m}`));
    if (r.integrity.length > 20) lines.push(`    ... (--json lists them all)`);
  }
  if (r.error !== null && r.integrity.length > 0) lines.push(`  the check stopped there: ${r.error}`);
  if (r.foreignKeys.length > 0) lines.push(`  foreign_key_check: ${r.foreignKeys.length} row(s) without their parent:`, ...r.foreignKeys.slice(0, 20).map((f) => `    ${f.table} rowid ${f.rowid ?? '-'} -> ${f.parent}`));
  if (r.schemaVersion !== null) lines.push(`  schema version ${r.schemaVersion} (this hookrelay: ${r.codeSchemaVersion})`);
  if (r.disk !== null) {
    const d = r.disk;
    lines.push(`  file ${mib(d.fileBytes)}, WAL ${mib(d.walBytes)}; ${d.pages} pages of ${d.pageSize} bytes, ${d.freePages} free (${mib(d.freePages * d.pageSize)} reused before the file grows)`);
  }
  if (!r.ok) lines.push('  restore the last good backup: docs/operations.md, "Backup and restore"');
  return lines.join('\n');
}

/** `hookrelay db prune | backup | check`: the database's care. */
export function registerDbCommands(program: Command, deps: DbCommandDeps): void {
  const { common, configFrom, usageError } = deps;
  const db = program.command('db').description('the database: retention, backups, integrity');
  const print = (options: DbOptions, json: unknown, human: string) => process.stdout.write(options.json ? JSON.stringify(json, null, 2) + '\n' : human + '\n');

  common(db.command('prune').description('remove what retention removes (delivered events, their attempts, old quarantined lines), now'), { json: true })
    .option('--dry-run', 'count what would be removed; remove nothing')
    .option('--delivered-older-than <duration>', 'instead of retention.deliveredEvents, such as 7d')
    .option('--quarantined-older-than <duration>', 'instead of retention.quarantinedLines, such as 7d')
    .action(async (options: DbOptions & { dryRun?: boolean; deliveredOlderThan?: string; quarantinedOlderThan?: string }) => {
      const age = (flag: string, text: string | undefined, fallback: number) => {
        if (text === undefined) return fallback;
        const ms = parseDuration(text);
        if (ms === null || ms < 1000) throw usageError(`${flag} must be a duration of at least 1s, such as 12h or 7d; got "${text}"`);
        return ms;
      };
      const config = configFrom(options);
      const policy = {
        deliveredEventsMs: age('--delivered-older-than', options.deliveredOlderThan, config.retention.deliveredEvents),
        quarantinedLinesMs: age('--quarantined-older-than', options.quarantinedOlderThan, config.retention.quarantinedLines),
        batchSize: config.retention.batchSize,
      };
      const store = openStore(config.database.path, systemClock, { busyTimeoutMs: config.database.busyTimeoutMs });
      const progress = progressLine();
      try {
        const dryRun = options.dryRun === true;
        // Between batches the daemon's writes get the lock (a running daemon waits for each batch).
        const result = await createRetentionService(store, policy).prune({
          dryRun,
          pauseMs: dryRun ? 0 : 50,
          onProgress: ({ removed, done }) => progress.update(`${dryRun ? 'counting' : 'pruning'}: ${Math.floor(done * 100)} %, ${removed.events} event(s)`),
        });
        progress.done();
        const view = {
          dry_run: dryRun,
          delivered_before: new Date(result.deliveredBefore).toISOString(),
          quarantined_before: new Date(result.quarantinedBefore).toISOString(),
          events: result.removed.events,
          deliveries: result.removed.deliveries,
          attempts: result.removed.attempts,
          quarantined_lines: result.removed.quarantinedLines,
          batches: result.batches,
          longest_batch_ms: Math.round(result.longestBatchMs * 10) / 10,
          seconds: Math.round(result.elapsedMs) / 1000,
        };
        print(
          options,
          view,
          `${dryRun ? 'would remove' : 'removed'} ${rowsText(result.removed)}: events delivered before ${view.delivered_before}, lines quarantined before ${view.quarantined_before} (${view.seconds} s)` +
            (dryRun || result.removed.events === 0 ? '' : '\nthe file keeps its size: new rows reuse the space (docs/operations.md, "Disk use")'),
        );
      } finally {
        progress.done();
        store.close();
      }
    });

  common(db.command('backup').description('write a consistent copy of the database to FILE, also while the daemon runs').argument('<file>', 'the backup file to write'), { json: true })
    .option('--force', 'replace FILE if it exists')
    .action(async (file: string, options: DbOptions & { force?: boolean }) => {
      const config = configFrom(options);
      const progress = progressLine();
      try {
        const result = await backupDatabase(config.database.path, file, {
          overwrite: options.force === true,
          busyTimeoutMs: config.database.busyTimeoutMs,
          onProgress: (written, expected) => progress.update(`backup: ${mib(written)}${expected > 0 ? ` of about ${mib(expected)}` : ''}`),
        });
        progress.done();
        print(options, { path: result.path, bytes: result.bytes, seconds: Math.round(result.ms) / 1000 }, `backup written to ${result.path} (${mib(result.bytes)} in ${(result.ms / 1000).toFixed(1)} s)`);
      } finally {
        progress.done();
      }
    });

  common(db.command('check').description(`check the database's integrity (exit ${EXIT_DATABASE_DAMAGED} when damaged)`), { json: true }).action((options: DbOptions) => {
    const config = configFrom(options);
    const report = checkDatabase(config.database.path, { busyTimeoutMs: config.database.busyTimeoutMs });
    const d = report.disk;
    const view = {
      path: report.path,
      ok: report.ok,
      error: report.error,
      integrity: report.integrity,
      foreign_keys: report.foreignKeys,
      schema_version: report.schemaVersion,
      code_schema_version: report.codeSchemaVersion,
      disk: d === null ? null : { file_bytes: d.fileBytes, wal_bytes: d.walBytes, shm_bytes: d.shmBytes, page_size: d.pageSize, pages: d.pages, free_pages: d.freePages },
    };
    print(options, view, checkText(report));
    if (!report.ok) process.exitCode = EXIT_DATABASE_DAMAGED;
  });
}

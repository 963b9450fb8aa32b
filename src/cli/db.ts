import type { Command } from 'commander';
import { mkdirSync, readFileSync } from 'node:fs';
import { environmentVariable, type Config } from '../config/load.ts';
import { parseDuration } from '../domain/duration.ts';
import { createRetentionService, type PrunedRows } from '../services/retention.ts';
import { backupDatabase, checkDatabase, type CheckReport } from '../store/sqlite/maintenance.ts';
import { copySqliteToPostgres } from '../store/copy.ts';
import { loggableDatabaseUrl } from '../store/pg/pool.ts';
import { join, resolve } from 'node:path';
import { copySecretBeside, datedBackupPath, pruneDatedBackups } from '../store/sqlite/backup-set.ts';
import { GENERATED_SECRET_FILE, usesGeneratedSecret } from '../services/auth-keys.ts';
import { credentialKeyPath } from '../services/credential-key.ts';
import { startProgress } from './progress.ts';
import { iso } from '../domain/iso.ts';
import { AuditAction } from '../domain/audit.ts';
import { systemClock } from '../domain/clock.ts';
import { createLogger } from '../log.ts';
import { cliAuditContext, createAuditTrail } from '../services/audit.ts';
import { openPgStore } from '../store/pg/store.ts';
import { cliLogger, configFrom, EXIT_DATABASE_DAMAGED, jsonOption, optionsOf, print, UsageError, withStore } from './shared.ts';

const mib = (bytes: number) => `${(bytes / 1048576).toFixed(1)} MiB`;

/**
 * The database `db copy` writes to: from --to-env NAME, --to-file PATH, --to URL (one of them),
 * or database.url. A password is never taken from the command line, where every user of the
 * machine sees it (ps, /proc/PID/cmdline) and the shell's history keeps it: --to with one is
 * refused, saying where to put it. No message shows the URL but without its password.
 */
function copyTarget(options: { to?: string; toEnv?: string; toFile?: string }, config: Config): string {
  const given = [options.to === undefined ? null : '--to', options.toEnv === undefined ? null : '--to-env', options.toFile === undefined ? null : '--to-file'].filter((o) => o !== null);
  if (given.length > 1) throw new UsageError(`give the target database once: ${given.join(' and ')} were both given`);
  let to: string | null;
  let from: string;
  if (options.toEnv !== undefined) {
    to = environmentVariable(options.toEnv) ?? null;
    from = `environment variable ${options.toEnv}`;
    if (to === null || to.trim() === '') throw new UsageError(`--to-env ${options.toEnv}: the environment variable ${options.toEnv} is not set (or empty); export it with the PostgreSQL URL first`);
  } else if (options.toFile !== undefined) {
    from = `file ${options.toFile}`;
    try {
      to = readFileSync(options.toFile, 'utf8').split('\n')[0]!;
    } catch (err) {
      throw new UsageError(`--to-file: cannot read ${options.toFile} (${(err as NodeJS.ErrnoException).code ?? String(err)}); give a file holding the PostgreSQL URL on its first line`);
    }
  } else {
    to = options.to ?? config.database.url;
    from = options.to !== undefined ? '--to' : 'database.url';
    if (to === null) throw new UsageError('db copy needs a PostgreSQL database: --to-env NAME (a variable holding the URL), --to-file PATH, --to postgres://USER@HOST/DATABASE (no password), or database.url (HOOKRELAY_DATABASE_URL)');
  }
  to = to.trim();
  if (!/^postgres(ql)?:\/\//.test(to)) throw new UsageError(`the ${from} must hold a PostgreSQL URL (postgres://USER@HOST:PORT/DATABASE)`);
  if (options.to !== undefined && hasPassword(to)) {
    throw new UsageError(
      `--to must not carry a password (${loggableDatabaseUrl(to)} has one): a command line is visible to every user of this machine (ps, /proc) and stays in the shell's history. ` +
        'Give the URL in an environment variable (--to-env NAME) or a file (--to-file PATH), or keep the password in ~/.pgpass or PGPASSWORD',
    );
  }
  return to;
}

/** The copy's own entry, appended to the copied chain in the target (`db.copy`): where from, how many rows. */
async function recordCopy(to: string, instance: string, changes: Record<string, unknown>): Promise<void> {
  const target = await openPgStore(to, systemClock, { instance, poolSize: 1 });
  try {
    await createAuditTrail(target, createLogger('silent')).recordAlone(cliAuditContext(), { action: AuditAction.dbCopy, orgId: null }, changes);
  } finally {
    await target.close();
  }
}

/** Whether a PostgreSQL URL holds a password (in its user-info, or as a `password` parameter). */
function hasPassword(url: string): boolean {
  try {
    const parsed = new URL(url);
    return parsed.password !== '' || parsed.searchParams.has('password');
  } catch {
    // Not parseable as a URL: judge by its text.
    return /:[^/@]*@|[?&]password=/i.test(url);
  }
}

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

/** Refuses a SQLite-only command when the configuration names a PostgreSQL database. */
function sqliteOnly(config: Config, command: string, instead: string): void {
  if (config.database.url !== null) throw new UsageError(`db ${command} works on a SQLite file; database.url names a PostgreSQL database: ${instead}`);
}

/** `hookrelay db prune | backup | check | copy`: the database's care. */
export function registerDbCommands(program: Command): void {
  const db = program.command('db').description('the database: retention, backups, integrity');

  registerPrune(db);
  registerBackup(db);
  registerCheck(db);
  registerCopy(db);
}

/** `db prune`: what retention removes, now (or counted with --dry-run). */
function registerPrune(db: Command): void {
  jsonOption(db.command('prune').description('remove what retention removes (delivered events, their attempts, old quarantined lines), now'))
    .option('--dry-run', 'count what would be removed; remove nothing')
    .option('--delivered-older-than <duration>', 'instead of retention.deliveredEvents, such as 7d')
    .option('--quarantined-older-than <duration>', 'instead of retention.quarantinedLines, such as 7d')
    .action(async (_options: unknown, cmd: Command) => {
      const options = optionsOf<{ dryRun?: boolean; deliveredOlderThan?: string; quarantinedOlderThan?: string }>(cmd);
      const age = (flag: string, text: string | undefined, fallback: number) => {
        if (text === undefined) return fallback;
        const ms = parseDuration(text);
        if (ms === null || ms < 1000) throw new UsageError(`${flag} must be a duration of at least 1s, such as 12h or 7d; got "${text}"`);
        return ms;
      };
      const retention = configFrom(options).retention;
      const policy = {
        deliveredEventsMs: age('--delivered-older-than', options.deliveredOlderThan, retention.deliveredEvents),
        quarantinedLinesMs: age('--quarantined-older-than', options.quarantinedOlderThan, retention.quarantinedLines),
        batchSize: retention.batchSize,
      };
      await withStore(options, async ({ store, services, by }) => {
        const dryRun = options.dryRun === true;
        const progress = startProgress(dryRun ? 'prune --dry-run' : 'prune', { unit: 'events' });
        const service = createRetentionService(store, { ...policy, auditEntriesMs: retention.auditEntries }, { trail: services.audit, by });
        // Between batches a running daemon's writes get the lock (it waits for each batch).
        const prune = () =>
          service.prune({ dryRun, pauseMs: dryRun ? 0 : 50, onProgress: ({ removed, done }) => progress.update(removed.events, done) }).finally(() => progress.end());
        // A dry run changes nothing: it is not in the audit trail.
        const result = dryRun ? await prune() : await services.audit.change(by, { action: AuditAction.dbPrune, orgId: null }, async (rec) => {
          const pruned = await prune();
          await rec.recordAlone({ changes: { ...pruned.removed, audit_entries: pruned.auditEntries, delivered_before: iso(pruned.deliveredBefore), quarantined_before: iso(pruned.quarantinedBefore) } });
          return pruned;
        });
        const view = {
          dry_run: dryRun,
          delivered_before: iso(result.deliveredBefore),
          quarantined_before: iso(result.quarantinedBefore),
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
          () =>
            `${dryRun ? 'would remove' : 'removed'} ${rowsText(result.removed)}: events delivered before ${view.delivered_before}, lines quarantined before ${view.quarantined_before} (${view.seconds} s)` +
            (dryRun || result.removed.events === 0 ? '' : '\nthe file keeps its size: new rows reuse the space (docs/operations.md, "Disk use")'),
        );
      });
    });
}

/**
 * `db backup FILE`, or `db backup --dir DIR [--keep N]`: a consistent copy of the SQLite file,
 * also while the daemon runs. With --dir, a dated file in DIR (and the generated JWT secret
 * beside it, when hookrelay generated one), the oldest beyond the last N removed: what the
 * packages' nightly timer runs (hookrelay-backup.service).
 */
function registerBackup(db: Command): void {
  jsonOption(db.command('backup').description('write a consistent copy of the database to FILE (or a dated file in --dir), also while the daemon runs').argument('[file]', 'the backup file to write'))
    .option('--force', 'replace FILE if it exists')
    .option('--dir <dir>', 'write hookrelay-<UTC time>.db in DIR instead of FILE, with the generated JWT secret and credential key beside it')
    .option('--keep <n>', 'with --dir: keep the newest N backups there, remove the older ones', (v) => positiveCount(v, '--keep'))
    .action(async (file: string | undefined, _options: unknown, cmd: Command) => {
      const options = optionsOf<{ force?: boolean; dir?: string; keep?: number }>(cmd);
      const target = backupTarget(file, options);
      const config = configFrom(options);
      sqliteOnly(config, 'backup', 'back it up with pg_dump, or the server\'s own backups (pg_basebackup, WAL archiving)');
      const progress = startProgress('backup', { unit: 'MiB' });
      const result = await backupDatabase(config.database.path, target, {
        overwrite: options.force === true,
        busyTimeoutMs: config.database.busyTimeout,
        onProgress: (written, expected) => progress.update(Math.round(written / 1048576), expected > 0 ? written / expected : undefined),
      }).finally(() => progress.end());
      const secret = options.dir !== undefined && usesGeneratedSecret(config.auth) ? copySecretBeside(result.path, join(config.stateDir, GENERATED_SECRET_FILE)) : null;
      const key = credentialKeyPath(config);
      const credentialKey = options.dir !== undefined && key.generated ? copySecretBeside(result.path, key.path, '.credential-key') : null;
      const removed = options.dir !== undefined && options.keep !== undefined ? pruneDatedBackups(options.dir, options.keep) : [];
      print(
        options,
        { path: result.path, bytes: result.bytes, seconds: Math.round(result.ms) / 1000, jwt_secret: secret, credential_key: credentialKey, removed },
        () =>
          `backup written to ${result.path} (${mib(result.bytes)} in ${(result.ms / 1000).toFixed(1)} s)` +
          (secret ? `\nJWT secret copied to ${secret}` : '') +
          (credentialKey ? `\ncredential key copied to ${credentialKey}` : '') +
          (removed.length > 0 ? `\nremoved ${removed.length} older backup(s): ${removed.join(', ')}` : ''),
      );
    });
}

function positiveCount(value: string, flag: string): number {
  const n = Number(value);
  if (!Number.isInteger(n) || n < 1 || n > 10_000) throw new UsageError(`${flag} must be a whole number from 1 to 10000, not "${value}"`);
  return n;
}

/** FILE, or the dated file in --dir: one of them. */
function backupTarget(file: string | undefined, options: { dir?: string; keep?: number }): string {
  if (file !== undefined && options.dir !== undefined) throw new UsageError('give either FILE or --dir DIR, not both');
  if (options.keep !== undefined && options.dir === undefined) throw new UsageError('--keep applies to --dir: give --dir DIR too');
  if (options.dir !== undefined) {
    // Private when made here: backups hold the webhooks' signing secrets.
    mkdirSync(resolve(options.dir), { recursive: true, mode: 0o700 });
    return datedBackupPath(resolve(options.dir), Date.now());
  }
  if (file === undefined) throw new UsageError('say where the backup goes: db backup FILE, or db backup --dir DIR [--keep N]');
  return file;
}

/** `db check [FILE]`: the integrity of the database (exit EXIT_DATABASE_DAMAGED when damaged). */
function registerCheck(db: Command): void {
  jsonOption(
    db
      .command('check')
      .description(`check the database's integrity (exit ${EXIT_DATABASE_DAMAGED} when damaged)`)
      .argument('[file]', 'a database file to check instead of the configured one (a backup, say)'),
  ).action((file: string | undefined, _options: unknown, cmd: Command) => {
    const options = optionsOf(cmd);
    const config = configFrom(options);
    if (file === undefined) sqliteOnly(config, 'check', "the server checks its own pages (data checksums; pg_amcheck); give a SQLite file to check one");
    const report = checkDatabase(file ?? config.database.path, { busyTimeoutMs: config.database.busyTimeout, named: file !== undefined });
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
    print(options, view, () => checkText(report));
    if (!report.ok) process.exitCode = EXIT_DATABASE_DAMAGED;
  });
}

/** `db copy`: a SQLite database into an empty PostgreSQL database. */
function registerCopy(db: Command): void {
  jsonOption(
    db
      .command('copy')
      .description('copy a SQLite database into an empty PostgreSQL database (moving an install to PostgreSQL; stop the daemon first)')
      .requiredOption('--from <file>', 'the SQLite database file to copy')
      .option('--to-env <name>', 'the environment variable holding the PostgreSQL database URL (postgres://USER:PASSWORD@HOST/DATABASE)')
      .option('--to-file <path>', 'a file holding the PostgreSQL database URL (mode 0600)')
      .option('--to <url>', 'the PostgreSQL database URL, without a password (from ~/.pgpass or PGPASSWORD); default database.url (HOOKRELAY_DATABASE_URL)')
      .option('--instance <name>', "the instance that will tail the copied feeds (its feed positions and counts); default instance.name"),
  ).action(async (_options: unknown, cmd: Command) => {
    const options = optionsOf<{ from: string; to?: string; toEnv?: string; toFile?: string; instance?: string }>(cmd);
    const config = configFrom(options);
    const to = copyTarget(options, config);
    const instance = options.instance ?? config.instance.name;
    if (!/^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$/.test(instance)) throw new UsageError('--instance must be letters, digits, ".", "_" and "-", at most 63, starting with a letter or digit');
    const result = await copySqliteToPostgres({ from: resolve(options.from), to, instance, log: cliLogger(config), busyTimeoutMs: config.database.busyTimeout });
    const total = result.tables.reduce((sum, t) => sum + t.rows, 0);
    await recordCopy(to, instance, { from: resolve(options.from), to: loggableDatabaseUrl(to), rows: total });
    print(
      options,
      {
        to: loggableDatabaseUrl(to),
        instance: result.instance,
        tables: result.tables,
        rows: total,
        replaced_nul: result.replacedNul,
        leases_cleared: result.leasesCleared,
        seconds: Math.round(result.durationMs) / 1000,
      },
      () =>
        [
          `copied ${total} row(s) into ${loggableDatabaseUrl(to)} in ${(result.durationMs / 1000).toFixed(1)} s; every table's count checked:`,
          ...result.tables.map((t) => `  ${t.table.padEnd(18)} ${t.rows}${t.replacedNul > 0 ? ` (${t.replacedNul} value(s): U+0000 stored as U+FFFD)` : ''}`),
          `feed sources, positions and counts belong to instance "${result.instance}"`,
          ...(result.leasesCleared > 0 ? [`${result.leasesCleared} leased delivery(ies) are due again (their lease was cleared)`] : []),
          'next: set database.url (HOOKRELAY_DATABASE_URL) and start the daemon; docs/scale-out.md',
        ].join('\n'),
    );
  });
}

import type { Command } from 'commander';
import { readFileSync } from 'node:fs';
import { setTimeout as sleep } from 'node:timers/promises';
import type { AuditEntry } from '../domain/audit.ts';
import { iso } from '../domain/iso.ts';
import { auditLine, type AuditTrail, type VerifyResult } from '../services/audit.ts';
import { cliTime, EXIT_RUNTIME, jsonOption, limitOption, optionsOf, print, say, table, UsageError, withServices } from './shared.ts';

/** How often `audit list --follow` looks for new entries (ms). */
const FOLLOW_POLL_MS = 1_000;

interface ListOptions {
  since?: string;
  actor?: string;
  action?: string;
  org?: string;
  outcome?: string;
  limit: string;
  follow?: boolean;
}

/** `hookrelay audit list | verify`: the audit trail (docs/operations.md, "Audit trail"). */
export function registerAuditCommands(program: Command): void {
  const audit = program.command('audit').description('the audit trail: who changed what (docs/operations.md, "Audit trail")');
  registerList(audit);
  registerVerify(audit);
}

function entryRow(e: AuditEntry): string[] {
  const actor = `${e.actorKind}:${e.actorName ?? '-'}${e.actorOrg === null ? '' : `@${e.actorOrg}`}`;
  return [String(e.id), iso(e.at), actor, e.action, e.orgId ?? '-', e.target ?? '-', e.outcome + (e.code === null ? '' : ` (${e.code})`), e.changes ?? ''];
}

const HEADER = ['ID', 'TIME', 'ACTOR', 'ACTION', 'ORG', 'TARGET', 'OUTCOME', 'CHANGES'];

function registerList(audit: Command): void {
  jsonOption(audit.command('list').description('the newest entries, oldest first (every organization unless --org)'))
    .option('--since <time>', 'RFC 3339: entries recorded at or after it')
    .option('--actor <name>', "an actor's name: a token's e-mail, a Unix user")
    .option('--action <action>', 'an action, such as role.update or webhook.replace')
    .option('--org <id>', 'entries about this organization only')
    .option('--outcome <outcome>', 'ok, denied or failed')
    .option('--limit <n>', 'at most this many', '50')
    .option('--follow', 'then print new entries as they are recorded, until interrupted')
    .action((_options: unknown, cmd: Command) => {
      const options = optionsOf<ListOptions>(cmd);
      const limit = limitOption(options.limit);
      const since = options.since === undefined ? undefined : cliTime('--since', options.since);
      if (options.outcome !== undefined && !['ok', 'denied', 'failed'].includes(options.outcome)) throw new UsageError(`--outcome must be ok, denied or failed; got "${options.outcome}"`);
      const filter = { orgId: options.org, actor: options.actor, action: options.action, outcome: options.outcome };
      return withServices(options, async ({ services }) => {
        const page = (await services.audit.list({ ...filter, since, limit })).reverse();
        if (options.json && !options.follow) print(options, page.map(auditLine), () => '');
        else if (options.json) for (const e of page) say(JSON.stringify(auditLine(e)));
        else say(page.length === 0 && !options.follow ? 'no audit entries' : table([HEADER, ...page.map(entryRow)]));
        if (options.follow) await follow(services.audit, page[page.length - 1]?.id ?? (await newestId(services.audit)), filter, options.json === true);
      });
    });
}

async function newestId(trail: AuditTrail): Promise<number> {
  return (await trail.list({ limit: 1 }))[0]?.id ?? 0;
}

/** Prints the entries recorded after `afterId` that pass `filter`, as they come, until SIGINT or SIGTERM. */
async function follow(trail: AuditTrail, afterId: number, filter: { orgId?: string | undefined; actor?: string | undefined; action?: string | undefined; outcome?: string | undefined }, json: boolean): Promise<void> {
  const stop = new AbortController();
  const onSignal = () => stop.abort();
  process.once('SIGINT', onSignal);
  process.once('SIGTERM', onSignal);
  let last = afterId;
  const keep = (e: AuditEntry) =>
    (filter.orgId === undefined || e.orgId === filter.orgId) && (filter.actor === undefined || e.actorName === filter.actor) && (filter.action === undefined || e.action === filter.action) && (filter.outcome === undefined || e.outcome === filter.outcome);
  try {
    while (!stop.signal.aborted) {
      const entries = await trail.after(last);
      for (const e of entries) if (keep(e)) say(json ? JSON.stringify(auditLine(e)) : table([entryRow(e)]));
      if (entries.length > 0) last = entries[entries.length - 1]!.id;
      else await sleep(FOLLOW_POLL_MS, undefined, { signal: stop.signal }).catch(() => {});
    }
  } finally {
    process.off('SIGINT', onSignal);
    process.off('SIGTERM', onSignal);
  }
}

/** An entry as a log copy holds it: its hash, by id. */
type LogCopy = Map<number, { hash: string }>;

/**
 * The entries of a log copy: JSON lines (as `journalctl -u hookrelay -o cat` writes them; a
 * syslog prefix such as `<6>` is skipped) whose `audit` member is an entry. Other lines are ignored.
 */
export function readLogCopy(text: string): LogCopy {
  const copy: LogCopy = new Map();
  for (const raw of text.split('\n')) {
    const line = raw.replace(/^<\d>/, '').trim();
    if (!line.startsWith('{') || !line.includes('"audit"')) continue;
    try {
      const audit = (JSON.parse(line) as { audit?: { id?: unknown; hash?: unknown } }).audit;
      if (typeof audit?.id === 'number' && typeof audit.hash === 'string') copy.set(audit.id, { hash: audit.hash });
    } catch {
      // Not a line of ours.
    }
  }
  return copy;
}

/** What verify found, against the log copy too when given. */
interface VerifyReport extends VerifyResult {
  /** Entries of the database the log copy has, with the same hash. */
  readonly confirmed: number | null;
  /** Entries of the database (newer ones, typically) that the log copy does not have. */
  readonly notInCopy: number | null;
}

/** Checks the chain, and each entry against the log copy when there is one: the first difference is the break. */
async function verifyAgainst(trail: AuditTrail, copy: LogCopy | null): Promise<VerifyReport> {
  let confirmed = 0;
  let notInCopy = 0;
  let mismatch: VerifyResult['broken'] = null;
  const result = await trail.verify((e) => {
    const logged = copy?.get(e.id);
    if (copy === null || mismatch !== null) return;
    if (logged === undefined) notInCopy++;
    else if (logged.hash === e.hash) confirmed++;
    else mismatch = { id: e.id, kind: 'edited', detail: `entry ${e.id} differs from the log copy (another hash): the database was changed and its chain recomputed from there` };
  });
  let broken = result.broken ?? mismatch;
  if (broken === null && copy !== null) {
    // Entries the log saw that the database no longer has, past its end: removed from the tail.
    const missing = [...copy.keys()].filter((id) => id > (result.lastId ?? 0) && id >= (result.firstId ?? 1)).sort((a, b) => a - b)[0];
    if (missing !== undefined) broken = { id: missing, kind: 'removed', detail: `entry ${missing} is in the log copy but not in the database: removed` };
  }
  return { ...result, broken, confirmed: copy === null ? null : confirmed, notInCopy: copy === null ? null : notInCopy };
}

function registerVerify(audit: Command): void {
  jsonOption(audit.command('verify').description('check the chain of hashes (exit 1 naming the first entry edited, removed or inserted)'))
    .option('--against <file>', 'also check each entry against a copy of the log: JSON lines, such as `journalctl -u hookrelay -o cat` writes')
    .action((_options: unknown, cmd: Command) => {
      const options = optionsOf<{ against?: string }>(cmd);
      let copy: LogCopy | null = null;
      if (options.against !== undefined) {
        try {
          copy = readLogCopy(readFileSync(options.against, 'utf8'));
        } catch (err) {
          throw new UsageError(`--against: cannot read ${options.against} (${(err as NodeJS.ErrnoException).code ?? String(err)})`);
        }
      }
      return withServices(options, async ({ services }) => {
        const r = await verifyAgainst(services.audit, copy);
        const view = { ok: r.broken === null, checked: r.checked, first_id: r.firstId, last_id: r.lastId, anchor_id: r.anchorId, broken: r.broken, confirmed_by_log: r.confirmed, not_in_log: r.notInCopy };
        print(options, view, () => verifyText(r));
        if (r.broken !== null) process.exitCode = EXIT_RUNTIME;
      });
    });
}

function verifyText(r: VerifyReport): string {
  if (r.broken !== null) return `audit trail BROKEN at entry ${r.broken.id}: ${r.broken.detail} (${r.checked} entries checked before it)`;
  const range = r.checked === 0 ? 'no entries' : `entries ${r.firstId} to ${r.lastId}`;
  const from = r.anchorId === null ? 'from the first entry' : `from the cut recorded by entry ${r.anchorId} (audit.prune)`;
  const lines = [`audit trail ok: ${r.checked} ${r.checked === 1 ? 'entry' : 'entries'} checked (${range}), ${from}`];
  if (r.confirmed !== null) lines.push(`log copy: ${r.confirmed} entries confirmed; ${r.notInCopy} not in the copy (recorded after it was taken, or missing from it)`);
  return lines.join('\n');
}

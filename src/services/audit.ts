/**
 * The audit trail's service: recording the changes the other services make (in the very
 * transaction that makes them), refusals, and reading, verifying and pruning the chain.
 * Values and the hash are domain/audit.ts's; docs/operations.md, "Audit trail", says what the
 * chain protects against.
 */
import { setImmediate as yieldToEventLoop } from 'node:timers/promises';
import { userInfo } from 'node:os';
import {
  ActorKind,
  anchorOf,
  AuditAction,
  AuditOutcome,
  checkLink,
  GENESIS_HASH,
  type AuditChanges,
  type AuditContext,
  type AuditDraft,
  type AuditEntry,
  type ChainBreak,
} from '../domain/audit.ts';
import { iso } from '../domain/iso.ts';
import { isHookrelayError } from '../domain/errors.ts';
import type { Logger } from '../log.ts';
import type { Store, Tx } from '../store/repos.ts';
import type { AuditFilter } from '../store/values.ts';

/** What a change is about: its action, the organization it concerns, and its target (a user's e-mail, a delivery). */
export interface AuditWhat {
  readonly action: AuditAction;
  readonly orgId: string | null;
  readonly target?: string | null;
}

/** Handed to a change (AuditTrail.change): records its entry in the transaction that makes it. */
export interface AuditRecorder {
  /**
   * Appends the change's `ok` entry in `tx`. Call it last in the transaction (on PostgreSQL the
   * chain's lock is held from there to the commit). `action` and `target` replace the change's
   * own when the outcome decides them (a registration that replaced a webhook).
   */
  record(tx: Tx, details?: AuditDetails): Promise<AuditEntry>;
  /**
   * Appends the `ok` entry in a transaction of its own: for a change that writes nothing to the
   * database (a token issued) or that commits in several transactions (a recovery, in chunks).
   */
  recordAlone(details?: AuditDetails): Promise<AuditEntry>;
}

/** What a change's entry says beyond the change's own action and target. */
export interface AuditDetails {
  readonly changes?: AuditChanges | null;
  readonly action?: AuditAction;
  readonly target?: string | null;
}

/** Entries read per transaction while verifying or following the chain. */
export const AUDIT_CHUNK = 1_000;

/** The Unix user running this process; its uid when the system has no name for it (a container's arbitrary uid). */
function unixUser(): string {
  try {
    return userInfo().username;
  } catch {
    return `uid ${process.getuid?.() ?? 'unknown'}`;
  }
}

/** The audit context of a CLI command: its Unix user. */
export function cliAuditContext(): AuditContext {
  return { actor: { kind: ActorKind.cli, name: unixUser(), orgId: null }, requestId: null, source: null };
}

/** The daemon itself acting (retention): `part` names which part. */
export function systemAuditContext(part: string): AuditContext {
  return { actor: { kind: ActorKind.system, name: part, orgId: null }, requestId: null, source: null };
}

function draftOf(by: AuditContext, what: AuditWhat, outcome: AuditOutcome, changes: AuditChanges | null, code: string | null): AuditDraft {
  return { actor: by.actor, action: what.action, orgId: what.orgId, target: what.target ?? null, changes, requestId: by.requestId, source: by.source, outcome, code };
}

/** The result of a chain check: how many entries were read, from where, and the first break (null: none). */
export interface VerifyResult {
  readonly checked: number;
  readonly firstId: number | null;
  readonly lastId: number | null;
  /** Where the chain was checked from: an `audit.prune` anchor's id, or null from entry 1. */
  readonly anchorId: number | null;
  readonly broken: ChainBreak | null;
}

export type AuditTrail = ReturnType<typeof createAuditTrail>;

/**
 * The audit trail over `store`. Whoever subscribes (onAppended) hears of every entry this
 * process appended, once its transaction committed: the daemon's journal writes its log line then.
 */
export function createAuditTrail(store: Store, log: Logger) {
  // Info whatever log.level says (but silent): each entry's line is the copy the database cannot rewrite.
  const auditLog = log.child({ subsystem: 'audit' }, log.level === 'silent' ? {} : { level: 'info' });
  const listeners = new Set<() => void>();
  const onAppended = () => {
    for (const listener of listeners) listener();
  };

  /** Appends one entry in a transaction of its own. */
  async function appendAlone(draft: AuditDraft): Promise<AuditEntry> {
    const entry = await store.transaction((tx) => tx.audit.append(draft, store.clock.now()));
    onAppended();
    return entry;
  }

  return {
    /**
     * Runs a change: `fn` makes it, in transactions of its own, and calls `record` last in the
     * one that commits it. A HookrelayError `fn` throws is recorded as `failed` with its code
     * (in a transaction of its own), then thrown on; a change that returns without recording
     * is recorded `ok` after it. Either way, one entry per call.
     */
    async change<T>(by: AuditContext, what: AuditWhat, fn: (recorder: AuditRecorder) => Promise<T>): Promise<T> {
      let recorded = false;
      const recorder: AuditRecorder = {
        async record(tx, details = {}) {
          const entry = await tx.audit.append(draftOf(by, { ...what, ...details }, AuditOutcome.ok, details.changes ?? null, null), store.clock.now());
          recorded = true;
          return entry;
        },
        async recordAlone(details = {}) {
          const entry = await store.transaction((tx) => tx.audit.append(draftOf(by, { ...what, ...details }, AuditOutcome.ok, details.changes ?? null, null), store.clock.now()));
          recorded = true;
          return entry;
        },
      };
      let result: T;
      try {
        result = await fn(recorder);
      } catch (err) {
        if (!recorded && isHookrelayError(err)) await this.refused(by, what, AuditOutcome.failed, err.code);
        throw err;
      }
      if (recorded) onAppended();
      else await appendAlone(draftOf(by, what, AuditOutcome.ok, null, null));
      return result;
    },

    /**
     * Records a refused or failed attempt in a transaction of its own. A failure to record it
     * (the database itself failing) is logged, not thrown: the caller's own error says more.
     */
    async refused(by: AuditContext, what: AuditWhat, outcome: Exclude<AuditOutcome, 'ok'>, code: string, changes: AuditChanges | null = null): Promise<void> {
      try {
        await appendAlone(draftOf(by, what, outcome, changes, code));
      } catch (err) {
        auditLog.error({ err, action: what.action, outcome, code }, 'could not record a refused attempt in the audit trail');
      }
    },

    /** Records a change made outside any transaction of this store (db copy's own entry), in one of its own. */
    async recordAlone(by: AuditContext, what: AuditWhat, changes: AuditChanges | null): Promise<AuditEntry> {
      return appendAlone(draftOf(by, what, AuditOutcome.ok, changes, null));
    },

    /** A page of entries, newest first; `since` (epoch ms) becomes an id bound. */
    list(filter: Omit<AuditFilter, 'fromId'> & { readonly since?: number | undefined }): Promise<AuditEntry[]> {
      return store.read(async (tx) => {
        const { since, ...rest } = filter;
        if (since === undefined) return tx.audit.list(rest);
        const fromId = await tx.audit.firstAt(since);
        return fromId === null ? [] : tx.audit.list({ ...rest, fromId });
      });
    },

    /** Up to `limit` entries after `afterId`, oldest first (`audit list --follow`, the journal). */
    after(afterId: number, limit: number = AUDIT_CHUNK): Promise<AuditEntry[]> {
      return store.read((tx) => tx.audit.after(afterId, limit));
    },

    verify: (onEntry?: (e: AuditEntry) => void): Promise<VerifyResult> => verifyChain(store, onEntry),

    /**
     * Cuts the entries older than `before` (epoch ms): first an `audit.prune` anchor is appended
     * that says where the chain now starts (the first entry kept, and the hash it follows), then
     * the older entries go, `batchSize` per transaction. The newest entry is never cut. Returns
     * how many went.
     */
    prune: (by: AuditContext, before: number, batchSize: number, signal?: AbortSignal) => pruneChain(store, appendAlone, by, before, batchSize, signal),

    /** Calls `listener` after each entry this process appends (once committed); returns the unsubscribe. */
    onAppended(listener: () => void): () => void {
      listeners.add(listener);
      return () => listeners.delete(listener);
    },

    /** Writes an entry to the log as one JSON line (subsystem audit), hash included: what the daemon's journal does with each entry. */
    logEntry(entry: AuditEntry): void {
      auditLog.info({ audit: auditLine(entry) }, `audit: ${entry.action} ${entry.outcome}`);
    },
  };
}

/** An entry as its log line carries it (and `audit verify --against` reads it back): every field the hash covers. */
export function auditLine(e: AuditEntry) {
  return {
    id: e.id,
    at: e.at,
    time: iso(e.at),
    actor_kind: e.actorKind,
    actor_name: e.actorName,
    actor_org: e.actorOrg,
    action: e.action,
    org_id: e.orgId,
    target: e.target,
    changes: e.changes,
    request_id: e.requestId,
    source: e.source,
    outcome: e.outcome,
    code: e.code,
    prev_hash: e.prevHash,
    hash: e.hash,
  };
}

/** Where the chain starts: the newest anchor's first kept entry, or entry 1 after the genesis hash. */
async function chainStart(store: Store): Promise<{ id: number; hash: string; anchorId: number | null }> {
  const anchorEntry = await store.read((tx) => tx.audit.latestAnchor());
  const anchor = anchorEntry === null ? null : anchorOf(anchorEntry);
  if (anchorEntry === null || anchor === null) return { id: 1, hash: GENESIS_HASH, anchorId: null };
  return { id: anchor.firstKeptId, hash: anchor.firstKeptPrevHash, anchorId: anchorEntry.id };
}

/** Reads the chain from its start, a chunk per read transaction, and checks each link (checkLink). */
async function verifyChain(store: Store, onEntry?: (e: AuditEntry) => void): Promise<VerifyResult> {
  const start = await chainStart(store);
  let prev: AuditEntry | null = null;
  let checked = 0;
  let firstId: number | null = null;
  let after = start.id - 1;
  for (;;) {
    const chunk = await store.read((tx) => tx.audit.after(after, AUDIT_CHUNK));
    for (const entry of chunk) {
      const broken = checkLink(prev, entry, start);
      if (broken !== null) return { checked, firstId, lastId: prev?.id ?? null, anchorId: start.anchorId, broken };
      onEntry?.(entry);
      firstId ??= entry.id;
      prev = entry;
      checked++;
    }
    if (chunk.length < AUDIT_CHUNK) break;
    after = chunk[chunk.length - 1]!.id;
    await yieldToEventLoop();
  }
  // An anchor that names an entry no longer there: the chain's start was removed.
  if (start.anchorId !== null && prev === null) return { checked, firstId, lastId: null, anchorId: start.anchorId, broken: { id: start.id, kind: 'removed', detail: `entry ${start.id}, where the chain starts, is missing: removed` } };
  return { checked, firstId, lastId: prev?.id ?? null, anchorId: start.anchorId, broken: null };
}

async function pruneChain(store: Store, appendAlone: (d: AuditDraft) => Promise<AuditEntry>, by: AuditContext, before: number, batchSize: number, signal?: AbortSignal): Promise<number> {
  const cut = await store.read(async (tx) => {
    const oldest = (await tx.audit.after(0, 1))[0];
    if (oldest === undefined || oldest.at >= before) return null;
    // Nothing at or after the cutoff: the newest entry is kept all the same.
    const firstKeptId = (await tx.audit.firstAt(before)) ?? (await tx.audit.list({ limit: 1 }))[0]!.id;
    if (firstKeptId <= oldest.id) return null;
    const kept = (await tx.audit.after(firstKeptId - 1, 1))[0]!;
    return { firstKeptId, firstKeptPrevHash: kept.prevHash };
  });
  if (cut === null) return 0;
  const changes = { first_kept_id: cut.firstKeptId, first_kept_prev_hash: cut.firstKeptPrevHash, before: iso(before) };
  await appendAlone(draftOf(by, { action: AuditAction.auditPrune, orgId: null }, AuditOutcome.ok, changes, null));
  let removed = 0;
  while (!signal?.aborted) {
    const n = await store.transaction((tx) => tx.audit.removeBefore(cut.firstKeptId, batchSize), { durable: false });
    removed += n;
    if (n < batchSize) break;
    await yieldToEventLoop();
  }
  return removed;
}

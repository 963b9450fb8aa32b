/**
 * The audit trail's values: who acted (the actor and the request), what they did (a stable
 * dotted action name), and the entry as stored, with the hash that chains it to the one before
 * (docs/operations.md, "Audit trail"). Pure: the hash and the chain check are functions of the
 * entries' fields, so that `hookrelay audit verify` and the tests use the very code that wrote them.
 */
import { createHash } from 'node:crypto';

/** Who acts: a token through the API, the same through the console page, a Unix user at the CLI, the daemon itself, or an unknown caller (refused). */
export const ActorKind = {
  api: 'api',
  console: 'console',
  cli: 'cli',
  system: 'system',
  anonymous: 'anonymous',
} as const;
export type ActorKind = (typeof ActorKind)[keyof typeof ActorKind];

export interface AuditActor {
  readonly kind: ActorKind;
  /** The token's e-mail (api, console), the Unix user (cli), the daemon's part (system: `retention`); null when unknown. */
  readonly name: string | null;
  /** The organization of the token (api, console); null otherwise. */
  readonly orgId: string | null;
}

/** Who is acting, and from where: what every write method of the services takes first. */
export interface AuditContext {
  readonly actor: AuditActor;
  /** The API request's id (answered as X-Request-Id); null from the CLI. */
  readonly requestId: string | null;
  /** The client's address as the API sees it (ctx.ip); null from the CLI. */
  readonly source: string | null;
}

/** The stable names of the actions the trail records (docs/api.md lists them). */
export const AuditAction = {
  roleAdd: 'role.add',
  /** A user's role changed (users/update_role, `users set-role`). */
  roleUpdate: 'role.update',
  userAdd: 'user.add',
  userRemove: 'user.remove',
  orgAdd: 'org.add',
  webhookRegister: 'webhook.register',
  webhookReplace: 'webhook.replace',
  webhookSecretRotate: 'webhook.secret_rotate',
  webhookDisable: 'webhook.disable',
  webhookEnable: 'webhook.enable',
  webhookTest: 'webhook.test',
  webhookRecover: 'webhook.recover',
  deliveryReplay: 'delivery.replay',
  deliveryRetry: 'delivery.retry',
  tokenIssue: 'token.issue',
  consoleLinkIssue: 'console_link.issue',
  apiKeyCreate: 'api_key.create',
  apiKeyRevoke: 'api_key.revoke',
  /** A request with an API key that is revoked, expired or unknown was refused. */
  apiKeyUseRefused: 'api_key.use_refused',
  dbPrune: 'db.prune',
  dbCopy: 'db.copy',
  /** Retention cut the trail's oldest entries: this entry is the anchor the chain is checked from. */
  auditPrune: 'audit.prune',
  /** A refused request to a route without a more specific action. */
  request: 'request',
} as const;
export type AuditAction = (typeof AuditAction)[keyof typeof AuditAction];

export const AuditOutcome = { ok: 'ok', denied: 'denied', failed: 'failed' } as const;
export type AuditOutcome = (typeof AuditOutcome)[keyof typeof AuditOutcome];

/**
 * What changed, as `{ field: { before, after } }` (or other plain JSON). Never a secret, a token
 * or a header credential's value: `{ changed: true }` says that one changed.
 */
export type AuditChanges = Readonly<Record<string, unknown>>;

/** An entry before the store numbers and chains it. */
export interface AuditDraft {
  readonly actor: AuditActor;
  readonly action: AuditAction;
  /** The organization the action concerns (its scope for the API's reader); null for none. */
  readonly orgId: string | null;
  readonly target: string | null;
  readonly changes: AuditChanges | null;
  readonly requestId: string | null;
  readonly source: string | null;
  readonly outcome: AuditOutcome;
  /** The error code of a denied or failed attempt; null when ok. */
  readonly code: string | null;
}

/** An entry as stored: numbered (1, 2, ... without gaps), timed, and chained. */
export interface AuditEntry {
  readonly id: number;
  /** Epoch ms from the store's clock, never before the previous entry's. */
  readonly at: number;
  readonly actorKind: ActorKind;
  readonly actorName: string | null;
  readonly actorOrg: string | null;
  readonly action: string;
  readonly orgId: string | null;
  readonly target: string | null;
  /** The changes as their stored JSON text (the hash covers these very bytes); null for none. */
  readonly changes: string | null;
  readonly requestId: string | null;
  readonly source: string | null;
  readonly outcome: AuditOutcome;
  readonly code: string | null;
  readonly prevHash: string;
  readonly hash: string;
}

/** The chain's head before the first entry: the previous hash of entry 1. */
export const GENESIS_HASH = '0'.repeat(64);
/** Names the encoding; a new one gets a new name, and entries keep the one they were hashed with. */
const ENCODING = 'hookrelay.audit.v1';

/**
 * SHA-256 (hex) over the canonical encoding of the entry's fields and its predecessor's hash:
 * a JSON array in a fixed order, strings and numbers as JSON writes them, `changes` as its
 * stored text. Any edit of a field, or a change of the entry before it, changes it.
 */
export function entryHash(e: Omit<AuditEntry, 'hash'>): string {
  const fields = [ENCODING, e.id, e.at, e.actorKind, e.actorName, e.actorOrg, e.action, e.orgId, e.target, e.changes, e.requestId, e.source, e.outcome, e.code, e.prevHash];
  return createHash('sha256').update(JSON.stringify(fields)).digest('hex');
}

/** The stored entry that follows `head` (null: the first) for `draft` at `now` (epoch ms). */
export function chainEntry(head: { readonly id: number; readonly at: number; readonly hash: string } | null, draft: AuditDraft, now: number): AuditEntry {
  const unhashed = {
    id: (head?.id ?? 0) + 1,
    at: Math.max(now, head?.at ?? now),
    actorKind: draft.actor.kind,
    actorName: draft.actor.name,
    actorOrg: draft.actor.orgId,
    action: draft.action,
    orgId: draft.orgId,
    target: draft.target,
    changes: draft.changes === null ? null : JSON.stringify(draft.changes),
    requestId: draft.requestId,
    source: draft.source,
    outcome: draft.outcome,
    code: draft.code,
    prevHash: head?.hash ?? GENESIS_HASH,
  };
  return { ...unhashed, hash: entryHash(unhashed) };
}

/** Where an `audit.prune` anchor says the chain now starts: the first entry kept, and the hash it must follow. */
export interface AuditAnchor {
  readonly firstKeptId: number;
  readonly firstKeptPrevHash: string;
}

/** The anchor an `audit.prune` entry records, or null for any other entry. */
export function anchorOf(e: Pick<AuditEntry, 'action' | 'changes'>): AuditAnchor | null {
  if (e.action !== AuditAction.auditPrune || e.changes === null) return null;
  try {
    const c = JSON.parse(e.changes) as { first_kept_id?: unknown; first_kept_prev_hash?: unknown };
    return typeof c.first_kept_id === 'number' && typeof c.first_kept_prev_hash === 'string' ? { firstKeptId: c.first_kept_id, firstKeptPrevHash: c.first_kept_prev_hash } : null;
  } catch {
    return null;
  }
}

/** The first break of the chain, said of one entry. */
export interface ChainBreak {
  /** The entry where the chain breaks (the one missing, for `removed`). */
  readonly id: number;
  readonly kind: 'edited' | 'removed' | 'out_of_order';
  readonly detail: string;
}

/**
 * Checks `entry` against the one before it (`prev`, null at the chain's start, where it must
 * follow `startHash` and carry `startId`): its own hash, its number, its link. Returns the break, or null.
 */
export function checkLink(prev: AuditEntry | null, entry: AuditEntry, start: { readonly id: number; readonly hash: string }): ChainBreak | null {
  const expectedId = prev === null ? start.id : prev.id + 1;
  if (entry.id > expectedId) {
    return { id: expectedId, kind: 'removed', detail: `entry ${expectedId} is missing (${prev === null ? 'the chain should start there' : `entry ${entry.id} follows entry ${prev.id}`}): removed` };
  }
  const { hash, ...unhashed } = entry;
  if (entryHash(unhashed) !== hash) return { id: entry.id, kind: 'edited', detail: `entry ${entry.id}'s fields do not match its hash: edited` };
  const expectedPrev = prev === null ? start.hash : prev.hash;
  if (entry.prevHash !== expectedPrev) {
    return { id: entry.id, kind: 'out_of_order', detail: `entry ${entry.id} does not follow ${prev === null ? 'the chain\'s start' : `entry ${prev.id}`} (its previous hash is another's): inserted, replaced or out of order` };
  }
  return null;
}

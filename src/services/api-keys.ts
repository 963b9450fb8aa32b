/**
 * API keys for machines (docs/api.md, "API keys"): an organization's admin creates a key with a
 * name, a role never above their own and an optional expiry; the key is answered once and only
 * its hash is stored; a key is refused from the request after its revocation on. The API, the
 * console and the CLI go through here.
 */
import {
  API_KEY_NAME,
  apiKeyPrefix,
  LAST_USE_GRANULARITY_MS,
  makeApiKey,
  MAX_API_KEY_LIFETIME_MS,
  MAX_API_KEYS_PER_ORG,
  sameApiKeyHash,
  type ApiKey,
} from '../domain/api-keys.ts';
import { AuditAction, type AuditContext } from '../domain/audit.ts';
import { ErrorCode, excerpt, HookrelayError, validationError } from '../domain/errors.ts';
import { formatDuration } from '../domain/duration.ts';
import type { Permission } from '../domain/permissions.ts';
import type { Principal } from '../domain/types.ts';
import type { Store, Tx } from '../store/repos.ts';
import type { AuditTrail } from './audit.ts';
import type { OrgService } from './orgs.ts';
import type { RoleService } from './roles.ts';

export interface ApiKeyRequest {
  readonly orgId: string;
  readonly name: string;
  readonly roleName: string;
  /** How long the key lives (ms), at most MAX_API_KEY_LIFETIME_MS; null or absent: until revoked. */
  readonly expiresInMs?: number | null;
  /**
   * The permissions of whoever creates it: the key's role may grant none beyond them. Null for
   * the operator at the CLI, who may give any role (as `users add` does).
   */
  readonly creatorPermissions: readonly Permission[] | null;
}

/** A created key: the key itself, which is never available again, and its listed form. */
export interface CreatedApiKey {
  readonly key: string;
  readonly apiKey: ApiKey;
}

/** Why a request's API key was refused (the caller learns only that it is not valid). */
export type ApiKeyRefusalReason = 'unknown' | 'revoked' | 'expired';

/** The outcome of a request's key: the caller it stands for, or why it was refused (with the key's organization and name when it has a row). */
export type ApiKeyCheck =
  | { readonly ok: true; readonly principal: Principal }
  | { readonly ok: false; readonly reason: ApiKeyRefusalReason; readonly orgId: string | null; readonly name: string | null; readonly prefix: string | null };

const target = (name: string) => `api-key ${name}`;

function checkRequest(input: ApiKeyRequest): void {
  if (!API_KEY_NAME.test(input.name)) {
    throw validationError(`name ${excerpt(input.name)} is not a key name`, [{ name: 'name', reason: 'must be 1-64 of A-Z a-z 0-9 . _ -, starting with a letter or digit' }]);
  }
  const expires = input.expiresInMs ?? null;
  if (expires !== null && (!Number.isInteger(expires) || expires < 60_000 || expires > MAX_API_KEY_LIFETIME_MS)) {
    throw validationError(`the expiry must be between 1m and ${formatDuration(MAX_API_KEY_LIFETIME_MS)}`, [
      { name: 'expires_in', reason: `must be between 1m and ${formatDuration(MAX_API_KEY_LIFETIME_MS)}` },
    ]);
  }
}

export function createApiKeyService(store: Store, orgs: OrgService, roles: RoleService, audit: AuditTrail) {
  /** The checks of a creation that need the database, then the row. */
  async function insertKey(tx: Tx, by: AuditContext, input: ApiKeyRequest, made: ReturnType<typeof makeApiKey>): Promise<ApiKey> {
    await orgs.require(input.orgId, tx);
    const role = await roles.require(input.roleName, tx);
    const beyond = input.creatorPermissions === null ? [] : role.permissions.filter((p) => !input.creatorPermissions?.includes(p));
    if (beyond.length > 0) {
      throw new HookrelayError(ErrorCode.apiKeyRoleTooHigh, `the role ${role.name} grants ${beyond.join(', ')}, which your role does not; a key's role is never above its creator's`);
    }
    if ((await tx.apiKeys.findByName(input.orgId, input.name)) !== null) {
      throw new HookrelayError(ErrorCode.apiKeyExists, `organization "${input.orgId}" already has a key named ${excerpt(input.name)}; revoke it or choose another name`);
    }
    const now = store.clock.now();
    if ((await tx.apiKeys.countLive(input.orgId, now)) >= MAX_API_KEYS_PER_ORG) {
      throw new HookrelayError(ErrorCode.apiKeyLimit, `organization "${input.orgId}" has ${MAX_API_KEYS_PER_ORG} keys, the most it may hold; revoke one first`);
    }
    const expiresAt = input.expiresInMs == null ? null : now + input.expiresInMs;
    const row = { orgId: input.orgId, name: input.name, roleName: role.name, prefix: made.prefix, hash: made.hash, createdBy: by.actor.name, expiresAt };
    const key = await tx.apiKeys.insert(row, now);
    if (key === null) throw new HookrelayError(ErrorCode.apiKeyExists, `organization "${input.orgId}" already has a key named ${excerpt(input.name)}`);
    return key;
  }

  /** Records a use at most once a LAST_USE_GRANULARITY_MS per key; a hint, never worth failing or delaying the request for long. */
  async function noteUse(key: ApiKey, now: number): Promise<void> {
    if (key.lastUsedAt !== null && now - key.lastUsedAt < LAST_USE_GRANULARITY_MS) return;
    try {
      await store.transaction((tx) => tx.apiKeys.touch(key.id, now, LAST_USE_GRANULARITY_MS), { durable: false, lockWait: { maxWaitMs: 1000 } });
    } catch {
      // A busy database: the next use a minute on writes it.
    }
  }

  return {
    /** Creates a key; the answer holds the key itself, which nothing can show again. */
    create(by: AuditContext, input: ApiKeyRequest): Promise<CreatedApiKey> {
      return audit.change(by, { action: AuditAction.apiKeyCreate, orgId: input.orgId, target: target(input.name) }, async (rec) => {
        checkRequest(input);
        const made = makeApiKey();
        const apiKey = await store.transaction(async (tx) => {
          const key = await insertKey(tx, by, input, made);
          const changes = { role_name: { before: null, after: key.roleName }, prefix: { before: null, after: key.prefix }, expires_at: { before: null, after: key.expiresAt === null ? null : new Date(key.expiresAt).toISOString() } };
          await rec.record(tx, { changes });
          return key;
        });
        return { key: made.key, apiKey };
      });
    },

    /** The organization's keys that are not revoked (expired ones too), by name; never a secret. */
    list(orgId: string): Promise<ApiKey[]> {
      return store.read(async (tx) => {
        await orgs.require(orgId, tx);
        return tx.apiKeys.listByOrg(orgId);
      });
    },

    /** Revokes the organization's key of this name: the next request with it is refused. */
    revoke(by: AuditContext, orgId: string, name: string): Promise<ApiKey> {
      return audit.change(by, { action: AuditAction.apiKeyRevoke, orgId, target: target(name) }, (rec) =>
        store.transaction(async (tx) => {
          const key = await tx.apiKeys.findByName(orgId, name);
          if (key === null) {
            throw new HookrelayError(ErrorCode.apiKeyNotFound, `organization "${orgId}" has no key named ${excerpt(name)} (or it is revoked already)`, {
              invalidParams: [{ name: 'name', reason: 'is not the name of a key of this organization' }],
            });
          }
          const now = store.clock.now();
          await tx.apiKeys.revoke(key.id, now);
          await rec.record(tx, { changes: { revoked_at: { before: null, after: new Date(now).toISOString() }, prefix: key.prefix } });
          return { ...key, revokedAt: now };
        }),
      );
    },

    /**
     * The caller a request's key stands for (its organization, its role's current permissions,
     * the name `api-key:<name>`), or why it is refused. Read per request: a revocation or a role
     * change holds from the next request on.
     */
    async check(key: string): Promise<ApiKeyCheck> {
      const prefix = apiKeyPrefix(key);
      if (prefix === null) return { ok: false, reason: 'unknown', orgId: null, name: null, prefix: null };
      const now = store.clock.now();
      const found = await store.read(async (tx) => {
        const stored = await tx.apiKeys.byPrefix(prefix);
        if (stored === null || !sameApiKeyHash(key, stored.hash)) return null;
        return { stored, role: await tx.roles.get(stored.roleName) };
      });
      if (found === null) return { ok: false, reason: 'unknown', orgId: null, name: null, prefix };
      const { stored, role } = found;
      const refused = stored.revokedAt !== null ? 'revoked' : stored.expiresAt !== null && stored.expiresAt <= now ? 'expired' : null;
      if (refused !== null) return { ok: false, reason: refused, orgId: stored.orgId, name: stored.name, prefix };
      await noteUse(stored, now);
      return { ok: true, principal: { orgId: stored.orgId, email: `api-key:${stored.name}`, roleName: stored.roleName, permissions: role?.permissions ?? [] } };
    },
  };
}
export type ApiKeyService = ReturnType<typeof createApiKeyService>;

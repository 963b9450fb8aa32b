import jwt from 'jsonwebtoken';
import { createPrivateKey, randomUUID, sign, type KeyObject } from 'node:crypto';
import type { Config } from '../config/load.ts';
import type { Clock } from '../domain/clock.ts';
import { formatDuration } from '../domain/duration.ts';
import { ErrorCode, HookrelayError, validationError } from '../domain/errors.ts';
import { AuditAction, type AuditContext } from '../domain/audit.ts';
import { iso } from '../domain/iso.ts';
import type { AuditTrail } from './audit.ts';
import type { AuthKeys } from './auth-keys.ts';
import type { UserService } from './users.ts';

/**
 * Issues an access token the daemon accepts, for an existing user: the configured e-mail and
 * organization claims, `exp` = now + `ttlMs`, and `iss`/`aud` when configured.
 */
export async function issueToken(
  deps: { keys: AuthKeys; auth: Config['auth']; users: UserService; clock: Clock },
  input: { orgId: string; email: string; ttlMs: number },
): Promise<{ token: string; expiresAt: number }> {
  checkIssuable(deps, input.ttlMs);
  const principal = await deps.users.principal(input.orgId, input.email);
  if (!principal) {
    throw new HookrelayError(ErrorCode.userNotFound, `no user with e-mail "${input.email}" in organization "${input.orgId}"; add one with: hookrelay users add`);
  }
  return signToken(deps, { orgId: principal.orgId, email: principal.email }, input.ttlMs);
}

/**
 * issueToken, recorded in the audit trail (`token.issue`, or `console_link.issue` for a console
 * link): who it was issued for, by whom, and until when; never the token.
 */
export async function issueAuditedToken(
  deps: { keys: AuthKeys; auth: Config['auth']; users: UserService; clock: Clock; audit: AuditTrail },
  by: AuditContext,
  input: { orgId: string; email: string; ttlMs: number; purpose: 'token' | 'console_link' },
): Promise<{ token: string; expiresAt: number }> {
  const action = input.purpose === 'console_link' ? AuditAction.consoleLinkIssue : AuditAction.tokenIssue;
  return deps.audit.change(by, { action, orgId: input.orgId, target: input.email }, async (rec) => {
    const issued = await issueToken(deps, input);
    await rec.recordAlone({ changes: { expires_at: iso(issued.expiresAt), ttl_seconds: Math.round(input.ttlMs / 1000) } });
    return issued;
  });
}

/** Throws unless a token with this lifetime can be signed here (a private key, a lifetime within the limit). */
function checkIssuable(deps: { keys: AuthKeys; auth: Config['auth'] }, ttlMs: number): asserts deps is { keys: AuthKeys & { signKey: string }; auth: Config['auth'] } {
  const { keys, auth } = deps;
  if (keys.signKey === null) {
    throw new HookrelayError(
      ErrorCode.keyUnavailable,
      `cannot issue ${keys.algorithm} tokens without a private key; set auth.privateKeyFile, or issue tokens with your identity provider`,
    );
  }
  if (ttlMs > auth.maxTokenLifetime) {
    throw validationError(`the token lifetime ${formatDuration(ttlMs)} is longer than the cap, auth.maxTokenLifetime (${formatDuration(auth.maxTokenLifetime)}): ask for a shorter --ttl, or raise auth.maxTokenLifetime in the configuration`, [
      { name: 'ttl', reason: `must be at most auth.maxTokenLifetime (${formatDuration(auth.maxTokenLifetime)}); got ${formatDuration(ttlMs)}` },
    ]);
  }
}

/**
 * Signs a token for `principal` as issueToken does, without looking the user up (issueToken
 * does; tests that seeded the user call this directly).
 */
export function signToken(deps: { keys: AuthKeys; auth: Config['auth']; clock: Clock }, principal: { orgId: string; email: string }, ttlMs: number): { token: string; expiresAt: number } {
  checkIssuable(deps, ttlMs);
  const { keys, auth } = deps;
  const nowSeconds = Math.floor(deps.clock.now() / 1000);
  const exp = nowSeconds + Math.max(1, Math.round(ttlMs / 1000));
  const payload: Record<string, unknown> = {
    [auth.emailClaim]: principal.email,
    [auth.organizationClaim]: principal.orgId,
    iat: nowSeconds,
    exp,
    jti: randomUUID(),
  };
  if (auth.issuer !== null) payload.iss = auth.issuer;
  if (auth.audience !== null) payload.aud = auth.audience;
  const token =
    keys.algorithm === 'EdDSA'
      ? signEdDsa(payload, keys.signKey)
      : jwt.sign(payload, keys.signKey, { algorithm: keys.algorithm });
  return { token, expiresAt: exp * 1000 };
}

/** A compact JWS signed with Ed25519 (RFC 8037); jsonwebtoken has no EdDSA, api/auth.ts verifies it. */
function signEdDsa(payload: Record<string, unknown>, privateKeyPem: string): string {
  let key: KeyObject;
  try {
    key = createPrivateKey(privateKeyPem);
  } catch (err) {
    throw new HookrelayError(ErrorCode.keyUnavailable, 'auth.privateKeyFile does not hold a PEM private key', { cause: err });
  }
  if (key.asymmetricKeyType !== 'ed25519') {
    throw new HookrelayError(ErrorCode.keyUnavailable, `EdDSA needs an Ed25519 private key; auth.privateKeyFile holds a ${key.asymmetricKeyType ?? 'secret'} key`);
  }
  const segment = (value: Record<string, unknown>) => Buffer.from(JSON.stringify(value)).toString('base64url');
  const signingInput = `${segment({ alg: 'EdDSA', typ: 'JWT' })}.${segment(payload)}`;
  return `${signingInput}.${sign(null, Buffer.from(signingInput), key).toString('base64url')}`;
}

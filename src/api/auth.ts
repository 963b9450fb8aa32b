import type { Context, Middleware, Next } from 'koa';
import koaJwt from 'koa-jwt';
import type { Config } from '../config/load.ts';
import { ErrorCode, HookrelayError } from '../domain/errors.ts';
import type { Permission } from '../domain/permissions.ts';
import type { Principal } from '../domain/types.ts';
import type { AuthKeys } from '../services/auth-keys.ts';
import type { UserService } from '../services/users.ts';

export const REALM = 'hookrelay';

/** A 401 carrying the RFC 6750 `WWW-Authenticate` challenge to send with it. */
export class AuthError extends HookrelayError {
  readonly challenge: string;
  constructor(code: typeof ErrorCode.missingToken | typeof ErrorCode.invalidToken, message: string) {
    super(code, message);
    this.challenge =
      code === ErrorCode.missingToken
        ? `Bearer realm="${REALM}"`
        : `Bearer realm="${REALM}", error="invalid_token", error_description="${message.replace(/["\\]/g, '')}"`;
  }
}

/** Turns the errors koa-jwt and jsonwebtoken raise into a client-safe explanation. */
function describeJwtFailure(err: { message?: string; originalError?: { name?: string; message?: string } }): AuthError {
  const original = err.originalError;
  if (original === undefined) {
    if (err.message === 'Token not found') return new AuthError(ErrorCode.missingToken, 'Send an access token: Authorization: Bearer <JWT>');
    return new AuthError(ErrorCode.invalidToken, 'The Authorization header must have the form "Bearer <JWT>"');
  }
  switch (original.name) {
    case 'TokenExpiredError':
      return new AuthError(ErrorCode.invalidToken, 'The token has expired; issue a new one');
    case 'NotBeforeError':
      return new AuthError(ErrorCode.invalidToken, 'The token is not valid yet (nbf)');
    default: {
      const m = original.message ?? '';
      if (m.startsWith('jwt audience invalid')) return new AuthError(ErrorCode.invalidToken, 'The token audience (aud) is not accepted');
      if (m.startsWith('jwt issuer invalid')) return new AuthError(ErrorCode.invalidToken, 'The token issuer (iss) is not accepted');
      if (m === 'invalid algorithm') return new AuthError(ErrorCode.invalidToken, 'The token is signed with an algorithm this server does not accept');
      return new AuthError(ErrorCode.invalidToken, 'The token could not be verified');
    }
  }
}

/**
 * Authentication chain: koa-jwt verifies the signature with the one pinned algorithm (plus
 * iss/aud when configured, with bounded clock tolerance); then `exp` and the identity claims
 * are required, and the caller's role is read from the store, so role changes apply at once.
 */
export function authenticate(deps: { keys: AuthKeys; auth: Config['auth']; users: UserService }): Middleware {
  const { auth } = deps;
  const options: koaJwt.Options & { clockTolerance: number } = {
    secret: deps.keys.verifyKey,
    algorithms: [deps.keys.algorithm],
    key: 'jwt',
    debug: true,
    clockTolerance: auth.clockToleranceSeconds,
    ...(auth.issuer !== null ? { issuer: auth.issuer } : {}),
    ...(auth.audience !== null ? { audience: auth.audience } : {}),
  };
  const verify = koaJwt(options);

  return async function authenticateCaller(ctx: Context, next: Next): Promise<void> {
    try {
      await verify(ctx, async () => {});
    } catch (err) {
      if ((err as { status?: number }).status === 401) throw describeJwtFailure(err as Parameters<typeof describeJwtFailure>[0]);
      throw err;
    }
    const claims = ctx.state.jwt as Record<string, unknown>;
    if (typeof claims.exp !== 'number') throw new AuthError(ErrorCode.invalidToken, 'The token has no expiry (exp); tokens must expire');
    const email = claims[auth.emailClaim];
    const orgId = claims[auth.organizationClaim];
    if (typeof email !== 'string' || typeof orgId !== 'string') {
      throw new AuthError(ErrorCode.invalidToken, `The token must carry the claims "${auth.emailClaim}" (e-mail) and "${auth.organizationClaim}" (organization id)`);
    }
    const principal = deps.users.principal(orgId, email);
    if (principal === null) throw new AuthError(ErrorCode.invalidToken, 'The token subject is not a user of its organization');
    ctx.state.principal = principal;
    await next();
  };
}

/** Lets the request through only if the caller's current role grants `permission`. */
export function requirePermission(permission: Permission): Middleware {
  return async function checkPermission(ctx: Context, next: Next): Promise<void> {
    const principal = ctx.state.principal as Principal | undefined;
    if (!principal?.permissions.includes(permission)) {
      ctx.set('WWW-Authenticate', `Bearer realm="${REALM}", error="insufficient_scope"`);
      throw new HookrelayError(ErrorCode.forbidden, `Your role (${principal?.roleName ?? 'none'}) does not allow this operation; it needs the permission ${permission}`);
    }
    await next();
  };
}

import { createPublicKey, verify as verifySignature, type KeyObject } from 'node:crypto';
import type { VerifyOptions } from 'jsonwebtoken';
import type { Context, Middleware, Next } from 'koa';
import koaJwt from 'koa-jwt';
import type { Config } from '../config/load.ts';
import type { Clock } from '../domain/clock.ts';
import { formatDuration } from '../domain/duration.ts';
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

const invalidToken = (message: string) => new AuthError(ErrorCode.invalidToken, message);
const UNVERIFIABLE = 'The token could not be verified';
const WRONG_ALGORITHM = 'The token is signed with an algorithm this server does not accept';

/** RFC 6750 credentials: `Bearer` 1*SP b64token (the scheme is case-insensitive). */
const BEARER_CREDENTIALS = /^Bearer +([A-Za-z0-9\-._~+/]+=*)$/i;

/**
 * The token of an `Authorization: Bearer <token>` header, or null when the header is absent or
 * has another form. The one parser of that header (authentication and the rate limit share it).
 */
export function bearerCredentials(header: string): string | null {
  return BEARER_CREDENTIALS.exec(header.trim())?.[1] ?? null;
}

/** The bearer token of the request, or the 401 that says what is wrong with the header. */
function bearerToken(ctx: Context): string {
  const header = ctx.get('Authorization');
  if (header.trim() === '') throw new AuthError(ErrorCode.missingToken, 'Send an access token: Authorization: Bearer <JWT>');
  const token = bearerCredentials(header);
  if (token === null) throw invalidToken('The Authorization header must have the form "Bearer <JWT>"');
  return token;
}

/** A token whose signature verified: its protected header and its payload (not checked yet). */
interface VerifiedToken {
  readonly header: Record<string, unknown>;
  readonly payload: unknown;
}

/**
 * Checks the signature of the request's token with the one pinned algorithm and returns its
 * header and payload. Neither is looked at here: `checkHeader` and `checkClaims` do that for
 * every algorithm.
 */
type SignatureVerifier = (ctx: Context) => Promise<VerifiedToken>;

/** HS256, RS256, ES256: koa-jwt (jsonwebtoken), limited to the signature and the pinned algorithm. */
function koaJwtVerifier(keys: AuthKeys): SignatureVerifier {
  const options: koaJwt.Options & Pick<VerifyOptions, 'complete' | 'ignoreExpiration' | 'ignoreNotBefore'> = {
    secret: keys.verifyKey,
    algorithms: [keys.algorithm],
    key: 'jwt',
    debug: true,
    getToken: bearerToken,
    ignoreExpiration: true,
    ignoreNotBefore: true,
    // The header too, for checkHeader: jsonwebtoken itself ignores crit.
    complete: true,
  };
  const verify = koaJwt(options);
  return async function verifyWithKoaJwt(ctx) {
    try {
      await verify(ctx, async () => {});
    } catch (err) {
      if (err instanceof AuthError || (err as { status?: number }).status !== 401) throw err;
      // jsonwebtoken's messages name expected values and internals; the client gets one of two sentences.
      const original = (err as { originalError?: { message?: string } }).originalError;
      throw invalidToken(original?.message === 'invalid algorithm' ? WRONG_ALGORITHM : UNVERIFIABLE);
    }
    const { header, payload } = ctx.state.jwt as { header: Record<string, unknown>; payload: unknown };
    return { header, payload };
  };
}

const SEGMENT = /^[A-Za-z0-9_-]*$/;

/** A base64url JSON segment of a compact JWS as an object, or null. */
function decodeSegment(segment: string): Record<string, unknown> | null {
  try {
    const value: unknown = JSON.parse(Buffer.from(segment, 'base64url').toString('utf8'));
    return typeof value === 'object' && value !== null && !Array.isArray(value) ? (value as Record<string, unknown>) : null;
  } catch {
    return null;
  }
}

/**
 * EdDSA (RFC 8037, Ed25519) with node:crypto, which jsonwebtoken 9 does not implement: the
 * header's `alg` must be exactly "EdDSA" and the signature must cover `header.payload` as sent.
 */
function edDsaVerifier(publicKeyPem: string): SignatureVerifier {
  let key: KeyObject;
  try {
    key = createPublicKey(publicKeyPem);
  } catch (err) {
    throw new HookrelayError(ErrorCode.config, 'auth.publicKeyFile does not hold a PEM public key', { cause: err });
  }
  if (key.asymmetricKeyType !== 'ed25519') {
    throw new HookrelayError(ErrorCode.config, `auth.algorithm EdDSA needs an Ed25519 public key; auth.publicKeyFile holds a ${key.asymmetricKeyType ?? 'secret'} key`);
  }
  return async function verifyEdDsa(ctx) {
    const parts = bearerToken(ctx).split('.');
    if (parts.length !== 3 || !parts.every((part) => SEGMENT.test(part))) throw invalidToken(UNVERIFIABLE);
    const [header, payload, signature] = parts as [string, string, string];
    const decodedHeader = decodeSegment(header);
    if (decodedHeader === null) throw invalidToken(UNVERIFIABLE);
    if (decodedHeader.alg !== 'EdDSA') throw invalidToken(WRONG_ALGORITHM);
    if (!verifySignature(null, Buffer.from(`${header}.${payload}`), key, Buffer.from(signature, 'base64url'))) {
      throw invalidToken(UNVERIFIABLE);
    }
    return { header: decodedHeader, payload: decodeSegment(payload) };
  };
}

/**
 * The header rule every token meets, whatever its algorithm: no `crit`. RFC 7515 §4.1.11 has a
 * recipient refuse a token whose `crit` names an extension it does not understand (one that
 * changes what the token means, or how it is verified), and hookrelay understands none; an
 * empty list or a value that is not a list is malformed, refused as well. The signature has
 * been verified: this reads the header the issuer signed.
 */
export function checkHeader(header: Record<string, unknown>): void {
  if (Object.hasOwn(header, 'crit')) {
    throw invalidToken('The token header has crit (critical extensions), which this server does not implement; issue a token without crit');
  }
}

/**
 * The claim rules every token meets, whatever its algorithm: a JSON object payload, `exp`
 * required (NumericDate, seconds), `nbf` honoured, `iss` and `aud` checked when configured,
 * each time comparison allowing `auth.clockTolerance` of skew (whole seconds). `nowMs` is epoch ms.
 */
export function checkClaims(payload: unknown, auth: Config['auth'], nowMs: number): Record<string, unknown> {
  if (typeof payload !== 'object' || payload === null || Array.isArray(payload)) throw invalidToken('The token payload must be a JSON object');
  const claims = payload as Record<string, unknown>;
  const now = Math.floor(nowMs / 1000);
  const leeway = Math.floor(auth.clockTolerance / 1000);
  const isNumericDate = (value: unknown): value is number => typeof value === 'number' && Number.isFinite(value);

  if (claims.exp === undefined) throw invalidToken('The token has no expiry (exp); tokens must expire');
  if (!isNumericDate(claims.exp)) throw invalidToken('The token expiry (exp) must be a number of seconds since the epoch');
  if (now >= claims.exp + leeway) throw invalidToken('The token has expired; issue a new one');
  // A token that lives longer than auth.maxTokenLifetime is refused, whether it says so (iat)
  // or not (exp that far ahead): a leaked token must not be good for years.
  const maxSeconds = Math.floor(auth.maxTokenLifetime / 1000);
  if (claims.iat !== undefined && !isNumericDate(claims.iat)) throw invalidToken('The token iat must be a number of seconds since the epoch');
  if ((claims.iat !== undefined && claims.exp - claims.iat > maxSeconds) || claims.exp - now > maxSeconds + leeway) {
    throw invalidToken(`The token lives longer than this server accepts (auth.maxTokenLifetime, ${formatDuration(auth.maxTokenLifetime)}); issue a shorter-lived one`);
  }
  if (claims.nbf !== undefined) {
    if (!isNumericDate(claims.nbf)) throw invalidToken('The token nbf must be a number of seconds since the epoch');
    if (claims.nbf > now + leeway) throw invalidToken('The token is not valid yet (nbf)');
  }
  if (auth.issuer !== null && claims.iss !== auth.issuer) throw invalidToken('The token issuer (iss) is not accepted');
  if (auth.audience !== null) {
    const audiences: unknown[] = Array.isArray(claims.aud) ? claims.aud : [claims.aud];
    if (!audiences.includes(auth.audience)) throw invalidToken('The token audience (aud) is not accepted');
  }
  return claims;
}

/** Verifies the identity provider's tokens (provider-auth.ts); chosen for a token whose iss is `issuer`. */
export interface ProviderVerifier {
  readonly issuer: string;
  principal(ctx: Context, token: string): Promise<Principal>;
}

/** The iss of a compact JWS, read before its signature is checked, only to choose who verifies it; null when absent or unreadable. */
function unverifiedIssuer(token: string): string | null {
  const payload = token.split('.')[1];
  const iss = payload === undefined || !SEGMENT.test(payload) ? undefined : decodeSegment(payload)?.iss;
  return typeof iss === 'string' ? iss : null;
}

/**
 * Who verifies the token: the identity provider when its iss is the provider's, the daemon's
 * own key otherwise; a token with any other iss is refused at once, naming the accepted ones
 * (never tried against every key).
 */
function chooseVerifier(token: string, auth: Config['auth'], provider: ProviderVerifier | undefined): 'provider' | 'own' {
  if (provider === undefined) return 'own';
  const iss = unverifiedIssuer(token);
  if (iss === provider.issuer) return 'provider';
  if (iss !== null && iss !== auth.issuer) {
    throw invalidToken(`The token issuer (iss) is not accepted: this server accepts tokens of the identity provider ${provider.issuer}${auth.issuer === null ? '' : ` and of ${auth.issuer}`} (auth.provider.issuer, auth.issuer)`);
  }
  return 'own';
}

/**
 * Authentication chain: the signature is verified with the one pinned algorithm (koa-jwt, or
 * node:crypto for EdDSA); then the header rule, the claim rules and the identity claims are
 * checked, and the caller's role is read from the store, so role changes apply at once. With
 * `provider` (auth.provider), a token whose iss is the provider's goes to it instead
 * (chooseVerifier). Throws at creation when the configured key cannot serve the algorithm.
 */
export function authenticate(deps: { keys: AuthKeys; auth: Config['auth']; users: UserService; clock: Clock; provider?: ProviderVerifier }): Middleware {
  const { auth } = deps;
  const verify = deps.keys.algorithm === 'EdDSA' ? edDsaVerifier(deps.keys.verifyKey) : koaJwtVerifier(deps.keys);

  return async function authenticateCaller(ctx: Context, next: Next): Promise<void> {
    if (deps.provider !== undefined && chooseVerifier(bearerToken(ctx), auth, deps.provider) === 'provider') {
      ctx.state.principal = await deps.provider.principal(ctx, bearerToken(ctx));
      return next();
    }
    const { header, payload } = await verify(ctx);
    checkHeader(header);
    const claims = checkClaims(payload, auth, deps.clock.now());
    const email = claims[auth.emailClaim];
    const orgId = claims[auth.organizationClaim];
    if (typeof email !== 'string' || typeof orgId !== 'string') {
      throw invalidToken(`The token must carry the claims "${auth.emailClaim}" (e-mail) and "${auth.organizationClaim}" (organization id)`);
    }
    const principal = await deps.users.principal(orgId, email);
    if (principal === null) throw invalidToken('The token subject is not a user of its organization');
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

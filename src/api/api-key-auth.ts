/**
 * API keys beside JWTs: a bearer token that starts with `hkr_` is an API key
 * (domain/api-keys.ts) and is checked against the store here; any other goes to the JWT chain
 * (auth.ts), which never sees a key. A refused key is a 401 like a bad token, carrying what the
 * audit trail records of it (audit-context.ts: `api_key.use_refused`).
 */
import type { Context, Middleware, Next } from 'koa';
import { looksLikeApiKey } from '../domain/api-keys.ts';
import { ErrorCode } from '../domain/errors.ts';
import type { ApiKeyCheck, ApiKeyService } from '../services/api-keys.ts';
import { AuthError, bearerCredentials } from './auth.ts';

type Refusal = Extract<ApiKeyCheck, { ok: false }>;

const MESSAGES: Readonly<Record<Refusal['reason'], string>> = {
  unknown: 'The API key is not valid',
  revoked: 'The API key has been revoked',
  expired: 'The API key has expired; create a new one',
};

/** A 401 for a request's API key, with the key's organization, name and prefix when it has a row (never the key). */
export class ApiKeyRefusal extends AuthError {
  readonly refusal: Refusal;
  constructor(refusal: Refusal) {
    // Revoked or expired is said only to a caller whose key matched a stored hash: its holder.
    super(ErrorCode.invalidToken, MESSAGES[refusal.reason]);
    this.refusal = refusal;
  }
}

/** Authenticates a request by its API key when it sends one, by `jwt` otherwise. */
export function authenticateWithApiKeys(apiKeys: Pick<ApiKeyService, 'check'>, jwt: Middleware): Middleware {
  return async function authenticateKeyOrToken(ctx: Context, next: Next): Promise<void> {
    const token = bearerCredentials(ctx.get('Authorization'));
    if (token === null || !looksLikeApiKey(token)) return jwt(ctx, next);
    const check = await apiKeys.check(token);
    if (!check.ok) throw new ApiKeyRefusal(check);
    ctx.state.principal = check.principal;
    await next();
  };
}

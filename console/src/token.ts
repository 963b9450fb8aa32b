/**
 * The access token on the page's side: read from a sign-in link's fragment, decoded for display
 * and for its expiry. Nothing here verifies a signature: the API does, on every request, and it
 * reads the caller's role from its store. No DOM access (unit-tested under Node).
 */

/** sessionStorage key of the signed-in token. */
export const TOKEN_KEY = 'hookrelay.token';

/** Longest token the page accepts (the API's own tokens are a few hundred characters). */
const MAX_TOKEN_LENGTH = 16_384;

const JWT_SHAPE = /^[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]*$/;

/**
 * The token of a sign-in link's fragment, `#token=JWT` (other `&`-separated parameters are
 * ignored), or null when the fragment carries none.
 */
export function tokenFromHash(hash: string): string | null {
  const fragment = hash.startsWith('#') ? hash.slice(1) : hash;
  for (const part of fragment.split('&')) {
    if (!part.startsWith('token=')) continue;
    let value: string;
    try {
      value = decodeURIComponent(part.slice('token='.length));
    } catch {
      return null;
    }
    const token = normalizeToken(value);
    return token === '' ? null : token;
  }
  return null;
}

/** A pasted token without what often comes with it: spaces, line breaks, a `Bearer ` prefix. */
export function normalizeToken(input: string): string {
  return input.trim().replace(/^Bearer\s+/i, '').replace(/\s+/g, '');
}

/** Whether `token` has the form of a compact JWS (three base64url parts). */
export function looksLikeJwt(token: string): boolean {
  return token.length <= MAX_TOKEN_LENGTH && JWT_SHAPE.test(token);
}

/** The decoded payload of a JWT as an object, or null when it is not one. Never throws. */
export function decodePayload(token: string): Record<string, unknown> | null {
  if (!looksLikeJwt(token)) return null;
  const segment = token.split('.')[1] ?? '';
  try {
    const base64 = segment.replace(/-/g, '+').replace(/_/g, '/').padEnd(Math.ceil(segment.length / 4) * 4, '=');
    const binary = atob(base64);
    const bytes = Uint8Array.from(binary, (c) => c.charCodeAt(0));
    const value: unknown = JSON.parse(new TextDecoder('utf-8', { fatal: true }).decode(bytes));
    return typeof value === 'object' && value !== null && !Array.isArray(value) ? (value as Record<string, unknown>) : null;
  } catch {
    return null;
  }
}

/** Who the token says the caller is: for display only (the API decides what the caller may do). */
export interface Identity {
  /** The organization id (claim `org`, the daemon's default `auth.organizationClaim`). */
  readonly org: string | null;
  /** The e-mail (claim `sub`, the default `auth.emailClaim`, or `email`). */
  readonly email: string | null;
  /** A `role` claim when the token carries one (the daemon's own tokens need not). */
  readonly role: string | null;
  /** `exp` in epoch milliseconds, or null when the token has none. */
  readonly expiresAt: number | null;
}

const text = (value: unknown): string | null => (typeof value === 'string' && value.trim() !== '' ? value : null);

export function identityOf(payload: Record<string, unknown>): Identity {
  const sub = text(payload.sub);
  const exp = payload.exp;
  return {
    org: text(payload.org) ?? text(payload.organization_id),
    email: sub?.includes('@') ? sub : (text(payload.email) ?? sub),
    role: text(payload.role),
    expiresAt: typeof exp === 'number' && Number.isFinite(exp) ? exp * 1000 : null,
  };
}

/** Whether the token's `exp` has passed at `nowMs` (a token without `exp` is left to the API). */
export function isExpired(identity: Identity, nowMs: number): boolean {
  return identity.expiresAt !== null && nowMs >= identity.expiresAt;
}

/**
 * Whether a role may change things, as far as the page can tell before asking: false for the
 * built-in viewer role, true for the built-in admin role, null when unknown (no role claim, or a
 * role an operator added). A 403 from the API settles it for the rest of the session.
 */
export function canManageFromRole(role: string | null): boolean | null {
  if (role === 'saas_viewer') return false;
  if (role === 'saas_admin') return true;
  return null;
}

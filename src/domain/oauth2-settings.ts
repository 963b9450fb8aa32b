/**
 * OAuth2 client credentials a webhook gets its receiver's access tokens with (RFC 6749 section
 * 4.4): the checks at registration, what answers may show (never the client secret), their
 * stored form, and the token request's form. Pure.
 */
import type { InvalidParam } from './errors.ts';
import { checkWebhookUrl } from './validation.ts';

export const OAuth2ClientAuth = {
  /** The client id and secret in an HTTP Basic `Authorization` header (RFC 6749 section 2.3.1): the default. */
  basic: 'client_secret_basic',
  /** The client id and secret as `client_id` and `client_secret` in the form body. */
  post: 'client_secret_post',
} as const;
export type OAuth2ClientAuth = (typeof OAuth2ClientAuth)[keyof typeof OAuth2ClientAuth];

/** What may be shown of a webhook's OAuth2 settings: never the client secret. */
export interface OAuth2Settings {
  readonly tokenUrl: string;
  readonly clientId: string;
  /** Space-separated scopes asked for; null: none asked (the token service's default). */
  readonly scope: string | null;
  /** Sent as `audience` (Auth0, Okta and others pick the token's audience by it); null: not sent. */
  readonly audience: string | null;
  readonly clientAuth: OAuth2ClientAuth;
  /**
   * Changes at every registration that sets `oauth2` (the secret may have changed while the
   * rest did not): a token fetched under another revision is never used.
   */
  readonly revision: string;
}

export const MAX_CLIENT_ID_LENGTH = 255;
export const MAX_CLIENT_SECRET_LENGTH = 1024;
export const MAX_SCOPE_LENGTH = 1024;
export const MAX_AUDIENCE_LENGTH = 1024;

/** RFC 6749 appendix A: client ids and secrets are VSCHARs (printable ASCII and the space). */
const VSCHAR = /^[\x20-\x7e]+$/;
/** A scope list: NQCHAR tokens (no space, quote or backslash) separated by single spaces. */
const SCOPE = /^[\x21\x23-\x5b\x5d-\x7e]+( [\x21\x23-\x5b\x5d-\x7e]+)*$/;
const FIELDS = new Set(['token_url', 'client_id', 'client_secret', 'scope', 'audience', 'client_auth']);

/** The settings and the secret an `oauth2` object of register_webhook holds, checked (no revision yet). */
export interface OAuth2Input {
  readonly settings: Omit<OAuth2Settings, 'revision'>;
  readonly clientSecret: string;
}

/**
 * Checks `oauth2` as register_webhook takes it: `{ token_url, client_id, client_secret, scope?,
 * audience?, client_auth? }`. The token URL is checked as a webhook URL is (absolute, no
 * user-info or fragment; the scheme and the addresses by the URL policy, in services). Every
 * problem named by its field; the secret is never quoted.
 */
export function checkOAuth2(input: unknown): { ok: true; value: OAuth2Input } | { ok: false; problems: InvalidParam[] } {
  const problems: InvalidParam[] = [];
  const problem = (field: string, reason: string) => problems.push({ name: field === '' ? 'oauth2' : `oauth2.${field}`, reason });
  if (typeof input !== 'object' || input === null || Array.isArray(input)) {
    problem('', 'must be an object: {"token_url": ..., "client_id": ..., "client_secret": ..., "scope": ...}, or null to remove it');
    return { ok: false, problems };
  }
  const o = input as Record<string, unknown>;
  for (const key of Object.keys(o)) if (!FIELDS.has(key)) problem('', `has no field ${JSON.stringify(key.slice(0, 40))}; the fields are ${[...FIELDS].join(', ')}`);
  const urlProblem = o.token_url === undefined || o.token_url === null ? 'is required' : checkWebhookUrl(o.token_url);
  if (urlProblem !== null) problem('token_url', urlProblem);
  const text = (field: string, max: number, required: boolean, pattern: RegExp, shape: string): string | null => {
    const v = o[field];
    if (v === undefined || v === null) {
      if (required) problem(field, 'is required');
      return null;
    }
    if (typeof v !== 'string') problem(field, 'must be a string');
    else if (v.length === 0 || v.length > max) problem(field, `must be 1 to ${max} characters`);
    else if (!pattern.test(v)) problem(field, shape);
    else return v;
    return null;
  };
  const clientId = text('client_id', MAX_CLIENT_ID_LENGTH, true, VSCHAR, 'must be printable ASCII characters');
  const clientSecret = text('client_secret', MAX_CLIENT_SECRET_LENGTH, true, VSCHAR, 'must be printable ASCII characters');
  const scope = text('scope', MAX_SCOPE_LENGTH, false, SCOPE, 'must be scopes separated by single spaces, each of printable ASCII characters without quotes or backslashes');
  const audience = text('audience', MAX_AUDIENCE_LENGTH, false, /^[\x21-\x7e]+$/, 'must be printable ASCII characters without spaces');
  const auth = o.client_auth ?? OAuth2ClientAuth.basic;
  if (auth !== OAuth2ClientAuth.basic && auth !== OAuth2ClientAuth.post) problem('client_auth', `must be "${OAuth2ClientAuth.basic}" (the default) or "${OAuth2ClientAuth.post}"`);
  if (problems.length > 0) return { ok: false, problems };
  return {
    ok: true,
    value: { settings: { tokenUrl: o.token_url as string, clientId: clientId!, scope, audience, clientAuth: auth as OAuth2ClientAuth }, clientSecret: clientSecret! },
  };
}

/** The stored form (JSON text), or null for none. */
export function storedOAuth2(settings: OAuth2Settings | null): string | null {
  return settings === null ? null : JSON.stringify(settings);
}

/** The settings of a stored value, or null: none, or damaged (the webhook then sends no token). */
export function parseStoredOAuth2(stored: unknown): OAuth2Settings | null {
  if (typeof stored !== 'string' || stored === '') return null;
  try {
    const v = JSON.parse(stored) as Partial<OAuth2Settings>;
    if (typeof v.tokenUrl !== 'string' || typeof v.clientId !== 'string' || typeof v.revision !== 'string') return null;
    return {
      tokenUrl: v.tokenUrl,
      clientId: v.clientId,
      scope: typeof v.scope === 'string' ? v.scope : null,
      audience: typeof v.audience === 'string' ? v.audience : null,
      clientAuth: v.clientAuth === OAuth2ClientAuth.post ? OAuth2ClientAuth.post : OAuth2ClientAuth.basic,
      revision: v.revision,
    };
  } catch {
    return null;
  }
}

/**
 * The token request of RFC 6749 section 4.4.2: its form body and its headers. With
 * client_secret_basic the id and secret are form-urlencoded, then joined by ":" and base64'd
 * (section 2.3.1); with client_secret_post they travel in the body.
 */
export function tokenRequest(settings: OAuth2Settings, clientSecret: string): { body: string; headers: Record<string, string> } {
  const form = new URLSearchParams({ grant_type: 'client_credentials' });
  if (settings.scope !== null) form.set('scope', settings.scope);
  if (settings.audience !== null) form.set('audience', settings.audience);
  const headers: Record<string, string> = { 'content-type': 'application/x-www-form-urlencoded', accept: 'application/json' };
  if (settings.clientAuth === OAuth2ClientAuth.post) {
    form.set('client_id', settings.clientId);
    form.set('client_secret', clientSecret);
  } else {
    const encode = (s: string) => encodeURIComponent(s).replace(/%20/g, '+');
    headers.authorization = `Basic ${Buffer.from(`${encode(settings.clientId)}:${encode(clientSecret)}`).toString('base64')}`;
  }
  return { body: form.toString(), headers };
}

/** A token service's answer (RFC 6749 section 5.1): the bearer token and its lifetime, or why it is not one. */
export function parseTokenAnswer(body: unknown): { ok: true; token: string; expiresInSeconds: number | null } | { ok: false; why: string } {
  if (typeof body !== 'object' || body === null) return { ok: false, why: 'its answer is not a JSON object' };
  const b = body as Record<string, unknown>;
  if (typeof b.access_token !== 'string' || b.access_token === '' || !/^[\x21-\x7e]+$/.test(b.access_token)) return { ok: false, why: 'its answer has no access_token usable in an Authorization header' };
  if (typeof b.token_type === 'string' && b.token_type.toLowerCase() !== 'bearer') return { ok: false, why: `it issued a token of type ${JSON.stringify(b.token_type.slice(0, 20))}, not Bearer` };
  const expires = typeof b.expires_in === 'number' ? b.expires_in : typeof b.expires_in === 'string' && /^\d+$/.test(b.expires_in) ? Number(b.expires_in) : null;
  return { ok: true, token: b.access_token, expiresInSeconds: expires !== null && Number.isFinite(expires) && expires > 0 ? expires : null };
}

/**
 * An RFC 6749 error code from a token service's error answer, when it gives one that is safe
 * to quote (letters, digits, "_" and "-", at most 40): `invalid_client`, `invalid_scope`...
 * Its error_description is never quoted: a service may repeat what it was sent.
 */
export function tokenErrorCode(body: unknown): string | null {
  const code = typeof body === 'object' && body !== null ? (body as Record<string, unknown>).error : undefined;
  return typeof code === 'string' && /^[A-Za-z0-9_-]{1,40}$/.test(code) ? code : null;
}

/** How long before it expires a token is replaced (ms): a tenth of its life, at least 30 s, at most half of it. */
export function refreshMarginMs(lifetimeMs: number): number {
  return Math.min(Math.max(30_000, lifetimeMs / 10), lifetimeMs / 2);
}

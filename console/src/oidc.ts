/**
 * Sign-in through the organization's identity provider (console.oidc): OpenID Connect's
 * authorization code flow with PKCE (RFC 7636, S256), the console a public client. The page asks
 * the daemon where the provider is (GET console/sign-in.json), goes to its authorization endpoint
 * with a fresh state and code challenge kept in the tab's storage, comes back with a code, and
 * exchanges it with the verifier at the token endpoint for an access token that the API verifies
 * like any other token of the provider. No DOM access (unit-tested under Node).
 */
import type { FetchLike, ResponseLike } from './api-client.ts';

/** sessionStorage key of the sign-in under way (state, verifier): read once, when the provider sends the browser back. */
export const OIDC_PENDING_KEY = 'hookrelay.oidc.pending';
/** sessionStorage key of what the provider gave besides the access token: the ID token (for sign-out) and the refresh token. */
export const OIDC_SESSION_KEY = 'hookrelay.oidc.session';
/** A sign-in not finished within this long is forgotten (the provider's codes live a minute or so anyway). */
export const PENDING_MAX_AGE_MS = 10 * 60 * 1000;

/** The provider's sign-in, as GET console/sign-in.json describes it. */
export interface ProviderSignIn {
  readonly name: string;
  readonly issuer: string;
  readonly clientId: string;
  readonly authorizationEndpoint: string;
  readonly tokenEndpoint: string;
  readonly endSessionEndpoint: string | null;
  readonly scope: string;
  readonly resource: string | null;
  readonly redirectUri: string;
}

/** What the sign-in page may offer besides links and pasted tokens. */
export type ProviderOption = { readonly kind: 'none' } | { readonly kind: 'unavailable'; readonly name: string; readonly detail: string } | { readonly kind: 'ready'; readonly provider: ProviderSignIn };

const text = (value: unknown): string | null => (typeof value === 'string' && value !== '' ? value : null);
const httpsUrl = (value: unknown): string | null => {
  const url = text(value);
  return url !== null && URL.canParse(url) && new URL(url).protocol === 'https:' ? url : null;
};

/** The answer of GET console/sign-in.json as a ProviderOption; anything unexpected is 'none'. */
export function providerOptionOf(body: unknown): ProviderOption {
  const provider = (body as { provider?: unknown } | null)?.provider;
  if (typeof provider !== 'object' || provider === null) return { kind: 'none' };
  const p = provider as Record<string, unknown>;
  const name = text(p.name) ?? 'your identity provider';
  if (typeof p.unavailable === 'string') return { kind: 'unavailable', name, detail: p.unavailable };
  const issuer = text(p.issuer);
  const clientId = text(p.client_id);
  const authorizationEndpoint = httpsUrl(p.authorization_endpoint);
  const tokenEndpoint = httpsUrl(p.token_endpoint);
  const scope = text(p.scope);
  const redirectUri = text(p.redirect_uri);
  if (issuer === null || clientId === null || authorizationEndpoint === null || tokenEndpoint === null || scope === null || redirectUri === null) return { kind: 'none' };
  return {
    kind: 'ready',
    provider: { name, issuer, clientId, authorizationEndpoint, tokenEndpoint, endSessionEndpoint: httpsUrl(p.end_session_endpoint), scope, resource: text(p.resource), redirectUri },
  };
}

/** A sign-in under way, kept in the tab's storage while the browser is at the provider. */
export interface PendingSignIn {
  readonly state: string;
  readonly verifier: string;
  /** The console page to show after sign-in (its hash route). */
  readonly returnTo: string;
  readonly createdAt: number;
}

/** base64url without padding (RFC 4648 §5), as PKCE and JWTs write bytes. */
export function base64url(bytes: Uint8Array): string {
  let binary = '';
  for (const byte of bytes) binary += String.fromCharCode(byte);
  return btoa(binary).replace(/\+/g, '-').replace(/\//g, '_').replace(/=+$/, '');
}

/** `bytes` random bytes as base64url: 32 make a 43-character PKCE verifier (RFC 7636 §4.1) or state. */
export function randomToken(bytes = 32): string {
  return base64url(crypto.getRandomValues(new Uint8Array(bytes)));
}

/** The S256 code challenge of a verifier: base64url(SHA-256(verifier)) (RFC 7636 §4.2). */
export async function codeChallenge(verifier: string): Promise<string> {
  return base64url(new Uint8Array(await crypto.subtle.digest('SHA-256', new TextEncoder().encode(verifier))));
}

/** A new sign-in: its pending record (to store) and the provider's authorization URL to go to. */
export async function beginSignIn(provider: ProviderSignIn, returnTo: string, now: number): Promise<{ pending: PendingSignIn; url: string }> {
  const pending: PendingSignIn = { state: randomToken(), verifier: randomToken(), returnTo, createdAt: now };
  const url = new URL(provider.authorizationEndpoint);
  const params: Record<string, string> = {
    response_type: 'code',
    client_id: provider.clientId,
    redirect_uri: provider.redirectUri,
    scope: provider.scope,
    state: pending.state,
    code_challenge: await codeChallenge(pending.verifier),
    code_challenge_method: 'S256',
  };
  if (provider.resource !== null) params.resource = provider.resource;
  for (const [key, value] of Object.entries(params)) url.searchParams.set(key, value);
  return { pending, url: url.href };
}

/** The pending sign-in stored as JSON, or null when there is none or it is not one. */
export function parsePending(stored: string | null): PendingSignIn | null {
  if (stored === null) return null;
  try {
    const p = JSON.parse(stored) as Record<string, unknown>;
    if (typeof p.state === 'string' && typeof p.verifier === 'string' && typeof p.returnTo === 'string' && typeof p.createdAt === 'number') {
      return { state: p.state, verifier: p.verifier, returnTo: p.returnTo, createdAt: p.createdAt };
    }
  } catch {
    // not JSON: no sign-in under way
  }
  return null;
}

/** What the provider sent the browser back with (the redirect URI's query), or null when the query is not a sign-in's answer. */
export interface ProviderAnswer {
  readonly code: string | null;
  readonly state: string | null;
  readonly iss: string | null;
  readonly error: string | null;
  readonly errorDescription: string | null;
}

export function providerAnswerOf(search: string): ProviderAnswer | null {
  const params = new URLSearchParams(search);
  const code = params.get('code');
  const error = params.get('error');
  if (code === null && error === null) return null;
  return { code, state: params.get('state'), iss: params.get('iss'), error, errorDescription: params.get('error_description') };
}

/**
 * Whether an answer may be exchanged: it must answer the sign-in this tab started (state), not
 * too long ago, and come from the provider (iss, when the provider sends it: RFC 9207). The
 * code, or the sentence the sign-in page shows.
 */
export function acceptedCode(answer: ProviderAnswer, pending: PendingSignIn | null, provider: ProviderSignIn, now: number): { ok: true; code: string } | { ok: false; reason: string } {
  if (answer.error !== null) {
    const what = answer.errorDescription === null ? answer.error : `${answer.error}: ${answer.errorDescription}`;
    return { ok: false, reason: `${provider.name} did not sign you in (${what.slice(0, 300)})` };
  }
  if (pending === null || answer.state !== pending.state) return { ok: false, reason: 'This sign-in answer is not for a sign-in started in this tab (it may be old, or opened from elsewhere); sign in again' };
  if (now - pending.createdAt > PENDING_MAX_AGE_MS) return { ok: false, reason: 'The sign-in took longer than 10 minutes; sign in again' };
  if (answer.iss !== null && answer.iss !== provider.issuer) return { ok: false, reason: `The sign-in answer comes from ${answer.iss.slice(0, 200)}, not from ${provider.issuer}; sign in again` };
  if (answer.code === null || answer.code === '') return { ok: false, reason: 'The provider sent no code; sign in again' };
  return { ok: true, code: answer.code };
}

/** What the token endpoint gave. */
export interface ProviderTokens {
  readonly accessToken: string;
  readonly idToken: string | null;
  readonly refreshToken: string | null;
}

/** A token endpoint's refusal or failure, in one sentence. */
export class TokenRequestError extends Error {}

async function tokenRequest(fetch: FetchLike, provider: ProviderSignIn, params: Record<string, string>): Promise<ProviderTokens> {
  const body = new URLSearchParams({ ...params, client_id: provider.clientId });
  if (provider.resource !== null) body.set('resource', provider.resource);
  let response: ResponseLike;
  try {
    response = await fetch(provider.tokenEndpoint, {
      method: 'POST',
      headers: { 'Content-Type': 'application/x-www-form-urlencoded', Accept: 'application/json' },
      body: body.toString(),
      credentials: 'omit',
      cache: 'no-store',
    });
  } catch {
    throw new TokenRequestError(`${provider.name}'s token endpoint could not be reached from this browser (${provider.tokenEndpoint}: check that it allows this page's origin, CORS)`);
  }
  let answer: Record<string, unknown> = {};
  try {
    const parsed: unknown = JSON.parse(await response.text());
    if (typeof parsed === 'object' && parsed !== null) answer = parsed as Record<string, unknown>;
  } catch {
    // not JSON: the status says it
  }
  if (response.status !== 200) {
    const why = text(answer.error_description) ?? text(answer.error) ?? `HTTP ${response.status}`;
    throw new TokenRequestError(`${provider.name} refused the token request (${why.slice(0, 300)})`);
  }
  const accessToken = text(answer.access_token);
  if (accessToken === null) throw new TokenRequestError(`${provider.name}'s token endpoint answered without an access token`);
  return { accessToken, idToken: text(answer.id_token), refreshToken: text(answer.refresh_token) };
}

/** Exchanges the code with the verifier (RFC 7636 §4.5). */
export function exchangeCode(fetch: FetchLike, provider: ProviderSignIn, pending: PendingSignIn, code: string): Promise<ProviderTokens> {
  return tokenRequest(fetch, provider, { grant_type: 'authorization_code', code, redirect_uri: provider.redirectUri, code_verifier: pending.verifier });
}

/** A new access token for a refresh token (the provider may rotate the refresh token too). */
export function refreshTokens(fetch: FetchLike, provider: ProviderSignIn, refreshToken: string): Promise<ProviderTokens> {
  return tokenRequest(fetch, provider, { grant_type: 'refresh_token', refresh_token: refreshToken });
}

/** The ID and refresh tokens kept beside the access token, for sign-out and refresh. */
export interface ProviderSession {
  readonly idToken: string | null;
  readonly refreshToken: string | null;
}

export function parseSession(stored: string | null): ProviderSession | null {
  if (stored === null) return null;
  try {
    const s = JSON.parse(stored) as Record<string, unknown>;
    return { idToken: text(s.idToken), refreshToken: text(s.refreshToken) };
  } catch {
    return null;
  }
}

/**
 * Where sign-out sends the browser to end the session at the provider (RP-initiated logout), back
 * to the console afterwards; null when the provider publishes no end_session_endpoint.
 */
export function endSessionUrl(provider: ProviderSignIn, idToken: string | null): string | null {
  if (provider.endSessionEndpoint === null) return null;
  const url = new URL(provider.endSessionEndpoint);
  url.searchParams.set('client_id', provider.clientId);
  url.searchParams.set('post_logout_redirect_uri', provider.redirectUri);
  if (idToken !== null) url.searchParams.set('id_token_hint', idToken);
  return url.href;
}

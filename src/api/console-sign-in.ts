/**
 * What the console's sign-in page needs to sign in through the identity provider (console.oidc):
 * GET /console/sign-in.json, public like the console's files (it holds no secret: a public
 * client's id and the provider's published endpoints). The browser runs the authorization code
 * flow with PKCE itself, as a public client: it goes to the provider's authorization endpoint,
 * comes back to the redirect URI with a code, and exchanges it at the token endpoint, the one
 * origin besides its own that the console's CSP lets it call (consoleConnectOrigins).
 */
import type { Context } from 'koa';
import type { Config } from '../config/load.ts';
import { consoleRedirectUri } from '../domain/listen.ts';
import type { ProviderKeys } from '../services/provider-keys.ts';

/** The answer of GET /console/sign-in.json. */
export interface ConsoleSignInSettings {
  /** The identity provider's sign-in, null when console.oidc.clientId is not set. */
  readonly provider:
    | null
    | { readonly name: string; readonly unavailable: string }
    | {
        readonly name: string;
        readonly issuer: string;
        readonly client_id: string;
        readonly authorization_endpoint: string;
        readonly token_endpoint: string;
        readonly end_session_endpoint: string | null;
        readonly scope: string;
        readonly resource: string | null;
        readonly redirect_uri: string;
      };
}

export function consoleSignInSettings(config: Pick<Config, 'auth' | 'console'>, keys: ProviderKeys | null, ctx: Context): ConsoleSignInSettings {
  const { oidc, publicUrl } = config.console;
  if (oidc.clientId === null) return { provider: null };
  const endpoints = keys?.endpoints() ?? null;
  if (endpoints === null) {
    return { provider: { name: oidc.displayName, unavailable: 'hookrelay has not read the identity provider\'s discovery document yet (it cannot be reached, or lists no authorization and token endpoints); sign in with a link meanwhile' } };
  }
  return {
    provider: {
      name: oidc.displayName,
      issuer: config.auth.provider.issuer!,
      client_id: oidc.clientId,
      authorization_endpoint: endpoints.authorization,
      token_endpoint: endpoints.token,
      end_session_endpoint: endpoints.endSession,
      scope: oidc.scopes.join(' '),
      resource: oidc.resource,
      redirect_uri: consoleRedirectUri(publicUrl, `${ctx.protocol}://${ctx.host}`),
    },
  };
}

/** The origins the console's page may call besides its own: the provider's token endpoint, once known. */
export function consoleConnectOrigins(config: Pick<Config, 'console'>, keys: ProviderKeys | null): readonly string[] {
  if (config.console.oidc.clientId === null) return [];
  const token = keys?.endpoints()?.token;
  return token === undefined ? [] : [new URL(token).origin];
}

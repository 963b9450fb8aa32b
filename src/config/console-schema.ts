import type { ProviderConfig } from './provider-schema.ts';

/**
 * console: where browsers reach the console, and its sign-in through the identity provider
 * (console.oidc, docs/configuration.md "The console's sign-in"). A group of its own, as
 * auth.provider is, so that the schema file stays a table of contents.
 */
export const CONSOLE_SCHEMA = {
  publicUrl: {
    type: { kind: 'string', nullable: true, pattern: /^https?:\/\/[^\s/?#]+(\/[^\s?#]*)?$/, expect: 'an http(s) URL without query or fragment, such as https://relay.example.com' },
    default: null,
    doc: 'Address at which browsers reach the admin listener, for the links `hookrelay console link` prints (behind a reverse proxy, say) and the redirect URI of the sign-in through the identity provider; null builds them from api.listen.',
  },
  oidc: {
    clientId: {
      type: { kind: 'string', nullable: true, pattern: /^\S{1,200}$/, expect: "the console's client id at the identity provider" },
      default: null,
      doc: "Client id of the console at the identity provider (auth.provider), registered as a public client (no secret) for the authorization code flow with PKCE, with <console.publicUrl>/console/ as its redirect URI and post-logout redirect URI (`hookrelay status` prints it). The console then offers \"Sign in with\" the provider beside the links; it needs auth.provider.discovery. null: sign-in by link only.",
    },
    scopes: {
      type: { kind: 'stringList' },
      default: ['openid', 'email', 'profile'],
      doc: "Scopes the console asks for. Add what makes the provider issue an access token for hookrelay (auth.provider.audience): Entra ID's api://<app>/<scope>, Keycloak's client scope with an audience mapper, offline_access where refresh tokens need it.",
    },
    resource: {
      type: { kind: 'string', nullable: true, pattern: /^\S{1,500}$/, expect: 'an absolute URI' },
      default: null,
      doc: 'Sent as the resource parameter (RFC 8707) of the authorization and token requests, for providers that pick the access token\'s audience by it (oidc-provider, some Okta and Auth0 set-ups). null: not sent.',
    },
    displayName: {
      type: { kind: 'string', pattern: /^[^\u0000-\u001f]{1,60}$/, expect: 'a short name such as "Keycloak"' },
      default: 'your identity provider',
      doc: 'What the sign-in button names: "Sign in with <displayName>".',
    },
  },
} as const;

/** console.oidc as the loader returns it. */
export interface ConsoleOidcConfig {
  readonly clientId: string | null;
  readonly scopes: readonly string[];
  readonly resource: string | null;
  readonly displayName: string;
}

/** Why console.oidc cannot work with auth.provider as set (one sentence naming the key), or null. */
export function consoleOidcIncoherence(oidc: ConsoleOidcConfig, provider: ProviderConfig): string | null {
  if (oidc.clientId === null) return null;
  if (provider.issuer === null) return 'key "console.oidc.clientId" is set but "auth.provider.issuer" is not: the console signs in through the identity provider set there';
  if (!provider.discovery) return 'key "console.oidc.clientId" needs the provider\'s sign-in endpoints: set "auth.provider.discovery" to true (they are read from <issuer>/.well-known/openid-configuration)';
  if (!oidc.scopes.includes('openid')) return 'key "console.oidc.scopes" must include "openid"';
  const bad = oidc.scopes.find((scope) => !/^[\x21\x23-\x5b\x5d-\x7e]+$/.test(scope));
  if (bad !== undefined) return `key "console.oidc.scopes" lists ${JSON.stringify(bad)}, which is not a scope (printable ASCII without spaces, quotes or backslashes)`;
  return null;
}

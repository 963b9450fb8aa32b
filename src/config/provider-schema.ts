import { parseCidr } from '../domain/cidr.ts';
import { parseClaimPath } from '../domain/claim-path.ts';

/**
 * auth.provider: the organization's identity provider, whose tokens are verified with the keys
 * of its JWKS beside the daemon's own (auth.*). Kept in a group of its own because the daemon's
 * issuer, audience and claim names stay what `hookrelay token issue` writes.
 */
const HTTPS_URL = /^https:\/\/[^\s/?#]+(\/[^\s?#]*)?$/i;
const CLAIM = { kind: 'string', pattern: /^\S{1,200}$/, expect: 'a claim name, or a JSON Pointer such as "/realm_access/org"' } as const;

export const PROVIDER_SCHEMA = {
  issuer: {
    type: { kind: 'string', nullable: true, pattern: HTTPS_URL, expect: 'an https:// URL, the iss of the provider\'s tokens' },
    default: null,
    doc: "The identity provider's issuer, exactly as its tokens' iss (https://keycloak.example.com/realms/acme). A token with this iss is verified with the provider's keys; any other with the daemon's own (auth.*). null: no provider.",
  },
  jwksUrl: {
    type: { kind: 'string', nullable: true, pattern: HTTPS_URL, expect: 'an https:// URL' },
    default: null,
    doc: "The provider's JWKS (its public signing keys), an https:// URL. Leave null and set auth.provider.discovery to find it in <issuer>/.well-known/openid-configuration.",
  },
  discovery: {
    type: { kind: 'bool' },
    default: false,
    doc: "Find the JWKS URL (jwks_uri) in <issuer>/.well-known/openid-configuration at each refresh; the document's issuer must equal auth.provider.issuer. Not with auth.provider.jwksUrl.",
  },
  audience: {
    type: { kind: 'string', nullable: true },
    default: null,
    doc: "The aud the provider's tokens must carry (hookrelay's client id or API identifier at the provider). Required with a provider, so a token made for another application of the same provider is refused.",
  },
  algorithms: {
    type: { kind: 'stringList' },
    default: ['RS256', 'PS256', 'ES256', 'EdDSA'],
    doc: "Signature algorithms accepted from the provider, among RS256, PS256, ES256 and EdDSA. A token's key decides: its alg when the JWK has one, otherwise its kty/crv; none and HMAC (HS*) are never accepted.",
  },
  emailClaim: {
    type: CLAIM,
    default: 'email',
    doc: 'Claim of a provider token holding the caller\'s e-mail: a claim name taken literally (dots and slashes included), or a JSON Pointer starting with "/" for a nested claim ("/profile/email"; "~1" stands for "/" and "~0" for "~" inside a name).',
  },
  organizationClaim: {
    type: CLAIM,
    default: 'org',
    doc: 'Claim of a provider token holding the organization id, written as auth.provider.emailClaim ("https://example.com/claims.org", "/tenant/id"). Its value is a string, or a list of organization ids: then the request names one of them in the Hookrelay-Organization header.',
  },
  caFile: {
    type: { kind: 'string', nullable: true },
    default: null,
    doc: 'PEM file of extra CA certificates trusted for the provider\'s HTTPS (discovery and JWKS), added to the default trust store.',
  },
  allowNetworks: {
    type: { kind: 'stringList' },
    default: [],
    doc: 'CIDRs (such as "10.20.0.0/16" or "127.0.0.1/32") the provider may be reached at although they are private, loopback or otherwise refused, as delivery.allowNetworks does for webhooks. The name is resolved, checked and the connection pinned to the checked address.',
  },
  fetchTimeout: {
    type: { kind: 'duration', min: 100, max: 60_000 },
    default: '5s',
    doc: 'Deadline of one fetch of the discovery document or the JWKS.',
  },
  refreshInterval: {
    type: { kind: 'duration', min: 10_000, max: 86_400_000 },
    default: '10m',
    doc: "How often the JWKS is fetched again while nothing asks for it (a shorter Cache-Control max-age, at least auth.provider.minRefreshInterval, is honoured).",
  },
  minRefreshInterval: {
    type: { kind: 'duration', min: 1000, max: 3_600_000 },
    default: '30s',
    doc: 'Least time between two fetches of the JWKS, whatever tokens arrive: a token naming an unknown kid triggers a fetch at most this often, and is refused meanwhile.',
  },
  maxStale: {
    type: { kind: 'duration', min: 60_000, max: 30 * 86_400_000 },
    default: '24h',
    doc: "How long the last keys fetched keep verifying tokens while the provider cannot be reached. Within it /readyz answers 200 with the provider listed as degraded; beyond it the provider's tokens are refused (401) and /readyz answers 503 identity_provider_unreachable. The daemon's own tokens work throughout.",
  },
  provisionUsers: {
    type: { kind: 'bool' },
    default: false,
    doc: "Create a caller the provider vouches for, who is not yet a user of the (existing) organization, with auth.provider.provisionRole, once, recorded in the audit trail. Off: such a caller gets 401.",
  },
  provisionRole: {
    type: { kind: 'string', pattern: /^[a-z][a-z0-9_]{0,62}$/, expect: 'a role name such as saas_viewer' },
    default: 'saas_viewer',
    doc: 'Role of a user created by auth.provider.provisionUsers (never more than it; change it later with `hookrelay user set-role`).',
  },
} as const;

export const PROVIDER_ALGORITHMS = ['RS256', 'PS256', 'ES256', 'EdDSA'] as const;

/** The settings of auth.provider as the loader returns them. */
export interface ProviderConfig {
  readonly issuer: string | null;
  readonly jwksUrl: string | null;
  readonly discovery: boolean;
  readonly audience: string | null;
  readonly algorithms: readonly string[];
  readonly emailClaim: string;
  readonly organizationClaim: string;
  readonly caFile: string | null;
  readonly allowNetworks: readonly string[];
  readonly fetchTimeout: number;
  readonly refreshInterval: number;
  readonly minRefreshInterval: number;
  readonly maxStale: number;
  readonly provisionUsers: boolean;
  readonly provisionRole: string;
}

/** Why auth.provider cannot work as set (one sentence naming the key), or null. */
export function providerIncoherence(provider: ProviderConfig, ownIssuer: string | null): string | null {
  if (provider.issuer === null) {
    const set = (['jwksUrl', 'audience'] as const).find((key) => provider[key] !== null) ?? (provider.discovery ? 'discovery' : null);
    return set === null ? null : `key "auth.provider.${set}" is set but "auth.provider.issuer" is not; set the provider's issuer (the iss of its tokens)`;
  }
  if (provider.issuer === ownIssuer) return 'key "auth.provider.issuer" equals "auth.issuer": the daemon tells its own tokens from the provider\'s by iss, so they must differ';
  if (provider.jwksUrl === null && !provider.discovery) return 'key "auth.provider.issuer" is set without a key source: set "auth.provider.jwksUrl", or "auth.provider.discovery" to true';
  if (provider.jwksUrl !== null && provider.discovery) return 'keys "auth.provider.jwksUrl" and "auth.provider.discovery" are both set; set one';
  if (provider.audience === null) return 'key "auth.provider.audience" is required with a provider (the aud of its tokens for hookrelay), so tokens made for other applications are refused';
  const unknown = provider.algorithms.find((alg) => !(PROVIDER_ALGORITHMS as readonly string[]).includes(alg));
  if (unknown !== undefined) return `key "auth.provider.algorithms" lists ${JSON.stringify(unknown)}; accepted: ${PROVIDER_ALGORITHMS.join(', ')}`;
  if (provider.algorithms.length === 0) return 'key "auth.provider.algorithms" is empty; list at least one of ' + PROVIDER_ALGORITHMS.join(', ');
  for (const key of ['emailClaim', 'organizationClaim'] as const) {
    const parsed = parseClaimPath(provider[key]);
    if (!parsed.ok) return `key "auth.provider.${key}" ${parsed.reason}`;
  }
  const cidr = provider.allowNetworks.find((entry) => parseCidr(entry) === null);
  if (cidr !== undefined) return `key "auth.provider.allowNetworks" must list CIDRs such as "10.0.0.0/8" or "::1/128"; got ${JSON.stringify(cidr)}`;
  if (provider.minRefreshInterval > provider.refreshInterval) return 'key "auth.provider.minRefreshInterval" is longer than "auth.provider.refreshInterval"';
  return null;
}


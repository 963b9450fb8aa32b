import { compactVerify, decodeProtectedHeader } from 'jose';
import type { Context } from 'koa';
import type { Config } from '../config/load.ts';
import { type ClaimPath, parseClaimPath, readClaim } from '../domain/claim-path.ts';
import type { Clock } from '../domain/clock.ts';
import { ErrorCode, HookrelayError } from '../domain/errors.ts';
import type { Principal } from '../domain/types.ts';
import { systemAuditContext } from '../services/audit.ts';
import type { ProviderKeys } from '../services/provider-keys.ts';
import type { UserService } from '../services/users.ts';
import { AuthError, checkClaims, checkHeader, type ProviderVerifier } from './auth.ts';

const invalidToken = (message: string) => new AuthError(ErrorCode.invalidToken, message);
/** The request header naming the organization when the provider's organization claim is a list. */
export const ORGANIZATION_HEADER = 'Hookrelay-Organization';
/** The audit actor of users created by auth.provider.provisionUsers. */
export const PROVISIONING_ACTOR = 'identity-provider';

function claimPath(text: string): ClaimPath {
  const parsed = parseClaimPath(text);
  // The loader refused a bad setting already; this is the type's due.
  if (!parsed.ok) throw new HookrelayError(ErrorCode.config, `claim setting ${JSON.stringify(text)} ${parsed.reason}`);
  return parsed.path;
}

/**
 * The organization a provider token speaks for: its organization claim when it is a string; when
 * it is a list, the one the request names in Hookrelay-Organization, which must be in the list.
 */
function organizationOf(ctx: Context, value: unknown, setting: string): string {
  if (typeof value === 'string' && value !== '') return value;
  if (Array.isArray(value) && value.length > 0 && value.every((v) => typeof v === 'string')) {
    const named = ctx.get(ORGANIZATION_HEADER).trim();
    if (named === '') {
      if (value.length === 1) return value[0] as string;
      throw invalidToken(`The token names several organizations (claim ${setting}); name the one this request is for in the ${ORGANIZATION_HEADER} header`);
    }
    if (!value.includes(named)) throw invalidToken(`The token does not name the organization of the ${ORGANIZATION_HEADER} header (claim ${setting})`);
    return named;
  }
  throw invalidToken(`The token must carry the organization id in the claim ${setting} (auth.provider.organizationClaim): a string, or a list of strings`);
}

/**
 * Verifies tokens of the identity provider (auth.provider), chosen by auth.ts for a token whose
 * iss is the provider's: the header's alg must be one auth.provider.algorithms accepts and one
 * its key (by kid) may verify, so `none` and an HMAC token made with a public key never reach a
 * key; the signature is checked by jose; then the claim rules of every token, with the
 * provider's issuer and audience. The role comes from hookrelay's store; a caller the provider
 * vouches for who is not a user of the organization is refused, or created once
 * (auth.provider.provisionUsers), through the users service so that it is audited.
 */
export function providerVerifier(deps: { auth: Config['auth']; keys: ProviderKeys; users: UserService; clock: Clock }): ProviderVerifier {
  const { provider } = deps.auth;
  const emailPath = claimPath(provider.emailClaim);
  const orgPath = claimPath(provider.organizationClaim);
  const rules = { ...deps.auth, issuer: provider.issuer, audience: provider.audience };

  async function verifiedClaims(token: string): Promise<Record<string, unknown>> {
    const usable = deps.keys.usable();
    if (usable !== true) throw invalidToken(usable);
    let header: ReturnType<typeof decodeProtectedHeader>;
    try {
      header = decodeProtectedHeader(token);
    } catch {
      throw invalidToken('The token could not be verified');
    }
    const alg = header.alg;
    if (typeof alg !== 'string' || !provider.algorithms.includes(alg)) {
      throw invalidToken(`The token is signed with an algorithm this server does not accept from the identity provider (accepted: ${provider.algorithms.join(', ')})`);
    }
    const kid = typeof header.kid === 'string' ? header.kid : null;
    const key = await deps.keys.find(kid);
    if (key === null) {
      throw invalidToken(kid === null ? "The token names no key (kid) and the identity provider has several; it cannot be verified" : "The token's key (kid) is not among the identity provider's keys (fetched again for an unknown kid at most once per auth.provider.minRefreshInterval)");
    }
    if (!key.algorithms.includes(alg)) throw invalidToken(`The token's alg ${alg} is not one its key (kid) may verify`);
    let payload: Uint8Array;
    try {
      ({ payload } = await compactVerify(token, key.key, { algorithms: [alg] }));
    } catch {
      throw invalidToken('The token could not be verified');
    }
    checkHeader(header as Record<string, unknown>);
    let decoded: unknown;
    try {
      decoded = JSON.parse(Buffer.from(payload).toString('utf8'));
    } catch {
      throw invalidToken('The token payload must be a JSON object');
    }
    return checkClaims(decoded, rules, deps.clock.now());
  }

  async function provision(orgId: string, email: string): Promise<Principal | null> {
    try {
      await deps.users.add(systemAuditContext(PROVISIONING_ACTOR), { orgId, email, roleName: provider.provisionRole });
    } catch (err) {
      // Another request created the same user a moment before: use it. No such organization: refuse.
      const code = err instanceof HookrelayError ? err.code : null;
      if (code === ErrorCode.orgNotFound) return null;
      if (code === ErrorCode.validation) throw invalidToken(`The token's e-mail claim ${provider.emailClaim} does not hold an e-mail address; no user was created`);
      if (code !== ErrorCode.userExists) throw err;
    }
    return deps.users.principal(orgId, email);
  }

  return {
    issuer: provider.issuer!,
    async principal(ctx, token) {
      const claims = await verifiedClaims(token);
      const email = readClaim(claims, emailPath);
      if (typeof email !== 'string' || email === '') throw invalidToken(`The token must carry the caller's e-mail in the claim ${provider.emailClaim} (auth.provider.emailClaim)`);
      const orgId = organizationOf(ctx, readClaim(claims, orgPath), provider.organizationClaim);
      const principal = (await deps.users.principal(orgId, email)) ?? (provider.provisionUsers ? await provision(orgId, email) : null);
      if (principal === null) {
        throw invalidToken(
          provider.provisionUsers
            ? `The identity provider vouches for this caller, but organization "${orgId}" does not exist here`
            : `The identity provider vouches for this caller, who is not a user of organization "${orgId}" here; an administrator of the organization adds them (hookrelay user add)`,
        );
      }
      return principal;
    },
  };
}

import { lookup as dnsLookup, type LookupAddress } from 'node:dns';
import { isIP } from 'node:net';
import { CATEGORY_WORDS, urlRefusal, type NetworkPolicies, type TargetRefusal } from '../domain/address-policy.ts';

/** How long registration waits for a name to resolve before it lets the name through (delivery checks again). */
export const REGISTRATION_LOOKUP_MS = 5_000;

function lookupAll(hostname: string, timeoutMs: number): Promise<LookupAddress[] | null> {
  return new Promise((resolve) => {
    const timer = setTimeout(() => resolve(null), timeoutMs);
    dnsLookup(hostname, { all: true, verbatim: true }, (err, addresses) => {
      clearTimeout(timer);
      resolve(err ? null : addresses);
    });
  });
}

/**
 * The URL policy at registration (domain/address-policy.ts; every attempt applies it again in
 * dispatch/network-guard.ts): why `url` may not be registered as a webhook (scheme, user-info,
 * an IP literal, or a name that resolves to a refused address), or null. The networks granted
 * to all organizations and to `orgId` are allowed.
 */
export function createTargetCheck(networks: NetworkPolicies, allowHttp: boolean): (url: URL, orgId: string) => Promise<TargetRefusal | null> {
  /** What the operator would set to allow `cidrs` for this organization only (or for all). */
  const grant = (orgId: string, cidrs: readonly string[]) =>
    `; if this receiver is meant to be internal, the operator allows it for this organization with delivery.organizationNetworks ${JSON.stringify(cidrs.map((c) => `${orgId}=${c}`))} (or for all with delivery.allowNetworks)`;
  const hostCidr = (address: string) => (isIP(address) === 6 ? `${address}/128` : `${address}/32`);
  return async (url, orgId) => {
    const policy = networks.forOrg(orgId);
    const refused = urlRefusal(url, allowHttp);
    if (refused) return refused;
    const host = url.hostname.replace(/^\[(.*)\]$/, '$1');
    if (isIP(host) !== 0) {
      const why = policy.refusal(host);
      return why === null ? null : { reason: why.category, message: `must not point at ${CATEGORY_WORDS[why.category]}: ${host} is in a refused range (${why.label})${grant(orgId, [hostCidr(host)])}` };
    }
    // RFC 6761: localhost and every name under it are the machine itself (127.0.0.1 or ::1),
    // whatever DNS says.
    const name = host.toLowerCase().replace(/\.$/, '');
    if (name === 'localhost' || name.endsWith('.localhost')) {
      const v4 = policy.refusal('127.0.0.1') === null;
      const v6 = policy.refusal('::1') === null;
      if (v4 && v6) return null;
      const half = v4 ? '127.0.0.1 is allowed but ::1 is not' : v6 ? '::1 is allowed but 127.0.0.1 is not' : 'neither is allowed';
      return {
        reason: 'loopback_address',
        message: `must not point at ${CATEGORY_WORDS.loopback_address}: ${name} is this machine, 127.0.0.1 and ::1 both, and ${half}; use http(s)://127.0.0.1:PORT/ instead${grant(orgId, ['127.0.0.1/32', '::1/128'])}`,
      };
    }
    // A name that does not resolve now is let through: it reaches nothing, and every attempt
    // resolves it again and checks what it finds. The addresses are not named in the answer:
    // which internal names resolve to what is the operator's business, not a tenant's.
    const addresses = await lookupAll(host, REGISTRATION_LOOKUP_MS);
    for (const { address } of addresses ?? []) {
      const why = policy.refusal(address);
      if (why !== null) return { reason: why.category, message: `must not point at ${CATEGORY_WORDS[why.category]}: ${host} resolves to one; if this receiver is meant to be internal, the operator allows its network for this organization with delivery.organizationNetworks ("${orgId}=CIDR") or for all with delivery.allowNetworks` };
    }
    return null;
  };
}

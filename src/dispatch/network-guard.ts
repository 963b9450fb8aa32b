import { lookup as dnsLookup, type LookupAddress } from 'node:dns';
import { isIP } from 'node:net';
import { createAddressPolicy, type AddressPolicy } from '../domain/address-policy.ts';

export const BLOCKED_CODE = 'EHOOKRELAY_BLOCKED';

/** Raised when a webhook host is, or resolves to, an address deliveries may not reach. */
export class BlockedAddressError extends Error {
  readonly code = BLOCKED_CODE;
}

type LookupCallback = (err: NodeJS.ErrnoException | null, address: string | LookupAddress[], family?: number) => void;

export interface NetworkGuard {
  /** Why `address` (an IP literal) is refused, or null when deliveries may reach it. */
  refusal(address: string): string | null;
  /**
   * A `lookup` for http(s).request: resolves every address of the name, refuses the name if
   * any of them is refused, and hands the checked addresses to the socket, so the connection
   * goes to an address that was checked (no DNS rebinding between check and connect).
   */
  lookup(hostname: string, options: { all?: boolean; family?: number } | number, callback: LookupCallback): void;
  /**
   * Whether a connection to `host` (an IP literal, or a name this guard's lookup resolved) may
   * have reached an address `isInternal` calls internal: for a name, any of the addresses it
   * last resolved to. A name it has not resolved (or has forgotten) counts as internal: the
   * caller withholds what it would have kept, the safe side.
   */
  reachesInternal(host: string, isInternal: (address: string) => boolean): boolean;
}

/** Names whose last resolution a guard remembers (for reachesInternal); the oldest is forgotten first. */
const REMEMBERED_NAMES = 10_000;

/** A guard for the networks listed (tests, tools, the identity provider), or for an organization's policy (see createNetworkPolicies); `allowHint` ends a refusal's sentence with the setting that allows it. */
export function createNetworkGuard(
  networks: readonly string[] | AddressPolicy,
  allowHint = 'allow its network with delivery.organizationNetworks or delivery.allowNetworks if this receiver is meant to be internal',
): NetworkGuard {
  const policy = 'refusal' in networks ? networks : createAddressPolicy(networks);

  function refusal(address: string): string | null {
    const bare = address.replace(/^\[(.*)\]$/, '$1');
    if (isIP(bare) === 0) return `${address} is not an IP address`;
    const why = policy.refusal(bare);
    return why === null ? null : `${bare} is in a refused range (${why.label}); ${allowHint}`;
  }

  const resolved = new Map<string, readonly string[]>();
  function remember(hostname: string, addresses: readonly LookupAddress[]): void {
    resolved.delete(hostname);
    if (resolved.size >= REMEMBERED_NAMES) resolved.delete(resolved.keys().next().value!);
    resolved.set(hostname, addresses.map((a) => a.address));
  }

  return {
    refusal,
    reachesInternal(host, isInternal) {
      if (isIP(host) !== 0) return isInternal(host);
      return resolved.get(host)?.some(isInternal) ?? true;
    },
    lookup(hostname, options, callback) {
      const family = typeof options === 'number' ? options : (options.family ?? 0);
      const wantAll = typeof options === 'object' && options.all === true;
      dnsLookup(hostname, { all: true, family, verbatim: true }, (err, addresses) => {
        if (err) return callback(err, wantAll ? [] : '');
        for (const { address } of addresses) {
          const why = policy.refusal(address);
          // The address is not named: the attempt log is the tenant's to read, and which
          // internal names resolve to what is not (the range says enough to act on).
          if (why !== null) {
            const message = `${hostname} resolves to an address in a refused range (${why.label}); ${allowHint}`;
            return callback(new BlockedAddressError(message), wantAll ? [] : '');
          }
        }
        if (addresses.length === 0) return callback(Object.assign(new Error(`${hostname} has no address`), { code: 'ENOTFOUND' }), wantAll ? [] : '');
        remember(hostname, addresses);
        if (wantAll) return callback(null, addresses);
        return callback(null, addresses[0]!.address, addresses[0]!.family);
      });
    },
  };
}

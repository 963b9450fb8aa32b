import { lookup as dnsLookup, type LookupAddress } from 'node:dns';
import { isIP } from 'node:net';
import { CATEGORY_WORDS, createAddressPolicy, type AddressCategory } from '../domain/address-policy.ts';

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
   * Why `url` may not be registered as a webhook (scheme, user-info, an IP literal or a name
   * that resolves to a refused address), or null. Names are resolved once, here; delivery
   * resolves them again before each connection.
   */
  checkTarget(url: URL, allowHttp: boolean): Promise<TargetRefusal | null>;
  /**
   * A `lookup` for http(s).request: resolves every address of the name, refuses the name if
   * any of them is refused, and hands the checked addresses to the socket, so the connection
   * goes to an address that was checked (no DNS rebinding between check and connect).
   */
  lookup(hostname: string, options: { all?: boolean; family?: number } | number, callback: LookupCallback): void;
}

/** How long registration waits for a name to resolve before it lets the name through (delivery checks again). */
export const REGISTRATION_LOOKUP_MS = 5_000;

/** Why a webhook URL may not be registered: a reason code (docs/api.md) and a sentence. */
export interface TargetRefusal {
  readonly reason: AddressCategory | 'scheme_not_allowed' | 'credentials_not_allowed';
  readonly message: string;
}

/**
 * The parts of the URL policy that need no address: https only (http with `allowHttp`), no
 * user-info. Registration and every attempt apply them.
 */
export function urlRefusal(url: URL, allowHttp: boolean): TargetRefusal | null {
  if (url.protocol !== 'https:' && !(allowHttp && url.protocol === 'http:')) {
    return { reason: 'scheme_not_allowed', message: allowHttp ? 'must use the https or http scheme' : 'must use the https scheme (http only when the operator sets delivery.allowHttp)' };
  }
  if (url.username !== '' || url.password !== '') return { reason: 'credentials_not_allowed', message: 'must not contain user-info (user:password@); put a token in the path or rely on the signature' };
  return null;
}

function lookupAll(hostname: string, timeoutMs: number): Promise<LookupAddress[] | null> {
  return new Promise((resolve) => {
    const timer = setTimeout(() => resolve(null), timeoutMs);
    dnsLookup(hostname, { all: true, verbatim: true }, (err, addresses) => {
      clearTimeout(timer);
      resolve(err ? null : addresses);
    });
  });
}

export function createNetworkGuard(allowNetworks: readonly string[]): NetworkGuard {
  const policy = createAddressPolicy(allowNetworks);

  function refusal(address: string): string | null {
    const bare = address.replace(/^\[(.*)\]$/, '$1');
    if (isIP(bare) === 0) return `${address} is not an IP address`;
    const why = policy.refusal(bare);
    return why === null ? null : `${bare} is in a refused range (${why.label}); allow it with delivery.allowNetworks if this receiver is meant to be internal`;
  }

  return {
    refusal,
    async checkTarget(url, allowHttp) {
      const refused = urlRefusal(url, allowHttp);
      if (refused) return refused;
      const host = url.hostname.replace(/^\[(.*)\]$/, '$1');
      if (isIP(host) !== 0) {
        const why = policy.refusal(host);
        return why === null ? null : { reason: why.category, message: `must not point at ${CATEGORY_WORDS[why.category]}: ${host} is in a refused range (${why.label})` };
      }
      // RFC 6761: localhost and every name under it are the machine itself (127.0.0.1 or ::1),
      // whatever DNS says.
      const name = host.toLowerCase().replace(/\.$/, '');
      if (name === 'localhost' || name.endsWith('.localhost')) {
        const open = policy.refusal('127.0.0.1') === null && policy.refusal('::1') === null;
        return open ? null : { reason: 'loopback_address', message: `must not point at ${CATEGORY_WORDS.loopback_address}: ${name} is this machine` };
      }
      // A name that does not resolve now is let through: it reaches nothing, and every attempt
      // resolves it again and checks what it finds. The addresses are not named in the answer:
      // which internal names resolve to what is the operator's business, not a tenant's.
      const addresses = await lookupAll(host, REGISTRATION_LOOKUP_MS);
      for (const { address } of addresses ?? []) {
        const why = policy.refusal(address);
        if (why !== null) return { reason: why.category, message: `must not point at ${CATEGORY_WORDS[why.category]}: ${host} resolves to one` };
      }
      return null;
    },
    lookup(hostname, options, callback) {
      const family = typeof options === 'number' ? options : (options.family ?? 0);
      const wantAll = typeof options === 'object' && options.all === true;
      dnsLookup(hostname, { all: true, family, verbatim: true }, (err, addresses) => {
        if (err) return callback(err, wantAll ? [] : '');
        for (const { address } of addresses) {
          const why = refusal(address);
          if (why !== null) return callback(new BlockedAddressError(`${hostname} resolves to a refused address: ${why}`), wantAll ? [] : '');
        }
        if (addresses.length === 0) return callback(Object.assign(new Error(`${hostname} has no address`), { code: 'ENOTFOUND' }), wantAll ? [] : '');
        if (wantAll) return callback(null, addresses);
        return callback(null, addresses[0]!.address, addresses[0]!.family);
      });
    },
  };
}

import { BlockList, isIP } from 'node:net';
import { parseCidr } from './cidr.ts';
import { checkOrgId } from './validation.ts';

/**
 * Which addresses a webhook may reach: the one policy behind registration (services/webhook-target.ts)
 * and every delivery attempt (dispatch/network-guard.ts). Refused unless the operator allows
 * them (`delivery.allowNetworks`): loopback, private and shared (CGNAT, unique-local), link-local
 * (cloud metadata), and every range that is not a unicast internet address (unspecified,
 * multicast, documentation, benchmarking, reserved, transition mechanisms).
 *
 * IPv6 is an allowlist: only the global unicast range (2000::/3) is reachable, minus its special
 * ranges (Teredo, IETF protocol assignments, documentation 2001:db8::/32 and 3fff::/20, 6to4);
 * everything outside it (4000::/2, 1::/16, unique-local, link-local, multicast, ...) is refused,
 * so a range assigned later, or one this list forgot, is refused until it is known to be
 * internet. An IPv6 address that carries an IPv4 address is judged by that IPv4 address when a
 * socket or a standard translator reaches it there: IPv4-mapped ::ffff:a.b.c.d (the IPv4 address
 * itself, to the socket layer) and NAT64 64:ff9b::a.b.c.d. The IPv4-translated form
 * (::ffff:0:a.b.c.d, SIIT), 6to4 (2002::/16), Teredo (2001::/32) and the IPv4-compatible form
 * (::a.b.c.d) are refused whatever they carry: never a receiver's real address.
 * Other spellings of IPv4 (127.1, 0x7f.0.0.1, 2130706433, 0177.0.0.1) are normalised by the URL
 * parser before they get here.
 */

/** The kind of refused address, as the `reason` of a refused registration (docs/api.md). */
export type AddressCategory = 'loopback_address' | 'private_address' | 'link_local_address' | 'reserved_address';

export interface AddressRefusal {
  readonly category: AddressCategory;
  /** The range, in words ("loopback", "private", "NAT64 (127.0.0.1: loopback)"). */
  readonly label: string;
}

type Range = readonly [address: string, prefix: number, label: string, category: AddressCategory];

const V4_RANGES: readonly Range[] = [
  ['0.0.0.0', 8, 'unspecified / this network', 'reserved_address'],
  ['10.0.0.0', 8, 'private', 'private_address'],
  ['100.64.0.0', 10, 'carrier-grade NAT', 'private_address'],
  ['127.0.0.0', 8, 'loopback', 'loopback_address'],
  ['169.254.0.0', 16, 'link-local (cloud metadata)', 'link_local_address'],
  ['172.16.0.0', 12, 'private', 'private_address'],
  ['192.0.0.0', 24, 'IETF protocol assignments', 'reserved_address'],
  ['192.0.2.0', 24, 'documentation', 'reserved_address'],
  ['192.88.99.0', 24, '6to4 relay', 'reserved_address'],
  ['192.168.0.0', 16, 'private', 'private_address'],
  ['198.18.0.0', 15, 'benchmarking', 'reserved_address'],
  ['198.51.100.0', 24, 'documentation', 'reserved_address'],
  ['203.0.113.0', 24, 'documentation', 'reserved_address'],
  ['224.0.0.0', 4, 'multicast', 'reserved_address'],
  ['240.0.0.0', 4, 'reserved / broadcast', 'reserved_address'],
];

/** The only IPv6 addresses deliveries may reach (less V6_SPECIAL): global unicast. */
const V6_GLOBAL_UNICAST: readonly [string, number] = ['2000::', 3];

/** Ranges inside 2000::/3 that are not a receiver's address. Checked in order: the first range that holds the address names it. */
const V6_SPECIAL: readonly Range[] = [
  ['2001::', 32, 'Teredo', 'reserved_address'],
  ['2001::', 23, 'IETF protocol assignments', 'reserved_address'],
  ['2001:db8::', 32, 'documentation', 'reserved_address'],
  ['2002::', 16, '6to4', 'reserved_address'],
  ['3fff::', 20, 'documentation', 'reserved_address'],
];

/** Outside 2000::/3 everything is refused; these ranges only give the refusal its name and reason. Checked in order. */
const V6_NAMED: readonly Range[] = [
  ['::1', 128, 'loopback', 'loopback_address'],
  ['::', 128, 'unspecified', 'reserved_address'],
  ['::', 96, 'IPv4-compatible', 'reserved_address'],
  ['64:ff9b:1::', 48, 'local-use NAT64', 'reserved_address'],
  ['100::', 64, 'discard-only', 'reserved_address'],
  ['fc00::', 7, 'unique-local', 'private_address'],
  ['fe80::', 10, 'link-local', 'link_local_address'],
  ['fec0::', 10, 'site-local', 'private_address'],
  ['ff00::', 8, 'multicast', 'reserved_address'],
];
const NOT_GLOBAL_UNICAST: AddressRefusal = { label: 'not global unicast (outside 2000::/3)', category: 'reserved_address' };

function listOf(address: string, prefix: number, family: 'ipv4' | 'ipv6'): BlockList {
  const list = new BlockList();
  list.addSubnet(address, prefix, family);
  return list;
}

const V4 = V4_RANGES.map(([address, prefix, label, category]) => ({ list: listOf(address, prefix, 'ipv4'), label, category }));
const V6_SPECIAL_LISTS = V6_SPECIAL.map(([address, prefix, label, category]) => ({ list: listOf(address, prefix, 'ipv6'), label, category }));
const V6_NAMED_LISTS = V6_NAMED.map(([address, prefix, label, category]) => ({ list: listOf(address, prefix, 'ipv6'), label, category }));
const GLOBAL_UNICAST = listOf(V6_GLOBAL_UNICAST[0], V6_GLOBAL_UNICAST[1], 'ipv6');

/** The eight 16-bit groups of an IPv6 address (as isIP accepts it, a zone index allowed); null if it is not one. */
export function ipv6Groups(text: string): number[] | null {
  const bare = text.replace(/%.*$/, '');
  if (isIP(bare) !== 6) return null;
  let body = bare.toLowerCase();
  const tail: number[] = [];
  const dotted = /(\d{1,3})\.(\d{1,3})\.(\d{1,3})\.(\d{1,3})$/.exec(body);
  if (dotted) {
    const [a, b, c, d] = dotted.slice(1).map(Number) as [number, number, number, number];
    tail.push((a << 8) | b, (c << 8) | d);
    body = body.slice(0, dotted.index);
    // "::1.2.3.4" leaves "::", "::ffff:1.2.3.4" leaves "::ffff:".
    if (body.endsWith(':') && !body.endsWith('::')) body = body.slice(0, -1);
  }
  const [head = '', rest] = body.split('::');
  const parse = (part: string) => (part === '' ? [] : part.split(':').map((g) => parseInt(g, 16)));
  const before = parse(head);
  const after = [...parse(rest ?? ''), ...tail];
  const groups = rest === undefined ? [...before, ...tail] : [...before, ...Array<number>(8 - before.length - after.length).fill(0), ...after];
  return groups.length === 8 && groups.every((g) => Number.isInteger(g) && g >= 0 && g <= 0xffff) ? groups : null;
}

/** The IPv4 address an IPv6 address leads to through a translator, and which form carries it; null for other addresses. */
export function embeddedIpv4(ipv6: string): { form: string; ipv4: string } | null {
  const g = ipv6Groups(ipv6);
  if (g === null) return null;
  const v4 = `${g[6]! >> 8}.${g[6]! & 255}.${g[7]! >> 8}.${g[7]! & 255}`;
  const zeros = (from: number, to: number) => g.slice(from, to).every((x) => x === 0);
  if (zeros(0, 5) && g[5] === 0xffff) return { form: 'IPv4-mapped', ipv4: v4 };
  if (zeros(0, 4) && g[4] === 0xffff && g[5] === 0) return { form: 'IPv4-translated', ipv4: v4 };
  if (g[0] === 0x64 && g[1] === 0xff9b && zeros(2, 6)) return { form: 'NAT64', ipv4: v4 };
  return null;
}

/**
 * The operator's allowlist and the judgement of addresses against it. `allowNetworks` holds
 * CIDRs (validated with the configuration; anything else is ignored here).
 */
export function createAddressPolicy(allowNetworks: readonly string[]) {
  const allowed = new BlockList();
  for (const cidr of allowNetworks) {
    const parsed = parseCidr(cidr);
    if (parsed) allowed.addSubnet(parsed.address, parsed.prefix, parsed.family);
  }

  function judgeV4(address: string): AddressRefusal | null {
    if (allowed.check(address, 'ipv4')) return null;
    for (const { list, label, category } of V4) if (list.check(address, 'ipv4')) return { label, category };
    return null;
  }

  /** Why `address` (an IP literal, brackets and zone index allowed) may not be reached; null when it may. */
  function refusal(address: string): AddressRefusal | null {
    const bare = address.replace(/^\[(.*)\]$/, '$1').replace(/%.*$/, '');
    const version = isIP(bare);
    if (version === 4) return judgeV4(bare);
    if (version !== 6) return { label: 'not an IP address', category: 'reserved_address' };
    if (allowed.check(bare, 'ipv6')) return null;
    const embedded = embeddedIpv4(bare);
    if (embedded !== null) {
      const inner = judgeV4(embedded.ipv4);
      // An IPv4-mapped address is the IPv4 address itself, to the socket layer.
      if (embedded.form === 'IPv4-mapped') return inner;
      if (embedded.form === 'NAT64') return inner === null ? null : { category: inner.category, label: `NAT64 (${embedded.ipv4}: ${inner.label})` };
      // IPv4-translated (SIIT): refused whatever it carries; named by what it carries when that is refused too.
      return inner === null ? { category: 'reserved_address', label: `IPv4-translated (${embedded.ipv4}), not a receiver's address` } : { category: inner.category, label: `IPv4-translated (${embedded.ipv4}: ${inner.label})` };
    }
    if (GLOBAL_UNICAST.check(bare, 'ipv6')) {
      for (const { list, label, category } of V6_SPECIAL_LISTS) if (list.check(bare, 'ipv6')) return { label, category };
      return null;
    }
    for (const { list, label, category } of V6_NAMED_LISTS) if (list.check(bare, 'ipv6')) return { label, category };
    return NOT_GLOBAL_UNICAST;
  }

  return { refusal };
}
export type AddressPolicy = ReturnType<typeof createAddressPolicy>;

/** In words, for the reason of a refused registration. */
export const CATEGORY_WORDS: Readonly<Record<AddressCategory, string>> = {
  loopback_address: 'a loopback address',
  private_address: 'a private address',
  link_local_address: 'a link-local address (such as a cloud metadata service)',
  reserved_address: 'a reserved or non-internet address',
};

/** Why a webhook URL may not be used: a reason code (docs/api.md) and a sentence. */
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

/** One "ORG=CIDR" entry of delivery.organizationNetworks; null when it is not one. */
export function parseOrganizationNetwork(entry: string): { orgId: string; cidr: string } | null {
  const eq = entry.indexOf('=');
  if (eq <= 0) return null;
  const orgId = entry.slice(0, eq).trim();
  const cidr = entry.slice(eq + 1).trim();
  return checkOrgId(orgId) === null && parseCidr(cidr) !== null ? { orgId, cidr } : null;
}

/** The operator's grants: networks for every organization, networks for one, internal answers kept. */
export interface NetworkGrants {
  readonly allowNetworks: readonly string[];
  readonly organizationNetworks: readonly string[];
  readonly storeInternalResponses: readonly string[];
}

/**
 * The address policy of each organization (the networks granted to all, and to it), made once
 * per organization; and whether an address is internal: refused but for a grant.
 */
export function createNetworkPolicies(grants: NetworkGrants) {
  const byOrg = new Map<string, string[]>();
  for (const entry of grants.organizationNetworks) {
    const grant = parseOrganizationNetwork(entry);
    if (grant !== null) byOrg.set(grant.orgId, [...(byOrg.get(grant.orgId) ?? []), grant.cidr]);
  }
  const shared = createAddressPolicy(grants.allowNetworks);
  const policies = new Map<string, AddressPolicy>();
  const ungranted = createAddressPolicy([]);
  const keepsInternal = new Set(grants.storeInternalResponses);
  const seen = new Map<string, boolean>();
  return {
    /** The policy of every organization without networks of its own (delivery.allowNetworks alone). */
    shared,
    /** The policy for `orgId`'s webhook. */
    forOrg(orgId: string): AddressPolicy {
      const own = byOrg.get(orgId);
      if (own === undefined) return shared;
      let policy = policies.get(orgId);
      if (policy === undefined) policies.set(orgId, (policy = createAddressPolicy([...grants.allowNetworks, ...own])));
      return policy;
    },
    /** Whether `orgId` has networks of its own (its deliveries then use connections of their own). */
    hasOwnNetworks(orgId: string): boolean {
      return byOrg.has(orgId);
    },
    /** True when `address` is one deliveries reach only because the operator granted its network. */
    isInternal(address: string): boolean {
      // Asked after every attempt, of the few addresses receivers have: remembered.
      let internal = seen.get(address);
      if (internal === undefined) {
        if (seen.size >= 1024) seen.clear();
        seen.set(address, (internal = ungranted.refusal(address) !== null));
      }
      return internal;
    },
    /** Whether the delivery log of `orgId` keeps the bodies of internal answers. */
    storesInternalResponses(orgId: string): boolean {
      return keepsInternal.has(orgId);
    },
  };
}
export type NetworkPolicies = ReturnType<typeof createNetworkPolicies>;

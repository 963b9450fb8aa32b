import { lookup as dnsLookup, type LookupAddress } from 'node:dns';
import { BlockList, isIP } from 'node:net';
import { parseCidr } from '../domain/cidr.ts';

/**
 * Address ranges a webhook may not reach unless the operator allows them: loopback, private,
 * link-local (cloud metadata), CGNAT, unique-local, multicast, unspecified, documentation,
 * benchmarking, reserved, and IPv6 forms that embed IPv4 (6to4, NAT64 local, IPv4-compatible;
 * well-known-prefix NAT64 addresses are judged by the IPv4 address they embed).
 * node:net's BlockList also matches IPv4-mapped IPv6 (::ffff:a.b.c.d) against the IPv4 rules.
 */
const DENIED_V4: ReadonlyArray<[string, number, string]> = [
  ['0.0.0.0', 8, 'unspecified / this network'],
  ['10.0.0.0', 8, 'private'],
  ['100.64.0.0', 10, 'carrier-grade NAT'],
  ['127.0.0.0', 8, 'loopback'],
  ['169.254.0.0', 16, 'link-local (cloud metadata)'],
  ['172.16.0.0', 12, 'private'],
  ['192.0.0.0', 24, 'IETF protocol assignments'],
  ['192.0.2.0', 24, 'documentation'],
  ['192.88.99.0', 24, '6to4 relay'],
  ['192.168.0.0', 16, 'private'],
  ['198.18.0.0', 15, 'benchmarking'],
  ['198.51.100.0', 24, 'documentation'],
  ['203.0.113.0', 24, 'documentation'],
  ['224.0.0.0', 4, 'multicast'],
  ['240.0.0.0', 4, 'reserved / broadcast'],
];
const DENIED_V6: ReadonlyArray<[string, number, string]> = [
  ['::', 96, 'unspecified, loopback or IPv4-compatible'],
  ['64:ff9b:1::', 48, 'local-use NAT64'],
  ['100::', 64, 'discard-only'],
  ['2001::', 23, 'IETF protocol assignments (Teredo, ...)'],
  ['2001:db8::', 32, 'documentation'],
  ['2002::', 16, '6to4'],
  ['fc00::', 7, 'unique-local'],
  ['fe80::', 10, 'link-local'],
  ['fec0::', 10, 'site-local'],
  ['ff00::', 8, 'multicast'],
];

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
}

/** The IPv4 address in the last 32 bits of an IPv6 address (which isIP has accepted), dotted. */
function nat64Embedded(ipv6: string): string | null {
  const text = ipv6.toLowerCase();
  const dotted = /(\d{1,3})\.(\d{1,3})\.(\d{1,3})\.(\d{1,3})$/.exec(text);
  if (dotted) return dotted.slice(1).join('.');
  const [head = '', tail] = text.split('::');
  const groups = (part: string) => (part === '' ? [] : part.split(':'));
  const all = tail === undefined ? groups(head) : [...groups(head), ...Array<string>(8 - groups(head).length - groups(tail).length).fill('0'), ...groups(tail)];
  if (all.length !== 8) return null;
  const high = parseInt(all[6]!, 16);
  const low = parseInt(all[7]!, 16);
  return [high >> 8, high & 255, low >> 8, low & 255].join('.');
}

export function createNetworkGuard(allowNetworks: readonly string[]): NetworkGuard {
  const allowed = new BlockList();
  for (const cidr of allowNetworks) {
    const parsed = parseCidr(cidr);
    if (parsed) allowed.addSubnet(parsed.address, parsed.prefix, parsed.family);
  }
  const denied: Array<{ list: BlockList; label: string }> = [];
  const ranges = [...DENIED_V4.map((r) => [...r, 'ipv4'] as const), ...DENIED_V6.map((r) => [...r, 'ipv6'] as const)];
  for (const [address, prefix, label, family] of ranges) {
    const list = new BlockList();
    list.addSubnet(address, prefix, family);
    denied.push({ list, label });
  }
  const nat64 = new BlockList();
  nat64.addSubnet('64:ff9b::', 96, 'ipv6');

  /** The label of the refused range `bare` is in, or null when it is not refused. */
  function deniedLabel(bare: string, family: 'ipv4' | 'ipv6'): string | null {
    if (allowed.check(bare, family)) return null;
    for (const { list, label } of denied) {
      if (list.check(bare, family)) return label;
    }
    // A NAT64 gateway turns 64:ff9b::a.b.c.d into a.b.c.d, and not every gateway refuses
    // private targets (RFC 6052 asks them to): judge the embedded IPv4 address instead.
    if (family === 'ipv6' && nat64.check(bare, 'ipv6')) {
      const embedded = nat64Embedded(bare);
      const label = embedded === null ? null : deniedLabel(embedded, 'ipv4');
      return label === null ? null : `NAT64 (${embedded}: ${label})`;
    }
    return null;
  }

  function refusal(address: string): string | null {
    const bare = address.replace(/^\[(.*)\]$/, '$1');
    const version = isIP(bare);
    if (version === 0) return `${address} is not an IP address`;
    const label = deniedLabel(bare, version === 4 ? 'ipv4' : 'ipv6');
    return label === null ? null : `${bare} is in a refused range (${label}); allow it with delivery.allowNetworks if this receiver is meant to be internal`;
  }

  return {
    refusal,
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

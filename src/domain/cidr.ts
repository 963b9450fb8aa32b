import { isIP } from 'node:net';

/** Parses "address/prefix"; null when it is not a CIDR. */
export function parseCidr(text: string): { address: string; prefix: number; family: 'ipv4' | 'ipv6' } | null {
  const match = /^([^/]+)\/(\d{1,3})$/.exec(text.trim());
  if (!match) return null;
  const version = isIP(match[1]!);
  const prefix = Number(match[2]);
  if (version === 0 || prefix > (version === 4 ? 32 : 128)) return null;
  return { address: match[1]!, prefix, family: version === 4 ? 'ipv4' : 'ipv6' };
}

/**
 * The egress proxy deliveries go through (delivery.proxy, delivery.organizationProxies): the
 * URL as the operator writes it, parsed once, its basic credentials kept apart from what may be
 * shown (a log line, a status, an error), which is the proxy's origin alone. Pure.
 */
import { checkOrgId } from './validation.ts';

export interface EgressProxy {
  /** The proxy's host: a name, or an IP address (IPv6 without brackets). */
  readonly hostname: string;
  readonly port: number;
  /** The Proxy-Authorization header's value for basic credentials in the URL, or null. */
  readonly authorization: string | null;
  /** `http://HOST:PORT`: what may be written anywhere; never the credentials. */
  readonly shown: string;
}

/** What the CONNECT asks the proxy for (delivery.proxyTarget). */
export type ProxyTarget = 'address' | 'name';

/**
 * The proxy of an `http://[USER[:PASSWORD]@]HOST[:PORT][/]` URL, or a sentence saying what is
 * wrong with it. The sentence never quotes the URL: it may hold a password.
 */
export function parseProxyUrl(text: string): EgressProxy | string {
  let url: URL;
  try {
    url = new URL(text);
  } catch {
    return 'must be an http:// URL such as http://proxy.internal:3128 (the value is not a URL)';
  }
  if (url.protocol !== 'http:') return `must be an http:// URL such as http://proxy.internal:3128 (not ${url.protocol}//: hookrelay speaks plain HTTP to the proxy, and TLS to the receiver inside the tunnel)`;
  if (url.hostname === '') return 'must name the proxy\'s host';
  if (url.pathname !== '/' || url.search !== '' || url.hash !== '') return 'must be the proxy\'s address alone, http://[USER:PASSWORD@]HOST:PORT, without a path, query or fragment';
  let authorization: string | null = null;
  if (url.username !== '' || url.password !== '') {
    let user: string;
    let password: string;
    try {
      user = decodeURIComponent(url.username);
      password = decodeURIComponent(url.password);
    } catch {
      return 'must percent-encode its user and password correctly (a "%" not followed by two hex digits)';
    }
    authorization = `Basic ${Buffer.from(`${user}:${password}`, 'utf8').toString('base64')}`;
  }
  const port = url.port === '' ? 80 : Number(url.port);
  const hostname = url.hostname.replace(/^\[(.*)\]$/, '$1');
  return { hostname, port, authorization, shown: `http://${url.host}${url.port === '' ? ':80' : ''}` };
}

/** "direct" in delivery.organizationProxies: the organization's deliveries go through no proxy. */
export const DIRECT = 'direct';

/** One "ORG=URL" or "ORG=direct" entry of delivery.organizationProxies, or a sentence saying what is wrong (never quoting the URL). */
export function parseOrganizationProxy(entry: string): { orgId: string; proxy: EgressProxy | null } | string {
  const eq = entry.indexOf('=');
  const orgId = eq <= 0 ? '' : entry.slice(0, eq).trim();
  if (eq <= 0 || checkOrgId(orgId) !== null) return 'must list "ORG=URL" or "ORG=direct" entries, such as "acme=http://proxy.acme.internal:3128"';
  const target = entry.slice(eq + 1).trim();
  if (target === DIRECT) return { orgId, proxy: null };
  const proxy = parseProxyUrl(target);
  return typeof proxy === 'string' ? `has an entry for "${orgId}" whose URL ${proxy}` : { orgId, proxy };
}

export interface EgressProxies {
  /** The proxy of every organization without an entry of its own (delivery.proxy), or null. */
  readonly shared: EgressProxy | null;
  /** The proxy `orgId`'s deliveries go through, or null for none. */
  forOrg(orgId: string): EgressProxy | null;
  /** Whether `orgId` has an entry of its own (its deliveries then use connections of their own). */
  hasOwn(orgId: string): boolean;
  /** Every proxy in use, each once (for the start-up log line). */
  readonly all: readonly EgressProxy[];
}

/** The proxies of a checked configuration (config/load.ts refuses the entries these would skip). */
export function createEgressProxies(settings: { readonly proxy: string | null; readonly organizationProxies: readonly string[] }): EgressProxies {
  const parsed = settings.proxy === null ? null : parseProxyUrl(settings.proxy);
  const shared = parsed === null || typeof parsed === 'string' ? null : parsed;
  const own = new Map<string, EgressProxy | null>();
  for (const entry of settings.organizationProxies) {
    const p = parseOrganizationProxy(entry);
    if (typeof p !== 'string') own.set(p.orgId, p.proxy);
  }
  const all = new Map<string, EgressProxy>();
  for (const p of [shared, ...own.values()]) if (p !== null) all.set(`${p.shown} ${p.authorization ?? ''}`, p);
  return {
    shared,
    forOrg: (orgId) => (own.has(orgId) ? own.get(orgId)! : shared),
    hasOwn: (orgId) => own.has(orgId),
    all: [...all.values()],
  };
}

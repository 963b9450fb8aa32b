/**
 * The Host check of the routes a browser could be made to read without a token: /metrics (no
 * token on a loopback listener) and the console's files. A page on evil.example can make a
 * local browser fetch http://evil.example:8080/metrics after pointing evil.example at
 * 127.0.0.1 (DNS rebinding): the browser then treats the answer as evil.example's own and lets
 * the page read it. Such a request says `Host: evil.example:8080`, a name the listener was
 * never given: it is refused. A listener answers these routes only to its own names and
 * addresses: the address it actually bound (`localhost:8083` is judged by what `localhost`
 * resolved to when it listened), the name it was configured with, `localhost` when it is bound
 * to loopback, every address and the host name of this machine when it is bound to all of them
 * (0.0.0.0, ::), and the names the operator lists (api.allowedHosts, console.publicUrl).
 */
import { hostname, networkInterfaces } from 'node:os';
import { isIP } from 'node:net';
import type { Context } from 'koa';
import { ErrorCode, excerpt } from '../domain/errors.ts';
import { isLoopbackHost, isWildcardHost, parseListen } from '../domain/listen.ts';
import { problem } from './problem.ts';

/** A listener as the Host check knows it. */
export interface ListenerIdentity {
  /** Its address as configured, HOST:PORT (a name or an address). */
  readonly listen: string;
  /** The address and port it bound, once it listens; null before. */
  bound(): { readonly address: string; readonly port: number } | null;
  /** More names it answers to, `name` (any port) or `name:port`: api.allowedHosts, console.publicUrl's host. */
  readonly extraHosts: readonly string[];
}

/** A listener known by its configured address only (bound() is null): for an app that is not served by a listener of the relay's. */
export function configuredListener(listen: string, extraHosts: readonly string[] = []): ListenerIdentity {
  return { listen, bound: () => null, extraHosts };
}

/** A Host header value split into its name (lower case, no brackets, no trailing dot) and port (null when absent). */
export function parseHostHeader(value: string): { name: string; port: number | null } | null {
  const m = /^(\[[0-9a-f:.]+\]|[^:[\]]+)(?::(\d{1,5}))?$/i.exec(value.trim());
  if (m === null) return null;
  const name = m[1]!.toLowerCase().replace(/^\[(.*)\]$/, '$1').replace(/\.$/, '');
  return { name, port: m[2] === undefined ? null : Number(m[2]) };
}

/** Every address of this machine's interfaces (what a listener on 0.0.0.0 or :: is reached at). */
function machineAddresses(): Set<string> {
  const out = new Set<string>();
  for (const list of Object.values(networkInterfaces())) for (const a of list ?? []) out.add(a.address.toLowerCase().replace(/%.*$/, ''));
  return out;
}

/** The names and addresses `listener` answers to, as `name` -> the port they must come with. */
export function ownHosts(listener: ListenerIdentity): { names: ReadonlySet<string>; port: number; wildcard: boolean } {
  const bound = listener.bound();
  const configured = parseListen(listener.listen).host.toLowerCase();
  const port = bound?.port ?? parseListen(listener.listen).port;
  const names = new Set<string>([configured]);
  const address = (bound?.address ?? configured).toLowerCase();
  names.add(address);
  const wildcard = isWildcardHost(address);
  if (wildcard) {
    names.add('localhost');
    names.add(hostname().toLowerCase());
  } else if (isIP(address) !== 0 && isLoopbackHost(address)) names.add('localhost');
  return { names, port, wildcard };
}

/**
 * Null when `header` (the request's Host) names `listener`, else a sentence saying why not and
 * what to do.
 */
export function hostRefusal(listener: ListenerIdentity, header: string | undefined, route: string): string | null {
  const given = header === undefined || header === '' ? null : parseHostHeader(header);
  if (given !== null) {
    const own = ownHosts(listener);
    // A Host without a port means the scheme's default (http: 80).
    const port = given.port ?? 80;
    if (port === own.port && (own.names.has(given.name) || (own.wildcard && isIP(given.name) !== 0 && machineAddresses().has(given.name)))) return null;
    for (const extra of listener.extraHosts) {
      const allowed = parseHostHeader(extra);
      if (allowed !== null && allowed.name === given.name && (allowed.port === null || allowed.port === given.port)) return null;
    }
  }
  const shown = header === undefined || header === '' ? 'no Host header' : `Host ${excerpt(header)}`;
  return (
    `${route} answers only requests addressed to this listener (${listener.listen}) by one of its own names or addresses, and this one has ${shown}. ` +
    'A page in a browser may not read it through another name (DNS rebinding); if a reverse proxy or a scraper reaches the daemon by a name of its own, list that name in api.allowedHosts'
  );
}

/** For a route: throws 403 `forbidden` unless the request's Host names `listener` (see hostRefusal). */
export function requireOwnHost(ctx: Context, listener: ListenerIdentity, route: string): void {
  const refusal = hostRefusal(listener, ctx.get('Host') || undefined, route);
  if (refusal !== null) throw problem(ErrorCode.forbidden, refusal);
}

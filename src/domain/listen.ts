import { isIP } from 'node:net';

/** Splits a HOST:PORT listen address (`127.0.0.1:8080`, `[::1]:8080`, `localhost:8080`). */
export function parseListen(listen: string): { host: string; port: number } {
  const at = listen.lastIndexOf(':');
  const host = listen.slice(0, at).replace(/^\[(.*)\]$/, '$1');
  return { host, port: Number(listen.slice(at + 1)) };
}

/**
 * True when a socket bound to `host` accepts connections from this machine only: 127.0.0.0/8,
 * ::1 (and ::ffff:127.x.y.z), or `localhost`. Wildcards (0.0.0.0, ::) and every other name or
 * address are not loopback.
 */
export function isLoopbackHost(host: string): boolean {
  const h = host.toLowerCase();
  if (h === 'localhost') return true;
  if (isIP(h) === 4) return h.startsWith('127.');
  if (isIP(h) === 6) return h === '::1' || h === '0:0:0:0:0:0:0:1' || /^::ffff:127\./.test(h);
  return false;
}

/** A wildcard listen host (every address of the machine). */
export function isWildcardHost(host: string): boolean {
  return host === '0.0.0.0' || host === '::' || host === '[::]';
}

/**
 * The base URL (`http://HOST:PORT`, no trailing slash) at which this machine reaches a listener
 * bound to `listen`: a wildcard address is reached on loopback. Null for port 0, which the
 * listener picks when it starts.
 */
export function localBaseUrl(listen: string): string | null {
  const { host, port } = parseListen(listen);
  if (port === 0) return null;
  const target = isWildcardHost(host) ? (host === '0.0.0.0' ? '127.0.0.1' : '::1') : host;
  return `http://${target.includes(':') ? `[${target}]` : target}:${port}`;
}

/**
 * The console's address, and the redirect URI to register at the identity provider:
 * <console.publicUrl>/console/, or, without it, `origin` + /console/ (the address the browser used,
 * or the api.listen address for `hookrelay status`).
 */
export function consoleRedirectUri(publicUrl: string | null, origin: string): string {
  return `${(publicUrl ?? origin).replace(/\/+$/, '')}/console/`;
}

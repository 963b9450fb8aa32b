/** Hash routes of the console. No DOM access (unit-tested under Node). */

export type Route =
  | { readonly view: 'webhook' }
  | { readonly view: 'webhook-edit' }
  | { readonly view: 'team' }
  | { readonly view: 'audit' }
  | { readonly view: 'deliveries' }
  | { readonly view: 'delivery'; readonly id: number }
  | { readonly view: 'not-found'; readonly path: string };

/** Largest delivery id the API accepts (`^\d{1,15}$`). */
const DELIVERY_ID = /^[1-9]\d{0,14}$/;

/**
 * The route of a location hash: `#/webhook` (also the empty hash and `#/`), `#/webhook/edit`,
 * `#/deliveries`, `#/deliveries/ID`, `#/team`, `#/audit`. A query after `?` and a trailing slash are ignored.
 */
export function parseRoute(hash: string): Route {
  let path = hash.startsWith('#') ? hash.slice(1) : hash;
  const query = path.indexOf('?');
  if (query !== -1) path = path.slice(0, query);
  if (path.length > 1 && path.endsWith('/')) path = path.slice(0, -1);
  if (path === '' || path === '/' || path === '/webhook') return { view: 'webhook' };
  if (path === '/webhook/edit') return { view: 'webhook-edit' };
  if (path === '/deliveries') return { view: 'deliveries' };
  if (path === '/team') return { view: 'team' };
  if (path === '/audit') return { view: 'audit' };
  const match = /^\/deliveries\/([^/]+)$/.exec(path);
  if (match !== null && DELIVERY_ID.test(match[1] ?? '')) return { view: 'delivery', id: Number(match[1]) };
  return { view: 'not-found', path };
}

export function routeHash(route: Route): string {
  switch (route.view) {
    case 'webhook':
      return '#/webhook';
    case 'webhook-edit':
      return '#/webhook/edit';
    case 'deliveries':
      return '#/deliveries';
    case 'team':
      return '#/team';
    case 'audit':
      return '#/audit';
    case 'delivery':
      return `#/deliveries/${route.id}`;
    case 'not-found':
      return `#${route.path}`;
  }
}

/** The link to a delivery's page. */
export const deliveryHref = (id: number): string => routeHash({ view: 'delivery', id });

/**
 * Where the API is, from the console page's path: the console is served at `<base>console/`,
 * the API at `<base>` (`/` on the daemon itself; a prefix behind a reverse proxy).
 */
export function apiBaseFromPath(pathname: string): string {
  const match = /^(.*\/)console(\/[^/]*)?$/.exec(pathname);
  return match?.[1] ?? '/';
}

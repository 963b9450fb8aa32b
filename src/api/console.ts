/**
 * The delivery console: static files (docs/console.md) served under /console/ on the admin
 * listener, the same origin as the API they call. The files are built by `npm run build` into
 * dist/console (from console/) and read once, when the app is created; they hold no secret
 * and no data: the page signs in with the API's own bearer tokens and asks the API for
 * everything, scoped to the token's organization like any other client.
 */
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { extname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Context, Middleware, Next } from 'koa';
import type { Router } from '@koa/router';
import { ErrorCode, excerpt } from '../domain/errors.ts';
import { requireOwnHost, type ListenerIdentity } from './host-check.ts';
import type { ConsoleSignInSettings } from './console-sign-in.ts';
import { problem } from './problem.ts';

/** Where the build puts the console: <package>/dist/console, from src/api/ (tsx) and dist/api/ alike. */
export const CONSOLE_DIR = fileURLToPath(new URL('../../dist/console/', import.meta.url));

/**
 * Sent with every console response. The page runs only its own scripts (no inline script, no
 * eval), talks only to this origin, cannot be framed (clickjacking) and sends no Referer (its
 * address may hold a delivery id).
 */
export const CONSOLE_CSP = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; frame-ancestors 'none'; base-uri 'none'; form-action 'none'";

/**
 * CONSOLE_CSP with more origins the page may call (connect-src): the identity provider's token
 * endpoint, where the page exchanges its sign-in code (console-sign-in.ts).
 */
export function consoleCsp(connectOrigins: readonly string[]): string {
  return CONSOLE_CSP.replace("connect-src 'self'", ["connect-src 'self'", ...connectOrigins].join(' '));
}

/**
 * The console's security headers (CONSOLE_CSP and the rest), on every answer under /console/:
 * the files, the redirect, and every error, OPTIONS and HEAD (consoleGuard). `no-store` is the
 * listener's default already; it is here too so that no console answer depends on where that
 * default is set.
 */
export const CONSOLE_HEADERS: Readonly<Record<string, string>> = {
  'Content-Security-Policy': CONSOLE_CSP,
  'X-Content-Type-Options': 'nosniff',
  'Referrer-Policy': 'no-referrer',
  'X-Frame-Options': 'DENY',
  'Cross-Origin-Opener-Policy': 'same-origin',
  'Cache-Control': 'no-store',
};

/**
 * A request path (as sent, not decoded) that is the console's: /console and every path under
 * /console/, in any case, as the router matches the console's routes (@koa/router ignores case).
 */
const CONSOLE_PATH = /^\/console(?:\/|$)/i;

/**
 * The one place the console's answers are secured: for a request under /console/ (any method),
 * sets CONSOLE_HEADERS first, then refuses, 403, a Host that does not name `listener`
 * (host-check.ts; none checked without one), before any route, 404, 405 or OPTIONS answer is
 * made. `connectOrigins` are added to the CSP's connect-src (the identity provider's token
 * endpoint, once known). Mount it after the error mapping, which keeps headers already set: so the 403 of the Host
 * check, a 404, 405, 429 or 500 carry them as the files do, and a new route or branch cannot
 * forget them.
 */
export function consoleGuard(listener?: ListenerIdentity, connectOrigins: () => readonly string[] = () => []): Middleware {
  return async function guardConsole(ctx: Context, next: Next): Promise<void> {
    if (CONSOLE_PATH.test(ctx.path)) {
      ctx.set(CONSOLE_HEADERS);
      const origins = connectOrigins();
      if (origins.length > 0) ctx.set('Content-Security-Policy', consoleCsp(origins));
      if (listener !== undefined) requireOwnHost(ctx, listener, 'The console');
    }
    await next();
  };
}

const CONTENT_TYPES: Readonly<Record<string, string>> = {
  '.html': 'text/html; charset=utf-8',
  '.js': 'text/javascript; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
  '.svg': 'image/svg+xml',
  '.png': 'image/png',
  '.ico': 'image/x-icon',
  '.json': 'application/json',
};

interface ConsoleFile {
  readonly body: Buffer;
  readonly type: string;
}

/** The console's files by their path under /console/ ("" is index.html); empty when it was not built. */
export function loadConsoleFiles(dir: string = CONSOLE_DIR): Map<string, ConsoleFile> {
  const files = new Map<string, ConsoleFile>();
  const visit = (sub: string) => {
    let names: string[];
    try {
      names = readdirSync(join(dir, sub));
    } catch {
      return;
    }
    for (const name of names) {
      const rel = sub === '' ? name : `${sub}/${name}`;
      const path = join(dir, rel);
      if (statSync(path).isDirectory()) visit(rel);
      else if (CONTENT_TYPES[extname(name)] !== undefined) files.set(rel, { body: readFileSync(path), type: CONTENT_TYPES[extname(name)]! });
    }
  };
  visit('');
  const index = files.get('index.html');
  if (index) files.set('', index);
  return files;
}

/**
 * Registers GET /console (a redirect), /console/, /console/sign-in.json (`signIn`'s answer) and
 * /console/<file> on `router`. The headers
 * and the Host check of every console answer are consoleGuard's, which must run before the
 * router (createApi mounts it).
 */
export function registerConsoleRoutes(router: Router, files: Map<string, ConsoleFile> = loadConsoleFiles(), signIn: (ctx: Context) => ConsoleSignInSettings = () => ({ provider: null })): void {
  const send = (ctx: Context, path: string) => {
    const file = files.get(path);
    if (!file) {
      if (files.size === 0) throw problem(ErrorCode.notFound, 'The console was not built: run npm run build (npm ci does), then restart the daemon');
      throw problem(ErrorCode.notFound, `There is no ${excerpt(`/console/${path}`)} (the console is at /console/)`);
    }
    ctx.type = file.type;
    ctx.body = file.body;
  };
  // The router matches /console and /console/ alike: the page's relative URLs need the slash.
  router.register('/console', ['GET', 'HEAD'], [
    (ctx) => {
      if (ctx.path.endsWith('/')) return send(ctx, '');
      // Relative, so that a reverse proxy's path prefix stays (/ops/console -> /ops/console/).
      ctx.redirect('console/');
    },
  ]);
  // Before the files' route: how the sign-in page may sign in (console-sign-in.ts).
  router.register('/console/sign-in.json', ['GET', 'HEAD'], [
    (ctx) => {
      ctx.body = signIn(ctx);
    },
  ]);
  // Only names of the build's own files are looked up: no path is ever joined with what the client sent.
  router.register('/console/*path', ['GET', 'HEAD'], [
    (ctx) => {
      const path = (ctx as Context & { params: Record<string, string | string[] | undefined> }).params.path;
      send(ctx, Array.isArray(path) ? path.join('/') : (path ?? ''));
    },
  ]);
}

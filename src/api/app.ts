import { readFileSync } from 'node:fs';
import Koa, { type Context, type Middleware, type Next } from 'koa';
import { Router } from '@koa/router';
import type { Config } from '../config/load.ts';
import type { Clock } from '../domain/clock.ts';
import { ErrorCode, excerpt, HookrelayError, isHookrelayError } from '../domain/errors.ts';
import type { Permission } from '../domain/permissions.ts';
import type { Principal } from '../domain/types.ts';
import type { Logger } from '../log.ts';
import type { AuthKeys } from '../services/auth-keys.ts';
import type { AuditTrail } from '../services/audit.ts';
import { AnonymousRefusals, auditContextOf, auditRefusals, requestId } from './audit-context.ts';
import { registerAuditRoutes } from './routes/audit.ts';
import type { RoleService } from '../services/roles.ts';
import type { UserService } from '../services/users.ts';
import type { WebhookService } from '../services/webhooks.ts';
import { AuthError, authenticate, type ProviderVerifier, requirePermission } from './auth.ts';
import { providerVerifier } from './provider-auth.ts';
import type { ProviderKeys } from '../services/provider-keys.ts';
import { authenticateWithApiKeys } from './api-key-auth.ts';
import type { ApiKeyService } from '../services/api-keys.ts';
import { registerApiKeyRoutes } from './routes/api-keys.ts';
import { jsonBody } from './body.ts';
import { consoleConnectOrigins, consoleSignInSettings } from './console-sign-in.ts';
import { pathExcerpt, problem, writeProblem } from './problem.ts';
import { notFoundRateLimit, rateLimit, type RateLimitOptions } from './rate-limit.ts';
import { versionMiddleware } from './version.ts';
import type { SecuredRouter } from './secured-router.ts';
import { registerUserRoutes } from './routes/users.ts';
import { registerWebhookRoutes } from './routes/webhook.ts';
import { registerDeliveryRoutes } from './routes/deliveries.ts';
import type { DeliveryLogService } from '../services/delivery-log.ts';
import { metricsHandler, type MetricsEndpoint } from './metrics.ts';
import { consoleGuard, registerConsoleRoutes } from './console.ts';
import { configuredListener, type ListenerIdentity } from './host-check.ts';
import { iso } from '../domain/iso.ts';
import type { Tracer } from '@opentelemetry/api';
import { traceRequests } from './request-tracing.ts';

export interface ApiDeps {
  readonly config: Pick<Config, 'api' | 'auth' | 'console'>;
  readonly keys: AuthKeys;
  readonly clock: Clock;
  readonly log: Logger;
  readonly services: {
    readonly audit: AuditTrail;
    readonly roles: RoleService;
    readonly users: UserService;
    readonly apiKeys: ApiKeyService;
    readonly webhooks: WebhookService;
    readonly deliveryLog: DeliveryLogService;
  };
  /** Readiness: throws, returns false or says why not while the relay cannot serve (database gone or unwritable, shutting down). */
  readonly isReady: () => boolean | NotReady | Promise<boolean | NotReady>;
  /** Ready, but on borrowed time (the identity provider's cached keys): listed in a 200 /readyz. */
  readonly degraded?: () => readonly NotReady[];
  /** auth.provider: the provider's keys, when it is set. */
  readonly providerKeys?: ProviderKeys;
  /** GET /metrics on this listener, when the metrics are served here. */
  readonly metrics?: MetricsEndpoint;
  /**
   * The listener this app is served on, for the Host check of /metrics and the console
   * (host-check.ts); by default, api.listen as configured.
   */
  readonly listener?: ListenerIdentity;
  /** Traces each request (a SERVER span: request-tracing.ts) while tracing is on. */
  readonly tracer?: Tracer | null;
}

/** Why the relay is not ready: a stable reason (`disk_full`, `database_damaged`, ...), a sentence for the operator, since when (epoch ms). */
export interface NotReady {
  readonly reason: string;
  readonly detail: string;
  readonly since?: number;
}

export interface RouteInfo {
  readonly method: string;
  readonly path: string;
  /** Null for the public health and description routes. */
  readonly permission: Permission | null;
}

/**
 * Refusals of callers without a valid token recorded per minute, at most (see
 * AnonymousRefusals): a flood of junk requests adds this many entries a minute to the trail.
 */
const ANONYMOUS_REFUSALS_PER_MINUTE = 30;

const OPENAPI_URL = new URL('../../docs/openapi.json', import.meta.url);

/** The identity provider's verifier for authenticate(), when auth.provider is set. */
function providerOption(deps: ApiDeps): { provider?: ProviderVerifier } {
  if (deps.providerKeys === undefined) return {};
  return { provider: providerVerifier({ auth: deps.config.auth, keys: deps.providerKeys, users: deps.services.users, clock: deps.clock }) };
}

/** The Koa application of the admin API. It never listens; the relay owns the server. */
export function createApi(deps: ApiDeps): { app: Koa; routes: readonly RouteInfo[] } {
  const log = deps.log.child({ subsystem: 'api' });
  const app = new Koa();
  app.silent = true;
  const router = new Router();
  const routes: RouteInfo[] = [];

  // A bearer token that starts with hkr_ is an API key (api-key-auth.ts); any other, a JWT.
  const auth = authenticateWithApiKeys(deps.services.apiKeys, authenticate({ keys: deps.keys, auth: deps.config.auth, users: deps.services.users, clock: deps.clock, ...providerOption(deps) }));
  const rates: RateLimitOptions = { perMinute: deps.config.api.rateLimitPerMinute, burst: deps.config.api.rateLimitBurst };
  const limit = rateLimit(rates);
  const body = jsonBody(deps.config.api.bodyLimitBytes);
  const anonymousRefusals = new AnonymousRefusals(ANONYMOUS_REFUSALS_PER_MINUTE);

  const secured: SecuredRouter = {
    route(methods, path, permission, handler, options = {}) {
      // The rate limit counts verified tokens only, so junk tokens cannot evict real clients' buckets.
      // A refusal (401, 403) of a route that changes something is recorded in the audit trail.
      const chain: Middleware[] = [versionMiddleware, auditRefusals(deps.services.audit, permission, path, anonymousRefusals), auth, limit, requirePermission(permission)];
      if (options.body) chain.push(body);
      // Runs once: a lock another process holds is waited for inside the store, before the
      // transaction that needs it runs (the daemon's store: up to database.busyTimeout, on
      // timers, then 503 database_busy; see docs/storage.md, "Lock waits").
      chain.push((ctx) => handler(ctx, ctx.state.principal as Principal, auditContextOf(ctx)));
      router.register(path, [...methods], chain);
      for (const method of methods) routes.push({ method, path, permission });
    },
  };

  const publicRoute = (path: string, handler: (ctx: Context) => void) => {
    router.register(path, ['GET'], [handler]);
    routes.push({ method: 'GET', path, permission: null });
  };
  publicRoute('/healthz', (ctx) => {
    ctx.body = { status: 'ok' };
  });
  publicRoute('/readyz', async (ctx) => {
    let ready: boolean | NotReady = false;
    try {
      ready = await deps.isReady();
    } catch (err) {
      log.warn({ err }, 'readiness check failed');
    }
    ctx.status = ready === true ? 200 : 503;
    const degraded = ready === true ? (deps.degraded?.() ?? []) : [];
    if (degraded.length > 0) ctx.body = { status: 'ready', degraded: degraded.map((d) => ({ reason: d.reason, detail: d.detail, ...(d.since === undefined ? {} : { since: iso(d.since) }) })) };
    else if (ready === true || ready === false) ctx.body = { status: ready ? 'ready' : 'not_ready' };
    else {
      const since = ready.since === undefined ? {} : { since: iso(ready.since) };
      ctx.body = { status: 'not_ready', reason: ready.reason, detail: ready.detail, ...since };
    }
  });
  const openapi = readFileSync(OPENAPI_URL, 'utf8');
  publicRoute('/openapi.json', (ctx) => {
    ctx.type = 'application/json';
    ctx.body = openapi;
  });

  const listener = deps.listener ?? configuredListener(deps.config.api.listen);
  if (deps.metrics) publicRoute('/metrics', metricsHandler(deps.metrics, listener));
  // The console's static files (not part of the API: no version, no token; the page sends its
  // token to the API). Their headers and Host check (only the listener's own names,
  // host-check.ts) are consoleGuard's, given to serve() below.
  const providerKeys = deps.providerKeys ?? null;
  registerConsoleRoutes(router, undefined, (ctx) => consoleSignInSettings(deps.config, providerKeys, ctx));

  registerUserRoutes(secured, deps.services);
  registerWebhookRoutes(secured, deps.services);
  registerDeliveryRoutes(secured, deps.services);
  registerAuditRoutes(secured, deps.services);
  registerApiKeyRoutes(secured, deps.services);

  serve(app, router, log, 'see /openapi.json for the API', rates, [consoleGuard(listener, () => consoleConnectOrigins(deps.config, providerKeys))], deps.tracer ?? null);
  return { app, routes };
}

/**
 * The app of the metrics listener (metrics.listen): GET /metrics and nothing else, with the
 * admin API's error bodies and access log.
 */
export function createMetricsApp(deps: { readonly log: Logger; readonly metrics: MetricsEndpoint; readonly rates: RateLimitOptions; readonly listener: ListenerIdentity }): Koa {
  const app = new Koa();
  app.silent = true;
  const router = new Router();
  router.register('/metrics', ['GET'], [metricsHandler(deps.metrics, deps.listener)]);
  serve(app, router, deps.log.child({ subsystem: 'metrics' }), 'this listener serves GET /metrics only', deps.rates);
  return app;
}

/**
 * The middleware every listener shares: access log, the rate of 404s no token paid for,
 * problem+json errors, then `guards` (the console's headers and Host check), no caching, 404
 * and 405 as problems, then the routes. A guard runs for every request before anything answers
 * it, inside the error mapping: what it sets stays on every answer, errors included, and what it
 * throws is a problem.
 */
function serve(app: Koa, router: Router, log: Logger, notFoundHint: string, rates: RateLimitOptions, guards: readonly Middleware[] = [], tracer: Tracer | null = null): void {
  app.use(requestId());
  // Around the access log (whose line carries the trace id) and the error mapping (the span gets the status answered).
  if (tracer !== null) app.use(traceRequests(tracer));
  app.use(accessLog(log));
  app.use(notFoundRateLimit(rates));
  app.use(errorsAsProblems(log));
  for (const guard of guards) app.use(guard);
  app.use(async (ctx, next) => {
    ctx.set('Cache-Control', 'no-store');
    await next();
    // Runs after the router and allowedMethods have had their say. The path is the client's,
    // of any length: quoted as a short excerpt.
    if (ctx.status === 405) throw problem(ErrorCode.methodNotAllowed, `${ctx.method} is not allowed on ${excerpt(ctx.path)}; allowed: ${ctx.response.get('Allow')}`);
    if (ctx.status === 404 && ctx.body == null) throw problem(ErrorCode.notFound, `There is no ${excerpt(ctx.path)}; ${notFoundHint}`);
  });
  app.use(router.routes());
  app.use(router.allowedMethods());
}

/** Maps every error to problem+json; unexpected errors are logged and shown as a bare 500. */
function errorsAsProblems(log: Logger): Middleware {
  return async function problems(ctx: Context, next: Next): Promise<void> {
    try {
      await next();
    } catch (err) {
      let known: HookrelayError;
      if (isHookrelayError(err)) {
        known = err;
        if (err instanceof AuthError) ctx.set('WWW-Authenticate', err.challenge);
        if (err.code === ErrorCode.databaseBusy) ctx.set('Retry-After', '1');
      } else {
        const status = (err as { status?: number; expose?: boolean }).status;
        if (status === 413) known = problem(ErrorCode.payloadTooLarge, 'The request body is too large');
        else if (status === 400 && (err as { expose?: boolean }).expose) known = problem(ErrorCode.malformedJson, 'The request could not be read');
        else {
          log.error({ err, method: ctx.method, path: pathExcerpt(ctx.path, LOGGED_PATH_CHARS) }, 'unhandled error in request');
          known = new HookrelayError(ErrorCode.internal, 'internal error');
        }
      }
      writeProblem(ctx, known);
    }
  };
}

const ROUTINE_PATHS = new Set(['/healthz', '/readyz', '/metrics']);
/** Longest part of a request path the access log writes (the API's own paths are far shorter); `pathChars` gives the whole length of a longer one. */
const LOGGED_PATH_CHARS = 200;

function accessLog(log: Logger): Middleware {
  return async function logRequest(ctx: Context, next: Next): Promise<void> {
    const started = performance.now();
    try {
      await next();
    } finally {
      const principal = ctx.state.principal as Principal | undefined;
      // Probes and scrapes come every few seconds: at debug when they succeed, so they do not drown the log.
      const routine = ctx.method === 'GET' && ROUTINE_PATHS.has(ctx.path) && ctx.status < 400;
      log[routine ? 'debug' : 'info'](
        {
          method: ctx.method,
          path: pathExcerpt(ctx.path, LOGGED_PATH_CHARS),
          ...(ctx.path.length > LOGGED_PATH_CHARS ? { pathChars: ctx.path.length } : {}),
          status: ctx.status,
          ms: Math.round((performance.now() - started) * 10) / 10,
          ...(principal ? { org: principal.orgId, user: principal.email } : {}),
          ...(typeof ctx.state.requestId === 'string' ? { requestId: ctx.state.requestId } : {}),
          ...(typeof ctx.state.traceId === 'string' ? { traceId: ctx.state.traceId } : {}),
        },
        'request',
      );
    }
  };
}

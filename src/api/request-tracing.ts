/**
 * A SERVER span for each admin API request (docs/observability.md), continuing the caller's
 * trace when the request carries a W3C `traceparent`: named by its route (`GET
 * /webhook/deliveries/:id`), with the semantic conventions' attributes. Nothing of a secret:
 * no header value, no query, no body; the path (url.path) names no credential in this API.
 * Probes and scrapes (/healthz, /readyz, /metrics: every few seconds) are not traced.
 */
import type { Context, Middleware, Next } from 'koa';
import { ROOT_CONTEXT, SpanKind, SpanStatusCode, type TextMapGetter, type Tracer } from '@opentelemetry/api';
import { W3CTraceContextPropagator } from '@opentelemetry/core';
import { ATTR_CLIENT_ADDRESS, ATTR_ERROR_TYPE, ATTR_HTTP_REQUEST_METHOD, ATTR_HTTP_RESPONSE_STATUS_CODE, ATTR_HTTP_ROUTE, ATTR_URL_PATH, ATTR_URL_SCHEME } from '@opentelemetry/semantic-conventions';
import type { Principal } from '../domain/types.ts';

const UNTRACED_PATHS: ReadonlySet<string> = new Set(['/healthz', '/readyz', '/metrics']);
/** Longest url.path recorded (the API's own paths are far shorter). */
const MAX_PATH_CHARS = 200;

const headerGetter: TextMapGetter<Context['headers']> = {
  keys: (headers) => Object.keys(headers),
  get: (headers, key) => headers[key],
};

/** The span name of a request: its method and route, or its method alone when no route matched (a 404 names no path: paths are the client's). */
export function requestSpanName(method: string, route: unknown): string {
  return typeof route === 'string' ? `${method} ${route}` : method;
}

/** The Koa middleware that traces each request with `tracer`; sets ctx.state.traceId (the access log line carries it). */
export function traceRequests(tracer: Tracer): Middleware {
  const propagator = new W3CTraceContextPropagator();
  return async function traced(ctx: Context, next: Next): Promise<void> {
    if (UNTRACED_PATHS.has(ctx.path)) return next();
    const parent = propagator.extract(ROOT_CONTEXT, ctx.headers, headerGetter);
    const span = tracer.startSpan(
      ctx.method,
      {
        kind: SpanKind.SERVER,
        attributes: {
          [ATTR_HTTP_REQUEST_METHOD]: ctx.method,
          [ATTR_URL_PATH]: ctx.path.length > MAX_PATH_CHARS ? ctx.path.slice(0, MAX_PATH_CHARS) : ctx.path,
          [ATTR_URL_SCHEME]: ctx.protocol,
          ...(ctx.ip === '' ? {} : { [ATTR_CLIENT_ADDRESS]: ctx.ip }),
        },
      },
      parent,
    );
    ctx.state.traceId = span.spanContext().traceId;
    try {
      await next();
    } finally {
      const route = (ctx as Context & { _matchedRoute?: string | RegExp })._matchedRoute;
      span.updateName(requestSpanName(ctx.method, route));
      if (typeof route === 'string') span.setAttribute(ATTR_HTTP_ROUTE, route);
      span.setAttribute(ATTR_HTTP_RESPONSE_STATUS_CODE, ctx.status);
      const principal = ctx.state.principal as Principal | undefined;
      if (principal !== undefined) span.setAttribute('hookrelay.organization', principal.orgId);
      if (typeof ctx.state.requestId === 'string') span.setAttribute('hookrelay.request_id', ctx.state.requestId);
      // A server span is an error for a 5xx only: a 4xx is the client's (the conventions' rule).
      if (ctx.status >= 500) {
        span.setAttribute(ATTR_ERROR_TYPE, String(ctx.status));
        span.setStatus({ code: SpanStatusCode.ERROR });
      }
      span.end();
    }
  };
}

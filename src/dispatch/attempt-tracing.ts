/**
 * The span of each delivery attempt (docs/observability.md): an HTTP CLIENT span named "POST",
 * a child of the event's stored trace context (its ingest span, or the producer's span), with
 * the OpenTelemetry semantic conventions' attributes; and the W3C `traceparent` (and the event's
 * `tracestate`) the attempt sends (tracing.propagate), whose parent id is this span's: the
 * receiver's trace continues the event's.
 *
 * Nothing of a secret goes into a span: the URL is its origin only (as in the log: the path and
 * query of webhook URLs often carry the receiver's secret), and no header value but webhook-id.
 * Made only while tracing is on: the dispatcher holds null otherwise, and an attempt then costs
 * one null check.
 */
import { defaultTextMapSetter, ROOT_CONTEXT, SpanKind, SpanStatusCode, trace, type Attributes, type Span, type Tracer } from '@opentelemetry/api';
import { W3CTraceContextPropagator } from '@opentelemetry/core';
import {
  ATTR_ERROR_TYPE,
  ATTR_HTTP_REQUEST_METHOD,
  ATTR_HTTP_REQUEST_RESEND_COUNT,
  ATTR_HTTP_RESPONSE_STATUS_CODE,
  ATTR_SERVER_ADDRESS,
  ATTR_SERVER_PORT,
  ATTR_URL_FULL,
  ATTR_URL_SCHEME,
} from '@opentelemetry/semantic-conventions';
import type { AttemptResult, DeliveryOutcome } from '../domain/retry-policy.ts';
import { parentContext } from '../services/ingest-tracing.ts';
import type { ClaimedDelivery } from '../services/outbox.ts';

/** The trace context headers an attempt sends. */
export interface TraceHeaders {
  readonly traceparent: string;
  readonly tracestate?: string;
}

/** The semantic conventions' name of a request header's attribute. */
const WEBHOOK_ID_HEADER = 'http.request.header.webhook-id';
/** Webhook URLs are few: their attributes are worked out once each (cleared past this many). */
const MAX_CACHED_URLS = 10_000;

/**
 * The attributes of where a webhook URL points: its origin as url.full (never its userinfo,
 * path or query), its scheme, host and port. A URL that does not parse (its attempt fails as
 * invalid_url) gives none.
 */
export function urlAttributes(url: string): Attributes {
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    return {};
  }
  if (parsed.origin === 'null') return {};
  const scheme = parsed.protocol.slice(0, -1);
  const port = parsed.port === '' ? (scheme === 'https' ? 443 : 80) : Number(parsed.port);
  return { [ATTR_URL_FULL]: parsed.origin, [ATTR_URL_SCHEME]: scheme, [ATTR_SERVER_ADDRESS]: parsed.hostname.replace(/^\[(.*)\]$/, '$1'), [ATTR_SERVER_PORT]: port };
}

/** One traced attempt: its span, and the headers it sends (none when tracing.propagate is off). */
export class TracedAttempt {
  readonly span: Span;
  readonly headers: TraceHeaders | undefined;

  constructor(span: Span, headers: TraceHeaders | undefined) {
    this.span = span;
    this.headers = headers;
  }

  /**
   * Ends the span with what the attempt got: the status code, the error class (error.type:
   * the status code for an error answer, as the conventions have it, else hookrelay's class),
   * and what the attempt led to. `outcome` null: the daemon's stop cut the attempt short (it is
   * given back and made again).
   */
  end(result: AttemptResult, outcome: DeliveryOutcome | null): void {
    const span = this.span;
    if (result.statusCode !== null) span.setAttribute(ATTR_HTTP_RESPONSE_STATUS_CODE, result.statusCode);
    span.setAttribute('hookrelay.outcome', outcome === null ? 'cut_short' : outcome.kind === 'disable' ? 'disabled' : outcome.kind);
    if (result.error !== null) {
      span.setAttribute(ATTR_ERROR_TYPE, result.statusCode !== null && result.statusCode >= 400 ? String(result.statusCode) : result.error);
      span.setStatus({ code: SpanStatusCode.ERROR, message: result.error });
    }
    span.end();
  }
}

export class AttemptTracing {
  readonly #tracer: Tracer;
  readonly #propagate: boolean;
  readonly #propagator = new W3CTraceContextPropagator();
  readonly #urls = new Map<string, Attributes>();

  constructor(tracer: Tracer, options: { readonly propagate: boolean }) {
    this.#tracer = tracer;
    this.#propagate = options.propagate;
  }

  /** Starts the span of the attempt of `d` that starts now (its number: d.attempts + 1). */
  start(d: ClaimedDelivery): TracedAttempt {
    const attempt = d.attempts + 1;
    const span = this.#tracer.startSpan(
      'POST',
      {
        kind: SpanKind.CLIENT,
        attributes: {
          [ATTR_HTTP_REQUEST_METHOD]: 'POST',
          ...this.#urlAttributes(d.url),
          ...(attempt > 1 ? { [ATTR_HTTP_REQUEST_RESEND_COUNT]: attempt - 1 } : {}),
          'hookrelay.attempt': attempt,
          'hookrelay.delivery_id': d.id,
          'hookrelay.organization': d.orgId,
          'hookrelay.event_id': d.eventId,
          [WEBHOOK_ID_HEADER]: [d.eventId],
        },
      },
      parentContext(d.traceparent, d.tracestate),
    );
    if (!this.#propagate) return new TracedAttempt(span, undefined);
    const carrier: { traceparent?: string; tracestate?: string } = {};
    this.#propagator.inject(trace.setSpan(ROOT_CONTEXT, span), carrier, defaultTextMapSetter);
    const headers = carrier.traceparent === undefined ? undefined : carrier.tracestate === undefined ? { traceparent: carrier.traceparent } : { traceparent: carrier.traceparent, tracestate: carrier.tracestate };
    return new TracedAttempt(span, headers);
  }

  #urlAttributes(url: string): Attributes {
    let attributes = this.#urls.get(url);
    if (attributes === undefined) {
      if (this.#urls.size >= MAX_CACHED_URLS) this.#urls.clear();
      this.#urls.set(url, (attributes = urlAttributes(url)));
    }
    return attributes;
  }
}

/**
 * The ingest span of each event read from the feed (docs/observability.md): a CONSUMER span
 * named "ingest", a child of the producer's span when the feed line carries its traceparent, a
 * new trace otherwise. Its context becomes the event's stored trace context, so every delivery
 * attempt of the event, retries and replays included, after a restart too, is a child of it and
 * carries its trace id to the receiver.
 *
 * Made only while tracing is on (the ingest service holds null otherwise): nothing here runs,
 * and nothing is allocated, for a daemon that does not trace.
 */
import { createTraceState, ROOT_CONTEXT, SpanKind, trace, type Context, type Span, type Tracer } from '@opentelemetry/api';
import { formatTraceparent, parseTraceparent, type LineTrace } from '../domain/trace-context.ts';
import type { EventToStore } from '../store/values.ts';

/** What became of an event's line: stored and queued, stored for an organization without a webhook, a duplicate, a conflict (quarantined). */
export type IngestOutcome = 'queued' | 'undeliverable' | 'duplicate' | 'conflict' | 'failed';

export const INGEST_SPAN_NAME = 'ingest';

/** The remote parent a stored traceparent (and tracestate) stands for; ROOT_CONTEXT when there is none. */
export function parentContext(traceparent: string | null | undefined, tracestate: string | null | undefined): Context {
  if (traceparent === null || traceparent === undefined) return ROOT_CONTEXT;
  const parsed = parseTraceparent(traceparent);
  if ('problem' in parsed) return ROOT_CONTEXT;
  return trace.setSpanContext(ROOT_CONTEXT, {
    traceId: parsed.traceId,
    spanId: parsed.spanId,
    traceFlags: parsed.flags,
    isRemote: true,
    ...(tracestate === null || tracestate === undefined ? {} : { traceState: createTraceState(tracestate) }),
  });
}

/** A span's context as an event stores it (and as the traceparent header carries it). */
export function storedTrace(span: Span, ignored: string | null): LineTrace {
  const sc = span.spanContext();
  const state = sc.traceState?.serialize();
  return { traceparent: formatTraceparent(sc.traceId, sc.spanId, sc.traceFlags), tracestate: state === undefined || state === '' ? null : state, ignored };
}

/** The ingest spans of one batch, index by index with the events it stores. */
export class IngestBatchSpans {
  readonly #spans: Span[];

  constructor(spans: Span[]) {
    this.#spans = spans;
  }

  /** What became of event `index` of the batch. */
  outcome(index: number, outcome: IngestOutcome): void {
    this.#spans[index]?.setAttribute('hookrelay.ingest.outcome', outcome);
  }

  /** Ends every span, once the batch has committed (a batch that failed ends none: its lines are read again). */
  end(): void {
    for (const span of this.#spans) span.end();
  }
}

export class IngestTracing {
  readonly #tracer: Tracer;

  constructor(tracer: Tracer) {
    this.#tracer = tracer;
  }

  /**
   * Starts the ingest span of each event to store (it ends when the batch has committed), and
   * makes the span's context the event's trace context (in place, in `toStore`).
   */
  begin(toStore: EventToStore[], source: string): IngestBatchSpans {
    const spans: Span[] = new Array(toStore.length);
    for (let i = 0; i < toStore.length; i++) {
      const { event, position } = toStore[i]!;
      const line = event.trace;
      const span = this.#tracer.startSpan(
        INGEST_SPAN_NAME,
        {
          kind: SpanKind.CONSUMER,
          attributes: {
            'hookrelay.organization': event.orgId,
            'hookrelay.event_id': event.id,
            'hookrelay.anticipation_request_id': event.anticipationRequestId,
            'hookrelay.feed.source': source,
            ...(position === null ? {} : { 'hookrelay.feed.position': position }),
            ...(line?.ignored ? { 'hookrelay.trace_context_ignored': line.ignored } : {}),
          },
        },
        parentContext(line?.traceparent, line?.tracestate),
      );
      spans[i] = span;
      toStore[i] = { event: { ...event, trace: storedTrace(span, line?.ignored ?? null) }, position };
    }
    return new IngestBatchSpans(spans);
  }
}

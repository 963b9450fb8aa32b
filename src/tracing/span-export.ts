/**
 * The way out of ended spans, bounded and counted: the SDK's BatchSpanProcessor in front of the
 * OTLP exporter, with a wrapper on each side so that every span that does not reach the
 * collector is counted, by why (hookrelay_trace_spans_dropped_total). The processor drops spans
 * silently past its queue, and an export that fails loses its batch as silently: the wrappers
 * keep the count the processor does not give.
 *
 * Nothing here waits on the collector in the path of a delivery: ending a span appends it to a
 * queue; the export runs on its own, one batch at a time, under tracing.timeout.
 */
import { TraceFlags, type Context } from '@opentelemetry/api';
import { ExportResultCode, type ExportResult } from '@opentelemetry/core';
import { BatchSpanProcessor, type ReadableSpan, type Span, type SpanExporter, type SpanProcessor } from '@opentelemetry/sdk-trace';

/** Why spans did not reach the collector. */
export const DropReason = {
  /** tracing.maxQueueSize spans were already waiting (a collector down or slow, or a burst). */
  queueFull: 'queue_full',
  /** Their export failed: the collector refused them, did not answer within tracing.timeout, or could not be reached. */
  exportFailed: 'export_failed',
  /** The daemon stopped before they were exported (the stop waits tracing.timeout at most). */
  shutdown: 'shutdown',
} as const;
export type DropReason = (typeof DropReason)[keyof typeof DropReason];

/** Spans that reached the collector, and those that did not, by why (counted since the daemon started). */
export class SpanExportCounts {
  exported = 0;
  readonly dropped: Record<DropReason, number> = { queue_full: 0, export_failed: 0, shutdown: 0 };
  /** Sampled spans ended and not yet exported nor dropped: waiting in the queue, or in an export under way. */
  pending = 0;
}

/** Hears of failed exports (the daemon logs them, at most once a minute). */
export type ExportFailureListener = (spans: number, error: Error | undefined) => void;

/** An exporter that counts what its inner exporter (OTLP) exported and what it failed to. */
export class CountingExporter implements SpanExporter {
  readonly #inner: SpanExporter;
  readonly #counts: SpanExportCounts;
  readonly #onFailure: ExportFailureListener;

  constructor(inner: SpanExporter, counts: SpanExportCounts, onFailure: ExportFailureListener) {
    this.#inner = inner;
    this.#counts = counts;
    this.#onFailure = onFailure;
  }

  export(spans: ReadableSpan[], resultCallback: (result: ExportResult) => void): void {
    let settled = false;
    const settle = (result: ExportResult) => {
      // The exporter answers once; a second answer would count its spans twice.
      if (settled) return;
      settled = true;
      const counts = this.#counts;
      counts.pending -= spans.length;
      if (result.code === ExportResultCode.SUCCESS) counts.exported += spans.length;
      else {
        counts.dropped.export_failed += spans.length;
        this.#onFailure(spans.length, result.error);
      }
      resultCallback(result);
    };
    try {
      this.#inner.export(spans, settle);
    } catch (err) {
      settle({ code: ExportResultCode.FAILED, error: err instanceof Error ? err : new Error(String(err)) });
    }
  }

  shutdown(): Promise<void> {
    return this.#inner.shutdown();
  }

  forceFlush(): Promise<void> {
    return this.#inner.forceFlush?.() ?? Promise.resolve();
  }
}

export interface BoundedProcessorOptions {
  readonly exporter: CountingExporter;
  readonly counts: SpanExportCounts;
  readonly maxQueueSize: number;
  readonly maxExportBatchSize: number;
  /** ms */
  readonly scheduledDelayMillis: number;
  /** ms: the processor's own limit on one export, a little longer than the exporter's. */
  readonly exportTimeoutMillis: number;
}

/**
 * The BatchSpanProcessor, with its queue bound kept here: a span ended while maxQueueSize spans
 * wait (the batch being exported included, unlike the processor's own bound) is dropped and
 * counted, never handed on. Unsampled spans are not exported (as the processor has it) and not
 * counted.
 */
export class BoundedSpanProcessor implements SpanProcessor {
  readonly #inner: BatchSpanProcessor;
  readonly #counts: SpanExportCounts;
  readonly #maxQueueSize: number;

  constructor(options: BoundedProcessorOptions) {
    this.#counts = options.counts;
    this.#maxQueueSize = options.maxQueueSize;
    this.#inner = new BatchSpanProcessor({
      exporter: options.exporter,
      maxQueueSize: options.maxQueueSize,
      maxExportBatchSize: options.maxExportBatchSize,
      scheduledDelayMillis: options.scheduledDelayMillis,
      exportTimeoutMillis: options.exportTimeoutMillis,
    });
  }

  onStart(span: Span, parentContext: Context): void {
    this.#inner.onStart(span, parentContext);
  }

  onEnd(span: ReadableSpan): void {
    if ((span.spanContext().traceFlags & TraceFlags.SAMPLED) === 0) return;
    const counts = this.#counts;
    if (counts.pending >= this.#maxQueueSize) {
      counts.dropped.queue_full++;
      return;
    }
    counts.pending++;
    this.#inner.onEnd(span);
  }

  forceFlush(): Promise<void> {
    return this.#inner.forceFlush();
  }

  shutdown(): Promise<void> {
    return this.#inner.shutdown();
  }
}

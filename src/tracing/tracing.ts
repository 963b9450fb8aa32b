/**
 * The daemon's OpenTelemetry traces (docs/observability.md): a tracer provider of the official
 * SDK with no global registration (several daemons may run in one process, the tests' do), the
 * OTLP/HTTP exporter of the configured encoding, every option handed over explicitly, and the
 * bounded, counted way out of span-export.ts. No auto-instrumentation: the spans are the ones
 * the feed, the dispatcher and the API start themselves, through `tracer`.
 */
import { readFileSync } from 'node:fs';
import type { Tracer } from '@opentelemetry/api';
import { OTLPTraceExporter as ProtobufExporter } from '@opentelemetry/exporter-trace-otlp-proto';
import { OTLPTraceExporter as JsonExporter } from '@opentelemetry/exporter-trace-otlp-http';
import { defaultResource, resourceFromAttributes } from '@opentelemetry/resources';
import { AlwaysOffSampler, AlwaysOnSampler, ParentBasedSampler, TraceIdRatioBasedSampler, TracerProvider, type Sampler } from '@opentelemetry/sdk-trace';
import { ATTR_SERVICE_INSTANCE_ID, ATTR_SERVICE_NAME, ATTR_SERVICE_VERSION } from '@opentelemetry/semantic-conventions';
import type { Config } from '../config/load.ts';
import { ErrorCode, HookrelayError } from '../domain/errors.ts';
import type { Logger } from '../log.ts';
import { BoundedSpanProcessor, CountingExporter, SpanExportCounts } from './span-export.ts';

/** The name of the instrumentation scope of hookrelay's spans. */
export const TRACER_NAME = 'hookrelay';

/** Failed exports are logged at most this often (with how many spans were lost meanwhile). */
export const EXPORT_FAILURE_LOG_MS = 60_000;

export interface Tracing {
  readonly tracer: Tracer;
  /** tracing.propagate: the attempts send traceparent. */
  readonly propagate: boolean;
  /** What reached the collector and what was dropped (the metrics read it when scraped). */
  readonly counts: SpanExportCounts;
  /**
   * Exports what is still queued, for up to `deadlineMs`, then stops; the spans not exported by
   * then are counted as dropped (shutdown). Returns how many those were.
   */
  shutdown(deadlineMs: number): Promise<number>;
}

export interface TracingOptions {
  readonly version: string;
  readonly instanceName: string;
  readonly log: Logger;
}

/** The URL spans are posted to: tracing.tracesEndpoint as it is, or tracing.endpoint with /v1/traces. */
export function tracesUrl(tracing: Config['tracing']): string {
  if (tracing.tracesEndpoint !== null) return tracing.tracesEndpoint;
  const base = tracing.endpoint!;
  return `${base.endsWith('/') ? base : `${base}/`}v1/traces`;
}

/** The sampler tracing.sampler names (OTEL_TRACES_SAMPLER's values), with tracing.samplerArg for the ratio. */
export function samplerOf(tracing: Pick<Config['tracing'], 'sampler' | 'samplerArg'>): Sampler {
  const ratio = () => new TraceIdRatioBasedSampler(tracing.samplerArg === null ? 1 : Number(tracing.samplerArg));
  switch (tracing.sampler) {
    case 'always_on':
      return new AlwaysOnSampler();
    case 'always_off':
      return new AlwaysOffSampler();
    case 'traceidratio':
      return ratio();
    case 'parentbased_always_on':
      return new ParentBasedSampler({ root: new AlwaysOnSampler() });
    case 'parentbased_always_off':
      return new ParentBasedSampler({ root: new AlwaysOffSampler() });
    case 'parentbased_traceidratio':
      return new ParentBasedSampler({ root: ratio() });
  }
}

/** "name=value" entries as a record (the first "=" splits). */
function entries(list: readonly string[]): Record<string, string> {
  return Object.fromEntries(list.map((e) => [e.slice(0, e.indexOf('=')).trim(), e.slice(e.indexOf('=') + 1)]));
}

function readCa(caFile: string | null): string | undefined {
  if (caFile === null) return undefined;
  try {
    return readFileSync(caFile, 'utf8');
  } catch (err) {
    throw new HookrelayError(ErrorCode.config, `cannot read tracing.caFile ${caFile}: ${(err as NodeJS.ErrnoException).code ?? String(err)}`);
  }
}

/** Starts the tracer provider for `config.tracing` (call only when tracingOn(config)). */
export function startTracing(config: Pick<Config, 'tracing'>, options: TracingOptions): Tracing {
  const settings = config.tracing;
  const log = options.log.child({ subsystem: 'tracing' });
  const counts = new SpanExportCounts();
  const url = tracesUrl(settings);
  const ca = readCa(settings.caFile);
  const exporterConfig = {
    url,
    headers: entries(settings.headers),
    timeoutMillis: settings.timeout,
    compression: settings.compression as never,
    // One export at a time is what the processor sends; a few more only at a forced flush.
    concurrencyLimit: 4,
    httpAgentOptions: { keepAlive: true, ...(ca === undefined ? {} : { ca }) },
  };
  const inner = settings.protocol === 'http/json' ? new JsonExporter(exporterConfig) : new ProtobufExporter(exporterConfig);
  let lostSinceLog = 0;
  let lastLogMono = -Infinity;
  const exporter = new CountingExporter(inner, counts, (spans, error) => {
    lostSinceLog += spans;
    const now = performance.now();
    if (now - lastLogMono < EXPORT_FAILURE_LOG_MS) return;
    lastLogMono = now;
    // The collector's origin only: its URL's path and the headers may carry credentials.
    log.warn({ collector: new URL(url).origin, spans: lostSinceLog, error: error?.message }, `span export failed: ${lostSinceLog} span(s) dropped (counted in hookrelay_trace_spans_dropped_total); delivery goes on`);
    lostSinceLog = 0;
  });
  const processor = new BoundedSpanProcessor({
    exporter,
    counts,
    maxQueueSize: settings.maxQueueSize,
    maxExportBatchSize: Math.min(settings.maxExportBatchSize, settings.maxQueueSize),
    scheduledDelayMillis: settings.scheduleDelay,
    exportTimeoutMillis: settings.timeout + 1000,
  });
  const resource = defaultResource().merge(
    resourceFromAttributes({
      ...entries(settings.resourceAttributes),
      [ATTR_SERVICE_NAME]: settings.serviceName,
      [ATTR_SERVICE_VERSION]: options.version,
      [ATTR_SERVICE_INSTANCE_ID]: options.instanceName,
    }),
  );
  const provider = new TracerProvider({ resource, sampler: samplerOf(settings), spanProcessors: [processor] });
  log.info({ collector: new URL(url).origin, protocol: settings.protocol, sampler: settings.sampler, propagate: settings.propagate }, 'tracing on: spans exported over OTLP/HTTP');
  return {
    tracer: provider.getTracer(TRACER_NAME, options.version),
    propagate: settings.propagate,
    counts,
    async shutdown(deadlineMs) {
      let timer: NodeJS.Timeout | undefined;
      const deadline = new Promise<void>((resolve) => {
        timer = setTimeout(resolve, Math.max(0, deadlineMs));
      });
      await Promise.race([provider.shutdown().catch((err: unknown) => log.warn({ err }, 'stopping the span export failed')), deadline]);
      clearTimeout(timer);
      const unexported = Math.max(0, counts.pending);
      counts.pending = 0;
      counts.dropped.shutdown += unexported;
      if (unexported > 0) log.warn({ spans: unexported }, `${unexported} span(s) not exported at stop (the collector did not take them in time)`);
      return unexported;
    },
  };
}

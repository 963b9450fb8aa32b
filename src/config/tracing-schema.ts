/**
 * tracing: OpenTelemetry traces (docs/observability.md). Off until an OTLP endpoint is given, by
 * these keys or by the standard OTEL_* environment variables, which the loader reads here
 * (otelEnvironment): the configuration stays the only reader of the environment, and the
 * exporter is handed every value explicitly.
 */
const HTTP_URL = /^https?:\/\/[^\s/?#]+(\/[^\s?#]*)?$/i;

export const TRACING_SCHEMA = {
  enabled: {
    type: { kind: 'bool' },
    default: true,
    doc: 'Export traces once an endpoint is set (tracing.endpoint or tracing.tracesEndpoint); false turns tracing off whatever else is set, as OTEL_SDK_DISABLED=true or OTEL_TRACES_EXPORTER=none do. Without an endpoint nothing is traced, nothing is sent to receivers, and delivery costs nothing more.',
  },
  endpoint: {
    type: { kind: 'string', nullable: true, pattern: HTTP_URL, expect: 'an http(s):// URL such as http://127.0.0.1:4318' },
    default: null,
    doc: 'OTLP/HTTP base URL of the collector (OTEL_EXPORTER_OTLP_ENDPOINT): spans go to <endpoint>/v1/traces. null: none.',
  },
  tracesEndpoint: {
    type: { kind: 'string', nullable: true, pattern: HTTP_URL, expect: 'an http(s):// URL such as http://127.0.0.1:4318/v1/traces' },
    default: null,
    doc: 'OTLP/HTTP URL spans are posted to, used as it is (OTEL_EXPORTER_OTLP_TRACES_ENDPOINT); wins over tracing.endpoint. null: <endpoint>/v1/traces.',
  },
  protocol: {
    type: { kind: 'enum', values: ['http/protobuf', 'http/json'] },
    default: 'http/protobuf',
    doc: 'OTLP encoding (OTEL_EXPORTER_OTLP_TRACES_PROTOCOL, else OTEL_EXPORTER_OTLP_PROTOCOL): http/protobuf or http/json. gRPC is not offered: a collector takes OTLP/HTTP on port 4318.',
  },
  headers: {
    type: { kind: 'stringList' },
    default: [],
    doc: 'Headers sent with every export, as "name=value" entries (OTEL_EXPORTER_OTLP_HEADERS and OTEL_EXPORTER_OTLP_TRACES_HEADERS, "name=value,name=value" with percent-encoded values): an API key of a hosted collector, say. Never logged or shown; prefer the environment over a config file.',
  },
  timeout: {
    type: { kind: 'duration', min: 100, max: 60_000 },
    default: '5s',
    doc: 'Longest an export (one batch, retries included) may take (OTEL_EXPORTER_OTLP_TRACES_TIMEOUT, else OTEL_EXPORTER_OTLP_TIMEOUT, in ms); a batch not exported by then is dropped and counted. Also the longest a stop waits for the last spans.',
  },
  compression: {
    type: { kind: 'enum', values: ['none', 'gzip'] },
    default: 'none',
    doc: 'Compression of the export requests (OTEL_EXPORTER_OTLP_TRACES_COMPRESSION, else OTEL_EXPORTER_OTLP_COMPRESSION).',
  },
  caFile: {
    type: { kind: 'string', nullable: true },
    default: null,
    doc: "PEM file of the CA certificates that verify an https:// collector (OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE, else OTEL_EXPORTER_OTLP_CERTIFICATE), instead of Node's bundled ones.",
  },
  serviceName: {
    type: { kind: 'string', pattern: /^\S(.{0,126}\S)?$/, expect: 'a name of 1-128 characters, no spaces at either end' },
    default: 'hookrelay',
    doc: 'The service.name of the spans (OTEL_SERVICE_NAME). service.version is the version of hookrelay, service.instance.id the instance.name.',
  },
  resourceAttributes: {
    type: { kind: 'stringList' },
    default: [],
    doc: 'More resource attributes, as "key=value" entries (OTEL_RESOURCE_ATTRIBUTES, "key=value,key=value" with percent-encoded values), such as "deployment.environment.name=production".',
  },
  sampler: {
    type: { kind: 'enum', values: ['always_on', 'always_off', 'traceidratio', 'parentbased_always_on', 'parentbased_always_off', 'parentbased_traceidratio'] },
    default: 'parentbased_always_on',
    doc: "Which traces are recorded (OTEL_TRACES_SAMPLER): parentbased_* follows the producer's sampled flag when a feed line or a request carries one; traceidratio keeps tracing.samplerArg of the traces.",
  },
  samplerArg: {
    type: { kind: 'string', nullable: true, pattern: /^(0(\.\d{1,9})?|1(\.0{1,9})?|\.\d{1,9})$/, expect: 'a ratio from 0 to 1, such as "0.1"' },
    default: null,
    doc: 'The ratio of the traceidratio samplers (OTEL_TRACES_SAMPLER_ARG), from 0 to 1; null means 1.',
  },
  maxQueueSize: {
    type: { kind: 'int', min: 1, max: 1_000_000 },
    default: 2048,
    doc: 'Most ended spans held in memory waiting for export (OTEL_BSP_MAX_QUEUE_SIZE), those being exported included; past it a span is dropped and counted (hookrelay_trace_spans_dropped_total). Bounds what a collector that is down or slow can cost.',
  },
  maxExportBatchSize: {
    type: { kind: 'int', min: 1, max: 100_000 },
    default: 512,
    doc: 'Most spans per export request (OTEL_BSP_MAX_EXPORT_BATCH_SIZE); at most tracing.maxQueueSize.',
  },
  scheduleDelay: {
    type: { kind: 'duration', min: 10, max: 60_000 },
    default: '5s',
    doc: 'Longest a span waits before its batch is exported (OTEL_BSP_SCHEDULE_DELAY, in ms); a full batch goes at once.',
  },
  propagate: {
    type: { kind: 'bool' },
    default: true,
    doc: "Send the attempt's W3C traceparent (and the event's tracestate) with every delivery while tracing is on, so that the receiver's trace continues the event's (docs/delivery.md, \"Trace context\"). false: nothing is sent, the spans are still exported.",
  },
} as const;

/** An OTEL_* variable the loader reads: the key it sets, and its value as the key takes it (null: the variable's value is refused, `expected` says why). */
interface OtelValue {
  readonly variable: string;
  readonly path: string;
  readonly raw: unknown;
  /** The variable's value as set (what an error quotes, unless the key is a secret). */
  readonly text: string;
}

/**
 * W3C Baggage-style "key=value,key=value" (the form of OTEL_EXPORTER_OTLP_HEADERS and
 * OTEL_RESOURCE_ATTRIBUTES) as "key=value" entries, values percent-decoded; null when an entry
 * has no "=", an empty key, or a value that does not decode.
 */
export function keyValueList(text: string): string[] | null {
  const entries: string[] = [];
  for (const part of text.split(',')) {
    if (part.trim() === '') continue;
    const equals = part.indexOf('=');
    const key = equals < 0 ? '' : part.slice(0, equals).trim();
    if (key === '') return null;
    try {
      entries.push(`${key}=${decodeURIComponent(part.slice(equals + 1).trim())}`);
    } catch {
      return null;
    }
  }
  return entries;
}

/** The variable among `names` that is set (not empty), the first one first: a signal's own variable before the general one. */
function firstSet(env: NodeJS.ProcessEnv, ...names: string[]): { name: string; value: string } | null {
  for (const name of names) {
    const value = env[name];
    if (value !== undefined && value.trim() !== '') return { name, value: value.trim() };
  }
  return null;
}

/**
 * The values the standard OpenTelemetry variables give the tracing keys, in the order they are
 * applied (docs/observability.md lists them). A value a key refuses is reported by the loader,
 * naming the variable. Every other OTEL_* variable (those of metrics and logs, other SDKs'
 * options) is left alone.
 */
export function otelEnvironment(env: NodeJS.ProcessEnv): OtelValue[] {
  const out: OtelValue[] = [];
  const take = (path: string, ...names: string[]) => {
    const found = firstSet(env, ...names);
    if (found !== null) out.push({ variable: found.name, path, raw: found.value, text: found.value });
  };
  take('tracing.endpoint', 'OTEL_EXPORTER_OTLP_ENDPOINT');
  take('tracing.tracesEndpoint', 'OTEL_EXPORTER_OTLP_TRACES_ENDPOINT');
  take('tracing.protocol', 'OTEL_EXPORTER_OTLP_TRACES_PROTOCOL', 'OTEL_EXPORTER_OTLP_PROTOCOL');
  take('tracing.timeout', 'OTEL_EXPORTER_OTLP_TRACES_TIMEOUT', 'OTEL_EXPORTER_OTLP_TIMEOUT');
  take('tracing.compression', 'OTEL_EXPORTER_OTLP_TRACES_COMPRESSION', 'OTEL_EXPORTER_OTLP_COMPRESSION');
  take('tracing.caFile', 'OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE', 'OTEL_EXPORTER_OTLP_CERTIFICATE');
  take('tracing.serviceName', 'OTEL_SERVICE_NAME');
  take('tracing.sampler', 'OTEL_TRACES_SAMPLER');
  take('tracing.samplerArg', 'OTEL_TRACES_SAMPLER_ARG');
  take('tracing.maxQueueSize', 'OTEL_BSP_MAX_QUEUE_SIZE');
  take('tracing.maxExportBatchSize', 'OTEL_BSP_MAX_EXPORT_BATCH_SIZE');
  take('tracing.scheduleDelay', 'OTEL_BSP_SCHEDULE_DELAY');
  // Lists: the general headers, then the traces' own (a name in both: the traces' value).
  const general = firstSet(env, 'OTEL_EXPORTER_OTLP_HEADERS');
  const own = firstSet(env, 'OTEL_EXPORTER_OTLP_TRACES_HEADERS');
  if (general !== null || own !== null) {
    const lists = [general, own].map((v) => (v === null ? [] : keyValueList(v.value)));
    const variable = own?.name ?? general!.name;
    if (lists.some((l) => l === null)) out.push({ variable, path: 'tracing.headers', raw: null, text: '' });
    else {
      const byName = new Map<string, string>();
      for (const entry of [...lists[0]!, ...lists[1]!]) byName.set(entry.slice(0, entry.indexOf('=')).toLowerCase(), entry);
      out.push({ variable, path: 'tracing.headers', raw: [...byName.values()], text: '' });
    }
  }
  const resource = firstSet(env, 'OTEL_RESOURCE_ATTRIBUTES');
  if (resource !== null) out.push({ variable: resource.name, path: 'tracing.resourceAttributes', raw: keyValueList(resource.value), text: resource.value });
  // Off by either standard switch; OTEL_SDK_DISABLED=false turns it on, as the key's true does.
  const exporter = firstSet(env, 'OTEL_TRACES_EXPORTER');
  if (exporter !== null) out.push({ variable: exporter.name, path: 'tracing.enabled', raw: exporter.value === 'none' ? false : exporter.value === 'otlp' ? true : 'refused', text: exporter.value });
  const disabled = firstSet(env, 'OTEL_SDK_DISABLED');
  if (disabled !== null) {
    const raw = /^true$/i.test(disabled.value) ? false : /^false$/i.test(disabled.value) ? exporter?.value !== 'none' : 'refused';
    out.push({ variable: disabled.name, path: 'tracing.enabled', raw, text: disabled.value });
  }
  return out;
}

/** What a refused OTEL_* value should have been, when the key's own sentence would mislead. */
export function otelExpectation(variable: string, expected: string): string {
  if (variable === 'OTEL_TRACES_EXPORTER') return 'otlp or none (hookrelay exports traces over OTLP/HTTP only)';
  if (variable === 'OTEL_SDK_DISABLED') return 'true or false';
  if (variable.endsWith('_PROTOCOL')) return 'http/protobuf or http/json (hookrelay exports over OTLP/HTTP, port 4318; gRPC is not offered)';
  if (variable.endsWith('_HEADERS') || variable === 'OTEL_RESOURCE_ATTRIBUTES') return 'a list of key=value entries separated by commas, values percent-encoded';
  return expected;
}

/** tracing as the loader returns it; on when enabled and an endpoint is set (load.ts tracingOn). */
export interface TracingConfig {
  readonly enabled: boolean;
  readonly endpoint: string | null;
  readonly tracesEndpoint: string | null;
  readonly protocol: 'http/protobuf' | 'http/json';
  /** "name=value" entries (may hold credentials). */
  readonly headers: readonly string[];
  /** ms */
  readonly timeout: number;
  readonly compression: 'none' | 'gzip';
  readonly caFile: string | null;
  readonly serviceName: string;
  /** "key=value" entries. */
  readonly resourceAttributes: readonly string[];
  readonly sampler: 'always_on' | 'always_off' | 'traceidratio' | 'parentbased_always_on' | 'parentbased_always_off' | 'parentbased_traceidratio';
  readonly samplerArg: string | null;
  readonly maxQueueSize: number;
  readonly maxExportBatchSize: number;
  /** ms */
  readonly scheduleDelay: number;
  readonly propagate: boolean;
}

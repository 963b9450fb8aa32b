/**
 * An OpenTelemetry collector for the tests: an OTLP/HTTP endpoint on 127.0.0.1 (node:http) that
 * decodes what it gets, protobuf (with protobufjs, from the OTLP trace protocol's own message
 * definitions below) and JSON (OTLP/JSON), into one shape, and can answer slowly or not at all.
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import protobuf from 'protobufjs';

/**
 * The messages of ExportTraceServiceRequest, as opentelemetry-proto (v1) defines them
 * (opentelemetry/proto/{collector/trace,trace,common,resource}/v1/*.proto), with their field
 * numbers; what a collector decodes.
 */
const OTLP_TRACE_PROTO = `
syntax = "proto3";
package otlp;
message AnyValue {
  oneof value {
    string string_value = 1;
    bool bool_value = 2;
    int64 int_value = 3;
    double double_value = 4;
    ArrayValue array_value = 5;
    KeyValueList kvlist_value = 6;
    bytes bytes_value = 7;
  }
}
message ArrayValue { repeated AnyValue values = 1; }
message KeyValueList { repeated KeyValue values = 1; }
message KeyValue { string key = 1; AnyValue value = 2; }
message InstrumentationScope { string name = 1; string version = 2; repeated KeyValue attributes = 3; uint32 dropped_attributes_count = 4; }
message Resource { repeated KeyValue attributes = 1; uint32 dropped_attributes_count = 2; }
message Status { string message = 2; int32 code = 3; }
message Event { fixed64 time_unix_nano = 1; string name = 2; repeated KeyValue attributes = 3; uint32 dropped_attributes_count = 4; }
message Link { bytes trace_id = 1; bytes span_id = 2; string trace_state = 3; repeated KeyValue attributes = 4; uint32 dropped_attributes_count = 5; fixed32 flags = 6; }
message Span {
  bytes trace_id = 1;
  bytes span_id = 2;
  string trace_state = 3;
  bytes parent_span_id = 4;
  fixed32 flags = 16;
  string name = 5;
  int32 kind = 6;
  fixed64 start_time_unix_nano = 7;
  fixed64 end_time_unix_nano = 8;
  repeated KeyValue attributes = 9;
  uint32 dropped_attributes_count = 10;
  repeated Event events = 11;
  uint32 dropped_events_count = 12;
  repeated Link links = 13;
  uint32 dropped_links_count = 14;
  Status status = 15;
}
message ScopeSpans { InstrumentationScope scope = 1; repeated Span spans = 2; string schema_url = 3; }
message ResourceSpans { Resource resource = 1; repeated ScopeSpans scope_spans = 2; string schema_url = 3; }
message ExportTraceServiceRequest { repeated ResourceSpans resource_spans = 1; }
`;

const requestType = protobuf.parse(OTLP_TRACE_PROTO, { keepCase: false }).root.lookupType('otlp.ExportTraceServiceRequest');

/** The span kinds of the OTLP protocol. */
export const SpanKind = { internal: 1, server: 2, client: 3, producer: 4, consumer: 5 } as const;

export interface CollectedSpan {
  readonly traceId: string;
  readonly spanId: string;
  /** '' for a root span. */
  readonly parentSpanId: string;
  readonly traceState: string;
  readonly name: string;
  readonly kind: number;
  readonly attributes: Record<string, unknown>;
  readonly status: { readonly code: number; readonly message: string };
  readonly resource: Record<string, unknown>;
  readonly scope: string;
  /** How it arrived: 'protobuf' or 'json'. */
  readonly encoding: 'protobuf' | 'json';
}

type Json = Record<string, unknown>;

function hexOf(value: unknown): string {
  if (typeof value === 'string') return value.toLowerCase();
  if (value instanceof Uint8Array) return Buffer.from(value).toString('hex');
  return '';
}

/** An OTLP AnyValue (protobufjs's object or OTLP/JSON's, both camelCase) as a plain value; int64 as a number. */
function plain(value: Json | undefined): unknown {
  if (value === undefined || value === null) return undefined;
  if ('stringValue' in value) return value.stringValue;
  if ('boolValue' in value) return value.boolValue;
  if ('intValue' in value) return Number(value.intValue);
  if ('doubleValue' in value) return Number(value.doubleValue);
  if ('arrayValue' in value) return ((value.arrayValue as Json).values as Json[] | undefined ?? []).map((v) => plain(v));
  if ('kvlistValue' in value) return attributesOf((value.kvlistValue as Json).values as Json[]);
  if ('bytesValue' in value) return hexOf(value.bytesValue);
  return undefined;
}

function attributesOf(list: Json[] | undefined): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const kv of list ?? []) out[kv.key as string] = plain(kv.value as Json | undefined);
  return out;
}

/** The spans of an export request, decoded (protobufjs) or parsed (JSON), in one shape. */
export function spansOf(request: Json, encoding: 'protobuf' | 'json'): CollectedSpan[] {
  const spans: CollectedSpan[] = [];
  for (const rs of (request.resourceSpans as Json[] | undefined) ?? []) {
    const resource = attributesOf(((rs.resource as Json | undefined)?.attributes as Json[] | undefined) ?? []);
    for (const ss of (rs.scopeSpans as Json[] | undefined) ?? []) {
      const scope = ((ss.scope as Json | undefined)?.name as string | undefined) ?? '';
      for (const s of (ss.spans as Json[] | undefined) ?? []) {
        const status = (s.status as Json | undefined) ?? {};
        spans.push({
          traceId: hexOf(s.traceId),
          spanId: hexOf(s.spanId),
          parentSpanId: hexOf(s.parentSpanId),
          traceState: (s.traceState as string | undefined) ?? '',
          name: s.name as string,
          kind: Number(s.kind ?? 0),
          attributes: attributesOf(s.attributes as Json[] | undefined),
          status: { code: Number(status.code ?? 0), message: (status.message as string | undefined) ?? '' },
          resource,
          scope,
          encoding,
        });
      }
    }
  }
  return spans;
}

export interface CollectorRequest {
  readonly path: string;
  readonly contentType: string;
  readonly headers: IncomingMessage['headers'];
  readonly spans: number;
}

export interface Collector {
  /** The base URL (OTEL_EXPORTER_OTLP_ENDPOINT), http://127.0.0.1:PORT. */
  readonly url: string;
  readonly spans: CollectedSpan[];
  readonly requests: CollectorRequest[];
  /** How long each request waits before it is answered (ms); 0 by default. */
  delayMs: number;
  /** The status it answers (200 by default; 503 makes the exporter retry). */
  status: number;
  /** Waits until `predicate` holds of the spans received, or throws after `timeoutMs`. */
  waitFor(predicate: (spans: readonly CollectedSpan[]) => boolean, timeoutMs?: number, what?: string): Promise<CollectedSpan[]>;
  close(): Promise<void>;
}

async function readBody(req: IncomingMessage): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const chunk of req) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks);
}

function decode(contentType: string, body: Buffer): { spans: CollectedSpan[] } {
  if (contentType.startsWith('application/json')) return { spans: spansOf(JSON.parse(body.toString('utf8')) as Json, 'json') };
  const message = requestType.decode(body);
  return { spans: spansOf(requestType.toObject(message, { longs: String, defaults: false }) as Json, 'protobuf') };
}

/** Starts a collector on 127.0.0.1 (a free port, or `port` to come back on the same one after a stop). */
export async function startCollector(options: { port?: number } = {}): Promise<Collector> {
  const collector: Omit<Collector, 'url' | 'waitFor' | 'close'> = { spans: [], requests: [], delayMs: 0, status: 200 };
  const sockets = new Set<import('node:net').Socket>();
  const server: Server = createServer((req: IncomingMessage, res: ServerResponse) => {
    void (async () => {
      const body = await readBody(req);
      const contentType = req.headers['content-type'] ?? '';
      if (collector.delayMs > 0) await sleep(collector.delayMs);
      if (res.destroyed) return;
      if (collector.status !== 200) {
        res.writeHead(collector.status).end();
        return;
      }
      const { spans } = decode(contentType, body);
      collector.requests.push({ path: req.url ?? '', contentType, headers: req.headers, spans: spans.length });
      collector.spans.push(...spans);
      res.writeHead(200, { 'content-type': contentType.startsWith('application/json') ? 'application/json' : 'application/x-protobuf' }).end(contentType.startsWith('application/json') ? '{}' : Buffer.alloc(0));
    })().catch((err: unknown) => {
      res.writeHead(400).end(String(err));
    });
  });
  server.on('connection', (socket) => {
    sockets.add(socket);
    socket.on('close', () => sockets.delete(socket));
  });
  await new Promise<void>((resolve) => server.listen(options.port ?? 0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return Object.assign(collector, {
    url: `http://127.0.0.1:${port}`,
    async waitFor(predicate: (spans: readonly CollectedSpan[]) => boolean, timeoutMs = 15_000, what = 'spans') {
      const deadline = Date.now() + timeoutMs;
      while (!predicate(collector.spans)) {
        if (Date.now() > deadline) throw new Error(`the collector did not receive ${what} within ${timeoutMs} ms; it has ${collector.spans.length} span(s): ${collector.spans.map((s) => s.name).join(', ')}`);
        await sleep(25);
      }
      return collector.spans;
    },
    async close() {
      for (const socket of sockets) socket.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  });
}

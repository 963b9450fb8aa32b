/**
 * The tracing keys and the standard OpenTelemetry variables (config/tracing-schema.ts): which
 * variable sets which key, their precedence (file < OTEL_* < HOOKRELAY_TRACING_* < flags), the
 * lists' percent-decoding, the switches that turn tracing off, and the values refused with the
 * variable named (never quoting a header, which may be a credential).
 */
import assert from 'node:assert/strict';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { loadConfig, tracingOn } from '../../src/config/load.ts';
import { keyValueList } from '../../src/config/tracing-schema.ts';
import { ErrorCode, HookrelayError } from '../../src/domain/errors.ts';
import { samplerOf, tracesUrl } from '../../src/tracing/tracing.ts';
import { tempDir } from '../helpers/helpers.ts';

test('off by default; on once an endpoint is set, by a key or by OTEL_EXPORTER_OTLP_ENDPOINT', (t) => {
  const cwd = tempDir(t);
  assert.equal(tracingOn(loadConfig({ env: {}, cwd })), false);
  assert.equal(tracingOn(loadConfig({ env: { OTEL_EXPORTER_OTLP_ENDPOINT: 'http://127.0.0.1:4318' }, cwd })), true);
  assert.equal(tracingOn(loadConfig({ env: { OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: 'http://c:4318/v1/traces' }, cwd })), true);
  assert.equal(tracingOn(loadConfig({ env: {}, cwd, overrides: { 'tracing.endpoint': 'http://127.0.0.1:4318' } })), true);
  for (const off of [{ OTEL_SDK_DISABLED: 'true' }, { OTEL_TRACES_EXPORTER: 'none' }, { HOOKRELAY_TRACING_ENABLED: 'false' }, { OTEL_SDK_DISABLED: 'false', OTEL_TRACES_EXPORTER: 'none' }]) {
    assert.equal(tracingOn(loadConfig({ env: { OTEL_EXPORTER_OTLP_ENDPOINT: 'http://127.0.0.1:4318', ...off }, cwd })), false, JSON.stringify(off));
  }
});

test('every variable sets its key; a signal\'s own variable wins over the general one', (t) => {
  const cwd = tempDir(t);
  const { tracing } = loadConfig({
    cwd,
    env: {
      OTEL_EXPORTER_OTLP_ENDPOINT: 'https://collector.example:4318/',
      OTEL_EXPORTER_OTLP_PROTOCOL: 'http/protobuf',
      OTEL_EXPORTER_OTLP_TRACES_PROTOCOL: 'http/json',
      OTEL_EXPORTER_OTLP_TIMEOUT: '9000',
      OTEL_EXPORTER_OTLP_TRACES_TIMEOUT: '2500',
      OTEL_EXPORTER_OTLP_COMPRESSION: 'gzip',
      OTEL_EXPORTER_OTLP_CERTIFICATE: 'ca.pem',
      OTEL_SERVICE_NAME: 'relay-eu',
      OTEL_RESOURCE_ATTRIBUTES: 'deployment.environment.name=prod,team=a%2Cb',
      OTEL_TRACES_SAMPLER: 'parentbased_traceidratio',
      OTEL_TRACES_SAMPLER_ARG: '0.25',
      OTEL_BSP_MAX_QUEUE_SIZE: '100',
      OTEL_BSP_MAX_EXPORT_BATCH_SIZE: '50',
      OTEL_BSP_SCHEDULE_DELAY: '250',
      OTEL_EXPORTER_OTLP_HEADERS: 'api-key=general,x-tenant=acme',
      OTEL_EXPORTER_OTLP_TRACES_HEADERS: 'Api-Key=traces%20only',
      OTEL_METRICS_EXPORTER: 'prometheus',
    },
  });
  assert.deepEqual(
    { ...tracing },
    {
      enabled: true,
      endpoint: 'https://collector.example:4318/',
      tracesEndpoint: null,
      protocol: 'http/json',
      headers: ['Api-Key=traces only', 'x-tenant=acme'],
      timeout: 2500,
      compression: 'gzip',
      caFile: join(cwd, 'ca.pem'),
      serviceName: 'relay-eu',
      resourceAttributes: ['deployment.environment.name=prod', 'team=a,b'],
      sampler: 'parentbased_traceidratio',
      samplerArg: '0.25',
      maxQueueSize: 100,
      maxExportBatchSize: 50,
      scheduleDelay: 250,
      propagate: true,
    },
  );
  assert.equal(tracesUrl(tracing), 'https://collector.example:4318/v1/traces');
  assert.equal(tracesUrl({ ...tracing, tracesEndpoint: 'http://c:4318/custom' }), 'http://c:4318/custom');
  assert.equal(tracesUrl({ ...tracing, endpoint: 'http://c:4318' }), 'http://c:4318/v1/traces');
  assert.match(samplerOf(tracing).toString(), /ParentBased\{root=TraceIdRatioBased\{0\.25\}/);
});

test('precedence: file < OTEL_* < HOOKRELAY_TRACING_* < flags', (t) => {
  const cwd = tempDir(t);
  const file = join(cwd, 'hookrelay.json');
  writeFileSync(file, JSON.stringify({ tracing: { serviceName: 'from-file', endpoint: 'http://file:4318', sampler: 'always_off' } }));
  const config = loadConfig({ cwd, configFile: file, env: { OTEL_SERVICE_NAME: 'from-otel', OTEL_EXPORTER_OTLP_ENDPOINT: 'http://otel:4318', HOOKRELAY_TRACING_ENDPOINT: 'http://hookrelay:4318' }, overrides: {} });
  assert.equal(config.tracing.serviceName, 'from-otel');
  assert.equal(config.tracing.endpoint, 'http://hookrelay:4318');
  assert.equal(config.tracing.sampler, 'always_off', 'the file holds where nothing overrides it');
  assert.equal(loadConfig({ cwd, configFile: file, env: { OTEL_SERVICE_NAME: 'from-otel' }, overrides: { 'tracing.serviceName': 'from-flag' } }).tracing.serviceName, 'from-flag');
});

test('values hookrelay cannot use stop loading, naming the variable; a header is never quoted', (t) => {
  const cwd = tempDir(t);
  const refused = (env: Record<string, string>, pattern: RegExp, hidden?: string) =>
    assert.throws(
      () => loadConfig({ cwd, env }),
      (err: unknown) => {
        assert.ok(err instanceof HookrelayError && err.code === ErrorCode.config, String(err));
        assert.match(err.message, pattern);
        if (hidden !== undefined) assert.ok(!err.message.includes(hidden), err.message);
        return true;
      },
    );
  refused({ OTEL_EXPORTER_OTLP_PROTOCOL: 'grpc' }, /OTEL_EXPORTER_OTLP_PROTOCOL \(tracing\.protocol\) must be http\/protobuf or http\/json .*gRPC is not offered.*; got "grpc"/);
  refused({ OTEL_TRACES_EXPORTER: 'zipkin' }, /OTEL_TRACES_EXPORTER \(tracing\.enabled\) must be otlp or none/);
  refused({ OTEL_SDK_DISABLED: 'maybe' }, /OTEL_SDK_DISABLED \(tracing\.enabled\) must be true or false/);
  refused({ OTEL_TRACES_SAMPLER: 'jaeger_remote' }, /OTEL_TRACES_SAMPLER \(tracing\.sampler\) must be one of always_on/);
  refused({ OTEL_TRACES_SAMPLER_ARG: '1.5' }, /OTEL_TRACES_SAMPLER_ARG \(tracing\.samplerArg\) must be a ratio from 0 to 1/);
  refused({ OTEL_EXPORTER_OTLP_ENDPOINT: 'collector:4318' }, /OTEL_EXPORTER_OTLP_ENDPOINT \(tracing\.endpoint\) must be an http\(s\):\/\/ URL/);
  refused({ OTEL_EXPORTER_OTLP_HEADERS: 'authorization%s3cr3t-no-equals' }, /OTEL_EXPORTER_OTLP_HEADERS \(tracing\.headers\) must be a list of key=value entries.*\(value hidden\)/, 's3cr3t');
  refused({ OTEL_BSP_MAX_QUEUE_SIZE: '10', OTEL_BSP_MAX_EXPORT_BATCH_SIZE: '20' }, /tracing\.maxExportBatchSize" must not exceed "tracing\.maxQueueSize"/);
  // Other signals' variables are not hookrelay's business.
  assert.equal(loadConfig({ cwd, env: { OTEL_LOGS_EXPORTER: 'whatever', OTEL_PROPAGATORS: 'b3' } }).tracing.enabled, true);
});

test('keyValueList: W3C Baggage-style lists, percent-decoded', () => {
  assert.deepEqual(keyValueList('a=1, b = two%20words ,,c='), ['a=1', 'b=two words', 'c=']);
  assert.equal(keyValueList('novalue'), null);
  assert.equal(keyValueList('=x'), null);
  assert.equal(keyValueList('a=%E0%A4%A'), null);
});

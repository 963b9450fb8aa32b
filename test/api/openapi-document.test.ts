/**
 * docs/openapi.json is generated from the code (src/api/openapi/, from the zod schemas the
 * routes validate with): the committed file must be what the code generates, it must pass
 * Redocly's linter with no problem (no example that contradicts its schema), and the schemas
 * must refuse requests in the sentences the API has always answered (those of the domain and
 * service checks the CLI shares).
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { copyFileSync, readFileSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { test, type TestContext } from 'node:test';
import type { z } from 'zod';
import { openApiDocument, openApiText } from '../../src/api/openapi/document.ts';
import { checked } from '../../src/api/openapi/responses.ts';
import { parseRequest } from '../../src/api/request-validation.ts';
import { Webhook } from '../../src/api/schemas/answers.ts';
import { DeliveriesQuery, DeliveryIdParams, RecoverRequest, RegisterWebhookRequest, StatsQuery, UpdateRoleRequest } from '../../src/api/schemas/requests.ts';
import { loadConfig } from '../../src/config/load.ts';
import { systemClock } from '../../src/domain/clock.ts';
import { HookrelayError, type InvalidParam } from '../../src/domain/errors.ts';
import { createServices } from '../../src/services/services.ts';
import { openSqliteStore } from '../../src/store/sqlite/store.ts';
import { tempDir } from '../helpers/helpers.ts';
import { BY_TEST } from '../helpers/audit-helpers.ts';

const ROOT = join(import.meta.dirname, '..', '..');
const DOC_PATH = join(ROOT, 'docs', 'openapi.json');
const REDOCLY = join(createRequire(import.meta.url).resolve('@redocly/cli/package.json'), '..', 'bin', 'cli.js');

test('docs/openapi.json is what the code generates (run npm run build and commit it after a change)', () => {
  assert.equal(readFileSync(DOC_PATH, 'utf8'), openApiText());
});

interface LintReport {
  totals: { errors: number; warnings: number };
  problems: Array<{ ruleId: string; message: string; location: Array<{ pointer: string }> }>;
}

/** `redocly lint` of `file` with the repository's redocly.yaml, offline. */
function lint(file: string): LintReport {
  const run = spawnSync(process.execPath, [REDOCLY, 'lint', file, '--config', join(ROOT, 'redocly.yaml'), '--format=json'], {
    cwd: ROOT,
    encoding: 'utf8',
    timeout: 60_000,
    env: { ...process.env, REDOCLY_TELEMETRY: 'off', REDOCLY_SUPPRESS_UPDATE_NOTICE: 'true', NO_COLOR: '1' },
  });
  assert.equal(run.error, undefined, `redocly lint ran: ${run.error?.message}`);
  const json = run.stdout.slice(run.stdout.indexOf('{'));
  return JSON.parse(json) as LintReport;
}

const summary = (report: LintReport) => report.problems.map((p) => `${p.ruleId} at ${p.location[0]?.pointer}: ${p.message}`);

test("Redocly's linter finds nothing to say of docs/openapi.json: valid, and no example contradicts its schema", () => {
  const report = lint(DOC_PATH);
  assert.deepEqual(summary(report), []);
  assert.deepEqual(report.totals, { ...report.totals, errors: 0, warnings: 0 });
});

test('the linter does fail on an example that contradicts its schema (so the test above can fail)', (t: TestContext) => {
  const dir = tempDir(t);
  const file = join(dir, 'openapi.json');
  copyFileSync(DOC_PATH, file);
  const doc = JSON.parse(readFileSync(file, 'utf8'));
  const example = doc.paths['/webhook/get_webhook'].get.responses['200'].content['application/json'].example;
  delete example.rate_limit;
  writeFileSync(file, JSON.stringify(doc));
  const report = lint(file);
  assert.ok(report.totals.errors > 0);
  assert.ok(summary(report).some((p) => p.startsWith('no-invalid-media-type-examples') && p.includes("'rate_limit'")), summary(report).join('\n'));
});

test('the document refuses to be built with an example that contradicts its schema', () => {
  const example = (openApiDocument() as any).paths['/webhook/get_webhook'].get.responses['200'].content['application/json'].example;
  assert.doesNotThrow(() => checked(Webhook, example, 'get_webhook'));
  const { headers: _, ...withoutHeaders } = example;
  assert.throws(() => checked(Webhook, withoutHeaders, 'get_webhook'), /contradicts its schema/);
});

/** The services over a temp database, for their own validation of the same input. */
function services(t: TestContext) {
  const config = loadConfig({ env: {}, cwd: tempDir(t), overrides: { 'log.level': 'silent' } });
  const store = openSqliteStore(config.database.path, systemClock);
  t.after(() => store.close());
  return createServices(store, config);
}

/** The invalid_params of `action`'s validation_failed (the service's own words). */
async function serviceRefusal(action: () => Promise<unknown>): Promise<readonly InvalidParam[]> {
  try {
    await action();
  } catch (err) {
    if (err instanceof HookrelayError && err.code === 'validation_failed') return err.invalidParams;
    throw err;
  }
  throw new Error('the service accepted it');
}

function schemaRefusal(schema: z.ZodObject, input: Record<string, unknown>): readonly InvalidParam[] {
  try {
    parseRequest(schema, input, 'the request body is invalid');
  } catch (err) {
    if (err instanceof HookrelayError && err.code === 'validation_failed') return err.invalidParams;
    throw err;
  }
  throw new Error('the schema accepted it');
}

test('register_webhook: the schema refuses what the service refuses, field by field in the same words', async (t) => {
  const { webhooks } = services(t);
  const bodies: Array<Record<string, unknown>> = [
    {},
    { webhook_url: null },
    { webhook_url: 42, active_hmac: 'yes' },
    { webhook_url: '' },
    { webhook_url: `https://x.example/${'a'.repeat(2048)}` },
    { webhook_url: 'https://x.example/a b' },
    { webhook_url: 'https:x.example' },
    { webhook_url: 'https://x.example/#frag', active_hmac: null },
    { webhook_url: 'https://x.example/', headers: [] },
    { webhook_url: 'https://x.example/', headers: 'X-A: b' },
    { webhook_url: 'https://x.example/', headers: { Host: 'x', 'bad name': 'y', 'X-Null': null, 'X-Empty': '', 'X-Space': ' v', 'x-a': 'a', 'X-A': 'b' } },
    { webhook_url: 'https://x.example/', headers: Object.fromEntries(Array.from({ length: 21 }, (_, i) => [`X-H${i}`, 'v'])) },
    { webhook_url: 'https://x.example/', headers: { 'X-Long': 'v'.repeat(4097), 'Content-Type': 'text/plain', 'Webhook-Id': 'x' } },
    { webhook_url: 'https://x.example/', rate_limit: 0 },
    { webhook_url: 'https://x.example/', rate_limit: 1.5 },
    { webhook_url: 'https://x.example/', rate_limit: '10' },
    { webhook_url: 'https://x.example/', rate_limit: 10_001 },
    { webhook_url: '#', active_hmac: 1, headers: { Host: 'x' }, rate_limit: false },
  ];
  for (const body of bodies) {
    const expected = await serviceRefusal(() => webhooks.register(BY_TEST, 'acme', body as { webhook_url: unknown }));
    assert.deepEqual(schemaRefusal(RegisterWebhookRequest, body), expected, JSON.stringify(body).slice(0, 200));
  }
  // What the service takes, the schema takes (the URL policy and the store are the service's).
  for (const body of [
    { webhook_url: 'https://x.example/hook' },
    { webhook_url: 'https://x.example/', active_hmac: false, headers: null, rate_limit: null },
    { webhook_url: 'https://x.example/', headers: {}, rate_limit: 10_000 },
    { webhook_url: 'https://x.example/', headers: { 'X-Environment': 'production', Authorization: 'Bearer x', '__proto__': 'a' }, rate_limit: 1 },
  ]) {
    assert.doesNotThrow(() => parseRequest(RegisterWebhookRequest, body, 'the request body is invalid'), JSON.stringify(body));
  }
});

test('update_role: the schema refuses what the service refuses, in the same words', async (t) => {
  const { users } = services(t);
  const bodies: Array<Record<string, unknown>> = [
    {},
    { email: null, role_name: null },
    { email: 5, role_name: 7 },
    { email: '   ', role_name: 'saas_admin' },
    { email: 'no-at-sign', role_name: 'saas_admin' },
    { email: 'a\u0001@x.example', role_name: [] },
    { email: `${'a'.repeat(64)}@${'b'.repeat(300)}` },
    { email: `   ${'a'.repeat(30)}@${'b'.repeat(250)}   `, role_name: {} },
  ];
  for (const body of bodies) {
    const expected = await serviceRefusal(() => users.setRole(BY_TEST, 'acme', body as { email: unknown; role_name: unknown }));
    assert.deepEqual(schemaRefusal(UpdateRoleRequest, body), expected, JSON.stringify(body));
  }
  // Spaces around an e-mail are not part of it (emailKey), so not counted against its length either.
  const padded = ` ${'a'.repeat(60)}@${'b'.repeat(255)}    `;
  assert.equal(parseRequest(UpdateRoleRequest, { email: padded, role_name: 'x' }, '').email, padded.trim());
});

const RFC3339 =
  'must be an RFC 3339 date-time that exists, with seconds and an offset, such as 2026-11-22T08:00:00Z or 2026-11-22T09:00:00.250+01:00 (a day the month has, hours 00-23, minutes and seconds 00-59, offset at most ±23:59)';

test('the delivery log: queries, ids and recover bodies are refused in the sentences the API has always given', () => {
  const refusal = (schema: z.ZodObject, input: Record<string, unknown>) => schemaRefusal(schema, input).map(({ name, reason }) => `${name}: ${reason}`);
  assert.deepEqual(refusal(DeliveriesQuery, { status: 'bogus', limit: '0', since: 'yesterday' }), [
    // The state names (issue 42) came after v1's: the sentence lists them last.
    'status: must be one of pending, failed, delivered, dead, queued, retrying, failed_for_good',
    `since: ${RFC3339}`,
    'limit: must be an integer from 1 to 200',
  ]);
  assert.deepEqual(refusal(DeliveriesQuery, { until: '2026-02-30T00:00:00Z', request_id: 'x'.repeat(201), limit: '1e2', cursor: 'zz' }), [
    `until: ${RFC3339}`,
    'request_id: must be an anticipation request id: 1 to 200 characters, no control characters',
    'limit: must be an integer from 1 to 200',
    'cursor: must be a next_cursor value from a previous page',
  ]);
  assert.deepEqual(refusal(DeliveriesQuery, { request_id: '', limit: '201' }), [
    'request_id: must be an anticipation request id: 1 to 200 characters, no control characters',
    'limit: must be an integer from 1 to 200',
  ]);
  assert.deepEqual(refusal(DeliveriesQuery, { request_id: 'ar\n1' }), ['request_id: must be an anticipation request id: 1 to 200 characters, no control characters']);
  // 200 characters as JSON Schema counts them (code points), not UTF-16 units.
  assert.equal(parseRequest(DeliveriesQuery, { request_id: '😀'.repeat(200) }, '').request_id, '😀'.repeat(200));
  assert.deepEqual(parseRequest(DeliveriesQuery, {}, ''), { limit: 50 });
  assert.deepEqual(parseRequest(DeliveriesQuery, { status: 'failed', since: '2026-11-22 08:00:00z', limit: '007', cursor: Buffer.from('42').toString('base64url') }, ''), {
    status: 'failed',
    since: Date.UTC(2026, 10, 22, 8),
    limit: 7,
    cursor: 42,
  });
  assert.deepEqual(refusal(StatsQuery, { window: '7d' }), ['window: must be one of 1h, 24h']);
  assert.deepEqual(parseRequest(StatsQuery, {}, ''), { window: '1h' });
  for (const id of ['abc', '-1', '1.5', '0', '1234567890123456', ' 1', '']) assert.deepEqual(refusal(DeliveryIdParams, { id }), ['id: must be a positive integer'], id);
  assert.deepEqual(parseRequest(DeliveryIdParams, { id: '000000000000042' }, ''), { id: 42 });
  assert.deepEqual(refusal(RecoverRequest, {}), ['since: is required']);
  assert.deepEqual(refusal(RecoverRequest, { since: null, until: 5 }), [`since: ${RFC3339}`, `until: ${RFC3339}`]);
  assert.deepEqual(refusal(RecoverRequest, { until: '2026-11-22T24:00:00Z' }), ['since: is required', `until: ${RFC3339}`]);
  assert.deepEqual(parseRequest(RecoverRequest, { since: '2026-11-22T00:00:00Z', padding: 'ignored' }, ''), { since: Date.UTC(2026, 10, 21 + 1) });
});

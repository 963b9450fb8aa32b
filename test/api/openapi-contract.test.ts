/**
 * docs/openapi.json against the API the app really serves, in both directions:
 * - every route createApi registers (each method of it) is documented, with its permission and
 *   its security; every documented path+method is served, over real HTTP (never 404/405), and the
 *   methods a path answers (OPTIONS -> Allow) are exactly the documented ones;
 * - every response the running daemon gives in a scenario that reaches each documented status of
 *   each operation has a documented status, media type, headers and a body that validates against
 *   the documented schema, and every documented status (but 500 and /readyz's 503) is reached;
 * - error codes and their statuses match src/domain/errors.ts and src/api/problem.ts, the Version
 *   parameter matches src/api/version.ts, every $ref resolves, and GET /openapi.json serves the
 *   file byte for byte.
 */
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import Database from 'better-sqlite3';
import { createServer, type IncomingHttpHeaders } from 'node:http';
import type { AddressInfo } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import { test, type TestContext } from 'node:test';
import { createApi, type RouteInfo } from '../../src/api/app.ts';
import { statusOf } from '../../src/api/problem.ts';
import { LATEST_VERSION, negotiateVersion, SUPPORTED_VERSIONS } from '../../src/api/version.ts';
import { loadConfig } from '../../src/config/load.ts';
import { systemClock } from '../../src/domain/clock.ts';
import { ErrorCode } from '../../src/domain/errors.ts';
import { loadAuthKeys } from '../../src/services/auth-keys.ts';
import { createServices } from '../../src/services/services.ts';
import { openSqliteStore } from '../../src/store/sqlite/store.ts';
import { call, seedOrg, silentLog, startRelay, tempDir, type ApiResponse, type RunningRelay } from '../helpers/helpers.ts';
import { repos } from '../helpers/sqlite-repos.ts';
import { BY_TEST } from '../helpers/audit-helpers.ts';

type Json = any;

const DOC_TEXT = readFileSync(new URL('../../docs/openapi.json', import.meta.url), 'utf8');
const DOC: Json = JSON.parse(DOC_TEXT);
const HTTP_METHODS = ['get', 'put', 'post', 'delete', 'options', 'head', 'patch', 'trace'] as const;
/** Statuses a black-box scenario cannot provoke: documented, but not required to be reached. */
const UNREACHABLE = new Set(['* 500', 'GET /readyz 503']);

interface Operation {
  readonly path: string;
  /** Upper case, as in RouteInfo. */
  readonly method: string;
  readonly op: Json;
  readonly pathItem: Json;
}

function operations(doc: Json = DOC): Operation[] {
  const out: Operation[] = [];
  for (const [path, pathItem] of Object.entries<Json>(doc.paths ?? {})) {
    for (const method of HTTP_METHODS) {
      if (pathItem[method] !== undefined) out.push({ path, method: method.toUpperCase(), op: pathItem[method], pathItem });
    }
  }
  return out;
}

function findOperation(method: string, path: string): Operation | undefined {
  return operations().find((o) => o.method === method && o.path === path);
}

/** The OpenAPI form of a Koa route path: `/webhook/deliveries/:id` -> `/webhook/deliveries/{id}`. */
function openApiPath(koaPath: string): string {
  return koaPath.replace(/:([A-Za-z0-9_]+)/g, '{$1}');
}

/** A path template with its parameters filled in (by default each with `1`). */
function fill(template: string, params: Record<string, string> = {}): string {
  return template.replace(/\{([^}]+)\}/g, (_, name: string) => encodeURIComponent(params[name] ?? '1'));
}

/** Resolves a local JSON pointer reference (`#/components/...`); throws if it leads nowhere. */
function resolveRef(ref: string, doc: Json = DOC): Json {
  assert.ok(ref.startsWith('#/'), `only local references are used; got ${ref}`);
  let node: Json = doc;
  for (const raw of ref.slice(2).split('/')) {
    const key = decodeURIComponent(raw).replace(/~1/g, '/').replace(/~0/g, '~');
    if (node === null || typeof node !== 'object' || !Object.hasOwn(node, key)) throw new Error(`$ref ${ref} does not resolve (no "${key}")`);
    node = node[key];
  }
  return node;
}

/** Follows `$ref` until a concrete object. */
function deref(node: Json): Json {
  let current = node;
  for (let hops = 0; current !== null && typeof current === 'object' && typeof current.$ref === 'string'; hops++) {
    assert.ok(hops < 20, 'reference cycle');
    current = resolveRef(current.$ref);
  }
  return current;
}

function collectRefs(node: Json, at = '#', out: Array<{ at: string; ref: string }> = []): Array<{ at: string; ref: string }> {
  if (Array.isArray(node)) node.forEach((child, i) => collectRefs(child, `${at}/${i}`, out));
  else if (node !== null && typeof node === 'object') {
    for (const [key, child] of Object.entries(node)) {
      if (key === '$ref' && typeof child === 'string') out.push({ at, ref: child });
      else collectRefs(child, `${at}/${key}`, out);
    }
  }
  return out;
}

/** The parameters of an operation, path-level ones included, dereferenced. */
function parametersOf(o: Operation): Json[] {
  return [...(o.pathItem.parameters ?? []), ...(o.op.parameters ?? [])].map(deref);
}

// ---- a small JSON Schema (2020-12 subset) validator: enough for this document, strict about the rest

const ANNOTATIONS = new Set(['description', 'examples', 'default', 'title']);
const KEYWORDS = new Set([
  '$ref', 'allOf', 'type', 'enum', 'const', 'required', 'properties', 'additionalProperties', 'items',
  'pattern', 'minLength', 'maxLength', 'minimum', 'maximum', 'format', 'maxProperties', 'propertyNames',
]);

function typeOf(value: unknown): string {
  if (value === null) return 'null';
  if (Array.isArray(value)) return 'array';
  if (typeof value === 'number') return Number.isInteger(value) ? 'integer' : 'number';
  return typeof value;
}

/** Returns the list of violations of `schema` by `value` (empty when valid). */
function validate(schema: Json, value: unknown, at = '$'): string[] {
  const errors: string[] = [];
  for (const key of Object.keys(schema)) {
    if (!KEYWORDS.has(key) && !ANNOTATIONS.has(key) && !key.startsWith('x-')) errors.push(`${at}: schema keyword "${key}" is not understood by this test; extend validate()`);
  }
  if (schema.$ref !== undefined) errors.push(...validate(resolveRef(schema.$ref), value, at));
  for (const sub of schema.allOf ?? []) errors.push(...validate(sub, value, at));
  if (schema.type !== undefined) {
    const types: string[] = Array.isArray(schema.type) ? schema.type : [schema.type];
    const actual = typeOf(value);
    if (!types.includes(actual) && !(actual === 'integer' && types.includes('number'))) {
      errors.push(`${at}: expected ${types.join(' or ')}, got ${actual}`);
      return errors;
    }
  }
  if (schema.enum !== undefined && !schema.enum.some((v: unknown) => v === value)) errors.push(`${at}: ${JSON.stringify(value)} is not one of ${JSON.stringify(schema.enum)}`);
  if (schema.const !== undefined && schema.const !== value) errors.push(`${at}: expected ${JSON.stringify(schema.const)}, got ${JSON.stringify(value)}`);
  if (typeof value === 'string') {
    if (schema.pattern !== undefined && !new RegExp(schema.pattern, 'u').test(value)) errors.push(`${at}: "${value}" does not match ${schema.pattern}`);
    if (schema.minLength !== undefined && [...value].length < schema.minLength) errors.push(`${at}: shorter than ${schema.minLength}`);
    if (schema.maxLength !== undefined && [...value].length > schema.maxLength) errors.push(`${at}: longer than ${schema.maxLength}`);
    if (schema.format === 'date-time' && !/^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})$/.test(value)) errors.push(`${at}: "${value}" is not a date-time`);
    if (schema.format === 'uri' && !URL.canParse(value)) errors.push(`${at}: "${value}" is not an absolute URI`);
  }
  if (typeof value === 'number') {
    if (schema.minimum !== undefined && value < schema.minimum) errors.push(`${at}: ${value} < ${schema.minimum}`);
    if (schema.maximum !== undefined && value > schema.maximum) errors.push(`${at}: ${value} > ${schema.maximum}`);
  }
  if (Array.isArray(value) && schema.items !== undefined) value.forEach((item, i) => errors.push(...validate(schema.items, item, `${at}[${i}]`)));
  if (typeOf(value) === 'object') {
    const object = value as Record<string, unknown>;
    for (const name of schema.required ?? []) if (!Object.hasOwn(object, name)) errors.push(`${at}: missing required "${name}"`);
    if (schema.maxProperties !== undefined && Object.keys(object).length > schema.maxProperties) errors.push(`${at}: more than ${schema.maxProperties} members`);
    if (schema.propertyNames !== undefined) for (const name of Object.keys(object)) errors.push(...validate(schema.propertyNames, name, `${at}[name ${JSON.stringify(name)}]`));
    const properties: Record<string, Json> = schema.properties ?? {};
    for (const [name, child] of Object.entries(object)) {
      if (Object.hasOwn(properties, name)) errors.push(...validate(properties[name], child, `${at}.${name}`));
      else if (schema.additionalProperties === false) errors.push(`${at}: undocumented member "${name}"`);
      else if (typeof schema.additionalProperties === 'object') errors.push(...validate(schema.additionalProperties, child, `${at}.${name}`));
    }
  }
  return errors;
}

test('the validator of this test rejects what it should (so the checks below can fail)', () => {
  const schema = { type: 'object', required: ['a'], additionalProperties: false, properties: { a: { type: 'string', enum: ['x'] } } };
  assert.deepEqual(validate(schema, { a: 'x' }), []);
  assert.equal(validate(schema, { a: 'y' }).length, 1);
  assert.equal(validate(schema, {}).length, 1);
  assert.equal(validate(schema, { a: 'x', b: 1 }).length, 1);
  assert.equal(validate({ $ref: '#/components/schemas/Webhook' }, { webhook_url: 'https://x.example', active_hmac: 'yes' }).length > 0, true);
  assert.throws(() => resolveRef('#/components/schemas/NoSuchSchema'), /does not resolve/);
  const headers = { type: 'object', maxProperties: 1, propertyNames: { pattern: '^[a-z]+$' } };
  assert.deepEqual(validate(headers, { a: '1' }), []);
  assert.equal(validate(headers, { a: '1', b: '2' }).length, 1);
  assert.equal(validate(headers, { A: '1' }).length, 1);
});

// ---- the document on its own

test('docs/openapi.json is an OpenAPI 3.1 document whose every operation has responses and every $ref resolves', () => {
  assert.match(DOC.openapi, /^3\.1\.\d+$/);
  assert.equal(typeof DOC.info?.title, 'string');
  assert.equal(DOC.info.version, LATEST_VERSION.slice(1), 'info.version is the newest API version');
  assert.ok(Object.keys(DOC.paths).length > 0);

  const ops = operations();
  assert.ok(ops.length > 0);
  const ids = new Set<string>();
  for (const { method, path, op } of ops) {
    const where = `${method} ${path}`;
    assert.equal(typeof op.operationId, 'string', `${where} has an operationId`);
    assert.ok(!ids.has(op.operationId), `operationId ${op.operationId} is unique`);
    ids.add(op.operationId);
    const statuses = Object.keys(op.responses ?? {});
    assert.ok(statuses.length > 0, `${where} documents its responses`);
    assert.ok(statuses.some((s) => /^2\d\d$/.test(s)), `${where} documents a success response`);
    for (const status of statuses) {
      assert.match(status, /^[1-5]\d\d$/, `${where}: response key ${status}`);
      const response = deref(op.responses[status]);
      assert.equal(typeof response.description, 'string', `${where} ${status} has a description`);
      assert.ok(Object.keys(response.content ?? {}).length > 0, `${where} ${status} documents its body`);
    }
  }

  const unresolved = collectRefs(DOC).filter(({ ref }) => {
    try {
      resolveRef(ref);
      return false;
    } catch {
      return true;
    }
  });
  assert.deepEqual(unresolved, [], 'every $ref resolves');

  const schemes = Object.keys(DOC.components?.securitySchemes ?? {});
  for (const requirement of [...(DOC.security ?? []), ...ops.flatMap((o) => o.op.security ?? [])]) {
    for (const name of Object.keys(requirement)) assert.ok(schemes.includes(name), `security scheme ${name} is defined`);
  }
  const bearer = DOC.components.securitySchemes.bearerAuth;
  assert.deepEqual({ type: bearer.type, scheme: bearer.scheme, bearerFormat: bearer.bearerFormat }, { type: 'http', scheme: 'bearer', bearerFormat: 'JWT' });
});

test('error codes and statuses in the document are those of src/domain/errors.ts and src/api/problem.ts', () => {
  const codes = Object.values(ErrorCode);
  const schema = DOC.components.schemas.ErrorCode;
  assert.deepEqual([...schema.enum].sort(), [...codes].sort(), 'the ErrorCode enum lists every code, and only those');
  assert.deepEqual(schema['x-status-by-code'], Object.fromEntries(codes.map((c) => [c, statusOf(c)])), 'x-status-by-code matches problem.ts');

  const problem = DOC.components.schemas.Problem;
  for (const member of ['type', 'title', 'status', 'detail', 'code', 'instance']) assert.ok(problem.required.includes(member), `Problem requires ${member}`);
  assert.deepEqual(deref(problem.properties.invalid_params.items).required, ['name', 'reason']);

  // Every error response of every operation is problem+json, and each code it names has that status.
  for (const { method, path, op } of operations()) {
    for (const [status, raw] of Object.entries<Json>(op.responses)) {
      if (Number(status) < 400) continue;
      const response = deref(raw);
      if (path === '/readyz') continue; // a probe's plain status object, documented as such
      const media = response.content?.['application/problem+json'];
      assert.ok(media, `${method} ${path} ${status} is application/problem+json`);
      assert.deepEqual(Object.keys(response.content), ['application/problem+json']);
      const named = problemCodes(media.schema);
      assert.ok(named.length > 0, `${method} ${path} ${status} names its codes`);
      for (const code of named) {
        assert.ok((codes as string[]).includes(code), `${code} is a code of errors.ts`);
        assert.equal(statusOf(code as ErrorCode), Number(status), `${method} ${path}: ${code} is ${statusOf(code as ErrorCode)}, documented under ${status}`);
      }
    }
  }
  for (const [name, status] of [['NotFound', 404], ['MethodNotAllowed', 405]] as const) {
    for (const code of problemCodes(DOC.components.responses[name].content['application/problem+json'].schema)) {
      assert.equal(statusOf(code as ErrorCode), status, `${name}: ${code}`);
    }
  }
});

/** The codes a problem schema narrows `code` to (`allOf: [Problem, { properties: { code: { enum } } }]`). */
function problemCodes(schema: Json): string[] {
  assert.ok(collectRefs(schema).some(({ ref }) => ref === '#/components/schemas/Problem'), 'a problem body is a Problem');
  return (schema.allOf ?? []).flatMap((part: Json) => part.properties?.code?.enum ?? []);
}

test('the Version parameter and header match src/api/version.ts', () => {
  const parameter = DOC.components.parameters.Version;
  assert.equal(parameter.in, 'header');
  assert.equal(parameter.required, false);
  const documented: string[] = parameter.schema.enum;
  const spellings = [...SUPPORTED_VERSIONS.flatMap((v) => [v, v.slice(1)]), 'v1', '1'];
  assert.deepEqual([...documented].sort(), [...spellings].sort(), 'the documented spellings are the supported versions with and without v, and v1/1');
  for (const value of documented) assert.notEqual(negotiateVersion(value), null, `${value} is accepted`);
  assert.equal(negotiateVersion('v1'), 'v1.0');
  assert.equal(negotiateVersion('1'), 'v1.0');
  assert.equal(negotiateVersion(undefined), LATEST_VERSION, 'absent means the newest');
  // "Exactly these spellings": anything else must be refused, or the document says too little.
  for (const value of ['v2', 'v1.3', 'V1.2', 'v01.2', '1.00', 'v1.2.0', 'latest']) assert.equal(negotiateVersion(value), null, `${value} is refused`);
  assert.deepEqual(DOC.components.schemas.ApiVersion.enum, [...SUPPORTED_VERSIONS]);
});

// ---- the document against the routes createApi registers

/** The route list of a real createApi over a temp database, as the relay builds it. */
function servedRoutes(t: TestContext): readonly RouteInfo[] {
  const config = loadConfig({ env: {}, cwd: tempDir(t), overrides: { 'log.level': 'silent' } });
  const store = openSqliteStore(config.database.path, systemClock);
  t.after(() => store.close());
  const { routes } = createApi({
    config,
    keys: loadAuthKeys(config, silentLog),
    clock: systemClock,
    log: silentLog,
    services: createServices(store, config),
    isReady: () => true,
    // By default the relay serves /metrics on the admin listener (metrics.listen null).
    metrics: { token: null, allowUnauthenticated: false, render: async () => ({ contentType: 'text/plain', body: '' }) },
  });
  return routes;
}

test('every route the app serves is documented, each of its methods, with its permission and security', (t) => {
  const routes = servedRoutes(t);
  assert.ok(routes.length >= 11, `createApi registers the whole API (got ${routes.length} routes)`);
  for (const route of routes) {
    const documented = findOperation(route.method, openApiPath(route.path));
    assert.ok(documented, `${route.method} ${route.path} is served but not documented in docs/openapi.json`);
    const { op } = documented;
    assert.equal(op['x-permission'], route.permission, `${route.method} ${route.path}: x-permission`);
    const versioned = parametersOf(documented).some((p) => p.in === 'header' && p.name === 'Version');
    if (route.permission === null) {
      // Public: anonymous access allowed (an optional scheme of its own, such as the metrics token, may be listed), never the JWT.
      const security: Json[] = op.security;
      assert.ok(Array.isArray(security) && (security.length === 0 || security.some((req) => Object.keys(req).length === 0)), `${route.method} ${route.path} is public: security [] or with {}`);
      assert.ok(!security.some((req) => Object.hasOwn(req, 'bearerAuth')), `${route.method} ${route.path} is public: no JWT`);
      assert.equal(versioned, false, `${route.method} ${route.path} does not read Version`);
    } else {
      const security = op.security ?? DOC.security;
      assert.ok(security.some((req: Json) => Object.hasOwn(req, 'bearerAuth')), `${route.method} ${route.path} needs the bearer token`);
      assert.ok(versioned, `${route.method} ${route.path} documents the Version header`);
      for (const status of ['400', '401', '403', '429']) assert.ok(op.responses[status], `${route.method} ${route.path} documents ${status}`);
    }
  }
});

test('every documented operation is a route the app registers', (t) => {
  const routes = servedRoutes(t);
  for (const { method, path } of operations()) {
    assert.ok(
      routes.some((r) => r.method === method && openApiPath(r.path) === path),
      `${method} ${path} is documented but createApi does not register it`,
    );
  }
});

// ---- the document against the running daemon, over HTTP

test('over HTTP, every documented path+method is served and every path answers exactly the documented methods', async (t) => {
  const relay = await startRelay(t);
  const byPath = new Map<string, string[]>();
  for (const { method, path, op } of operations()) {
    byPath.set(path, [...(byPath.get(path) ?? []), method]);
    const res = await call(relay.baseUrl, method, fill(path));
    assert.ok(res.status !== 404 && res.status !== 405, `${method} ${path} answered ${res.status}: ${res.text}`);
    if (op['x-permission'] === null) assert.equal(res.status, 200, `${method} ${path} is public`);
    else assert.equal(res.body?.code, 'missing_token', `${method} ${path} without a token`);
  }
  for (const [path, methods] of byPath) {
    const res = await call(relay.baseUrl, 'OPTIONS', fill(path));
    const allowed = (res.headers.get('allow') ?? '').split(',').map((m) => m.trim()).filter((m) => m !== '' && m !== 'HEAD' && m !== 'OPTIONS');
    assert.deepEqual([...allowed].sort(), [...methods].sort(), `methods of ${path}: Allow says ${res.headers.get('allow')}`);
    const undocumented = ['GET', 'PUT', 'POST', 'PATCH', 'DELETE'].find((m) => !methods.includes(m))!;
    const refused = await call(relay.baseUrl, undocumented, fill(path));
    assertMatchesResponse(DOC.components.responses.MethodNotAllowed, refused, `${undocumented} ${path}`);
    assert.equal(refused.status, 405);
  }
  const unknown = await call(relay.baseUrl, 'GET', '/users/roles');
  assert.equal(unknown.status, 404);
  assertMatchesResponse(DOC.components.responses.NotFound, unknown, 'GET /users/roles');
});

test('GET /openapi.json serves docs/openapi.json verbatim', async (t) => {
  const relay = await startRelay(t);
  const res = await call(relay.baseUrl, 'GET', '/openapi.json');
  assert.equal(res.status, 200);
  assert.match(res.headers.get('content-type') ?? '', /^application\/json\b/);
  assert.equal(res.text, DOC_TEXT);
  assert.deepEqual(res.body, DOC);
});

/** Asserts that `res` is what `response` (a response object of the document) describes. */
function assertMatchesResponse(raw: Json, res: ApiResponse, where: string): void {
  const response = deref(raw);
  const type = (res.headers.get('content-type') ?? '').split(';')[0]!.trim();
  const media = response.content?.[type];
  assert.ok(media, `${where} ${res.status}: content type ${type} is not documented (${Object.keys(response.content ?? {}).join(', ')})`);
  const body = type.startsWith('text/') ? res.text : res.body;
  assert.deepEqual(validate(media.schema, body), [], `${where} ${res.status}: body ${res.text}`);
  for (const [name, rawHeader] of Object.entries<Json>(response.headers ?? {})) {
    const header = deref(rawHeader);
    const value = res.headers.get(name);
    if (value === null) {
      assert.ok(!header.required, `${where} ${res.status}: header ${name} is documented as always sent`);
      continue;
    }
    const schema = deref(header.schema);
    const typed = schema.type === 'integer' ? Number(value) : value;
    assert.deepEqual(validate(header.schema, typed), [], `${where} ${res.status}: header ${name}: ${value}`);
  }
}

/** Options of `call`, plus path parameters and a query string (`?a=1`) to add to the documented path. */
type CallOptions = NonNullable<Parameters<typeof call>[3]> & { params?: Record<string, string>; query?: string };

/**
 * Checks each answer against the document and remembers which documented statuses were
 * reached, so the test can require that every one of them is real.
 */
class Contract {
  readonly reached = new Set<string>();

  /** Calls `method` `path` (a documented path, its parameters filled from `params`, then `query`). */
  async call(relay: RunningRelay, method: string, path: string, options: CallOptions = {}): Promise<ApiResponse> {
    const { params, query = '', ...rest } = options;
    const res = await call(relay.baseUrl, method, fill(path, params) + query, rest);
    const documented = findOperation(method, path);
    assert.ok(documented, `${method} ${path} is documented`);
    const response = documented.op.responses[String(res.status)];
    assert.ok(response, `${method} ${path} answered ${res.status}, which is not documented: ${res.text}`);
    assertMatchesResponse(response, res, `${method} ${path}`);
    this.reached.add(`${method} ${path} ${res.status}`);
    return res;
  }

  unreached(): string[] {
    const missing: string[] = [];
    for (const { method, path, op } of operations()) {
      for (const status of Object.keys(op.responses)) {
        const key = `${method} ${path} ${status}`;
        if (!this.reached.has(key) && !UNREACHABLE.has(key) && !UNREACHABLE.has(`* ${status}`)) missing.push(key);
      }
    }
    return missing;
  }
}

/** Shared by the scenario tests below; the last test checks that every documented answer was reached. */
const contract = new Contract();
const v = (version: string) => ({ Version: version });

/** A relay with organizations acme, put-org and nohmac (an admin and a viewer each) and a role without permissions. */
async function seededRelay(t: TestContext, overrides: Record<string, string> = {}) {
  const relay = await startRelay(t, overrides);
  const { services } = relay;
  const people: Record<string, { admin: string; viewer: string }> = {};
  for (const org of ['acme', 'put-org', 'nohmac']) people[org] = await seedOrg(services, org);
  await services.roles.add(BY_TEST, { name: 'nobody', description: 'no permission at all', permissions: [] });
  await services.users.add(BY_TEST, { orgId: 'acme', email: 'nobody@acme.test', roleName: 'nobody' });
  const { admin, viewer } = people.acme!;
  return {
    relay,
    people,
    admin,
    viewer,
    adminToken: relay.token('acme', admin),
    viewerToken: relay.token('acme', viewer),
    nobodyToken: relay.token('acme', 'nobody@acme.test'),
  };
}

test('roles, users and the webhook: the daemon gives only documented answers', async (t) => {
  const { relay, people, admin, viewer, adminToken, viewerToken, nobodyToken } = await seededRelay(t);

  // Public routes.
  for (const path of ['/healthz', '/readyz', '/openapi.json']) await contract.call(relay, 'GET', path);

  // Authenticated GETs, and the errors every authenticated operation shares.
  const gets = ['/users/me', '/users/get_roles', '/webhook/get_webhook', '/webhook/get_secret', '/webhook/stats'];
  for (const path of gets) {
    await contract.call(relay, 'GET', path);
    await contract.call(relay, 'GET', path, { token: relay.sign({ sub: admin, org: 'acme' }) });
    await contract.call(relay, 'GET', path, { token: adminToken, headers: v('v9') });
    await contract.call(relay, 'GET', path, { token: nobodyToken });
  }
  await contract.call(relay, 'GET', '/users/get_roles', { token: viewerToken, headers: v('v1') });
  await contract.call(relay, 'GET', '/webhook/get_webhook', { token: adminToken });
  await contract.call(relay, 'GET', '/webhook/get_secret', { token: adminToken });
  for (const query of ['', '?window=1h', '?window=24h']) await contract.call(relay, 'GET', '/webhook/stats', { token: viewerToken, query });
  const badWindow = await contract.call(relay, 'GET', '/webhook/stats', { token: adminToken, query: '?window=7d' });
  assert.deepEqual(badWindow.body.invalid_params, [{ name: 'window', reason: 'must be one of 1h, 24h' }]);

  // Registration: created (201, secret once), replaced (200), for each method; HMAC off; bad bodies.
  const registrations: Array<[string, string]> = [['POST', 'acme'], ['PUT', 'put-org']];
  for (const [method, org] of registrations) {
    const token = relay.token(org, people[org]!.admin);
    const path = '/webhook/register_webhook';
    const created = await contract.call(relay, method, path, { token, headers: v('v1.2'), body: { webhook_url: `https://hooks.${org}.example/in` } });
    assert.equal(created.status, 201);
    assert.match(created.body.secret, /^whsec_/);
    const replaced = await contract.call(relay, method, path, { token, headers: v('1.0'), body: { webhook_url: `https://hooks2.${org}.example/in` } });
    assert.equal(replaced.status, 200);
    assert.equal(replaced.body.secret, undefined, 'the secret is shown once');
    await contract.call(relay, method, path, { token, body: { webhook_url: 'http://plain.example/', active_hmac: 'yes' } });
    await contract.call(relay, method, path, { token, rawBody: '{"webhook_url":', headers: { 'content-type': 'application/json' } });
    await contract.call(relay, method, path, { token, rawBody: 'webhook_url=x', headers: { 'content-type': 'application/x-www-form-urlencoded' } });
    await contract.call(relay, method, path, { token, body: { webhook_url: `https://x.example/${'a'.repeat(70 * 1024)}` } });
    await contract.call(relay, method, path, { token, headers: v('2.0'), body: { webhook_url: 'https://x.example/' } });
    await contract.call(relay, method, path);
    await contract.call(relay, method, path, { token: relay.token(org, people[org]!.viewer), body: { webhook_url: 'https://x.example/' } });
  }
  await contract.call(relay, 'GET', '/webhook/get_webhook', { token: viewerToken });
  await contract.call(relay, 'GET', '/webhook/get_secret', { token: adminToken });
  const noHmac = relay.token('nohmac', people.nohmac!.admin);
  await contract.call(relay, 'POST', '/webhook/register_webhook', { token: noHmac, body: { webhook_url: 'https://hooks.nohmac.example/', active_hmac: false } });
  const secretless = await contract.call(relay, 'GET', '/webhook/get_secret', { token: noHmac });
  assert.equal(secretless.body.code, 'secret_not_configured');

  // Role changes, for each accepted method.
  for (const method of ['PUT', 'POST', 'PATCH']) {
    const path = '/users/update_role';
    await contract.call(relay, method, path, { token: adminToken, headers: v('v1.1'), body: { email: viewer, role_name: 'saas_viewer' } });
    await contract.call(relay, method, path, { token: adminToken, body: { email: 'stranger@acme.test', role_name: 'saas_admin' } });
    await contract.call(relay, method, path, { token: adminToken, body: { email: people['put-org']!.viewer, role_name: 'saas_admin' } });
    await contract.call(relay, method, path, { token: adminToken, body: { email: viewer, role_name: 'root' } });
    await contract.call(relay, method, path, { token: adminToken, body: {} });
    await contract.call(relay, method, path, { token: adminToken, body: { email: admin, role_name: 'saas_viewer' } });
    await contract.call(relay, method, path, { token: adminToken, rawBody: '[1,', headers: { 'content-type': 'application/json' } });
    await contract.call(relay, method, path, { token: adminToken, rawBody: 'hello', headers: { 'content-type': 'text/plain' } });
    await contract.call(relay, method, path, { token: adminToken, body: { email: viewer, role_name: 'x'.repeat(70 * 1024) } });
    await contract.call(relay, method, path, { token: adminToken, headers: v('v1.3'), body: {} });
    await contract.call(relay, method, path, { body: { email: viewer, role_name: 'saas_admin' } });
    await contract.call(relay, method, path, { token: viewerToken, body: { email: viewer, role_name: 'saas_admin' } });
  }
});

test('the team: listing, adding and removing users gives only documented answers', async (t) => {
  const { relay, people, admin, viewer, adminToken, viewerToken, nobodyToken } = await seededRelay(t);
  const json = { 'content-type': 'application/json' };
  await contract.call(relay, 'GET', '/users/get_users', { token: viewerToken, headers: v('v1') });
  await contract.call(relay, 'GET', '/users/get_users');
  await contract.call(relay, 'GET', '/users/get_users', { token: nobodyToken });
  await contract.call(relay, 'GET', '/users/get_users', { token: adminToken, headers: v('v7') });
  for (const path of ['/users/add_user', '/users/remove_user']) {
    await contract.call(relay, 'POST', path, { body: { email: viewer } });
    await contract.call(relay, 'POST', path, { token: viewerToken, body: { email: viewer, role_name: 'saas_admin' } });
    await contract.call(relay, 'POST', path, { token: adminToken, headers: v('v1.5'), body: {} });
    await contract.call(relay, 'POST', path, { token: adminToken, rawBody: '{"email":', headers: json });
    await contract.call(relay, 'POST', path, { token: adminToken, rawBody: 'email=x', headers: { 'content-type': 'text/plain' } });
    await contract.call(relay, 'POST', path, { token: adminToken, body: { email: viewer, padding: 'x'.repeat(70 * 1024) } });
    const invalid = await contract.call(relay, 'POST', path, { token: adminToken, body: {} });
    assert.equal(invalid.body.code, 'validation_failed');
  }
  const added = await contract.call(relay, 'POST', '/users/add_user', { token: adminToken, headers: v('v1.2'), body: { email: 'new@acme.test', role_name: 'saas_viewer' } });
  assert.equal(added.status, 201);
  assert.equal((await contract.call(relay, 'POST', '/users/add_user', { token: adminToken, body: { email: 'NEW@acme.test', role_name: 'saas_viewer' } })).status, 409);
  assert.equal((await contract.call(relay, 'POST', '/users/add_user', { token: adminToken, body: { email: 'other@acme.test', role_name: 'root' } })).body.code, 'role_not_found');
  assert.equal((await contract.call(relay, 'POST', '/users/remove_user', { token: adminToken, body: { email: 'new@acme.test' } })).status, 200);
  assert.equal((await contract.call(relay, 'POST', '/users/remove_user', { token: adminToken, body: { email: people['put-org']!.admin } })).status, 404);
  assert.equal((await contract.call(relay, 'POST', '/users/remove_user', { token: adminToken, body: { email: admin } })).status, 409);
});

test('the audit trail: GET /audit/list gives only documented answers', async (t) => {
  const { relay, viewerToken, adminToken } = await seededRelay(t);
  const page = await contract.call(relay, 'GET', '/audit/list', { token: adminToken, headers: v('v1.2'), query: '?limit=2&action=user.add' });
  assert.equal(page.status, 200);
  await contract.call(relay, 'GET', '/audit/list', { token: adminToken, query: `?cursor=${page.body.next_cursor}&since=2020-01-01T00:00:00Z&outcome=ok` });
  await contract.call(relay, 'GET', '/audit/list');
  await contract.call(relay, 'GET', '/audit/list', { token: viewerToken });
  await contract.call(relay, 'GET', '/audit/list', { token: adminToken, headers: v('v4') });
  await contract.call(relay, 'GET', '/audit/list', { token: adminToken, query: '?limit=0&outcome=maybe' });
});

test('API keys: creating, listing and revoking give only documented answers', async (t) => {
  const { relay, adminToken, viewerToken } = await seededRelay(t);
  const json = { 'content-type': 'application/json' };
  await contract.call(relay, 'GET', '/api_keys/list_api_keys');
  await contract.call(relay, 'GET', '/api_keys/list_api_keys', { token: viewerToken });
  await contract.call(relay, 'GET', '/api_keys/list_api_keys', { token: adminToken, headers: v('v7') });
  for (const path of ['/api_keys/create_api_key', '/api_keys/revoke_api_key']) {
    await contract.call(relay, 'POST', path, { body: { name: 'x' } });
    await contract.call(relay, 'POST', path, { token: viewerToken, body: { name: 'x', role_name: 'saas_viewer' } });
    await contract.call(relay, 'POST', path, { token: adminToken, headers: v('v1.5'), body: {} });
    await contract.call(relay, 'POST', path, { token: adminToken, rawBody: '{"name":', headers: json });
    await contract.call(relay, 'POST', path, { token: adminToken, rawBody: 'name=x', headers: { 'content-type': 'text/plain' } });
    await contract.call(relay, 'POST', path, { token: adminToken, body: { name: 'x', padding: 'x'.repeat(70 * 1024) } });
    assert.equal((await contract.call(relay, 'POST', path, { token: adminToken, body: {} })).body.code, 'validation_failed');
  }
  const created = await contract.call(relay, 'POST', '/api_keys/create_api_key', { token: adminToken, body: { name: 'ci', role_name: 'saas_viewer', expires_in: '90d' } });
  assert.equal(created.status, 201);
  assert.equal((await contract.call(relay, 'POST', '/api_keys/create_api_key', { token: adminToken, body: { name: 'ci', role_name: 'saas_viewer' } })).body.code, 'api_key_already_exists');
  assert.equal((await contract.call(relay, 'POST', '/api_keys/create_api_key', { token: adminToken, body: { name: 'other', role_name: 'root' } })).body.code, 'role_not_found');
  await relay.services.roles.add(BY_TEST, { name: 'auditor', description: 'reads the trail', permissions: ['audit:read', 'api_keys:manage'] });
  const limited = await relay.services.apiKeys.create(BY_TEST, { orgId: 'acme', name: 'limited', roleName: 'auditor', creatorPermissions: null });
  const tooHigh = await contract.call(relay, 'POST', '/api_keys/create_api_key', { token: limited.key, body: { name: 'up', role_name: 'saas_admin' } });
  assert.equal(tooHigh.body.code, 'api_key_role_too_high');
  assert.equal((await contract.call(relay, 'GET', '/api_keys/list_api_keys', { token: adminToken })).status, 200);
  assert.equal((await contract.call(relay, 'POST', '/api_keys/revoke_api_key', { token: adminToken, body: { name: 'ci' } })).status, 200);
  assert.equal((await contract.call(relay, 'POST', '/api_keys/revoke_api_key', { token: adminToken, body: { name: 'ci' } })).status, 404);
});

/** A webhook receiver on 127.0.0.1 that answers 204 and remembers the headers of each request. */
async function receiver(t: TestContext): Promise<{ url: string; requests: IncomingHttpHeaders[] }> {
  const requests: IncomingHttpHeaders[] = [];
  const server = createServer((req, res) => {
    req.resume();
    req.on('end', () => {
      requests.push(req.headers);
      res.writeHead(204).end();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  t.after(() => new Promise<void>((resolve) => server.close(() => resolve())));
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/hook`, requests };
}

test('the delivery log, replay, recover, test events and secret rotation: only documented answers', async (t) => {
  const hook = await receiver(t);
  const { relay, adminToken, viewerToken, nobodyToken } = await seededRelay(t, { 'delivery.allowHttp': 'true', 'delivery.allowNetworks': '127.0.0.1/32' });
  const token = adminToken;
  const posts = ['/webhook/test', '/webhook/rotate_secret', '/webhook/recover', '/webhook/deliveries/{id}/replay', '/webhook/deliveries/{id}/retry', '/webhook/disable', '/webhook/enable'];
  const since = new Date(Date.now() - 3_600_000).toISOString();

  // Shared errors, and everything before a webhook exists.
  for (const path of ['/webhook/deliveries', '/webhook/deliveries/{id}']) {
    await contract.call(relay, 'GET', path);
    await contract.call(relay, 'GET', path, { token: nobodyToken });
    await contract.call(relay, 'GET', path, { token, headers: v('v0') });
  }
  for (const path of posts) {
    await contract.call(relay, 'POST', path, { body: { since } });
    await contract.call(relay, 'POST', path, { token: viewerToken, body: { since } });
    await contract.call(relay, 'POST', path, { token, headers: v('v1.9'), body: { since } });
    const none = await contract.call(relay, 'POST', path, { token, body: { since } });
    assert.equal(none.body.code, 'webhook_not_configured', `${path} without a webhook`);
  }
  await contract.call(relay, 'GET', '/webhook/deliveries', { token: viewerToken });
  await contract.call(relay, 'GET', '/webhook/deliveries', { token, query: '?status=bogus&limit=0&since=yesterday' });
  await contract.call(relay, 'GET', '/webhook/deliveries', { token, query: `?request_id=${'x'.repeat(201)}` });
  await contract.call(relay, 'GET', '/webhook/deliveries/{id}', { token, params: { id: 'abc' } });
  await contract.call(relay, 'GET', '/webhook/deliveries/{id}', { token, params: { id: '999' } });
  await contract.call(relay, 'POST', '/webhook/deliveries/{id}/replay', { token, params: { id: 'abc' } });
  await contract.call(relay, 'POST', '/webhook/deliveries/{id}/retry', { token, params: { id: 'abc' } });
  await contract.call(relay, 'POST', '/webhook/test', { token, body: { kind: 'bogus' } });
  await contract.call(relay, 'POST', '/webhook/test', { token, rawBody: 'kind=sample', headers: { 'content-type': 'text/plain' } });
  await contract.call(relay, 'POST', '/webhook/test', { token, body: { padding: 'x'.repeat(70 * 1024) } });
  await contract.call(relay, 'POST', '/webhook/recover', { token, body: {} });
  await contract.call(relay, 'POST', '/webhook/recover', { token, rawBody: '{', headers: { 'content-type': 'application/json' } });
  await contract.call(relay, 'POST', '/webhook/recover', { token, rawBody: 'since=now', headers: { 'content-type': 'text/plain' } });
  await contract.call(relay, 'POST', '/webhook/recover', { token, body: { since, padding: 'x'.repeat(70 * 1024) } });

  // HMAC off: no secret to rotate. Then on: rotation answers a new secret once.
  await contract.call(relay, 'POST', '/webhook/register_webhook', { token, body: { webhook_url: hook.url, active_hmac: false } });
  const off = await contract.call(relay, 'POST', '/webhook/rotate_secret', { token });
  assert.equal(off.body.code, 'secret_not_configured');
  // With headers of its own (issue 29): a credential's value is answered as null, and hidden in the request as sent.
  const withHeaders = await contract.call(relay, 'POST', '/webhook/register_webhook', { token, body: { webhook_url: hook.url, headers: { 'X-Environment': 'test', Authorization: 'Bearer not-shown' } } });
  assert.deepEqual(withHeaders.body.headers, { 'X-Environment': 'test', Authorization: null });
  const badHeader = await contract.call(relay, 'POST', '/webhook/register_webhook', { token, body: { webhook_url: hook.url, headers: { Host: 'x' } } });
  assert.equal(badHeader.body.code, 'validation_failed');
  const disabled = await contract.call(relay, 'POST', '/webhook/disable', { token });
  assert.equal(disabled.body.status, 'disabled');
  const enabled = await contract.call(relay, 'POST', '/webhook/enable', { token });
  assert.equal(enabled.body.status, 'active');
  const rotated = await contract.call(relay, 'POST', '/webhook/rotate_secret', { token });
  assert.equal(rotated.status, 200);
  const rotating = await contract.call(relay, 'GET', '/webhook/get_webhook', { token: viewerToken });
  assert.equal(rotating.body.previous_secret_expires_at, rotated.body.previous_secret_expires_at, 'get_webhook says until when the previous secret signs');

  // A test event is delivered to the receiver; replaying it sends the same webhook-id again.
  const queued = await contract.call(relay, 'POST', '/webhook/test', { token });
  assert.equal(queued.status, 202);
  const delivered = await waitForStatus(relay, token, queued.body.delivery.id, 'delivered');
  assert.ok(delivered.attempt_log.length >= 1);
  const replayed = await contract.call(relay, 'POST', '/webhook/deliveries/{id}/replay', { token, params: { id: String(queued.body.delivery.id) } });
  assert.equal(replayed.status, 202);
  await waitForStatus(relay, token, replayed.body.delivery.id, 'delivered');
  assert.deepEqual(hook.requests.map((h) => h['webhook-id']), [queued.body.delivery.event_id, queued.body.delivery.event_id]);

  // Retry now: refused on a delivered delivery (409); a sample status change made to wait an hour (seeded while the webhook holds it) is made due (202).
  const notWaiting = await contract.call(relay, 'POST', '/webhook/deliveries/{id}/retry', { token, params: { id: String(queued.body.delivery.id) } });
  assert.equal(notWaiting.body.code, 'delivery_not_waiting');
  await contract.call(relay, 'POST', '/webhook/disable', { token });
  const sample = await contract.call(relay, 'POST', '/webhook/test', { token, body: { kind: 'sample_status_change' } });
  const held = repos(relay.store).deliveries;
  held.lease([sample.body.delivery.id], Date.now() + 60_000, Date.now());
  held.settle(sample.body.delivery.id, { status: 'pending', attempts: 1, nextAttemptAt: Date.now() + 3_600_000, at: Date.now(), statusCode: 500, error: 'HTTP 500' });
  await contract.call(relay, 'POST', '/webhook/enable', { token });
  const retried = await contract.call(relay, 'POST', '/webhook/deliveries/{id}/retry', { token, params: { id: String(sample.body.delivery.id) } });
  assert.equal(retried.status, 202);
  await waitForStatus(relay, token, sample.body.delivery.id, 'delivered');

  // The request as sent: the signature for an admin, withheld from a viewer; a search by request (a test event has none).
  assert.equal(delivered.request.signature, 'included');
  assert.equal(delivered.request.headers['x-environment'], 'test');
  assert.equal(delivered.request.headers.authorization, '(set; value hidden)');
  const seen = await contract.call(relay, 'GET', '/webhook/deliveries/{id}', { token: viewerToken, params: { id: String(queued.body.delivery.id) } });
  assert.equal(seen.body.request.signature, 'withheld');
  assert.equal(seen.body.request.headers['webhook-signature'], undefined);
  assert.deepEqual((await contract.call(relay, 'GET', '/webhook/deliveries', { token, query: '?request_id=ar_1' })).body, { data: [], next_cursor: null });
  const page = await contract.call(relay, 'GET', '/webhook/deliveries', { token, query: '?status=delivered&limit=1' });
  assert.equal(page.body.data.length, 1);
  assert.equal(typeof page.body.next_cursor, 'string');
  await contract.call(relay, 'GET', '/webhook/deliveries', { token, query: `?limit=1&cursor=${page.body.next_cursor}` });
  const recovered = await contract.call(relay, 'POST', '/webhook/recover', { token, body: { since } });
  assert.equal(recovered.status, 202);
  await contract.call(relay, 'POST', '/webhook/recover', { token, body: { since, until: new Date(Date.now() - 7_200_000).toISOString() } });
});

/** Polls GET /webhook/deliveries/{id} (each answer checked) until the delivery has `status`. */
async function waitForStatus(relay: RunningRelay, token: string, id: number, status: string): Promise<Json> {
  const deadline = Date.now() + 15_000;
  for (;;) {
    const res = await contract.call(relay, 'GET', '/webhook/deliveries/{id}', { token, params: { id: String(id) } });
    if (res.body.status === status) return res.body;
    assert.ok(Date.now() < deadline, `delivery ${id} is still ${res.body.status}: ${res.text}`);
    await sleep(100);
  }
}

test('GET /metrics: only documented answers, with and without the metrics token, and on an address that is not loopback', async (t) => {
  const open = await startRelay(t);
  const plain = await contract.call(open, 'GET', '/metrics');
  assert.equal(plain.status, 200);
  assert.match(plain.headers.get('content-type') ?? '', /^text\/plain; version=0\.0\.4/);
  assert.match(plain.text, /^hookrelay_build_info\{version="[^"]+"\} 1$/m);

  const token = 'metrics-token-0123456789abcdef';
  const guarded = await startRelay(t, { 'metrics.token': token });
  assert.equal((await contract.call(guarded, 'GET', '/metrics')).body.code, 'missing_token');
  assert.equal((await contract.call(guarded, 'GET', '/metrics', { headers: { authorization: 'Bearer not-the-metrics-token-at-all' } })).body.code, 'invalid_token');
  // A JWT of the admin API is not the metrics token either.
  await seedOrg(guarded.services, 'acme');
  assert.equal((await contract.call(guarded, 'GET', '/metrics', { token: guarded.token('acme', 'admin@acme.test') })).status, 401);
  assert.equal((await contract.call(guarded, 'GET', '/metrics', { headers: { authorization: `Bearer ${token}` } })).status, 200);

  // Listening on every address (requests still go to 127.0.0.1) without a token: refused.
  const exposed = await startRelay(t, { 'api.listen': '0.0.0.0:0' });
  const refused = await contract.call(exposed, 'GET', '/metrics');
  assert.equal(refused.status, 403);
  assert.match(refused.body.detail, /not a loopback address.*metrics\.tokenFile/);
  assert.equal((await call(exposed.baseUrl, 'GET', '/healthz')).status, 200, 'the rest of the API is served');
});

test('the rate limit answers 429 with Retry-After on every authenticated operation', async (t) => {
  const limited = await seededRelay(t, { 'api.rateLimitPerMinute': '1', 'api.rateLimitBurst': '1' });
  for (const { method, path, op } of operations()) {
    if (op['x-permission'] === null) continue;
    const token = limited.relay.token('acme', limited.admin);
    const options = method === 'GET' ? { token } : { token, body: {} };
    await contract.call(limited.relay, method, path, options);
    const res = await contract.call(limited.relay, method, path, options);
    assert.equal(res.status, 429, `${method} ${path} is rate limited`);
    assert.ok(Number(res.headers.get('retry-after')) >= 1);
  }
});

test('every write answers 503 database_busy with Retry-After while another process holds the database lock past database.busyTimeout', async (t) => {
  const { relay, people, adminToken: token } = await seededRelay(t, { 'database.busyTimeout': '200' });
  await relay.services.webhooks.register(BY_TEST, 'acme', { webhook_url: 'https://hooks.acme.example/hook' });
  const queued = await contract.call(relay, 'POST', '/webhook/test', { token });
  const writes: Array<[string, string, Record<string, unknown>]> = [
    ...['PUT', 'POST', 'PATCH'].map((m): [string, string, Record<string, unknown>] => [m, '/users/update_role', { body: { email: people.acme!.viewer, role_name: 'saas_admin' } }]),
    ...['PUT', 'POST'].map((m): [string, string, Record<string, unknown>] => [m, '/webhook/register_webhook', { body: { webhook_url: 'https://hooks.acme.example/other' } }]),
    ['POST', '/users/add_user', { body: { email: 'busy@acme.test', role_name: 'saas_viewer' } }],
    ['POST', '/users/remove_user', { body: { email: people.acme!.viewer } }],
    ['POST', '/webhook/rotate_secret', {}],
    ['POST', '/webhook/test', {}],
    ['POST', '/webhook/deliveries/{id}/replay', { params: { id: String(queued.body.delivery.id) } }],
    ['POST', '/webhook/deliveries/{id}/retry', { params: { id: String(queued.body.delivery.id) } }],
    ['POST', '/webhook/recover', { body: { since: '2000-01-01T00:00:00Z' } }],
    ['POST', '/api_keys/create_api_key', { body: { name: 'busy', role_name: 'saas_viewer' } }],
    ['POST', '/api_keys/revoke_api_key', { body: { name: 'busy' } }],
  ];
  const other = new Database(relay.config.database.path, { timeout: 0 });
  t.after(() => other.close());
  other.exec('BEGIN IMMEDIATE');
  try {
    for (const [method, path, options] of writes) {
      const res = await contract.call(relay, method, path, { token, ...options });
      assert.equal(res.status, 503, `${method} ${path}: ${res.text}`);
      assert.equal(res.body.code, 'database_busy');
      assert.equal(res.headers.get('retry-after'), '1');
    }
  } finally {
    other.exec('ROLLBACK');
  }
  assert.equal(repos(relay.store).users.findByEmail('acme', people.acme!.viewer)?.roleName, 'saas_viewer', 'nothing changed');
});

test('every documented answer of every operation was produced by a request above', () => {
  assert.deepEqual(contract.unreached(), [], 'documented answers that no request of these scenarios produced');
});

/**
 * Shared test fixtures: a real relay on 127.0.0.1:0 over a temp SQLite file, a second store
 * connection for seeding and inspecting (as the CLI would), and small fetch helpers.
 */
import assert from 'node:assert/strict';
import { generateKeyPairSync } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { TestContext } from 'node:test';
import Database from 'better-sqlite3';
import jwt from 'jsonwebtoken';
import { loadConfig, type Config } from '../../src/config/load.ts';
import { systemClock } from '../../src/domain/clock.ts';
import { emailKey } from '../../src/domain/validation.ts';
import { createLogger, type Logger } from '../../src/log.ts';
import { createRelay, type Relay } from '../../src/relay.ts';
import { loadAuthKeys } from '../../src/services/auth-keys.ts';
import { createServices, type Services } from '../../src/services/services.ts';
import { signToken } from '../../src/services/tokens.ts';
import { MIGRATIONS } from '../../src/store/sqlite/migrations.ts';
import { openSqliteStore, type SqliteStore } from '../../src/store/sqlite/store.ts';
import { BY_TEST } from '../helpers/audit-helpers.ts';

export const silentLog = createLogger('silent');

/** A fresh directory removed when the test ends. */
export function tempDir(t: TestContext, prefix = 'hookrelay-test-'): string {
  const dir = mkdtempSync(join(tmpdir(), prefix));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

export interface RunningRelay {
  readonly config: Config;
  readonly relay: Relay;
  readonly baseUrl: string;
  /** A second connection to the same database file, for seeding and assertions. */
  readonly store: SqliteStore;
  readonly services: Services;
  /** A valid token for an existing user (defaults: 1 h). */
  token(orgId: string, email: string, ttlMs?: number): string;
  /** Signs arbitrary claims with the relay's HS256 secret (for malformed-token tests). */
  sign(claims: Record<string, unknown>, options?: jwt.SignOptions): string;
}

/**
 * Starts a relay in-process with `overrides` (dotted config paths, string values as a CLI
 * flag would give them), logging to `options.log` (default: nowhere). Stopped and cleaned up
 * when the test ends.
 */
export async function startRelay(t: TestContext, overrides: Record<string, string> = {}, options: { log?: Logger } = {}): Promise<RunningRelay> {
  const stateDir = tempDir(t);
  const config = loadConfig({
    env: {},
    overrides: { stateDir, 'api.listen': '127.0.0.1:0', 'log.level': 'silent', ...overrides },
  });
  const relay = createRelay(config, { log: options.log ?? silentLog });
  await relay.start();
  const store = openSqliteStore(config.database.path, systemClock);
  t.after(async () => {
    await store.close();
    await relay.stop();
  });
  const services = createServices(store, config);
  const keys = loadAuthKeys(config, silentLog);
  const { port } = relay.address();
  return {
    config,
    relay,
    baseUrl: `http://127.0.0.1:${port}`,
    store,
    services,
    token: (orgId, email, ttlMs = 3_600_000) =>
      signToken({ keys, auth: config.auth, clock: systemClock }, { orgId, email }, ttlMs).token,
    sign: (claims, options = {}) => jwt.sign(claims, keys.verifyKey, { algorithm: 'HS256', ...options }),
  };
}

/** Creates an organization with one admin and one viewer; returns their e-mails. */
export async function seedOrg(services: Services, orgId: string): Promise<{ admin: string; viewer: string }> {
  await services.orgs.add(BY_TEST, { id: orgId });
  const admin = `admin@${orgId}.test`;
  const viewer = `viewer@${orgId}.test`;
  await services.users.add(BY_TEST, { orgId, email: admin, roleName: 'saas_admin' });
  await services.users.add(BY_TEST, { orgId, email: viewer, roleName: 'saas_viewer' });
  return { admin, viewer };
}

export interface ApiResponse {
  readonly status: number;
  readonly headers: Headers;
  readonly body: any;
  readonly text: string;
}

/** One HTTP call to the admin API; JSON bodies are serialised, answers parsed when JSON. */
export async function call(
  baseUrl: string,
  method: string,
  path: string,
  options: { token?: string; body?: unknown; rawBody?: string; headers?: Record<string, string> } = {},
): Promise<ApiResponse> {
  const headers: Record<string, string> = { ...options.headers };
  if (options.token !== undefined) headers.authorization = `Bearer ${options.token}`;
  let body: string | undefined = options.rawBody;
  if (options.body !== undefined) {
    body = JSON.stringify(options.body);
    headers['content-type'] ??= 'application/json';
  }
  const res = await fetch(baseUrl + path, { method, headers, ...(body !== undefined ? { body } : {}) });
  const text = await res.text();
  let parsed: unknown;
  if (/json/.test(res.headers.get('content-type') ?? '')) parsed = JSON.parse(text);
  return { status: res.status, headers: res.headers, body: parsed, text };
}

/**
 * Every row of every table, for "this request changed nothing" assertions; but the audit
 * trail's, which records refused attempts too (test/api/audit.test.ts checks those).
 */
export function snapshot(store: SqliteStore): Record<string, unknown[]> {
  const tables = store.db.prepare("SELECT name FROM sqlite_schema WHERE type = 'table' AND name NOT LIKE 'sqlite_%' AND name NOT LIKE 'audit_%' ORDER BY name").all() as { name: string }[];
  return Object.fromEntries(tables.map(({ name }) => [name, store.db.prepare(`SELECT * FROM "${name}" ORDER BY rowid`).all()]));
}

/**
 * Runs `action` (a request the API must refuse) and asserts that no row of any table changed:
 * "a rejected request changes nothing in the database". Returns what `action` returned.
 */
export async function assertUnchanged<T>(store: SqliteStore, action: () => Promise<T>): Promise<T> {
  const before = snapshot(store);
  const result = await action();
  assert.deepEqual(snapshot(store), before, 'a rejected request changed the database');
  return result;
}

/** The current role of a user, read through the services (as the CLI would); undefined if there is no such user. */
export async function roleOf(relay: RunningRelay, orgId: string, email: string): Promise<string | undefined> {
  return (await relay.services.users.list(orgId)).find((u) => u.email === email)?.roleName;
}

/** Members an error body may have: the RFC 9457 ones plus the documented extensions. */
const PROBLEM_MEMBERS = new Set([
  'type',
  'title',
  'status',
  'detail',
  'code',
  'instance',
  'invalid_params',
  'supported_versions',
  'valid_role_names',
  'retry_after_seconds',
  'limit_bytes',
  'reason',
]);
/** Traces of internals that must never reach a client: stack frames, library and SQLite messages. */
const LEAKS = /\n\s+at |\.[cm]?[jt]s:\d+|node_modules|\bstack\b|SqliteError|SQLITE_|no such table|JsonWebTokenError|TokenExpiredError|jwt (?:malformed|expired|signature|audience|issuer)|invalid signature|secretOrPublicKey|koa-jwt/i;

/**
 * Asserts an RFC 9457 answer with `status` and the stable `code`: problem+json content type,
 * `type` derived from the code, a title, a detail, only documented members, nothing internal.
 * Returns the body for further assertions.
 */
export function assertProblem(res: ApiResponse, status: number, code: string): Record<string, any> {
  assert.equal(res.status, status, `expected ${status} ${code}, got ${res.status}: ${res.text}`);
  assert.match(res.headers.get('content-type') ?? '', /^application\/problem\+json\b/);
  const body = res.body as Record<string, any>;
  assert.equal(body.code, code);
  assert.equal(body.type, `urn:hookrelay:problem:${code}`);
  assert.equal(body.status, status);
  assert.equal(typeof body.title, 'string');
  assert.ok(body.title.length > 0, 'title is empty');
  assert.equal(typeof body.detail, 'string');
  assert.ok(body.detail.length > 0, 'detail is empty');
  for (const member of Object.keys(body)) assert.ok(PROBLEM_MEMBERS.has(member), `unexpected member "${member}" in ${res.text}`);
  assert.doesNotMatch(res.text, LEAKS);
  return body;
}

/** Base64url of the JSON of `value`: one segment of a compact JWS. */
export function jwtSegment(value: unknown): string {
  return Buffer.from(JSON.stringify(value)).toString('base64url');
}

/**
 * Builds a compact JWS by hand (for tokens no library would make): `sign` gets the signing
 * input `header.payload` and returns the signature bytes, or null for an empty signature.
 */
export function craftJwt(header: Record<string, unknown>, claims: Record<string, unknown>, sign: (signingInput: string) => Buffer | null): string {
  const signingInput = `${jwtSegment(header)}.${jwtSegment(claims)}`;
  return `${signingInput}.${sign(signingInput)?.toString('base64url') ?? ''}`;
}

/** Claims of a valid token for the default claim names, expiring in an hour unless overridden. */
export function claimsFor(orgId: string, email: string, extra: Record<string, unknown> = {}): Record<string, unknown> {
  const now = Math.floor(Date.now() / 1000);
  return { sub: email, org: orgId, iat: now, exp: now + 3600, ...extra };
}

/** Writes a PEM key pair into `dir`; returns the file paths and the PEM texts. */
export function writeKeyPair(
  dir: string,
  type: 'rsa' | 'ec' | 'ed25519',
): { publicKeyFile: string; privateKeyFile: string; publicKeyPem: string; privateKeyPem: string } {
  const publicKeyEncoding = { type: 'spki', format: 'pem' } as const;
  const privateKeyEncoding = { type: 'pkcs8', format: 'pem' } as const;
  const { publicKey, privateKey }: { publicKey: string; privateKey: string } =
    type === 'rsa'
      ? generateKeyPairSync('rsa', { modulusLength: 2048, publicKeyEncoding, privateKeyEncoding })
      : type === 'ec'
        ? generateKeyPairSync('ec', { namedCurve: 'P-256', publicKeyEncoding, privateKeyEncoding })
        : generateKeyPairSync('ed25519', { publicKeyEncoding, privateKeyEncoding });
  const publicKeyFile = join(dir, `${type}-public.pem`);
  const privateKeyFile = join(dir, `${type}-private.pem`);
  writeFileSync(publicKeyFile, publicKey);
  writeFileSync(privateKeyFile, privateKey, { mode: 0o600 });
  return { publicKeyFile, privateKeyFile, publicKeyPem: publicKey, privateKeyPem: privateKey };
}

/**
 * A database file at an older schema `version`, to test upgrades from it: organization acme and
 * its webhook (signed with `secret`, unsigned if null). Returned open: insert the rows the test
 * needs as that version stored them, then close it.
 */
export function databaseAtVersion(path: string, version: number, secret: string | null = null): Database.Database {
  const db = new Database(path);
  db.pragma('journal_mode = WAL');
  // Migration 7 calls the function migrate() registers (see db.ts).
  db.function('hookrelay_email_key', { deterministic: true }, (email: unknown) => emailKey(String(email)));
  db.transaction(() => {
    for (const sql of MIGRATIONS.slice(0, version)) db.exec(sql);
    db.pragma(`user_version = ${version}`);
  })();
  db.prepare("INSERT INTO organizations (id, name, created_at) VALUES ('acme', 'Acme', 1)").run();
  db.prepare("INSERT INTO webhooks (org_id, url, active_hmac, secret, created_at, updated_at) VALUES ('acme', 'https://hooks.example/acme', ?, ?, 1, 1)").run(
    secret === null ? 0 : 1,
    secret,
  );
  return db;
}

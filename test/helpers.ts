/**
 * Shared test fixtures: a real relay on 127.0.0.1:0 over a temp SQLite file, a second store
 * connection for seeding and inspecting (as the CLI would), and small fetch helpers.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { TestContext } from 'node:test';
import jwt from 'jsonwebtoken';
import { loadConfig, type Config } from '../src/config/load.ts';
import { systemClock } from '../src/domain/clock.ts';
import { createLogger } from '../src/log.ts';
import { createRelay, type Relay } from '../src/relay.ts';
import { loadAuthKeys } from '../src/services/auth-keys.ts';
import { createServices, type Services } from '../src/services/services.ts';
import { issueToken } from '../src/services/tokens.ts';
import { openStore, type Store } from '../src/store/store.ts';

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
  readonly store: Store;
  readonly services: Services;
  /** A valid token for an existing user (defaults: 1 h). */
  token(orgId: string, email: string, ttlMs?: number): string;
  /** Signs arbitrary claims with the relay's HS256 secret (for malformed-token tests). */
  sign(claims: Record<string, unknown>, options?: jwt.SignOptions): string;
}

/**
 * Starts a relay in-process with `overrides` (dotted config paths, string values as a CLI
 * flag would give them). Stopped and cleaned up when the test ends.
 */
export async function startRelay(t: TestContext, overrides: Record<string, string> = {}): Promise<RunningRelay> {
  const stateDir = tempDir(t);
  const config = loadConfig({
    env: {},
    overrides: { stateDir, 'api.listen': '127.0.0.1:0', 'log.level': 'silent', ...overrides },
  });
  const relay = createRelay(config, { log: silentLog });
  await relay.start();
  const store = openStore(config.database.path, systemClock);
  t.after(async () => {
    store.close();
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
      issueToken({ keys, auth: config.auth, users: services.users, clock: systemClock }, { orgId, email, ttlMs }).token,
    sign: (claims, options = {}) => jwt.sign(claims, keys.verifyKey, { algorithm: 'HS256', ...options }),
  };
}

/** Creates an organization with one admin and one viewer; returns their e-mails. */
export function seedOrg(services: Services, orgId: string): { admin: string; viewer: string } {
  services.orgs.add({ id: orgId });
  const admin = `admin@${orgId}.test`;
  const viewer = `viewer@${orgId}.test`;
  services.users.add({ orgId, email: admin, roleName: 'saas_admin' });
  services.users.add({ orgId, email: viewer, roleName: 'saas_viewer' });
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
  let parsed: unknown = undefined;
  if (/json/.test(res.headers.get('content-type') ?? '')) parsed = JSON.parse(text);
  return { status: res.status, headers: res.headers, body: parsed, text };
}

/** Every row of every table, for "this request changed nothing" assertions. */
export function snapshot(store: Store): Record<string, unknown[]> {
  const tables = store.db.prepare("SELECT name FROM sqlite_schema WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name").all() as { name: string }[];
  return Object.fromEntries(tables.map(({ name }) => [name, store.db.prepare(`SELECT * FROM "${name}" ORDER BY rowid`).all()]));
}

/**
 * End-to-end tests of the built CLI (`node dist/cli.js`), run as a new user would: real
 * processes, a fresh temp directory as the working directory (so the state directory is the
 * default ./var), and an environment without any HOOKRELAY_* variable. Build first
 * (`npm run build`; `npm test` does it).
 *
 * Nothing here imports src/: these tests see hookrelay only through its command line, its
 * files, its log on stdout and its HTTP API.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { createHmac } from 'node:crypto';
import { existsSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { test, type TestContext } from 'node:test';
import assert from 'node:assert/strict';
import Database from 'better-sqlite3';

const CLI = fileURLToPath(new URL('../../dist/cli.js', import.meta.url));
/** Upper bound for one process; only reached when something hangs (then the test fails). */
const PROCESS_LIMIT_MS = 30_000;
const ISO_TIME = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/;
const JWT_SHAPE = /^[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+$/;
/** `whsec_` + base64 of 32 bytes. */
const WEBHOOK_SECRET = /^whsec_[A-Za-z0-9+/]{43}=$/;

const SEEDED_ROLES = [
  { name: 'saas_admin', description: 'read plus specific modifications for the associated SaaS' },
  { name: 'saas_viewer', description: 'view-only access to the SaaS resources' },
];

test.before(() => {
  if (!existsSync(CLI)) throw new Error(`${CLI} is missing; run npm run build first`);
});

test('the built CLI is an executable with its shebang, as `npx hookrelay` and the installed link run it', async () => {
  // npm links the bin of a fresh clone before its prepare script builds dist/, so the build itself must mark it.
  assert.notEqual(statSync(CLI).mode & 0o111, 0, `${CLI} is not executable: npx hookrelay would fail with "Permission denied"`);
  const child = spawn(CLI, ['--version'], { env: newcomerEnv(), stdio: ['ignore', 'pipe', 'pipe'] });
  let stdout = '';
  child.stdout!.setEncoding('utf8').on('data', (chunk: string) => (stdout += chunk));
  const code = await new Promise<number | null>((resolve, reject) => {
    child.once('error', reject);
    child.once('close', resolve);
  });
  assert.equal(code, 0);
  // The version, the runtime and the schemas (what an operator pastes into a report).
  assert.match(stdout, /^hookrelay \d+\.\d+\.\d+ \(Node\.js v\d+\.\d+\.\d+ \w+, SQLite schema \d+, PostgreSQL schema \d+\)\n$/);
});

/** The caller's environment minus everything that would change hookrelay's behaviour. */
function newcomerEnv(extra: Record<string, string> = {}): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const [name, value] of Object.entries(process.env)) {
    if (value === undefined || name.startsWith('HOOKRELAY_') || name === 'NODE_TEST_CONTEXT' || name === 'NODE_OPTIONS') continue;
    env[name] = value;
  }
  return { ...env, ...extra };
}

interface Exit {
  readonly code: number | null;
  readonly signal: NodeJS.Signals | null;
}

interface CliResult extends Exit {
  readonly stdout: string;
  readonly stderr: string;
}

interface Daemon {
  readonly port: number;
  readonly baseUrl: string;
  readonly child: ChildProcess;
  stdout(): string;
  stderr(): string;
  /** The JSON log records written so far (every stdout line must be one). */
  logRecords(): Array<Record<string, unknown>>;
  /** Sends `signal` and resolves with how the process ended. */
  stop(signal?: NodeJS.Signals): Promise<Exit>;
}

function exitOf(child: ChildProcess): Promise<Exit> {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve({ code: child.exitCode, signal: child.signalCode });
  return new Promise((resolve) => child.once('exit', (code, signal) => resolve({ code, signal })));
}

/**
 * One temp directory, used as the working directory of every process of a test, plus the
 * processes started there: all are killed, then the directory removed, when the test ends.
 */
class Sandbox {
  readonly dir: string;
  private readonly children = new Set<ChildProcess>();

  constructor(t: TestContext) {
    this.dir = mkdtempSync(join(tmpdir(), 'hookrelay-e2e-'));
    t.after(() => this.cleanup());
  }

  get stateDir(): string {
    return join(this.dir, 'var');
  }

  get databasePath(): string {
    return join(this.stateDir, 'hookrelay.db');
  }

  private spawn(args: readonly string[], env: Record<string, string>): ChildProcess {
    const child = spawn(process.execPath, [CLI, ...args], { cwd: this.dir, env: newcomerEnv(env), stdio: ['ignore', 'pipe', 'pipe'] });
    this.children.add(child);
    child.once('exit', () => this.children.delete(child));
    return child;
  }

  /** Runs one CLI command to completion. */
  async run(args: readonly string[], options: { env?: Record<string, string> } = {}): Promise<CliResult> {
    const child = this.spawn(args, options.env ?? {});
    let stdout = '';
    let stderr = '';
    child.stdout!.setEncoding('utf8').on('data', (chunk: string) => (stdout += chunk));
    child.stderr!.setEncoding('utf8').on('data', (chunk: string) => (stderr += chunk));
    const timer = setTimeout(() => child.kill('SIGKILL'), PROCESS_LIMIT_MS);
    // 'close' (not 'exit') so that both pipes have been read to the end.
    const { code, signal } = await new Promise<Exit>((resolve, reject) => {
      child.once('error', reject);
      child.once('close', (code, signal) => resolve({ code, signal }));
    });
    clearTimeout(timer);
    return { code, signal, stdout, stderr };
  }

  /** Runs a command that must succeed; returns its stdout. */
  async ok(args: readonly string[], options: { env?: Record<string, string> } = {}): Promise<string> {
    const result = await this.run(args, options);
    assert.equal(result.code, 0, `hookrelay ${args.join(' ')} exited with ${result.code} (${result.signal}); stderr: ${result.stderr}`);
    return result.stdout;
  }

  /**
   * Creates the install (./var and its database) with `hookrelay migrate`, as a user does before
   * any other command when the daemon has not run yet: only `serve` and `migrate` create one.
   */
  async install(): Promise<void> {
    const stdout = await this.ok(['migrate']);
    assert.ok(stdout.startsWith(`migrated ${this.databasePath} from 0 to `), stdout);
  }

  /**
   * Starts `serve --listen 127.0.0.1:0`, learns the port from the "admin API listening" log
   * record and waits until GET /readyz answers 200.
   */
  async serve(extraArgs: readonly string[] = []): Promise<Daemon> {
    const child = this.spawn(['serve', '--listen', '127.0.0.1:0', ...extraArgs], {});
    let stdout = '';
    let stderr = '';
    child.stderr!.setEncoding('utf8').on('data', (chunk: string) => (stderr += chunk));
    // 'close' rather than 'exit': the pipes have been read to the end by then.
    const exited = new Promise<Exit>((resolve) => child.once('close', (code, signal) => resolve({ code, signal })));

    const port = await new Promise<number>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`the daemon did not log "admin API listening"; stdout: ${stdout}; stderr: ${stderr}`)), PROCESS_LIMIT_MS);
      child.stdout!.setEncoding('utf8').on('data', (chunk: string) => {
        stdout += chunk;
        for (const line of stdout.split('\n').slice(0, -1)) {
          let record: { msg?: unknown; port?: unknown };
          try {
            record = JSON.parse(line) as typeof record;
          } catch {
            continue; // logRecords() reports non-JSON lines as a failure
          }
          if (record.msg === 'admin API listening' && typeof record.port === 'number') {
            clearTimeout(timer);
            resolve(record.port);
          }
        }
      });
      void exited.then(({ code, signal }) => {
        clearTimeout(timer);
        reject(new Error(`the daemon exited (${code}, ${signal}) before listening; stderr: ${stderr}`));
      });
    });
    const baseUrl = `http://127.0.0.1:${port}`;

    const deadline = Date.now() + PROCESS_LIMIT_MS;
    for (;;) {
      const status = await fetch(`${baseUrl}/readyz`).then(
        async (res) => {
          await res.arrayBuffer();
          return res.status;
        },
        () => 0,
      );
      if (status === 200) break;
      if (Date.now() > deadline) throw new Error(`GET /readyz still answers ${status}`);
      await new Promise((resolve) => setTimeout(resolve, 20));
    }

    return {
      port,
      baseUrl,
      child,
      stdout: () => stdout,
      stderr: () => stderr,
      logRecords: () =>
        stdout
          .split('\n')
          .filter((line) => line !== '')
          .map((line) => JSON.parse(line) as Record<string, unknown>),
      stop: async (signal = 'SIGTERM') => {
        child.kill(signal);
        return exited;
      },
    };
  }

  private async cleanup(): Promise<void> {
    await Promise.all(
      [...this.children].map((child) => {
        const exit = exitOf(child);
        child.kill('SIGKILL');
        return exit;
      }),
    );
    rmSync(this.dir, { recursive: true, force: true });
  }
}

interface ApiResponse {
  readonly status: number;
  readonly headers: Headers;
  readonly body: any;
}

async function api(baseUrl: string, method: string, path: string, token?: string, body?: unknown): Promise<ApiResponse> {
  const headers: Record<string, string> = {};
  if (token !== undefined) headers.authorization = `Bearer ${token}`;
  if (body !== undefined) headers['content-type'] = 'application/json';
  const res = await fetch(baseUrl + path, { method, headers, ...(body !== undefined ? { body: JSON.stringify(body) } : {}) });
  const text = await res.text();
  return { status: res.status, headers: res.headers, body: /json/.test(res.headers.get('content-type') ?? '') ? JSON.parse(text) : text };
}

/** The claims of a JWT, after checking that it is HS256-signed with `secret`. */
function verifiedClaims(token: string, secret: string): Record<string, unknown> {
  assert.match(token, JWT_SHAPE);
  const [header, payload, signature] = token.split('.') as [string, string, string];
  assert.deepEqual(JSON.parse(Buffer.from(header, 'base64url').toString('utf8')), { alg: 'HS256', typ: 'JWT' });
  assert.equal(signature, createHmac('sha256', secret).update(`${header}.${payload}`).digest('base64url'), 'the token is not signed with the state directory secret');
  return JSON.parse(Buffer.from(payload, 'base64url').toString('utf8')) as Record<string, unknown>;
}

/** Reads the generated JWT secret, checking that only its owner can read it. */
function readJwtSecret(sandbox: Sandbox): string {
  const path = join(sandbox.stateDir, 'jwt-secret');
  assert.equal((statSync(path).mode & 0o777).toString(8), '600', `${path} must have mode 0600`);
  const secret = readFileSync(path, 'utf8').trim();
  // 32 random bytes, however encoded, make at least 32 characters.
  assert.ok(secret.length >= 32, 'the generated JWT secret is too short');
  return secret;
}

/** stderr holds exactly one line, "hookrelay: ...", matching `pattern`. */
function assertOneErrorLine(stderr: string, pattern: RegExp): void {
  const lines = stderr.split('\n');
  assert.equal(lines.length, 2, `expected one line on stderr, got: ${JSON.stringify(stderr)}`);
  assert.equal(lines[1], '');
  assert.match(lines[0]!, /^hookrelay: \S/);
  assert.match(lines[0]!, pattern);
}

function userVersion(path: string): number {
  const db = new Database(path, { readonly: true });
  try {
    return db.pragma('user_version', { simple: true }) as number;
  } finally {
    db.close();
  }
}

test('newcomer flow: CLI set-up and token, then a daemon started afterwards serves the four endpoints', async (t) => {
  const sandbox = new Sandbox(t);

  // The CLI works on an existing install only: the newcomer creates it first.
  await sandbox.install();

  assert.equal(await sandbox.ok(['orgs', 'add', 'acme']), 'added organization acme (acme)\n');
  assert.equal(await sandbox.ok(['users', 'add', '--org', 'acme', '--email', 'ada@acme.test', '--role', 'saas_admin']), 'added ada@acme.test to acme as saas_admin\n');
  assert.equal(await sandbox.ok(['users', 'add', '--org', 'acme', '--email', 'bob@acme.test', '--role', 'saas_viewer']), 'added bob@acme.test to acme as saas_viewer\n');

  const issued = await sandbox.run(['token', 'issue', '--org', 'acme', '--email', 'ada@acme.test']);
  assert.equal(issued.code, 0, issued.stderr);
  assert.equal(issued.stderr, '');
  assert.match(issued.stdout, /^[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\n$/, 'stdout must be the JWT alone');
  const token = issued.stdout.trim();

  // The CLI generated the state directory's secret; the token is signed with it.
  const jwtSecret = readJwtSecret(sandbox);
  const claims = verifiedClaims(token, jwtSecret);
  assert.equal(claims.sub, 'ada@acme.test');
  assert.equal(claims.org, 'acme');
  assert.equal(typeof claims.exp, 'number');

  const daemon = await sandbox.serve();
  assert.equal(readFileSync(join(sandbox.stateDir, 'jwt-secret'), 'utf8').trim(), jwtSecret, 'the daemon must reuse the existing secret');

  const roles = await api(daemon.baseUrl, 'GET', '/users/get_roles', token);
  assert.equal(roles.status, 200);
  // get_roles says what each role permits, besides the seed's name and description.
  assert.deepEqual(roles.body, [
    { ...SEEDED_ROLES[0], permissions: ['api_keys:manage', 'audit:read', 'roles:read', 'users:manage', 'webhook:manage', 'webhook:read'] },
    { ...SEEDED_ROLES[1], permissions: ['roles:read', 'webhook:read'] },
  ]);

  const noToken = await api(daemon.baseUrl, 'GET', '/users/get_roles');
  assert.equal(noToken.status, 401);
  assert.equal(noToken.body.code, 'missing_token');

  const promote = await api(daemon.baseUrl, 'PUT', '/users/update_role', token, { email: 'bob@acme.test', role_name: 'saas_admin' });
  assert.equal(promote.status, 200);
  assert.equal(typeof promote.body.message, 'string');
  assert.match(promote.body.message, /bob@acme\.test/);
  // The CLI, on the same database, sees the change the API made.
  const users = JSON.parse(await sandbox.ok(['users', 'list', '--org', 'acme', '--json'])) as Array<{ email: string; role_name: string }>;
  assert.deepEqual(
    users.map((u) => [u.email, u.role_name]),
    [
      ['ada@acme.test', 'saas_admin'],
      ['bob@acme.test', 'saas_admin'],
    ],
  );

  const unknownUser = await api(daemon.baseUrl, 'PUT', '/users/update_role', token, { email: 'nobody@acme.test', role_name: 'saas_viewer' });
  assert.equal(unknownUser.status, 404);
  assert.equal(unknownUser.body.code, 'user_not_found');

  const none = await api(daemon.baseUrl, 'GET', '/webhook/get_webhook', token);
  assert.equal(none.status, 404);
  assert.equal(none.body.code, 'webhook_not_configured');
  assert.match(none.headers.get('content-type') ?? '', /^application\/problem\+json/);

  const registered = await api(daemon.baseUrl, 'POST', '/webhook/register_webhook', token, { webhook_url: 'https://hooks.example.com/acme' });
  assert.equal(registered.status, 201);
  assert.equal(typeof registered.body.message, 'string');
  assert.match(registered.body.secret, WEBHOOK_SECRET);
  const webhookSecret = registered.body.secret as string;

  const webhook = await api(daemon.baseUrl, 'GET', '/webhook/get_webhook', token);
  assert.equal(webhook.status, 200);
  assert.deepEqual(Object.keys(webhook.body).sort(), [
    'active_hmac', 'client_certificate', 'consecutive_failures', 'created_at', 'disabled_reason', 'failing_since', 'headers', 'last_error', 'last_success_at', 'oauth2', 'previous_secret_expires_at', 'rate_limit', 'status', 'status_detail', 'updated_at', 'webhook_url',
  ]);
  assert.equal(webhook.body.webhook_url, 'https://hooks.example.com/acme');
  assert.equal(webhook.body.active_hmac, true);
  assert.equal(webhook.body.status, 'active');
  assert.match(webhook.body.created_at, ISO_TIME);
  assert.match(webhook.body.updated_at, ISO_TIME);

  // The operator reads the same secret with the CLI while the daemon runs.
  assert.equal(await sandbox.ok(['webhook', 'secret', '--org', 'acme']), `${webhookSecret}\n`);

  const exit = await daemon.stop();
  assert.deepEqual(exit, { code: 0, signal: null });
  const output = daemon.stdout() + daemon.stderr();
  assert.ok(!output.includes(jwtSecret), 'the JWT secret must never be logged');
  assert.ok(!output.includes(webhookSecret), 'the webhook signing secret must never be logged');
  assert.ok(!output.includes(token), 'bearer tokens must never be logged');
  // The CLI made the secret, so the daemon must not claim to have generated one.
  assert.equal(
    daemon.logRecords().some((r) => typeof r.msg === 'string' && /generated/.test(r.msg)),
    false,
  );
});

test('daemon first: it generates the secret, CLI tokens work against it, CLI role changes apply on the next request, SIGTERM exits 0', async (t) => {
  const sandbox = new Sandbox(t);
  const daemon = await sandbox.serve();

  // A fresh state directory: the daemon created the secret and logged that (not the value).
  const jwtSecret = readJwtSecret(sandbox);
  const generated = daemon.logRecords().filter((r) => typeof r.msg === 'string' && /generated a new HS256 JWT secret/.test(r.msg));
  assert.equal(generated.length, 1);
  assert.equal(generated[0]!.path, join(sandbox.stateDir, 'jwt-secret'));

  await sandbox.ok(['orgs', 'add', 'acme', '--name', 'Acme Corp']);
  await sandbox.ok(['users', 'add', '--org', 'acme', '--email', 'ada@acme.test', '--role', 'saas_admin']);
  await sandbox.ok(['users', 'add', '--org', 'acme', '--email', 'bob@acme.test', '--role', 'saas_admin']);
  const ada = (await sandbox.ok(['token', 'issue', '--org', 'acme', '--email', 'ada@acme.test'])).trim();
  const bob = (await sandbox.ok(['token', 'issue', '--org', 'acme', '--email', 'bob@acme.test'])).trim();
  assert.equal(verifiedClaims(bob, jwtSecret).sub, 'bob@acme.test');

  const first = await api(daemon.baseUrl, 'POST', '/webhook/register_webhook', bob, { webhook_url: 'https://hooks.example.com/one' });
  assert.equal(first.status, 201);

  assert.equal(await sandbox.ok(['users', 'set-role', '--org', 'acme', '--email', 'bob@acme.test', '--role', 'saas_viewer']), 'bob@acme.test: saas_admin -> saas_viewer\n');

  const denied = await api(daemon.baseUrl, 'POST', '/webhook/register_webhook', bob, { webhook_url: 'https://hooks.example.com/two' });
  assert.equal(denied.status, 403);
  assert.equal(denied.body.code, 'forbidden');
  const denied2 = await api(daemon.baseUrl, 'PUT', '/users/update_role', bob, { email: 'ada@acme.test', role_name: 'saas_viewer' });
  assert.equal(denied2.status, 403);
  // Viewers still read.
  const read = await api(daemon.baseUrl, 'GET', '/webhook/get_webhook', bob);
  assert.equal(read.status, 200);
  assert.equal(read.body.webhook_url, 'https://hooks.example.com/one', 'the refused registration must change nothing');

  // Ada, still an admin, is unaffected; and a CLI promotion is honoured at once too.
  const byAda = await api(daemon.baseUrl, 'PUT', '/webhook/register_webhook', ada, { webhook_url: 'https://hooks.example.com/three' });
  assert.equal(byAda.status, 200);
  assert.equal(byAda.body.secret, undefined, 'the secret is shown only when it is generated');
  await sandbox.ok(['users', 'set-role', '--org', 'acme', '--email', 'bob@acme.test', '--role', 'saas_admin']);
  const again = await api(daemon.baseUrl, 'POST', '/webhook/register_webhook', bob, { webhook_url: 'https://hooks.example.com/four' });
  assert.equal(again.status, 200);

  // A user removed with the CLI loses access on the next request.
  await sandbox.ok(['users', 'remove', '--org', 'acme', '--email', 'bob@acme.test']);
  const gone = await api(daemon.baseUrl, 'GET', '/users/get_roles', bob);
  assert.equal(gone.status, 401);

  const exit = await daemon.stop('SIGTERM');
  assert.deepEqual(exit, { code: 0, signal: null });
  const messages = daemon.logRecords().map((r) => r.msg);
  assert.ok(messages.includes('shutting down'), `no "shutting down" record in ${JSON.stringify(messages)}`);
  assert.equal(messages.at(-1), 'stopped');
  assert.ok(!(daemon.stdout() + daemon.stderr()).includes(jwtSecret), 'the JWT secret must never be logged');
});

test('--json output of list and get commands; webhook set shows the secret once; token issue --json', async (t) => {
  const sandbox = new Sandbox(t);
  await sandbox.install();
  assert.deepEqual(JSON.parse(await sandbox.ok(['orgs', 'list', '--json'])), []);
  await sandbox.ok(['orgs', 'add', 'acme', '--name', 'Acme Corp']);
  await sandbox.ok(['orgs', 'add', 'globex']);
  await sandbox.ok(['users', 'add', '--org', 'acme', '--email', 'Ada@Acme.test', '--role', 'saas_admin']);

  const orgs = JSON.parse(await sandbox.ok(['orgs', 'list', '--json'])) as Array<Record<string, unknown>>;
  assert.deepEqual(
    orgs.map(({ id, name }) => ({ id, name })),
    [
      { id: 'acme', name: 'Acme Corp' },
      { id: 'globex', name: 'globex' },
    ],
  );
  for (const org of orgs) assert.match(String(org.created_at), ISO_TIME);

  const users = JSON.parse(await sandbox.ok(['users', 'list', '--org', 'acme', '--json'])) as Array<Record<string, unknown>>;
  assert.equal(users.length, 1);
  assert.deepEqual(Object.keys(users[0]!).sort(), ['created_at', 'email', 'role_name', 'updated_at']);
  assert.equal(users[0]!.email, 'Ada@Acme.test');
  assert.equal(users[0]!.role_name, 'saas_admin');
  assert.match(String(users[0]!.created_at), ISO_TIME);
  assert.deepEqual(JSON.parse(await sandbox.ok(['users', 'list', '--org', 'globex', '--json'])), []);

  const roles = JSON.parse(await sandbox.ok(['roles', 'list', '--json'])) as Array<Record<string, unknown>>;
  assert.deepEqual(roles, [
    { ...SEEDED_ROLES[0], permissions: ['roles:read', 'users:manage', 'webhook:read', 'webhook:manage', 'audit:read', 'api_keys:manage'], builtin: true },
    { ...SEEDED_ROLES[1], permissions: ['roles:read', 'webhook:read'], builtin: true },
  ]);
  await sandbox.ok(['roles', 'add', 'auditor', '--description', 'reads the webhook', '--permissions', 'webhook:read']);
  const withAuditor = JSON.parse(await sandbox.ok(['roles', 'list', '--json'])) as Array<Record<string, unknown>>;
  assert.deepEqual(withAuditor.find((r) => r.name === 'auditor'), { name: 'auditor', description: 'reads the webhook', permissions: ['webhook:read'], builtin: false });

  const set = await sandbox.ok(['webhook', 'set', '--org', 'acme', '--url', 'https://hooks.example.com/acme']);
  const secrets = set.match(/whsec_[A-Za-z0-9+/=]+/g) ?? [];
  assert.equal(secrets.length, 1, `webhook set must print the secret once:\n${set}`);
  const secret = secrets[0]!;
  assert.match(secret, WEBHOOK_SECRET);
  assert.equal(await sandbox.ok(['webhook', 'secret', '--org', 'acme']), `${secret}\n`);
  const replaced = await sandbox.ok(['webhook', 'set', '--org', 'acme', '--url', 'https://hooks.example.com/v2']);
  assert.doesNotMatch(replaced, /whsec_/, 'replacing the URL keeps the secret and does not show it again');
  assert.match(replaced, /https:\/\/hooks\.example\.com\/v2/);
  assert.equal(await sandbox.ok(['webhook', 'secret', '--org', 'acme']), `${secret}\n`);

  const webhook = JSON.parse(await sandbox.ok(['webhook', 'get', '--org', 'acme', '--json'])) as Record<string, unknown>;
  assert.deepEqual(Object.keys(webhook).sort(), ['active_hmac', 'client_certificate', 'created_at', 'headers', 'oauth2', 'rate_limit', 'status', 'updated_at', 'webhook_url']);
  assert.deepEqual(webhook.headers, {});
  assert.equal(webhook.webhook_url, 'https://hooks.example.com/v2');
  assert.equal(webhook.active_hmac, true);
  assert.equal(webhook.status, 'active');
  assert.match(String(webhook.created_at), ISO_TIME);
  assert.match(String(webhook.updated_at), ISO_TIME);
  assert.ok(!JSON.stringify(webhook).includes(secret));

  // E-mails are matched case-insensitively; the token carries the e-mail as registered.
  const notBefore = Math.floor(Date.now() / 1000);
  const issued = JSON.parse(await sandbox.ok(['token', 'issue', '--org', 'acme', '--email', 'ada@acme.TEST', '--ttl', '15m', '--json'])) as Record<string, unknown>;
  const notAfter = Math.ceil(Date.now() / 1000);
  assert.deepEqual(Object.keys(issued).sort(), ['expires_at', 'token']);
  assert.match(String(issued.expires_at), ISO_TIME);
  const claims = verifiedClaims(String(issued.token), readJwtSecret(sandbox));
  assert.equal(claims.sub, 'Ada@Acme.test');
  assert.equal(claims.org, 'acme');
  assert.equal(issued.expires_at, new Date((claims.exp as number) * 1000).toISOString());
  // --ttl 15m: exp is 900 s after the moment of issue, which lies between notBefore and notAfter.
  assert.equal(typeof claims.exp, 'number');
  assert.ok((claims.exp as number) >= notBefore + 900 && (claims.exp as number) <= notAfter + 900, `exp ${String(claims.exp)} is not 15 minutes after issue`);
});

test('usage errors exit with 2 and change nothing', async (t) => {
  const sandbox = new Sandbox(t);
  // An install, so that each mistake is what stops the command (not a missing install).
  await sandbox.install();
  const cases: Array<{ args: string[]; stderr: RegExp }> = [
    { args: ['orgs', 'list', '--bogus'], stderr: /unknown option '--bogus'/ },
    { args: ['users', 'add', '--org', 'acme', '--role', 'saas_admin'], stderr: /required option '--email <email>' not specified/ },
    { args: ['frobnicate'], stderr: /unknown command 'frobnicate'/ },
    { args: ['orgs', 'frob'], stderr: /unknown command 'frob'/ },
    { args: ['orgs', 'add'], stderr: /missing required argument 'id'/ },
    { args: ['serve', '--log-level', 'loud'], stderr: /'loud' is invalid/ },
  ];
  for (const { args, stderr } of cases) {
    const result = await sandbox.run(args);
    assert.equal(result.code, 2, `hookrelay ${args.join(' ')}: exit ${result.code}; stderr: ${result.stderr}`);
    assert.match(result.stderr, stderr);
    assert.equal(result.stdout, '', `hookrelay ${args.join(' ')} printed on stdout`);
  }
  // Errors hookrelay itself detects in an argument: one line.
  const ttl = await sandbox.run(['token', 'issue', '--org', 'acme', '--email', 'ada@acme.test', '--ttl', 'forever']);
  assert.equal(ttl.code, 2);
  assertOneErrorLine(ttl.stderr, /--ttl .*"forever"/);
  // Longer than the cap: the line names the cap and the setting that sets it.
  const long = await sandbox.run(['token', 'issue', '--org', 'acme', '--email', 'ada@acme.test', '--ttl', '48h']);
  assert.equal(long.code, 2);
  assertOneErrorLine(long.stderr, /the token lifetime 2d is longer than the cap, auth\.maxTokenLifetime \(1d\)/);
  const badEmail = await sandbox.run(['users', 'add', '--org', 'acme', '--email', 'not an e-mail', '--role', 'saas_admin']);
  assert.equal(badEmail.code, 2);
  assertOneErrorLine(badEmail.stderr, /e-?mail/i);

  // Rejected command lines must not have run anything, so no organization exists.
  assert.deepEqual(JSON.parse(await sandbox.ok(['orgs', 'list', '--json'])), []);
});

test('configuration errors exit with 2 and one line naming the key', async (t) => {
  const sandbox = new Sandbox(t);
  writeFileSync(join(sandbox.dir, 'unknown.json'), JSON.stringify({ stateDir: './var', bogus: true }));
  writeFileSync(join(sandbox.dir, 'nested.json'), JSON.stringify({ api: { lisen: '127.0.0.1:9000' } }));
  writeFileSync(join(sandbox.dir, 'type.json'), JSON.stringify({ api: { rateLimitPerMinute: 'lots' } }));
  writeFileSync(join(sandbox.dir, 'broken.json'), '{ "stateDir": ');

  const cases: Array<{ args: string[]; env?: Record<string, string>; stderr: RegExp }> = [
    { args: ['orgs', 'list', '--config', 'unknown.json'], stderr: /unknown key "bogus"/ },
    { args: ['serve', '--config', 'unknown.json'], stderr: /unknown key "bogus"/ },
    { args: ['orgs', 'list', '--config', 'nested.json'], stderr: /unknown key "api\.lisen"/ },
    { args: ['orgs', 'list', '--config', 'type.json'], stderr: /"api\.rateLimitPerMinute" must be an integer/ },
    { args: ['orgs', 'list', '--config', 'broken.json'], stderr: /broken\.json.*not valid JSON/ },
    { args: ['orgs', 'list', '--config', 'missing.json'], stderr: /missing\.json/ },
    { args: ['orgs', 'list'], env: { HOOKRELAY_CONFIG: 'unknown.json' }, stderr: /unknown key "bogus"/ },
    { args: ['orgs', 'list'], env: { HOOKRELAY_API_LISTEN: 'nonsense' }, stderr: /HOOKRELAY_API_LISTEN.*HOST:PORT.*"nonsense"/ },
    { args: ['serve'], env: { HOOKRELAY_API_LISTEN: 'nonsense' }, stderr: /HOOKRELAY_API_LISTEN.*HOST:PORT.*"nonsense"/ },
    { args: ['orgs', 'list'], env: { HOOKRELAY_API_RATE_LIMIT_BURST: 'many' }, stderr: /HOOKRELAY_API_RATE_LIMIT_BURST/ },
    { args: ['orgs', 'list'], env: { HOOKRELAY_LISTEN: '127.0.0.1:9000' }, stderr: /unknown environment variable HOOKRELAY_LISTEN/ },
    { args: ['serve', '--listen', 'nonsense'], stderr: /api\.listen.*HOST:PORT.*"nonsense"/ },
  ];
  for (const { args, env, stderr } of cases) {
    const what = `${Object.entries(env ?? {}).map(([k, v]) => `${k}=${v} `).join('')}hookrelay ${args.join(' ')}`;
    const result = await sandbox.run(args, env ? { env } : {});
    assert.equal(result.code, 2, `${what}: exit ${result.code}; stderr: ${result.stderr}`);
    assert.equal(result.stdout, '', `${what} printed on stdout`);
    assertOneErrorLine(result.stderr, stderr);
  }
  // Nothing started: no state directory was created by any of them.
  assert.equal(existsSync(sandbox.stateDir), false);
});

test("webhook set --header 'Name: value' (repeatable) sets the headers, shows credentials as set without their value, refuses bad ones with exit 2 naming the header, and set without --header removes them", async (t) => {
  const sandbox = new Sandbox(t);
  await sandbox.install();
  await sandbox.ok(['orgs', 'add', 'acme']);
  const token = 'tok_e2e-never-printed-31337';
  const url = 'https://hooks.example.com/acme';
  const set = await sandbox.ok(['webhook', 'set', '--org', 'acme', '--url', url, '--header', 'X-Environment: production', '--header', `Authorization:   Bearer ${token}  `]);
  assert.match(set, /^headers: X-Environment: production, Authorization: \(set; value hidden\)$/m);
  assert.doesNotMatch(set, new RegExp(token));
  const human = await sandbox.ok(['webhook', 'get', '--org', 'acme']);
  assert.match(human, /^headers: X-Environment: production, Authorization: \(set; value hidden\)$/m);
  const json = JSON.parse(await sandbox.ok(['webhook', 'get', '--org', 'acme', '--json'])) as { headers: unknown };
  assert.deepEqual(json.headers, { 'X-Environment': 'production', Authorization: null });
  for (const text of [human, JSON.stringify(json)]) assert.doesNotMatch(text, new RegExp(token));
  const stored = () => {
    const db = new Database(sandbox.databasePath, { readonly: true });
    try {
      return db.prepare('SELECT url, headers FROM webhooks').all();
    } finally {
      db.close();
    }
  };
  const before = stored();
  assert.deepEqual(before, [{ url, headers: JSON.stringify([['X-Environment', 'production'], ['Authorization', `Bearer ${token}`]]) }], 'the value is stored as given, its spaces trimmed');

  const refused: Array<[string[], RegExp]> = [
    [['--header', 'Host: evil.example'], /^hookrelay: headers must not set "Host": it is reserved \(the HTTP client sets it from the webhook URL\)$/],
    [['--header', `Webhook-Signature: v1,${token}`], /headers must not set "Webhook-Signature": it is reserved/],
    [['--header', 'X-Tenant: a', '--header', 'x-tenant: b'], /headers must not set "x-tenant" twice: header names are case-insensitive/],
    [['--header', `X-Token: ${token}\u0001`], /headers must give "X-Token" a value of printable ASCII characters/],
    [['--header', `Authorization Bearer ${token}`], /--header must be "Name: value", such as --header 'X-Environment: production'; one has no colon/],
    [['--header', 'X A: b'], /headers must not have "X A" as a name/],
  ];
  for (const [extra, stderr] of refused) {
    const result = await sandbox.run(['webhook', 'set', '--org', 'acme', '--url', 'https://hooks.example.com/other', ...extra]);
    assert.equal(result.code, 2, `${extra.join(' ')}: exit ${result.code}; ${result.stderr}`);
    assert.equal(result.stdout, '');
    assertOneErrorLine(result.stderr, stderr);
    assert.doesNotMatch(result.stderr, new RegExp(token), 'a refused value is not repeated');
    assert.deepEqual(stored(), before, `${extra.join(' ')} changed nothing`);
  }

  const cleared = await sandbox.ok(['webhook', 'set', '--org', 'acme', '--url', url]);
  assert.match(cleared, /^headers: none$/m);
  assert.match(cleared, /^removed headers \(not given again\): X-Environment, Authorization$/m);
  assert.deepEqual(stored(), [{ url, headers: null }]);
});

test('runtime errors exit with 1 and one line on stderr', async (t) => {
  const sandbox = new Sandbox(t);
  await sandbox.install();
  await sandbox.ok(['orgs', 'add', 'acme']);
  await sandbox.ok(['users', 'add', '--org', 'acme', '--email', 'ada@acme.test', '--role', 'saas_admin']);

  const cases: Array<{ args: string[]; stderr: RegExp }> = [
    { args: ['users', 'set-role', '--org', 'acme', '--email', 'nobody@acme.test', '--role', 'saas_viewer'], stderr: /nobody@acme\.test/ },
    { args: ['users', 'set-role', '--org', 'acme', '--email', 'ada@acme.test', '--role', 'no_such_role'], stderr: /no_such_role/ },
    // The last user who can manage users cannot be demoted.
    { args: ['users', 'set-role', '--org', 'acme', '--email', 'ada@acme.test', '--role', 'saas_viewer'], stderr: /last user/ },
    { args: ['users', 'add', '--org', 'acme', '--email', 'ADA@acme.test', '--role', 'saas_viewer'], stderr: /already exists/ },
    { args: ['users', 'add', '--org', 'initech', '--email', 'ada@initech.test', '--role', 'saas_admin'], stderr: /"initech" does not exist/ },
    { args: ['webhook', 'get', '--org', 'acme'], stderr: /"acme" has no webhook/ },
    { args: ['webhook', 'secret', '--org', 'acme'], stderr: /"acme" has no webhook/ },
    { args: ['token', 'issue', '--org', 'acme', '--email', 'nobody@acme.test'], stderr: /nobody@acme\.test/ },
    { args: ['orgs', 'add', 'acme'], stderr: /organization "acme" already exists/ },
  ];
  for (const { args, stderr } of cases) {
    const result = await sandbox.run(args);
    assert.equal(result.code, 1, `hookrelay ${args.join(' ')}: exit ${result.code}; stderr: ${result.stderr}`);
    assert.equal(result.stdout, '', `hookrelay ${args.join(' ')} printed on stdout`);
    assertOneErrorLine(result.stderr, stderr);
  }
  // The failed commands changed nothing.
  const users = JSON.parse(await sandbox.ok(['users', 'list', '--org', 'acme', '--json'])) as Array<{ email: string; role_name: string }>;
  assert.deepEqual(
    users.map((u) => [u.email, u.role_name]),
    [['ada@acme.test', 'saas_admin']],
  );
});

test('migrate creates the database on a fresh state directory; a database newer than the code is refused', async (t) => {
  const sandbox = new Sandbox(t);
  const first = await sandbox.run(['migrate']);
  assert.equal(first.code, 0, first.stderr);
  assert.equal(first.stderr, '');
  assert.ok(existsSync(sandbox.databasePath));
  assert.equal((statSync(sandbox.databasePath).mode & 0o777).toString(8), '600', 'the database holds secrets');
  const version = userVersion(sandbox.databasePath);
  assert.ok(version >= 1, `user_version is ${version}`);
  assert.ok(first.stdout.includes(sandbox.databasePath), first.stdout);
  assert.match(first.stdout, new RegExp(`(from 0 to ${version}|schema version ${version})\\n$`));
  assert.deepEqual(JSON.parse(await sandbox.ok(['roles', 'list', '--json'])).map((r: { name: string }) => r.name), ['saas_admin', 'saas_viewer']);

  const again = await sandbox.run(['migrate']);
  assert.equal(again.code, 0, again.stderr);
  assert.equal(again.stdout, `database ${sandbox.databasePath} is at schema version ${version}\n`);

  const future = version + 1;
  const db = new Database(sandbox.databasePath);
  db.pragma(`user_version = ${future}`);
  db.close();

  for (const args of [['migrate'], ['serve', '--listen', '127.0.0.1:0'], ['orgs', 'list']]) {
    const result = await sandbox.run(args);
    // Exit 2, as a configuration error: restarting (the unit's Restart=) would only repeat it.
    assert.equal(result.code, 2, `hookrelay ${args.join(' ')}: exit ${result.code}; stderr: ${result.stderr}`);
    assertOneErrorLine(result.stderr, new RegExp(`schema version ${future}, newer than this hookrelay \\S+ understands \\(schema ${version}\\); restore the backup taken before the upgrade`));
    assert.ok(!result.stdout.includes('admin API listening'));
  }
  assert.equal(userVersion(sandbox.databasePath), future, 'a refused database is left as it was');
});

test('serve on an address already in use exits with 1 and says so', async (t) => {
  const sandbox = new Sandbox(t);
  const blocker: Server = createServer();
  await new Promise<void>((resolve) => blocker.listen(0, '127.0.0.1', resolve));
  t.after(() => new Promise<void>((resolve) => blocker.close(() => resolve())));
  const { port } = blocker.address() as { port: number };

  const result = await sandbox.run(['serve', '--listen', `127.0.0.1:${port}`]);
  assert.equal(result.code, 1, `exit ${result.code}; stderr: ${result.stderr}`);
  assertOneErrorLine(result.stderr, new RegExp(`(EADDRINUSE|in use).*127\\.0\\.0\\.1:${port}|127\\.0\\.0\\.1:${port}.*(EADDRINUSE|in use)`));
  assert.ok(!result.stdout.includes('admin API listening'));
});

/**
 * Configuration: config/hookrelay.example.json against the schema, the precedence of the four
 * layers, path resolution, and the errors that stop start-up. Every call passes an explicit
 * `env` object, so nothing here depends on the environment the tests run in.
 */
import assert from 'node:assert/strict';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { test } from 'node:test';
import { defaultInstanceName, loadConfig, type LoadConfigOptions } from '../../src/config/load.ts';
import { envNameFor, schemaLeaves } from '../../src/config/schema.ts';
import { ErrorCode, HookrelayError } from '../../src/domain/errors.ts';
import { tempDir } from '../helpers/helpers.ts';

const EXAMPLE = fileURLToPath(new URL('../../config/hookrelay.example.json', import.meta.url));
const CONFIGURATION_MD = fileURLToPath(new URL('../../docs/configuration.md', import.meta.url));
const COMMENT = '$comment';

/** Writes `data` as a JSON config file in `dir`; returns its path. */
function writeConfig(dir: string, data: unknown, name = 'hookrelay.json'): string {
  const file = join(dir, name);
  writeFileSync(file, typeof data === 'string' ? data : JSON.stringify(data));
  return file;
}

/**
 * Asserts that loading fails with a HookrelayError `invalid_config` whose message contains every
 * string of `names` and none of `hidden`. Returns the message.
 */
function configError(options: LoadConfigOptions, names: readonly string[], hidden: readonly string[] = []): string {
  let message = '';
  assert.throws(
    () => loadConfig(options),
    (err: unknown) => {
      assert.ok(err instanceof HookrelayError, `expected a HookrelayError, got ${String(err)}`);
      assert.equal(err.code, ErrorCode.config);
      message = err.message;
      return true;
    },
  );
  for (const name of names) assert.ok(message.includes(name), `the message names ${name}: ${message}`);
  for (const secret of hidden) assert.ok(!message.includes(secret), `the message must not echo the secret: ${message}`);
  return message;
}

/** Every leaf of a parsed config file as dotted path -> value, `$comment` entries left out. */
function fileLeaves(node: Record<string, unknown>, prefix = ''): Map<string, unknown> {
  const out = new Map<string, unknown>();
  for (const [key, value] of Object.entries(node)) {
    if (key === COMMENT) continue;
    const path = prefix === '' ? key : `${prefix}.${key}`;
    if (value !== null && typeof value === 'object' && !Array.isArray(value)) {
      for (const [p, v] of fileLeaves(value as Record<string, unknown>, path)) out.set(p, v);
    } else out.set(path, value);
  }
  return out;
}

test('the example config file loads and yields exactly the defaults', (t) => {
  const cwd = tempDir(t);
  const fromExample = loadConfig({ configFile: EXAMPLE, env: {}, cwd });
  assert.deepEqual(fromExample, loadConfig({ env: {}, cwd }));
  // The defaults a newcomer relies on (README: npm start with no config file).
  assert.equal(fromExample.stateDir, join(cwd, 'var'));
  assert.equal(fromExample.database.path, join(cwd, 'var', 'hookrelay.db'));
  assert.equal(fromExample.api.listen, '127.0.0.1:8080');
  assert.equal(fromExample.api.bodyLimitBytes, 64 * 1024);
  assert.equal(fromExample.auth.algorithm, 'HS256');
  assert.equal(fromExample.auth.secret, null);
  assert.equal(fromExample.auth.tokenTtl, 3_600_000);
  // Also through HOOKRELAY_CONFIG.
  assert.deepEqual(loadConfig({ env: { HOOKRELAY_CONFIG: EXAMPLE }, cwd }), fromExample);
});

test('every schema key is in the example file, with its default, in the same nesting, documented by a $comment', () => {
  const example = JSON.parse(readFileSync(EXAMPLE, 'utf8')) as Record<string, unknown>;
  const inFile = fileLeaves(example);
  const leaves = schemaLeaves();
  assert.deepEqual([...inFile.keys()].sort(), leaves.map((l) => l.path).sort(), 'the example has every schema key and no other');
  for (const { path, leaf } of leaves) {
    assert.deepEqual(inFile.get(path), leaf.default, `${path} shows its default`);
    const parts = path.split('.');
    const key = parts.pop()!;
    let section: Record<string, unknown> = example;
    for (const part of parts) section = section[part] as Record<string, unknown>;
    const comment = section[COMMENT];
    assert.equal(typeof comment, 'string', `the object holding ${path} has a "$comment" string`);
    assert.match(comment as string, new RegExp(`(^|[^A-Za-z])${key}: \\S`), `the $comment next to ${path} documents it as "${key}: ..."`);
  }
});

test('precedence: defaults < config file < HOOKRELAY_* environment < CLI flags', (t) => {
  const cwd = tempDir(t);
  const file = writeConfig(cwd, {
    stateDir: 'from-file',
    api: { listen: '127.0.0.1:1001', rateLimitPerMinute: 100 },
    auth: { clockTolerance: '10s', tokenTtl: '15m' },
    log: { level: 'warn' },
  });
  const env = {
    HOOKRELAY_API_LISTEN: '127.0.0.1:2002',
    HOOKRELAY_API_RATE_LIMIT_PER_MINUTE: '200',
    HOOKRELAY_AUTH_TOKEN_TTL: '2h',
    HOOKRELAY_LOG_LEVEL: 'error',
  };
  const overrides = { 'api.listen': '127.0.0.1:3003', 'log.level': 'debug', stateDir: 'from-flag' };

  const defaults = loadConfig({ env: {}, cwd });
  const fileOnly = loadConfig({ configFile: file, env: {}, cwd });
  const fileEnv = loadConfig({ configFile: file, env, cwd });
  const all = loadConfig({ configFile: file, env, overrides, cwd });

  assert.equal(defaults.api.listen, '127.0.0.1:8080');
  assert.equal(fileOnly.api.listen, '127.0.0.1:1001');
  assert.equal(fileEnv.api.listen, '127.0.0.1:2002');
  assert.equal(all.api.listen, '127.0.0.1:3003');

  assert.equal(defaults.api.rateLimitPerMinute, 600);
  assert.equal(fileOnly.api.rateLimitPerMinute, 100);
  assert.equal(all.api.rateLimitPerMinute, 200, 'env beats the file; no flag for it');

  assert.equal(defaults.auth.clockTolerance, 30_000);
  assert.equal(all.auth.clockTolerance, 10_000, 'the file beats the default; nothing above it');

  assert.equal(fileOnly.auth.tokenTtl, 15 * 60_000);
  assert.equal(all.auth.tokenTtl, 2 * 3_600_000);

  assert.deepEqual([defaults.log.level, fileOnly.log.level, fileEnv.log.level, all.log.level], ['info', 'warn', 'error', 'debug']);
  assert.deepEqual([defaults.stateDir, fileEnv.stateDir, all.stateDir], [join(cwd, 'var'), join(cwd, 'from-file'), join(cwd, 'from-flag')]);

  // An override left undefined (a flag not given) does not mask the layers below it.
  assert.equal(loadConfig({ configFile: file, env, overrides: { 'api.listen': undefined }, cwd }).api.listen, '127.0.0.1:2002');
  // The file comes from --config, else from HOOKRELAY_CONFIG; --config wins.
  const other = writeConfig(cwd, { api: { listen: '127.0.0.1:4004' } }, 'other.json');
  assert.equal(loadConfig({ env: { HOOKRELAY_CONFIG: file }, cwd }).api.listen, '127.0.0.1:1001');
  assert.equal(loadConfig({ configFile: other, env: { HOOKRELAY_CONFIG: file }, cwd }).api.listen, '127.0.0.1:4004');
});

test('relative paths are resolved against the working directory, not the config file', (t) => {
  const cwd = tempDir(t);
  mkdirSync(join(cwd, 'etc'));
  const file = writeConfig(join(cwd, 'etc'), {
    stateDir: 'state',
    auth: { secretFile: 'secrets/jwt' },
    feed: { path: 'feeds/in.jsonl' },
  });
  const config = loadConfig({ configFile: 'etc/hookrelay.json', env: {}, cwd });
  assert.equal(config.stateDir, join(cwd, 'state'));
  assert.equal(config.database.path, join(cwd, 'state', 'hookrelay.db'), 'the database defaults to <stateDir>/hookrelay.db');
  assert.equal(config.auth.secretFile, join(cwd, 'secrets', 'jwt'));
  assert.equal(config.feed.path, join(cwd, 'feeds', 'in.jsonl'));
  const viaEnv = loadConfig({ configFile: file, env: { HOOKRELAY_DATABASE_PATH: 'db/relay.db', HOOKRELAY_FEED_PATH: '-' }, cwd });
  assert.equal(viaEnv.database.path, join(cwd, 'db', 'relay.db'));
  assert.equal(viaEnv.feed.path, '-', '"-" (standard input) is not a path');
});

test('an unknown key in the config file stops loading and names the key', (t) => {
  const cwd = tempDir(t);
  configError({ configFile: writeConfig(cwd, { listen: '127.0.0.1:8080' }), env: {}, cwd }, ['"listen"', 'stateDir', 'api']);
  configError({ configFile: writeConfig(cwd, { api: { lisen: '127.0.0.1:8080' } }), env: {}, cwd }, ['"api.lisen"', 'listen']);
  configError({ configFile: writeConfig(cwd, { auth: { secret: null, claims: {} } }), env: {}, cwd }, ['"auth.claims"']);
  // $comment is the one key ignored anywhere, whatever its value.
  assert.equal(loadConfig({ configFile: writeConfig(cwd, { [COMMENT]: 'x', api: { [COMMENT]: ['y'], listen: '[::1]:9' } }), env: {}, cwd }).api.listen, '[::1]:9');
});

test('an unknown HOOKRELAY_ environment variable stops loading and names it', (t) => {
  const cwd = tempDir(t);
  configError({ env: { HOOKRELAY_API_LISTN: '127.0.0.1:1' }, cwd }, ['HOOKRELAY_API_LISTN', 'HOOKRELAY_API_LISTEN']);
  configError({ env: { HOOKRELAY_SECRET: 'x' }, cwd }, ['HOOKRELAY_SECRET']);
  // Variables of other programs are none of hookrelay's business.
  assert.equal(loadConfig({ env: { PATH: '/usr/bin', HOOKRELAYX: '1', NODE_ENV: 'production' }, cwd }).api.listen, '127.0.0.1:8080');
});

test('a value of the wrong type or out of range stops loading and names the key and what is expected', (t) => {
  const cwd = tempDir(t);
  const file = (data: unknown) => ({ configFile: writeConfig(cwd, data), env: {}, cwd });
  configError(file({ api: { rateLimitPerMinute: 'fast' } }), ['"api.rateLimitPerMinute"', 'integer']);
  configError(file({ api: { bodyLimitBytes: 1.5 } }), ['"api.bodyLimitBytes"']);
  configError(file({ auth: { clockTolerance: '2m' } }), ['"auth.clockTolerance"', 'to 60000 ms']);
  configError(file({ auth: { clockToleranceSeconds: 120 } }), ['"auth.clockToleranceSeconds"', 'to 60000 ms']);
  configError(file({ database: { busyTimeoutMs: '5s' } }), ['"database.busyTimeoutMs"', 'whole number of milliseconds', 'database.busyTimeout']);
  configError(file({ auth: { algorithm: 'none' } }), ['"auth.algorithm"', 'HS256']);
  configError(file({ delivery: { allowHttp: 'yes' } }), ['"delivery.allowHttp"', 'true or false']);
  configError(file({ database: 'var/db.sqlite' }), ['"database"', 'object']);
  configError(file({ auth: { tokenTtl: 'forever' } }), ['"auth.tokenTtl"', 'duration']);
  configError(file({ api: { listen: 8080 } }), ['"api.listen"']);
  configError({ env: { HOOKRELAY_API_BODY_LIMIT_BYTES: 'lots' }, cwd }, ['HOOKRELAY_API_BODY_LIMIT_BYTES', 'api.bodyLimitBytes', 'integer']);
  configError({ env: { HOOKRELAY_DELIVERY_ALLOW_HTTP: 'maybe' }, cwd }, ['HOOKRELAY_DELIVERY_ALLOW_HTTP', 'true or false']);
  configError({ env: {}, overrides: { 'api.listen': 'localhost' }, cwd }, ['api.listen', 'HOST:PORT']);
  configError({ env: {}, overrides: { 'log.level': 'loud' }, cwd }, ['log.level']);
  // Keys that only make sense together.
  configError({ env: { HOOKRELAY_AUTH_ALGORITHM: 'RS256' }, cwd }, ['auth.publicKeyFile']);
  // The file itself.
  configError({ configFile: join(cwd, 'missing.json'), env: {}, cwd }, ['missing.json']);
  configError({ configFile: writeConfig(cwd, '{ "api": '), env: {}, cwd }, ['not valid JSON']);
  configError({ configFile: writeConfig(cwd, '[]'), env: {}, cwd }, ['must be a JSON object']);
});

test('durations are written one way; a key renamed for it is still read under its old name, in its old unit, and reported', (t) => {
  const cwd = tempDir(t);
  const defaults = loadConfig({ env: {}, cwd });
  assert.deepEqual([defaults.database.busyTimeout, defaults.auth.clockTolerance, defaults.feed.pollInterval], [5000, 30_000, 1000]);
  assert.deepEqual(defaults.notices, []);
  const renamed = loadConfig({ configFile: writeConfig(cwd, { database: { busyTimeoutMs: 250 }, auth: { clockToleranceSeconds: 5 }, feed: { pollIntervalMs: 20 } }), env: {}, cwd });
  assert.deepEqual([renamed.database.busyTimeout, renamed.auth.clockTolerance, renamed.feed.pollInterval], [250, 5000, 20]);
  assert.equal(renamed.notices.length, 3);
  assert.match(renamed.notices[0]!, /database\.busyTimeoutMs is now database\.busyTimeout, a duration such as "5s"/);
  // The new name, given beside the old one, wins, wherever the two stand in the file.
  const both = loadConfig({ configFile: writeConfig(cwd, { feed: { pollInterval: '2s', pollIntervalMs: 20 } }), env: {}, cwd });
  assert.equal(both.feed.pollInterval, 2000);
  // The old environment variable and option names too.
  const env = loadConfig({ env: { HOOKRELAY_DATABASE_BUSY_TIMEOUT_MS: '300', HOOKRELAY_AUTH_CLOCK_TOLERANCE: '1s' }, overrides: { 'feed.pollIntervalMs': '40' }, cwd });
  assert.deepEqual([env.database.busyTimeout, env.auth.clockTolerance, env.feed.pollInterval], [300, 1000, 40]);
  assert.equal(env.notices.length, 2);
  assert.match(env.notices[0]!, /HOOKRELAY_DATABASE_BUSY_TIMEOUT_MS.*database\.busyTimeout \(HOOKRELAY_DATABASE_BUSY_TIMEOUT\)/);
});

test('a secret value is never echoed in a configuration error', (t) => {
  const cwd = tempDir(t);
  const secret = 'S3cr3t-value-that-must-stay-hidden-0123456789';
  const short = 'S3cr3t-short';
  configError({ configFile: writeConfig(cwd, { auth: { secret: [secret] } }), env: {}, cwd }, ['"auth.secret"'], [secret, 'S3cr3t']);
  configError({ configFile: writeConfig(cwd, { auth: { secret: short } }), env: {}, cwd }, ['auth.secret', '32 bytes'], [short, 'S3cr3t']);
  configError({ env: { HOOKRELAY_AUTH_SECRET: short }, cwd }, ['auth.secret'], [short, 'S3cr3t']);
  configError({ configFile: writeConfig(cwd, { auth: { secrett: secret } }), env: {}, cwd }, ['"auth.secrett"'], [secret, 'S3cr3t']);
  configError({ env: { HOOKRELAY_AUTH_SECRETT: secret }, cwd }, ['HOOKRELAY_AUTH_SECRETT'], [secret, 'S3cr3t']);
  configError({ configFile: writeConfig(cwd, { auth: { secret, publicKeyFile: 'key.pem' } }), env: {}, cwd }, ['auth.publicKeyFile'], [secret, 'S3cr3t']);
});

test('a config file that is not valid JSON does not echo the text around the error (it may hold a secret)', (t) => {
  const cwd = tempDir(t);
  const file = writeConfig(cwd, '{"auth": {"secret": S3cr3t-value-that-must-stay-hidden-0123456789}}');
  configError({ configFile: file, env: {}, cwd }, ['not valid JSON', 'line 1, column 21'], ['S3cr3t']);
});

test('docs/configuration.md lists every key with its environment variable', () => {
  const doc = readFileSync(CONFIGURATION_MD, 'utf8');
  for (const { path } of schemaLeaves()) {
    assert.ok(doc.includes(`\`${path}\``), `docs/configuration.md documents ${path}`);
    assert.ok(doc.includes(`\`${envNameFor(path)}\``), `docs/configuration.md names ${envNameFor(path)}`);
  }
});

test('database.url selects PostgreSQL, from the file or HOOKRELAY_DATABASE_URL; a wrong one is refused without showing it', (t) => {
  const cwd = tempDir(t);
  const defaults = loadConfig({ env: {}, cwd });
  assert.equal(defaults.database.url, null);
  assert.equal(defaults.database.poolSize, 10);
  const url = 'postgres://hookrelay:s3cret-password@db.example:5432/hookrelay?sslmode=verify-full';
  assert.equal(loadConfig({ env: { HOOKRELAY_DATABASE_URL: url }, cwd }).database.url, url);
  assert.equal(loadConfig({ configFile: writeConfig(cwd, { database: { url, poolSize: 4 } }), env: {}, cwd }).database.poolSize, 4);
  const wrong = 'mysql://root:hunter2-password@db/hookrelay';
  assert.throws(
    () => loadConfig({ env: { HOOKRELAY_DATABASE_URL: wrong }, cwd }),
    (err: unknown) =>
      err instanceof HookrelayError &&
      err.code === ErrorCode.config &&
      /HOOKRELAY_DATABASE_URL \(database\.url\) must be a PostgreSQL URL/.test(err.message) &&
      !err.message.includes('hunter2'),
  );
  assert.throws(() => loadConfig({ env: { HOOKRELAY_DATABASE_POOL_SIZE: '1' }, cwd }), /database\.pool_size|database\.poolSize/i);
});

test("instance.name defaults to the host name's first label, and must be a plain name", (t) => {
  const cwd = tempDir(t);
  assert.equal(defaultInstanceName('relay-1.dc2.example.com'), 'relay-1');
  assert.equal(defaultInstanceName('_weird host'), 'weird-host');
  assert.equal(defaultInstanceName(''), 'hookrelay');
  assert.equal(loadConfig({ env: {}, cwd }).instance.name, defaultInstanceName());
  assert.equal(loadConfig({ env: { HOOKRELAY_INSTANCE_NAME: 'relay-b' }, cwd }).instance.name, 'relay-b');
  for (const bad of ['two words', '-leading', 'x'.repeat(64)]) {
    assert.throws(() => loadConfig({ env: { HOOKRELAY_INSTANCE_NAME: bad }, cwd }), /instance\.name\) must be letters, digits/);
  }
});

test('delivery.proxy and delivery.organizationProxies: checked URLs, refused without ever quoting them (they may hold a password)', (t) => {
  const cwd = tempDir(t);
  const password = 'Pr0xyPassw0rd-never-shown';
  const ok = loadConfig({ env: { HOOKRELAY_DELIVERY_PROXY: `http://relay:${password}@proxy.internal:3128`, HOOKRELAY_DELIVERY_ORGANIZATION_PROXIES: 'acme=direct,globex=http://10.1.2.3:8080' }, cwd });
  assert.equal(ok.delivery.proxy, `http://relay:${password}@proxy.internal:3128`);
  assert.equal(ok.delivery.proxyTarget, 'address');
  assert.deepEqual(ok.delivery.organizationProxies, ['acme=direct', 'globex=http://10.1.2.3:8080']);
  assert.equal(loadConfig({ env: { HOOKRELAY_DELIVERY_PROXY_TARGET: 'name' }, cwd }).delivery.proxyTarget, 'name');
  configError({ env: { HOOKRELAY_DELIVERY_PROXY_TARGET: 'host' }, cwd }, ['HOOKRELAY_DELIVERY_PROXY_TARGET', 'one of address, name']);
  for (const [value, why] of [
    [`https://relay:${password}@proxy.internal:3128`, 'must be an http:// URL'],
    [`socks5://relay:${password}@proxy.internal:1080`, 'must be an http:// URL'],
    [`http://relay:${password}@proxy.internal:3128/path`, 'without a path, query or fragment'],
    [`http://relay:${password}@proxy.internal:3128/?x=1`, 'without a path, query or fragment'],
    [`http://relay:${password}%zz@proxy.internal:3128`, 'percent-encode'],
    [`http://relay:${password}@`, 'http://'],
  ] as const) {
    configError({ env: { HOOKRELAY_DELIVERY_PROXY: value }, cwd }, ['delivery.proxy', why], [password]);
  }
  configError({ env: { HOOKRELAY_DELIVERY_ORGANIZATION_PROXIES: `acme=ftp://u:${password}@x` }, cwd }, ['delivery.organizationProxies', '"acme"', 'http://'], [password]);
  configError({ env: { HOOKRELAY_DELIVERY_ORGANIZATION_PROXIES: `http://u:${password}@x:1` }, cwd }, ['delivery.organizationProxies', '"ORG=URL"'], [password]);
  configError({ env: { HOOKRELAY_DELIVERY_ORGANIZATION_PROXIES: 'acme=direct,acme=http://x:1' }, cwd }, ['two entries for "acme"']);
  const file = writeConfig(cwd, { delivery: { proxy: 42 } });
  configError({ configFile: file, env: {}, cwd }, ['delivery.proxy', '(value hidden)']);
});

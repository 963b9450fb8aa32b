import { readFileSync } from 'node:fs';
import { hostname } from 'node:os';
import { resolve, join } from 'node:path';
import { parseOrganizationNetwork } from '../domain/address-policy.ts';
import { parseOrganizationProxy, parseProxyUrl } from '../domain/egress-proxy.ts';
import { parseCidr } from '../domain/cidr.ts';
import { type ConsoleOidcConfig, consoleOidcIncoherence } from './console-schema.ts';
import { type ProviderConfig, providerIncoherence } from './provider-schema.ts';
import { parseOrganizationCertificate } from './receiver-auth-schema.ts';
import { ErrorCode, HookrelayError } from '../domain/errors.ts';
import { isLoopbackHost, parseListen } from '../domain/listen.ts';
import { checkOrgId } from '../domain/validation.ts';
import { otelEnvironment, otelExpectation, type TracingConfig } from './tracing-schema.ts';
import { CONFIG_SCHEMA, coerceLeaf, envNameFor, isLeaf, RENAMED_KEYS, schemaLeaves, type Leaf, type SchemaNode } from './schema.ts';

/** The resolved configuration. Durations are milliseconds; paths are absolute. */
export interface Config {
  readonly stateDir: string;
  readonly database: { readonly path: string; readonly busyTimeout: number; readonly url: string | null; readonly poolSize: number; readonly preUpgradeBackups: number };
  /** The name is resolved: the host name when not set. */
  readonly instance: { readonly name: string };
  readonly api: {
    readonly listen: string;
    readonly bodyLimitBytes: number;
    readonly rateLimitPerMinute: number;
    readonly rateLimitBurst: number;
    readonly allowedHosts: readonly string[];
  };
  readonly auth: {
    readonly algorithm: 'HS256' | 'RS256' | 'ES256' | 'EdDSA';
    readonly secret: string | null;
    readonly secretFile: string | null;
    readonly publicKeyFile: string | null;
    readonly privateKeyFile: string | null;
    readonly issuer: string | null;
    readonly audience: string | null;
    readonly clockTolerance: number;
    readonly emailClaim: string;
    readonly organizationClaim: string;
    readonly tokenTtl: number;
    readonly maxTokenLifetime: number;
    readonly provider: ProviderConfig;
  };
  readonly feed: {
    /** Absolute path of the feed file, or "-" for standard input. */
    readonly path: string;
    readonly startPosition: 'start' | 'end';
    readonly maxLineBytes: number;
    readonly batchLines: number;
    readonly batchBytes: number;
    readonly pollInterval: number;
    readonly followSymlinks: boolean;
  };
  readonly console: {
    readonly publicUrl: string | null;
    readonly oidc: ConsoleOidcConfig;
  };
  /** OpenTelemetry traces (config/tracing-schema.ts); on when enabled and an endpoint is set (see tracingOn). */
  readonly tracing: TracingConfig;
  readonly delivery: {
    readonly allowHttp: boolean;
    readonly allowNetworks: readonly string[];
    readonly organizationNetworks: readonly string[];
    readonly storeInternalResponses: readonly string[];
    readonly caFile: string | null;
    /** The egress proxy URL (may hold credentials: see domain/egress-proxy.ts), or null. */
    readonly proxy: string | null;
    readonly proxyTarget: 'address' | 'name';
    readonly organizationProxies: readonly string[];
    readonly timeout: number;
    readonly retrySchedule: readonly number[];
    readonly jitterPercent: number;
    readonly maxRetryAfter: number;
    readonly concurrency: number;
    readonly perWebhookConcurrency: number;
    readonly failingAfterFailures: number;
    readonly disableAfter: number;
    readonly secretRotationGrace: number;
    readonly pollInterval: number;
    /** ms; PostgreSQL only (see createIngestService). */
    readonly reorderWindow: number;
    /** ms; PostgreSQL only, 0: off (see orderHoldUntil). */
    readonly orderHold: number;
    readonly groupCommitInterval: number;
    /** Absolute path of the key-encryption key file; null: <stateDir>/credential-key (services/credential-key.ts). */
    readonly credentialKeyFile: string | null;
    /** The operator's client certificate for every organization without one (absolute paths). */
    readonly clientCertificate: { readonly certFile: string | null; readonly keyFile: string | null };
    /** "ORG=FILE" entries, FILE absolute. */
    readonly organizationClientCertificates: readonly string[];
    /** ms; 0: no warning. */
    readonly clientCertificateExpiryWarning: number;
  };
  readonly retention: {
    readonly enabled: boolean;
    readonly deliveredEvents: number;
    readonly quarantinedLines: number;
    /** ms: the audit trail's entries are kept this long. */
    readonly auditEntries: number;
    readonly interval: number;
    readonly batchSize: number;
  };
  readonly log: {
    readonly level: string;
    readonly syslogPrefix: 'auto' | 'on' | 'off';
    /** JOURNAL_STREAM (`device:inode` of the journal's stream when systemd started us), or null. */
    readonly journalStream: string | null;
  };
  readonly metrics: {
    readonly enabled: boolean;
    /** A listener of its own for /metrics, or null for the admin API's. */
    readonly listen: string | null;
    readonly token: string | null;
    readonly tokenFile: string | null;
    readonly allowUnauthenticated: boolean;
    /** ms */
    readonly refreshInterval: number;
    readonly perOrganization: boolean;
  };
  /** What loading noticed and the daemon logs at start: keys given under a name they have been renamed from (RENAMED_KEYS). */
  readonly notices: readonly string[];
}

/** Values given on the command line, keyed by dotted config path (`api.listen`). */
export type ConfigOverrides = Readonly<Record<string, string | undefined>>;

export interface LoadConfigOptions {
  /** Path of the config file (`--config`); falls back to HOOKRELAY_CONFIG. */
  readonly configFile?: string | undefined;
  readonly overrides?: ConfigOverrides;
  readonly env?: NodeJS.ProcessEnv;
  readonly cwd?: string;
}

const SECRET_PATHS = new Set(['auth.secret', 'metrics.token', 'database.url', 'delivery.proxy', 'delivery.organizationProxies', 'tracing.headers']);
const PATH_KEYS = [
  'stateDir', 'database.path', 'auth.secretFile', 'auth.publicKeyFile', 'auth.privateKeyFile', 'auth.provider.caFile', 'delivery.caFile', 'metrics.tokenFile', 'tracing.caFile',
  'delivery.credentialKeyFile', 'delivery.clientCertificate.certFile', 'delivery.clientCertificate.keyFile',
];
/** Keys in a config file that document it and are otherwise ignored. */
const COMMENT_KEY = '$comment';

/**
 * Where JSON.parse failed, as "at line L, column C". V8's own message quotes the text around
 * the fault, which may be a secret, so only the position is reported. When the message has no
 * position, the fault is the first character after which no continuation can be valid JSON:
 * the shortest prefix whose error is not "unexpected end".
 */
function jsonErrorPlace(text: string, err: unknown): string {
  const given = /position (\d+)/.exec((err as Error).message);
  let offset: number;
  if (given) {
    offset = Number(given[1]);
  } else {
    // True when text[0..k] already has a fault no continuation could repair (as opposed to
    // merely ending early: end of input, an open string, a position at the very end).
    const broken = (k: number) => {
      try {
        JSON.parse(text.slice(0, k + 1));
        return false;
      } catch (e) {
        const message = (e as Error).message;
        if (/end of JSON input|Unterminated string/.test(message)) return false;
        const at = /position (\d+)/.exec(message);
        return at === null || Number(at[1]) <= k;
      }
    };
    let lo = 0;
    let hi = text.length;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (broken(mid)) hi = mid;
      else lo = mid + 1;
    }
    offset = lo;
  }
  const before = text.slice(0, offset);
  const line = before.split('\n').length;
  const column = before.length - before.lastIndexOf('\n');
  return `at line ${line}, column ${column}`;
}

function configError(message: string): HookrelayError {
  return new HookrelayError(ErrorCode.config, message);
}

function describe(path: string, raw: unknown): string {
  if (SECRET_PATHS.has(path)) return '(value hidden)';
  const text = JSON.stringify(raw);
  return text === undefined ? String(raw) : text.length > 80 ? `${text.slice(0, 77)}...` : text;
}

function setPath(target: Record<string, unknown>, path: string, value: unknown): void {
  const parts = path.split('.');
  let node = target;
  for (const part of parts.slice(0, -1)) {
    node[part] ??= {};
    node = node[part] as Record<string, unknown>;
  }
  node[parts[parts.length - 1]!] = value;
}

/**
 * A value given under a key's old name (RENAMED_KEYS): a whole number in the old key's unit,
 * as a number or (environment, flags) its text; checked as the new key's duration.
 */
function renamedValue(leaf: Leaf, unitMs: number, raw: unknown): ReturnType<typeof coerceLeaf> {
  const n = typeof raw === 'string' && /^\s*\d+\s*$/.test(raw) ? Number(raw) : raw;
  if (typeof n !== 'number' || !Number.isInteger(n)) return { ok: false, expected: `a whole number of ${unitMs === 1 ? 'milliseconds' : 'seconds'} under this old name (or the new name with a duration such as "5s")` };
  return coerceLeaf(leaf, n * unitMs, false);
}

function renamedNotice(where: string, from: string, to: string): string {
  return `${where}: ${from} is now ${to}, a duration such as "5s" (the old name is still read, in its old unit); rename it`;
}

/** Walks a parsed config file, rejecting unknown keys and wrong types with the key's full path. */
interface FileRead {
  readonly name: string;
  /** Keys the file gives under their own name. */
  readonly given: Set<string>;
  /** Values the file gives under a renamed key's old name, by the new name (the new name wins when both are given). */
  readonly renamed: Map<string, unknown>;
}

function readFileLayer(file: FileRead, data: unknown, schema: SchemaNode, prefix: string, into: Map<string, unknown>, notices: string[]): void {
  if (typeof data !== 'object' || data === null || Array.isArray(data)) {
    throw configError(`${file.name}: ${prefix === '' ? 'the file' : `key "${prefix}"`} must be a JSON object`);
  }
  for (const [key, raw] of Object.entries(data)) {
    if (key === COMMENT_KEY) continue;
    const path = prefix === '' ? key : `${prefix}.${key}`;
    const node = schema[key];
    const renamed = RENAMED_KEYS.get(path);
    if (node === undefined && renamed !== undefined) {
      const leaf = schemaLeaves().find((l) => l.path === renamed.to)?.leaf as Leaf;
      const result = renamedValue(leaf, renamed.unitMs, raw);
      if (!result.ok) throw configError(`${file.name}: key "${path}" must be ${result.expected}; got ${describe(path, raw)}`);
      file.renamed.set(renamed.to, result.value);
      notices.push(renamedNotice(file.name, path, renamed.to));
      continue;
    }
    if (node === undefined) {
      const known = Object.keys(schema).join(', ');
      throw configError(`${file.name}: unknown key "${path}"; expected one of: ${known}`);
    }
    if (isLeaf(node)) {
      const result = coerceLeaf(node, raw, false);
      if (!result.ok) throw configError(`${file.name}: key "${path}" must be ${result.expected}; got ${describe(path, raw)}`);
      into.set(path, result.value);
      file.given.add(path);
    } else {
      readFileLayer(file, raw, node, path, into, notices);
    }
  }
}

/**
 * Resolves the configuration: defaults < config file < OTEL_* environment (the tracing keys
 * only: config/tracing-schema.ts) < HOOKRELAY_* environment < CLI flags.
 * Throws a HookrelayError with code `invalid_config` naming the offending key.
 */
export function loadConfig(options: LoadConfigOptions = {}): Config {
  const env = options.env ?? process.env;
  const cwd = options.cwd ?? process.cwd();
  const leaves = schemaLeaves();
  const values = new Map<string, unknown>();
  const notices: string[] = [];

  for (const { path, leaf } of leaves) {
    const result = coerceLeaf(leaf, leaf.default, false);
    if (!result.ok) throw new Error(`schema default of ${path} is invalid`);
    values.set(path, result.value);
  }

  const configFile = options.configFile ?? (env.HOOKRELAY_CONFIG === '' ? undefined : env.HOOKRELAY_CONFIG);
  if (configFile !== undefined) {
    const file = resolve(cwd, configFile);
    let text: string;
    try {
      text = readFileSync(file, 'utf8');
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      if (code === 'ENOENT') throw configError(`config file ${file} does not exist; check the path given by --config or HOOKRELAY_CONFIG, or leave both out to run on the defaults (docs/configuration.md)`);
      throw configError(`cannot read config file ${file}: ${code ?? String(err)}`);
    }
    let data: unknown;
    try {
      data = JSON.parse(text);
    } catch (err) {
      throw configError(`config file ${file} is not valid JSON ${jsonErrorPlace(text, err)}; check the syntax there`);
    }
    const read: FileRead = { name: file, given: new Set(), renamed: new Map() };
    readFileLayer(read, data, CONFIG_SCHEMA, '', values, notices);
    for (const [path, value] of read.renamed) if (!read.given.has(path)) values.set(path, value);
  }

  const envNames = new Map(leaves.map(({ path, leaf }) => [envNameFor(path), { path, leaf }]));
  const byPath = new Map(leaves.map((l) => [l.path, l.leaf]));
  // The standard OpenTelemetry variables: above the file, as every variable is, and below
  // hookrelay's own (docs/observability.md).
  for (const { variable, path, raw, text } of otelEnvironment(env)) {
    const result = coerceLeaf(byPath.get(path)!, raw, true);
    if (!result.ok) throw configError(`environment variable ${variable} (${path}) must be ${otelExpectation(variable, result.expected)}; got ${describe(path, text)}`);
    values.set(path, result.value);
  }
  const oldEnvNames = new Map([...RENAMED_KEYS].map(([from, r]) => [envNameFor(from), { from, ...r }]));
  for (const [name, raw] of Object.entries(env)) {
    if (!name.startsWith('HOOKRELAY_') || name === 'HOOKRELAY_CONFIG' || raw === undefined) continue;
    const old = oldEnvNames.get(name);
    if (old !== undefined) {
      const result = renamedValue(byPath.get(old.to)!, old.unitMs, raw);
      if (!result.ok) throw configError(`environment variable ${name} (${old.from}) must be ${result.expected}; got ${describe(old.from, raw)}`);
      if (env[envNameFor(old.to)] === undefined) values.set(old.to, result.value);
      notices.push(renamedNotice(`environment variable ${name}`, old.from, `${old.to} (${envNameFor(old.to)})`));
      continue;
    }
    const entry = envNames.get(name);
    if (entry === undefined) {
      const near = closestName(name, [...envNames.keys(), 'HOOKRELAY_CONFIG']);
      throw configError(`unknown environment variable ${name}; ${near === null ? '' : `did you mean ${near}? `}docs/configuration.md lists the ones hookrelay reads (unset it, or rename it)`);
    }
    const result = coerceLeaf(entry.leaf, raw, true);
    if (!result.ok) throw configError(`environment variable ${name} (${entry.path}) must be ${result.expected}; got ${describe(entry.path, raw)}`);
    values.set(entry.path, result.value);
  }

  for (const [path, raw] of Object.entries(options.overrides ?? {})) {
    if (raw === undefined) continue;
    const renamed = RENAMED_KEYS.get(path);
    if (renamed !== undefined) {
      const result = renamedValue(byPath.get(renamed.to)!, renamed.unitMs, raw);
      if (!result.ok) throw configError(`option for ${path} must be ${result.expected}; got ${describe(path, raw)}`);
      if (options.overrides?.[renamed.to] === undefined) values.set(renamed.to, result.value);
      notices.push(renamedNotice('an option', path, renamed.to));
      continue;
    }
    const leaf = byPath.get(path);
    if (leaf === undefined) throw new Error(`unknown override ${path}`);
    const result = coerceLeaf(leaf, raw, true);
    if (!result.ok) throw configError(`option for ${path} must be ${result.expected}; got ${describe(path, raw)}`);
    values.set(path, result.value);
  }

  for (const path of PATH_KEYS) {
    const value = values.get(path);
    if (typeof value === 'string') values.set(path, resolve(cwd, value));
  }
  if (values.get('database.path') === null) {
    values.set('database.path', join(values.get('stateDir') as string, 'hookrelay.db'));
  }
  if (values.get('instance.name') === null) values.set('instance.name', defaultInstanceName());
  values.set('delivery.organizationClientCertificates', resolvedCertificateEntries(values.get('delivery.organizationClientCertificates') as string[], cwd));
  const feedPath = values.get('feed.path');
  if (feedPath === null) values.set('feed.path', join(values.get('stateDir') as string, 'feed.jsonl'));
  else if (feedPath !== '-') values.set('feed.path', resolve(cwd, feedPath as string));

  // Not a key: what systemd tells its services about their standard output (see log.ts).
  values.set('log.journalStream', env.JOURNAL_STREAM === undefined || env.JOURNAL_STREAM === '' ? null : env.JOURNAL_STREAM);

  const config: Record<string, unknown> = { notices };
  for (const [path, value] of values) setPath(config, path, value);
  checkCoherence(config as unknown as Config);
  return config as unknown as Config;
}

/** Whether the daemon exports traces: tracing.enabled, and an endpoint to export to. */
export function tracingOn(config: Pick<Config, 'tracing'>): boolean {
  return config.tracing.enabled && (config.tracing.endpoint !== null || config.tracing.tracesEndpoint !== null);
}

/**
 * One environment variable that a command was told to read by name (`db copy --to-env NAME`):
 * the configuration stays the only reader of the environment.
 */
export function environmentVariable(name: string, env: NodeJS.ProcessEnv = process.env): string | undefined {
  return env[name];
}

/**
 * The host name, as an instance name: its first label (a host's short name), with what the
 * name may not hold replaced by "-"; "hookrelay" if nothing is left.
 */
export function defaultInstanceName(host: string = hostname()): string {
  const name = (host.split('.')[0] ?? '').replace(/[^A-Za-z0-9._-]/g, '-').replace(/^[^A-Za-z0-9]+/, '').slice(0, 63);
  return name === '' ? 'hookrelay' : name;
}

/** delivery.organizationClientCertificates with each file made absolute; an entry that is not "ORG=FILE" is refused. */
function resolvedCertificateEntries(entries: readonly string[], cwd: string): string[] {
  const seen = new Set<string>();
  return entries.map((entry) => {
    const parsed = parseOrganizationCertificate(entry);
    if (typeof parsed === 'string') throw configError(`key "delivery.organizationClientCertificates" ${parsed}`);
    if (seen.has(parsed.orgId)) throw configError(`key "delivery.organizationClientCertificates" has two entries for "${parsed.orgId}"; keep one`);
    seen.add(parsed.orgId);
    return `${parsed.orgId}=${resolve(cwd, parsed.file)}`;
  });
}

/** An entry of api.allowedHosts: a name or an IP address (IPv6 in brackets), with an optional port. */
const ALLOWED_HOST = /^(\[[0-9a-fA-F:.]+\]|[A-Za-z0-9][A-Za-z0-9.-]*)(:\d{1,5})?$/;

function checkCoherence(config: Config): void {
  for (const cidr of config.delivery.allowNetworks) {
    if (parseCidr(cidr) === null) throw configError(`key "delivery.allowNetworks" must list CIDRs such as "10.0.0.0/8" or "::1/128"; got ${JSON.stringify(cidr)}`);
  }
  for (const entry of config.delivery.organizationNetworks) {
    const grant = parseOrganizationNetwork(entry);
    if (grant === null) throw configError(`key "delivery.organizationNetworks" must list "ORG=CIDR" entries such as "acme=10.20.0.0/16"; got ${JSON.stringify(entry)}`);
  }
  // The proxies' URLs may hold passwords: the errors say what is wrong, never quote them.
  if (config.delivery.proxy !== null) {
    const proxy = parseProxyUrl(config.delivery.proxy);
    if (typeof proxy === 'string') throw configError(`key "delivery.proxy" ${proxy}`);
  }
  const proxied = new Set<string>();
  for (const entry of config.delivery.organizationProxies) {
    const parsed = parseOrganizationProxy(entry);
    if (typeof parsed === 'string') throw configError(`key "delivery.organizationProxies" ${parsed}`);
    if (proxied.has(parsed.orgId)) throw configError(`key "delivery.organizationProxies" has two entries for "${parsed.orgId}"; keep one`);
    proxied.add(parsed.orgId);
  }
  for (const host of config.api.allowedHosts) {
    if (!ALLOWED_HOST.test(host)) throw configError(`key "api.allowedHosts" must list host names or addresses, each with an optional port, such as "relay.example.com" or "[::1]:8080"; got ${JSON.stringify(host)}`);
  }
  for (const orgId of config.delivery.storeInternalResponses) {
    if (checkOrgId(orgId) !== null) throw configError(`key "delivery.storeInternalResponses" must list organization ids; got ${JSON.stringify(orgId)}`);
  }
  if (config.delivery.clientCertificate.keyFile !== null && config.delivery.clientCertificate.certFile === null) {
    throw configError('key "delivery.clientCertificate.keyFile" is set but "delivery.clientCertificate.certFile" is not: give the certificate too');
  }
  if (config.auth.tokenTtl > config.auth.maxTokenLifetime) {
    throw configError('key "auth.tokenTtl" must not exceed "auth.maxTokenLifetime" (tokens issued by default would be refused)');
  }
  if (config.tracing.maxExportBatchSize > config.tracing.maxQueueSize) {
    throw configError('key "tracing.maxExportBatchSize" must not exceed "tracing.maxQueueSize"');
  }
  if (config.delivery.perWebhookConcurrency > config.delivery.concurrency) {
    throw configError('key "delivery.perWebhookConcurrency" must not exceed "delivery.concurrency"');
  }
  const { metrics } = config;
  if (metrics.enabled && metrics.listen !== null) {
    const { host, port } = parseListen(metrics.listen);
    if (metrics.listen === config.api.listen && port !== 0) {
      throw configError('key "metrics.listen" is the address of the admin API; set it to null to serve /metrics on the admin API, or choose another port');
    }
    if (!isLoopbackHost(host) && metrics.token === null && metrics.tokenFile === null && !metrics.allowUnauthenticated) {
      throw configError(
        `key "metrics.listen" is ${metrics.listen}, not a loopback address, and no metrics token is set: /metrics would be open to the network. ` +
          'Set metrics.tokenFile (or HOOKRELAY_METRICS_TOKEN), listen on 127.0.0.1, or set metrics.allowUnauthenticated to true on a network you trust',
      );
    }
  }
  const { auth } = config;
  if (auth.algorithm === 'HS256') {
    if (auth.secret !== null && Buffer.byteLength(auth.secret) < 32) {
      throw configError('key "auth.secret" must be at least 32 bytes long; generate one with: openssl rand -base64 32');
    }
    if (auth.publicKeyFile !== null) {
      throw configError('key "auth.publicKeyFile" is set but "auth.algorithm" is HS256; set auth.algorithm to RS256, ES256 or EdDSA to verify with a public key');
    }
  } else if (auth.publicKeyFile === null) {
    throw configError(`key "auth.algorithm" is ${auth.algorithm}, which needs "auth.publicKeyFile" (a PEM public key)`);
  }
  const providerProblem = providerIncoherence(auth.provider, auth.issuer);
  if (providerProblem !== null) throw configError(providerProblem);
  const consoleProblem = consoleOidcIncoherence(config.console.oidc, auth.provider);
  if (consoleProblem !== null) throw configError(consoleProblem);
}

/**
 * The name in `names` closest to `name` (Levenshtein distance), if it is close enough to be a
 * slip (at most a third of the name's length): the suggestion of an unknown variable's error.
 */
export function closestName(name: string, names: readonly string[]): string | null {
  let best: string | null = null;
  let bestDistance = Math.floor(name.length / 3) + 1;
  for (const candidate of names) {
    const d = editDistance(name, candidate);
    if (d < bestDistance) {
      best = candidate;
      bestDistance = d;
    }
  }
  return best;
}

function editDistance(a: string, b: string): number {
  let previous = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i++) {
    const current = [i];
    for (let j = 1; j <= b.length; j++) current[j] = Math.min(previous[j]! + 1, current[j - 1]! + 1, previous[j - 1]! + (a[i - 1] === b[j - 1] ? 0 : 1));
    previous = current;
  }
  return previous[b.length]!;
}

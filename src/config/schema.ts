import { parseDuration } from '../domain/duration.ts';
import { CONSOLE_SCHEMA } from './console-schema.ts';
import { PROVIDER_SCHEMA } from './provider-schema.ts';
import { TRACING_SCHEMA } from './tracing-schema.ts';
import { RECEIVER_AUTH_KEYS } from './receiver-auth-schema.ts';

/**
 * The configuration schema: one entry per key, with its default, its type and the sentence
 * shown when a value is wrong. The loader, the environment mapping (HOOKRELAY_*), the example
 * file test and docs/configuration.md all derive from this table, so a key exists in one place.
 */

export type LeafType =
  | { readonly kind: 'string'; readonly nullable?: boolean; readonly pattern?: RegExp; readonly expect?: string }
  | { readonly kind: 'int'; readonly min: number; readonly max: number }
  | { readonly kind: 'bool' }
  | { readonly kind: 'enum'; readonly values: readonly string[] }
  | { readonly kind: 'duration'; readonly min: number; readonly max: number }
  | { readonly kind: 'durationList'; readonly min: number; readonly max: number }
  | { readonly kind: 'stringList' };

export interface Leaf {
  readonly type: LeafType;
  readonly default: unknown;
  readonly doc: string;
}

export const LISTEN_PATTERN = /^(\[[0-9a-fA-F:.]+\]|[A-Za-z0-9.-]+):(\d{1,5})$/;
/** A metrics bearer token: RFC 6750's token characters, long enough not to be guessed. */
export const METRICS_TOKEN_PATTERN = /^[A-Za-z0-9._~+/-]{16,}=*$/;

export const CONFIG_SCHEMA = {
  stateDir: {
    type: { kind: 'string' },
    default: './var',
    doc: 'Directory for the database, the generated JWT secret and the feed position; created if missing by `serve` and `migrate`, which other commands require.',
  },
  database: {
    path: {
      type: { kind: 'string', nullable: true },
      default: null,
      doc: 'SQLite database file; null means <stateDir>/hookrelay.db. Not used when database.url is set.',
    },
    url: {
      type: { kind: 'string', nullable: true, pattern: /^postgres(ql)?:\/\//, expect: 'a PostgreSQL URL, postgres://USER@HOST:PORT/DATABASE?sslmode=verify-full' },
      default: null,
      doc: 'PostgreSQL database URL (postgres://USER[:PASSWORD]@HOST[:PORT]/DATABASE[?sslmode=...&sslrootcert=...&connect_timeout=...]); null means the SQLite file database.path. Several instances may share one PostgreSQL database (docs/scale-out.md). Prefer HOOKRELAY_DATABASE_URL, or ~/.pgpass for the password, over a config file.',
    },
    poolSize: {
      type: { kind: 'int', min: 2, max: 200 },
      default: 10,
      doc: "PostgreSQL only: most connections this instance opens for its transactions (one more listens for the other instances' wake-ups, one more sends them).",
    },
    preUpgradeBackups: {
      type: { kind: 'int', min: 0, max: 100 },
      default: 3,
      doc: 'SQLite only: before a newer hookrelay migrates the database (or first opens it), it copies it to <database directory>/backups/pre-upgrade-<time>-schema<N>-<version>.db and keeps the last this many such copies; 0 takes none. A copy that cannot be written stops the start (nothing is migrated). See docs/operations.md, "Upgrade".',
    },
    busyTimeout: {
      type: { kind: 'duration', min: 0, max: 600_000 },
      default: '5s',
      doc: 'How long a write waits for another process (a CLI command, a backup) to release the database. A CLI command waits this long. In the daemon a write never blocks while it waits (it is tried again on a timer): an admin API write waits this long, then answers 503 database_busy with Retry-After; the feed reader and the dispatcher wait as long as it takes, and log it after this long.',
    },
  },
  instance: {
    name: {
      type: { kind: 'string', nullable: true, pattern: /^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$/, expect: 'letters, digits, ".", "_" and "-", at most 63, starting with a letter or digit' },
      default: null,
      doc: "This instance's name, unique among the instances sharing a PostgreSQL database: its feed positions and counts are kept under it, and its leases carry it. null means the host name.",
    },
  },
  api: {
    listen: {
      type: { kind: 'string', pattern: LISTEN_PATTERN, expect: 'HOST:PORT, for example 127.0.0.1:8080 or [::1]:8080' },
      default: '127.0.0.1:8080',
      doc: 'Address of the admin API. Port 0 picks a free port.',
    },
    bodyLimitBytes: {
      type: { kind: 'int', min: 1024, max: 10 * 1024 * 1024 },
      default: 64 * 1024,
      doc: 'Largest accepted JSON request body; larger bodies get 413.',
    },
    rateLimitPerMinute: {
      type: { kind: 'int', min: 0, max: 1_000_000 },
      default: 600,
      doc: 'Sustained requests per minute allowed per bearer token; 0 disables the limit.',
    },
    rateLimitBurst: {
      type: { kind: 'int', min: 1, max: 1_000_000 },
      default: 60,
      doc: 'Requests a token may make in a burst above the sustained rate.',
    },
    allowedHosts: {
      type: { kind: 'stringList' },
      default: [],
      doc: 'More names (such as "relay.example.com", or "relay.example.com:8443" for one port) that /metrics and the console answer to in the Host header, on the admin listener and the metrics listener, besides their own addresses, the names they listen on, localhost on loopback, and the host of console.publicUrl: the names a reverse proxy or a scraper reaches them by. Any other Host is refused (403), so that no web page can read them through DNS rebinding.',
    },
  },
  auth: {
    algorithm: {
      type: { kind: 'enum', values: ['HS256', 'RS256', 'ES256', 'EdDSA'] },
      default: 'HS256',
      doc: 'The one JWT algorithm accepted (pinned). HS256 uses a shared secret; RS256, ES256 and EdDSA (Ed25519) a public key.',
    },
    secret: {
      type: { kind: 'string', nullable: true },
      default: null,
      doc: 'HS256 secret (at least 32 bytes). Prefer secretFile or HOOKRELAY_AUTH_SECRET over a config file.',
    },
    secretFile: {
      type: { kind: 'string', nullable: true },
      default: null,
      doc: 'File holding the HS256 secret (a systemd credential, for instance). When neither secret nor secretFile is set, <stateDir>/jwt-secret is generated on first start.',
    },
    publicKeyFile: {
      type: { kind: 'string', nullable: true },
      default: null,
      doc: 'PEM public key that verifies RS256, ES256 or EdDSA tokens.',
    },
    privateKeyFile: {
      type: { kind: 'string', nullable: true },
      default: null,
      doc: 'PEM private key used only by `hookrelay token issue` with RS256, ES256 or EdDSA.',
    },
    issuer: {
      type: { kind: 'string', nullable: true },
      default: null,
      doc: 'When set, tokens must carry this iss (and token issue sets it).',
    },
    audience: {
      type: { kind: 'string', nullable: true },
      default: null,
      doc: 'When set, tokens must carry this aud (and token issue sets it).',
    },
    clockTolerance: {
      type: { kind: 'duration', min: 0, max: 60_000 },
      default: '30s',
      doc: 'Allowed clock skew when checking exp and nbf (at most 60s; whole seconds count, as the claims are in seconds).',
    },
    emailClaim: {
      type: { kind: 'string', pattern: /^[A-Za-z_][A-Za-z0-9_:./-]{0,127}$/, expect: 'a JWT claim name' },
      default: 'sub',
      doc: "Claim holding the caller's e-mail.",
    },
    organizationClaim: {
      type: { kind: 'string', pattern: /^[A-Za-z_][A-Za-z0-9_:./-]{0,127}$/, expect: 'a JWT claim name' },
      default: 'org',
      doc: "Claim holding the caller's organization id.",
    },
    tokenTtl: {
      type: { kind: 'duration', min: 1000, max: 366 * 86_400_000 },
      default: '1h',
      doc: 'Default lifetime of tokens made by `hookrelay token issue` (for example 15m, 1h, 7d); at most auth.maxTokenLifetime.',
    },
    maxTokenLifetime: {
      type: { kind: 'duration', min: 60_000, max: 366 * 86_400_000 },
      default: '24h',
      doc: 'Longest lifetime a token may have: a token whose exp is further than this from its iat, or from now, is refused (401), and `hookrelay token issue` makes none longer. A leaked token is then good for a day at most.',
    },
    provider: PROVIDER_SCHEMA,
  },
  feed: {
    path: {
      type: { kind: 'string', nullable: true },
      default: null,
      doc: 'JSONL feed the daemon tails; "-" reads standard input; null means <stateDir>/feed.jsonl (waited for until it appears).',
    },
    startPosition: {
      type: { kind: 'enum', values: ['start', 'end'] },
      default: 'start',
      doc: 'Where the first start reads a feed file it has never seen: from its beginning, or only lines written from now on (a file that appears later is read whole). Later starts resume from the committed position.',
    },
    maxLineBytes: {
      type: { kind: 'int', min: 1024, max: 64 * 1024 * 1024 },
      default: 1024 * 1024,
      doc: 'Longest accepted line in bytes; a longer line is quarantined without being buffered.',
    },
    batchLines: {
      type: { kind: 'int', min: 1, max: 100_000 },
      default: 10_000,
      doc: 'Most lines committed in one SQLite transaction (with the feed position); a batch also ends at feed.batchBytes or when the file has no more lines.',
    },
    batchBytes: {
      type: { kind: 'int', min: 64 * 1024, max: 64 * 1024 * 1024 },
      default: 16 * 1024 * 1024,
      doc: 'Most bytes of lines committed in one SQLite transaction (a batch also ends at feed.batchLines), for the feed file, standard input and hookrelay ingest alike. A large ingest holds three batches at a time: 1 MiB keeps the peak of a burst about 5 MiB lower than the default, at the price of more commits, which slows event ids in random order (about 2 times slower and 3.6 times more written at 512 KiB; docs/benchmarks.md, "Memory").',
    },
    pollInterval: {
      type: { kind: 'duration', min: 10, max: 60_000 },
      default: '1s',
      doc: 'Safety net: how often an idle feed file is checked for new lines, rotation and truncation. New lines are normally noticed at once (file system notifications); this bounds the delay where notifications do not work (some network file systems).',
    },
    followSymlinks: {
      type: { kind: 'bool' },
      default: false,
      doc: 'Follow a symbolic link at feed.path. Off, a link there is refused like any other file that is not a regular file (a directory, a FIFO, a socket, a device): logged once, /readyz answers 503, and the daemon waits for a regular file. On, the link is resolved once, at start, and the file it then points at is read (a link changed later is not followed until a restart).',
    },
  },
  delivery: {
    allowHttp: {
      type: { kind: 'bool' },
      default: false,
      doc: 'Allow plain http:// webhook URLs. For development only.',
    },
    allowNetworks: {
      type: { kind: 'stringList' },
      default: [],
      doc: 'CIDRs (such as "10.20.0.0/16" or "127.0.0.1/32") that every organization\'s webhook may reach although they are private, loopback or otherwise refused; for on-prem receivers. Prefer delivery.organizationNetworks, which grants a network to the organizations that need it.',
    },
    organizationNetworks: {
      type: { kind: 'stringList' },
      default: [],
      doc: 'Internal networks granted to one organization each, as "ORG=CIDR" entries (such as "acme=10.20.0.0/16"): that organization\'s webhook may reach them (at registration and delivery), no other may.',
    },
    storeInternalResponses: {
      type: { kind: 'stringList' },
      default: [],
      doc: 'Organizations whose delivery log keeps the response bodies of receivers reached through an allowed internal network, and the messages of their TLS and connection errors. For every other organization the log keeps the status and the size of such an answer, not its body, and an error\'s class and code, not its message (which names certificate names and addresses): a tenant must not read internal services through the API.',
    },
    caFile: {
      type: { kind: 'string', nullable: true },
      default: null,
      doc: 'PEM file of extra CA certificates trusted for https receivers, added to (not replacing) the default trust store.',
    },
    proxy: {
      type: { kind: 'string', nullable: true, pattern: /^http:\/\//i, expect: 'an http:// URL such as http://proxy.internal:3128 (http://USER:PASSWORD@HOST:PORT with basic authentication)' },
      default: null,
      doc: 'Egress proxy every delivery goes through (HTTPS and HTTP alike, in a CONNECT tunnel): an http:// URL, with user:password@ for basic authentication (never logged or shown). null: deliveries connect directly. The URL policy still applies: a webhook\'s name is resolved and checked before anything is sent to the proxy.',
    },
    proxyTarget: {
      type: { kind: 'enum', values: ['address', 'name'] },
      default: 'address',
      doc: 'What the CONNECT asks the egress proxy for: "address", the address hookrelay resolved and checked (the connection goes where the policy looked), or "name", the webhook\'s host name, for a proxy whose rules filter by name (it resolves the name again itself).',
    },
    organizationProxies: {
      type: { kind: 'stringList' },
      default: [],
      doc: 'Egress proxies for one organization each, as "ORG=URL" entries (such as "acme=http://proxy.acme.internal:3128"), or "ORG=direct" for an organization whose deliveries do not go through delivery.proxy (a receiver on a network granted with delivery.organizationNetworks, say).',
    },
    timeout: {
      type: { kind: 'duration', min: 1000, max: 120_000 },
      default: '15s',
      doc: 'Overall deadline of one delivery attempt (connect, send, response); not an idle timeout.',
    },
    retrySchedule: {
      type: { kind: 'durationList', min: 1000, max: 7 * 86_400_000 },
      default: ['5s', '5m', '30m', '2h', '5h', '10h', '10h'],
      doc: 'Waits after each failed attempt; when they are used up the delivery is dead (kept, replayable).',
    },
    jitterPercent: {
      type: { kind: 'int', min: 0, max: 50 },
      default: 20,
      doc: 'Random spread applied to each retry wait, in percent (+-).',
    },
    maxRetryAfter: {
      type: { kind: 'duration', min: 1000, max: 7 * 86_400_000 },
      default: '6h',
      doc: 'Longest Retry-After (on 429/503) honoured; longer values are clamped.',
    },
    concurrency: {
      type: { kind: 'int', min: 1, max: 1000 },
      default: 16,
      doc: 'Attempts in flight at once, across all webhooks.',
    },
    perWebhookConcurrency: {
      type: { kind: 'int', min: 1, max: 100 },
      default: 4,
      doc: 'Attempts in flight at once to one webhook, so a slow receiver cannot starve the others.',
    },
    failingAfterFailures: {
      type: { kind: 'int', min: 1, max: 1000 },
      default: 3,
      doc: 'Consecutive failed attempts after which a webhook shows status "failing".',
    },
    disableAfter: {
      type: { kind: 'duration', min: 60_000, max: 90 * 86_400_000 },
      default: '5d',
      doc: 'A webhook failing without any success for this long is disabled (its deliveries are held).',
    },
    secretRotationGrace: {
      type: { kind: 'duration', min: 0, max: 30 * 86_400_000 },
      default: '24h',
      doc: 'After a secret rotation, how long the previous secret keeps signing alongside the new one.',
    },
    pollInterval: {
      type: { kind: 'duration', min: 10, max: 60_000 },
      default: '1s',
      doc: 'Safety net: how often the dispatcher looks at every webhook without having been woken up. The daemon wakes it at once when it queues work itself; this bounds the delay for work queued by another process (the CLI).',
    },
    reorderWindow: {
      type: { kind: 'duration', min: 0, max: 60_000 },
      default: '1s',
      doc: "PostgreSQL only (several instances, each reading its own feed): how long a change read from a feed is held before it may be sent, counted from its occurred_at or from when it was stored, whichever is later, so that an earlier change of the same anticipation request read from another instance's feed a little later goes first. A request's changes are sent in occurred_at order (then storage order). Adds up to this much to each change's latency; 0 sends at once, in storage order when feeds lag. Keep the application hosts' clocks in NTP sync (docs/scale-out.md). No effect on SQLite, where one feed's order stands.",
    },
    orderHold: {
      type: { kind: 'duration', min: 0, max: 600_000 },
      default: '0s',
      doc: "PostgreSQL only, off (0) by default: how long a change read from a feed may wait for the change before it, when its previous_status names a status its anticipation request has not shown yet (a feed that stalls: an instance paused or cut off from the database while the others deliver the later changes read from their feeds). Counted from the change's release (delivery.reorderWindow); it goes out as soon as the request's latest change sent has that status, or when the hold is over, whichever comes first. Costs nothing while changes come in order; a change whose predecessor never comes (the first change hookrelay sees of a request, when its line names a previous status) waits the whole hold. Longer than the longest stall a feed may have (docs/scale-out.md). No effect on SQLite.",
    },
    groupCommitInterval: {
      type: { kind: 'duration', min: 0, max: 1000 },
      default: '5ms',
      doc: 'Least time between two commits of delivery outcomes and claims: attempts that end meanwhile are recorded in one transaction (one fsync). Longer: fewer commits under load; shorter: a request\'s next change goes out sooner. New work for a webhook with a free slot is claimed at once, without waiting for it.',
    },
    ...RECEIVER_AUTH_KEYS,
  },
  retention: {
    enabled: {
      type: { kind: 'bool' },
      default: true,
      doc: 'Prune the database automatically in the daemon (see docs/operations.md, "Retention"). Off: nothing is removed but by `hookrelay db prune`.',
    },
    deliveredEvents: {
      type: { kind: 'duration', min: 1000, max: 3650 * 86_400_000 },
      default: '30d',
      doc: 'A delivered event, with its deliveries and their attempts, is removed this long after its last delivery. Pending, failing, held and dead deliveries, their events, and events never queued (no webhook) are never removed.',
    },
    quarantinedLines: {
      type: { kind: 'duration', min: 1000, max: 3650 * 86_400_000 },
      default: '30d',
      doc: 'A quarantined feed line (`hookrelay feed rejects`) is removed this long after it was read.',
    },
    auditEntries: {
      type: { kind: 'duration', min: 86_400_000, max: 3650 * 86_400_000 },
      default: '365d',
      doc: 'An audit trail entry is removed this long after it was recorded; the chain stays verifiable from an anchor entry that says where it was cut (docs/operations.md, "Audit trail").',
    },
    interval: {
      type: { kind: 'duration', min: 1000, max: 86_400_000 },
      default: '10m',
      doc: 'How often the daemon prunes (the first time a minute after start, or after one interval if shorter).',
    },
    batchSize: {
      type: { kind: 'int', min: 10, max: 100_000 },
      default: 100,
      doc: 'Events looked at (or quarantined lines removed) per transaction: about three rows each (event, delivery, attempt). Each batch holds the daemon for a few ms; a pause at least as long follows it.',
    },
  },
  log: {
    level: {
      type: { kind: 'enum', values: ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'] },
      default: 'info',
      doc: 'Minimum level of the JSON log written to standard output.',
    },
    syslogPrefix: {
      type: { kind: 'enum', values: ['auto', 'on', 'off'] },
      default: 'auto',
      doc: 'Start each log line with its syslog priority (<3> error, <4> warn, <6> info, ...), which journald reads as the line\'s priority. auto: when standard output is the journal (JOURNAL_STREAM names it).',
    },
  },
  metrics: {
    enabled: {
      type: { kind: 'bool' },
      default: true,
      doc: 'Serve GET /metrics in the Prometheus text format.',
    },
    listen: {
      type: { kind: 'string', nullable: true, pattern: LISTEN_PATTERN, expect: 'HOST:PORT, for example 127.0.0.1:9464, or null' },
      default: null,
      doc: 'Address of a listener of its own for /metrics; null serves /metrics on the admin API\'s listener (api.listen).',
    },
    token: {
      type: { kind: 'string', nullable: true, pattern: METRICS_TOKEN_PATTERN, expect: 'at least 16 characters of letters, digits and -._~+/ (openssl rand -hex 32 makes one)' },
      default: null,
      doc: 'Bearer token that scrapes must send (Authorization: Bearer ...). Prefer tokenFile or HOOKRELAY_METRICS_TOKEN over a config file.',
    },
    tokenFile: {
      type: { kind: 'string', nullable: true },
      default: null,
      doc: 'File holding the metrics bearer token (a systemd credential, for instance).',
    },
    allowUnauthenticated: {
      type: { kind: 'bool' },
      default: false,
      doc: 'Serve /metrics without a token on an address that is not loopback (a private network you trust). Without a token, metrics are otherwise served only on a loopback address.',
    },
    refreshInterval: {
      type: { kind: 'duration', min: 1000, max: 600_000 },
      default: '15s',
      doc: 'Least time between two reads of the gauges that come from the database (queue depth, oldest due delivery, webhook status); scrapes in between get the last values read.',
    },
    perOrganization: {
      type: { kind: 'bool' },
      default: true,
      doc: 'Export hookrelay_webhook_status (3 series per webhook) and hookrelay_webhook_rate_limited (1 per webhook with a rate limit) per organization; turn off with thousands of organizations.',
    },
  },
  tracing: TRACING_SCHEMA,
  console: CONSOLE_SCHEMA,
} as const satisfies SchemaNode;

export interface SchemaNode {
  readonly [key: string]: Leaf | SchemaNode;
}

export function isLeaf(node: Leaf | SchemaNode): node is Leaf {
  return 'type' in node && 'doc' in node && typeof (node as { doc: unknown }).doc === 'string';
}

/** Every leaf of the schema with its dotted path, in declaration order. */
/**
 * Keys renamed so that every duration is written the same way (a duration such as "5s", or
 * milliseconds), with the old name's unit: a config file, HOOKRELAY_* variable or override
 * naming the old key still works, is read in its old unit, and is reported (Config.notices).
 */
export const RENAMED_KEYS: ReadonlyMap<string, { readonly to: string; readonly unitMs: number }> = new Map([
  ['database.busyTimeoutMs', { to: 'database.busyTimeout', unitMs: 1 }],
  ['auth.clockToleranceSeconds', { to: 'auth.clockTolerance', unitMs: 1000 }],
  ['feed.pollIntervalMs', { to: 'feed.pollInterval', unitMs: 1 }],
]);

export function schemaLeaves(node: SchemaNode = CONFIG_SCHEMA, prefix = ''): Array<{ path: string; leaf: Leaf }> {
  const out: Array<{ path: string; leaf: Leaf }> = [];
  for (const [key, child] of Object.entries(node)) {
    const path = prefix === '' ? key : `${prefix}.${key}`;
    if (isLeaf(child)) out.push({ path, leaf: child });
    else out.push(...schemaLeaves(child, path));
  }
  return out;
}

/** `api.rateLimitPerMinute` -> `HOOKRELAY_API_RATE_LIMIT_PER_MINUTE`. */
export function envNameFor(path: string): string {
  return (
    'HOOKRELAY_' +
    path
      .split('.')
      .map((part) => part.replace(/([a-z0-9])([A-Z])/g, '$1_$2').toUpperCase())
      .join('_')
  );
}

/**
 * Converts and checks one value for a leaf. `fromText` is true for environment variables and
 * CLI flags, whose values arrive as strings. Returns the value or an error sentence.
 */
export function coerceLeaf(leaf: Leaf, raw: unknown, fromText: boolean): { ok: true; value: unknown } | { ok: false; expected: string } {
  const t = leaf.type;
  switch (t.kind) {
    case 'string': {
      if (raw === null || (fromText && raw === '')) {
        return t.nullable ? { ok: true, value: null } : { ok: false, expected: 'a non-empty string' };
      }
      if (typeof raw !== 'string' || raw === '') return { ok: false, expected: t.nullable ? 'a string or null' : 'a non-empty string' };
      if (t.pattern && !t.pattern.test(raw)) return { ok: false, expected: t.expect ?? `a string matching ${t.pattern}` };
      return { ok: true, value: raw };
    }
    case 'int': {
      const n = fromText && typeof raw === 'string' && /^-?\d+$/.test(raw.trim()) ? Number(raw) : raw;
      if (typeof n !== 'number' || !Number.isInteger(n) || n < t.min || n > t.max) {
        return { ok: false, expected: `an integer from ${t.min} to ${t.max}` };
      }
      return { ok: true, value: n };
    }
    case 'bool': {
      if (typeof raw === 'boolean') return { ok: true, value: raw };
      if (fromText && typeof raw === 'string' && /^(true|false|1|0)$/i.test(raw.trim())) {
        return { ok: true, value: /^(true|1)$/i.test(raw.trim()) };
      }
      return { ok: false, expected: 'true or false' };
    }
    case 'enum': {
      if (typeof raw === 'string' && t.values.includes(raw)) return { ok: true, value: raw };
      return { ok: false, expected: `one of ${t.values.join(', ')}` };
    }
    case 'duration': {
      const ms = typeof raw === 'string' || typeof raw === 'number' ? parseDuration(raw) : null;
      if (ms === null || ms < t.min || ms > t.max) {
        return { ok: false, expected: `a duration such as "15s", "5m" or "2h" (or milliseconds), from ${t.min} ms to ${t.max} ms` };
      }
      return { ok: true, value: ms };
    }
    case 'durationList': {
      const items = fromText && typeof raw === 'string' ? raw.split(',') : raw;
      if (!Array.isArray(items)) return { ok: false, expected: 'a list of durations such as ["5s", "5m", "30m"]' };
      const out: number[] = [];
      for (const item of items) {
        const ms = typeof item === 'string' || typeof item === 'number' ? parseDuration(item) : null;
        if (ms === null || ms < t.min || ms > t.max) {
          return { ok: false, expected: `a list of durations such as ["5s", "5m", "30m"], each from ${t.min} ms to ${t.max} ms` };
        }
        out.push(ms);
      }
      return { ok: true, value: out };
    }
    case 'stringList': {
      const items = fromText && typeof raw === 'string' ? raw.split(',').map((s) => s.trim()).filter((s) => s !== '') : raw;
      if (!Array.isArray(items) || !items.every((s) => typeof s === 'string')) {
        return { ok: false, expected: 'a list of strings' };
      }
      return { ok: true, value: items };
    }
  }
}

/**
 * The PostgreSQL connection pool: a `postgres://` (or `postgresql://`) URL, read the way libpq
 * reads it where that matters to an operator (sslmode, sslrootcert, connect_timeout, host=
 * for a Unix socket directory), turned into a pg.Pool.
 *
 * Everything that decides where and how to connect comes from the URL and the options, never
 * from PG* environment variables (config/ is the only reader of the environment): host, port,
 * user, database and TLS are always set explicitly, so pg's own fallbacks to PGHOST, PGSSLMODE
 * and the like never apply. The one libpq fallback kept is for a URL without a password: pg
 * then looks in ~/.pgpass (and PGPASSWORD), as every PostgreSQL client does, so that an
 * operator can keep the password out of hookrelay's configuration.
 */
import { readFileSync } from 'node:fs';
import { connect as connectTcp, isIP } from 'node:net';
import { userInfo } from 'node:os';
import type { ConnectionOptions } from 'node:tls';
import { Client, Pool, TypeOverrides, type PoolConfig } from 'pg';
import { ErrorCode, HookrelayError } from '../../domain/errors.ts';
import type { Logger } from '../../log.ts';

export const SslMode = {
  disable: 'disable',
  prefer: 'prefer',
  require: 'require',
  verifyCa: 'verify-ca',
  verifyFull: 'verify-full',
} as const;
export type SslMode = (typeof SslMode)[keyof typeof SslMode];

/** What the pool shows in pg_stat_activity, so that a DBA can tell hookrelay's sessions apart. */
export const APPLICATION_NAME = 'hookrelay';
/** Connections a pool opens at most, unless told otherwise. */
export const DEFAULT_POOL_SIZE = 10;
/**
 * How long opening a connection may take (ms) when the URL sets no connect_timeout. libpq
 * waits forever by default; a daemon that hangs on an unreachable server helps nobody.
 */
export const DEFAULT_CONNECT_TIMEOUT_MS = 10_000;

/** The URL parameters understood; any other is refused rather than silently ignored (an ignored sslcert would look like client-certificate authentication). */
const URL_PARAMETERS = ['sslmode', 'sslrootcert', 'connect_timeout', 'host', 'port', 'options'] as const;

/** Where and how to connect, as read from a database URL. Holds no password in a form that logging or JSON would show. */
export interface PgConnectionSettings {
  /** A host name, an IP address (IPv6 without brackets), or an absolute Unix socket directory. */
  readonly host: string;
  readonly port: number;
  readonly user: string;
  readonly database: string;
  readonly sslmode: SslMode;
  /** A CA certificate file (PEM), `system` (Node.js's bundled CAs), or null (see tlsPlan). */
  readonly sslrootcert: string | null;
  /** From connect_timeout (seconds in the URL, ms here; 0 waits forever), or null when the URL sets none. */
  readonly connectTimeoutMs: number | null;
  /** Server options sent at connection start (libpq's `options`, e.g. `-c search_path=hookrelay`), or null. */
  readonly options: string | null;
  /**
   * The password from the URL, behind a function (pg calls it when it connects) so that the
   * settings, the pool's options and anything that logs them never carry it as a value.
   * Undefined when the URL has none (pg then reads ~/.pgpass).
   */
  readonly password: (() => string) | undefined;
}

/**
 * How a connection uses TLS. `fallbackToPlain` is sslmode=prefer: TLS when the server offers
 * it, in the clear otherwise.
 */
export interface TlsPlan {
  readonly tls: ConnectionOptions | false;
  readonly fallbackToPlain: boolean;
}

export interface PgPoolOptions {
  /** Most connections the pool holds; DEFAULT_POOL_SIZE (10) by default. */
  readonly max?: number;
  /** Server-side limit for one statement (ms): PostgreSQL cancels it after this long. None by default. */
  readonly statementTimeoutMs?: number;
  /**
   * Server-side limit (ms) on a session that sits in an open transaction without sending its
   * next statement: PostgreSQL ends the session, which rolls the transaction back and frees its
   * locks. None by default (see openPgStore for the store's).
   */
  readonly idleInTransactionTimeoutMs?: number;
  /** How long opening a connection may take (ms) when the URL sets no connect_timeout; DEFAULT_CONNECT_TIMEOUT_MS by default. */
  readonly connectTimeoutMs?: number;
  /** How long an unused connection stays open (ms); 10 s by default (pg's default). */
  readonly idleTimeoutMs?: number;
  /** Receives the failures of idle connections (a restarted server, a dropped network). */
  readonly log?: Logger;
}

/** Said in place of a URL that cannot be shown safely because it cannot be parsed (where its password is cannot be known). */
const UNPARSEABLE = '(a database URL that does not parse)';

/**
 * `url` as it may appear in a log line or an error message: the password (in the user
 * information or a `password=` parameter) is removed, everything else kept. A URL that does
 * not parse gives a fixed phrase, never its text.
 */
export function loggableDatabaseUrl(url: string): string {
  let parsed: URL;
  try {
    parsed = parseUrl(url);
  } catch {
    return UNPARSEABLE;
  }
  parsed.password = '';
  if (parsed.searchParams.has('password')) parsed.searchParams.delete('password');
  // The URL setters give up silently on a URL they cannot change: then show nothing of it.
  if (parsed.password !== '' || parsed.searchParams.has('password')) return UNPARSEABLE;
  return parsed.href;
}

/**
 * Reads a database URL: `postgres://user:password@host:port/database?sslmode=...`. Missing
 * parts default as libpq's do (port 5432, the operating-system user, a database named after
 * the user, sslmode=prefer) except the host, which is localhost over TCP (libpq would try its
 * compiled-in socket directory: say `?host=/var/run/postgresql` for that). Throws
 * `invalid_config`, quoting the URL without its password, for what it cannot honour: another
 * scheme, several hosts, an unknown parameter, sslmode=allow.
 */
export function parseDatabaseUrl(url: string): PgConnectionSettings {
  const shown = loggableDatabaseUrl(url);
  const fail = (why: string): never => {
    throw new HookrelayError(ErrorCode.config, `database URL ${shown}: ${why}`);
  };
  let parsed: URL;
  try {
    parsed = parseUrl(url);
  } catch {
    return fail('not a URL; expected postgres://user:password@host:port/database?sslmode=verify-full');
  }
  if (parsed.protocol !== 'postgres:' && parsed.protocol !== 'postgresql:') fail(`scheme ${parsed.protocol} is not postgres: or postgresql:`);

  const params = new Map<string, string>();
  for (const key of new Set(parsed.searchParams.keys())) {
    if (!(URL_PARAMETERS as readonly string[]).includes(key)) fail(`parameter ${key} is not supported (supported: ${URL_PARAMETERS.join(', ')})`);
    const values = parsed.searchParams.getAll(key);
    if (values.length > 1) fail(`parameter ${key} is given ${values.length} times`);
    params.set(key, values[0]!);
  }

  let host = params.get('host') ?? decode(parsed.hostname, 'host', fail);
  if (host.includes(',')) fail('several hosts are not supported: name one server (or a proxy in front of several)');
  if (host.startsWith('[') && host.endsWith(']')) host = host.slice(1, -1);
  if (host === '') host = 'localhost';
  if (host.includes('/') && !host.startsWith('/')) fail(`host ${host} is neither a host name nor an absolute socket directory`);

  const portText = params.get('port') ?? parsed.port;
  const port = portText === '' ? 5432 : Number(portText);
  if (!Number.isInteger(port) || port < 1 || port > 65535) fail(`port ${portText} is not a TCP port`);

  let user = decode(parsed.username, 'user name', fail);
  if (user === '') {
    try {
      user = userInfo().username;
    } catch {
      fail('no user name, and the operating-system user has none to default to');
    }
  }
  const path = decode(parsed.pathname, 'database name', fail);
  if (path.slice(1).includes('/')) fail(`path ${path} is not a database name`);
  const database = path.slice(1) || user;

  const sslrootcert = params.get('sslrootcert') ?? null;
  if (sslrootcert === '') fail('sslrootcert is empty');
  const sslmode = sslModeOf(params.get('sslmode'), sslrootcert, fail);

  let connectTimeoutMs: number | null = null;
  const timeout = params.get('connect_timeout');
  if (timeout !== undefined) {
    const seconds = Number(timeout);
    if (!/^\d+$/.test(timeout) || !Number.isSafeInteger(seconds)) fail(`connect_timeout ${timeout} is not a whole number of seconds`);
    // As libpq: 0 waits forever, and less than 2 s counts as 2 s.
    connectTimeoutMs = seconds === 0 ? 0 : Math.max(2, seconds) * 1000;
  }

  const secret = parsed.password === '' ? undefined : decode(parsed.password, 'password', fail);
  return {
    host,
    port,
    user,
    database,
    sslmode,
    sslrootcert,
    connectTimeoutMs,
    options: params.get('options') ?? null,
    password: secret === undefined ? undefined : () => secret,
  };
}

/**
 * `url` as a WHATWG URL. libpq takes `postgres://user@/db` (a user, no host: the default
 * host), which the URL standard refuses (credentials need a host): such a URL is read with
 * the host it defaults to, localhost.
 */
function parseUrl(url: string): URL {
  return new URL(url.replace(/^(postgres(?:ql)?:\/\/[^/?#]*@)(?=[/?#]|$)/i, '$1localhost'));
}

function sslModeOf(value: string | undefined, sslrootcert: string | null, fail: (why: string) => never): SslMode {
  // As libpq (16+): sslrootcert=system means the public CAs, which only make sense with the
  // host name checked too; it turns the default into verify-full and refuses weaker modes.
  if (value === undefined) return sslrootcert === 'system' ? SslMode.verifyFull : SslMode.prefer;
  if (value === 'allow') fail('sslmode=allow is not supported (the driver cannot fall back from plaintext to TLS): use disable or prefer');
  const mode = (Object.values(SslMode) as string[]).includes(value) ? (value as SslMode) : fail(`sslmode ${value} is not one of ${Object.values(SslMode).join(', ')}`);
  if (sslrootcert === 'system' && mode !== SslMode.verifyFull) fail(`sslrootcert=system needs sslmode=verify-full, not ${mode}`);
  return mode;
}

function decode(text: string, what: string, fail: (why: string) => never): string {
  try {
    return decodeURIComponent(text);
  } catch {
    return fail(`the ${what} is not correctly percent-encoded`);
  }
}

/**
 * What TLS a connection uses, following libpq's sslmode:
 * - disable: none. prefer: TLS without verification when the server offers it, else none.
 * - require: TLS, encrypted but not verified, unless sslrootcert names a CA file: then the
 *   chain is verified as with verify-ca (what libpq does when a root certificate is present).
 * - verify-ca: the chain is verified, the host name is not. verify-full: both.
 * The chain is checked against the sslrootcert file only (its CAs replace the default ones);
 * without sslrootcert, or with sslrootcert=system, against Node.js's bundled CA certificates.
 * (libpq would look for ~/.postgresql/root.crt and fail without it: a file in a home
 * directory is a poor dependency for a daemon.) Unix sockets never use TLS, as with libpq.
 * `readFile` reads the CA file (for tests); an unreadable one is an `invalid_config` error.
 */
export function tlsPlan(settings: PgConnectionSettings, readFile: (path: string) => string = (p) => readFileSync(p, 'utf8')): TlsPlan {
  if (settings.host.startsWith('/') || settings.sslmode === SslMode.disable) return { tls: false, fallbackToPlain: false };
  if (settings.sslmode === SslMode.prefer) return { tls: { rejectUnauthorized: false }, fallbackToPlain: true };
  const caFile = settings.sslrootcert === null || settings.sslrootcert === 'system' ? null : settings.sslrootcert;
  if (settings.sslmode === SslMode.require && caFile === null) return { tls: { rejectUnauthorized: false }, fallbackToPlain: false };
  const tls: ConnectionOptions = { rejectUnauthorized: true };
  if (caFile !== null) {
    try {
      tls.ca = readFile(caFile);
    } catch (err) {
      throw new HookrelayError(ErrorCode.config, `sslrootcert ${caFile} cannot be read (${(err as NodeJS.ErrnoException).code ?? (err as Error).message})`, { cause: err });
    }
  }
  // verify-ca, and require with a CA file: the certificate must chain to a trusted CA, for any name.
  if (settings.sslmode !== SslMode.verifyFull) tls.checkServerIdentity = () => undefined;
  return { tls, fallbackToPlain: false };
}

/**
 * A bigint (int8) as a JavaScript number: hookrelay stores epoch ms, ids, counts and file
 * offsets in bigint columns, all far below 2^53. A value beyond fails the query loudly
 * (pg turns a parser's exception into the query's error) instead of coming back rounded.
 */
export function bigintAsNumber(text: string): number {
  const value = Number(text);
  if (!Number.isSafeInteger(value)) throw new RangeError(`a bigint value ${text} does not fit a JavaScript number exactly (beyond 2^53)`);
  return value;
}

/** The OID of PostgreSQL's int8 (bigint) type. */
const INT8_OID = 20;

/**
 * Opens a pool of connections to the database at `url` (see parseDatabaseUrl and tlsPlan for
 * how the URL is read). Connections open lazily, on first use: a bad URL throws here
 * (`invalid_config`), an unreachable server or a refused TLS handshake fails the first query.
 * bigint columns read as numbers (bigintAsNumber) through the pool's own type parsers: the
 * global `pg.types`, shared with every other pg user in the process, is left alone. Idle
 * connections that fail are logged and replaced; the pool never crashes the process for them.
 */
export function createPgPool(url: string, options: PgPoolOptions = {}): Pool {
  const settings = parseDatabaseUrl(url);
  const plan = tlsPlan(settings);
  const shown = loggableDatabaseUrl(url);
  const types = new TypeOverrides();
  types.setTypeParser(INT8_OID, 'text', bigintAsNumber);
  const connectTimeoutMs = settings.connectTimeoutMs ?? options.connectTimeoutMs ?? DEFAULT_CONNECT_TIMEOUT_MS;
  const config: PoolConfig = {
    host: settings.host,
    port: settings.port,
    user: settings.user,
    database: settings.database,
    password: settings.password,
    ssl: plan.tls,
    application_name: APPLICATION_NAME,
    max: options.max ?? DEFAULT_POOL_SIZE,
    connectionTimeoutMillis: connectTimeoutMs,
    idleTimeoutMillis: options.idleTimeoutMs ?? 10_000,
    // Finds a server that vanished without closing the connection (a host lost, a network
    // split) on a connection that only waits, such as one that LISTENs.
    keepAlive: true,
    types,
    Client: clientWithTlsPlan(settings, plan, shown, connectTimeoutMs),
  };
  if (options.statementTimeoutMs !== undefined) config.statement_timeout = options.statementTimeoutMs;
  if (options.idleInTransactionTimeoutMs !== undefined) config.idle_in_transaction_session_timeout = options.idleInTransactionTimeoutMs;
  if (settings.options !== null) config.options = settings.options;
  const pool = new Pool(config);
  pool.on('error', (err) => {
    options.log?.warn({ err, database: shown }, 'an idle PostgreSQL connection failed; the pool opens another when one is needed');
  });
  return pool;
}

/** The protocol's SSLRequest: length 8, then the code 1234.5679. */
const SSL_REQUEST = Buffer.from([0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f]);

/** The server's answer to SSLRequest that says it accepts TLS on this connection ('S'; 'N' says it does not). */
const TLS_ACCEPTED = 0x53;

/** Codes of Node.js errors that mean the server's certificate was not accepted. */
const CERTIFICATE_REJECTED = /^(ERR_TLS_CERT_[A-Z_]+|CERT_[A-Z_]+|DEPTH_ZERO_SELF_SIGNED_CERT|SELF_SIGNED_CERT_IN_CHAIN|UNABLE_TO_[A-Z_]+)$/;

/** pg's message when the server answers an SSLRequest with 'N'. */
const TLS_REFUSED_MESSAGE = 'The server does not support SSL connections';

/**
 * The pool's client class: pg.Client, plus sslmode=prefer (pg has no fallback from TLS to
 * plaintext: it fails when the server refuses TLS) and errors that say which setting to change
 * when TLS fails. For prefer, the pool asks the server once, with an SSLRequest on a
 * connection of its own, whether it offers TLS, and connects accordingly from then on; it asks
 * again after a connection fails for want of TLS.
 */
function clientWithTlsPlan(settings: PgConnectionSettings, plan: TlsPlan, shown: string, timeoutMs: number): typeof Client {
  let offersTls: Promise<boolean> | null = null;
  const explain = (err: unknown): unknown => {
    const e = err as NodeJS.ErrnoException;
    if (e instanceof Error && e.message === TLS_REFUSED_MESSAGE) {
      // prefer: the server stopped offering TLS since it was asked; the next connection asks again.
      offersTls = null;
      if (plan.fallbackToPlain) return err;
      return new HookrelayError(
        ErrorCode.config,
        `database ${shown}: the server does not accept TLS connections, which sslmode=${settings.sslmode} requires; enable TLS on the server (ssl = on), or set sslmode=prefer or sslmode=disable if the network to it is trusted`,
        { cause: err },
      );
    }
    if (e instanceof Error && CERTIFICATE_REJECTED.test(e.code ?? '')) {
      const against = settings.sslrootcert === null || settings.sslrootcert === 'system' ? "Node.js's bundled CA certificates (set sslrootcert to the server's CA file)" : `the CA in sslrootcert ${settings.sslrootcert}`;
      return new HookrelayError(
        ErrorCode.config,
        `database ${shown}: the server's TLS certificate was not accepted (${e.code}: ${e.message}); sslmode=${settings.sslmode} checks it against ${against}${settings.sslmode === SslMode.verifyFull ? ' and checks that it names the host' : ''}`,
        { cause: err },
      );
    }
    return err;
  };

  return class HookrelayPgClient extends Client {
    override connect(): Promise<Client>;
    override connect(callback: ((err: Error) => void) | ((err: null, c: Client) => void)): void;
    override connect(callback?: ((err: Error) => void) | ((err: null, c: Client) => void)): Promise<Client> | undefined {
      const connected = this.choosePlainOrTls()
        .then(() => super.connect())
        .then(
          () => this as Client,
          (err: unknown) => Promise.reject(explain(err)),
        );
      if (callback === undefined) return connected;
      connected.then(
        (client) => (callback as (err: null, c: Client) => void)(null, client),
        (err: unknown) => (callback as (err: Error) => void)(err as Error),
      );
      return undefined;
    }

    private async choosePlainOrTls(): Promise<void> {
      if (!plan.fallbackToPlain) return;
      const asking = (offersTls ??= serverOffersTls(settings.host, settings.port, timeoutMs));
      let offered: boolean;
      try {
        offered = await asking;
      } catch (err) {
        if (offersTls === asking) offersTls = null;
        throw err;
      }
      if (offered) return;
      // pg decides on TLS when it builds the client, in two places: the client and its
      // connection. Both are switched off before connecting. A pg whose connection no longer
      // has that field fails here, loudly, rather than trying TLS against a server without it.
      const connection = this.connection as unknown as { ssl?: unknown };
      if (!('ssl' in connection)) throw new Error('sslmode=prefer cannot fall back to plaintext with this version of pg (its Connection has no ssl field)');
      this.ssl = false;
      connection.ssl = false;
    }
  };
}

/**
 * Asks the server at host:port whether it accepts TLS (the protocol's SSLRequest) and hangs
 * up without going further: true for 'S'. An answer other than 'S' or 'N' (an old server's
 * error) counts as no.
 */
function serverOffersTls(host: string, port: number, timeoutMs: number): Promise<boolean> {
  return new Promise((resolve, reject) => {
    const socket = connectTcp({ host, port });
    const timer =
      timeoutMs > 0 ? setTimeout(() => socket.destroy(new Error(`no answer from ${isIP(host) === 6 ? `[${host}]` : host}:${port} within ${timeoutMs} ms`)), timeoutMs) : null;
    const settle = (outcome: () => void) => {
      if (timer !== null) clearTimeout(timer);
      socket.destroy();
      outcome();
    };
    socket.once('connect', () => socket.write(SSL_REQUEST));
    socket.once('data', (answer: Buffer) => settle(() => resolve(answer[0] === TLS_ACCEPTED)));
    socket.once('error', (err) => settle(() => reject(err)));
    socket.once('close', () => settle(() => reject(new Error(`${host}:${port} closed the connection before answering whether it accepts TLS`))));
  });
}

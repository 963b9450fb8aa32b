/**
 * The PostgreSQL store: the Store boundary (../repos.ts) over a pool of connections. Each
 * transaction takes a connection of its own for its whole length and gets repositories that
 * run their statements on it; the transactions of one process run side by side on as many
 * connections as the pool holds, and the others wait for a free one.
 */
import type { PoolClient } from 'pg';
import { inPgTransaction } from './connection.ts';
import type { Clock } from '../../domain/clock.ts';
import { ErrorCode, HookrelayError } from '../../domain/errors.ts';
import type { Logger } from '../../log.ts';
import type { Store, TransactionOptions, Tx, Upkeep } from '../repos.ts';
import { createPgApiKeysRepo } from './api-keys-repo.ts';
import { createPgAuditRepo } from './audit-repo.ts';
import { createPgDeliveriesRepo } from './deliveries-repo.ts';
import { createPgFeedRepo } from './feed-repo.ts';
import { migratePostgres } from './migrations.ts';
import { createPgOrgsRepo } from './orgs-repo.ts';
import { createPgPool, type PgPoolOptions } from './pool.ts';
import { createPgRetentionRepo } from './retention-repo.ts';
import { createPgRolesRepo } from './roles-repo.ts';
import { createPgUsersRepo } from './users-repo.ts';
import { createPgWebhooksRepo } from './webhooks-repo.ts';
import { publishWork, startPgWakeups } from './wakeups.ts';

/** The PostgreSQL store, and the instance it was opened for. Services see only Store. */
export interface PgStore extends Store {
  readonly backend: 'postgres';
  /** The name this instance keeps its feed positions and statistics under (`instance.name`). */
  readonly instance: string;
}

export interface OpenPgStoreOptions {
  /** The instance's name (`instance.name`); not empty (the feed tables refuse an empty one). */
  readonly instance: string;
  /** Most connections the pool holds; pool.ts's DEFAULT_POOL_SIZE by default. */
  readonly poolSize?: number | undefined;
  /** Receives the migrations applied and the failures of idle connections. */
  readonly log?: Logger | undefined;
  /** See IDLE_IN_TRANSACTION_TIMEOUT_MS (tests shorten it). */
  readonly idleInTransactionTimeoutMs?: number | undefined;
  /** See PING_DEADLINE_MS (tests shorten it). */
  readonly pingDeadlineMs?: number | undefined;
}

/**
 * How long (ms) the server lets one of the store's sessions sit in an open transaction without
 * its next statement before it ends the session (idle_in_transaction_session_timeout). A
 * transaction of hookrelay sends its statements one after the other, never waiting on
 * anything else; one that stops doing so belongs to an instance that was paused (SIGSTOP, a
 * frozen VM) or cut off from the server mid-transaction. Without a limit its locks (the
 * webhooks' claim turns, the rows it wrote) stay held for as long as the server believes the
 * connection alive, minutes or hours, and every other instance waits for them: claims skip
 * those webhooks, the feed readers' writes wait (or, under a statement_timeout, fail). Ended,
 * the transaction rolls back (its leases and outcomes were never committed: the outcomes are
 * kept by the instance and written again once it is back, fenced by their lease epochs).
 * Shorter than a lease (delivery.timeout + 10 s, 11 s at the least).
 */
export const IDLE_IN_TRANSACTION_TIMEOUT_MS = 10_000;

/**
 * How long (ms) a readiness ping waits for the server's answer. Over a cut link an open
 * connection answers nothing, and no error comes until TCP gives up (many minutes): /readyz
 * must not wait with it. One ping at a time: while one is unanswered, the next probes wait for
 * it rather than send more into a silent connection, and once it is older than this they are
 * answered at once.
 */
export const PING_DEADLINE_MS = 3_000;

/** The ping's answer did not come within PING_DEADLINE_MS: the server is out of reach (a transient error, see transient-errors.ts). */
export class PingTimeout extends Error {
  readonly code = 'ETIMEDOUT';
  constructor(ms: number) {
    super(`PostgreSQL did not answer within ${ms} ms (the network to it is cut, or the server is overloaded)`);
    this.name = 'PingTimeout';
  }
}

/**
 * A write transaction. READ COMMITTED whatever the server's default: each statement sees what
 * other instances committed before it, and the repositories lock what they read-then-write
 * (webhooks-repo.ts) rather than rely on a stronger isolation level that would fail
 * transactions with serialization errors to be retried.
 */
const BEGIN_WRITE = 'BEGIN ISOLATION LEVEL READ COMMITTED';
/**
 * `durable: false`: the commit returns without waiting for the WAL to reach the disk. A crash
 * of the server may lose the transaction, never half of it, nor corrupt anything.
 */
const BEGIN_WRITE_NOT_DURABLE = `${BEGIN_WRITE}; SET LOCAL synchronous_commit = off`;
/** A read: one snapshot for all of `fn`'s statements, as SQLite's read transaction gives. Writes are refused. */
const BEGIN_READ = 'BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY';

/**
 * The repositories of one transaction, over its connection: a handful of closures, made per
 * transaction. `instance` names the feed rows (sources, positions, counts) this instance owns.
 */
function txOver(client: PoolClient, instance: string): Tx {
  return {
    orgs: createPgOrgsRepo(client),
    roles: createPgRolesRepo(client),
    users: createPgUsersRepo(client),
    webhooks: createPgWebhooksRepo(client),
    feed: createPgFeedRepo(client, instance),
    deliveries: createPgDeliveriesRepo(client, instance),
    retention: createPgRetentionRepo(client),
    audit: createPgAuditRepo(client, instance),
    apiKeys: createPgApiKeysRepo(client),
  };
}


/**
 * Opens a pool on the database at `url` (pool.ts reads it: TLS, timeouts; no PG* variable),
 * brings its schema up to date (migrations.ts: once, under an advisory lock, whichever
 * instance comes first) and returns the store. Throws `invalid_config` for an empty instance
 * name or a URL that cannot be used, `database_too_new` for a schema newer than this code, or
 * the connection's error when the server cannot be reached; the pool is closed then.
 */
export async function openPgStore(url: string, clock: Clock, options: OpenPgStoreOptions): Promise<PgStore> {
  if (options.instance === '') throw new HookrelayError(ErrorCode.config, 'instance.name is empty: each instance sharing a PostgreSQL database needs a name of its own');
  const poolOptions: { -readonly [K in keyof PgPoolOptions]: PgPoolOptions[K] } = {};
  if (options.poolSize !== undefined) poolOptions.max = options.poolSize;
  if (options.log !== undefined) poolOptions.log = options.log;
  poolOptions.idleInTransactionTimeoutMs = options.idleInTransactionTimeoutMs ?? IDLE_IN_TRANSACTION_TIMEOUT_MS;
  const pool = createPgPool(url, poolOptions);
  let migrated: { from: number; to: number };
  try {
    migrated = await migratePostgres(pool, options.log);
  } catch (err) {
    await pool.end().catch(() => undefined);
    throw err;
  }

  /** `fn` in a transaction of its own, on a pooled connection (see inPgTransaction). */
  const run = <T>(begin: string, fn: (tx: Tx) => Promise<T>): Promise<T> => inPgTransaction(pool, begin, (client) => fn(txOver(client, options.instance)));

  let closing: Promise<void> | null = null;
  const pingDeadlineMs = options.pingDeadlineMs ?? PING_DEADLINE_MS;
  /** The ping in flight (see PING_DEADLINE_MS), and when it was sent (performance.now()). */
  let pinging: Promise<void> | null = null;
  let pingingSince = 0;
  const ping = (): Promise<void> => {
    // Unanswered for longer than the deadline already: out of reach, said at once.
    if (pinging !== null && performance.now() - pingingSince > pingDeadlineMs) return Promise.reject(new PingTimeout(pingDeadlineMs));
    if (pinging === null) pingingSince = performance.now();
    const answer = (pinging ??= pool
      .query('SELECT 1')
      .then(() => undefined)
      .finally(() => {
        pinging = null;
      }));
    let timer: NodeJS.Timeout | undefined;
    const deadline = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new PingTimeout(pingDeadlineMs)), pingDeadlineMs);
    });
    return Promise.race([answer, deadline]).finally(() => clearTimeout(timer));
  };
  const noUpkeep: Upkeep = { busy() {}, trimHeap: () => false, canTrimHeap: false, stop: () => Promise.resolve() };

  return {
    backend: 'postgres',
    shared: true,
    instance: options.instance,
    clock,
    migrated,
    transaction: <T>(fn: (tx: Tx) => Promise<T>, txOptions: TransactionOptions = {}): Promise<T> =>
      run(txOptions.durable === false ? BEGIN_WRITE_NOT_DURABLE : BEGIN_WRITE, fn),
    read: <T>(fn: (tx: Tx) => Promise<T>): Promise<T> => run(BEGIN_READ, fn),
    ping,
    // The server keeps its own WAL and memory: there is no upkeep for the store to run.
    upkeep: () => Promise.resolve(noUpkeep),
    // The daemon listens (and holds the instance-name lock); a command only announces what it queued.
    shareWork: async (work, o) => {
      if (o.listen !== undefined) return startPgWakeups({ url, instance: options.instance, work, log: o.log, poll: o.listen.poll });
      const stop = publishWork(url, options.instance, work, o.log);
      return { close: stop };
    },
    /** Waits for the transactions under way to give their connections back, then closes them all; a second call waits for the first. */
    close: () => (closing ??= pool.end()),
  };
}

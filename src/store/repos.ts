/**
 * The store boundary: what the services, the API, the CLI and the dispatcher need of the
 * database, whichever it is (SQLite, the embedded default: sqlite/; PostgreSQL: pg/). Every
 * repository call is asynchronous and is made through the transaction it belongs to (`tx`,
 * handed out by Store.transaction and Store.read), so no caller holds a driver or a connection.
 *
 * The values the repositories take and give are in types.ts; DueRow, the claim's raw row, is
 * in rows.ts (see dueDeliveryOf).
 */
import type { ApiKey, StoredApiKey } from '../domain/api-keys.ts';
import type { AuditDraft, AuditEntry } from '../domain/audit.ts';
import type { Clock } from '../domain/clock.ts';
import type { StoredEvent } from '../domain/feed-event.ts';
import type { Permission } from '../domain/permissions.ts';
import type { RateWindow } from '../domain/rate-window.ts';
import type { Organization, Role, User, Webhook, WebhookStatus, WebhookWithSecret } from '../domain/types.ts';
import type { Logger } from '../log.ts';
import type { WorkSignal } from '../domain/work.ts';
import type { DueRow } from './row-mappers.ts';
import type {
  AttemptCount,
  AttemptRow,
  AuditFilter,
  AttemptToStore,
  ClaimTurn,
  DeliverableWebhook,
  SealedCredentials,
  DeliveryRow,
  DeliveryToQueue,
  DeliveryWaitState,
  EventToStore,
  FeedPosition,
  FeedReject,
  FeedStats,
  Leased,
  ListFilter,
  PruneBounds,
  PrunedRows,
  RateState,
  Settlement,
  WebhookHealth,
  WebhookSettings,
  WebhookSigningKeys,
  WebhookStatusChange,
  WebhookWithHealth,
} from './values.ts';

export interface OrgsRepo {
  /** Inserts; returns false when the id is taken. */
  insert(org: Organization): Promise<boolean>;
  get(id: string): Promise<Organization | null>;
  list(): Promise<Organization[]>;
}

export interface RolesRepo {
  list(): Promise<Role[]>;
  get(name: string): Promise<Role | null>;
  /** Inserts a custom role; returns false when the name is taken. */
  insert(role: { name: string; description: string; permissions: readonly Permission[] }, now: number): Promise<boolean>;
}

export interface UsersRepo {
  /** Inserts; returns the new user, or null when the e-mail is taken in that organization. */
  insert(user: { orgId: string; email: string; emailKey: string; roleName: string }, now: number): Promise<User | null>;
  findByEmail(orgId: string, emailKey: string): Promise<User | null>;
  listByOrg(orgId: string): Promise<User[]>;
  setRole(userId: number, roleName: string, now: number): Promise<void>;
  remove(userId: number): Promise<void>;
  countOthersWithPermission(orgId: string, exceptUserId: number, permission: Permission): Promise<number>;
}

export interface WebhooksRepo {
  /** The webhook without its secret: what every read path gets. */
  get(orgId: string): Promise<Webhook | null>;
  getWithSecret(orgId: string): Promise<WebhookWithSecret | null>;
  /** The webhooks that may receive deliveries now (not disabled), with their status, last success (epoch ms) and rate limit. */
  deliverable(): Promise<DeliverableWebhook[]>;
  health(orgId: string): Promise<WebhookHealth | null>;
  /** Every webhook with its health, by organization id. */
  listWithHealth(): Promise<WebhookWithHealth[]>;
  /** Records a successful attempt; returns the status change it made (`failing` -> `active`), if any. */
  recordSuccess(orgId: string, now: number): Promise<WebhookStatusChange | null>;
  /**
   * Records a failed attempt: `failing` after `failingAfter` in a row, `disabled` once failing
   * for `disableAfterMs`; returns the status change it made, if any.
   */
  recordFailure(orgId: string, now: number, failingAfter: number, disableAfterMs: number): Promise<WebhookStatusChange | null>;
  /**
   * Locks these webhooks' rows until the transaction ends, in organization id order, waiting
   * for other transactions: a commit that records attempts of several webhooks takes their
   * locks in one order, so two instances' commits cannot deadlock on them. Nothing on SQLite,
   * whose write transaction holds the whole database.
   */
  lockInOrder(orgIds: readonly string[]): Promise<void>;
  /** Sets the status (and why it is disabled); returns the change it made, null when the status stays. */
  setStatus(orgId: string, status: WebhookStatus, reason: string | null, now: number): Promise<WebhookStatusChange | null>;
  /** The current secret becomes the previous one (signing until `previousExpiresAt`); `secret` becomes current. */
  rotateSecret(orgId: string, secret: string, previousExpiresAt: number, now: number): Promise<void>;
  /**
   * Until when (epoch ms) the previous secret of the organization's webhook keeps signing, as
   * rotateSecret stored it; null when it was never rotated (or has no webhook). Never a secret.
   */
  previousSecretExpiresAt(orgId: string): Promise<number | null>;
  /** The URL and the secrets of the organization's webhook (see signingSecrets), or null when it has none. */
  signingKeys(orgId: string): Promise<WebhookSigningKeys | null>;
  /** The sealed credentials of the organization's webhook for its receiver (a client certificate's key, an OAuth2 client secret), or null when it has no webhook. */
  sealedCredentials(orgId: string): Promise<SealedCredentials | null>;
  /**
   * Adds `n` to the webhook's count of deliveries sent after a later change of their request
   * (PostgreSQL; never called on SQLite, where it does nothing). Called in the claim that leased
   * them, which holds the webhook's row (claimTurns).
   */
  countOutOfOrder(orgId: string, n: number): Promise<void>;
  /**
   * Creates or replaces the organization's one webhook; status goes back to active. `settings`
   * (its headers, its rate limit) replace the ones it had (none when not given); the rate
   * limit's state is kept.
   */
  upsert(orgId: string, url: string, activeHmac: boolean, secret: string | null, now: number, settings?: Partial<WebhookSettings>): Promise<void>;
  /**
   * Stores the rate limit's state of the organization's webhook (see ClaimTurn.rate): the claim
   * that started deliveries writes it, in its transaction, within its turn.
   */
  setRateWindow(orgId: string, window: RateWindow): Promise<void>;
  /**
   * The webhooks with a rate limit, each with the deliveries it started lately, and the time
   * `now` to judge them at (`now` itself on SQLite; the database server's clock on PostgreSQL,
   * the clock their windows are in). For reports (status, metrics).
   */
  rateStates(now: number): Promise<RateState[]>;
}

/**
 * Events, feed positions, quarantined lines and feed counts. Positions and counts belong to
 * the instance the store was opened for (`instance.name`): each instance reads its own feed.
 * Events are shared: an event id is stored once, whichever instance read it first.
 */
export interface FeedRepo {
  /** Events never queued for delivery (their organization had no webhook), per organization. */
  undeliverableByOrg(): Promise<Array<{ orgId: string; events: number }>>;
  /**
   * The number that stands for a source (a feed's path, "-" for standard input) in the events
   * it stored; given the first time the source is seen. Call inside the write transaction that
   * stores the events (a batch that rolls back takes a new source's row with it).
   */
  sourceId(source: string): Promise<number>;
  /**
   * Inserts the events, in order; returns each one's sequence number, or null where an event
   * with that id exists (stored before, or earlier in the same call).
   */
  insertEvents(events: readonly EventToStore[], sourceId: number, now: number): Promise<Array<number | null>>;
  /**
   * Which of `legacyIds` name events stored before SQLite schema version 5 (the ids lines without
   * event_id were given then; see feed-event's derivedEventId). Empty in a database created since.
   */
  legacyEvents(legacyIds: readonly string[]): Promise<Set<string>>;
  /** The stored columns of the events with these ids (what their webhook bodies are built from), by id. */
  storedEvents(ids: readonly string[]): Promise<Map<string, StoredEvent>>;
  /**
   * The time (epoch ms) the next stored event is received at, or the next delivery queued (every
   * writer that queues deliveries takes their created_at from here): `now`, or the newest
   * event's or delivery's time if the clock is behind it. Keeps received_at non-decreasing along
   * seq, which seqRange relies on, and created_at along the delivery id, which
   * DeliveriesRepo.idsCreated relies on. Call inside the write transaction that inserts.
   */
  receivedAt(now: number): Promise<number>;
  /** The seqs of events received in [since, until) (epoch ms), as a half-open range [from, to). */
  seqRange(since: number, until: number): Promise<{ from: number; to: number }>;
  insertRejects(rejects: ReadonlyArray<Omit<FeedReject, 'id'>>): Promise<void>;
  getPosition(source: string): Promise<FeedPosition | null>;
  savePosition(p: FeedPosition, now: number): Promise<void>;
  addStats(source: string, accepted: number, duplicates: number, quarantined: number, now: number): Promise<void>;
  stats(): Promise<FeedStats[]>;
  listRejects(afterId: number, limit: number): Promise<FeedReject[]>;
}

export interface DeliveriesRepo {
  /** Queues one delivery; returns its id. */
  insert(eventSeq: number, orgId: string, orderingKey: number, now: number): Promise<number>;
  /** Queues deliveries (ingestion: many at once); their ids are not returned. */
  insertMany(rows: readonly DeliveryToQueue[], now: number): Promise<void>;
  /**
   * Takes the organizations' turns to claim, for this write transaction: on a database shared
   * by several instances, only one claims for a webhook at a time (PostgreSQL: the webhook rows,
   * locked FOR UPDATE SKIP LOCKED, in one statement for all of them). An organization missing
   * from the answer is held by another transaction (claiming, or recording attempts of that
   * webhook): look again at the next commit. For the others: how many of the organization's
   * deliveries other instances hold leased now (the per-webhook cap counts them) and whether
   * its webhook is failing (then one attempt at a time, across instances). SQLite: one daemon
   * per database file, whose write lock is the turn: every organization, with
   * `{ leasedElsewhere: 0, failing: false, shared: false }`, without a query.
   *
   * `rateLimited`: the organizations whose webhook the caller believes has a rate limit. Their
   * turn carries the limit and its state (`rate`). PostgreSQL reads both with the locked row
   * for every organization (the row is read anyway), so a limit set meanwhile by another
   * instance holds at once; SQLite reads them for these organizations only (one indexed read
   * each), so that webhooks without a limit claim without a query more.
   */
  claimTurns(orgIds: readonly string[], now: number, rateLimited?: ReadonlySet<string>): Promise<Map<string, ClaimTurn>>;
  /**
   * Up to `limit` deliveries of the organization that may be attempted now (not leased, not
   * held back by an earlier change of their request, webhook not disabled), oldest due first,
   * without their request body, which costs more to build than the row to read (dueDeliveryOf
   * builds it for the rows a claim takes). It locks nothing: on a backend shared by several
   * instances, call it within the organization's claim turn (claimTurns), which keeps other
   * claims for the organization out until this transaction ends.
   *
   * "Earlier" is the storage order on SQLite (one feed). On PostgreSQL it is the order the
   * changes happened in, (orderAt, then id): a pending change of the request that happened
   * earlier holds a later one back, fresh or tried, and a fresh change is not due before its
   * releaseAt (the reorder window), so that the earlier change read from another instance's
   * feed a little later goes first.
   */
  dueRows(orgId: string, now: number, limit: number): Promise<DueRow[]>;
  /**
   * When the organization's next retry falls due (epoch ms), if it has one after `now`; on
   * PostgreSQL also when its next change held by the reorder window is released, whichever
   * comes first (the dispatcher sets its wake-up timer to it).
   */
  nextRetryAt(orgId: string, now: number): Promise<number | null>;
  /** A pending delivery that can never be sent becomes dead, with the reason. */
  markUnsendable(id: number, error: string, now: number): Promise<void>;
  /**
   * Leases deliveries until `until` (epoch ms) for this instance: nobody else attempts them
   * before then. Answers the epoch each was leased under (`epochs`: on a shared database every
   * lease of a delivery adds one to its epoch, the fencing token its attempt's outcome and its
   * release are checked against; null on SQLite, one daemon per file, which fences nothing),
   * and the ids, among those leased for the first time, of changes that a later change of
   * their request (by dueRows' order) was already sent before: they go out after it (a late
   * change, beyond the reorder window; always empty on SQLite).
   */
  lease(ids: readonly number[], until: number, now: number): Promise<Leased>;
  insertAttempts(attempts: readonly AttemptToStore[]): Promise<void>;
  /**
   * Applies an attempt's outcome. On a shared database only while this instance holds the
   * delivery's lease, and (given `epoch`, as the dispatcher always does) that very lease, the
   * one its attempt ran under (fencing): false when the lease lapsed and the delivery was
   * leased again since, by another instance or by this one, whose own attempt then decides its
   * state. Always true on SQLite.
   */
  settle(id: number, s: Settlement, epoch?: number | null): Promise<boolean>;
  /** settle() for several deliveries at once (one statement on PostgreSQL); returns the ids not applied (superseded). */
  settleMany(items: ReadonlyArray<{ readonly id: number; readonly settlement: Settlement; readonly epoch?: number | null }>): Promise<number[]>;
  /**
   * Gives leased deliveries back without counting an attempt: on a shared database only those
   * this instance holds, and (given `epochs`, `epochs[i]` for `ids[i]`, as the dispatcher always
   * does) under the lease it took them with, so that a stale give-back never ends a later lease.
   */
  release(ids: readonly number[], now: number, epochs?: ReadonlyArray<number | null>): Promise<void>;
  get(orgId: string, id: number): Promise<DeliveryRow | null>;
  attempts(deliveryId: number): Promise<AttemptRow[]>;
  /**
   * Newest first. `status` is the public status: `pending` is never attempted, `failed` attempted
   * and waiting for a retry. Each part of the log (fresh, pending and tried, delivered, dead) is
   * read newest first through its own index, within [fromId, beforeId), and the parts merged:
   * a page costs the same at the front of the log and deep in it.
   */
  list(orgId: string, f: ListFilter): Promise<DeliveryRow[]>;
  /**
   * The ids of the deliveries queued in [since, until) (epoch ms; null: unbounded on that side),
   * as a half-open range [from, to): a binary search over the delivery id, in O(log n)
   * primary-key lookups, as seqRange over seq, since created_at never decreases along the id
   * (see FeedRepo.receivedAt). Deliveries of every organization: the range bounds a read of one
   * organization's. `{ from: 0, to: 0 }` when there is no delivery.
   */
  idsCreated(since: number | null, until: number | null): Promise<{ from: number; to: number }>;
  /**
   * The organization's attempts that started in [from, to) (epoch ms), counted per bucket of
   * `bucketMs` from `from`; buckets without attempts are left out. Read through
   * delivery_attempts_started: the window's attempts of every organization, each kept or not by
   * its delivery's organization.
   */
  attemptCounts(orgId: string, from: number, to: number, bucketMs: number): Promise<AttemptCount[]>;
  eventOf(deliveryId: number): Promise<{ eventSeq: number; orderingKey: number } | null>;
  hasPendingDelivery(eventSeq: number): Promise<boolean>;
  /** Events of the organization with seq in [from, to) that were never delivered and are not queued. */
  recoverable(orgId: string, from: number, to: number): Promise<Array<{ eventSeq: number; eventId: string; orgId: string; anticipationRequestId: string; type: string }>>;
  /** Makes failed (pending, already attempted) deliveries of events with seq in [from, to) due now. */
  retryFailedNow(orgId: string, from: number, to: number, now: number): Promise<number>;
  /**
   * Counts up to `limit` pending deliveries of the organization with an id above `after`:
   * `fresh` ones (never attempted, not leased) or `tried` ones (attempted, or leased now).
   * Returns how many, and the last id counted (the next call's `after`); fewer than `limit`
   * means the end was reached.
   */
  countPendingChunk(orgId: string, kind: 'fresh' | 'tried', after: number, limit: number): Promise<{ n: number; last: number }>;
  /**
   * The organization's retries due by `now` and not leased, counted up to `max` (one bounded
   * read of deliveries_org_due): what waits for a webhook's rate limit besides its new
   * deliveries (see services/status.ts).
   */
  countDueRetries(orgId: string, now: number, max: number): Promise<number>;
  /** When the organization's oldest due delivery became due (epoch ms); null when none is due. */
  oldestDueAt(orgId: string, now: number): Promise<number | null>;
  /** The latest failed attempt among the organization's newest `window` tried pending deliveries and newest `window` dead ones. */
  recentFailure(orgId: string, window?: number): Promise<{ at: number; statusCode: number | null; error: string } | null>;
  /**
   * Stores a test event (its whole body, `payload`) as from the source `api`, occurred and
   * received at `now`; returns its sequence number. `requestId`: the (made-up) anticipation
   * request of a sample status change; '' for a `webhook.test`, part of no request.
   */
  insertTestEvent(id: string, orgId: string, payload: string, now: number, requestId?: string): Promise<number>;
  /**
   * Where the organization's delivery stands in its queue (retry-now's checks); null when the
   * organization has no delivery with this id. One read by primary key, and the held-back
   * check of the claim (the handful of pending deliveries of its request).
   */
  waitState(orgId: string, id: number): Promise<DeliveryWaitState | null>;
  /**
   * Retry-now: a failed delivery (pending, attempted, not leased) of the organization becomes
   * due at `now` (epoch ms). Returns false, changing nothing, when it is not in that state (any
   * more: on a shared database an instance may have leased it since waitState read it).
   * Ordering is the claim's: a later change of its request stays held back behind it (dueRows).
   */
  retryNow(orgId: string, id: number, now: number): Promise<boolean>;
}

export interface RetentionRepo {
  /** The newest row of each table, and the oldest event (0 when a table is empty). */
  newest(): Promise<PruneBounds>;
  /**
   * Looks at up to `limit` events with seq in (after, before), oldest first, and removes those
   * whose deliveries were all delivered before `cutoff` (epoch ms), with their deliveries and
   * attempts; with `dryRun` only counts them (then a read transaction is enough). Returns the
   * last seq looked at (null: none left) and the rows removed.
   */
  pruneEvents(o: { after: number; before: number; cutoff: number; newest: PruneBounds; limit: number; dryRun: boolean }): Promise<{ last: number | null; removed: PrunedRows }>;
  /** Removes up to `limit` quarantined lines received before `cutoff` (never the newest one); returns how many. */
  pruneRejects(cutoff: number, newestId: number, limit: number): Promise<number>;
  /** How many quarantined lines pruneRejects would remove in all. */
  countRejects(cutoff: number, newestId: number): Promise<number>;
}

/**
 * The audit trail (domain/audit.ts): entries numbered 1, 2, ... without gaps, each chained to
 * the one before by its hash. Appends are serialized: one at a time on SQLite (its one writer),
 * under a transaction-level advisory lock on PostgreSQL, held until the transaction ends.
 */
export interface AuditRepo {
  /**
   * Appends `draft` after the newest entry, chained to it, at `now` (never before the newest
   * entry's time); returns the entry stored. Call it last in its transaction: on PostgreSQL it
   * holds the chain's lock from there to the commit.
   */
  append(draft: AuditDraft, now: number): Promise<AuditEntry>;
  /** Up to `limit` entries with an id above `afterId`, oldest first. */
  after(afterId: number, limit: number): Promise<AuditEntry[]>;
  /** A page of entries, newest first. */
  list(filter: AuditFilter): Promise<AuditEntry[]>;
  /** The newest `audit.prune` entry (where the chain is checked from), or null. */
  latestAnchor(): Promise<AuditEntry | null>;
  /** The id of the first entry at or after `at` (epoch ms), or null. */
  firstAt(at: number): Promise<number | null>;
  /** Removes up to `limit` of the oldest entries with an id below `beforeId`; returns how many. */
  removeBefore(beforeId: number, limit: number): Promise<number>;
  /** The last entry this instance wrote to its log (the audit journal, relay/audit-journal.ts); 0 for none. */
  loggedThrough(): Promise<number>;
  setLoggedThrough(id: number): Promise<void>;
}

/** API keys (domain/api-keys.ts): rows hold the key's hash and public prefix, never the key. */
export interface ApiKeysRepo {
  /** Inserts a key; returns it, or null when its name is taken by a key not revoked (or, once in billions, its prefix). */
  insert(key: { orgId: string; name: string; roleName: string; prefix: string; hash: string; createdBy: string | null; expiresAt: number | null }, now: number): Promise<ApiKey | null>;
  /** The key with this public prefix, revoked or not, with its hash. */
  byPrefix(prefix: string): Promise<StoredApiKey | null>;
  /** The organization's keys not revoked (expired ones too), by name. */
  listByOrg(orgId: string): Promise<ApiKey[]>;
  /** The organization's key of this name that is not revoked. */
  findByName(orgId: string, name: string): Promise<ApiKey | null>;
  /** The organization's keys neither revoked nor expired at `now`. */
  countLive(orgId: string, now: number): Promise<number>;
  revoke(id: number, now: number): Promise<void>;
  /** Records a use at `now` unless one was recorded within the last `granularityMs`. */
  touch(id: number, now: number, granularityMs: number): Promise<void>;
}

/** The repositories, as one transaction sees them. */
export interface Tx {
  readonly orgs: OrgsRepo;
  readonly roles: RolesRepo;
  readonly users: UsersRepo;
  readonly webhooks: WebhooksRepo;
  readonly feed: FeedRepo;
  readonly deliveries: DeliveriesRepo;
  readonly retention: RetentionRepo;
  readonly audit: AuditRepo;
  readonly apiKeys: ApiKeysRepo;
}

/**
 * How a write transaction waits for the database's write lock while another process (a CLI
 * command, a backup) holds it. SQLite only: the store tries BEGIN IMMEDIATE again on a timer,
 * without holding the connection meanwhile, so reads and other work go on (sqlite/lock-wait.ts).
 * PostgreSQL locks rows, not the database, and waits for them on the server: nothing to do.
 */
export interface LockWait {
  /** Longest wait (ms), then `database_busy` (nothing was changed). Unlimited without it. */
  readonly maxWaitMs?: number;
  /** Aborting ends the wait: `database_busy` at once. */
  readonly signal?: AbortSignal | undefined;
}

export interface TransactionOptions {
  /**
   * False: the commit need not wait for the disk (SQLite: synchronous=NORMAL for this one
   * transaction). A power cut may undo it, never corrupt anything. Only for writes that are as
   * good redone as lost (retention, a claim that records nothing).
   */
  readonly durable?: boolean;
  /** How this transaction waits for a lock another process holds; the store's own default (set when it was opened) without it. */
  readonly lockWait?: LockWait;
}

/**
 * The backend's upkeep beside ingestion and delivery (SQLite: WAL checkpoints on a thread of
 * their own, see sqlite/checkpointer.ts, and giving the C heap's free pages back, see
 * sqlite/heap-trim.ts); nothing on PostgreSQL, whose server keeps its own WAL and memory.
 */
export interface Upkeep {
  /** A burst of writes (a large ingest batch, a retention pass): checkpoint in the background for a while. */
  busy(): void;
  /** Gives the C heap's free pages back to the system now; false when this platform or backend cannot. */
  trimHeap(): boolean;
  /** Whether trimHeap can do anything here. */
  readonly canTrimHeap: boolean;
  /** Ends the upkeep (the checkpoint thread); call before the store closes. */
  stop(): Promise<void>;
}

/** Work this process shares with the other instances of its database (see Store.shareWork). */
export interface WorkSharing {
  /** Stops sharing (sends what is left to send first) and lets go of what it holds. */
  close(): Promise<void>;
}

/** The database, whichever backend holds it. */
export interface Store {
  readonly backend: 'sqlite' | 'postgres';
  /**
   * Whether several daemons may work on this database at once (PostgreSQL; a SQLite file has one
   * daemon). Shared: claims are capped across instances and changes read by different feeds are
   * put in order (delivery.reorderWindow); what callers ask instead of the backend's name.
   */
  readonly shared: boolean;
  readonly clock: Clock;
  /** Schema versions before and after opening; `backup`: the pre-upgrade copy of a SQLite file taken first (null or absent: none). */
  readonly migrated: { readonly from: number; readonly to: number; readonly backup?: string | null };
  /**
   * Runs `fn` in one write transaction and commits what it did, or nothing if it throws. On
   * SQLite the write lock is taken up front (BEGIN IMMEDIATE): read-then-write is safe across
   * processes, and a lock another process holds is waited for before `fn` runs, as
   * `options.lockWait` (or the store's default) says, so `fn` runs once. `fn` must not wait
   * for anything but its repository calls: the transaction holds the database (SQLite) or a
   * pooled connection (PostgreSQL) until it returns.
   */
  transaction<T>(fn: (tx: Tx) => Promise<T>, options?: TransactionOptions): Promise<T>;
  /** Runs `fn` in one read transaction: a consistent snapshot that never blocks a writer. */
  read<T>(fn: (tx: Tx) => Promise<T>): Promise<T>;
  /** Throws if the database cannot answer a trivial query (readiness probe). */
  ping(): Promise<void>;
  /** Starts the backend's upkeep (see Upkeep); `whileBusy`: checkpoints in the background only during bursts. */
  upkeep(log: Logger, options: { whileBusy: boolean }): Promise<Upkeep>;
  /**
   * Shares what `work` signals with the other instances of a shared database, and theirs into
   * `work` (PostgreSQL: LISTEN/NOTIFY, see pg/wakeups.ts). With `listen` (the daemon) it also
   * holds the instance-name lock (`invalid_config` when another instance holds it) and calls
   * `listen.poll` when it hears the others again after a lost connection; without (a command),
   * it only announces. SQLite has one daemon per file: nothing to share, a no-op.
   */
  shareWork(work: WorkSignal, options: { log: Logger; listen?: { poll(): void } }): Promise<WorkSharing>;
  close(): Promise<void>;
}

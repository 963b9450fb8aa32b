/**
 * The group commit: what ended since the last commit (attempts with their outcome, attempts cut
 * short, deliveries claimed and never started) is recorded in one write transaction, which also
 * leases what the free slots can take (see OutboxService.flush). One commit at a time, at
 * most one group commit every `groupCommitMs`; a claim for new work may run sooner, alone.
 *
 * Its modes, one at a time, each change checked against the table below (an illegal one is a bug):
 *
 *   stopped ──start──> idle ──request──> scheduled ──timer──> committing ──end──> idle | scheduled
 *                                                                │ a timer fires meanwhile
 *                                                                v
 *                                                      committing-more-wanted ──end──> idle | scheduled
 *   scheduled ──a timer fires on a damaged database──> idle (nothing more is written)
 *   any but stopped ──close──> closing (the last commits, nothing more scheduled) ──> stopped
 *
 * A timer may be armed during a commit (the window's, counted from the previous group commit; a
 * claim's; a back-off's), as the dispatcher asks: if it fires before the commit ends, the mode
 * becomes committing-more-wanted and the commit it wanted ('all' wins over 'claim') is asked for
 * again at the end; if not, it fires later and finds the mode scheduled. So a commit never
 * waits for a window that has already passed, and never runs beside another one (the timing
 * measured in docs/benchmarks.md, "Delivery").
 *
 * The dispatcher hands outcomes in (attemptEnded, attemptCutShort, giveBack) and supplies the
 * claim side as a CommitHost: the plan before the transaction, what was claimed after it.
 */
import type { Logger } from '../log.ts';
import type { ClaimedDelivery, OutboxService, FlushResult, FlushWork } from '../services/outbox.ts';
import type { StorageHealth } from '../services/storage-health.ts';
import type { TransactionOptions } from '../store/repos.ts';
import { isTransientStoreError } from '../store/storage-faults.ts';
import { isDatabaseBusy } from '../domain/errors.ts';
import { EMPTY_BATCH, WaitingWork, type CommitBatch, type CommitHost, type CommitKind, type PendingAttempt } from './commit-batch.ts';

export type CommitMode = 'stopped' | 'idle' | 'scheduled' | 'committing' | 'committing-more-wanted' | 'closing';

const LEGAL: { readonly [M in CommitMode]: readonly CommitMode[] } = {
  stopped: ['idle'],
  idle: ['scheduled', 'closing'],
  scheduled: ['idle', 'committing', 'closing'],
  committing: ['committing-more-wanted', 'idle', 'scheduled', 'closing'],
  'committing-more-wanted': ['idle', 'scheduled', 'closing'],
  closing: ['stopped'],
};

export interface GroupCommitOptions {
  readonly deliveries: Pick<OutboxService, 'flush'>;
  readonly log: Logger;
  /** Least time between two group commits (ms). */
  readonly groupCommitMs: number;
  readonly health?: StorageHealth | undefined;
  /** See DispatcherOptions.lockWaitMs. */
  readonly lockWaitMs?: number | undefined;
}

/** Between a database_busy and the next try. */
const BUSY_PAUSE_MS = 10;
const DEFAULT_LOCK_WAIT_MS = 5_000;
/** Failures in a row (not of the disk, not of a lock) after which what waits is recorded one item at a time. */
const ONE_BY_ONE_AFTER = 3;
/** Tries of the last commit at close. */
const LAST_COMMIT_TRIES = 3;
const DURABLE: TransactionOptions = Object.freeze({ durable: true });
const NOT_DURABLE: TransactionOptions = Object.freeze({ durable: false });

/** What a commit writes, once prepared: its batch, how many items it records, and its claim. */
interface PreparedCommit<A extends PendingAttempt> {
  readonly batch: CommitBatch<A>;
  readonly writes: number;
  claim: FlushWork['claim'];
}

/** What follows a write that failed: wait for another process's lock, back off, or record what waits one item at a time. */
type AfterFailedWrite = 'wait-for-lock' | 'back-off' | 'record-one-by-one';

export class GroupCommit<A extends PendingAttempt> {
  readonly #deliveries: Pick<OutboxService, 'flush'>;
  readonly #log: Logger;
  readonly #health: StorageHealth | undefined;
  readonly #groupCommitMs: number;
  /**
   * Another process (a CLI command, a backup) holding SQLite's write lock: the store waits for
   * it this long (busyTimeoutMs, see store/sqlite/lock-wait.ts) and answers database_busy if it
   * is not released meanwhile. What the commit carries is kept and the commit asked for again
   * (the store waits again); logged once when it starts and once when it ends.
   */
  readonly #lockWaitMs: number;
  readonly #closingOptions: TransactionOptions;
  #host: CommitHost<A> | null = null;
  #mode: CommitMode = 'stopped';
  readonly #waiting = new WaitingWork<A>();
  #commitTimer: NodeJS.Timeout | null = null;
  #commitImmediate: NodeJS.Immediate | null = null;
  /** A claim asked for by new work while slots are free (see requestClaim). */
  #claimImmediate: NodeJS.Immediate | null = null;
  /** The commit under way (it never rejects, but for close()'s). */
  #commitUnderWay: Promise<void> | null = null;
  /** In committing-more-wanted: the commit to ask for at its end. */
  #wantedAfterCommit: CommitKind | null = null;
  #lastGroupCommitAt = -Infinity;
  #failuresInARow = 0;
  /** performance.now() since which another process holds the lock (null: none does). */
  #lockedSince: number | null = null;

  constructor(options: GroupCommitOptions) {
    this.#deliveries = options.deliveries;
    this.#log = options.log;
    this.#health = options.health;
    this.#groupCommitMs = options.groupCommitMs;
    this.#lockWaitMs = options.lockWaitMs ?? DEFAULT_LOCK_WAIT_MS;
    this.#closingOptions = Object.freeze({ durable: true, lockWait: { maxWaitMs: this.#lockWaitMs } });
  }

  /** The current mode (for tests and logs). */
  get mode(): CommitMode {
    return this.#mode;
  }

  /** Starts taking outcomes and requests, with `host` the claim side of each commit. One host at a time. */
  start(host: CommitHost<A>): void {
    if (this.#mode !== 'stopped') throw new Error(`group commit: started while ${this.#mode} (a bug: one dispatcher per group commit)`);
    this.#host = host;
    this.#enterMode('idle');
    this.request();
  }

  /** An attempt ended with its outcome: recorded at the next group commit. */
  attemptEnded(a: A): void {
    this.#waiting.ended.push(a);
    this.request();
  }

  /** An attempt cut short: given back uncounted at the next group commit. */
  attemptCutShort(a: A): void {
    this.#waiting.cutShort.push(a);
    this.request();
  }

  /** A delivery claimed and never started: given back at the next commit (the caller asks for one). */
  giveBack(d: ClaimedDelivery): void {
    this.#waiting.neverStarted.push(d);
  }

  /** Schedules a group commit: at once when the last one is older than the window, else when the window ends. */
  request(): void {
    if (this.#commitTimer !== null || this.#commitImmediate !== null || !this.#accepting()) return;
    const wait = this.#lastGroupCommitAt + this.#groupCommitMs - performance.now();
    if (wait <= 0) this.#commitImmediate = setImmediate(this.#onCommitTimer);
    else this.#commitTimer = setTimeout(this.#onCommitTimer, wait);
    this.#markScheduled();
  }

  /**
   * New work while slots are free: claims at once, without waiting for the group-commit window,
   * in a transaction that claims only (outcomes wait for their group commit) and does not wait
   * for the disk (see OutboxService.flush's `durable`). Under load, when every slot is taken,
   * new work waits for the next group commit.
   */
  requestClaim(): void {
    // A group commit about to run claims too; after a failed commit, its back-off decides.
    if (this.#claimImmediate !== null || this.#commitImmediate !== null || !this.#accepting()) return;
    if (this.#failuresInARow > 0 || this.#lockedSince !== null) this.request();
    else {
      this.#claimImmediate = setImmediate(this.#onClaimTimer);
      this.#markScheduled();
    }
  }

  /** Resolves once the commit under way, if any, has ended. */
  async commitUnderWayEnded(): Promise<void> {
    await this.#commitUnderWay?.catch(() => {});
  }

  /**
   * The last commits at stop: three tries, each waiting up to lockWaitMs for a lock another
   * process holds (the daemon's own waits end when it stops). Nothing is scheduled any more;
   * what could not be recorded is logged (those deliveries are attempted again when their lease
   * lapses).
   */
  async close(): Promise<void> {
    if (this.#mode === 'stopped') return;
    this.#enterMode('closing');
    this.#clearTimers();
    for (let i = 0; i < LAST_COMMIT_TRIES && this.#waiting.size > 0 && !this.#health?.damaged(); i++) {
      await this.#commitUnderWay?.catch(() => {});
      try {
        this.#commitUnderWay = this.#commit('all');
        await this.#commitUnderWay;
      } catch (err) {
        this.#log.error({ err }, 'recording the last outcomes failed');
      }
      this.#commitUnderWay = null;
    }
    if (this.#waiting.size > 0) {
      const w = this.#waiting;
      this.#log.error({ outcomes: w.ended.length, given_back: w.cutShort.length + w.neverStarted.length }, 'some outcomes could not be recorded; those deliveries will be attempted again when their lease lapses');
    }
    this.#wantedAfterCommit = null;
    this.#host = null;
    this.#enterMode('stopped');
  }

  // ── Modes ──

  /** The one place the mode changes: refuses a change the table does not allow (a bug). */
  #enterMode(target: CommitMode): void {
    if (target === this.#mode) return;
    if (!LEGAL[this.#mode].includes(target)) throw new Error(`group commit: no way from ${this.#mode} to ${target} (a bug)`);
    this.#mode = target;
  }

  /** A timer was armed: idle becomes scheduled (a commit under way stays as it is). */
  #markScheduled(): void {
    if (this.#mode === 'idle') this.#enterMode('scheduled');
  }

  /** A timer fired during a commit: its kind is asked for once that commit ends ('all' wins over 'claim'). */
  #wantAnotherCommit(kind: CommitKind): void {
    if (kind === 'all' || this.#wantedAfterCommit === null) this.#wantedAfterCommit = kind;
    this.#enterMode('committing-more-wanted');
  }

  /** A commit ended: scheduled if a timer is armed, else idle; then what was wanted meanwhile is asked for. */
  readonly #commitEnded = (): void => {
    this.#commitUnderWay = null;
    if (!this.#committing()) return; // closing: close() runs what is left
    const again = this.#wantedAfterCommit;
    this.#wantedAfterCommit = null;
    this.#enterMode(this.#timerArmed() ? 'scheduled' : 'idle');
    if (again === 'all') this.request();
    else if (again === 'claim') this.requestClaim();
  };

  #timerArmed(): boolean {
    return this.#commitTimer !== null || this.#commitImmediate !== null || this.#claimImmediate !== null;
  }

  #committing(): boolean {
    return this.#mode === 'committing' || this.#mode === 'committing-more-wanted';
  }

  #accepting(): boolean {
    return this.#mode !== 'stopped' && this.#mode !== 'closing';
  }

  // ── Timers ──

  readonly #onCommitTimer = (): void => {
    this.#commitTimer = null;
    this.#commitImmediate = null;
    this.#startCommitOrDefer('all');
  };

  readonly #onClaimTimer = (): void => {
    this.#claimImmediate = null;
    this.#startCommitOrDefer('claim');
  };

  #clearTimers(): void {
    if (this.#commitTimer !== null) clearTimeout(this.#commitTimer);
    if (this.#commitImmediate !== null) clearImmediate(this.#commitImmediate);
    if (this.#claimImmediate !== null) clearImmediate(this.#claimImmediate);
    this.#commitTimer = null;
    this.#commitImmediate = null;
    this.#claimImmediate = null;
  }

  /** A group commit in `ms`, unless one is scheduled already (a back-off after a failure, a lock wait). */
  #scheduleRetry(ms: number): void {
    if (this.#commitTimer !== null || this.#commitImmediate !== null || !this.#accepting()) return;
    this.#commitTimer = setTimeout(this.#onCommitTimer, ms);
    this.#markScheduled();
  }

  /** The next try after a failure: 100 ms doubling with each failure in a row, up to 5 s. */
  #backOff(): void {
    this.#scheduleRetry(Math.min(100 * 2 ** Math.min(this.#failuresInARow, 6), 5_000));
  }

  /** A timer fired: runs its commit now, or once the one under way has ended. */
  #startCommitOrDefer(kind: CommitKind): void {
    if (this.#health?.damaged()) {
      // Nothing more is written: a schedule with no timer left falls back to idle.
      if (this.#mode === 'scheduled' && !this.#timerArmed()) this.#enterMode('idle');
      return;
    }
    if (this.#committing()) {
      this.#wantAnotherCommit(kind);
      return;
    }
    if (this.#mode !== 'scheduled') return;
    this.#enterMode('committing');
    this.#commitUnderWay = this.#commit(kind)
      .catch((err: unknown) => this.#commitThrew(kind, err))
      .finally(this.#commitEnded);
  }

  /**
   * A commit threw outside its write (a read on a storage fault, or with the database out of
   * reach, say): logged, backed off. A fault of either kind is counted as a failed write is, so
   * that the tries back off and are logged once (and every 20th), not ten times a second.
   */
  #commitThrew(kind: CommitKind, err: unknown): void {
    // A storage fault (a damaged page, say) is logged once by `health`.
    if (this.#health?.failed('dispatch', err) != null) this.#failuresInARow++;
    else if (isTransientStoreError(err)) {
      const failures = ++this.#failuresInARow;
      if (failures === 1 || failures % 20 === 0) this.#log.error({ err, failures }, 'looking for due deliveries failed (the database is out of reach); trying again with a back-off');
    } else {
      this.#log.error({ err }, kind === 'claim' ? 'claiming deliveries failed unexpectedly; trying again shortly' : 'dispatcher flush failed unexpectedly; trying again shortly');
      if (kind === 'claim') this.#failuresInARow++;
    }
    this.#backOff();
  }

  // ── One commit: prepare, write, handle ──

  async #commit(kind: CommitKind): Promise<void> {
    const host = this.#host;
    if (host === null || (kind === 'claim' && !host.claiming())) return;
    const reading = host.refresh();
    if (reading !== null) await reading;
    const prepared = this.#prepare(host, kind);
    // A claim for new work skips the look: the work was just queued, and a claim that finds
    // nothing writes nothing.
    if (prepared.claim !== null && prepared.writes === 0 && kind === 'all') prepared.claim = await host.peek(prepared.claim);
    if (prepared.writes === 0 && prepared.claim === null) {
      // Whatever failed before (a read) answers again.
      this.#failuresInARow = 0;
      host.committed(prepared.batch, null);
      return;
    }
    const { batch, claim } = prepared;
    let result: FlushResult;
    try {
      const work: FlushWork = { finished: batch.ended.map((a) => a.finished!), released: [...batch.cutShort.map((a) => a.delivery), ...batch.neverStarted], claim };
      result = await this.#deliveries.flush(work, this.#mode === 'closing' ? this.#closingOptions : kind === 'claim' ? NOT_DURABLE : DURABLE);
    } catch (err) {
      this.#waiting.putBack(batch);
      const next = this.#judgeFailedWrite(err);
      if (next === 'wait-for-lock') this.#waitForLock();
      else if (next === 'back-off') this.#backOff();
      else await this.#recordOneByOne(host);
      return;
    }
    this.#written(host, kind, batch, result);
  }

  /** The host's preparation, the batch (none for a claim only), and the host's plan of what to claim. */
  #prepare(host: CommitHost<A>, kind: CommitKind): PreparedCommit<A> {
    host.prepare();
    const batch = kind === 'claim' ? EMPTY_BATCH : this.#waiting.takeBatch();
    const writes = batch.ended.length + batch.cutShort.length + batch.neverStarted.length;
    return { batch, writes, claim: host.plan(batch, kind) };
  }

  /** A write succeeded: the failure count and any lock wait end, and the host learns what was claimed. */
  #written(host: CommitHost<A>, kind: CommitKind, batch: CommitBatch<A>, result: FlushResult): void {
    this.#failuresInARow = 0;
    if (this.#lockedSince !== null) this.#lockReleased();
    this.#health?.succeeded('dispatch');
    if (kind === 'all') this.#lastGroupCommitAt = performance.now();
    host.committed(batch, result);
  }

  /** Counts and logs a failed write, and says what follows it. */
  #judgeFailedWrite(err: unknown): AfterFailedWrite {
    if (isDatabaseBusy(err)) return 'wait-for-lock';
    this.#failuresInARow++;
    const failures = this.#failuresInARow;
    if (this.#health?.failed('dispatch', err) != null) {
      // Logged once per state change by `health`; what waits is kept and tried again.
    } else if (isTransientStoreError(err)) {
      // A full disk, or a PostgreSQL server out of reach or restarting: nothing is let go.
      if (failures === 1 || failures % 20 === 0) {
        this.#log.error({ err, outcomes: this.#waiting.ended.length, failures }, 'recording delivery outcomes failed; they are kept and the commit is tried again');
      }
    } else if (failures >= ONE_BY_ONE_AFTER) {
      return 'record-one-by-one';
    } else {
      this.#log.error({ err, outcomes: this.#waiting.ended.length }, 'recording delivery outcomes failed; trying again shortly');
    }
    return 'back-off';
  }

  // ── Another process's lock ──

  /** The store waited for the lock already: log it once, keep what waits, and try again shortly. */
  #waitForLock(): void {
    if (this.#lockedSince === null) {
      this.#lockedSince = performance.now() - this.#lockWaitMs;
      this.#log.warn({ waitedMs: this.#lockWaitMs, outcomes: this.#waiting.ended.length }, 'the database has been locked by another process (a hookrelay CLI command, a backup?) for a while; outcomes are kept and recorded once it is released');
    }
    // The pause only matters while the daemon stops, when the store's own wait ends at once.
    this.#scheduleRetry(BUSY_PAUSE_MS);
  }

  #lockReleased(): void {
    this.#log.info({ waitedMs: Math.round(performance.now() - this.#lockedSince!) }, 'the database lock was released: outcomes recorded');
    this.#lockedSince = null;
  }

  // ── Failures that are neither the disk's nor a lock's ──

  /**
   * After repeated failures that are not about the disk or a lock, records what is waiting one
   * item at a time, so one that cannot be recorded does not hold up the rest: it is logged and
   * let go (its lease lapses and it is attempted again).
   */
  async #recordOneByOne(host: CommitHost<A>): Promise<void> {
    const { ended, cutShort, neverStarted } = this.#waiting.takeBatch();
    let locked = false;
    for (const a of ended) {
      if (locked || !(await this.#recordAlone({ finished: [a.finished!], released: [], claim: null }, a.delivery.id))) {
        locked = true;
        this.#waiting.ended.push(a);
      } else host.recordedAlone(a, false);
    }
    for (const a of cutShort) {
      if (locked || !(await this.#recordAlone({ finished: [], released: [a.delivery], claim: null }, a.delivery.id))) {
        locked = true;
        this.#waiting.cutShort.push(a);
      } else host.recordedAlone(a, true);
    }
    for (const d of neverStarted) {
      if (locked || !(await this.#recordAlone({ finished: [], released: [d], claim: null }, d.id))) {
        locked = true;
        this.#waiting.neverStarted.push(d);
      }
    }
    this.#failuresInARow = 0;
    if (locked) this.#waitForLock();
    else if (host.claiming()) this.request();
  }

  /** Records one item; false (it is kept for the next commit) when the database is locked by another process. */
  async #recordAlone(work: FlushWork, id: number): Promise<boolean> {
    try {
      await this.#deliveries.flush(work);
    } catch (err) {
      if (isDatabaseBusy(err)) return false;
      this.#log.error({ err, delivery: id }, 'this delivery cannot be recorded; it is let go, and will be attempted again when its lease lapses');
    }
    return true;
  }
}

/** A group commit for one dispatcher (see GroupCommit). */
export function createGroupCommit<A extends PendingAttempt>(options: GroupCommitOptions): GroupCommit<A> {
  return new GroupCommit<A>(options);
}

import { setImmediate as yieldToEventLoop, setTimeout as sleep } from 'node:timers/promises';
import type { Logger } from '../log.ts';
import type { Store, Tx } from '../store/repos.ts';
import { noPrunedRows, type PrunedRows } from '../store/values.ts';
import type { StorageHealth } from './storage-health.ts';
import type { AuditContext } from '../domain/audit.ts';
import type { AuditTrail } from './audit.ts';

export type { PrunedRows } from '../store/values.ts';

/** What retention keeps, and for how long (see the `retention.*` configuration keys). */
export interface RetentionPolicy {
  /** Delivered events (with their deliveries and attempts) go this long (ms) after their last delivery. */
  readonly deliveredEventsMs: number;
  /** Quarantined feed lines go this long (ms) after they were read. */
  readonly quarantinedLinesMs: number;
  /** Events looked at (and quarantined lines removed) per transaction. */
  readonly batchSize: number;
  /** Audit trail entries go this long (ms) after they were recorded (with `audit`, see createRetentionService). */
  readonly auditEntriesMs?: number;
}

export interface PruneOptions {
  /** Count what would go, remove nothing. */
  readonly dryRun?: boolean;
  /** Stops between two batches (what was removed so far stays removed). */
  readonly signal?: AbortSignal;
  /**
   * Least wait between two batches (ms), and at least as long as the batch took: lets the
   * daemon's other work (or, from the CLI, the daemon's writes) in. Without it, batches only
   * yield to the event loop.
   */
  readonly pauseMs?: number;
  /**
   * The daemon's mode: a batch waits for a lock another process holds for as long as it takes,
   * until `signal` aborts (the store waits on timers: TransactionOptions.lockWait). Without it,
   * the store's own wait applies (the CLI's: in SQLite, its busy timeout).
   */
  readonly waitForLock?: boolean;
  /** Called before every batch that writes (the daemon turns its background WAL checkpoints on, as for a large ingest). */
  readonly onBatch?: () => void;
  /** Called after every batch with the totals so far and how far the events were looked at (0 to 1). */
  readonly onProgress?: (progress: { removed: PrunedRows; done: number }) => void;
}

export interface PruneResult {
  readonly removed: PrunedRows;
  readonly dryRun: boolean;
  /** Events received before this (epoch ms), and delivered before it, were eligible. */
  readonly deliveredBefore: number;
  readonly quarantinedBefore: number;
  readonly batches: number;
  /** Audit trail entries removed (none in a dry run, nor without the trail). */
  readonly auditEntries: number;
  /** The longest single batch (one transaction, blocking the thread that ran it), ms. */
  readonly longestBatchMs: number;
  readonly elapsedMs: number;
}

/**
 * Retention: removes what no longer serves anyone. Events whose deliveries were all
 * delivered before the cutoff go with their deliveries and attempts; quarantined lines older
 * than theirs go. Never a pending, failing, held or dead delivery, nor the event one of them
 * needs, nor an event that has no delivery (see RetentionRepo). Works in small transactions
 * (`batchSize` events each) separated by a pause, so that neither the daemon's event loop nor
 * its writer is held for long.
 */
export function createRetentionService(store: Store, policy: RetentionPolicy, audit?: { readonly trail: AuditTrail; readonly by: AuditContext }) {
  return {
    policy,
    async prune(options: PruneOptions = {}): Promise<PruneResult> {
      const dryRun = options.dryRun ?? false;
      const started = performance.now();
      const now = store.clock.now();
      const deliveredBefore = now - policy.deliveredEventsMs;
      const quarantinedBefore = now - policy.quarantinedLinesMs;
      const removed = noPrunedRows();
      let batches = 0;
      let longestBatchMs = 0;
      let lastBatchMs = 0;
      const writeOptions = { durable: false, ...(options.waitForLock ? { lockWait: { signal: options.signal } } : {}) };
      const inBatch = async <T>(fn: (tx: Tx) => Promise<T>): Promise<T> => {
        if (!dryRun) options.onBatch?.();
        const t0 = performance.now();
        // A batch lost to a power cut is redone by the next pass: its commit need not wait for the
        // disk's fsync, which is most of what a batch costs (see Store.transaction).
        const result = await (dryRun ? store.read(fn) : store.transaction(fn, writeOptions));
        batches++;
        lastBatchMs = performance.now() - t0;
        longestBatchMs = Math.max(longestBatchMs, lastBatchMs);
        return result;
      };
      // At least as long as the batch took: pruning never takes more than about half of the time.
      const pause = async () => {
        if (options.pauseMs === undefined) await yieldToEventLoop();
        else await sleep(Math.max(options.pauseMs, lastBatchMs), undefined, { signal: options.signal }).catch(() => {});
      };
      const add = (more: PrunedRows) => {
        removed.events += more.events;
        removed.deliveries += more.deliveries;
        removed.attempts += more.attempts;
        removed.quarantinedLines += more.quarantinedLines;
      };

      const newest = await store.read((tx) => tx.retention.newest());
      // Events received at or after the cutoff cannot have been delivered before it.
      const { to } = await store.read((tx) => tx.feed.seqRange(0, deliveredBefore));
      const before = Math.min(to, newest.seq);
      const first = newest.oldestSeq;
      let after = 0;
      while (!options.signal?.aborted) {
        const batch = await inBatch((tx) => tx.retention.pruneEvents({ after, before, cutoff: deliveredBefore, newest, limit: policy.batchSize, dryRun }));
        add(batch.removed);
        if (batch.last === null) break;
        after = batch.last;
        options.onProgress?.({ removed, done: before > first ? Math.min(1, (after - first + 1) / (before - first)) : 1 });
        await pause();
      }

      if (dryRun) {
        removed.quarantinedLines = await store.read((tx) => tx.retention.countRejects(quarantinedBefore, newest.rejectId));
      } else {
        while (!options.signal?.aborted) {
          const n = await inBatch((tx) => tx.retention.pruneRejects(quarantinedBefore, newest.rejectId, policy.batchSize));
          removed.quarantinedLines += n;
          if (n < policy.batchSize) break;
          await pause();
        }
      }
      // The audit trail's old entries, after an anchor that keeps the chain verifiable (services/audit.ts).
      const auditEntries =
        dryRun || audit === undefined || policy.auditEntriesMs === undefined || options.signal?.aborted
          ? 0
          : await audit.trail.prune(audit.by, now - policy.auditEntriesMs, policy.batchSize, options.signal);
      options.onProgress?.({ removed, done: 1 });
      return { removed, dryRun, deliveredBefore, quarantinedBefore, batches, auditEntries, longestBatchMs, elapsedMs: performance.now() - started };
    },
  };
}
export type RetentionService = ReturnType<typeof createRetentionService>;

/** The daemon's least pause between two prune batches (ms); see PruneOptions.pauseMs. */
const DAEMON_PAUSE_MIN_MS = 5;

/**
 * Runs retention in the daemon: a first pass shortly after start, then every `intervalMs`. A
 * pass that fails on a storage fault is tried again after a back-off (and reported to `health`,
 * so /readyz shows it); none runs while the database is damaged.
 */
export function startRetention(o: { retention: RetentionService; intervalMs: number; firstRunMs: number; health: StorageHealth; log: Logger; onBatch?: () => void }) {
  const log = o.log.child({ subsystem: 'retention' });
  const controller = new AbortController();
  let timer: NodeJS.Timeout | null = null;
  let running: Promise<void> | null = null;
  let faults = 0;

  const schedule = (ms: number) => {
    if (controller.signal.aborted) return;
    timer = setTimeout(() => {
      timer = null;
      running = pass().finally(() => (running = null));
    }, ms);
    timer.unref();
  };

  async function pass(): Promise<void> {
    if (o.health.damaged()) return;
    try {
      const result = await o.retention.prune({ signal: controller.signal, pauseMs: DAEMON_PAUSE_MIN_MS, waitForLock: true, ...(o.onBatch ? { onBatch: o.onBatch } : {}) });
      o.health.succeeded('retention');
      faults = 0;
      const { removed } = result;
      const fields = { ...removed, auditEntries: result.auditEntries, batches: result.batches, longestBatchMs: Math.round(result.longestBatchMs * 10) / 10, ms: Math.round(result.elapsedMs) };
      if (removed.events + removed.quarantinedLines + result.auditEntries > 0) log.info(fields, 'retention: removed delivered events and quarantined lines past their retention');
      else log.debug(fields, 'retention: nothing to remove');
      schedule(o.intervalMs);
    } catch (err) {
      if (controller.signal.aborted) return;
      if (o.health.failed('retention', err) !== null) {
        faults++;
        schedule(Math.min(1000 * 2 ** Math.min(faults, 5), o.intervalMs));
        return;
      }
      log.error({ err }, `retention pass failed; trying again in ${Math.round(o.intervalMs / 1000)} s`);
      schedule(o.intervalMs);
    }
  }

  schedule(o.firstRunMs);
  return {
    /** Stops between two batches; resolves when the pass under way (if any) has stopped. */
    async stop(): Promise<void> {
      controller.abort();
      if (timer !== null) clearTimeout(timer);
      timer = null;
      await running;
    },
  };
}

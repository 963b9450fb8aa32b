import { stat } from 'node:fs/promises';
import { setImmediate as yieldToEventLoop } from 'node:timers/promises';
import { ratePermits } from '../domain/rate-window.ts';
import type { WebhookStatus } from '../domain/types.ts';
import type { Store } from '../store/repos.ts';
import { healthReport, type WebhookHealthReport } from './webhooks.ts';

/**
 * Rows counted per query when a queue is counted: short enough a hold of the event loop per
 * chunk with a million queued deliveries (scripts/bench-metrics.ts; docs/benchmarks.md, "Figures behind the code's choices").
 */
export const COUNT_CHUNK_ROWS = 10_000;
/** A webhook's due retries waiting for its rate limit are counted up to this (one bounded read). */
export const RATE_WAITING_RETRIES_MAX = 100_000;

/** One organization's pending deliveries. */
export interface OrgQueue {
  readonly orgId: string;
  readonly webhookStatus: WebhookStatus;
  /** Never attempted (and not being attempted). */
  readonly fresh: number;
  /** Attempted at least once and waiting for a retry, or being attempted now. */
  readonly tried: number;
  /** When its oldest due delivery became due (epoch ms); null when none is due. Null for a disabled webhook (nothing of it is due). */
  readonly oldestDueAt: number | null;
  /** Its rate limit, deliveries per second; null: none. */
  readonly rateLimit: number | null;
  /**
   * Deliveries due now that wait because its rate limit is reached (new ones, and retries due,
   * these counted up to RATE_WAITING_RETRIES_MAX); 0 while it is not reached.
   */
  readonly rateLimited: number;
}

export interface QueueSnapshot {
  /** Epoch ms, when the count started. */
  readonly at: number;
  readonly organizations: readonly OrgQueue[];
  /** Pending deliveries of webhooks that are not disabled: never attempted (`new`), attempted (`retrying`); and all pending deliveries of disabled webhooks (`held`). */
  readonly totals: { readonly new: number; readonly retrying: number; readonly held: number; readonly rateLimited: number };
  /** The oldest due delivery of all (epoch ms), or null. */
  readonly oldestDueAt: number | null;
}

/** The feed file the daemon tails, against what has been committed of it. */
export interface FeedReport {
  readonly path: string;
  /** Byte offset just past the last committed line of the file it describes, or null before the first commit. */
  readonly position: number | null;
  /** Size of the file now at `path`, or null when there is none. */
  readonly size: number | null;
  /**
   * Bytes not yet committed: the file's size minus the committed position when the position is
   * of this file; the whole file when it is a new one (rotated: the rest of the old file, if
   * any is left, is not counted); 0 when there is no file.
   */
  readonly lagBytes: number;
  /** The committed position is of another file than the one at `path` (rotation or replacement). */
  readonly rotated: boolean;
  readonly accepted: number;
  readonly duplicates: number;
  readonly quarantined: number;
  /** Epoch ms of the last commit from this feed, or null. */
  readonly updatedAt: number | null;
}

export interface WebhookReport extends WebhookHealthReport {
  readonly orgId: string;
  readonly url: string;
  readonly status: WebhookStatus;
  /** Deliveries per second at most; null: no limit. */
  readonly rateLimit: number | null;
  /** Its deliveries sent after a later change of their request (several instances; 0 on SQLite). */
  readonly outOfOrderDeliveries: number;
}

export interface StatusServiceOptions {
  /** `delivery.disableAfter`, ms. */
  readonly disableAfterMs: number;
  /** Rows per counting query (tests use small chunks). */
  readonly chunkRows?: number;
}

/**
 * Read-only reports of what the daemon is doing, for `hookrelay status` and the metrics: the
 * delivery queue, the webhooks' health, the feed's lag. Nothing here scales with the backlog
 * on the event loop: the queue is counted a chunk at a time through partial indexes, yielding
 * in between, and everything else is a few index lookups per organization.
 */
export function createStatusService(store: Store, options: StatusServiceOptions) {
  const chunk = options.chunkRows ?? COUNT_CHUNK_ROWS;

  async function countPending(orgId: string, kind: 'fresh' | 'tried'): Promise<number> {
    let total = 0;
    let after = 0;
    for (;;) {
      const { n, last } = await store.read((tx) => tx.deliveries.countPendingChunk(orgId, kind, after, chunk));
      total += n;
      if (n < chunk) return total;
      after = last;
      await yieldToEventLoop();
    }
  }

  return {
    /**
     * Counts the pending deliveries of every webhook, and finds the oldest due one. Yields to
     * the event loop between chunks, so the counts are approximate by the deliveries that
     * change state meanwhile (at most a few per millisecond of counting).
     */
    async queue(): Promise<QueueSnapshot> {
      const now = store.clock.now();
      const organizations: OrgQueue[] = [];
      const totals = { new: 0, retrying: 0, held: 0, rateLimited: 0 };
      let oldestDueAt: number | null = null;
      // Which webhooks have reached their rate limit now (in the clock their windows are kept in).
      const reached = new Set((await store.read((tx) => tx.webhooks.rateStates(now))).filter((r) => ratePermits(r.window, r.limit, r.now).permits === 0).map((r) => r.orgId));
      for (const w of await store.read((tx) => tx.webhooks.listWithHealth())) {
        const fresh = await countPending(w.orgId, 'fresh');
        const tried = await countPending(w.orgId, 'tried');
        const disabled = w.status === 'disabled';
        const dueAt = disabled ? null : await store.read((tx) => tx.deliveries.oldestDueAt(w.orgId, now));
        const rateLimited = disabled || !reached.has(w.orgId) ? 0 : fresh + (await store.read((tx) => tx.deliveries.countDueRetries(w.orgId, now, RATE_WAITING_RETRIES_MAX)));
        organizations.push({ orgId: w.orgId, webhookStatus: w.status, fresh, tried, oldestDueAt: dueAt, rateLimit: w.rateLimit, rateLimited });
        totals.rateLimited += rateLimited;
        if (disabled) totals.held += fresh + tried;
        else {
          totals.new += fresh;
          totals.retrying += tried;
        }
        if (dueAt !== null && (oldestDueAt === null || dueAt < oldestDueAt)) oldestDueAt = dueAt;
      }
      return { at: now, organizations, totals, oldestDueAt };
    },

    /** Every webhook with its health (why it is failing or disabled), by organization id. */
    webhooks(): Promise<WebhookReport[]> {
      return store.read(async (tx) => {
        const reports: WebhookReport[] = [];
        for (const w of await tx.webhooks.listWithHealth()) reports.push({ orgId: w.orgId, url: w.url, status: w.status, rateLimit: w.rateLimit, outOfOrderDeliveries: w.outOfOrderDeliveries, ...(await healthReport(tx, w, options.disableAfterMs)) });
        return reports;
      });
    },

    /** How many webhooks have each status. */
    async webhookCounts(): Promise<Record<WebhookStatus, number>> {
      const counts: Record<WebhookStatus, number> = { active: 0, failing: 0, disabled: 0 };
      for (const w of await store.read((tx) => tx.webhooks.listWithHealth())) counts[w.status]++;
      return counts;
    },

    /** The feed file at `path` (absolute, as config.feed.path) against its committed position. */
    async feed(path: string): Promise<FeedReport> {
      const { saved, stats } = await store.read(async (tx) => ({ saved: await tx.feed.getPosition(path), stats: (await tx.feed.stats()).find((s) => s.source === path) }));
      let file: { size: number; dev: string; ino: string } | null = null;
      try {
        const st = await stat(path, { bigint: true });
        if (st.isFile()) file = { size: Number(st.size), dev: String(st.dev), ino: String(st.ino) };
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
      }
      const sameFile = file !== null && saved !== null && saved.dev === file.dev && saved.ino === file.ino;
      const lagBytes = file === null ? 0 : sameFile ? Math.max(0, file.size - saved.position) : file.size;
      return {
        path,
        position: saved?.position ?? null,
        size: file?.size ?? null,
        lagBytes,
        rotated: file !== null && saved !== null && !sameFile,
        accepted: stats?.accepted ?? 0,
        duplicates: stats?.duplicates ?? 0,
        quarantined: stats?.quarantined ?? 0,
        updatedAt: stats?.updatedAt ?? null,
      };
    },
  };
}
export type StatusService = ReturnType<typeof createStatusService>;

import { readFileSync } from 'node:fs';
import { collectDefaultMetrics, Counter, Gauge, Histogram, Registry } from 'prom-client';
import type { Config } from '../config/load.ts';
import { METRICS_TOKEN_PATTERN } from '../config/schema.ts';
import { ErrorCode, HookrelayError } from '../domain/errors.ts';
import { AttemptError, isSuccess } from '../domain/retry-policy.ts';
import { WebhookStatus } from '../domain/types.ts';
import type { Logger } from '../log.ts';
import type { CertificateExpiry } from '../domain/certificate-expiry.ts';
import type { ProviderKeys } from '../services/provider-keys.ts';
import type { FinishedAttempt } from '../services/outbox.ts';
import type { IngestCounts } from '../services/ingest.ts';
import type { FeedReport, QueueSnapshot, StatusService } from '../services/status.ts';

/**
 * The daemon's Prometheus metrics (docs/metrics.md lists them, with what to alert on).
 *
 * - Counters are incremented where the thing happens, once per committed batch (an ingest
 *   batch, a group commit of delivery outcomes), through children bound to their labels once,
 *   so the hot paths pay a few additions per batch and one histogram observation per attempt.
 * - Gauges that come from the database (queue depth, oldest due delivery, webhook status) are
 *   read when Prometheus scrapes, at most once per `refreshIntervalMs` (scrapes in between get
 *   the last values), through partial indexes and a chunked count (see services/status.ts).
 * - Node's process metrics are prom-client's defaults, under their usual names (process_*, nodejs_*).
 *
 * Counters count what this process did since it started (Prometheus' rate() handles restarts);
 * what another process does (`hookrelay ingest`, say) shows in the gauges only.
 */
export interface Metrics {
  readonly contentType: string;
  /** The text exposition of every metric. */
  render(): Promise<string>;
  /** After an ingest batch has committed. */
  ingested(counts: IngestCounts): void;
  /** After a group commit of delivery outcomes: the attempts it recorded, and how many unsendable rows it marked dead. */
  recorded(finished: readonly FinishedAttempt[], unsendable: number): void;
  /** After a commit that claimed `n` deliveries out of their request's order (see FlushResult.outOfOrder). */
  outOfOrder(n: number): void;
}

export interface MetricsOptions {
  readonly status: StatusService;
  /** The feed file the daemon tails (for the lag), or null when it reads standard input. */
  readonly feedPath: string | null;
  readonly refreshIntervalMs: number;
  /** Export hookrelay_webhook_status per organization. */
  readonly perOrganization: boolean;
  readonly version: string;
  readonly log: Logger;
  /** The feed reader's failures (see FeedReaderFaults), read when scraped. */
  readonly feedReader?: { readonly failures: number; readonly stuck: boolean };
  /** auth.provider's keys, when a provider is set. */
  readonly providerKeys?: Pick<ProviderKeys, 'fetches' | 'health'>;
  /** The span export's counts (tracing/span-export.ts), read when scraped; absent while tracing is off. */
  readonly spanExport?: { readonly exported: number; readonly dropped: Readonly<Record<string, number>> };
  /** The client certificates deliveries may present (webhooks' and the operator's), read with the other database gauges. */
  readonly clientCertificates?: () => Promise<readonly CertificateExpiry[]>;
}

/** Attempt durations: from a fast local receiver to the longest attempt deadline (delivery.timeout, at most 120 s). */
export const ATTEMPT_SECONDS_BUCKETS = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 15, 30, 60, 120];
const OUTCOMES = ['delivered', 'retry', 'dead', 'disabled'] as const;
const WEBHOOK_STATUSES = Object.values(WebhookStatus);

interface Snapshot {
  readonly queue: QueueSnapshot;
  readonly feed: FeedReport | null;
  readonly certificates: readonly CertificateExpiry[];
  readonly seconds: number;
}

export function createMetrics(options: MetricsOptions): Metrics {
  const registry = new Registry();
  collectDefaultMetrics({ register: registry });
  new Gauge({ name: 'hookrelay_build_info', help: 'Always 1; the version of hookrelay that runs.', labelNames: ['version'], registers: [registry] }).set({ version: options.version }, 1);
  const counters = registerEventCounters(registry);
  registerDatabaseGauges(registry, options);
  if (options.feedReader !== undefined) registerFeedReaderMetrics(registry, options.feedReader);
  if (options.providerKeys !== undefined) registerProviderMetrics(registry, options.providerKeys, () => Date.now());
  if (options.spanExport !== undefined) registerSpanExportMetrics(registry, options.spanExport);
  return { contentType: registry.contentType, render: () => registry.metrics(), ...counters };
}

/** The counters of what this process does, incremented once per committed batch (an ingest batch, a group commit of outcomes). */
function registerEventCounters(registry: Registry): Pick<Metrics, 'ingested' | 'recorded' | 'outOfOrder'> {
  const ingested = new Counter({ name: 'hookrelay_events_ingested_total', help: 'Feed lines stored as new events by this process.', registers: [registry] });
  const duplicates = new Counter({ name: 'hookrelay_events_duplicate_total', help: 'Feed lines that repeated an event already stored (counted, not stored again).', registers: [registry] });
  const quarantined = new Counter({ name: 'hookrelay_feed_lines_quarantined_total', help: 'Feed lines refused and kept in quarantine (hookrelay feed rejects).', registers: [registry] });
  const undeliverable = new Counter({ name: 'hookrelay_events_undeliverable_total', help: 'Events stored for an organization without a webhook: nothing was queued for them.', registers: [registry] });
  const traceIgnored = new Counter({
    name: 'hookrelay_feed_trace_context_ignored_total',
    help: "Feed lines whose traceparent or tracestate was malformed and left out: the event is kept, without the producer's trace (docs/feed.md).",
    registers: [registry],
  });
  const attempts = new Counter({ name: 'hookrelay_delivery_attempts_total', help: 'Delivery attempts recorded, by outcome: delivered, retry (failed, scheduled again), dead (failed with no retry left, or a request no retry can send: invalid_request), disabled (410 Gone: held, webhook disabled).', labelNames: ['outcome'], registers: [registry] });
  const failures = new Counter({ name: 'hookrelay_delivery_attempt_failures_total', help: 'Failed delivery attempts, by kind of error.', labelNames: ['error'], registers: [registry] });
  const unsendable = new Counter({ name: 'hookrelay_deliveries_unsendable_total', help: 'Deliveries marked dead without an attempt because their stored event cannot become a request body.', registers: [registry] });
  const outOfOrder = new Counter({
    name: 'hookrelay_out_of_order_deliveries_total',
    help: 'Deliveries this process claimed after a later change of their request had already been sent (several instances on PostgreSQL: stored later than delivery.reorderWindow allows for). They are sent all the same.',
    registers: [registry],
  });
  const duration = new Histogram({ name: 'hookrelay_delivery_attempt_duration_seconds', help: 'Duration of delivery attempts (connect, send, response), by result: success (2xx) or failure.', labelNames: ['result'], buckets: ATTEMPT_SECONDS_BUCKETS, registers: [registry] });
  const byOutcome = Object.fromEntries(OUTCOMES.map((o) => [o, attempts.labels({ outcome: o })])) as Record<(typeof OUTCOMES)[number], Counter.Internal>;
  const byError = new Map(Object.values(AttemptError).map((e) => [e as string, failures.labels({ error: e })]));
  const succeeded = duration.labels({ result: 'success' });
  const failed = duration.labels({ result: 'failure' });
  // Every series exists from the start, at 0: rate() and alerts see the first increment.
  for (const child of [...Object.values(byOutcome), ...byError.values()]) child.inc(0);

  return {
    ingested(counts) {
      if (counts.accepted > 0) ingested.inc(counts.accepted);
      if (counts.duplicates > 0) duplicates.inc(counts.duplicates);
      if (counts.quarantined > 0) quarantined.inc(counts.quarantined);
      if (counts.undeliverable > 0) undeliverable.inc(counts.undeliverable);
      if (counts.traceContextIgnored !== undefined) traceIgnored.inc(counts.traceContextIgnored);
    },
    recorded(finished, unsendableCount) {
      let delivered = 0;
      let retry = 0;
      let dead = 0;
      let disabled = 0;
      for (const f of finished) {
        const kind = f.outcome.kind;
        if (kind === 'delivered') delivered++;
        else if (kind === 'retry') retry++;
        else if (kind === 'dead') dead++;
        else disabled++;
        const seconds = f.result.durationMs / 1000;
        if (isSuccess(f.result)) succeeded.observe(seconds);
        else {
          failed.observe(seconds);
          if (f.result.error !== null) byError.get(f.result.error)?.inc();
        }
      }
      if (delivered > 0) byOutcome.delivered.inc(delivered);
      if (retry > 0) byOutcome.retry.inc(retry);
      if (dead > 0) byOutcome.dead.inc(dead);
      if (disabled > 0) byOutcome.disabled.inc(disabled);
      if (unsendableCount > 0) unsendable.inc(unsendableCount);
    },
    outOfOrder(n) {
      if (n > 0) outOfOrder.inc(n);
    },
  };
}

/**
 * The gauges read from the database when Prometheus scrapes, at most once per refresh interval
 * (scrapes in between get the last values; one read at a time, shared by concurrent scrapes).
 */
function registerDatabaseGauges(registry: Registry, options: MetricsOptions): void {
  const log = options.log.child({ subsystem: 'metrics' });
  let snapshot: Snapshot | null = null;
  let snapshotMono = -Infinity;
  let pending: Promise<Snapshot | null> | null = null;
  const refreshErrors = new Counter({
    name: 'hookrelay_metrics_refresh_errors_total',
    help: 'Reads of the database gauges that failed (the gauges are then left out of the scrape).',
    registers: [registry],
    // After this scrape's read, so that a failure shows in the scrape it spoiled.
    async collect() {
      await current();
    },
  });

  async function take(): Promise<Snapshot> {
    const started = performance.now();
    const queue = await options.status.queue();
    const feed = options.feedPath === null ? null : await options.status.feed(options.feedPath);
    const certificates = options.clientCertificates === undefined ? [] : await options.clientCertificates();
    return { queue, feed, certificates, seconds: (performance.now() - started) / 1000 };
  }

  /** The last snapshot if it is fresh enough, else a new one (one read at a time, shared by concurrent scrapes). */
  function current(): Promise<Snapshot | null> {
    if (snapshot !== null && performance.now() - snapshotMono < options.refreshIntervalMs) return Promise.resolve(snapshot);
    pending ??= take()
      .then(
        (s) => {
          snapshot = s;
          snapshotMono = performance.now();
          return s;
        },
        (err: unknown) => {
          refreshErrors.inc();
          log.warn({ err }, 'reading the metrics gauges from the database failed; they are left out of this scrape');
          snapshot = null;
          return null;
        },
      )
      .finally(() => {
        pending = null;
      });
    return pending;
  }

  /**
   * A gauge filled from the last snapshot when scraped: cleared first, so that a failed read
   * leaves it out of the scrape and an organization that is gone loses its series.
   */
  function snapshotGauge(name: string, help: string, labelNames: readonly string[], fill: (set: (labels: Record<string, string>, value: number) => void, s: Snapshot) => void): void {
    new Gauge({
      name,
      help,
      labelNames,
      registers: [registry],
      async collect() {
        const s = await current();
        this.reset();
        if (s !== null) fill((labels, value) => this.set(labels, value), s);
      },
    });
  }

  snapshotGauge(
    'hookrelay_queue_depth',
    'Pending deliveries: new (never attempted) and retrying (attempted, waiting for a retry or in flight) of webhooks that are not disabled; held: all pending deliveries of disabled webhooks.',
    ['state'],
    (set, s) => {
      set({ state: 'new' }, s.queue.totals.new);
      set({ state: 'retrying' }, s.queue.totals.retrying);
      set({ state: 'held' }, s.queue.totals.held);
    },
  );
  snapshotGauge('hookrelay_queue_oldest_due_age_seconds', 'How long the oldest delivery that is due (of a webhook not disabled) has been waiting; 0 when none is due.', [], (set, s) =>
    set({}, s.queue.oldestDueAt === null ? 0 : Math.max(0, s.queue.at - s.queue.oldestDueAt) / 1000),
  );
  snapshotGauge(
    'hookrelay_deliveries_rate_limited',
    'Deliveries due now that wait because their webhook has reached its rate limit (new ones, and retries due): not claimed, not attempted, not failed.',
    [],
    (set, s) => set({}, s.queue.totals.rateLimited),
  );
  snapshotGauge('hookrelay_webhooks', 'Webhooks by status: active, failing, disabled.', ['status'], (set, s) => {
    for (const status of WEBHOOK_STATUSES) set({ status }, s.queue.organizations.filter((o) => o.webhookStatus === status).length);
  });
  if (options.perOrganization) {
    snapshotGauge('hookrelay_webhook_status', "1 for the webhook's current status, 0 for the others: three series per organization with a webhook.", ['org', 'status'], (set, s) => {
      for (const o of s.queue.organizations) for (const status of WEBHOOK_STATUSES) set({ org: o.orgId, status }, o.webhookStatus === status ? 1 : 0);
    });
    snapshotGauge('hookrelay_webhook_rate_limited', 'Deliveries due now that wait for the rate limit of this organization\'s webhook; one series per organization whose webhook has a rate limit.', ['org'], (set, s) => {
      for (const o of s.queue.organizations) if (o.rateLimit !== null) set({ org: o.orgId }, o.rateLimited);
    });
  }
  if (options.feedPath !== null) {
    snapshotGauge('hookrelay_feed_lag_bytes', 'Bytes of the feed file not yet committed: its size minus the committed position (the whole file after a rotation).', [], (set, s) => {
      if (s.feed !== null) set({}, s.feed.lagBytes);
    });
  }
  if (options.clientCertificates !== undefined) {
    snapshotGauge(
      'hookrelay_webhook_client_certificate_expiry_seconds',
      'When each client certificate deliveries present expires (Unix time, seconds): a webhook\'s own (source="webhook") or the operator\'s (source="operator"; org="*" for delivery.clientCertificate). Alert on it minus time().',
      ['org', 'source'],
      (set, s) => {
        for (const c of s.certificates) set({ org: c.orgId ?? '*', source: c.source }, Math.floor(c.notAfter / 1000));
      },
    );
  }
  snapshotGauge('hookrelay_metrics_refresh_seconds', 'How long the last read of the database gauges took (they are read at most once per metrics.refreshInterval).', [], (set, s) => set({}, s.seconds));

}

/** The identity provider's JWKS: fetches by outcome, and how old the keys in use are. */
function registerProviderMetrics(registry: Registry, keys: NonNullable<MetricsOptions['providerKeys']>, now: () => number): void {
  new Counter({
    name: 'hookrelay_identity_provider_jwks_fetches_total',
    help: "Fetches of the identity provider's JWKS (with its discovery document), by outcome: ok, unreachable (no answer, TLS or HTTP error, refused address), no_usable_key, invalid (not a JWKS, discovery issuer mismatch).",
    labelNames: ['outcome'],
    registers: [registry],
    collect() {
      this.reset();
      for (const [outcome, count] of Object.entries(keys.fetches)) this.inc({ outcome }, count);
    },
  });
  new Gauge({
    name: 'hookrelay_identity_provider_keys_age_seconds',
    help: "Seconds since the identity provider's keys were last fetched successfully; past auth.provider.maxStale its tokens are refused. Absent before the first fetch that worked.",
    registers: [registry],
    collect() {
      this.reset();
      const { fetchedAt } = keys.health();
      if (fetchedAt !== null) this.set((now() - fetchedAt) / 1000);
    },
  });
  new Gauge({
    name: 'hookrelay_identity_provider_keys_usable',
    help: "Whether the identity provider's keys verify its tokens (1), or none were fetched or they are older than auth.provider.maxStale (0).",
    registers: [registry],
    collect() {
      this.set(keys.health().state === 'unavailable' ? 0 : 1);
    },
  });
}

/** The spans exported to the collector, and those dropped by why: read from the span export's counts when scraped. */
function registerSpanExportMetrics(registry: Registry, counts: NonNullable<MetricsOptions['spanExport']>): void {
  new Counter({
    name: 'hookrelay_trace_spans_exported_total',
    help: 'Spans the collector took (OTLP export answered with success).',
    registers: [registry],
    collect() {
      this.reset();
      this.inc(counts.exported);
    },
  });
  new Counter({
    name: 'hookrelay_trace_spans_dropped_total',
    help: 'Spans that never reached the collector, by reason: queue_full (tracing.maxQueueSize spans were waiting: a collector down or slow, or a burst), export_failed (the collector refused them, or did not answer within tracing.timeout), shutdown (still queued when the daemon stopped). Delivery never waits for the collector.',
    labelNames: ['reason'],
    registers: [registry],
    collect() {
      this.reset();
      for (const [reason, n] of Object.entries(counts.dropped)) this.inc({ reason }, n);
    },
  });
}

/** The feed reader's failures: read from FeedReaderFaults when scraped. */
function registerFeedReaderMetrics(registry: Registry, reader: NonNullable<MetricsOptions['feedReader']>): void {
  new Counter({
    name: 'hookrelay_feed_reader_failures_total',
    help: 'Times the feed reader failed and restarted from the committed position (a bad line never makes it fail: it is quarantined).',
    registers: [registry],
    collect() {
      this.reset();
      this.inc(reader.failures);
    },
  });
  new Gauge({
    name: 'hookrelay_feed_reader_stuck',
    help: 'Whether the feed reader keeps failing at one position (1) and reads nothing after it; /readyz answers 503 meanwhile.',
    registers: [registry],
    collect() {
      this.set(reader.stuck ? 1 : 0);
    },
  });
}

/** The bearer token /metrics requires: metrics.token, else the content of metrics.tokenFile, else null. */
export function loadMetricsToken(config: Pick<Config, 'metrics'>): string | null {
  const { token, tokenFile } = config.metrics;
  if (token !== null) return token;
  if (tokenFile === null) return null;
  let text: string;
  try {
    text = readFileSync(tokenFile, 'utf8').trim();
  } catch (err) {
    throw new HookrelayError(ErrorCode.config, `cannot read metrics.tokenFile ${tokenFile}: ${(err as NodeJS.ErrnoException).code ?? String(err)}`);
  }
  if (!METRICS_TOKEN_PATTERN.test(text)) {
    throw new HookrelayError(ErrorCode.config, `metrics.tokenFile ${tokenFile} must hold a token of at least 16 characters of letters, digits and -._~+/ (openssl rand -hex 32 makes one)`);
  }
  return text;
}

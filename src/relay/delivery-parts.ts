import type { Config } from '../config/load.ts';
import { createEgressProxies } from '../domain/egress-proxy.ts';
import { createNetworkPolicies } from '../domain/address-policy.ts';
import type { RetryPolicy } from '../domain/retry-policy.ts';
import { createDeliverer } from '../dispatch/deliverer.ts';
import { AttemptTracing } from '../dispatch/attempt-tracing.ts';
import { createDispatcher } from '../dispatch/dispatcher.ts';
import type { Metrics } from '../metrics/metrics.ts';
import type { FlushResult, FlushWork, OutboxService } from '../services/outbox.ts';
import { createRetentionService, startRetention } from '../services/retention.ts';
import { systemAuditContext } from '../services/audit.ts';
import { certificateExpiries, createReceiverCredentials } from '../services/receiver-credentials.ts';
import { daysLeft, expirySentence, expiryState } from '../domain/certificate-expiry.ts';
import { iso } from '../domain/iso.ts';
import { DELIVERY_USER_AGENT } from '../version.ts';
import type { DaemonPart } from './parts.ts';
import type { Wiring } from './wiring.ts';

/** A claimed delivery's lease is the attempt deadline plus this. */
export const LEASE_MARGIN_MS = 10_000;

export function retryPolicyFrom(config: Config): RetryPolicy {
  return {
    scheduleMs: config.delivery.retrySchedule,
    jitter: config.delivery.jitterPercent / 100,
    minBackoffAfterThrottleMs: 60_000,
    maxRetryAfterMs: config.delivery.maxRetryAfter,
  };
}

/**
 * How often the daemon gives the C heap's free pages back to the system while it delivers.
 * Delivery allocates and frees per attempt (TLS records, HTTP parsing, SQLite rows), and glibc
 * keeps what was freed in its arenas; a release gives a good part of it back, in a few
 * milliseconds (docs/benchmarks.md, "Memory").
 */
export const STEADY_RELEASE_MS = 30_000;

/** The HTTP client of deliveries: its network policies, its proxies, one TLS context. */
export function deliverer(w: Wiring): DaemonPart {
  return {
    name: 'deliverer',
    start() {
      const { config, log } = w;
      const proxies = createEgressProxies(config.delivery);
      // The proxies' origins only: their credentials are never logged.
      if (proxies.all.length > 0) log.info({ proxies: proxies.all.map((p) => p.shown), target: config.delivery.proxyTarget }, 'deliveries go through an egress proxy');
      w.deliverer.set(
        createDeliverer({
          networks: createNetworkPolicies(config.delivery),
          clock: w.clock,
          timeoutMs: config.delivery.timeout,
          allowHttp: config.delivery.allowHttp,
          userAgent: DELIVERY_USER_AGENT,
          extraCa: w.keys.get().extraCa,
          concurrency: config.delivery.concurrency,
          proxies,
          proxyTarget: config.delivery.proxyTarget,
          credentials: createReceiverCredentials(w.store.get(), w.services.get().vault),
          operatorCertificates: w.keys.get().operatorCertificates,
        }),
      );
    },
    async stop() {
      await w.deliverer.take()?.close();
    },
  };
}

/** Counts the outcomes of a group commit that succeeded (see OutboxService.flush). */
function counted(result: FlushResult, work: FlushWork, metrics: Metrics): FlushResult {
  metrics.recorded(work.finished, result.unsendable.length);
  metrics.outOfOrder(result.outOfOrder.length);
  return result;
}

/**
 * Claims due deliveries and runs their attempts; stopped before the deliverer and the API, with
 * the attempts in flight given up to the stop's deadline. While it delivers, the C heap's free
 * pages are given back every STEADY_RELEASE_MS.
 */
export function dispatcher(w: Wiring): DaemonPart {
  let releaseTimer: NodeJS.Timeout | null = null;
  return {
    name: 'dispatcher',
    start() {
      const { config, log } = w;
      const deliveries = w.services.get().outbox;
      const metrics = w.metrics.peek();
      const path = w.ingestPath.get();
      // Attempts recorded since the last release of memory (see STEADY_RELEASE_MS).
      let recordedSinceRelease = 0;
      releaseTimer = setInterval(() => {
        if (recordedSinceRelease === 0) return;
        recordedSinceRelease = 0;
        path.releaseMemory();
      }, STEADY_RELEASE_MS);
      releaseTimer.unref();
      const store = w.store.get();
      const tracing = w.tracing.peek();
      w.dispatcher.set(
        createDispatcher({
          // The outbox with its flushes counted; each method delegated by name (the outbox is a
          // class: a spread would copy none of its methods).
          deliveries: {
            async flush(work, options) {
              // Outcomes are counted once their group commit has succeeded.
              const result = await deliveries.flush(work, options);
              recordedSinceRelease += work.finished.length;
              return metrics === null ? result : counted(result, work, metrics);
            },
            logDeliveredSummary: () => deliveries.logDeliveredSummary(),
            peek: (orgIds) => deliveries.peek(orgIds),
            deliverableWebhooks: () => deliveries.deliverableWebhooks(),
          } satisfies OutboxService,
          deliverer: w.deliverer.get(),
          work: w.work,
          policy: retryPolicyFrom(config),
          clock: w.clock,
          log,
          sharedDatabase: store.shared,
          concurrency: config.delivery.concurrency,
          perWebhookConcurrency: config.delivery.perWebhookConcurrency,
          // An attempt (in-attempt reconnects included) ends at its deadline; the margin covers
          // recording it. So only a crash lets a lease lapse.
          leaseMs: config.delivery.timeout + LEASE_MARGIN_MS,
          // Nothing is sent on a lease that could lapse before its attempt ends (AttemptRunner.start).
          attemptTimeoutMs: config.delivery.timeout,
          pollIntervalMs: config.delivery.pollInterval,
          groupCommitMs: config.delivery.groupCommitInterval,
          health: w.health,
          lockWaitMs: config.database.busyTimeout,
          tracing: tracing === null ? null : new AttemptTracing(tracing.tracer, { propagate: tracing.propagate }),
        }),
      ).start();
    },
    async stop(deadlineMs) {
      if (releaseTimer !== null) clearInterval(releaseTimer);
      releaseTimer = null;
      await w.dispatcher.take()?.stop(deadlineMs);
    },
  };
}

/** Removes delivered events and old quarantined lines on a timer (retention.enabled). */
export function retention(w: Wiring): DaemonPart {
  let running: { stop(): Promise<void> } | null = null;
  return {
    name: 'retention',
    start() {
      const { config } = w;
      if (!config.retention.enabled) return;
      const path = w.ingestPath.get();
      const policy = {
        deliveredEventsMs: config.retention.deliveredEvents,
        quarantinedLinesMs: config.retention.quarantinedLines,
        auditEntriesMs: config.retention.auditEntries,
        batchSize: config.retention.batchSize,
      };
      const service = createRetentionService(w.store.get(), policy, { trail: w.services.get().audit, by: systemAuditContext('retention') });
      running = startRetention({
        retention: service,
        intervalMs: config.retention.interval,
        firstRunMs: Math.min(config.retention.interval, 60_000),
        health: w.health,
        log: w.log,
        // Pruning writes a burst of WAL, as a large ingest does: checkpoints on their own thread meanwhile.
        onBatch: () => path.checkpointsBusy(),
      });
    },
    async stop() {
      await running?.stop();
      running = null;
    },
  };
}


/** How often the daemon looks for client certificates near their expiry (and at start). */
export const CERTIFICATE_CHECK_MS = 12 * 3_600_000;

/**
 * Warns of the client certificates deliveries present that expire within
 * delivery.clientCertificateExpiryWarning (or have expired), at start and every 12 hours: a
 * webhook's own (its organization registers a new one) and the operator's (a file to replace).
 */
export function certificateExpiry(w: Wiring): DaemonPart {
  let timer: NodeJS.Timeout | null = null;
  return {
    name: 'certificate expiry',
    start() {
      const warnMs = w.config.delivery.clientCertificateExpiryWarning;
      if (warnMs === 0) return;
      const log = w.log.child({ subsystem: 'dispatch' });
      const check = async () => {
        const now = w.clock.now();
        for (const e of await certificateExpiries(w.store.get(), w.keys.get().operatorCertificates)) {
          const state = expiryState(e, now, warnMs);
          if (state === 'valid') continue;
          log.warn({ org: e.orgId, source: e.source, fingerprint: e.fingerprintSha256, notAfter: iso(e.notAfter), daysLeft: daysLeft(e, now) }, expirySentence(e, now));
        }
      };
      const run = () => void check().catch((err: unknown) => log.warn({ err }, 'could not read the client certificates to check their expiry'));
      run();
      timer = setInterval(run, CERTIFICATE_CHECK_MS);
      timer.unref();
    },
    stop() {
      if (timer !== null) clearInterval(timer);
      timer = null;
    },
  };
}

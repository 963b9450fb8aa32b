import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Readable } from 'node:stream';
import { createApi } from './api/app.ts';
import type { Config } from './config/load.ts';
import { systemClock, type Clock } from './domain/clock.ts';
import { createFileTailer } from './feed/file-tailer.ts';
import { openIngestPath, type IngestPath } from './feed/ingest-path.ts';
import { ingestStream } from './feed/stream-reader.ts';
import type { Logger } from './log.ts';
import { createDeliverer, loadExtraCa, type Deliverer } from './dispatch/deliverer.ts';
import { createDispatcher, type Dispatcher } from './dispatch/dispatcher.ts';
import { createNetworkGuard } from './dispatch/network-guard.ts';
import type { RetryPolicy } from './domain/retry-policy.ts';
import { VERSION } from './version.ts';
import { loadAuthKeys } from './services/auth-keys.ts';
import { createServices } from './services/services.ts';
import { createRetentionService, startRetention } from './services/retention.ts';
import { createStorageHealth, type StorageHealth } from './services/storage-health.ts';
import { createWorkSignal } from './services/work-signal.ts';
import { openStore, type Store } from './store/store.ts';

export interface Relay {
  /** Opens the database (migrating it), loads the JWT keys, starts the admin API, then the feed reader. */
  start(): Promise<void>;
  /** Stops the feed reader, then the admin API (in-flight requests get up to `deadlineMs`), then closes the database. */
  stop(deadlineMs?: number): Promise<void>;
  /** Where the admin API listens, once started. */
  address(): { host: string; port: number };
}

export function parseListen(listen: string): { host: string; port: number } {
  const at = listen.lastIndexOf(':');
  const host = listen.slice(0, at).replace(/^\[(.*)\]$/, '$1');
  return { host, port: Number(listen.slice(at + 1)) };
}

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

/** Composition root: wires store, services and adapters; owns their start/stop order. */
export function createRelay(config: Config, deps: { log: Logger; clock?: Clock; stdin?: Readable; openStore?: typeof openStore }): Relay {
  const log = deps.log;
  const clock = deps.clock ?? systemClock;
  let store: Store | null = null;
  let server: Server | null = null;
  let feed: { stop(): Promise<void> } | null = null;
  let dispatcher: Dispatcher | null = null;
  let deliverer: Deliverer | null = null;
  let ingestPath: IngestPath | null = null;
  let retention: { stop(): Promise<void> } | null = null;
  let stopping = false;
  const health: StorageHealth = createStorageHealth(log, () => clock.now());

  function startFeed({ ingest, parser }: IngestPath): { stop(): Promise<void> } {
    const { feed: options } = config;
    if (options.path !== '-') {
      const tailer = createFileTailer({ ...options, path: options.path, ingest, log, parser, health });
      tailer.start();
      return { stop: () => tailer.stop() };
    }
    const controller = new AbortController();
    const feedLog = log.child({ subsystem: 'feed', feed: 'stdin' });
    const done = ingestStream(deps.stdin ?? process.stdin, { ...options, source: 'stdin', ingest, log, parser, signal: controller.signal, health }).then(
      (counts) => feedLog.info(counts, 'standard input closed: reading stopped, delivery continues'),
      (err: unknown) => feedLog.error({ err }, 'reading standard input failed: reading stopped, delivery continues'),
    );
    return {
      async stop() {
        controller.abort();
        await done;
      },
    };
  }

  function address(): { host: string; port: number } {
    const info = server?.address() as AddressInfo | null | undefined;
    if (!info) throw new Error('the relay is not listening');
    return { host: info.address, port: info.port };
  }

  async function startParts(): Promise<void> {
    // Tests may wrap the opening (a fault-injected store: SQLITE_FULL where no file system can be mounted).
    store = (deps.openStore ?? openStore)(config.database.path, clock, { busyTimeoutMs: config.database.busyTimeoutMs });
    log.info({ database: config.database.path }, 'database open');
    const keys = loadAuthKeys(config, log);
    const extraCa = loadExtraCa(config.delivery.caFile);
    const work = createWorkSignal();
    const services = createServices(store, config, log, work);
    const openStoreRef = store;
    const { app } = createApi({
      config,
      keys,
      clock,
      log,
      services,
      isReady: () => {
        if (stopping) return { reason: 'stopping', detail: 'the daemon is shutting down' };
        try {
          openStoreRef.ping();
          health.succeeded('readiness');
        } catch (err) {
          if (health.failed('readiness', err) === null) throw err;
        }
        const problem = health.problem();
        return problem === null ? true : { reason: problem.fault, detail: problem.detail, since: problem.since };
      },
    });
    server = createServer(app.callback());
    server.requestTimeout = 30_000;
    server.headersTimeout = 15_000;
    const { host, port } = parseListen(config.api.listen);
    await new Promise<void>((resolve, reject) => {
      server!.once('error', reject);
      server!.listen(port, host, () => {
        server!.off('error', reject);
        resolve();
      });
    });
    const bound = address();
    log.info({ host: bound.host, port: bound.port, algorithm: keys.algorithm }, 'admin API listening');
    // Background checkpoints in the daemon only while large batches are being ingested (see startBackgroundCheckpoints).
    ingestPath = await openIngestPath(store, log, { work, checkpointsWhileBusy: true });
    deliverer = createDeliverer({
      guard: createNetworkGuard(config.delivery.allowNetworks),
      clock,
      timeoutMs: config.delivery.timeout,
      allowHttp: config.delivery.allowHttp,
      userAgent: `hookrelay/${VERSION}`,
      extraCa,
    });
    dispatcher = createDispatcher({
      deliveries: services.deliveries,
      deliverer,
      work,
      policy: retryPolicyFrom(config),
      clock,
      log,
      concurrency: config.delivery.concurrency,
      perWebhookConcurrency: config.delivery.perWebhookConcurrency,
      // An attempt (in-attempt reconnects included) ends at its deadline; the margin covers
      // recording it. So only a crash lets a lease lapse.
      leaseMs: config.delivery.timeout + LEASE_MARGIN_MS,
      pollIntervalMs: config.delivery.pollInterval,
      groupCommitMs: config.delivery.groupCommitInterval,
      health,
    });
    dispatcher.start();
    if (config.retention.enabled) {
      const service = createRetentionService(store, {
        deliveredEventsMs: config.retention.deliveredEvents,
        quarantinedLinesMs: config.retention.quarantinedLines,
        batchSize: config.retention.batchSize,
      });
      const path = ingestPath;
      retention = startRetention({
        retention: service,
        intervalMs: config.retention.interval,
        firstRunMs: Math.min(config.retention.interval, 60_000),
        health,
        log,
        // Pruning writes a burst of WAL, as a large ingest does: checkpoints on their own thread meanwhile.
        onBatch: () => path.checkpointsBusy(),
      });
    }
    feed = startFeed(ingestPath);
  }

  return {
    async start() {
      try {
        await startParts();
      } catch (err) {
        // Leave nothing half-open: a failed start releases what it had opened.
        await this.stop(0);
        throw err;
      }
    },

    async stop(deadlineMs = 10_000) {
      stopping = true;
      await feed?.stop();
      feed = null;
      await retention?.stop();
      retention = null;
      await dispatcher?.stop(deadlineMs);
      dispatcher = null;
      deliverer?.close();
      deliverer = null;
      if (server !== null) {
        const closing = new Promise<void>((resolve) => server!.close(() => resolve()));
        server.closeIdleConnections();
        const timer = setTimeout(() => server?.closeAllConnections(), deadlineMs);
        await closing;
        clearTimeout(timer);
        server = null;
      }
      await ingestPath?.close();
      ingestPath = null;
      store?.close();
      store = null;
      log.info('stopped');
    },

    address,
  };
}

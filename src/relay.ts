import { createServer, type RequestListener, type Server } from 'node:http';
import { createServer as createNetServer, type AddressInfo } from 'node:net';
import type { Readable } from 'node:stream';
import { createApi, createMetricsApp, type NotReady } from './api/app.ts';
import type { ListenerIdentity } from './api/host-check.ts';
import { metricsRefusal, type MetricsEndpoint } from './api/metrics.ts';
import type { Config } from './config/load.ts';
import { createEgressProxies } from './domain/egress-proxy.ts';
import { createNetworkPolicies } from './domain/address-policy.ts';
import { systemClock, type Clock } from './domain/clock.ts';
import { parseListen } from './domain/listen.ts';
import { createMetrics, loadMetricsToken, type Metrics } from './metrics/metrics.ts';
import { createFileTailer } from './feed/file-tailer.ts';
import { openIngestPath, type IngestPath } from './feed/ingest-path.ts';
import { FeedReaderFaults } from './feed/reader-faults.ts';
import { ingestStream } from './feed/stream-reader.ts';
import type { Logger } from './log.ts';
import { createDeliverer, loadExtraCa, type Deliverer } from './dispatch/deliverer.ts';
import { createDispatcher, type Dispatcher } from './dispatch/dispatcher.ts';
import type { RetryPolicy } from './domain/retry-policy.ts';
import { DELIVERY_USER_AGENT, VERSION } from './version.ts';
import { loadAuthKeys } from './services/auth-keys.ts';
import type { FlushResult, FlushWork } from './services/outbox.ts';
import { createServices } from './services/services.ts';
import { createRetentionService, startRetention } from './services/retention.ts';
import { createStorageHealth, type StorageHealth } from './services/storage-health.ts';
import { createWorkSignal } from './services/work-signal.ts';
import { lockStateDirectory, openStoreWhenReachable, type DaemonLock, type DaemonOpenOptions } from './store/open.ts';
import type { Store, WorkSharing } from './store/repos.ts';

export interface Relay {
  /** Opens the database (migrating it), loads the JWT keys, starts the admin API, then the feed reader. */
  start(): Promise<void>;
  /** Stops the feed reader, then the admin API (in-flight requests get up to `deadlineMs`), then closes the database. */
  stop(deadlineMs?: number): Promise<void>;
  /** Where the admin API listens, once started. */
  address(): { host: string; port: number };
  /** Where the metrics listener of its own (metrics.listen) listens, once started; null without one. */
  metricsAddress(): { host: string; port: number } | null;
}

/** The feed reader while it runs: how to stop it, and why it cannot read (see FileTailer.problem). */
interface RunningFeed {
  stop(): Promise<void>;
  problem(): NotReady | null;
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

/**
 * The refusal of an address another process listens on: which setting to change, and how to see
 * who holds it. A failure at run time (exit status 1: the address may be free again at the
 * next start), not a configuration error.
 */
function addressInUse(listener: Listener, listenAddress: string, cause: unknown): Error {
  return new Error(
    `${listener.what} address ${listenAddress} is already in use (another hookrelay daemon? \`hookrelay status --listen ${listenAddress}\` tells); stop that process, or choose another address with ${listener.setting}`,
    { cause },
  );
}

/** A listener of the daemon, as its errors name it: what it serves, and the setting of its address. */
interface Listener {
  readonly what: string;
  readonly setting: string;
}
const ADMIN_LISTENER: Listener = { what: 'the admin API', setting: '--listen or api.listen' };
const METRICS_LISTENER: Listener = { what: 'the metrics', setting: 'metrics.listen' };

/** A request's headers must have arrived this long after its connection opened (docs/api.md, "Limits"). */
export const HEADERS_TIMEOUT_MS = 15_000;
/** A whole request (headers and body) must have arrived this long after its connection opened. */
export const REQUEST_TIMEOUT_MS = 30_000;
/**
 * How often the server looks for requests past those times. Node's default, 30 s, let a slow
 * request (a client that sends a byte now and then) hold its connection up to 30 s longer than
 * either: 45 s for the headers, 60 s in all.
 */
const TIMEOUT_CHECK_INTERVAL_MS = 500;

/** An HTTP server for `handler`, listening on `listenAddress` (HOST:PORT) once this resolves. */
async function listen(handler: RequestListener, listenAddress: string, listener: Listener): Promise<Server> {
  const server = createServer({ headersTimeout: HEADERS_TIMEOUT_MS, requestTimeout: REQUEST_TIMEOUT_MS, connectionsCheckingInterval: TIMEOUT_CHECK_INTERVAL_MS }, handler);
  const { host, port } = parseListen(listenAddress);
  await new Promise<void>((resolve, reject) => {
    server.once('error', (err: NodeJS.ErrnoException) => reject(err.code === 'EADDRINUSE' ? addressInUse(listener, listenAddress, err) : err));
    server.listen(port, host, () => {
      server.removeAllListeners('error');
      resolve();
    });
  });
  return server;
}

/**
 * Fails at once when another process listens on `listenAddress`, before anything is created or
 * opened (a daemon started twice by mistake must not touch the state directory first). The
 * real listener is opened later, once the services exist; a port taken in between is refused
 * the same way then.
 */
async function probeListen(listenAddress: string, listener: Listener): Promise<void> {
  const { host, port } = parseListen(listenAddress);
  if (port === 0) return;
  const probe = createNetServer();
  await new Promise<void>((resolve, reject) => {
    probe.once('error', (err: NodeJS.ErrnoException) => reject(err.code === 'EADDRINUSE' ? addressInUse(listener, listenAddress, err) : err));
    probe.listen({ port, host, exclusive: true }, () => resolve());
  });
  await new Promise<void>((resolve) => probe.close(() => resolve()));
}

/** Stops accepting, lets requests in progress finish for up to `deadlineMs`, then cuts them. */
async function close(server: Server, deadlineMs: number): Promise<void> {
  const closing = new Promise<void>((resolve) => server.close(() => resolve()));
  server.closeIdleConnections();
  const timer = setTimeout(() => server.closeAllConnections(), deadlineMs);
  await closing;
  clearTimeout(timer);
}

/** The ingest path, counting what each committed batch did. */
function countedIngest(path: IngestPath, metrics: Metrics): IngestPath {
  const { ingest } = path;
  return {
    ...path,
    ingest: {
      ...ingest,
      async ingest(source, lines, position, parsed) {
        const counts = await ingest.ingest(source, lines, position, parsed);
        metrics.ingested(counts);
        return counts;
      },
    },
  };
}

/**
 * How often the daemon gives the C heap's free pages back to the system while it delivers.
 * Delivery allocates and frees per attempt (TLS records, HTTP parsing, SQLite rows), and glibc
 * keeps what was freed in its arenas; a release gives a good part of it back, in a few
 * milliseconds (docs/benchmarks.md, "Memory").
 */
export const STEADY_RELEASE_MS = 30_000;

/** Counts the outcomes of a group commit that succeeded (see OutboxService.flush). */
function counted(result: FlushResult, work: FlushWork, metrics: Metrics): FlushResult {
  metrics.recorded(work.finished, result.unsendable.length);
  metrics.outOfOrder(result.outOfOrder.length);
  return result;
}

/** Composition root: wires store, services and adapters; owns their start/stop order. */
export function createRelay(config: Config, deps: { log: Logger; clock?: Clock; stdin?: Readable; openSqliteStore?: DaemonOpenOptions['openSqliteStore'] }): Relay {
  const log = deps.log;
  const clock = deps.clock ?? systemClock;
  let store: Store | null = null;
  let daemonLock: DaemonLock | null = null;
  let server: Server | null = null;
  let metricsServer: Server | null = null;
  let feed: RunningFeed | null = null;
  let dispatcher: Dispatcher | null = null;
  let deliverer: Deliverer | null = null;
  let ingestPath: IngestPath | null = null;
  let retention: { stop(): Promise<void> } | null = null;
  /** Work shared with the other instances of a shared database (PostgreSQL), and the instance-name lock; nothing on SQLite. */
  let sharing: WorkSharing | null = null;
  let releaseTimer: NodeJS.Timeout | null = null;
  let stopping = false;
  /** Aborted by stop(): ends a start that waits to open the database, and any write's wait for a lock another process holds. */
  const opening = new AbortController();
  const health: StorageHealth = createStorageHealth(log, () => clock.now());
  const feedFaults = new FeedReaderFaults(() => clock.now());

  function startFeed({ ingest, parser }: IngestPath): RunningFeed {
    const { feed: options } = config;
    if (options.path !== '-') {
      const tailer = createFileTailer({ ...options, pollIntervalMs: options.pollInterval, path: options.path, ingest, log, parser, health, faults: feedFaults });
      tailer.start();
      return { stop: () => tailer.stop(), problem: () => tailer.problem() };
    }
    const controller = new AbortController();
    const feedLog = log.child({ subsystem: 'feed', feed: 'stdin' });
    const done = ingestStream(deps.stdin ?? process.stdin, { ...options, source: 'stdin', ingest, log, parser, signal: controller.signal, health }).then(
      (counts) => feedLog.info(counts, 'standard input closed: reading stopped, delivery continues'),
      (err: unknown) => {
        // Standard input cannot be read again: not ready until a restart, and said why.
        feedFaults.ended(err, 'standard input');
        feedLog.error({ err }, 'reading standard input failed: reading stopped, delivery continues; /readyz answers 503 until the daemon restarts');
      },
    );
    return {
      async stop() {
        controller.abort();
        await done;
      },
      problem: () => feedFaults.problem(),
    };
  }

  /** GET /metrics: the token, and whether it may be served without one anywhere (see metricsRefusal). */
  function metricsEndpoint(metrics: Metrics): MetricsEndpoint {
    return {
      token: loadMetricsToken(config),
      allowUnauthenticated: config.metrics.allowUnauthenticated,
      render: async () => ({ contentType: metrics.contentType, body: await metrics.render() }),
    };
  }

  /**
   * The names the listeners answer to besides their own (host-check.ts): api.allowedHosts, and
   * on the admin listener the host of console.publicUrl, where browsers reach the console.
   */
  const allowedHosts = config.api.allowedHosts;
  const adminListener: ListenerIdentity = {
    listen: config.api.listen,
    bound() {
      const info = server?.address() as AddressInfo | null | undefined;
      return info ? { address: info.address, port: info.port } : null;
    },
    extraHosts: config.console.publicUrl === null ? allowedHosts : [...allowedHosts, new URL(config.console.publicUrl).host],
  };
  const metricsListener: ListenerIdentity = {
    listen: config.metrics.listen ?? config.api.listen,
    bound() {
      const info = metricsServer?.address() as AddressInfo | null | undefined;
      return info ? { address: info.address, port: info.port } : null;
    },
    extraHosts: allowedHosts,
  };

  function address(): { host: string; port: number } {
    const info = server?.address() as AddressInfo | null | undefined;
    if (!info) throw new Error('the relay is not listening');
    return { host: info.address, port: info.port };
  }

  async function startParts(): Promise<void> {
    // Before anything is created: the addresses are free, and no other daemon runs on this
    // state directory (it would read the same feed).
    await probeListen(config.api.listen, ADMIN_LISTENER);
    if (config.metrics.enabled && config.metrics.listen !== null) await probeListen(config.metrics.listen, METRICS_LISTENER);
    daemonLock = lockStateDirectory(config);
    // Tests may wrap the opening (a fault-injected store: SQLITE_FULL where no file system can be mounted).
    const opened = await openStoreWhenReachable(config, clock, { log, signal: opening.signal, ...(deps.openSqliteStore ? { openSqliteStore: deps.openSqliteStore } : {}) });
    if (opened === null) return; // stopped while waiting for space, or for the server
    store = opened;
    const keys = loadAuthKeys(config, log);
    const extraCa = loadExtraCa(config.delivery.caFile);
    const work = createWorkSignal();
    // First of all, on a shared database: the instance-name lock (a second daemon under this
    // name stops here, before it serves, reads or claims anything), then the wake-ups in both
    // directions. Nothing on SQLite.
    sharing = await store.shareWork(work, { log, listen: { poll: () => dispatcher?.poll() } });
    const services = createServices(store, config, log, work);
    const openStoreRef = store;
    const metrics = config.metrics.enabled
      ? createMetrics({
          status: services.status,
          feedPath: config.feed.path === '-' ? null : config.feed.path,
          refreshIntervalMs: config.metrics.refreshInterval,
          perOrganization: config.metrics.perOrganization,
          version: VERSION,
          log,
          feedReader: feedFaults,
        })
      : null;
    const endpoint = metrics === null ? null : metricsEndpoint(metrics);
    const onAdminListener = endpoint !== null && config.metrics.listen === null;
    const { app } = createApi({
      config,
      keys,
      clock,
      log,
      services,
      isReady: async () => {
        if (stopping) return { reason: 'stopping', detail: 'the daemon is shutting down' };
        try {
          await openStoreRef.ping();
          health.succeeded('readiness');
        } catch (err) {
          if (health.failed('readiness', err) === null) throw err;
        }
        const problem = health.problem();
        if (problem !== null) return { reason: problem.fault, detail: problem.detail, since: problem.since };
        // Something other than a regular file at the feed path: the relay serves, but reads nothing.
        return feed?.problem() ?? true;
      },
      ...(onAdminListener ? { metrics: endpoint } : {}),
      listener: adminListener,
    });
    server = await listen(app.callback(), config.api.listen, ADMIN_LISTENER);
    const bound = address();
    log.info({ host: bound.host, port: bound.port, algorithm: keys.algorithm }, 'admin API listening');
    if (endpoint !== null && !onAdminListener) {
      const rates = { perMinute: config.api.rateLimitPerMinute, burst: config.api.rateLimitBurst };
      metricsServer = await listen(createMetricsApp({ log, metrics: endpoint, rates, listener: metricsListener }).callback(), config.metrics.listen!, METRICS_LISTENER);
      const info = metricsServer.address() as AddressInfo;
      log.info({ host: info.address, port: info.port, token: endpoint.token !== null }, 'metrics listening');
    }
    // Judged by the address each listener bound: a name (localhost) may have resolved to another address.
    const refusal = endpoint === null ? null : metricsRefusal(endpoint, onAdminListener ? adminListener : metricsListener);
    if (refusal !== null) log.warn({ listen: onAdminListener ? config.api.listen : config.metrics.listen }, refusal);
    // Background checkpoints in the daemon only while large batches are being ingested (see startBackgroundCheckpoints).
    ingestPath = await openIngestPath(store, log, { work, checkpointsWhileBusy: true, noticeUndeliverable: true, reorderWindowMs: config.delivery.reorderWindow });
    const proxies = createEgressProxies(config.delivery);
    // The proxies' origins only: their credentials are never logged.
    if (proxies.all.length > 0) log.info({ proxies: proxies.all.map((p) => p.shown), target: config.delivery.proxyTarget }, 'deliveries go through an egress proxy');
    deliverer = createDeliverer({
      networks: createNetworkPolicies(config.delivery),
      clock,
      timeoutMs: config.delivery.timeout,
      allowHttp: config.delivery.allowHttp,
      userAgent: DELIVERY_USER_AGENT,
      extraCa,
      concurrency: config.delivery.concurrency,
      proxies,
      proxyTarget: config.delivery.proxyTarget,
    });
    const deliveries = services.outbox;
    // Attempts recorded since the last release of memory (see STEADY_RELEASE_MS).
    let recordedSinceRelease = 0;
    const path = ingestPath;
    releaseTimer = setInterval(() => {
      if (recordedSinceRelease === 0) return;
      recordedSinceRelease = 0;
      path.releaseMemory();
    }, STEADY_RELEASE_MS);
    releaseTimer.unref();
    dispatcher = createDispatcher({
      deliveries: {
        ...deliveries,
        async flush(work, options) {
          // Outcomes are counted once their group commit has succeeded.
          const result = await deliveries.flush(work, options);
          recordedSinceRelease += work.finished.length;
          return metrics === null ? result : counted(result, work, metrics);
        },
      },
      deliverer,
      work,
      policy: retryPolicyFrom(config),
      clock,
      log,
      sharedDatabase: store.shared,
      concurrency: config.delivery.concurrency,
      perWebhookConcurrency: config.delivery.perWebhookConcurrency,
      // An attempt (in-attempt reconnects included) ends at its deadline; the margin covers
      // recording it. So only a crash lets a lease lapse.
      leaseMs: config.delivery.timeout + LEASE_MARGIN_MS,
      pollIntervalMs: config.delivery.pollInterval,
      groupCommitMs: config.delivery.groupCommitInterval,
      health,
      lockWaitMs: config.database.busyTimeout,
    });
    dispatcher.start();
    if (config.retention.enabled) {
      const service = createRetentionService(store, {
        deliveredEventsMs: config.retention.deliveredEvents,
        quarantinedLinesMs: config.retention.quarantinedLines,
        batchSize: config.retention.batchSize,
      });
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
    feed = startFeed(metrics === null ? ingestPath : countedIngest(ingestPath, metrics));
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
      opening.abort();
      await feed?.stop();
      feed = null;
      await retention?.stop();
      retention = null;
      if (releaseTimer !== null) clearInterval(releaseTimer);
      releaseTimer = null;
      await dispatcher?.stop(deadlineMs);
      dispatcher = null;
      await sharing?.close();
      sharing = null;
      await deliverer?.close();
      deliverer = null;
      await Promise.all([server, metricsServer].map((s) => (s === null ? null : close(s, deadlineMs))));
      server = null;
      metricsServer = null;
      await ingestPath?.close();
      ingestPath = null;
      await store?.close();
      store = null;
      daemonLock?.release();
      daemonLock = null;
      log.info('stopped');
    },

    address,

    metricsAddress() {
      const info = metricsServer?.address() as AddressInfo | null | undefined;
      return info ? { host: info.address, port: info.port } : null;
    },
  };
}

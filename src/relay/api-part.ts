import type { Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { createApi, createMetricsApp, type NotReady } from '../api/app.ts';
import type { ListenerIdentity } from '../api/host-check.ts';
import { metricsRefusal, type MetricsEndpoint } from '../api/metrics.ts';
import type { Config } from '../config/load.ts';
import { createMetrics, loadMetricsToken, type Metrics } from '../metrics/metrics.ts';
import { createServices } from '../services/services.ts';
import { certificateExpiries } from '../services/receiver-credentials.ts';
import { isTransientStoreError } from '../store/storage-faults.ts';
import { VERSION } from '../version.ts';
import { ADMIN_LISTENER, close, listen, METRICS_LISTENER } from './listeners.ts';
import type { DaemonPart, Slot } from './parts.ts';
import type { Wiring } from './wiring.ts';

/** GET /metrics: the token, and whether it may be served without one anywhere (see metricsRefusal). */
function metricsEndpoint(config: Config, metrics: Metrics): MetricsEndpoint {
  return {
    token: loadMetricsToken(config),
    allowUnauthenticated: config.metrics.allowUnauthenticated,
    render: async () => ({ contentType: metrics.contentType, body: await metrics.render() }),
  };
}

/**
 * The names each listener answers to besides its own (host-check.ts): api.allowedHosts, and on
 * the admin listener the host of console.publicUrl, where browsers reach the console.
 */
function listenerIdentities(w: Wiring): { admin: ListenerIdentity; metrics: ListenerIdentity } {
  const { config } = w;
  const allowedHosts = config.api.allowedHosts;
  const bound = (server: Slot<Server>) => () => {
    const info = server.peek()?.address() as AddressInfo | null | undefined;
    return info ? { address: info.address, port: info.port } : null;
  };
  return {
    admin: { listen: config.api.listen, bound: bound(w.adminServer), extraHosts: config.console.publicUrl === null ? allowedHosts : [...allowedHosts, new URL(config.console.publicUrl).host] },
    metrics: { listen: config.metrics.listen ?? config.api.listen, bound: bound(w.metricsServer), extraHosts: allowedHosts },
  };
}

/**
 * What the identity provider's keys mean for readiness: unavailable (none, or older than
 * auth.provider.maxStale) is not ready; stale (the last fetch failed, the keys still serve) is
 * ready but degraded. Null without a provider or while its keys are fresh.
 */
function providerReadiness(w: Wiring): { state: 'stale' | 'unavailable'; notReady: NotReady } | null {
  const health = w.providerKeys.peek()?.health();
  if (health === undefined || health.state === 'fresh') return null;
  const detail =
    health.state === 'unavailable'
      ? `the identity provider's keys cannot be used (${health.fetchedAt === null ? 'never fetched' : 'older than auth.provider.maxStale'}): its tokens are refused, the daemon's own work; last error: ${health.lastError ?? 'none'}`
      : `the identity provider cannot be reached (${health.lastError ?? 'unknown error'}); the keys fetched ${new Date(health.fetchedAt!).toISOString()} still verify its tokens until auth.provider.maxStale`;
  return { state: health.state, notReady: { reason: 'identity_provider_unreachable', detail, ...(health.since === null ? {} : { since: health.since }) } };
}

/** Since when (epoch ms) the database has been out of reach, while it is (one per admin API). */
interface Reachability {
  unreachableSince: number | null;
}

/**
 * /readyz: the database answers and takes writes, and the feed can be read. A database server
 * out of reach (PostgreSQL down, restarting, or cut off: the store's ping has a deadline) is
 * `database_unreachable`, with what the driver said; ready again as soon as it answers.
 */
async function readiness(w: Wiring, db: Reachability): Promise<true | NotReady> {
  if (w.stopping()) return { reason: 'stopping', detail: 'the daemon is shutting down' };
  try {
    await w.store.get().ping();
    w.health.succeeded('readiness');
    db.unreachableSince = null;
  } catch (err) {
    if (w.health.failed('readiness', err) === null) {
      if (!isTransientStoreError(err)) throw err;
      const since = (db.unreachableSince ??= w.clock.now());
      const said = err instanceof Error ? err.message : String(err);
      return { reason: 'database_unreachable', detail: `the database server cannot be reached (${said}); nothing new is stored or claimed meanwhile, and work resumes by itself once it answers`, since };
    }
  }
  const problem = w.health.problem();
  if (problem !== null) return { reason: problem.fault, detail: problem.detail, since: problem.since };
  const provider = providerReadiness(w);
  if (provider !== null && provider.state === 'unavailable') return provider.notReady;
  // Something other than a regular file at the feed path, or a reader that keeps failing: the relay serves, but reads nothing.
  return w.feed.peek()?.problem() ?? true;
}

/** The services, the metrics, and the admin API's listener (with /metrics on it, or on a listener of its own). */
export function adminApi(w: Wiring): DaemonPart {
  return {
    name: 'admin API',
    async start() {
      const { config, log, clock } = w;
      const services = w.services.set(createServices(w.store.get(), config, log, w.work));
      const metrics = config.metrics.enabled
        ? w.metrics.set(
            createMetrics({
              status: services.status,
              feedPath: config.feed.path === '-' ? null : config.feed.path,
              refreshIntervalMs: config.metrics.refreshInterval,
              perOrganization: config.metrics.perOrganization,
              version: VERSION,
              log,
              feedReader: w.feedFaults,
              clientCertificates: () => certificateExpiries(w.store.get(), w.keys.get().operatorCertificates),
              ...(w.providerKeys.peek() === null ? {} : { providerKeys: w.providerKeys.get() }),
              ...(w.tracing.peek() === null ? {} : { spanExport: w.tracing.get().counts }),
            }),
          )
        : null;
      const endpoint = metrics === null ? null : metricsEndpoint(config, metrics);
      const onAdminListener = endpoint !== null && config.metrics.listen === null;
      const listeners = listenerIdentities(w);
      const reachability: Reachability = { unreachableSince: null };
      const { app } = createApi({
        config,
        keys: w.keys.get().auth,
        clock,
        log,
        services,
        isReady: () => readiness(w, reachability),
        degraded: () => {
          const provider = providerReadiness(w);
          return provider?.state === 'stale' ? [provider.notReady] : [];
        },
        ...(w.providerKeys.peek() === null ? {} : { providerKeys: w.providerKeys.get() }),
        ...(onAdminListener ? { metrics: endpoint } : {}),
        listener: listeners.admin,
        tracer: w.tracing.peek()?.tracer ?? null,
      });
      const server = w.adminServer.set(await listen(app.callback(), config.api.listen, ADMIN_LISTENER));
      const bound = server.address() as AddressInfo;
      log.info({ host: bound.address, port: bound.port, algorithm: w.keys.get().auth.algorithm }, 'admin API listening');
      if (endpoint !== null && !onAdminListener) {
        const rates = { perMinute: config.api.rateLimitPerMinute, burst: config.api.rateLimitBurst };
        const metricsServer = w.metricsServer.set(await listen(createMetricsApp({ log, metrics: endpoint, rates, listener: listeners.metrics }).callback(), config.metrics.listen!, METRICS_LISTENER));
        const info = metricsServer.address() as AddressInfo;
        log.info({ host: info.address, port: info.port, token: endpoint.token !== null }, 'metrics listening');
      }
      // Judged by the address each listener bound: a name (localhost) may have resolved to another address.
      const refusal = endpoint === null ? null : metricsRefusal(endpoint, onAdminListener ? listeners.admin : listeners.metrics);
      if (refusal !== null) log.warn({ listen: onAdminListener ? config.api.listen : config.metrics.listen }, refusal);
    },
    async stop(deadlineMs) {
      const servers = [w.adminServer.take(), w.metricsServer.take()];
      await Promise.all(servers.map((s) => (s === null ? null : close(s, deadlineMs))));
      w.metrics.take();
      w.services.take();
    },
  };
}


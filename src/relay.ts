import type { AddressInfo } from 'node:net';
import type { Config } from './config/load.ts';
import { systemClock } from './domain/clock.ts';
import { FeedReaderFaults } from './feed/reader-faults.ts';
import { createStorageHealth } from './services/storage-health.ts';
import { createWorkSignal } from './services/work-signal.ts';
import { adminApi } from './relay/api-part.ts';
import { identityProvider } from './relay/provider-part.ts';
import { addressCheck, database, ingestPath, keys, stateDirectoryLock, workSharing } from './relay/base-parts.ts';
import { certificateExpiry, deliverer, dispatcher, retention } from './relay/delivery-parts.ts';
import { auditJournal } from './relay/audit-part.ts';
import { feedReader } from './relay/feed-part.ts';
import { tracing } from './relay/tracing-part.ts';
import { PartList, Slot, stopError } from './relay/parts.ts';
import type { RelayDeps, Wiring } from './relay/wiring.ts';

export type { RelayDeps } from './relay/wiring.ts';

export interface Relay {
  /** Starts the parts of the daemon in order (see createRelay): the admin API serves before the feed is read. */
  start(): Promise<void>;
  /**
   * Stops the started parts in reverse order: the feed reader, the dispatcher (attempts in flight
   * get up to `deadlineMs`), the admin API (requests in flight likewise), then the database. A
   * part that fails to stop does not keep the others from stopping; the failures are thrown
   * together (an AggregateError naming each part).
   */
  stop(deadlineMs?: number): Promise<void>;
  /** Where the admin API listens, once started. */
  address(): { host: string; port: number };
  /** Where the metrics listener of its own (metrics.listen) listens, once started; null without one. */
  metricsAddress(): { host: string; port: number } | null;
}

/**
 * Composition root. The daemon is this list of parts, started in this order and stopped in the
 * reverse one: the feed is read only once the API serves and deliveries go out, and at a stop
 * it is the first to end and the database the last.
 */
export function createRelay(config: Config, deps: RelayDeps): Relay {
  const clock = deps.clock ?? systemClock;
  let stopping = false;
  const w: Wiring = {
    config,
    deps,
    log: deps.log,
    clock,
    health: createStorageHealth(deps.log, () => clock.now()),
    feedFaults: new FeedReaderFaults(() => clock.now()),
    work: createWorkSignal(),
    opening: new AbortController(),
    stopping: () => stopping,
    store: new Slot('the store'),
    tracing: new Slot('the tracing'),
    keys: new Slot('the keys'),
    providerKeys: new Slot('the identity provider keys'),
    services: new Slot('the services'),
    metrics: new Slot('the metrics'),
    ingestPath: new Slot('the ingest path'),
    adminServer: new Slot('the admin API listener'),
    metricsServer: new Slot('the metrics listener'),
    deliverer: new Slot('the deliverer'),
    dispatcher: new Slot('the dispatcher'),
    feed: new Slot('the feed reader'),
  };
  const parts = new PartList(
    [
      addressCheck(w),
      stateDirectoryLock(w),
      database(w),
      keys(w),
      tracing(w),
      identityProvider(w),
      workSharing(w),
      ingestPath(w),
      adminApi(w),
      auditJournal(w),
      deliverer(w),
      certificateExpiry(w),
      dispatcher(w),
      retention(w),
      feedReader(w),
    ],
    w.stopping,
  );

  async function stopParts(deadlineMs: number): Promise<void> {
    stopping = true;
    w.opening.abort();
    const failures = await parts.stop(deadlineMs);
    for (const { part, err } of failures) w.log.error({ err, part }, `stopping ${part} failed; the other parts were stopped`);
    w.log.info('stopped');
    if (failures.length > 0) throw stopError(failures);
  }

  return {
    async start() {
      try {
        await parts.start();
      } catch (err) {
        // Leave nothing half-open: a failed start releases what it had opened (its own failures are logged).
        await stopParts(0).catch(() => {});
        throw err;
      }
    },
    stop: (deadlineMs = 10_000) => stopParts(deadlineMs),
    address() {
      const info = w.adminServer.peek()?.address() as AddressInfo | null | undefined;
      if (!info) throw new Error('the relay is not listening');
      return { host: info.address, port: info.port };
    },
    metricsAddress() {
      const info = w.metricsServer.peek()?.address() as AddressInfo | null | undefined;
      return info ? { host: info.address, port: info.port } : null;
    },
  };
}


import type { NotReady } from '../api/app.ts';
import type { Config } from '../config/load.ts';
import type { Clock } from '../domain/clock.ts';
import type { Deliverer } from '../dispatch/deliverer.ts';
import type { Dispatcher } from '../dispatch/dispatcher.ts';
import type { IngestPath } from '../feed/ingest-path.ts';
import type { FeedReaderFaults } from '../feed/reader-faults.ts';
import type { Logger } from '../log.ts';
import type { Metrics } from '../metrics/metrics.ts';
import type { AuthKeys } from '../services/auth-keys.ts';
import type { ProviderKeys } from '../services/provider-keys.ts';
import type { OperatorCertificates } from '../services/receiver-credentials.ts';
import type { Services } from '../services/services.ts';
import type { StorageHealth } from '../services/storage-health.ts';
import type { WorkSignal } from '../services/work-signal.ts';
import type { DaemonOpenOptions } from '../store/open.ts';
import type { Store } from '../store/repos.ts';
import type { Server } from 'node:http';
import type { Readable } from 'node:stream';
import type { Tracing } from '../tracing/tracing.ts';
import type { Slot } from './parts.ts';

export interface RelayDeps {
  readonly log: Logger;
  readonly clock?: Clock;
  /** The feed when feed.path is `-` (process.stdin by default). */
  readonly stdin?: Readable;
  /** Wraps the opening of the SQLite store (tests: a fault-injected store). */
  readonly openSqliteStore?: DaemonOpenOptions['openSqliteStore'];
}

/** The feed reader while it runs: how to stop it, and why it cannot read (see FileTailer.problem). */
export interface RunningFeed {
  stop(): Promise<void>;
  problem(): NotReady | null;
}

/**
 * What the parts share: the settings, what exists before any part starts, and a slot for each
 * value a part makes for the parts after it.
 */
export interface Wiring {
  readonly config: Config;
  readonly deps: RelayDeps;
  readonly log: Logger;
  readonly clock: Clock;
  readonly health: StorageHealth;
  readonly feedFaults: FeedReaderFaults;
  /** Hears of queued deliveries (ingest, the API) and wakes the dispatcher. */
  readonly work: WorkSignal;
  /** Aborted by stop(): ends a start that waits to open the database, and any write's wait for a lock another process holds. */
  readonly opening: AbortController;
  readonly stopping: () => boolean;
  readonly store: Slot<Store>;
  /** Empty while tracing is off (config/load.ts tracingOn): then no span is made anywhere. */
  readonly tracing: Slot<Tracing>;
  /** The JWT keys, the delivery CA file, the operator's client certificates (read and checked at start). */
  readonly keys: Slot<{ auth: AuthKeys; extraCa: string | null; operatorCertificates: OperatorCertificates }>;
  /** Empty while auth.provider.issuer is null. */
  readonly providerKeys: Slot<ProviderKeys>;
  readonly services: Slot<Services>;
  /** Empty while metrics.enabled is false. */
  readonly metrics: Slot<Metrics>;
  readonly ingestPath: Slot<IngestPath>;
  readonly adminServer: Slot<Server>;
  readonly metricsServer: Slot<Server>;
  readonly deliverer: Slot<Deliverer>;
  readonly dispatcher: Slot<Dispatcher>;
  readonly feed: Slot<RunningFeed>;
}


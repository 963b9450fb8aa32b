import { loadExtraCa } from '../dispatch/deliverer.ts';
import { openIngestPath } from '../feed/ingest-path.ts';
import { IngestTracing } from '../services/ingest-tracing.ts';
import { loadAuthKeys } from '../services/auth-keys.ts';
import { ensureCredentialKey } from '../services/credential-key.ts';
import { loadOperatorCertificates } from '../services/receiver-credentials.ts';
import { lockStateDirectory, openStoreWhenReachable, type DaemonLock } from '../store/open.ts';
import type { WorkSharing } from '../store/repos.ts';
import { ADMIN_LISTENER, METRICS_LISTENER, probeListen } from './listeners.ts';
import type { DaemonPart } from './parts.ts';
import type { Wiring } from './wiring.ts';

/** The parts below the services: the addresses, the state directory, the database, the keys, work sharing, the ingest path. */

/** Before anything is created: the addresses are free (a daemon started twice by mistake stops here). */
export function addressCheck({ config }: Wiring): DaemonPart {
  return {
    name: 'address check',
    async start() {
      await probeListen(config.api.listen, ADMIN_LISTENER);
      if (config.metrics.enabled && config.metrics.listen !== null) await probeListen(config.metrics.listen, METRICS_LISTENER);
    },
    stop() {},
  };
}

/** No other daemon runs on this state directory (it would read the same feed). */
export function stateDirectoryLock({ config }: Wiring): DaemonPart {
  let lock: DaemonLock | null = null;
  return {
    name: 'state directory lock',
    start() {
      lock = lockStateDirectory(config);
    },
    stop() {
      lock?.release();
      lock = null;
    },
  };
}

/** The database, migrated; waits while it cannot be opened (a full disk, a server down) until it can or the daemon stops. */
export function database(w: Wiring): DaemonPart {
  return {
    name: 'database',
    async start() {
      const { config, clock, log, deps } = w;
      const opened = await openStoreWhenReachable(config, clock, { log, signal: w.opening.signal, ...(deps.openSqliteStore ? { openSqliteStore: deps.openSqliteStore } : {}) });
      // null: stopped while waiting for space, or for the server.
      if (opened !== null) w.store.set(opened);
    },
    async stop() {
      await w.store.take()?.close();
    },
  };
}

/**
 * The JWT keys (a secret generated on first start), the credential key that seals the webhooks'
 * credentials (generated on first start too), the delivery CA file and the operator's client
 * certificates: refused before anything serves.
 */
export function keys(w: Wiring): DaemonPart {
  return {
    name: 'keys',
    start() {
      ensureCredentialKey(w.config, w.log);
      w.keys.set({ auth: loadAuthKeys(w.config, w.log), extraCa: loadExtraCa(w.config.delivery.caFile), operatorCertificates: loadOperatorCertificates(w.config.delivery, w.clock.now()) });
    },
    stop() {
      w.keys.take();
    },
  };
}

/**
 * On a shared database (PostgreSQL), first of all the instance-name lock (a second daemon under
 * this name stops here, before it serves, reads or claims anything), then the wake-ups in both
 * directions. Nothing on SQLite.
 */
export function workSharing(w: Wiring): DaemonPart {
  let sharing: WorkSharing | null = null;
  return {
    name: 'work sharing',
    async start() {
      sharing = await w.store.get().shareWork(w.work, { log: w.log, listen: { poll: () => w.dispatcher.peek()?.poll() } });
    },
    async stop() {
      await sharing?.close();
      sharing = null;
    },
  };
}

/**
 * What feed lines go through into the store: the ingest service, its parser thread, and WAL
 * checkpoints on a thread of their own only while large batches arrive (see
 * startBackgroundCheckpoints). Stopped after the feed reader and the API, which use it.
 */
export function ingestPath(w: Wiring): DaemonPart {
  return {
    name: 'ingest path',
    async start() {
      const { config } = w;
      const tracing = w.tracing.peek();
      w.ingestPath.set(
        await openIngestPath(w.store.get(), w.log, {
          work: w.work,
          checkpointsWhileBusy: true,
          noticeUndeliverable: true,
          reorderWindowMs: config.delivery.reorderWindow,
          orderHoldMs: config.delivery.orderHold,
          tracing: tracing === null ? null : new IngestTracing(tracing.tracer),
        }),
      );
    },
    async stop() {
      await w.ingestPath.take()?.close();
    },
  };
}


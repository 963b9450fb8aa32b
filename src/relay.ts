import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { createApi } from './api/app.ts';
import type { Config } from './config/load.ts';
import { systemClock, type Clock } from './domain/clock.ts';
import type { Logger } from './log.ts';
import { loadAuthKeys } from './services/auth-keys.ts';
import { createServices } from './services/services.ts';
import { openStore, type Store } from './store/store.ts';

export interface Relay {
  /** Opens the database (migrating it), loads the JWT keys and starts the admin API. */
  start(): Promise<void>;
  /** Stops accepting requests, lets in-flight ones finish (up to `deadlineMs`), closes the database. */
  stop(deadlineMs?: number): Promise<void>;
  /** Where the admin API listens, once started. */
  address(): { host: string; port: number };
}

export function parseListen(listen: string): { host: string; port: number } {
  const at = listen.lastIndexOf(':');
  const host = listen.slice(0, at).replace(/^\[(.*)\]$/, '$1');
  return { host, port: Number(listen.slice(at + 1)) };
}

/** Composition root: wires store, services and adapters; owns their start/stop order. */
export function createRelay(config: Config, deps: { log: Logger; clock?: Clock }): Relay {
  const log = deps.log;
  const clock = deps.clock ?? systemClock;
  let store: Store | null = null;
  let server: Server | null = null;
  let stopping = false;

  return {
    async start() {
      store = openStore(config.database.path, clock, { busyTimeoutMs: config.database.busyTimeoutMs });
      log.info({ database: config.database.path }, 'database open');
      const keys = loadAuthKeys(config, log);
      const services = createServices(store, config);
      const openStoreRef = store;
      const { app } = createApi({
        config,
        keys,
        clock,
        log,
        services,
        isReady: () => {
          if (stopping) return false;
          openStoreRef.ping();
          return true;
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
      const address = this.address();
      log.info({ host: address.host, port: address.port, algorithm: keys.algorithm }, 'admin API listening');
    },

    async stop(deadlineMs = 10_000) {
      stopping = true;
      if (server !== null) {
        const closing = new Promise<void>((resolve) => server!.close(() => resolve()));
        server.closeIdleConnections();
        const timer = setTimeout(() => server?.closeAllConnections(), deadlineMs);
        await closing;
        clearTimeout(timer);
        server = null;
      }
      store?.close();
      store = null;
      log.info('stopped');
    },

    address() {
      const info = server?.address() as AddressInfo | null | undefined;
      if (!info) throw new Error('the relay is not listening');
      return { host: info.address, port: info.port };
    },
  };
}

import type { Clock } from '../domain/clock.ts';
import { openDatabase, type Db } from './db.ts';
import { createDeliveriesRepo, type DeliveriesRepo } from './deliveries-repo.ts';
import { createFeedRepo, type FeedRepo } from './feed-repo.ts';
import { createOrgsRepo, type OrgsRepo } from './orgs-repo.ts';
import { createRolesRepo, type RolesRepo } from './roles-repo.ts';
import { createUsersRepo, type UsersRepo } from './users-repo.ts';
import { createWebhooksRepo, type WebhooksRepo } from './webhooks-repo.ts';

/** The database and its repositories: the only place that holds SQL. */
export interface Store {
  readonly db: Db;
  readonly clock: Clock;
  /** Schema versions before and after the migrations applied when this store was opened. */
  readonly migrated: { readonly from: number; readonly to: number };
  readonly orgs: OrgsRepo;
  readonly roles: RolesRepo;
  readonly users: UsersRepo;
  readonly webhooks: WebhooksRepo;
  readonly feed: FeedRepo;
  readonly deliveries: DeliveriesRepo;
  /** Runs `fn` in one IMMEDIATE transaction (takes the write lock up front, so read-then-write is safe across processes). */
  transaction<T>(fn: () => T): T;
  /** Throws if the database cannot answer a trivial query (readiness probe). */
  ping(): void;
  close(): void;
}

export function openStore(path: string, clock: Clock, options: { busyTimeoutMs?: number } = {}): Store {
  const { db, migrated } = openDatabase(path, options);
  const select1 = db.prepare('SELECT 1');
  return {
    db,
    clock,
    migrated,
    orgs: createOrgsRepo(db),
    roles: createRolesRepo(db),
    users: createUsersRepo(db),
    webhooks: createWebhooksRepo(db),
    feed: createFeedRepo(db),
    deliveries: createDeliveriesRepo(db),
    transaction: <T>(fn: () => T): T => db.transaction(fn).immediate(),
    ping: () => {
      select1.get();
    },
    close: () => {
      if (db.open) db.close();
    },
  };
}

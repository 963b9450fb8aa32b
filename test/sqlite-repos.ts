/**
 * The SQLite repositories of a store, synchronous, for tests that seed or inspect a SQLite
 * database directly (the services go through the async boundary: src/store/repos.ts). Each
 * call is its own statement (autocommit) unless run inside `store.db.transaction(...)`.
 */
import { createDeliveriesRepo } from '../src/store/sqlite/deliveries-repo.ts';
import { createFeedRepo } from '../src/store/sqlite/feed-repo.ts';
import { createOrgsRepo } from '../src/store/sqlite/orgs-repo.ts';
import { createRetentionRepo } from '../src/store/sqlite/retention-repo.ts';
import { createRolesRepo } from '../src/store/sqlite/roles-repo.ts';
import type { SqliteStore } from '../src/store/sqlite/store.ts';
import { createUsersRepo } from '../src/store/sqlite/users-repo.ts';
import { createWebhooksRepo } from '../src/store/sqlite/webhooks-repo.ts';

const cache = new WeakMap<object, ReturnType<typeof build>>();

function build(db: SqliteStore['db']) {
  return {
    orgs: createOrgsRepo(db),
    roles: createRolesRepo(db),
    users: createUsersRepo(db),
    webhooks: createWebhooksRepo(db),
    feed: createFeedRepo(db),
    deliveries: createDeliveriesRepo(db),
    retention: createRetentionRepo(db),
  };
}

/** The store's repositories, synchronous (prepared once per connection). */
export function repos(store: Pick<SqliteStore, 'db'>) {
  let r = cache.get(store.db);
  if (r === undefined) cache.set(store.db, (r = build(store.db)));
  return r;
}

/**
 * The SQLite repositories of a store, synchronous, for tests that seed or inspect a SQLite
 * database directly (the services go through the async boundary: src/store/repos.ts). Each
 * call is its own statement (autocommit) unless run inside `store.db.transaction(...)`.
 */
import { createSqliteDeliveriesRepo } from '../../src/store/sqlite/deliveries-repo.ts';
import { createSqliteFeedRepo } from '../../src/store/sqlite/feed-repo.ts';
import { createSqliteOrgsRepo } from '../../src/store/sqlite/orgs-repo.ts';
import { createSqliteRetentionRepo } from '../../src/store/sqlite/retention-repo.ts';
import { createSqliteRolesRepo } from '../../src/store/sqlite/roles-repo.ts';
import type { SqliteStore } from '../../src/store/sqlite/store.ts';
import { createSqliteUsersRepo } from '../../src/store/sqlite/users-repo.ts';
import { createSqliteWebhooksRepo } from '../../src/store/sqlite/webhooks-repo.ts';

const cache = new WeakMap<object, ReturnType<typeof build>>();

function build(db: SqliteStore['db']) {
  return {
    orgs: createSqliteOrgsRepo(db),
    roles: createSqliteRolesRepo(db),
    users: createSqliteUsersRepo(db),
    webhooks: createSqliteWebhooksRepo(db),
    feed: createSqliteFeedRepo(db),
    deliveries: createSqliteDeliveriesRepo(db),
    retention: createSqliteRetentionRepo(db),
  };
}

/** The store's repositories, synchronous (prepared once per connection). */
export function repos(store: Pick<SqliteStore, 'db'>) {
  let r = cache.get(store.db);
  if (r === undefined) cache.set(store.db, (r = build(store.db)));
  return r;
}

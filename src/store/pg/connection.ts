import type { ClientBase } from 'pg';

/**
 * What a PostgreSQL repository runs its statements on: the pooled connection of the
 * transaction it belongs to (store.ts hands each transaction fresh repositories over its own
 * connection). Only `query`, so that a repository cannot begin, commit or release anything.
 */
export type PgConnection = Pick<ClientBase, 'query'>;

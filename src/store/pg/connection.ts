import type { ClientBase, Pool, PoolClient } from 'pg';

/**
 * What a PostgreSQL repository runs its statements on: the pooled connection of the
 * transaction it belongs to (store.ts hands each transaction fresh repositories over its own
 * connection). Only `query`, so that a repository cannot begin, commit or release anything.
 */
export type PgConnection = Pick<ClientBase, 'query'>;

/**
 * Runs `fn` between `begin` and COMMIT on a connection of the pool's own. Whatever fails
 * (BEGIN, `fn`, a statement, COMMIT), the transaction is rolled back and the error passed on.
 * A connection that failed while checked out (the server restarted, the network dropped, an
 * administrator ended the session) or that cannot even roll back is closed rather than given
 * back to the pool.
 */
export async function inPgTransaction<T>(pool: Pool, begin: string, fn: (client: PoolClient) => Promise<T>): Promise<T> {
  const client = await pool.connect();
  let broken: Error | undefined;
  // pg emits a checked-out connection's failure as an 'error' event on its client, which the
  // pool only listens to while the client is idle: unheard, it would end the process. The
  // statement under way fails with it too, so noting it is enough.
  const onError = (err: Error): void => {
    broken ??= err;
  };
  client.on('error', onError);
  try {
    await client.query(begin);
    const value = await fn(client);
    await client.query('COMMIT');
    return value;
  } catch (err) {
    // After a failed COMMIT the server has ended the transaction already: this ROLLBACK only
    // draws a warning then. It fails when the connection is gone.
    await client.query('ROLLBACK').catch((rollbackErr: unknown) => {
      broken ??= rollbackErr instanceof Error ? rollbackErr : new Error(String(rollbackErr));
    });
    throw err;
  } finally {
    client.removeListener('error', onError);
    client.release(broken);
  }
}

/**
 * Which PostgreSQL failures go away by themselves: the server cannot be reached, restarts,
 * refuses connections for a while, or the connection dropped. A daemon keeps what it was
 * writing and tries again; anything else (a refused password, a missing database, a
 * constraint) is a fault to report.
 */

/**
 * SQLSTATEs that are worth waiting out: connection exceptions (class 08), the server shutting
 * down or starting (57P01-57P03), too many connections (53300), a deadlock or serialization
 * failure (the transaction is retried whole); a statement the server cancelled (57014: a
 * statement_timeout, typically behind a lock another session holds, or an administrator's
 * pg_cancel_backend) or that could not get its lock in time (55P03: lock_timeout); a session
 * the server ended for sitting idle (25P03: idle_in_transaction_session_timeout, after the
 * instance was paused or cut off mid-transaction; 57P05: idle_session_timeout). None of these
 * says anything about the write itself: the same write succeeds once the lock is free.
 */
const TRANSIENT_SQLSTATE = /^(08...|57P0[1235]|53300|40P01|40001|57014|55P03|25P03)$/;
/** Node.js socket errors (ECONNREFUSED, ETIMEDOUT, ENOTFOUND, EAI_AGAIN...). */
const SOCKET_ERROR = /^(E[A-Z]+|EAI_[A-Z]+)$/;
/** pg's own messages for a connection that ended or could not be made in time. */
const CONNECTION_MESSAGE = /^(Connection terminated|timeout expired|Client has encountered a connection error|Connection terminated due to connection timeout)/;

export function isTransientPgError(err: unknown): boolean {
  if (!(err instanceof Error)) return false;
  const code = (err as { code?: unknown }).code;
  if (typeof code === 'string' && (TRANSIENT_SQLSTATE.test(code) || SOCKET_ERROR.test(code))) return true;
  if (CONNECTION_MESSAGE.test(err.message)) return true;
  return err.cause !== undefined && err.cause !== err && isTransientPgError(err.cause);
}

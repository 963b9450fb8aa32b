/**
 * The repositories the PostgreSQL backend does not have yet (issue 12): feed and deliveries.
 * Until they are built, every call fails with `invalid_config` and a sentence saying so, rather
 * than doing something approximate: a daemon pointed at PostgreSQL today cannot ingest or
 * deliver, and says why on its first attempt.
 */
import { ErrorCode, HookrelayError } from '../../domain/errors.ts';
import type { DeliveriesRepo } from '../repos.ts';

/**
 * A repository whose every method rejects. `methods` names each method of R once: the
 * compiler checks that none is missing, so an interface that grows a method cannot leave this
 * stand-in without it.
 */
function unbuilt<R>(repo: string, methods: Record<keyof R, true>): R {
  const out: Record<string, () => Promise<never>> = {};
  for (const method of Object.keys(methods)) {
    out[method] = () =>
      Promise.reject(
        new HookrelayError(
          ErrorCode.config,
          `${repo}.${method} is not yet implemented on PostgreSQL (issue 12); use the SQLite backend (database.path) for now`,
        ),
      );
  }
  return out as R;
}

export const unbuiltDeliveriesRepo: DeliveriesRepo = unbuilt<DeliveriesRepo>('deliveries', {
  insert: true,
  insertMany: true,
  dueRows: true,
  nextRetryAt: true,
  markUnsendable: true,
  lease: true,
  insertAttempts: true,
  settle: true,
  release: true,
  get: true,
  attempts: true,
  list: true,
  eventOf: true,
  hasPendingDelivery: true,
  recoverable: true,
  hurryFailed: true,
  countPendingChunk: true,
  oldestDueAt: true,
  recentFailure: true,
  insertTestEvent: true,
});

/**
 * In-process wake-ups for the dispatcher: a service that has just committed work for an
 * organization (ingested events, a replay, a recovery, a test event) or changed its webhook
 * (registered, enabled) says so here, and the dispatcher looks at that organization at once
 * instead of at its next poll. Only the daemon's own process is heard: changes another process
 * makes (the CLI) are found by the poll, `delivery.pollInterval` later at most.
 */
import type { WorkListener, WorkSignal } from '../domain/work.ts';

export type { WorkKind, WorkListener, WorkSignal } from '../domain/work.ts';

export function createWorkSignal(): WorkSignal {
  const listeners = new Set<WorkListener>();
  return {
    notify(orgId, kind, keys) {
      for (const listener of listeners) listener(orgId, kind, keys);
    },
    subscribe(listener) {
      listeners.add(listener);
      return () => listeners.delete(listener);
    },
  };
}

/** For processes without a dispatcher (the CLI, tests of other parts): nobody listens. */
export const nobodyListens: WorkSignal = { notify: () => {}, subscribe: () => () => {} };

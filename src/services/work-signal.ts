/**
 * In-process wake-ups for the dispatcher: a service that has just committed work for an
 * organization (ingested events, a replay, a recovery, a test event) or changed its webhook
 * (registered, enabled) says so here, and the dispatcher looks at that organization at once
 * instead of at its next poll. Only the daemon's own process is heard: changes another process
 * makes (the CLI) are found by the poll, `delivery.pollInterval` later at most.
 */
export type WorkKind = 'queued' | 'webhook';

/**
 * `keys`, with `queued`: the ordering keys (requests) of the deliveries queued, when the caller
 * knows them all; the dispatcher then knows which deliveries in flight they wait behind.
 * Without, it assumes any of them may.
 */
export type WorkListener = (orgId: string, kind: WorkKind, keys?: ReadonlySet<number>) => void;

export interface WorkSignal {
  /** Call after the transaction that made the change has committed. */
  notify(orgId: string, kind: WorkKind, keys?: ReadonlySet<number>): void;
  /** Returns the function that unsubscribes. */
  subscribe(listener: WorkListener): () => void;
}

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

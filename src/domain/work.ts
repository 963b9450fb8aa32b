/**
 * The shape of a work signal (services/work-signal.ts makes them): what tells the dispatcher,
 * in this process or in another instance of a shared database (store/pg/wakeups.ts), that an
 * organization has work. Types only, so that the store can carry signals without importing a
 * service.
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

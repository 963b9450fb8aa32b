/**
 * SQLite's repositories are synchronous (better-sqlite3 runs a statement on the calling thread
 * in microseconds, with nothing to wait for); the store boundary is asynchronous (repos.ts), as
 * PostgreSQL needs. Each SQLite repository is written against `Sync<Interface>`, so the
 * compiler checks it against the boundary, and asyncRepo() puts it behind the boundary: one
 * settled promise per call, no other cost.
 */

/** The synchronous form of a repository interface: the same methods, returning their values. */
export type Sync<R> = {
  [K in keyof R]: R[K] extends (...args: infer A) => Promise<infer T> ? (...args: A) => T : never;
};

/** The repository `sync` behind its asynchronous interface: a throw becomes a rejected promise. */
export function asyncRepo<R extends object>(sync: Sync<R>): R {
  const out: Record<string, unknown> = {};
  for (const key of Object.keys(sync)) {
    const method = (sync as Record<string, unknown>)[key];
    if (typeof method !== 'function') continue;
    out[key] = (...args: unknown[]) => {
      try {
        return Promise.resolve(method.apply(sync, args));
      } catch (err) {
        return Promise.reject(err);
      }
    };
  }
  return out as R;
}

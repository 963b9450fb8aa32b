/**
 * The daemon as an ordered list of parts (relay.ts is the floor plan): each part has a name, a
 * start and a stop; the list starts them in order and stops the started ones in reverse, going
 * on past a part that fails to stop and reporting every failure together, as graphile-worker's
 * worker pool deactivates and terminates. Adding a part is adding it to the list.
 */

/** One part of the running daemon. */
export interface DaemonPart {
  readonly name: string;
  /**
   * Starts the part. A part that waits (for the database to be reachable, say) returns early
   * when the daemon is asked to stop meanwhile; the list then starts no further part.
   */
  start(): Promise<void> | void;
  /**
   * Stops the part, also after a start that failed half-way (what it holds is released, what it
   * never made is skipped). `deadlineMs` bounds work in flight (requests, attempts).
   */
  stop(deadlineMs: number): Promise<void> | void;
}

/** A part that failed to stop, and how. */
export interface StopFailure {
  readonly part: string;
  readonly err: unknown;
}

export class PartList {
  readonly #parts: readonly DaemonPart[];
  readonly #stopRequested: () => boolean;
  /** How many parts (from the first) have been started, or were being started when a start failed. */
  #started = 0;

  /** `stopRequested` says whether stop() has been called: a start in progress ends at the next part. */
  constructor(parts: readonly DaemonPart[], stopRequested: () => boolean) {
    this.#stopRequested = stopRequested;
    const names = new Set<string>();
    for (const part of parts) {
      if (names.has(part.name)) throw new Error(`two daemon parts are named ${part.name}`);
      names.add(part.name);
    }
    this.#parts = parts;
  }

  get names(): readonly string[] {
    return this.#parts.map((p) => p.name);
  }

  /**
   * Starts every part in order, or until a stop is requested (then the rest stay unstarted). A
   * part that throws counts as started, so that stop() releases what it had made before failing.
   */
  async start(): Promise<void> {
    for (const part of this.#parts.slice(this.#started)) {
      if (this.#stopRequested()) return;
      this.#started++;
      await part.start();
    }
  }

  /** Stops the started parts, the last started first, each once; returns those that failed. */
  async stop(deadlineMs: number): Promise<StopFailure[]> {
    const failures: StopFailure[] = [];
    while (this.#started > 0) {
      const part = this.#parts[--this.#started]!;
      try {
        await part.stop(deadlineMs);
      } catch (err) {
        failures.push({ part: part.name, err });
      }
    }
    return failures;
  }
}

/** The failures of a stop as one error: each part named, each error its cause. */
export function stopError(failures: readonly StopFailure[]): AggregateError {
  return new AggregateError(
    failures.map(({ part, err }) => new Error(`stopping ${part} failed: ${err instanceof Error ? err.message : String(err)}`, { cause: err })),
    `stopping the daemon: ${failures.length} part(s) failed (${failures.map((f) => f.part).join(', ')}); the others stopped`,
  );
}

/**
 * A value one part makes and later parts use (the store, the services, a server): set when the
 * part starts, taken back when it stops. Reading one that is not there is a wiring mistake,
 * said with its name.
 */
export class Slot<T> {
  readonly name: string;
  #value: T | null = null;

  constructor(name: string) {
    this.name = name;
  }

  get(): T {
    if (this.#value === null) throw new Error(`${this.name} is not running`);
    return this.#value;
  }

  /** The value, or null before its part started and after it stopped. */
  peek(): T | null {
    return this.#value;
  }

  set(value: T): T {
    this.#value = value;
    return value;
  }

  /** The value, now no longer held (null when there was none): what a stop releases. */
  take(): T | null {
    const value = this.#value;
    this.#value = null;
    return value;
  }
}

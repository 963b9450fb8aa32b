/** Live refresh of the shown view. No DOM access (unit-tested under Node with mock timers). */

/** How often a shown view asks the API again (the issue asks for a new status within 5 s). */
export const REFRESH_INTERVAL_MS = 3000;

export interface PollerOptions {
  /** One refresh; the next is scheduled only when it has settled, so refreshes never overlap. */
  readonly run: () => Promise<void>;
  /** Whether the page is seen (document.visibilityState === 'visible'); hidden pages skip their turn. */
  readonly isVisible: () => boolean;
  readonly intervalMs?: number;
  readonly setTimer?: (fn: () => void, ms: number) => unknown;
  readonly clearTimer?: (handle: unknown) => void;
}

export interface Poller {
  /** Starts the schedule (the first run is one interval away: the view loads itself first). */
  start(): void;
  /** Runs now (unless a run is under way) and restarts the schedule: on becoming visible again. */
  now(): void;
  stop(): void;
}

export function createPoller(options: PollerOptions): Poller {
  const interval = options.intervalMs ?? REFRESH_INTERVAL_MS;
  const setTimer = options.setTimer ?? ((fn: () => void, ms: number) => setTimeout(fn, ms));
  const clearTimer = options.clearTimer ?? ((handle: unknown) => clearTimeout(handle as ReturnType<typeof setTimeout>));
  let timer: unknown = null;
  let running = false;
  let stopped = true;

  const schedule = () => {
    if (timer !== null) clearTimer(timer);
    timer = stopped ? null : setTimer(tick, interval);
  };

  async function tick(): Promise<void> {
    timer = null;
    if (stopped || running) return;
    if (!options.isVisible()) return schedule();
    running = true;
    try {
      await options.run();
    } catch {
      // the run reports its own failures; the schedule goes on
    } finally {
      running = false;
      schedule();
    }
  }

  return {
    start() {
      stopped = false;
      schedule();
    },
    now() {
      if (stopped || running) return;
      if (timer !== null) clearTimer(timer);
      timer = null;
      void tick();
    },
    stop() {
      stopped = true;
      if (timer !== null) clearTimer(timer);
      timer = null;
    },
  };
}

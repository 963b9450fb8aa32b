/** Source of the current time in epoch milliseconds; injectable so tests control time. */
export interface Clock {
  now(): number;
}

export const systemClock: Clock = { now: () => Date.now() };

/** Back-off between tries of a write (or an open) that failed on a storage fault: 0.5 s, 1 s, 2 s, ... up to this. */
export const MAX_STORAGE_RETRY_MS = 10_000;

/** The wait (ms) before try number `failures` + 1 of a write (or an open) that failed `failures` times in a row on a storage fault. */
export function storageRetryDelayMs(failures: number): number {
  return Math.min(500 * 2 ** Math.max(0, Math.min(failures - 1, 10)), MAX_STORAGE_RETRY_MS);
}

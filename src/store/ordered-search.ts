/**
 * A binary search over a table whose time column never decreases along its integer key (events'
 * received_at along seq, deliveries' created_at along id): a time window becomes a key range in
 * O(log n) primary-key lookups, with no index on the time.
 *
 * Returns the smallest key k in [lo, hi + 1] such that the first row at or after k has its time
 * at or after `t` (hi + 1 when none has). `firstAtOrAfter(k)` reads the first row whose key is
 * k or more, with its time.
 */
export function firstKeyAtOrAfter(lo: number, hi: number, t: number, firstAtOrAfter: (key: number) => { key: number; at: number } | undefined): number {
  let low = lo;
  let high = hi + 1;
  while (low < high) {
    const mid = Math.floor((low + high) / 2);
    const row = firstAtOrAfter(mid);
    if (row === undefined || row.at >= t) high = mid;
    else low = row.key + 1;
  }
  return low;
}

/**
 * A binary search over a table whose time column never decreases along its integer key (events'
 * received_at along seq, deliveries' created_at along id): a time window becomes a key range in
 * O(log n) primary-key lookups, with no index on the time.
 *
 * Returns the smallest key k in [lo, hi + 1] such that the first row at or after k has its time
 * at or after `t` (hi + 1 when none has). `firstAtOrAfter(k)` reads the first row whose key is
 * k or more, with its time.
 */
function firstKeyAtOrAfter(lo: number, hi: number, t: number, firstAtOrAfter: (key: number) => { key: number; at: number } | undefined): number {
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

/**
 * The keys of the rows whose time is in [since, until) (null: unbounded on that side), as a
 * half-open range [from, to), given the table's smallest and largest key (`bounds`; null, or no
 * row, for an empty table: `{ from: 0, to: 0 }`). See firstKeyAtOrAfter.
 */
export function keyRange(
  bounds: { lo: number | null; hi: number | null } | undefined,
  since: number | null,
  until: number | null,
  firstAtOrAfter: (key: number) => { key: number; at: number } | undefined,
): { from: number; to: number } {
  if (!bounds || bounds.lo === null || bounds.hi === null) return { from: 0, to: 0 };
  const { lo, hi } = bounds;
  return {
    from: since === null ? lo : firstKeyAtOrAfter(lo, hi, since, firstAtOrAfter),
    to: until === null ? hi + 1 : firstKeyAtOrAfter(lo, hi, until, firstAtOrAfter),
  };
}

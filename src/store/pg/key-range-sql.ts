/**
 * ../sqlite/key-range.ts's binary search in one statement on the server: for each bound t ($1 as
 * k = 0, $2 as k = 1), the smallest key in [min(key), max(key) + 1] such that the first row at or
 * after it has its time at or after t, one primary-key lookup a step; every step reads the same
 * snapshot. The bounds are float8, so that an unbounded side is -Infinity or Infinity and a
 * window's ends need not be whole milliseconds; the comparison with the bigint column is exact
 * below 2^53. Answers rows (k, low).
 */
export function keyRangeSql(table: string, key: string, time: string): string {
  return `WITH RECURSIVE bounds AS (
    SELECT min(${key}) AS lo, max(${key}) AS hi FROM ${table}
  ), search (k, t, low, high) AS (
    SELECT w.k, w.t, b.lo, b.hi + 1 FROM bounds b CROSS JOIN (VALUES (0, $1::float8), (1, $2::float8)) AS w (k, t) WHERE b.lo IS NOT NULL
    UNION ALL
    SELECT s.k, s.t,
      CASE WHEN r.${key} IS NULL OR r.${time} >= s.t THEN s.low ELSE r.${key} + 1 END,
      CASE WHEN r.${key} IS NULL OR r.${time} >= s.t THEN (s.low + s.high) / 2 ELSE s.high END
    FROM search s
    LEFT JOIN LATERAL (SELECT x.${key}, x.${time} FROM ${table} x WHERE x.${key} >= (s.low + s.high) / 2 ORDER BY x.${key} LIMIT 1) r ON true
    WHERE s.low < s.high
  )
  SELECT k, low FROM search WHERE low >= high`;
}

/** The key range [from, to) in keyRangeSql's answer (rows (k, low)): `{ from: 0, to: 0 }` for an empty table. `what` names the caller in the error. */
export function keyRangeOf(rows: ReadonlyArray<{ k: number; low: number }>, what: string): { from: number; to: number } {
  if (rows.length === 0) return { from: 0, to: 0 };
  const at = (k: number): number => {
    const row = rows.find((r) => r.k === k);
    if (row === undefined) throw new Error(`${what} found no bound ${k}`);
    return row.low;
  };
  return { from: at(0), to: at(1) };
}

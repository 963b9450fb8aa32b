/** The feed the benchmarks read: the same line shape for every script, so their figures compare. */
import { createWriteStream, statSync } from 'node:fs';
import { once } from 'node:events';

/**
 * Writes feed lines `from` .. `from + n - 1` to `path` (about 300 bytes each with a 55-byte
 * `filler`): 50 organizations in turn, a request id spread over a million, `occurred_at` one
 * second apart, the event id `eventId(i)` (none when undefined). Returns the file's size.
 */
export async function writeBenchFeed(path: string, from: number, n: number, eventId: (i: number) => string | undefined, filler: string): Promise<number> {
  const out = createWriteStream(path);
  for (let i = from; i < from + n; i++) {
    const line =
      JSON.stringify({
        organization_id: `org-${i % 50}`,
        anticipation_request_id: `ar-${(i * 7919) % 1_000_003}`,
        status: i % 3 === 0 ? 'approved' : 'pending_review',
        previous_status: 'submitted',
        occurred_at: new Date(1_790_000_000_000 + i * 1000).toISOString(),
        event_id: eventId(i),
        data: { amount_cents: i * 13, currency: 'EUR', note: filler },
      }) + '\n';
    if (!out.write(line)) await once(out, 'drain');
  }
  out.end();
  await once(out, 'finish');
  return statSync(path).size;
}

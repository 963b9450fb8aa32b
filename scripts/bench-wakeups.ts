/**
 * What waking up costs on this machine: the CPU a process is charged for a thread that sleeps
 * and wakes, and for the same piece of work done back to back or one at a time with sleeps
 * between. A relay fed 100 events a second wakes several times per event and does each event's
 * work with cold caches; in bulk it does neither. This separates that cost of the machine from
 * the relay's own (docs/benchmarks.md, "What a wake-up costs here").
 *
 *   node --import tsx scripts/bench-wakeups.ts [--seconds 5] [--rounds 3]
 *
 * Measures, each over about --seconds, --rounds times alternated, medians printed:
 * - a bare wake-up: a thread sleeping 10 ms in the kernel (Atomics.wait on a futex), then
 *   waking, with no event loop: CPU per wake-up;
 * - an empty event-loop wake-up: a timer every 10 ms (and every 1 ms) that does nothing;
 * - a unit of work (parse a feed line's JSON, build a webhook body, sign it with HMAC-SHA256,
 *   a few map operations: roughly what a relay does per event outside its store and HTTP
 *   client) done back to back, and once per timer tick every 10 ms and every 1 ms: CPU per
 *   unit, and its ratio to back to back.
 * CPU is process.cpuUsage() (user + system, every thread).
 */
import { createHmac } from 'node:crypto';
import { parseArgs } from 'node:util';

const { values } = parseArgs({ options: { seconds: { type: 'string' }, rounds: { type: 'string' } } });
const seconds = Number(values.seconds ?? 5);
const rounds = Number(values.rounds ?? 3);
if (!(seconds > 0) || !Number.isInteger(rounds) || rounds < 1) throw new Error('--seconds must be positive and --rounds a positive integer');

const line = JSON.stringify({
  event_id: 'evt-paced-1234',
  organization_id: 'org-07',
  anticipation_request_id: 'ar-77',
  status: 'approved',
  previous_status: 'submitted',
  occurred_at: '2026-11-23T10:00:00.000Z',
  appended_at: 1795747681163.159,
});
const secret = Buffer.from('a-webhook-secret-of-thirty-two-b');
const seen = new Map<string, number>();

/** One unit of per-event work; returns something so that nothing is optimised away. */
function unit(n: number): number {
  const event = JSON.parse(line) as Record<string, unknown>;
  event.event_id = `evt-paced-${n}`;
  const body = JSON.stringify({ type: 'anticipation_request.status_changed', timestamp: event.occurred_at, data: event });
  const signature = createHmac('sha256', secret).update(`${String(event.event_id)}.${Math.floor(n / 1000)}.${body}`).digest('base64');
  seen.set(String(event.event_id), n);
  if (seen.size > 1000) seen.clear();
  return signature.length + body.length;
}

const cpuMs = () => {
  const u = process.cpuUsage();
  return (u.user + u.system) / 1000;
};

/** CPU (µs) per batch of `work` units done back to back. */
function backToBack(work: number): number {
  const count = Math.max(200, Math.round(20_000 / work));
  let sink = 0;
  const start = cpuMs();
  for (let i = 0; i < count; i++) for (let j = 0; j < work; j++) sink += unit(i * work + j);
  if (sink < 0) console.log(sink);
  return ((cpuMs() - start) * 1000) / count;
}

/** CPU per tick (µs) of a timer every `everyMs` for about --seconds, doing `work` units per tick. */
function ticking(everyMs: number, work: number): Promise<number> {
  const ticks = Math.max(50, Math.round((seconds * 1000) / everyMs));
  return new Promise((resolve) => {
    let done = 0;
    let sink = 0;
    const start = cpuMs();
    const timer = setInterval(() => {
      for (let i = 0; i < work; i++) sink += unit(done * work + i);
      if (++done === ticks) {
        clearInterval(timer);
        if (sink < 0) console.log(sink);
        resolve(((cpuMs() - start) * 1000) / ticks);
      }
    }, everyMs);
  });
}

/** CPU per wake-up (µs) of this thread sleeping 10 ms in the kernel, no event loop involved. */
function bareWakeups(): number {
  const cell = new Int32Array(new SharedArrayBuffer(4));
  const count = Math.max(50, Math.round((seconds * 1000) / 10));
  const start = cpuMs();
  for (let i = 0; i < count; i++) Atomics.wait(cell, 0, 0, 10);
  return ((cpuMs() - start) * 1000) / count;
}

const median = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  const m = Math.floor(s.length / 2);
  return s.length % 2 === 1 ? s[m]! : (s[m - 1]! + s[m]!) / 2;
};

// Warm: the unit's code optimised before anything is measured.
for (let i = 0; i < 20_000; i++) unit(i);

/** Units per batch: one (a small event's work) and BIG (about the CPU a relay spends per event in bulk outside its kernel calls). */
const BIG = 20;
const results = {
  bare: [] as number[],
  empty10: [] as number[],
  empty1: [] as number[],
  hot1: [] as number[],
  every10x1: [] as number[],
  every1x1: [] as number[],
  hotBig: [] as number[],
  every10xBig: [] as number[],
};
for (let r = 0; r < rounds; r++) {
  results.bare.push(bareWakeups());
  results.empty10.push(await ticking(10, 0));
  results.empty1.push(await ticking(1, 0));
  results.hot1.push(backToBack(1));
  results.every10x1.push(await ticking(10, 1));
  results.every1x1.push(await ticking(1, 1));
  results.hotBig.push(backToBack(BIG));
  results.every10xBig.push(await ticking(10, BIG));
}
const m = Object.fromEntries(Object.entries(results).map(([k, v]) => [k, median(v)])) as Record<keyof typeof results, number>;
const f = (us: number) => `${us.toFixed(1)} µs`.padStart(10);
const vs = (paced: number, hot: number, empty: number) => `(${(paced / hot).toFixed(1)}x back to back; ${f(paced - empty).trim()} beyond the empty tick)`;
console.log(`Node ${process.version}, ${rounds} round(s) of about ${seconds} s each, medians (CPU: user + system, all threads)`);
console.log(`bare wake-up (a thread sleeping 10 ms in the kernel)   ${f(m.bare)} per wake-up`);
console.log(`empty event-loop tick, a timer every 10 ms             ${f(m.empty10)} per tick`);
console.log(`empty event-loop tick, a timer every 1 ms              ${f(m.empty1)} per tick`);
console.log(`1 unit of work, back to back                           ${f(m.hot1)}`);
console.log(`1 unit per tick, every 10 ms                           ${f(m.every10x1)} per tick ${vs(m.every10x1, m.hot1, m.empty10)}`);
console.log(`1 unit per tick, every 1 ms                            ${f(m.every1x1)} per tick ${vs(m.every1x1, m.hot1, m.empty1)}`);
console.log(`${BIG} units, back to back                              ${f(m.hotBig)}`);
console.log(`${BIG} units per tick, every 10 ms                         ${f(m.every10xBig)} per tick ${vs(m.every10xBig, m.hotBig, m.empty10)}`);
console.log(JSON.stringify({ node: process.version, seconds, rounds, medians: m, runs: results }));

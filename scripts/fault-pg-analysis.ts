/**
 * What the PostgreSQL fault suite (scripts/fault-suite-pg.ts) makes of what it saw: the
 * changes written to the feeds, every request the receivers got, the faults' windows, the
 * /readyz probes and when each event was stored. Pure: no I/O (test/scripts/fault-pg-analysis.test.ts).
 *
 * Per fault window (from the fault's start to the next fault's start; a first row for the calm
 * before the first fault):
 * - events: changes written in the window; delivered: those that reached a receiver; lost:
 *   those that never did (by the end of the run). duplicates: receipts beyond a change's
 *   first, in the window they arrived in.
 * - order violations, per request: a change whose first receipt came after the first receipt
 *   of a later change of its request (later: in the order its request's changes were written,
 *   which is their occurred_at order), counted once per late change, in the window of its
 *   late receipt. Split by cause: "stored late" when hookrelay itself found, at the change's
 *   first lease, that a later change of its request had been sent already (it logs each one,
 *   with its event id, and counts it: the change was stored too late, its feed not read in
 *   time, a paused or cut-off instance's feed; no order rule that looks at stored changes
 *   alone can help), else "sent out of order" (the relay sent a later change while the earlier
 *   one was stored: its own fault).
 * - stale re-sends: a second or later receipt of a change that arrives after a later change
 *   of its request had arrived (an attempt that went out after its lease was taken over).
 * - recovery: from the fault's end until every instance answers /readyz 200 and every change
 *   written before the fault's end has reached a receiver.
 * - readiness, for faults that leave instances without PostgreSQL: what their /readyz said
 *   from a grace period after the fault began until it ended.
 */

export interface Written {
  readonly eventId: string;
  readonly request: number;
  /** Its place among its request's changes (0, 1, ...): the order they happened in. */
  readonly change: number;
  /** performance.now() when appended. */
  readonly atMono: number;
}

export interface Arrival {
  readonly eventId: string;
  /** performance.now() and Date.now() when the receiver got it. */
  readonly atMono: number;
  readonly atWall: number;
  /** Which instance sent it (its address). */
  readonly from: string;
}

export interface FaultWindow {
  readonly fault: string;
  readonly round: number;
  /** What it hit: an instance's name, or the server. */
  readonly target: string;
  /** performance.now(): the fault began, ended (healed), and the next fault began (the window's end). */
  readonly startMono: number;
  readonly endMono: number;
  readonly nextMono: number;
  /** Instances (indexes into the probes' `instance`) that had no PostgreSQL during the fault: their /readyz is judged. */
  readonly unreachable: readonly number[];
  /** How many receipts beyond the first the fault may cause (what the instances it hit can have in flight). */
  readonly duplicateBound: number;
}

export interface ReadyProbe {
  readonly instance: number;
  readonly atMono: number;
  /** HTTP status, or null: no answer in time. */
  readonly status: number | null;
  readonly reason: string | null;
}

export interface Readiness {
  /** Probes of the instances without PostgreSQL, from the grace period on until the fault ended. */
  readonly probes: number;
  readonly ready: number;
  readonly notReadyWithReason: number;
  readonly notReadyWithoutReason: number;
  readonly noAnswer: number;
  /** The reasons seen. */
  readonly reasons: readonly string[];
  readonly ok: boolean;
}

export interface FaultRow {
  readonly fault: string;
  readonly round: number;
  readonly target: string;
  readonly seconds: number;
  readonly events: number;
  readonly delivered: number;
  readonly lost: number;
  readonly duplicates: number;
  readonly duplicateBound: number;
  readonly orderStoredLate: number;
  readonly orderSentOutOfOrder: number;
  readonly staleResends: number;
  /** Seconds from a change's append to its first receipt, for the changes written in the window: median and 99th percentile. */
  readonly latencyP50: number | null;
  readonly latencyP99: number | null;
  /** Seconds from the fault's end to recovery; null: not within the window. */
  readonly recoverySeconds: number | null;
  readonly readiness: Readiness | null;
}

export interface Analysis {
  readonly rows: FaultRow[];
  readonly written: number;
  readonly delivered: number;
  readonly lost: number;
  readonly duplicates: number;
  readonly orderStoredLate: number;
  readonly orderSentOutOfOrder: number;
  readonly staleResends: number;
  /** Some of the lost, for the report. */
  readonly lostSample: string[];
  /** Some of the violations, for the report: request, late change, the later change that overtook it, the cause. */
  readonly violationSample: string[];
}

/** How long after a fault begins /readyz is given to notice it (a statement in flight ends, the ping's deadline passes); half a shorter fault. */
export const READINESS_GRACE_MS = 5000;

interface EventState {
  readonly w: Written;
  first: Arrival | null;
  firstIndex: number;
  receipts: number;
}

/** Judges a run (see the file's comment). `storedLate`: the event ids hookrelay found stored too late. `instances`: how many. */
export function analyse(
  written: readonly Written[],
  arrivals: readonly Arrival[],
  windows: readonly FaultWindow[],
  probes: readonly ReadyProbe[],
  storedLate: ReadonlySet<string>,
  runStartMono: number,
  instances: number,
): Analysis {
  const byEvent = new Map<string, EventState>();
  for (const w of written) byEvent.set(w.eventId, { w, first: null, firstIndex: -1, receipts: 0 });
  arrivals.forEach((a, i) => {
    const e = byEvent.get(a.eventId);
    if (e === undefined) return;
    e.receipts++;
    if (e.first === null) {
      e.first = a;
      e.firstIndex = i;
    }
  });
  const all: FaultWindow[] = [
    { fault: 'none (calm)', round: 0, target: '-', startMono: runStartMono, endMono: windows[0]?.startMono ?? Infinity, nextMono: windows[0]?.startMono ?? Infinity, unreachable: [], duplicateBound: 0 },
    ...windows,
  ];
  const windowOf = (mono: number) => {
    for (let i = all.length - 1; i >= 0; i--) if (mono >= all[i]!.startMono) return i;
    return 0;
  };
  const rows = all.map((w) => ({ ...w, events: 0, delivered: 0, lost: 0, duplicates: 0, storedLate: 0, sentOutOfOrder: 0, stale: 0, latencies: [] as number[] }));
  const lostSample: string[] = [];
  for (const e of byEvent.values()) {
    const row = rows[windowOf(e.w.atMono)]!;
    row.events++;
    if (e.first === null) {
      row.lost++;
      if (lostSample.length < 20) lostSample.push(e.w.eventId);
    } else {
      row.delivered++;
      row.latencies.push(e.first.atMono - e.w.atMono);
    }
  }

  // Order per request.
  const byRequest = new Map<number, EventState[]>();
  for (const e of byEvent.values()) {
    const list = byRequest.get(e.w.request) ?? [];
    list[e.w.change] = e;
    byRequest.set(e.w.request, list);
  }
  const violationSample: string[] = [];
  for (const changes of byRequest.values()) {
    // From the last change back: the earliest first receipt among the later changes.
    let earliestLater: EventState | null = null;
    for (let j = changes.length - 1; j >= 0; j--) {
      const e = changes[j];
      if (e === undefined || e.first === null) continue;
      if (earliestLater !== null && earliestLater.firstIndex < e.firstIndex) {
        const late = storedLate.has(e.w.eventId);
        const row = rows[windowOf(e.first.atMono)]!;
        if (late) row.storedLate++;
        else row.sentOutOfOrder++;
        if (violationSample.length < 20) violationSample.push(`${e.w.eventId} after ${earliestLater.w.eventId} (${late ? 'stored late' : 'sent out of order'})`);
      }
      if (earliestLater === null || e.firstIndex < earliestLater.firstIndex) earliestLater = e;
    }
  }
  // Stale re-sends: a repeated receipt after a later change of its request had arrived.
  const firstOfLater = new Map<string, number>();
  for (const changes of byRequest.values()) {
    let earliest = Infinity;
    for (let j = changes.length - 1; j >= 0; j--) {
      const e = changes[j];
      if (e === undefined) continue;
      firstOfLater.set(e.w.eventId, earliest);
      if (e.first !== null) earliest = Math.min(earliest, e.firstIndex);
    }
  }
  arrivals.forEach((a, i) => {
    const e = byEvent.get(a.eventId);
    if (e === undefined || e.firstIndex === i) return;
    const row = rows[windowOf(a.atMono)]!;
    row.duplicates++;
    if ((firstOfLater.get(a.eventId) ?? Infinity) < i) row.stale++;
  });

  const out: FaultRow[] = rows.map((r, i) => ({
    fault: r.fault,
    round: r.round,
    target: r.target,
    seconds: i === 0 ? 0 : Math.round((r.endMono - r.startMono) / 100) / 10,
    events: r.events,
    delivered: r.delivered,
    lost: r.lost,
    duplicates: r.duplicates,
    duplicateBound: r.duplicateBound,
    orderStoredLate: r.storedLate,
    orderSentOutOfOrder: r.sentOutOfOrder,
    staleResends: r.stale,
    latencyP50: percentile(r.latencies, 0.5),
    latencyP99: percentile(r.latencies, 0.99),
    recoverySeconds: i === 0 ? null : recoverySeconds(all[i]!, byEvent, probes, instances),
    readiness: i === 0 || all[i]!.unreachable.length === 0 ? null : readinessDuring(all[i]!, probes),
  }));
  const sum = (f: (r: FaultRow) => number) => out.reduce((n, r) => n + f(r), 0);
  return {
    rows: out,
    written: written.length,
    delivered: sum((r) => r.delivered),
    lost: sum((r) => r.lost),
    duplicates: sum((r) => r.duplicates),
    orderStoredLate: sum((r) => r.orderStoredLate),
    orderSentOutOfOrder: sum((r) => r.orderSentOutOfOrder),
    staleResends: sum((r) => r.staleResends),
    lostSample,
    violationSample,
  };
}

/** The `q` quantile of `ms`, in seconds to a tenth; null for none. */
function percentile(ms: number[], q: number): number | null {
  if (ms.length === 0) return null;
  ms.sort((a, b) => a - b);
  return Math.round(ms[Math.min(ms.length - 1, Math.floor(q * ms.length))]! / 100) / 10;
}

/** Seconds from the fault's end until every instance answers 200 and everything written before the end has arrived; null when not before the window's end. */
function recoverySeconds(w: FaultWindow, byEvent: ReadonlyMap<string, EventState>, probes: readonly ReadyProbe[], instances: number): number | null {
  let readyAt = w.endMono;
  for (let k = 0; k < instances; k++) {
    const ok = probes.find((p) => p.instance === k && p.atMono >= w.endMono && p.status === 200);
    if (ok === undefined || ok.atMono > w.nextMono) return null;
    readyAt = Math.max(readyAt, ok.atMono);
  }
  let drainedAt = w.endMono;
  for (const e of byEvent.values()) {
    if (e.w.atMono >= w.endMono || e.first === null) continue;
    drainedAt = Math.max(drainedAt, e.first.atMono);
  }
  if (drainedAt > w.nextMono) return null;
  return Math.round((Math.max(readyAt, drainedAt) - w.endMono) / 100) / 10;
}

/** What the /readyz of the instances without PostgreSQL said during the fault, once the grace period had passed. */
function readinessDuring(w: FaultWindow, probes: readonly ReadyProbe[]): Readiness {
  const grace = Math.min(READINESS_GRACE_MS, (w.endMono - w.startMono) / 2);
  const during = probes.filter((p) => w.unreachable.includes(p.instance) && p.atMono >= w.startMono + grace && p.atMono <= w.endMono);
  const ready = during.filter((p) => p.status === 200).length;
  const withReason = during.filter((p) => p.status === 503 && p.reason !== null).length;
  const withoutReason = during.filter((p) => p.status !== null && p.status !== 200 && !(p.status === 503 && p.reason !== null)).length;
  const noAnswer = during.filter((p) => p.status === null).length;
  return {
    probes: during.length,
    ready,
    notReadyWithReason: withReason,
    notReadyWithoutReason: withoutReason,
    noAnswer,
    reasons: [...new Set(during.map((p) => p.reason).filter((r): r is string => r !== null))],
    ok: during.length > 0 && ready === 0 && withoutReason === 0 && noAnswer === 0,
  };
}

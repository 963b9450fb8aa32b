/**
 * What the PostgreSQL fault suite makes of a run (scripts/fault-pg-analysis.ts), on a run made
 * up by hand: a change lost, one received after a later change of its request (stored in time,
 * or stored late as hookrelay found), a stale re-send, duplicates counted in the window they
 * arrive in, recovery, and /readyz during an outage.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { analyse, type Arrival, type FaultWindow, type ReadyProbe, type Written } from '../../scripts/fault-pg-analysis.ts';

const w = (request: number, change: number, at: number): Written => ({ eventId: `e${request}-${change}`, request, change, atMono: at });
const a = (eventId: string, at: number): Arrival => ({ eventId, atMono: at, atWall: 1_000_000 + at, from: '10.0.0.11' });

test('lost, order violations by cause, stale re-sends and duplicates, each in its window', () => {
  const written = [w(1, 0, 100), w(1, 1, 200), w(1, 2, 300), w(2, 0, 1100), w(2, 1, 1200), w(3, 0, 1300), w(3, 1, 1400)];
  const arrivals = [
    a('e1-0', 150),
    a('e1-2', 1050), // before e1-1: a violation of e1-1, in the fault's window (e1-1 arrives at 1060)
    a('e1-1', 1060),
    a('e2-1', 1250), // before e2-0: stored late, as hookrelay found
    a('e2-0', 1260),
    a('e3-0', 1350),
    a('e3-1', 1450),
    a('e3-0', 1500), // a re-send after e3-1: stale, and a duplicate
    a('e1-0', 1600), // a re-send after e1-1 and e1-2 arrived: stale
  ];
  const windows: FaultWindow[] = [{ fault: 'sigstop', round: 1, target: 'relay-1', startMono: 1000, endMono: 1200, nextMono: 5000, unreachable: [], duplicateBound: 16 }];
  const probes: ReadyProbe[] = [0, 1].map((instance) => ({ instance, atMono: 1300, status: 200, reason: null }));
  const r = analyse([...written, w(4, 0, 1700)], arrivals, windows, probes, new Set(['e2-0']), 0, 2);
  assert.deepEqual(
    r.rows.map((x) => [x.fault, x.events, x.delivered, x.lost, x.duplicates, x.orderSentOutOfOrder, x.orderStoredLate, x.staleResends]),
    [
      ['none (calm)', 3, 3, 0, 0, 0, 0, 0],
      ['sigstop', 5, 4, 1, 2, 1, 1, 2],
    ],
  );
  assert.deepEqual([r.lost, r.lostSample], [1, ['e4-0']]);
  assert.deepEqual(r.violationSample.sort(), ['e1-1 after e1-2 (sent out of order)', 'e2-0 after e2-1 (stored late)']);
  // Ready at 1300; what was written before the end (1200) had all arrived by 1260.
  assert.equal(r.rows[1]!.recoverySeconds, 0.1);
  assert.equal(r.rows[1]!.readiness, null, 'no instance was without the database');
});

test('/readyz during an outage: 503 with a reason on every probe of the instances without the database, after the grace period', () => {
  const windows: FaultWindow[] = [{ fault: 'pg-restart', round: 1, target: 'server', startMono: 0, endMono: 10_000, nextMono: 20_000, unreachable: [0, 1], duplicateBound: 48 }];
  const probe = (instance: number, atMono: number, status: number | null, reason: string | null): ReadyProbe => ({ instance, atMono, status, reason });
  const good = [probe(0, 1000, 200, null), probe(0, 6000, 503, 'database_unreachable'), probe(1, 7000, 503, 'database_unreachable'), probe(0, 11_000, 200, null), probe(1, 11_500, 200, null)];
  const ok = analyse([], [], windows, good, new Set(), 0, 2).rows[1]!;
  assert.deepEqual(ok.readiness, { probes: 2, ready: 0, notReadyWithReason: 2, notReadyWithoutReason: 0, noAnswer: 0, reasons: ['database_unreachable'], ok: true });
  assert.equal(ok.recoverySeconds, 1.5);
  const silent = analyse([], [], windows, [...good, probe(1, 8000, null, null), probe(0, 9000, 503, null)], new Set(), 0, 2).rows[1]!;
  assert.deepEqual([silent.readiness?.ok, silent.readiness?.noAnswer, silent.readiness?.notReadyWithoutReason], [false, 1, 1]);
});

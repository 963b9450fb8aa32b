import { tracingOn } from '../config/load.ts';
import { VERSION } from '../version.ts';
import type { DaemonPart } from './parts.ts';
import type { Wiring } from './wiring.ts';

/**
 * OpenTelemetry traces (docs/observability.md), when tracing is on (tracingOn): started before
 * the ingest path, the admin API and the dispatcher, which make the spans, and stopped after
 * them, exporting what is left for up to tracing.timeout (and the stop's deadline) at most: a
 * collector that is down never holds the daemon's stop for longer. Off, nothing is started, the
 * slot stays empty and no part makes a span; the SDK and its exporters are not even loaded (they
 * are imported here, on start, only when tracing is on: a daemon without tracing starts as fast
 * as one built without it, which matters when a stop request comes during its start).
 */
export function tracing(w: Wiring): DaemonPart {
  return {
    name: 'tracing',
    async start() {
      const { config } = w;
      if (!tracingOn(config)) return;
      const { startTracing } = await import('../tracing/tracing.ts');
      w.tracing.set(startTracing(config, { version: VERSION, instanceName: config.instance.name, log: w.log }));
    },
    async stop(deadlineMs) {
      await w.tracing.take()?.shutdown(Math.min(deadlineMs, w.config.tracing.timeout));
    },
  };
}

import { tracingOn } from '../config/load.ts';
import { VERSION } from '../version.ts';
import { startTracing } from '../tracing/tracing.ts';
import type { DaemonPart } from './parts.ts';
import type { Wiring } from './wiring.ts';

/**
 * OpenTelemetry traces (docs/observability.md), when tracing is on (tracingOn): started before
 * the ingest path, the admin API and the dispatcher, which make the spans, and stopped after
 * them, exporting what is left for up to tracing.timeout (and the stop's deadline) at most: a
 * collector that is down never holds the daemon's stop for longer. Off, nothing is started, the
 * slot stays empty and no part makes a span.
 */
export function tracing(w: Wiring): DaemonPart {
  return {
    name: 'tracing',
    start() {
      const { config } = w;
      if (!tracingOn(config)) return;
      w.tracing.set(startTracing(config, { version: VERSION, instanceName: config.instance.name, log: w.log }));
    },
    async stop(deadlineMs) {
      await w.tracing.take()?.shutdown(Math.min(deadlineMs, w.config.tracing.timeout));
    },
  };
}

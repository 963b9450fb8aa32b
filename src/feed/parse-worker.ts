/**
 * Worker thread entry: parses batches of feed lines while the main thread commits the
 * previous batch to SQLite, so the two costs overlap on two cores instead of adding up.
 */
import { parentPort } from 'node:worker_threads';
import { parseAndPack } from './parsed-batch.ts';

export interface ParseRequest {
  readonly id: number;
  readonly bytes: Uint8Array;
  readonly lengths: Int32Array;
  readonly receivedAt: number;
}

parentPort?.on('message', (request: ParseRequest) => {
  const batch = parseAndPack(request.bytes, request.lengths, request.receivedAt);
  parentPort!.postMessage({ id: request.id, batch }, [batch.slots.buffer as ArrayBuffer, batch.occurredAt.buffer as ArrayBuffer, batch.text.buffer as ArrayBuffer]);
});

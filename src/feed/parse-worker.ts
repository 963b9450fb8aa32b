/**
 * Worker thread entry: parses batches of feed lines while the main thread commits the
 * previous batch to SQLite, so the two costs overlap on two cores instead of adding up.
 */
import { parentPort } from 'node:worker_threads';
import { parseAndPack, type PackedBatch } from './parsed-batch.ts';

export interface ParseRequest {
  readonly id: number;
  /** The lines back to back, a view of a SharedArrayBuffer (see LineBatch.forParser). */
  readonly bytes: Uint8Array;
  /** Per line its length, or -1 - its length for a line not to parse; shared too. */
  readonly lengths: Int32Array;
  readonly receivedAt: number;
  /** A buffer that held an earlier batch's results, to write these into (see PackedLines.release). */
  readonly text?: ArrayBuffer;
}

export interface ParseReply {
  readonly id: number;
  readonly batch: PackedBatch;
}

parentPort?.on('message', (request: ParseRequest) => {
  const batch = parseAndPack(request.bytes, request.lengths, request.receivedAt, request.text);
  const reply: ParseReply = { id: request.id, batch };
  // Every part of the results is a view of one buffer (see Packer).
  parentPort!.postMessage(reply, [batch.text.buffer as ArrayBuffer]);
});

/**
 * Worker thread entry: parses batches of feed lines while the main thread commits the
 * previous batch to SQLite, so the two costs overlap on two cores instead of adding up.
 */
import { parentPort } from 'node:worker_threads';
import { parseAndPack, type PackedBatch } from './parsed-batch.ts';

export interface ParseRequest {
  readonly id: number;
  readonly bytes: Uint8Array;
  readonly lengths: Int32Array;
  readonly receivedAt: number;
  /** A buffer that held an earlier batch's results, to write these into (see PackedLines.release). */
  readonly text?: ArrayBuffer;
}

/** The results, and the request's buffer given back to be filled again (see line-parser.ts). */
export interface ParseReply {
  readonly id: number;
  readonly batch: PackedBatch;
  readonly bytes: ArrayBuffer;
}

parentPort?.on('message', (request: ParseRequest) => {
  const batch = parseAndPack(request.bytes, request.lengths, request.receivedAt, request.text);
  const bytes = request.bytes.buffer as ArrayBuffer;
  const reply: ParseReply = { id: request.id, batch, bytes };
  parentPort!.postMessage(reply, [batch.slots.buffer as ArrayBuffer, batch.starts.buffer as ArrayBuffer, batch.occurredAt.buffer as ArrayBuffer, batch.text.buffer as ArrayBuffer, bytes]);
});

import { lstatSync, readSync } from 'node:fs';
import { lstat, readdir } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { setImmediate as yieldToEventLoop, setTimeout as sleep } from 'node:timers/promises';
import { RejectReason, type ParsedLines } from '../domain/feed-event.ts';
import type { Logger } from '../log.ts';
import type { IngestService, Lines } from '../services/ingest.ts';
import { storageRetryDelayMs, type StorageHealth } from '../services/storage-health.ts';
import type { FeedPosition } from '../store/types.ts';
import { BatchPipeline } from './batch-pipeline.ts';
import { watchForChanges, type ChangeWatch } from './change-watch.ts';
import {
  changedUnder,
  EMPTY_FINGERPRINT,
  FINGERPRINT_BYTES,
  fingerprintOf,
  isRefused,
  isSameFile,
  openFeed,
  refusalDetail,
  resolveLinks,
  sizeOf,
  tailFingerprintOf,
  type FeedProblem,
  type Identity,
  type OpenFeed,
} from './feed-file.ts';
import { BatchFiller } from './line-batch.ts';
import { inlineLineParser, type LineParser } from './line-parser.ts';
import { LineSplitter } from './line-splitter.ts';
import { FeedReaderFaults } from './reader-faults.ts';

/**
 * Largest read. 1 MiB reads ingest as fast as 4 MiB ones (docs/benchmarks.md, "Memory"); a reader
 * reads into two such buffers in turn.
 */
const READ_CHUNK_BYTES = 1 << 20;
const FIRST_READ_CHUNK_BYTES = 64 << 10;
/** Up to this many bytes past the position are read synchronously (see readToEnd). */
const SMALL_READ_BYTES = 64 << 10;
const RESTART_DELAY_MS = 1000;
/** Least time between two reads of a file that keeps changing: lines appended meanwhile share a commit. */
const MIN_READ_INTERVAL_MS = 4;

export interface FileTailerOptions {
  readonly path: string;
  readonly ingest: IngestService;
  readonly log: Logger;
  readonly maxLineBytes: number;
  readonly batchLines: number;
  /**
   * A batch is committed once it holds this many bytes of lines, whatever its line count (and at
   * `batchLines` lines): what a batch takes on its way (its lines, their copy for the parser
   * thread, the packed results) grows with it, and a large ingest holds two batches at once.
   */
  readonly batchBytes: number;
  readonly pollIntervalMs: number;
  readonly startPosition: 'start' | 'end';
  /** Parses batches (on a worker thread, see line-parser.ts); by default on this thread. */
  readonly parser?: LineParser;
  /**
   * Follow a symbolic link at `path` (feed.followSymlinks): resolved once, when the tailer
   * starts. Without it a link there is refused, as is anything else but a regular file.
   */
  readonly followSymlinks?: boolean;
  /**
   * Hears of storage faults (full disk, damaged database). With it, a commit that fails on one
   * is tried again, the same batch with the same position, after a back-off (never, on a damaged
   * database); without it, the reader restarts from the committed position.
   */
  readonly health?: StorageHealth;
  /** Counts the reader's failures and says when it is stuck (see FeedReaderFaults); one of its own by default. */
  readonly faults?: FeedReaderFaults;
}

/** Thrown by a commit whose lines no longer match the file (rewritten while it was read). */
class FeedChanged extends Error {
  constructor() {
    super('the feed file changed while it was read');
  }
}

/**
 * Tails a JSONL feed file the way `tail -F` does, with durable positions: every batch of lines
 * is committed together with the offset after it. Follows rotation by rename (the old file is
 * read to its end first, even if the rotation happened while the daemon was down), detects
 * truncation in place (copytruncate), and never consumes a line before its newline arrives.
 */
export function createFileTailer(options: FileTailerOptions) {
  const source = options.path;
  const log = options.log.child({ subsystem: 'feed', feed: source });
  const parser = options.parser ?? inlineLineParser;
  let controller: AbortController | null = null;
  let running: Promise<void> | null = null;
  /**
   * The path that is opened: `source`, or with followSymlinks what it resolved to at start.
   * Positions and counts stay under `source`.
   */
  let readPath = source;
  /** What is at the path while it is refused (logged once per change), or null. */
  let refusal: { kind: string; problem: FeedProblem } | null = null;
  const faults = options.faults ?? new FeedReaderFaults(() => options.ingest.now());
  /** Where the last commit ended, for the reader's failures to say where they happen. */
  let committedEnd: number | null = null;

  /** Something other than a regular file is at the path: said once per change of what it is. */
  function refuse(kind: string): void {
    if (refusal?.kind === kind) return;
    const detail = refusalDetail(readPath, kind);
    refusal = { kind, problem: { reason: 'feed_not_a_file', detail, since: options.ingest.now() } };
    log.error({ path: readPath, kind }, detail);
  }

  /** The path holds a regular file again, or nothing (then the wait for a file goes on). */
  function refusalOver(found: boolean): void {
    if (refusal === null) return;
    log.info({ path: readPath, was: refusal.kind }, found ? 'the feed path holds a regular file now: reading it' : 'the refused file at the feed path is gone; waiting for a regular file to appear');
    refusal = null;
  }

  /**
   * Reads `feed` from the splitter's position to the current end, committing a batch (with
   * the offset after its last line) every `batchLines` lines or `batchBytes` bytes, and at the end.
   * Batches are pipelined (see BatchPipeline): while one is committed, the next one is parsed.
   * When `signal` is aborted it returns after the batches in progress are committed, possibly
   * before the end of the file.
   */
  async function readToEnd(feed: OpenFeed, splitter: LineSplitter, fp: Identity, signal: AbortSignal): Promise<number> {
    let total = 0;
    const pipeline = new BatchPipeline<number>(parser, options.ingest.now, (lines, parsed, end) => commit(feed, fp, lines, end, parsed));
    // A batch ends with the last complete line: its end is where reading resumes.
    const batches = new BatchFiller(options.batchLines, options.batchBytes, (lines) => pipeline.submit(lines, splitter.consumed));
    // Double-buffered: the next chunk is read (in libuv's pool) while this one is ingested, into
    // the other of two buffers (the lines are copied out of a chunk before its buffer is read
    // into again). Chunks start small and grow while they come back full: a file appended to
    // line by line is read often, a few lines at a time.
    const buffers: Buffer[] = [];
    let turn = 0;
    const readAt = (offset: number, size: number) => {
      turn ^= 1;
      if ((buffers[turn]?.length ?? 0) < size) buffers[turn] = Buffer.allocUnsafeSlow(size);
      return feed.fh.read(buffers[turn]!, 0, size, offset);
    };
    let chunkBytes = FIRST_READ_CHUNK_BYTES;
    let offset = splitter.consumed + splitter.pendingBytes;
    // What a file appended to line by line holds past the position is small and was just
    // written (in the page cache): read at once, synchronously, up to the size the file has now,
    // without the round trips through libuv's pool of a read and of the read that finds the end.
    // Lines appended meanwhile are read at the next turn (the reader reads again after data).
    const waiting = sizeOf(feed.fh) - offset;
    if (waiting <= 0) return 0;
    if (waiting <= SMALL_READ_BYTES) {
      const chunk = Buffer.allocUnsafe(waiting);
      const bytesRead = readSync(feed.fh.fd, chunk, 0, waiting, offset);
      try {
        await batches.push(splitter, chunk.subarray(0, bytesRead), async () => {
          await yieldToEventLoop();
          return !signal.aborted;
        });
        await batches.flush();
        await pipeline.drain();
      } finally {
        await pipeline.abandon();
      }
      return bytesRead;
    }
    let pending = readAt(offset, chunkBytes);
    try {
      for (;;) {
        const { bytesRead, buffer } = await pending;
        if (bytesRead === 0) break;
        total += bytesRead;
        offset += bytesRead;
        if (bytesRead === chunkBytes) chunkBytes = Math.min(chunkBytes * 4, READ_CHUNK_BYTES);
        pending = readAt(offset, chunkBytes);
        const more = await batches.push(splitter, buffer.subarray(0, bytesRead), async () => {
          // Every commit blocks this thread on fsync: let the admin API, the dispatcher and
          // a stop request run between batches.
          await yieldToEventLoop();
          // Stopping must not wait for the rest of a large file: the position is committed and
          // the next start reads on from it. The rest of the chunk is dropped with the
          // splitter, which the caller discards when stopped.
          return !signal.aborted;
        });
        if (!more) break;
      }
      await batches.flush();
      await pipeline.drain();
    } finally {
      // A commit that failed leaves the next read in flight: it is awaited here, before the
      // caller closes the file under it (its failure would otherwise go unhandled).
      await pending.catch(() => {});
      await pipeline.abandon();
    }
    return total;
  }

  async function commit(feed: OpenFeed, fp: Identity, lines: Lines, end: number, parsed?: ParsedLines): Promise<void> {
    // Checked again after the lines were read, before they are stored: a file rewritten between
    // the check before the read and the read itself would otherwise have its new bytes stored as
    // lines read from the old offset. The reader then starts over (see follow).
    if (lines.length > 0 && changedUnder(feed, fp)) throw new FeedChanged();
    const wanted = Math.min(FINGERPRINT_BYTES, end);
    if (fp.current.bytes < wanted) fp.current = fingerprintOf(feed.fh, wanted);
    const tail = { position: end, hash: tailFingerprintOf(feed.fh, end) };
    const position: FeedPosition = { source, dev: feed.dev, ino: feed.ino, fingerprint: fp.current.hash, fingerprintBytes: fp.current.bytes, position: end, tailFingerprint: tail.hash };
    const write = async (): Promise<void> => {
      if (lines.length === 0) await options.ingest.savePosition(position);
      else await options.ingest.ingest(source, lines, position, parsed);
    };
    if (options.health) await options.health.retrying('feed', write, controller?.signal);
    else await write();
    fp.tail = tail;
    committedEnd = end;
    // Lines stored: the reader got past where it failed. (A restart commits its starting
    // position without lines: that is no progress.)
    if (lines.length > 0 && faults.committed()) log.info({ position: end }, 'the feed reader got past the position where it kept failing: reading again');
  }

  /**
   * Reads a file that is being left behind to its end; a last line without newline is quarantined.
   * Throws when stopped before the end: the caller must not move on to the next file then.
   */
  async function finish(feed: OpenFeed, splitter: LineSplitter, fp: Identity, why: string, signal: AbortSignal): Promise<void> {
    await readToEnd(feed, splitter, fp, signal);
    signal.throwIfAborted();
    const rest = splitter.takeIncomplete({ reason: RejectReason.incompleteLine, detail: why });
    if (rest) await commit(feed, fp, [rest.line], rest.end);
  }

  /** After a restart, finds the file we were reading if it was renamed (rotated) meanwhile. */
  async function findRotated(saved: FeedPosition): Promise<OpenFeed | null> {
    const dir = dirname(readPath);
    for (const name of (await readdir(dir)).slice(0, 10_000)) {
      const path = join(dir, name);
      if (path === readPath) continue;
      const st = await lstat(path, { bigint: true }).catch(() => null);
      if (!st?.isFile() || String(st.dev) !== saved.dev || String(st.ino) !== saved.ino) continue;
      const feed = await openFeed(path);
      if (feed === null || isRefused(feed)) continue;
      if (await isSameFile(feed, saved)) return feed;
      await feed.fh.close();
    }
    return null;
  }

  /**
   * Opens the feed file, waiting for a regular file to be at the path; `appeared` is true when
   * there was none at first (nothing, or something refused).
   */
  async function waitForFile(signal: AbortSignal): Promise<{ feed: OpenFeed; appeared: boolean }> {
    let warned = false;
    let appeared = false;
    // Watching starts before the first look, so a file created right after it wakes the wait.
    const appearing: ChangeWatch = watchForChanges(readPath, log, { forName: true });
    try {
      for (;;) {
        appearing.arm();
        const feed = await openFeed(readPath);
        if (feed !== null && !isRefused(feed)) {
          refusalOver(true);
          return { feed, appeared };
        }
        appeared = true;
        if (feed !== null) refuse(feed.refused);
        else if (refusal !== null) refusalOver(false);
        else if (!warned) log.info('waiting for the feed file to appear');
        warned = true;
        await appearing.wait(options.pollIntervalMs, signal);
        signal.throwIfAborted();
      }
    } finally {
      appearing.close();
    }
  }

  /** Waits until the feed path exists again (it was renamed away), or the poll interval passes. */
  async function waitForNewFile(signal: AbortSignal): Promise<void> {
    const appearing = watchForChanges(readPath, log, { forName: true });
    try {
      if ((await lstat(readPath).catch(() => null)) === null) await appearing.wait(options.pollIntervalMs, signal);
    } finally {
      appearing.close();
    }
  }

  /** Offset just after the last newline of the file: where `startPosition: end` begins. */
  async function endOfLastLine(feed: OpenFeed): Promise<number> {
    const size = Number((await feed.fh.stat()).size);
    const from = Math.max(0, size - READ_CHUNK_BYTES);
    const buf = Buffer.alloc(size - from);
    await feed.fh.read(buf, 0, buf.length, from);
    const nl = buf.lastIndexOf(0x0a);
    return nl === -1 ? (from === 0 ? 0 : size) : from + nl + 1;
  }

  async function startingPoint(feed: OpenFeed, appeared: boolean, signal: AbortSignal): Promise<number> {
    const saved = await options.ingest.position(source);
    if (saved === null) {
      // `end` skips what the file held before the daemon started; a file that appeared while we
      // waited for it holds only lines written since, so all of it is new.
      const fromEnd = options.startPosition === 'end' && !appeared;
      const position = fromEnd ? await endOfLastLine(feed) : 0;
      log.info({ position }, `first start on this feed: reading from its ${fromEnd ? 'end' : 'beginning'}`);
      return position;
    }
    if (await isSameFile(feed, saved)) {
      const size = Number((await feed.fh.stat()).size);
      if (size >= saved.position) return saved.position;
      log.warn({ size, position: saved.position }, 'feed file is shorter than the committed position (truncated while stopped); reading it from the start');
      return 0;
    }
    if (feed.dev === saved.dev && feed.ino === saved.ino) {
      log.warn('feed file has the same inode but other bytes at its start or before the committed position (rewritten, or the inode reused); reading it from the start');
      return 0;
    }
    const old = await findRotated(saved);
    if (old) {
      log.info({ rotatedTo: old.path }, 'feed was rotated while stopped; finishing the old file first');
      const splitter = new LineSplitter(options.maxLineBytes, saved.position);
      try {
        await finish(old, splitter, { current: { hash: saved.fingerprint, bytes: saved.fingerprintBytes }, tail: null }, 'the feed was rotated before this line was terminated', signal);
      } finally {
        await old.fh.close();
      }
    } else {
      log.warn({ position: saved.position }, 'the feed file changed while stopped and the previous file was not found next to it; reading the new file from the start');
    }
    return 0;
  }

  /**
   * True (after committing position 0) when the open file was truncated or rewritten in place
   * since it was last read: then it is read again from its start. Checked before every read, so
   * that new content is never read from the old offset.
   */
  async function restartedInPlace(feed: OpenFeed, splitter: LineSplitter, fp: Identity): Promise<boolean> {
    const size = sizeOf(feed.fh);
    const truncated = size < splitter.consumed + splitter.pendingBytes;
    // Rewritten: other first bytes, or (the same first bytes) other bytes before the position.
    const rewritten = !truncated && changedUnder(feed, fp);
    if (!truncated && !rewritten) return false;
    log.warn({ size, position: splitter.consumed }, truncated ? 'feed file truncated in place; reading it again from the start' : 'feed file rewritten in place; reading it again from the start');
    splitter.reset(0);
    fp.current = EMPTY_FINGERPRINT;
    await commit(feed, fp, [], 0);
    return true;
  }

  async function follow(signal: AbortSignal): Promise<void> {
    const found = await waitForFile(signal);
    let feed = found.feed;
    /** The file to close when this ends (null while none is open). */
    let opened: OpenFeed | null = feed;
    let changes = watchForChanges(feed.path, log);
    try {
      const start = await startingPoint(feed, found.appeared, signal);
      let splitter = new LineSplitter(options.maxLineBytes, start);
      const fp: Identity = { current: EMPTY_FINGERPRINT, tail: null };
      await commit(feed, fp, [], start);

      let lastReadAt = -Infinity;
      while (!signal.aborted) {
        // Before reading: a line appended while we read wakes the idle wait below at once.
        changes.arm();
        await restartedInPlace(feed, splitter, fp);
        const read = await readToEnd(feed, splitter, fp, signal).catch((err: unknown) => {
          if (!(err instanceof FeedChanged)) throw err;
          // Nothing of what was read since the last commit is stored: back to that position;
          // the next turn finds the rewrite and reads the file from its start.
          splitter.reset(fp.tail?.position ?? 0);
          return -1;
        });
        if (read < 0) continue;
        if (read > 0) {
          // Lines keep coming: the next read waits for the rest of the interval too, so that a
          // producer writing a line per millisecond costs a commit every few, not one per line
          // or two (docs/benchmarks.md, "Latency at 1,000 events/s: claims at once").
          await spaceReads(lastReadAt, signal);
          lastReadAt = performance.now();
          continue;
        }

        // lstat: whatever now sits at the path, a symbolic link put there included, is another
        // file. (Synchronous, as the checks above: one system call on a path just looked up.)
        const current = lstatSync(readPath, { bigint: true, throwIfNoEntry: false }) ?? null;
        if (current && (String(current.dev) !== feed.dev || String(current.ino) !== feed.ino)) {
          await finish(feed, splitter, fp, 'the feed was rotated before this line was terminated', signal);
          let next = await openFeed(readPath);
          if (isRefused(next)) {
            // The old file is read to its end; what took its place is not read. Wait (logged
            // once, /readyz failing meanwhile) for a regular file to take its place in turn.
            const previousInode = feed.ino;
            await feed.fh.close();
            changes.close();
            opened = null;
            next = (await waitForFile(signal)).feed;
            log.info({ previousInode, inode: next.ino }, 'feed file replaced; reading the new file from its start');
          } else if (next !== null) {
            log.info({ previousInode: feed.ino, inode: next.ino }, 'feed file rotated; reading the new file from its start');
            await feed.fh.close();
            changes.close();
          }
          if (next !== null) {
            feed = opened = next;
            changes = watchForChanges(feed.path, log);
            splitter = new LineSplitter(options.maxLineBytes, 0);
            fp.current = EMPTY_FINGERPRINT;
            await commit(feed, fp, [], 0);
            continue;
          }
        }

        // Idle until the file changes (or the poll interval passes): the next turn looks for
        // truncation or a rewrite before reading again. When the feed was renamed away and not
        // yet created again, the directory is watched for it instead.
        if (current === null) await waitForNewFile(signal);
        else {
          await changes.wait(options.pollIntervalMs, signal);
          await spaceReads(lastReadAt, signal);
        }
        lastReadAt = performance.now();
      }
    } finally {
      changes.close();
      await opened?.fh.close();
    }
  }

  /**
   * A producer appending line by line would otherwise cost a commit (and its fsync) per line:
   * reads that follow one another closely are spaced by MIN_READ_INTERVAL_MS, so that what
   * arrives meanwhile is committed together. A first line after a quiet spell is read at once.
   */
  async function spaceReads(lastReadAt: number, signal: AbortSignal): Promise<void> {
    const since = performance.now() - lastReadAt;
    if (since < MIN_READ_INTERVAL_MS) await sleep(MIN_READ_INTERVAL_MS - since, undefined, { signal }).catch(() => {});
  }

  async function run(signal: AbortSignal): Promise<void> {
    if (options.followSymlinks === true) {
      // Once: a link changed while the daemon runs is not followed (a restart follows it).
      readPath = await resolveLinks(source);
      if (readPath !== source) log.info({ target: readPath }, 'feed.path is a symbolic link: reading the file it points at (feed.followSymlinks), resolved once, at start');
    }
    let storageFaults = 0;
    while (!signal.aborted) {
      try {
        await follow(signal);
      } catch (err) {
        if (signal.aborted) return;
        // A storage fault (a read of the position on a damaged or failing database) is logged
        // once by `health`, and backs off; a damaged database is not read again.
        const health = options.health;
        if (health !== undefined && health.failed('feed', err) !== null) {
          if (health.damaged()) await new Promise((resolve) => signal.addEventListener('abort', resolve, { once: true }));
          else await sleep(storageRetryDelayMs(++storageFaults), undefined, { signal }).catch(() => {});
          continue;
        }
        storageFaults = 0;
        const where = committedEnd === null ? `the committed position of ${readPath}` : `byte ${committedEnd} of ${readPath}`;
        const stuck = faults.failed(err, where);
        log.error({ err, position: committedEnd }, `feed reader failed; restarting from the committed position in ${RESTART_DELAY_MS} ms`);
        if (stuck) log.error({ position: committedEnd }, `${faults.problem()!.detail}: /readyz answers 503 until it gets past`);
        await sleep(RESTART_DELAY_MS, undefined, { signal }).catch(() => {});
      }
    }
  }

  return {
    start(): void {
      controller = new AbortController();
      running = run(controller.signal);
    },
    /** Why the feed cannot be read (something other than a regular file at its path, a reader that keeps failing at one position), or null. */
    problem(): FeedProblem | null {
      return refusal?.problem ?? faults.problem();
    },
    /** Stops after the batch in progress is committed. */
    async stop(): Promise<void> {
      controller?.abort();
      await running;
      running = null;
    },
  };
}

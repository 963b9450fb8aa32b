import { setTimeout as sleep } from 'node:timers/promises';
import { RejectReason, type ParsedLines } from '../domain/feed-event.ts';
import type { Logger } from '../log.ts';
import type { IngestService, Lines } from '../services/ingest.ts';
import { storageRetryDelayMs, type StorageHealth } from '../services/storage-health.ts';
import type { FeedPosition } from '../store/values.ts';
import { BatchedReads, type TailedFile } from './batched-reads.ts';
import { watchForChanges, type ChangeWatch } from './change-watch.ts';
import { inPlaceChangeOf, startingPointOf, whatIsAt, type AtFeedPath, type StartingPoint } from './feed-changes.ts';
import { FeedPath, type FoundFile } from './feed-path.ts';
import {
  changedUnder,
  EMPTY_FINGERPRINT,
  FINGERPRINT_BYTES,
  fingerprintOf,
  isRefused,
  tailFingerprintOf,
  type FeedProblem,
  type OpenFeed,
} from './feed-file.ts';
import { inlineLineParser, type LineParser } from './line-parser.ts';
import { LineSplitter } from './line-splitter.ts';
import { FeedReaderFaults } from './reader-faults.ts';

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

const ROTATED_BEFORE_TERMINATED = 'the feed was rotated before this line was terminated';

/** The file at the feed path that the tailer follows, and the watch that wakes it when the file changes. */
interface FollowedFile extends TailedFile {
  readonly changes: ChangeWatch;
}

/**
 * What reading the followed file on found: lines (the next read comes soon), nothing past the
 * position, or that the file changed under the reader (what was read since the last commit is
 * dropped).
 */
type ReadOutcome = 'lines' | 'at-end' | 'changed-while-read';

/**
 * What took the followed file's path: a regular file (rotated), something refused that a regular
 * file took the place of in turn (replaced), or nothing by the time it was opened (vanished: the
 * file read stays followed, finished).
 */
type Succession = 'rotated' | 'replaced' | 'vanished';

/**
 * Tails a JSONL feed file the way `tail -F` does, with durable positions: every batch of lines
 * is committed together with the offset after it. Follows rotation by rename (the old file is
 * read to its end first, even if the rotation happened while the daemon was down), detects
 * truncation in place (copytruncate), and never consumes a line before its newline arrives.
 *
 * Between start() and stop() one reader runs: it waits for a regular file at the path, finds
 * where to start in it (see startingPointOf), then turns: it starts the file over when it was
 * truncated or rewritten in place, reads what was appended, and when nothing was, follows what
 * took the file's path or waits for the file to change. A failure starts it over from the
 * committed position.
 */
export class FileTailer {
  readonly #options: FileTailerOptions;
  /** The feed's name: its position and counts are stored under it (feed.path as configured). */
  readonly #source: string;
  readonly #log: Logger;
  readonly #faults: FeedReaderFaults;
  /** The path read, and what is there (a refusal of anything but a regular file). */
  readonly #path: FeedPath;
  readonly #reads: BatchedReads;
  #controller: AbortController | null = null;
  #running: Promise<void> | null = null;
  /** Where the last commit ended, for the reader's failures to say where they happen. */
  #committedEnd: number | null = null;
  /** The file followed at the path; null while none is open. */
  #followed: FollowedFile | null = null;
  /** When the last read of the followed file ended (performance.now() ms; see spaceReads). */
  #lastReadAt = -Infinity;
  /** Storage faults in a row: the back-off before the next try grows with them. */
  #storageFaults = 0;

  constructor(options: FileTailerOptions) {
    this.#options = options;
    this.#source = options.path;
    this.#log = options.log.child({ subsystem: 'feed', feed: options.path });
    this.#faults = options.faults ?? new FeedReaderFaults(() => options.ingest.now());
    this.#path = new FeedPath(options.path, { log: this.#log, pollIntervalMs: options.pollIntervalMs, now: () => options.ingest.now() });
    this.#reads = new BatchedReads({
      parser: options.parser ?? inlineLineParser,
      now: options.ingest.now,
      batchLines: options.batchLines,
      batchBytes: options.batchBytes,
      commit: (file, lines, end, parsed) => this.#commit(file, lines, end, parsed),
    });
  }

  start(): void {
    this.#controller = new AbortController();
    this.#running = this.#run(this.#controller.signal);
  }

  /** Why the feed cannot be read (something other than a regular file at its path, a reader that keeps failing at one position), or null. */
  problem(): FeedProblem | null {
    return this.#path.problem() ?? this.#faults.problem();
  }

  /** Stops after the batch in progress is committed. */
  async stop(): Promise<void> {
    this.#controller?.abort();
    await this.#running;
    this.#running = null;
  }

  /** Follows the feed until stopped, starting it over after each failure. */
  async #run(signal: AbortSignal): Promise<void> {
    if (this.#options.followSymlinks === true) await this.#path.followLinks(this.#source);
    this.#storageFaults = 0;
    while (!signal.aborted) {
      try {
        await this.#follow(signal);
      } catch (err) {
        if (signal.aborted) return;
        await this.#recover(err, signal);
      }
    }
  }

  /**
   * Waits before the reader starts over after `err`. A storage fault (a read of the position on
   * a damaged or failing database) is logged once by `health`, and backs off; a damaged
   * database is not read again. Any other failure is counted (FeedReaderFaults), and the
   * reader starts over after RESTART_DELAY_MS.
   */
  async #recover(err: unknown, signal: AbortSignal): Promise<void> {
    const health = this.#options.health;
    if (health !== undefined && health.failed('feed', err) !== null) {
      if (health.damaged()) await new Promise((resolve) => signal.addEventListener('abort', resolve, { once: true }));
      else await sleep(storageRetryDelayMs(++this.#storageFaults), undefined, { signal }).catch(() => {});
      return;
    }
    this.#storageFaults = 0;
    const position = this.#committedEnd;
    const where = position === null ? `the committed position of ${this.#path.path}` : `byte ${position} of ${this.#path.path}`;
    const stuck = this.#faults.failed(err, where);
    this.#log.error({ err, position }, `feed reader failed; restarting from the committed position in ${RESTART_DELAY_MS} ms`);
    if (stuck) this.#log.error({ position }, `${this.#faults.problem()!.detail}: /readyz answers 503 until it gets past`);
    await sleep(RESTART_DELAY_MS, undefined, { signal }).catch(() => {});
  }

  /** Follows the file at the feed path, and each file that takes its place, until stopped or until a step fails. */
  async #follow(signal: AbortSignal): Promise<void> {
    this.#lastReadAt = -Infinity;
    const found = await this.#path.waitForFile(signal);
    const file = this.#startFollowing(found.feed);
    try {
      await this.#readFrom(file, await this.#startingPoint(found, signal));
      while (!signal.aborted) await this.#turn(signal);
    } finally {
      await this.#stopFollowing();
    }
  }

  /**
   * One turn of the reader: starts the followed file over if it was truncated or rewritten in
   * place, reads what was appended to it; when nothing was, follows the file that took its
   * path, or waits for it to change.
   */
  async #turn(signal: AbortSignal): Promise<void> {
    const file = this.#followedFile();
    // Before reading: a line appended while we read wakes the idle wait at once.
    file.changes.arm();
    await this.#restartIfChangedInPlace(file);
    const read = await this.#readOn(file, signal);
    if (read === 'changed-while-read') return;
    if (read === 'lines') return this.#spaceReads(signal);
    const atPath = whatIsAt(this.#path.path, file.feed);
    if (atPath === 'another-file' && (await this.#followSuccessor(file, signal)) !== 'vanished') return;
    await this.#idle(file, atPath, signal);
  }

  /** The followed file: one is open in every turn (the loop of follow runs only after one is opened). */
  #followedFile(): FollowedFile {
    if (this.#followed === null) throw new Error('the file tailer turned with no file open (a bug)');
    return this.#followed;
  }

  /** Opens the watch of `feed` and makes it the followed file, at position 0 until readFrom sets it. */
  #startFollowing(feed: OpenFeed): FollowedFile {
    const file: FollowedFile = {
      feed,
      splitter: new LineSplitter(this.#options.maxLineBytes, 0),
      identity: { current: EMPTY_FINGERPRINT, tail: null },
      changes: watchForChanges(feed.path, this.#log),
    };
    this.#followed = file;
    return file;
  }

  /** Closes the followed file and its watch, if one is open. */
  async #stopFollowing(): Promise<void> {
    const file = this.#followed;
    this.#followed = null;
    file?.changes.close();
    await file?.feed.fh.close();
  }

  /** Puts the reader at `position` of `file`, holding no partial line and knowing nothing of its first bytes yet, and commits that position. */
  async #readFrom(file: TailedFile, position: number): Promise<void> {
    file.splitter.reset(position);
    file.identity.current = EMPTY_FINGERPRINT;
    await this.#commit(file, [], position);
  }

  /** Where reading the file found at start begins (see startingPointOf), said in the log; a file the feed was rotated to while stopped is finished first. */
  async #startingPoint(found: FoundFile, signal: AbortSignal): Promise<number> {
    const saved = await this.#options.ingest.position(this.#source);
    const point = await startingPointOf(found.feed, saved, { startPosition: this.#options.startPosition, appeared: found.appeared });
    this.#sayStartingPoint(point);
    if (point.kind === 'rotated-while-stopped') await this.#finishRotated(point.old, point.saved, signal);
    return point.position;
  }

  /** Says in the log where reading starts, unless the reader simply resumes. */
  #sayStartingPoint(point: StartingPoint): void {
    const log = this.#log;
    switch (point.kind) {
      case 'first-start':
        log.info({ position: point.position }, `first start on this feed: reading from its ${point.from}`);
        break;
      case 'resume':
        break;
      case 'truncated-while-stopped':
        log.warn({ size: point.size, position: point.saved }, 'feed file is shorter than the committed position (truncated while stopped); reading it from the start');
        break;
      case 'rewritten-while-stopped':
        log.warn('feed file has the same inode but other bytes at its start or before the committed position (rewritten, or the inode reused); reading it from the start');
        break;
      case 'rotated-while-stopped':
        log.info({ rotatedTo: point.old.path }, 'feed was rotated while stopped; finishing the old file first');
        break;
      case 'replaced-while-stopped':
        log.warn({ position: point.saved }, 'the feed file changed while stopped and the previous file was not found next to it; reading the new file from the start');
        break;
    }
  }

  /** Reads `old`, the file the feed was rotated to while the tailer was stopped, from the saved position to its end, then closes it. */
  async #finishRotated(old: OpenFeed, saved: FeedPosition, signal: AbortSignal): Promise<void> {
    const file: TailedFile = {
      feed: old,
      splitter: new LineSplitter(this.#options.maxLineBytes, saved.position),
      identity: { current: { hash: saved.fingerprint, bytes: saved.fingerprintBytes }, tail: null },
    };
    try {
      await this.#finish(file, ROTATED_BEFORE_TERMINATED, signal);
    } finally {
      await old.fh.close();
    }
  }

  /** Reads the followed file again from its start (after committing position 0) when it was truncated or rewritten in place since it was read. */
  async #restartIfChangedInPlace(file: FollowedFile): Promise<void> {
    const change = inPlaceChangeOf(file.feed, file.identity, file.splitter.consumed + file.splitter.pendingBytes);
    if (change === null) return;
    const message = change.kind === 'truncated' ? 'feed file truncated in place; reading it again from the start' : 'feed file rewritten in place; reading it again from the start';
    this.#log.warn({ size: change.size, position: file.splitter.consumed }, message);
    await this.#readFrom(file, 0);
  }

  /** Reads what was appended to `file` since its position (see BatchedReads). */
  async #readOn(file: TailedFile, signal: AbortSignal): Promise<ReadOutcome> {
    try {
      return (await this.#reads.readToEnd(file, signal)) > 0 ? 'lines' : 'at-end';
    } catch (err) {
      if (!(err instanceof FeedChanged)) throw err;
      // Nothing of what was read since the last commit is stored: back to that position; the
      // next turn finds the rewrite and reads the file from its start.
      file.splitter.reset(file.identity.tail?.position ?? 0);
      return 'changed-while-read';
    }
  }

  /**
   * Another file is at the feed path: reads the followed file to its end (a last line without
   * newline is quarantined), then follows what took its place, from its start.
   */
  async #followSuccessor(file: FollowedFile, signal: AbortSignal): Promise<Succession> {
    await this.#finish(file, ROTATED_BEFORE_TERMINATED, signal);
    const next = await this.#path.open();
    if (next === null) return 'vanished';
    if (isRefused(next)) {
      // The old file is read to its end; what took its place is not read. Wait (logged once,
      // /readyz failing meanwhile) for a regular file to take its place in turn.
      await this.#stopFollowing();
      const { feed } = await this.#path.waitForFile(signal);
      this.#log.info({ previousInode: file.feed.ino, inode: feed.ino }, 'feed file replaced; reading the new file from its start');
      await this.#readFrom(this.#startFollowing(feed), 0);
      return 'replaced';
    }
    this.#log.info({ previousInode: file.feed.ino, inode: next.ino }, 'feed file rotated; reading the new file from its start');
    await this.#stopFollowing();
    await this.#readFrom(this.#startFollowing(next), 0);
    return 'rotated';
  }

  /**
   * Idle until the file changes (or the poll interval passes): the next turn looks for
   * truncation or a rewrite before reading again. When the feed was renamed away and not yet
   * created again, the directory is watched for it instead.
   */
  async #idle(file: FollowedFile, atPath: AtFeedPath, signal: AbortSignal): Promise<void> {
    if (atPath === 'nothing') {
      await this.#path.waitForNewFile(signal);
      this.#lastReadAt = performance.now();
      return;
    }
    await file.changes.wait(this.#options.pollIntervalMs, signal);
    await this.#spaceReads(signal);
  }

  /**
   * A producer appending line by line would otherwise cost a commit (and its fsync) per line:
   * reads that follow one another closely are spaced by MIN_READ_INTERVAL_MS, so that what
   * arrives meanwhile is committed together. A first line after a quiet spell is read at once.
   * When lines keep coming, the next read waits for the rest of the interval too, so that a
   * producer writing a line per millisecond costs a commit every few, not one per line or two
   * (docs/benchmarks.md, "Latency at 1,000 events/s: claims at once").
   */
  async #spaceReads(signal: AbortSignal): Promise<void> {
    const since = performance.now() - this.#lastReadAt;
    if (since < MIN_READ_INTERVAL_MS) await sleep(MIN_READ_INTERVAL_MS - since, undefined, { signal }).catch(() => {});
    this.#lastReadAt = performance.now();
  }

  /**
   * Reads a file that is being left behind to its end; a last line without newline is quarantined.
   * Throws when stopped before the end: the caller must not move on to the next file then.
   */
  async #finish(file: TailedFile, why: string, signal: AbortSignal): Promise<void> {
    await this.#reads.readToEnd(file, signal);
    signal.throwIfAborted();
    const rest = file.splitter.takeIncomplete({ reason: RejectReason.incompleteLine, detail: why });
    if (rest) await this.#commit(file, [rest.line], rest.end);
  }

  /** Stores `lines` of `file` with `end`, the offset after them, as the feed's position (only the position when there are no lines). */
  async #commit(file: TailedFile, lines: Lines, end: number, parsed?: ParsedLines): Promise<void> {
    const { feed, identity } = file;
    // Checked again after the lines were read, before they are stored: a file rewritten between
    // the check before the read and the read itself would otherwise have its new bytes stored as
    // lines read from the old offset. The reader then starts over (see readOn).
    if (lines.length > 0 && changedUnder(feed, identity)) throw new FeedChanged();
    const wanted = Math.min(FINGERPRINT_BYTES, end);
    if (identity.current.bytes < wanted) identity.current = fingerprintOf(feed.fh, wanted);
    const tail = { position: end, hash: tailFingerprintOf(feed.fh, end) };
    const position: FeedPosition = {
      source: this.#source,
      dev: feed.dev,
      ino: feed.ino,
      fingerprint: identity.current.hash,
      fingerprintBytes: identity.current.bytes,
      position: end,
      tailFingerprint: tail.hash,
    };
    await this.#store(lines, position, parsed);
    identity.tail = tail;
    this.#committedEnd = end;
    // Lines stored: the reader got past where it failed. (A restart commits its starting
    // position without lines: that is no progress.)
    if (lines.length > 0 && this.#faults.committed()) this.#log.info({ position: end }, 'the feed reader got past the position where it kept failing: reading again');
  }

  /** Writes lines and position in one transaction; with `health`, tried again after a storage fault. */
  async #store(lines: Lines, position: FeedPosition, parsed: ParsedLines | undefined): Promise<void> {
    const { ingest, health } = this.#options;
    const write = async (): Promise<void> => {
      if (lines.length === 0) await ingest.savePosition(position);
      else await ingest.ingest(this.#source, lines, position, parsed);
    };
    if (health) await health.retrying('feed', write, this.#controller?.signal);
    else await write();
  }
}

/** The tailer of `options.path`; call start() to begin reading and stop() to end. */
export function createFileTailer(options: FileTailerOptions): FileTailer {
  return new FileTailer(options);
}

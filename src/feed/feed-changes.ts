/**
 * What the file tailer finds when it looks at its feed, as values: where to start reading when
 * it starts, whether the file it reads was truncated or rewritten in place, and what is at the
 * feed path now. Each function makes its own checks (a stat, a few small reads, a look at the
 * directory) and says what it found; the tailer (file-tailer.ts) logs that and acts on it.
 * test/feed/tailer-steps.test.ts tries each case on real files.
 */
import { lstatSync } from 'node:fs';
import { lstat, readdir } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import type { FeedPosition } from '../store/values.ts';
import { changedUnder, isRefused, isSameFile, openFeed, sizeOf, type Identity, type OpenFeed } from './feed-file.ts';

/** How far back from the end of a file its last newline is looked for (feed.startPosition `end`). */
const LAST_LINE_SEARCH_BYTES = 1 << 20;

/** At most this many names of the feed's directory are looked at for the file it was renamed to. */
const ROTATED_SEARCH_NAMES = 10_000;

/**
 * Where reading starts when the tailer starts (or restarts after a failure), against the
 * position saved for the feed. `position` is where the file at the feed path is read from.
 */
export type StartingPoint =
  /** No position saved yet: the file's beginning, or (`end`) just past its last complete line. */
  | { readonly kind: 'first-start'; readonly from: 'beginning' | 'end'; readonly position: number }
  /** The file read before, with at least the bytes committed: read on from the saved position. */
  | { readonly kind: 'resume'; readonly position: number }
  /** The file read before, now shorter than the saved position. */
  | { readonly kind: 'truncated-while-stopped'; readonly position: 0; readonly size: number; readonly saved: number }
  /** The same device and inode with other bytes at its start or before the saved position (rewritten, or the inode reused). */
  | { readonly kind: 'rewritten-while-stopped'; readonly position: 0 }
  /**
   * Another file at the path, and the file read before renamed next to it (`old`, open): the
   * caller reads `old` to its end from `saved`, and closes it, before it reads the new one.
   */
  | { readonly kind: 'rotated-while-stopped'; readonly position: 0; readonly old: OpenFeed; readonly saved: FeedPosition }
  /** Another file at the path, and the file read before not found next to it. */
  | { readonly kind: 'replaced-while-stopped'; readonly position: 0; readonly saved: number };

export interface StartOptions {
  /** feed.startPosition: where a first start reads from. */
  readonly startPosition: 'start' | 'end';
  /** The file was not there when the tailer started (it waited for it to appear). */
  readonly appeared: boolean;
}

/** Where to start reading `feed` (open at `path`), given the position saved for it (null before the first commit). */
export async function startingPointOf(feed: OpenFeed, saved: FeedPosition | null, options: StartOptions): Promise<StartingPoint> {
  if (saved === null) {
    // `end` skips what the file held before the daemon started; a file that appeared while we
    // waited for it holds only lines written since, so all of it is new.
    if (options.startPosition === 'end' && !options.appeared) return { kind: 'first-start', from: 'end', position: await endOfLastLine(feed) };
    return { kind: 'first-start', from: 'beginning', position: 0 };
  }
  if (await isSameFile(feed, saved)) {
    const size = Number((await feed.fh.stat()).size);
    if (size >= saved.position) return { kind: 'resume', position: saved.position };
    return { kind: 'truncated-while-stopped', position: 0, size, saved: saved.position };
  }
  if (feed.dev === saved.dev && feed.ino === saved.ino) return { kind: 'rewritten-while-stopped', position: 0 };
  const old = await findRotated(feed.path, saved);
  if (old !== null) return { kind: 'rotated-while-stopped', position: 0, old, saved };
  return { kind: 'replaced-while-stopped', position: 0, saved: saved.position };
}

/**
 * Offset just after the last newline of the file: where `startPosition: end` begins. A file
 * with no newline in its last LAST_LINE_SEARCH_BYTES is started at its end (at 0 when it is
 * no longer than that).
 */
export async function endOfLastLine(feed: OpenFeed): Promise<number> {
  const size = Number((await feed.fh.stat()).size);
  const from = Math.max(0, size - LAST_LINE_SEARCH_BYTES);
  const buf = Buffer.alloc(size - from);
  await feed.fh.read(buf, 0, buf.length, from);
  const nl = buf.lastIndexOf(0x0a);
  return nl === -1 ? (from === 0 ? 0 : size) : from + nl + 1;
}

/**
 * The file `saved` describes, renamed (rotated) into the directory of `path` while the tailer
 * was stopped, opened; null when it is not there.
 */
async function findRotated(path: string, saved: FeedPosition): Promise<OpenFeed | null> {
  const dir = dirname(path);
  for (const name of (await readdir(dir)).slice(0, ROTATED_SEARCH_NAMES)) {
    const candidate = join(dir, name);
    if (candidate === path) continue;
    const st = await lstat(candidate, { bigint: true }).catch(() => null);
    if (!st?.isFile() || String(st.dev) !== saved.dev || String(st.ino) !== saved.ino) continue;
    const feed = await openFeed(candidate);
    if (feed === null || isRefused(feed)) continue;
    if (await isSameFile(feed, saved)) return feed;
    await feed.fh.close();
  }
  return null;
}

/** The open file no longer holds what was read of it, found before it is read again. */
export interface InPlaceChange {
  /** Truncated: shorter than what was read; rewritten: other first bytes, or other bytes before the committed position. */
  readonly kind: 'truncated' | 'rewritten';
  /** Its size now, in bytes. */
  readonly size: number;
}

/**
 * Whether `feed` was truncated or rewritten in place since it was read up to `readTo` (the
 * reader's position plus the bytes of an unterminated line it holds); null when it was not.
 * Checked before every read, so that new content is never read from the old offset.
 */
export function inPlaceChangeOf(feed: OpenFeed, identity: Identity, readTo: number): InPlaceChange | null {
  const size = sizeOf(feed.fh);
  if (size < readTo) return { kind: 'truncated', size };
  if (changedUnder(feed, identity)) return { kind: 'rewritten', size };
  return null;
}

/** What the feed path holds, next to the file the tailer reads: that file, another one (rotated, or anything that took its place), or nothing. */
export type AtFeedPath = 'the-file-read' | 'another-file' | 'nothing';

export function whatIsAt(path: string, feed: OpenFeed): AtFeedPath {
  // lstat: whatever now sits at the path, a symbolic link put there included, is another file.
  // (Synchronous, as the tailer's other checks: one system call on a path just looked up.)
  const st = lstatSync(path, { bigint: true, throwIfNoEntry: false });
  if (st === undefined) return 'nothing';
  return String(st.dev) !== feed.dev || String(st.ino) !== feed.ino ? 'another-file' : 'the-file-read';
}

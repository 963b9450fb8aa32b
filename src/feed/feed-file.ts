/**
 * A feed file as the tailer sees it: opened only when it is a regular file (anything else at the
 * path is refused, and said why), and known by its identity (device, inode, a fingerprint of its
 * first bytes and one of the bytes before the committed position), so that a rotation, a
 * truncation or a rewrite is told apart from more lines appended.
 */
import { createHash } from 'node:crypto';
import { constants, fstatSync, readSync, type BigIntStats } from 'node:fs';
import { lstat, open, readlink, realpath, type FileHandle } from 'node:fs/promises';
import { basename, dirname, join, resolve } from 'node:path';
import type { FeedPosition } from '../store/values.ts';

/** The identity of a feed file is its device, inode and a hash of up to this many first bytes. */
export const FINGERPRINT_BYTES = 256;

export interface OpenFeed {
  readonly fh: FileHandle;
  readonly path: string;
  readonly dev: string;
  readonly ino: string;
}

export interface Fingerprint {
  readonly hash: string;
  readonly bytes: number;
}

export const EMPTY_FINGERPRINT: Fingerprint = { hash: createHash('sha256').digest('hex'), bytes: 0 };

/** The bytes before a committed position that identify the file with its first bytes (see FeedPosition.tailFingerprint). */
const TAIL_FINGERPRINT_BYTES = 256;

/**
 * What the tailer knows of the file it reads: a fingerprint of its first bytes, and one of the
 * bytes before the last position it committed (null before the first commit).
 */
export interface Identity {
  current: Fingerprint;
  tail: { readonly position: number; readonly hash: string } | null;
}

function isMissing(err: unknown): boolean {
  return (err as NodeJS.ErrnoException).code === 'ENOENT';
}

/** Something at the feed path that is not a regular file, and is not read: what it is, in words. */
export interface Refused {
  readonly refused: string;
}

/** What a file that is not a regular one is, in words (for the log and /readyz). */
function kindOf(st: BigIntStats): string {
  if (st.isSymbolicLink()) return 'a symbolic link';
  if (st.isDirectory()) return 'a directory';
  if (st.isFIFO()) return 'a FIFO (named pipe)';
  if (st.isSocket()) return 'a socket';
  if (st.isCharacterDevice() || st.isBlockDevice()) return 'a device';
  return 'not a regular file';
}

/**
 * Flags of every open of a feed file. O_NOFOLLOW: a symbolic link put at the path (a swap
 * between the lstat and the open included) fails the open instead of opening its target.
 * O_NONBLOCK: a FIFO that took the path's place after the lstat is opened without waiting
 * for a writer (a plain open blocks until one comes, and a stop with it); fstat then refuses
 * it. Reads of a regular file do not block either way.
 */
const OPEN_FLAGS = constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK;

/**
 * Opens the regular file at `path`; null when there is nothing there. Anything else (a
 * symbolic link, a directory, a FIFO, a socket, a device) is refused and never read: it is
 * looked at with lstat first, so that a FIFO or a device is not even opened, and what was
 * opened is checked again with fstat.
 */
export async function openFeed(path: string): Promise<OpenFeed | Refused | null> {
  let st: BigIntStats;
  try {
    st = await lstat(path, { bigint: true });
  } catch (err) {
    if (isMissing(err)) return null;
    throw err;
  }
  if (!st.isFile()) return { refused: kindOf(st) };
  let fh: FileHandle;
  try {
    fh = await open(path, OPEN_FLAGS);
  } catch (err) {
    if (isMissing(err)) return null;
    if ((err as NodeJS.ErrnoException).code === 'ELOOP') return { refused: 'a symbolic link' };
    throw err;
  }
  const opened = await fh.stat({ bigint: true });
  if (!opened.isFile()) {
    await fh.close();
    return { refused: kindOf(opened) };
  }
  return { fh, path, dev: String(opened.dev), ino: String(opened.ino) };
}

export function isRefused(opened: OpenFeed | Refused | null): opened is Refused {
  return opened !== null && 'refused' in opened;
}

/**
 * The file a feed path names once its symbolic links are followed (feed.followSymlinks): the
 * link at the path itself (a chain of them, a dangling one included) and those among its
 * directories. Anything that cannot be resolved is left as it is.
 */
export async function resolveLinks(path: string): Promise<string> {
  let target = path;
  for (let hops = 0; hops < 40; hops++) {
    const st = await lstat(target).catch(() => null);
    if (st === null || !st.isSymbolicLink()) break;
    target = resolve(dirname(target), await readlink(target));
  }
  const dir = await realpath(dirname(target)).catch(() => dirname(target));
  return join(dir, basename(target));
}

/** Why the daemon is not ready while the feed cannot be read: something other than a regular file at the feed path, or a reader that keeps failing (see the tailer's problem()). */
export interface FeedProblem {
  readonly reason: 'feed_not_a_file' | 'feed_reader_failing';
  readonly detail: string;
  /** Epoch ms. */
  readonly since: number;
}

export function refusalDetail(path: string, kind: string): string {
  const hint =
    kind === 'a symbolic link'
      ? '; replace the link with the file, or set feed.followSymlinks to follow links'
      : kind === 'a FIFO (named pipe)'
        ? '; to read a pipe, give it to the daemon on standard input (--feed -)'
        : '';
  return `the feed path ${path} is ${kind}, not a regular file: it is not read${hint}. The daemon waits for a regular file there`;
}

// The checks of a feed file's identity (its first bytes, the bytes before a position, its size)
// read at most 256 bytes each, from the page cache (the file was just written or just read):
// done synchronously, they cost microseconds, where each asynchronous call costs a round trip
// through libuv's thread pool, and a tailer makes several per batch (docs/benchmarks.md, "The
// feed reader's checks"). Reads of the lines themselves, which can be large, stay asynchronous.

export function fingerprintOf(fh: FileHandle, bytes: number): Fingerprint {
  if (bytes === 0) return EMPTY_FINGERPRINT;
  const buf = Buffer.alloc(bytes);
  const bytesRead = readSync(fh.fd, buf, 0, bytes, 0);
  return { hash: createHash('sha256').update(buf.subarray(0, bytesRead)).digest('hex'), bytes: bytesRead };
}

/** sha256 (hex) of the up to TAIL_FINGERPRINT_BYTES bytes of the file just before `position`. */
export function tailFingerprintOf(fh: FileHandle, position: number): string {
  const from = Math.max(0, position - TAIL_FINGERPRINT_BYTES);
  const buf = Buffer.alloc(position - from);
  const bytesRead = buf.length === 0 ? 0 : readSync(fh.fd, buf, 0, buf.length, from);
  return createHash('sha256').update(buf.subarray(0, bytesRead)).digest('hex');
}

/** The open file's size, in bytes. */
export function sizeOf(fh: FileHandle): number {
  return fstatSync(fh.fd).size;
}

/**
 * True when `feed` is the file `saved` describes: same device and inode, same first bytes, and
 * (when the file still reaches the position) the same bytes just before the position.
 */
export async function isSameFile(feed: OpenFeed, saved: FeedPosition): Promise<boolean> {
  if (feed.dev !== saved.dev || feed.ino !== saved.ino) return false;
  const fp = fingerprintOf(feed.fh, saved.fingerprintBytes);
  if (fp.bytes !== saved.fingerprintBytes || fp.hash !== saved.fingerprint) return false;
  if (saved.tailFingerprint === null || sizeOf(feed.fh) < saved.position) return true;
  return tailFingerprintOf(feed.fh, saved.position) === saved.tailFingerprint;
}

/**
 * True when the file no longer holds what was read from it: other first bytes, or (the same
 * first bytes) other bytes before the last committed position.
 */
export function changedUnder(feed: OpenFeed, fp: Identity): boolean {
  if (fp.current.bytes > 0 && fingerprintOf(feed.fh, fp.current.bytes).hash !== fp.current.hash) return true;
  const tail = fp.tail;
  return tail !== null && tail.position > 0 && tailFingerprintOf(feed.fh, tail.position) !== tail.hash;
}

import { lstat } from 'node:fs/promises';
import type { Logger } from '../log.ts';
import { watchForChanges } from './change-watch.ts';
import { isRefused, openFeed, refusalDetail, resolveLinks, type FeedProblem, type OpenFeed, type Refused } from './feed-file.ts';

/** A regular file found at the feed path; `appeared` when there was none at first (nothing, or something refused). */
export interface FoundFile {
  readonly feed: OpenFeed;
  readonly appeared: boolean;
}

/** Something other than a regular file at the feed path: what it is, and the problem /readyz reports. */
interface Refusal {
  readonly kind: string;
  readonly problem: FeedProblem;
}

export interface FeedPathOptions {
  /** The tailer's logger. */
  readonly log: Logger;
  /** How long a wait for a file lasts when no notification comes. */
  readonly pollIntervalMs: number;
  /** Epoch ms: when a refusal began. */
  readonly now: () => number;
}

/**
 * The path the file tailer reads, and what is there: a regular file, which it opens (waiting for
 * one to appear), or anything else, which it refuses, says once per change of what it is, and
 * reports (problem()) until a regular file takes its place.
 */
export class FeedPath {
  readonly #log: Logger;
  readonly #pollIntervalMs: number;
  readonly #now: () => number;
  #path: string;
  /** What is at the path while it is refused, or null. */
  #refusal: Refusal | null = null;

  constructor(path: string, options: FeedPathOptions) {
    this.#path = path;
    this.#log = options.log;
    this.#pollIntervalMs = options.pollIntervalMs;
    this.#now = options.now;
  }

  /** The path that is opened: the feed's path, or with followSymlinks what it resolved to at start. */
  get path(): string {
    return this.#path;
  }

  /**
   * Reads the file the links at `source` lead to (feed.followSymlinks), resolved now: the
   * tailer calls it once per start, so a link changed while the daemon runs is not followed
   * (a restart follows it).
   */
  async followLinks(source: string): Promise<void> {
    this.#path = await resolveLinks(source);
    if (this.#path !== source) this.#log.info({ target: this.#path }, 'feed.path is a symbolic link: reading the file it points at (feed.followSymlinks), resolved once, at start');
  }

  /** Something other than a regular file at the path, while it is there, or null. */
  problem(): FeedProblem | null {
    return this.#refusal?.problem ?? null;
  }

  /** What is at the path now, opened when it is a regular file (see openFeed). */
  open(): Promise<OpenFeed | Refused | null> {
    return openFeed(this.#path);
  }

  /** Opens the regular file at the path, waiting for one to be there. */
  async waitForFile(signal: AbortSignal): Promise<FoundFile> {
    let warned = false;
    let appeared = false;
    // Watching starts before the first look, so a file created right after it wakes the wait.
    const appearing = watchForChanges(this.#path, this.#log, { forName: true });
    try {
      for (;;) {
        appearing.arm();
        const feed = await openFeed(this.#path);
        if (feed !== null && !isRefused(feed)) {
          this.#refusalOver(true);
          return { feed, appeared };
        }
        appeared = true;
        if (feed !== null) this.#refuse(feed.refused);
        else if (this.#refusal !== null) this.#refusalOver(false);
        else if (!warned) this.#log.info('waiting for the feed file to appear');
        warned = true;
        await appearing.wait(this.#pollIntervalMs, signal);
        signal.throwIfAborted();
      }
    } finally {
      appearing.close();
    }
  }

  /** Waits until the path exists again (the file was renamed away), or the poll interval passes. */
  async waitForNewFile(signal: AbortSignal): Promise<void> {
    const appearing = watchForChanges(this.#path, this.#log, { forName: true });
    try {
      if ((await lstat(this.#path).catch(() => null)) === null) await appearing.wait(this.#pollIntervalMs, signal);
    } finally {
      appearing.close();
    }
  }

  /** Something other than a regular file is at the path: said once per change of what it is. */
  #refuse(kind: string): void {
    if (this.#refusal?.kind === kind) return;
    const detail = refusalDetail(this.#path, kind);
    this.#refusal = { kind, problem: { reason: 'feed_not_a_file', detail, since: this.#now() } };
    this.#log.error({ path: this.#path, kind }, detail);
  }

  /** The path holds a regular file again, or nothing (then the wait for a file goes on). */
  #refusalOver(found: boolean): void {
    if (this.#refusal === null) return;
    const message = found ? 'the feed path holds a regular file now: reading it' : 'the refused file at the feed path is gone; waiting for a regular file to appear';
    this.#log.info({ path: this.#path, was: this.#refusal.kind }, message);
    this.#refusal = null;
  }
}

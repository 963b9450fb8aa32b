import { watch, type FSWatcher } from 'node:fs';
import { basename, dirname } from 'node:path';
import type { Logger } from '../log.ts';

/**
 * Wakes a reader when a file changes, through the file system's notifications (inotify on
 * Linux, through fs.watch), with a poll as the safety net: wait() resolves at the first
 * change, or after the poll interval when none is heard (rotation by rename on some systems,
 * network file systems, a watcher that could not be set up).
 */
export interface ChangeWatch {
  /** Forgets the changes heard so far: call just before reading, so a change made while reading wakes the next wait() at once. */
  arm(): void;
  /** Resolves at the first change heard since arm(), at once if one was already, or after `ms`, or when `signal` aborts. */
  wait(ms: number, signal: AbortSignal): Promise<void>;
  close(): void;
}

/**
 * Watches `path` itself, or with `forName` its directory for changes to that one name (a file
 * that does not exist yet, or a rotation). Never throws: a watcher that cannot be set up (no
 * such file, inotify limits reached) is logged once at debug level and the poll does the work.
 */
export function watchForChanges(path: string, log: Logger, options: { forName?: boolean } = {}): ChangeWatch {
  return new FileChangeWatch(path, log, options.forName === true);
}

class FileChangeWatch implements ChangeWatch {
  /** The name watched for in its directory (with `forName`). */
  readonly #name: string;
  readonly #forName: boolean;
  /** A change was heard since arm(). */
  #changed = false;
  /** Ends the wait in progress, if any. */
  #waiter: (() => void) | null = null;
  #watcher: FSWatcher | null = null;

  constructor(path: string, log: Logger, forName: boolean) {
    this.#name = basename(path);
    this.#forName = forName;
    try {
      this.#watcher = watch(forName ? dirname(path) : path, { persistent: false }, (_event, filename) => this.#heard(filename));
      // A watched file that is deleted or renamed away may end its watcher: the poll takes over.
      this.#watcher.on('error', () => this.#lost());
    } catch (err) {
      log.debug({ err, path }, 'file notifications unavailable here; polling');
    }
  }

  arm(): void {
    this.#changed = false;
  }

  wait(ms: number, signal: AbortSignal): Promise<void> {
    if (this.#changed || signal.aborted) return Promise.resolve();
    return new Promise<void>((resolve) => {
      const done = () => {
        clearTimeout(timer);
        signal.removeEventListener('abort', done);
        this.#waiter = null;
        resolve();
      };
      const timer = setTimeout(done, ms);
      signal.addEventListener('abort', done, { once: true });
      this.#waiter = done;
    });
  }

  close(): void {
    this.#watcher?.close();
    this.#watcher = null;
    this.#waiter?.();
  }

  #heard(filename: string | Buffer | null): void {
    if (this.#forName && filename !== null && String(filename) !== this.#name) return;
    this.#changed = true;
    this.#waiter?.();
  }

  /** The watcher ended (its file deleted or renamed away): whoever waits looks again at once. */
  #lost(): void {
    this.#watcher?.close();
    this.#watcher = null;
    this.#changed = true;
    this.#waiter?.();
  }
}

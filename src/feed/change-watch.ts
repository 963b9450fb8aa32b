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
  let changed = false;
  let waiter: (() => void) | null = null;
  let watcher: FSWatcher | null = null;
  const name = basename(path);
  const onChange = (_event: string, filename: string | Buffer | null) => {
    if (options.forName && filename !== null && String(filename) !== name) return;
    changed = true;
    waiter?.();
  };
  try {
    watcher = watch(options.forName ? dirname(path) : path, { persistent: false }, onChange);
    // A watched file that is deleted or renamed away may end its watcher: the poll takes over.
    watcher.on('error', () => {
      watcher?.close();
      watcher = null;
      changed = true;
      waiter?.();
    });
  } catch (err) {
    log.debug({ err, path }, 'file notifications unavailable here; polling');
  }
  return {
    arm() {
      changed = false;
    },
    wait(ms, signal) {
      if (changed || signal.aborted) return Promise.resolve();
      return new Promise<void>((resolve) => {
        const done = () => {
          clearTimeout(timer);
          signal.removeEventListener('abort', done);
          waiter = null;
          resolve();
        };
        const timer = setTimeout(done, ms);
        signal.addEventListener('abort', done, { once: true });
        waiter = done;
      });
    },
    close() {
      watcher?.close();
      watcher = null;
      waiter?.();
    },
  };
}

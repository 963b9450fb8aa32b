import type { Db } from './connection.ts';

/**
 * The shared library and the function that give the C heap's free pages back to the system:
 * glibc's `malloc_trim`. After a large ingest the main thread's malloc arena keeps what the burst
 * freed (SQLite's page cache shrunk back, the batches' buffers): free and still resident, the
 * largest part of the daemon's memory (docs/benchmarks.md, "Memory"). glibc
 * only returns the top of an arena by itself; `malloc_trim` also releases whole free pages inside
 * it (madvise), in a few milliseconds.
 */
const LIBC = 'libc.so.6';
const TRIM = 'malloc_trim';

export interface HeapTrimmer {
  /**
   * Releases the free pages of every malloc arena. Returns false when this process cannot (not
   * glibc): from then on it does nothing.
   */
  trim(): boolean;
  readonly available: boolean;
}

/**
 * Node has no way to call `malloc_trim`, and a native addon of our own would bring back the
 * compiler that prebuilt better-sqlite3 binaries spared installs. SQLite can call a function
 * in a shared library: loading an "extension" dlopens the library and calls its entry point
 * with (db, &errmsg, api). `malloc_trim(size_t pad)` takes the first as its pad, which only
 * limits how much of the top of the main arena is kept (a large pad keeps it; the next burst
 * reuses it; glibc 2.36's systrim keeps the top when it is smaller than the pad); the free pages
 * inside every arena are released whatever the pad (madvise). It returns 1
 * when it released something, which SQLite reports as a failed initialisation and answers by
 * closing the library again (libc stays loaded: the process holds it); 0 leaves a handle that
 * the connection closes with itself.
 *
 * Only the C API can load libraries this way (better-sqlite3 enables
 * SQLITE_DBCONFIG_ENABLE_LOAD_EXTENSION, not the SQL function load_extension()), so nothing a
 * client sends can reach it. On a system without glibc (musl, macOS) the first call fails to
 * find the library or the symbol and the trimmer turns itself off.
 */
/** better-sqlite3's loadExtension with its second argument, the entry point, which its types leave out. */
type LoadExtension = (this: Db, path: string, entryPoint: string) => Db;

export interface HeapTrimmerOptions {
  /** Overrides process.platform (tests). */
  readonly platform?: NodeJS.Platform;
  /** Overrides the C library's name (tests: one that does not exist, as on musl). */
  readonly library?: string;
}

export function createHeapTrimmer(db: Db, options: HeapTrimmerOptions = {}): HeapTrimmer {
  const library = options.library ?? LIBC;
  let available = (options.platform ?? process.platform) === 'linux';
  return {
    get available() {
      return available;
    },
    trim() {
      if (!available || !db.open) return false;
      try {
        (db.loadExtension as unknown as LoadExtension).call(db, library, TRIM);
        return true;
      } catch (err) {
        // "error during initialization" is malloc_trim having released pages (it returned 1).
        if (err instanceof Error && /error during initiali[sz]ation/i.test(err.message)) return true;
        // Anything else: no such library or symbol (musl, a static build). Not an error worth a
        // log line; memory is then released only as the allocator itself decides.
        available = false;
        return false;
      }
    },
  };
}

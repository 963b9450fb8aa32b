/**
 * The audit journal: the daemon writes every entry of the trail to its log, once, as one JSON
 * line with its hash (services/audit.ts logEntry), so that journald keeps a copy of the chain
 * that the database cannot rewrite (`hookrelay audit verify --against`). Entries appended by
 * this process are written as soon as they commit; those of other processes (a CLI command,
 * another instance) at the next look, every few seconds. How far it got is kept in the
 * database (AuditRepo.loggedThrough), so entries made while the daemon was stopped are written
 * at its next start.
 */
import type { Logger } from '../log.ts';
import type { Store } from '../store/repos.ts';
import { AUDIT_CHUNK, type AuditTrail } from './audit.ts';

/** How often the journal looks for entries other processes appended (ms). */
export const AUDIT_JOURNAL_POLL_MS = 2_000;

export class AuditJournal {
  readonly #store: Store;
  readonly #trail: AuditTrail;
  readonly #log: Logger;
  readonly #pollMs: number;
  #timer: NodeJS.Timeout | null = null;
  #running: Promise<void> | null = null;
  #again = false;
  #stopped = false;
  #unsubscribe: (() => void) | null = null;

  constructor(store: Store, trail: AuditTrail, log: Logger, pollMs = AUDIT_JOURNAL_POLL_MS) {
    this.#store = store;
    this.#trail = trail;
    this.#log = log.child({ subsystem: 'audit' });
    this.#pollMs = pollMs;
  }

  /** Writes what is not written yet, then keeps up: at each append of this process, and every pollMs. */
  async start(): Promise<void> {
    this.#unsubscribe = this.#trail.onAppended(() => this.nudge());
    await this.nudge();
    this.#timer = setInterval(() => void this.nudge(), this.#pollMs);
    this.#timer.unref();
  }

  /** Writes the entries not written yet; a call while a pass runs makes it run once more. Resolves when written. */
  nudge(): Promise<void> {
    if (this.#stopped) return Promise.resolve();
    if (this.#running !== null) {
      this.#again = true;
      return this.#running;
    }
    this.#running = this.#pass().finally(() => {
      this.#running = null;
      if (this.#again && !this.#stopped) {
        this.#again = false;
        void this.nudge();
      }
    });
    return this.#running;
  }

  /** Stops looking, after one last pass: what was appended until now is written. */
  async stop(): Promise<void> {
    if (this.#timer !== null) clearInterval(this.#timer);
    this.#timer = null;
    this.#unsubscribe?.();
    await this.#running;
    await this.#pass().catch(() => {});
    this.#stopped = true;
  }

  async #pass(): Promise<void> {
    try {
      let through = await this.#store.read((tx) => tx.audit.loggedThrough());
      for (;;) {
        const entries = await this.#trail.after(through, AUDIT_CHUNK);
        if (entries.length === 0) return;
        for (const entry of entries) this.#trail.logEntry(entry);
        through = entries[entries.length - 1]!.id;
        const last = through;
        // Redone after a power cut at worst: the lines are then written twice, never lost.
        await this.#store.transaction((tx) => tx.audit.setLoggedThrough(last), { durable: false });
        if (entries.length < AUDIT_CHUNK) return;
      }
    } catch (err) {
      this.#log.warn({ err }, 'audit journal: could not write the latest entries to the log; trying again shortly');
    }
  }
}

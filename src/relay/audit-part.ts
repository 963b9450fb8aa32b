import { AuditJournal } from '../services/audit-journal.ts';
import type { DaemonPart } from './parts.ts';
import type { Wiring } from './wiring.ts';

/**
 * The audit journal (services/audit-journal.ts): every entry of the trail written to the log,
 * once. After the admin API, whose services record the entries; stopped before it, with a last
 * pass (what the API records after that is written at the next start).
 */
export function auditJournal(w: Wiring): DaemonPart {
  let journal: AuditJournal | null = null;
  return {
    name: 'audit journal',
    async start() {
      journal = new AuditJournal(w.store.get(), w.services.get().audit, w.log);
      await journal.start();
    },
    async stop() {
      await journal?.stop();
      journal = null;
    },
  };
}

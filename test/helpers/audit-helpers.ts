/**
 * The audit context tests pass to the services' write methods when who acts is not what they
 * test: a CLI user named `test` (services/audit.ts).
 */
import { ActorKind, type AuditContext } from '../../src/domain/audit.ts';
import { createLogger } from '../../src/log.ts';
import { createAuditTrail, type AuditTrail } from '../../src/services/audit.ts';
import type { Store } from '../../src/store/repos.ts';

export const BY_TEST: AuditContext = Object.freeze({ actor: Object.freeze({ kind: ActorKind.cli, name: 'test', orgId: null }), requestId: null, source: null });

/** An audit trail over `store` that logs nothing: for tests that build a service on its own. */
export function testAudit(store: Store): AuditTrail {
  return createAuditTrail(store, createLogger('silent'));
}

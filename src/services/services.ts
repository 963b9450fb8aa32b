import type { Config } from '../config/load.ts';
import { createNetworkPolicies } from '../domain/address-policy.ts';
import { createLogger, type Logger } from '../log.ts';
import { createApiKeyService } from './api-keys.ts';
import { createAuditTrail } from './audit.ts';
import { createDeliveryLogService } from './delivery-log.ts';
import { createOutboxService } from './outbox.ts';
import type { Store } from '../store/repos.ts';
import { createOrgService } from './orgs.ts';
import { createRoleService } from './roles.ts';
import { createStatusService } from './status.ts';
import { createUserService } from './users.ts';
import { createTargetCheck } from './webhook-target.ts';
import { createWebhookService } from './webhooks.ts';
import { createCredentialVault } from './credential-key.ts';
import { nobodyListens, type WorkSignal } from './work-signal.ts';
import { DELIVERY_USER_AGENT } from '../version.ts';

/**
 * The core operations shared by the admin API and the CLI. `work` hears of every change that
 * gives the dispatcher something to send (the daemon's dispatcher listens; nobody does in the CLI).
 */
export function createServices(store: Store, config: Pick<Config, 'delivery' | 'stateDir'>, log: Logger = createLogger('silent'), work: WorkSignal = nobodyListens) {
  // Every write method of the services below records who made it (services/audit.ts).
  const audit = createAuditTrail(store, log);
  const orgs = createOrgService(store, audit);
  const roles = createRoleService(store, audit);
  const users = createUserService(store, orgs, roles, audit);
  const apiKeys = createApiKeyService(store, orgs, roles, audit);
  // The URL policy registration applies; every delivery attempt applies it again (dispatch/network-guard.ts).
  const checkTarget = createTargetCheck(createNetworkPolicies(config.delivery), config.delivery.allowHttp);
  // Seals the credentials webhooks give for their receivers; the deliverer opens them with the same key.
  const vault = createCredentialVault(config, log);
  const webhooks = createWebhookService(store, orgs, { checkTarget, disableAfterMs: config.delivery.disableAfter, secretRotationGraceMs: config.delivery.secretRotationGrace, vault }, audit, work, log);
  // The dispatcher's side of the deliveries (claim, record); the API's and the CLI's is deliveryLog.
  const outbox = createOutboxService(store, log.child({ subsystem: 'dispatch' }), {
    failingAfterFailures: config.delivery.failingAfterFailures,
    disableAfterMs: config.delivery.disableAfter,
  });
  const deliveryLog = createDeliveryLogService(store, { userAgent: DELIVERY_USER_AGENT }, audit, work);
  const status = createStatusService(store, { disableAfterMs: config.delivery.disableAfter });
  return { audit, orgs, roles, users, apiKeys, webhooks, outbox, deliveryLog, status, vault };
}
export type Services = ReturnType<typeof createServices>;

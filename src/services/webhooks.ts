import { ErrorCode, HookrelayError, validationError, type InvalidParam } from '../domain/errors.ts';
import { checkRateLimit } from '../domain/rate-window.ts';
import { generateWebhookSecret } from '../domain/secrets.ts';
import type { TargetRefusal } from '../domain/address-policy.ts';
import { iso } from '../domain/iso.ts';
import { WebhookStatus, type Webhook } from '../domain/types.ts';
import { checkWebhookUrl, loggableUrl } from '../domain/validation.ts';
import { checkWebhookHeaders, type WebhookHeaders } from '../domain/webhook-headers.ts';
import type { Logger } from '../log.ts';
import type { Store, Tx } from '../store/repos.ts';
import type { WebhookHealth, WebhookStatusChange } from '../store/values.ts';
import { DisabledReason, disabledReasonText, healthSentence, type RecentFailure } from '../domain/webhook-health.ts';
import { AuditAction, type AuditContext } from '../domain/audit.ts';
import { registrationChanges, rotationChanges } from '../domain/audit-changes.ts';
import type { AuditRecorder, AuditTrail } from './audit.ts';
import type { OrgService } from './orgs.ts';
import type { CredentialVault } from './credential-key.ts';
import { checkReceiverAuth, storedReceiverAuth, tokenUrlNotAllowed, type ReceiverAuthChanges } from './receiver-auth.ts';
import { nobodyListens, type WorkSignal } from './work-signal.ts';

export interface Registration {
  readonly webhook: Webhook;
  /** True when the organization had no webhook before. */
  readonly created: boolean;
  /** The URL this registration replaced, when it replaced one. */
  readonly replacedUrl: string | null;
  /** The signing secret, only when this registration generated it (shown once). */
  readonly newSecret: string | null;
  /** Names of the headers the webhook had and this registration did not set again (they are gone). */
  readonly removedHeaders: readonly string[];
}

/** Why a URL may not be a webhook, or null (see webhook-target.ts). */
export type TargetCheck = (url: URL, orgId: string) => Promise<TargetRefusal | null>;

export interface WebhookServiceOptions {
  /** The URL policy: scheme, user-info and the addresses the URL reaches (webhook-target.ts). */
  readonly checkTarget: TargetCheck;
  /** `delivery.disableAfter`, ms: health reports say when a failing webhook will be disabled. */
  readonly disableAfterMs: number;
  /** `delivery.secretRotationGrace`, ms: how long the previous secret keeps signing after a rotation. */
  readonly secretRotationGraceMs: number;
  /** Seals the credentials a registration gives for the receiver (services/credential-key.ts). */
  readonly vault: CredentialVault;
}

/** A webhook status change, logged once the transaction that made it has committed. */
export interface LoggedStatusChange {
  readonly orgId: string;
  readonly url: string;
  readonly change: WebhookStatusChange;
  /** The webhook's health once the change was made, read in the same transaction (for the log line). */
  health?: WebhookHealth | null;
}

/**
 * Logs a webhook status change at warn, an operator filtering on warnings sees it: made by an
 * attempt's outcome (the outbox's group commit) or by an operator (enable, disable).
 */
export function logStatusChange(log: Logger, { orgId, url, change, health }: LoggedStatusChange, by: 'delivery' | 'operator', disableAfterMs: number): void {
  const reason = change.to === WebhookStatus.disabled ? disabledReasonText(change.disabledReason, disableAfterMs) : undefined;
  const message =
    change.to === WebhookStatus.disabled
      ? `webhook disabled: ${reason}; its deliveries are held`
      : change.to === WebhookStatus.failing
        ? 'webhook failing: attempts fail in a row'
        : by === 'operator'
          ? 'webhook enabled: held deliveries go out'
          : 'webhook active again: an attempt succeeded';
  log.warn(
    {
      org: orgId,
      url: loggableUrl(url),
      from: change.from,
      to: change.to,
      ...(change.to === WebhookStatus.disabled ? { disabledReason: change.disabledReason } : {}),
      ...(health && change.to !== WebhookStatus.active ? { consecutiveFailures: health.consecutiveFailures, failingSince: iso(health.failingSince) } : {}),
      by,
    },
    message,
  );
}

/** The error of an organization without a webhook, for every operation that needs one. */
export function webhookNotConfigured(orgId: string): HookrelayError {
  return new HookrelayError(ErrorCode.webhookNotConfigured, `organization "${orgId}" has no webhook; register one first`);
}

/** The organization's webhook as `tx` sees it, or `webhook_not_configured`. */
export async function requireWebhook(tx: Tx, orgId: string): Promise<Webhook> {
  const webhook = await tx.webhooks.get(orgId);
  if (!webhook) throw webhookNotConfigured(orgId);
  return webhook;
}

/** Why a webhook has its status: its delivery health, its latest failure, one sentence. */
export interface WebhookHealthReport extends WebhookHealth {
  /** The latest failure among its recent deliveries; only looked up when it is failing, disabled or its last attempts failed. */
  readonly lastFailure: RecentFailure | null;
  readonly detail: string;
}

/** The health report of a webhook read with its health (see WebhooksRepo.listWithHealth). */
export async function healthReport(tx: Tx, w: Webhook & WebhookHealth, disableAfterMs: number): Promise<WebhookHealthReport> {
  const troubled = w.status !== 'active' || w.consecutiveFailures > 0;
  const lastFailure = troubled ? await tx.deliveries.recentFailure(w.orgId) : null;
  const health = { consecutiveFailures: w.consecutiveFailures, failingSince: w.failingSince, lastSuccessAt: w.lastSuccessAt, disabledReason: w.disabledReason };
  return { ...health, lastFailure, detail: healthSentence({ ...health, status: w.status, lastFailure, disableAfterMs }) };
}

/** A registration's body as the API and the CLI pass it, not checked yet (see checkRegistration). */
export interface RegistrationInput {
  readonly webhook_url: unknown;
  readonly active_hmac?: unknown;
  readonly headers?: unknown;
  readonly rate_limit?: unknown;
  /** `{ certificate, private_key }` (PEM), null to remove, absent to keep (services/receiver-auth.ts). */
  readonly client_certificate?: unknown;
  /** `{ token_url, client_id, client_secret, scope?, audience?, client_auth? }`, null to remove, absent to keep. */
  readonly oauth2?: unknown;
}

/**
 * A registration's settings, checked: every problem of the body at once, as `invalid_request`.
 * `active_hmac` defaults to true, `headers` to none, `rate_limit` to null (no limit).
 */
export function checkRegistration(input: RegistrationInput, now: number): { url: string; activeHmac: boolean; rateLimit: number | null; headers: WebhookHeaders; auth: ReceiverAuthChanges } {
  const invalid: InvalidParam[] = [];
  if (input.webhook_url === undefined || input.webhook_url === null) {
    invalid.push({ name: 'webhook_url', reason: 'is required' });
  } else {
    const problem = checkWebhookUrl(input.webhook_url);
    if (problem) invalid.push({ name: 'webhook_url', reason: problem });
  }
  if (input.active_hmac !== undefined && typeof input.active_hmac !== 'boolean') {
    invalid.push({ name: 'active_hmac', reason: 'must be true or false' });
  }
  const headers = checkWebhookHeaders(input.headers);
  if (!headers.ok) invalid.push(...headers.problems);
  const rateProblem = input.rate_limit === undefined ? null : checkRateLimit(input.rate_limit);
  if (rateProblem !== null) invalid.push({ name: 'rate_limit', reason: rateProblem });
  const auth = checkReceiverAuth(input, headers.ok ? headers.headers : [], now);
  if (!auth.ok) invalid.push(...auth.problems);
  if (invalid.length > 0 || !headers.ok || !auth.ok) throw validationError('the request body is invalid', invalid);
  return {
    url: input.webhook_url as string,
    activeHmac: (input.active_hmac as boolean | undefined) ?? true,
    rateLimit: (input.rate_limit as number | null | undefined) ?? null,
    headers: headers.headers,
    auth: auth.value,
  };
}

/**
 * A registration (WebhookService.register): checked, the URL policy applied, then the webhook
 * created or replaced and its entry recorded (`webhook.register` or `webhook.replace`, with what
 * changed) in one transaction.
 */
async function registerWebhook(
  deps: { store: Store; orgs: OrgService; checkTarget: TargetCheck; vault: CredentialVault },
  rec: AuditRecorder,
  orgId: string,
  input: RegistrationInput,
): Promise<Registration & { previousStatus: WebhookStatus | null }> {
  const { store, orgs } = deps;
  const { url, activeHmac, rateLimit, headers, auth } = checkRegistration(input, store.clock.now());
  const refused = await deps.checkTarget(new URL(url), orgId);
  if (refused !== null) {
    throw new HookrelayError(ErrorCode.webhookUrlNotAllowed, `webhook_url ${refused.message}`, {
      invalidParams: [{ name: 'webhook_url', reason: refused.message }],
      details: { reason: refused.reason },
    });
  }
  // The token service is reached as the receiver is: the same policy, at registration and at every fetch.
  if (auth.oauth2.kind === 'set') {
    const tokenRefused = await deps.checkTarget(new URL(auth.oauth2.value.settings.tokenUrl), orgId);
    if (tokenRefused !== null) throw tokenUrlNotAllowed(tokenRefused);
  }
  return store.transaction(async (tx) => {
    await orgs.require(orgId, tx);
    const existing = await tx.webhooks.getWithSecret(orgId);
    const newSecret = activeHmac && !existing?.secret ? generateWebhookSecret() : null;
    const credentials = await storedReceiverAuth(tx, deps.vault, orgId, existing, auth, headers);
    await tx.webhooks.upsert(orgId, url, activeHmac, newSecret ?? existing?.secret ?? null, store.clock.now(), { rateLimit, headers, ...credentials });
    const webhook = (await tx.webhooks.get(orgId))!;
    const kept = new Set(webhook.headers.map(([name]) => name.toLowerCase()));
    const removedHeaders = (existing?.headers ?? []).map(([name]) => name).filter((name) => !kept.has(name.toLowerCase()));
    const action = existing === null ? AuditAction.webhookRegister : AuditAction.webhookReplace;
    await rec.record(tx, { action, changes: registrationChanges(existing, webhook, newSecret !== null, credentials.clientSecretChanged) });
    return { webhook, created: existing === null, replacedUrl: existing ? existing.url : null, newSecret, removedHeaders, previousStatus: existing?.status ?? null };
  });
}

export function createWebhookService(store: Store, orgs: OrgService, options: WebhookServiceOptions, audit: AuditTrail, work: WorkSignal = nobodyListens, log?: Logger) {
  const stateLog = log?.child({ subsystem: 'dispatch' });

  return {
    /**
     * Creates or replaces the organization's one webhook. `active_hmac` defaults to true,
     * `headers` to none and `rate_limit` (deliveries per second, 1-10,000) to null, no limit: a
     * registration describes the whole webhook, so a setting it leaves out is set to its default,
     * not kept. A secret is generated the first time HMAC is active and kept across
     * re-registrations.
     */
    async register(by: AuditContext, orgId: string, input: RegistrationInput): Promise<Registration> {
      const { previousStatus, ...result } = await audit.change(by, { action: AuditAction.webhookRegister, orgId }, (rec) => registerWebhook({ store, orgs, checkTarget: options.checkTarget, vault: options.vault }, rec, orgId, input));
      if (previousStatus !== null && previousStatus !== result.webhook.status) {
        // A state change, logged at warn like the others (see logStatusChange).
        stateLog?.warn({ org: orgId, url: loggableUrl(result.webhook.url), from: previousStatus, to: result.webhook.status, by: 'registration' }, 'webhook enabled: registered again, held deliveries go out');
      }
      // Held deliveries of a disabled webhook go out to the new URL at once.
      work.notify(orgId, 'webhook');
      return result;
    },

    /** The organization's webhook (never its secret), or `webhook_not_configured`. */
    get(orgId: string): Promise<Webhook> {
      return store.read((tx) => requireWebhook(tx, orgId));
    },

    /**
     * The organization's webhook with why it has its status (GET /webhook/get_webhook, `hookrelay
     * status`), and until when the previous secret keeps signing (epoch ms; null unless a
     * rotation's grace period is under way and the webhook signs).
     */
    getWithHealth(orgId: string): Promise<{ webhook: Webhook; health: WebhookHealthReport; previousSecretExpiresAt: number | null }> {
      return store.read(async (tx) => {
        const webhook = await tx.webhooks.get(orgId);
        const health = await tx.webhooks.health(orgId);
        if (!webhook || !health) throw webhookNotConfigured(orgId);
        const expires = await tx.webhooks.previousSecretExpiresAt(orgId);
        const previousSecretExpiresAt = webhook.activeHmac && expires !== null && expires > store.clock.now() ? expires : null;
        return { webhook, health: await healthReport(tx, { ...webhook, ...health }, options.disableAfterMs), previousSecretExpiresAt };
      });
    },

    /** The signing secret, for admins and the operator; `secret_not_configured` when HMAC was never enabled. */
    async getSecret(orgId: string): Promise<string> {
      const webhook = await store.read((tx) => tx.webhooks.getWithSecret(orgId));
      if (!webhook) throw webhookNotConfigured(orgId);
      if (!webhook.secret) {
        throw new HookrelayError(ErrorCode.secretNotConfigured, `the webhook of organization "${orgId}" has no signing secret; register it with active_hmac true`);
      }
      return webhook.secret;
    },

    /** New signing secret; the previous one keeps signing for the grace period. Returns the new secret once. */
    rotateSecret(by: AuditContext, orgId: string): Promise<{ secret: string; previousSecretExpiresAt: number }> {
      return audit.change(by, { action: AuditAction.webhookSecretRotate, orgId }, (rec) => store.transaction(async (tx) => {
        const webhook = await tx.webhooks.getWithSecret(orgId);
        if (!webhook) throw webhookNotConfigured(orgId);
        if (!webhook.activeHmac) throw new HookrelayError(ErrorCode.secretNotConfigured, 'HMAC signing is off for this webhook; register it with active_hmac true first');
        const now = store.clock.now();
        const secret = generateWebhookSecret();
        const previousSecretExpiresAt = now + options.secretRotationGraceMs;
        await tx.webhooks.rotateSecret(orgId, secret, previousSecretExpiresAt, now);
        await rec.record(tx, { changes: rotationChanges(previousSecretExpiresAt) });
        return { secret, previousSecretExpiresAt };
      }));
    },

    /** Operator switch: `disabled` holds deliveries; `active` releases them. */
    async setEnabled(by: AuditContext, orgId: string, enabled: boolean): Promise<void> {
      const action = enabled ? AuditAction.webhookEnable : AuditAction.webhookDisable;
      const changed = await audit.change(by, { action, orgId }, (rec) => store.transaction(async (tx) => {
        const webhook = await requireWebhook(tx, orgId);
        const change = await tx.webhooks.setStatus(orgId, enabled ? WebhookStatus.active : WebhookStatus.disabled, enabled ? null : DisabledReason.operator, store.clock.now());
        const health = change === null ? null : await tx.webhooks.health(orgId);
        await rec.record(tx, { changes: change === null ? null : { status: { before: change.from, after: change.to } } });
        return change === null ? null : { orgId, url: webhook.url, change, health };
      }));
      if (changed !== null && stateLog !== undefined) logStatusChange(stateLog, changed, 'operator', options.disableAfterMs);
      work.notify(orgId, 'webhook');
    },
  };
}
export type WebhookService = ReturnType<typeof createWebhookService>;

import { encodeRateWindow, type RateWindow } from '../../domain/rate-window.ts';
import type { Webhook, WebhookStatus, WebhookWithSecret } from '../../domain/types.ts';
import { storedHeaders } from '../../domain/webhook-headers.ts';
import { storedClientCertificate } from '../../domain/client-certificate.ts';
import { storedOAuth2 } from '../../domain/oauth2-settings.ts';
import type { Db } from './connection.ts';
import type { WebhooksRepo } from '../repos.ts';
import { DEFAULT_WEBHOOK_SETTINGS, type DeliverableWebhook, type RateState, type SealedCredentials, type WebhookSettings, type WebhookHealth, type WebhookSigningKeys, type WebhookStatusChange, type WebhookWithHealth } from '../values.ts';
import { HEALTH_COLUMNS, SEALED_COLUMNS, toSealed, type SealedRow, rateWindowOf, toDeliverable, toHealth, toSigningKeys, toWebhook, WEBHOOK_COLUMNS, type DeliverableRow, type WebhookBaseRow, type WebhookHealthRow } from '../row-mappers.ts';
import { DELIVERABLE_SQL, named, positional, previousSecretExpiresAtSql, recordFailureSet, recordSuccessSet, rotateSecretSql, setRateWindowSql, setStatusSet, upsertWebhookSql } from '../sql.ts';
import type { Sync } from './sync-repo.ts';

/** A webhook's whole row: one read serves get, getWithSecret, health and signingKeys (a primary-key lookup, prepared once). */
type WebhookRow = WebhookBaseRow & WebhookHealthRow & { secret: string | null; previous_secret: string | null; previous_secret_expires_at: number | null };

export function createSqliteWebhooksRepo(db: Db): Sync<WebhooksRepo> {
  const byOrg = db.prepare<[string], WebhookRow>(`SELECT ${WEBHOOK_COLUMNS}, secret, previous_secret, previous_secret_expires_at, ${HEALTH_COLUMNS} FROM webhooks WHERE org_id = ?`);
  const deliverable = db.prepare<[], DeliverableRow>(DELIVERABLE_SQL);
  const setRateWindow = db.prepare<[string, string]>(setRateWindowSql(positional('window', 'org')));
  const rateStates = db.prepare<[], { org_id: string; rate_limit: number; rate_window: string | null }>(
    'SELECT org_id, rate_limit, rate_window FROM webhooks WHERE rate_limit IS NOT NULL ORDER BY org_id',
  );
  const statusOf = db.prepare<[string], { status: WebhookStatus }>('SELECT status FROM webhooks WHERE org_id = ?');
  const allWithHealth = db.prepare<[], WebhookBaseRow & WebhookHealthRow>(`SELECT ${WEBHOOK_COLUMNS}, ${HEALTH_COLUMNS} FROM webhooks ORDER BY org_id`);
  // The status a change starts from is read first (statusOf), under the write lock that holds the whole database.
  const succeeded = db.prepare<{ org: string; now: number }>(`
    UPDATE webhooks SET ${recordSuccessSet('', named('now'))}
    WHERE org_id = @org`);
  const failed = db.prepare<{ org: string; now: number; failingAfter: number; disableAfter: number }, { status: WebhookStatus; disabled_reason: string | null }>(`
    UPDATE webhooks SET ${recordFailureSet('', named('now', 'failingAfter', 'disableAfter'))}
    WHERE org_id = @org
    RETURNING status, disabled_reason`);
  const setStatus = db.prepare<{ org: string; status: WebhookStatus; reason: string | null; now: number }>(`
    UPDATE webhooks SET ${setStatusSet('', named('status', 'reason', 'now'))}
    WHERE org_id = @org`);
  const rotate = db.prepare<{ org: string; secret: string; expires: number; now: number }>(rotateSecretSql(named('org', 'secret', 'expires', 'now')));
  const previousExpiresAt = db.prepare<[string], { at: number | null }>(previousSecretExpiresAtSql(positional('org')));
  const upsert = db.prepare<{
    org_id: string; url: string; active_hmac: number; headers: string | null; secret: string | null; now: number; rate_limit: number | null;
    cert: string | null; cert_sealed: string | null; oauth2: string | null; oauth2_sealed: string | null;
  }>(upsertWebhookSql("@org_id, @url, @active_hmac, @headers, @secret, 'active', @rate_limit, @now, @now, @cert, @cert_sealed, @oauth2, @oauth2_sealed"));
  const sealed = db.prepare<[string], SealedRow>(`SELECT ${SEALED_COLUMNS} FROM webhooks WHERE org_id = ?`);

  return {
    get(orgId: string): Webhook | null {
      const row = byOrg.get(orgId);
      return row ? toWebhook(row) : null;
    },
    getWithSecret(orgId: string): WebhookWithSecret | null {
      const row = byOrg.get(orgId);
      return row ? { ...toWebhook(row), secret: row.secret } : null;
    },
    deliverable(): DeliverableWebhook[] {
      return deliverable.all().map(toDeliverable);
    },
    health(orgId: string): WebhookHealth | null {
      const row = byOrg.get(orgId);
      return row ? toHealth(row) : null;
    },
    /** Nothing counts deliveries out of order here (see countOutOfOrder). */
    listWithHealth(): WebhookWithHealth[] {
      return allWithHealth.all().map((row) => ({ ...toWebhook(row), ...toHealth(row), outOfOrderDeliveries: 0 }));
    },
    recordSuccess(orgId: string, now: number): WebhookStatusChange | null {
      const before = statusOf.get(orgId)?.status;
      succeeded.run({ org: orgId, now });
      return before === 'failing' ? { from: before, to: 'active', disabledReason: null } : null;
    },
    recordFailure(orgId: string, now: number, failingAfter: number, disableAfterMs: number): WebhookStatusChange | null {
      const before = statusOf.get(orgId)?.status;
      const after = failed.get({ org: orgId, now, failingAfter, disableAfter: disableAfterMs });
      if (before === undefined || after === undefined || after.status === before) return null;
      return { from: before, to: after.status, disabledReason: after.disabled_reason };
    },
    /** The write transaction holds the whole database: nothing to lock row by row. */
    lockInOrder(): void {},
    /** Nothing to count: one feed, in storage order (see DeliveriesRepo.lease). */
    countOutOfOrder(): void {},
    setStatus(orgId: string, status: WebhookStatus, reason: string | null, now: number): WebhookStatusChange | null {
      const before = statusOf.get(orgId)?.status;
      if (setStatus.run({ org: orgId, status, reason, now }).changes !== 1 || before === undefined || before === status) return null;
      return { from: before, to: status, disabledReason: reason };
    },
    rotateSecret(orgId: string, secret: string, previousExpiresAt: number, now: number): void {
      rotate.run({ org: orgId, secret, expires: previousExpiresAt, now });
    },
    signingKeys(orgId: string): WebhookSigningKeys | null {
      const row = byOrg.get(orgId);
      return row ? toSigningKeys(row) : null;
    },
    previousSecretExpiresAt(orgId: string): number | null {
      return previousExpiresAt.get(orgId)?.at ?? null;
    },
    sealedCredentials(orgId: string): SealedCredentials | null {
      const row = sealed.get(orgId);
      return row ? toSealed(row) : null;
    },
    upsert(orgId: string, url: string, activeHmac: boolean, secret: string | null, now: number, settings: Partial<WebhookSettings> = DEFAULT_WEBHOOK_SETTINGS): void {
      upsert.run({
        org_id: orgId, url, active_hmac: activeHmac ? 1 : 0, headers: storedHeaders(settings.headers ?? []), secret, now, rate_limit: settings.rateLimit ?? null,
        cert: storedClientCertificate(settings.clientCertificate ?? null), cert_sealed: settings.sealed?.clientCertificate ?? null,
        oauth2: storedOAuth2(settings.oauth2 ?? null), oauth2_sealed: settings.sealed?.oauth2ClientSecret ?? null,
      });
    },
    setRateWindow(orgId: string, window: RateWindow): void {
      setRateWindow.run(JSON.stringify(encodeRateWindow(window)), orgId);
    },
    rateStates(now: number): RateState[] {
      return rateStates.all().map((r) => ({ orgId: r.org_id, limit: r.rate_limit, window: rateWindowOf(r.rate_window), now }));
    },
  };
}

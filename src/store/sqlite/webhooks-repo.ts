import { encodeRateWindow, type RateWindow } from '../../domain/rate-window.ts';
import type { Webhook, WebhookStatus, WebhookWithSecret } from '../../domain/types.ts';
import { storedHeaders } from '../../domain/webhook-headers.ts';
import type { Db } from './db.ts';
import { DEFAULT_WEBHOOK_SETTINGS, type DeliverableWebhook, type RateState, type WebhookSettings, type WebhooksRepo, type WebhookHealth, type WebhookSigningKeys, type WebhookStatusChange, type WebhookWithHealth } from '../repos.ts';
import { rateWindowOf, toWebhook } from '../rows.ts';
import type { Sync } from './sync-repo.ts';

interface WebhookRow {
  org_id: string;
  url: string;
  active_hmac: number;
  headers: string | null;
  secret: string | null;
  status: WebhookStatus;
  rate_limit: number | null;
  created_at: number;
  updated_at: number;
  previous_secret: string | null;
  previous_secret_expires_at: number | null;
  consecutive_failures: number;
  failing_since: number | null;
  last_success_at: number | null;
  disabled_reason: string | null;
}

export function createWebhooksRepo(db: Db): Sync<WebhooksRepo> {
  const byOrg = db.prepare<[string], WebhookRow>(
    `SELECT org_id, url, active_hmac, headers, secret, status, rate_limit, created_at, updated_at, previous_secret, previous_secret_expires_at,
       consecutive_failures, failing_since, last_success_at, disabled_reason FROM webhooks WHERE org_id = ?`,
  );
  const deliverable = db.prepare<[], { org_id: string; status: WebhookStatus; last_success_at: number | null; rate_limit: number | null }>(
    "SELECT org_id, status, last_success_at, rate_limit FROM webhooks WHERE status <> 'disabled' ORDER BY org_id",
  );
  const setRateWindow = db.prepare<[string, string]>('UPDATE webhooks SET rate_window = ? WHERE org_id = ?');
  const rateStates = db.prepare<[], { org_id: string; rate_limit: number; rate_window: string | null }>(
    'SELECT org_id, rate_limit, rate_window FROM webhooks WHERE rate_limit IS NOT NULL ORDER BY org_id',
  );
  const statusOf = db.prepare<[string], { status: WebhookStatus }>('SELECT status FROM webhooks WHERE org_id = ?');
  const allWithHealth = db.prepare<[], Omit<WebhookRow, 'secret' | 'previous_secret' | 'previous_secret_expires_at'>>(
    `SELECT org_id, url, active_hmac, headers, status, rate_limit, created_at, updated_at, consecutive_failures, failing_since, last_success_at, disabled_reason
     FROM webhooks ORDER BY org_id`,
  );
  const succeeded = db.prepare<{ org: string; now: number }>(`
    UPDATE webhooks SET consecutive_failures = 0, failing_since = NULL, last_success_at = @now,
      status = CASE WHEN status = 'disabled' THEN status ELSE 'active' END
    WHERE org_id = @org`);
  const failed = db.prepare<{ org: string; now: number; failingAfter: number; disableAfter: number }, { status: WebhookStatus; disabled_reason: string | null }>(`
    UPDATE webhooks SET consecutive_failures = consecutive_failures + 1, failing_since = coalesce(failing_since, @now),
      status = CASE
        WHEN status = 'disabled' THEN status
        WHEN @now - coalesce(failing_since, @now) >= @disableAfter THEN 'disabled'
        WHEN consecutive_failures + 1 >= @failingAfter THEN 'failing'
        ELSE status END,
      disabled_reason = CASE
        WHEN status <> 'disabled' AND @now - coalesce(failing_since, @now) >= @disableAfter THEN 'failing_too_long'
        ELSE disabled_reason END
    WHERE org_id = @org
    RETURNING status, disabled_reason`);
  const setStatus = db.prepare<{ org: string; status: WebhookStatus; reason: string | null; now: number }>(`
    UPDATE webhooks SET status = @status, disabled_reason = @reason, updated_at = @now,
      consecutive_failures = CASE WHEN @status = 'active' THEN 0 ELSE consecutive_failures END,
      failing_since = CASE WHEN @status = 'active' THEN NULL ELSE failing_since END
    WHERE org_id = @org`);
  const rotate = db.prepare<{ org: string; secret: string; expires: number; now: number }>(`
    UPDATE webhooks SET previous_secret = secret, previous_secret_expires_at = @expires, secret = @secret, updated_at = @now
    WHERE org_id = @org`);
  const previousExpiresAt = db.prepare<[string], { at: number | null }>('SELECT previous_secret_expires_at AS at FROM webhooks WHERE org_id = ? AND previous_secret IS NOT NULL');
  const upsert = db.prepare<{ org_id: string; url: string; active_hmac: number; headers: string | null; secret: string | null; now: number; rate_limit: number | null }>(`
    INSERT INTO webhooks (org_id, url, active_hmac, headers, secret, status, rate_limit, created_at, updated_at)
    VALUES (@org_id, @url, @active_hmac, @headers, @secret, 'active', @rate_limit, @now, @now)
    ON CONFLICT (org_id) DO UPDATE SET
      url = excluded.url, active_hmac = excluded.active_hmac, headers = excluded.headers, secret = excluded.secret, rate_limit = excluded.rate_limit,
      status = 'active', disabled_reason = NULL, consecutive_failures = 0, failing_since = NULL,
      updated_at = excluded.updated_at`);

  return {
    /** The webhook without its secret: what every read path gets. */
    get(orgId: string): Webhook | null {
      const row = byOrg.get(orgId);
      return row ? toWebhook(row) : null;
    },
    getWithSecret(orgId: string): WebhookWithSecret | null {
      const row = byOrg.get(orgId);
      return row ? { ...toWebhook(row), secret: row.secret } : null;
    },
    /** The webhooks that may receive deliveries now (not disabled), with their status and last success (epoch ms). */
    deliverable(): DeliverableWebhook[] {
      return deliverable.all().map((r) => ({ orgId: r.org_id, status: r.status, lastSuccessAt: r.last_success_at, rateLimit: r.rate_limit }));
    },
    health(orgId: string): WebhookHealth | null {
      const row = byOrg.get(orgId);
      return row
        ? { consecutiveFailures: row.consecutive_failures, failingSince: row.failing_since, lastSuccessAt: row.last_success_at, disabledReason: row.disabled_reason }
        : null;
    },
    /** Every webhook with its health, by organization id. One row per organization: a small table. */
    listWithHealth(): WebhookWithHealth[] {
      return allWithHealth.all().map((row) => ({
        ...toWebhook(row),
        consecutiveFailures: row.consecutive_failures,
        failingSince: row.failing_since,
        lastSuccessAt: row.last_success_at,
        disabledReason: row.disabled_reason,
        outOfOrderDeliveries: 0,
      }));
    },
    /** Records a successful attempt; returns the status change it made (`failing` -> `active`), if any. */
    recordSuccess(orgId: string, now: number): WebhookStatusChange | null {
      const before = statusOf.get(orgId)?.status;
      succeeded.run({ org: orgId, now });
      return before === 'failing' ? { from: before, to: 'active', disabledReason: null } : null;
    },
    /**
     * Counts a failed attempt: `failing` after `failingAfter` in a row, `disabled` after failing
     * for `disableAfterMs`. Returns the status change it made, if any.
     */
    recordFailure(orgId: string, now: number, failingAfter: number, disableAfterMs: number): WebhookStatusChange | null {
      const before = statusOf.get(orgId)?.status;
      const after = failed.get({ org: orgId, now, failingAfter, disableAfter: disableAfterMs });
      if (before === undefined || after === undefined || after.status === before) return null;
      return { from: before, to: after.status, disabledReason: after.disabled_reason };
    },
    /** Sets the status (and why it is disabled); returns the change it made, null when the status stays. */
    /** The write transaction holds the whole database: nothing to lock row by row. */
    lockInOrder(): void {},
    /** Nothing to count: one feed, in storage order (see DeliveriesRepo.lease). */
    countOutOfOrder(): void {},
    setStatus(orgId: string, status: WebhookStatus, reason: string | null, now: number): WebhookStatusChange | null {
      const before = statusOf.get(orgId)?.status;
      if (setStatus.run({ org: orgId, status, reason, now }).changes !== 1 || before === undefined || before === status) return null;
      return { from: before, to: status, disabledReason: reason };
    },
    /** The current secret becomes the previous one (signing until `previousExpiresAt`); `secret` becomes current. */
    rotateSecret(orgId: string, secret: string, previousExpiresAt: number, now: number): void {
      rotate.run({ org: orgId, secret, expires: previousExpiresAt, now });
    },
    signingKeys(orgId: string): WebhookSigningKeys | null {
      const row = byOrg.get(orgId);
      return row
        ? { url: row.url, activeHmac: row.active_hmac === 1, secret: row.secret, previousSecret: row.previous_secret, previousSecretExpiresAt: row.previous_secret_expires_at }
        : null;
    },
    previousSecretExpiresAt(orgId: string): number | null {
      return previousExpiresAt.get(orgId)?.at ?? null;
    },
    /** Creates or replaces the organization's one webhook (its headers and rate limit too); status goes back to active. */
    upsert(orgId: string, url: string, activeHmac: boolean, secret: string | null, now: number, settings: Partial<WebhookSettings> = DEFAULT_WEBHOOK_SETTINGS): void {
      upsert.run({ org_id: orgId, url, active_hmac: activeHmac ? 1 : 0, headers: storedHeaders(settings.headers ?? []), secret, now, rate_limit: settings.rateLimit ?? null });
    },
    setRateWindow(orgId: string, window: RateWindow): void {
      setRateWindow.run(JSON.stringify(encodeRateWindow(window)), orgId);
    },
    rateStates(now: number): RateState[] {
      return rateStates.all().map((r) => ({ orgId: r.org_id, limit: r.rate_limit, window: rateWindowOf(r.rate_window), now }));
    },
  };
}

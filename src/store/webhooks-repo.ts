import type { Webhook, WebhookStatus, WebhookWithSecret } from '../domain/types.ts';
import type { Db } from './db.ts';

interface WebhookRow {
  org_id: string;
  url: string;
  active_hmac: number;
  secret: string | null;
  status: WebhookStatus;
  created_at: number;
  updated_at: number;
}

const toWebhook = (row: WebhookRow): Webhook => ({
  orgId: row.org_id,
  url: row.url,
  activeHmac: row.active_hmac === 1,
  status: row.status,
  createdAt: row.created_at,
  updatedAt: row.updated_at,
});

export function createWebhooksRepo(db: Db) {
  const byOrg = db.prepare<[string], WebhookRow>(
    'SELECT org_id, url, active_hmac, secret, status, created_at, updated_at FROM webhooks WHERE org_id = ?',
  );
  const upsert = db.prepare<{ org_id: string; url: string; active_hmac: number; secret: string | null; now: number }>(`
    INSERT INTO webhooks (org_id, url, active_hmac, secret, status, created_at, updated_at)
    VALUES (@org_id, @url, @active_hmac, @secret, 'active', @now, @now)
    ON CONFLICT (org_id) DO UPDATE SET
      url = excluded.url, active_hmac = excluded.active_hmac, secret = excluded.secret,
      status = 'active', updated_at = excluded.updated_at`);

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
    /** Creates or replaces the organization's one webhook; status goes back to active. */
    upsert(orgId: string, url: string, activeHmac: boolean, secret: string | null, now: number): void {
      upsert.run({ org_id: orgId, url, active_hmac: activeHmac ? 1 : 0, secret, now });
    },
  };
}
export type WebhooksRepo = ReturnType<typeof createWebhooksRepo>;

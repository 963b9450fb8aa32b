import { decodeRateWindow, encodeRateWindow, type RateWindow } from '../../domain/rate-window.ts';
import type { Webhook, WebhookStatus, WebhookWithSecret } from '../../domain/types.ts';
import { storedHeaders } from '../../domain/webhook-headers.ts';
import { storedClientCertificate } from '../../domain/client-certificate.ts';
import { storedOAuth2 } from '../../domain/oauth2-settings.ts';
import type { WebhooksRepo } from '../repos.ts';
import { DEFAULT_WEBHOOK_SETTINGS, type DeliverableWebhook, type RateState, type SealedCredentials, type WebhookHealth, type WebhookSettings, type WebhookSigningKeys, type WebhookStatusChange, type WebhookWithHealth } from '../values.ts';
import { HEALTH_COLUMNS as HEALTH, SEALED_COLUMNS, toSealed, type SealedRow, SIGNING_KEY_COLUMNS, toDeliverable, toHealth, toSigningKeys, toWebhook, WEBHOOK_COLUMNS as WEBHOOK, type DeliverableRow, type SigningKeysRow, type WebhookBaseRow, type WebhookHealthRow } from '../row-mappers.ts';
import { DELIVERABLE_SQL, numbered, previousSecretExpiresAtSql, recordFailureSet, recordSuccessSet, rotateSecretSql, setRateWindowSql, setStatusSet, upsertWebhookSql } from '../sql.ts';
import type { PgConnection } from './connection.ts';

type WebhookRow = WebhookBaseRow;
type HealthRow = WebhookHealthRow;


/**
 * The status a change starts from, read in the statement that makes the change: the UPDATE
 * joins the row as it was, locked first (FOR UPDATE), so that under READ COMMITTED the status
 * returned is the one the change was computed from, even when another instance's transaction
 * changed the row just before. One round trip; SQLite reads the status, then updates, under
 * its write lock. (RETURNING old.* would say it directly, but needs PostgreSQL 18.)
 */
const FROM_PRIOR = 'FROM (SELECT org_id, status FROM webhooks WHERE org_id = $1 FOR UPDATE) prior WHERE w.org_id = prior.org_id';

const SET_RATE_WINDOW = setRateWindowSql({ org: '$1', window: '$2::bigint[]' });

/** The database server's clock in epoch ms, the one rate windows are kept in (every instance reads the same). */
export const PG_CLOCK_MS = '(extract(epoch FROM clock_timestamp()) * 1000)::bigint';

/**
 * Webhooks on PostgreSQL, as ../sqlite/webhooks-repo.ts on SQLite: the same columns changed and the
 * same status changes returned. Reads without the secret never select it.
 */
export function createPgWebhooksRepo(db: PgConnection): WebhooksRepo {
  return {
    async get(orgId: string): Promise<Webhook | null> {
      const { rows } = await db.query<WebhookRow>(`SELECT ${WEBHOOK} FROM webhooks WHERE org_id = $1`, [orgId]);
      return rows[0] === undefined ? null : toWebhook(rows[0]);
    },
    async getWithSecret(orgId: string): Promise<WebhookWithSecret | null> {
      const { rows } = await db.query<WebhookRow & { secret: string | null }>(`SELECT ${WEBHOOK}, secret FROM webhooks WHERE org_id = $1`, [orgId]);
      return rows[0] === undefined ? null : { ...toWebhook(rows[0]), secret: rows[0].secret };
    },
    async deliverable(): Promise<DeliverableWebhook[]> {
      const { rows } = await db.query<DeliverableRow>(DELIVERABLE_SQL);
      return rows.map(toDeliverable);
    },
    async health(orgId: string): Promise<WebhookHealth | null> {
      const { rows } = await db.query<HealthRow>(`SELECT ${HEALTH} FROM webhooks WHERE org_id = $1`, [orgId]);
      return rows[0] === undefined ? null : toHealth(rows[0]);
    },
    /** By organization id (COLLATE "C": byte order, as in SQLite). */
    async listWithHealth(): Promise<WebhookWithHealth[]> {
      const { rows } = await db.query<WebhookRow & HealthRow & { out_of_order_deliveries: number }>(`SELECT ${WEBHOOK}, ${HEALTH}, out_of_order_deliveries FROM webhooks ORDER BY org_id`);
      return rows.map((row) => ({ ...toWebhook(row), ...toHealth(row), outOfOrderDeliveries: row.out_of_order_deliveries }));
    },
    async recordSuccess(orgId: string, now: number): Promise<WebhookStatusChange | null> {
      const { rows } = await db.query<{ prior: WebhookStatus }>(
        `UPDATE webhooks w SET ${recordSuccessSet('w.', { now: '$2::bigint' })}
         ${FROM_PRIOR}
         RETURNING prior.status AS prior`,
        [orgId, now],
      );
      return rows[0]?.prior === 'failing' ? { from: 'failing', to: 'active', disabledReason: null } : null;
    },
    async recordFailure(orgId: string, now: number, failingAfter: number, disableAfterMs: number): Promise<WebhookStatusChange | null> {
      const { rows } = await db.query<{ prior: WebhookStatus; status: WebhookStatus; disabled_reason: string | null }>(
        `UPDATE webhooks w SET ${recordFailureSet('w.', { now: '$2::bigint', failingAfter: '$3::integer', disableAfter: '$4::bigint' })}
         ${FROM_PRIOR}
         RETURNING prior.status AS prior, w.status, w.disabled_reason`,
        [orgId, now, failingAfter, disableAfterMs],
      );
      const row = rows[0];
      if (row === undefined || row.status === row.prior) return null;
      return { from: row.prior, to: row.status, disabledReason: row.disabled_reason };
    },
    /** One statement; the rows are locked in the order of their ids (COLLATE "C": bytes), whatever the order given. */
    async lockInOrder(orgIds: readonly string[]): Promise<void> {
      if (orgIds.length === 0) return;
      await db.query('SELECT 1 FROM webhooks WHERE org_id = ANY($1::text[]) ORDER BY org_id FOR UPDATE', [orgIds]);
    },
    async countOutOfOrder(orgId: string, n: number): Promise<void> {
      if (n <= 0) return;
      await db.query('UPDATE webhooks SET out_of_order_deliveries = out_of_order_deliveries + $2 WHERE org_id = $1', [orgId, n]);
    },
    async setStatus(orgId: string, status: WebhookStatus, reason: string | null, now: number): Promise<WebhookStatusChange | null> {
      const { rows } = await db.query<{ prior: WebhookStatus }>(
        `UPDATE webhooks w SET ${setStatusSet('w.', { status: '$2::text', reason: '$3::text', now: '$4::bigint' })}
         ${FROM_PRIOR}
         RETURNING prior.status AS prior`,
        [orgId, status, reason, now],
      );
      const prior = rows[0]?.prior;
      if (prior === undefined || prior === status) return null;
      return { from: prior, to: status, disabledReason: reason };
    },
    async rotateSecret(orgId: string, secret: string, previousExpiresAt: number, now: number): Promise<void> {
      await db.query(rotateSecretSql(numbered('org', 'expires', 'secret', 'now')), [orgId, previousExpiresAt, secret, now]);
    },
    async signingKeys(orgId: string): Promise<WebhookSigningKeys | null> {
      const { rows } = await db.query<SigningKeysRow>(`SELECT ${SIGNING_KEY_COLUMNS} FROM webhooks WHERE org_id = $1`, [orgId]);
      return rows[0] === undefined ? null : toSigningKeys(rows[0]);
    },
    async previousSecretExpiresAt(orgId: string): Promise<number | null> {
      const { rows } = await db.query<{ at: number | null }>(previousSecretExpiresAtSql(numbered('org')), [orgId]);
      return rows[0]?.at ?? null;
    },
    async sealedCredentials(orgId: string): Promise<SealedCredentials | null> {
      const { rows } = await db.query<SealedRow>(`SELECT ${SEALED_COLUMNS} FROM webhooks WHERE org_id = $1`, [orgId]);
      return rows[0] === undefined ? null : toSealed(rows[0]);
    },
    async upsert(orgId: string, url: string, activeHmac: boolean, secret: string | null, now: number, settings: Partial<WebhookSettings> = DEFAULT_WEBHOOK_SETTINGS): Promise<void> {
      await db.query(upsertWebhookSql("$1, $2, $3, $7::jsonb, $4, 'active', $6, $5, $5, $8, $9, $10, $11"), [
        orgId,
        url,
        activeHmac,
        secret,
        now,
        settings.rateLimit ?? null,
        storedHeaders(settings.headers ?? []),
        storedClientCertificate(settings.clientCertificate ?? null),
        settings.sealed?.clientCertificate ?? null,
        storedOAuth2(settings.oauth2 ?? null),
        settings.sealed?.oauth2ClientSecret ?? null,
      ]);
    },
    /** Within the claim's turn: the row is locked by claimTurns already. */
    async setRateWindow(orgId: string, window: RateWindow): Promise<void> {
      await db.query(SET_RATE_WINDOW, [orgId, encodeRateWindow(window)]);
    },
    /** Judged at the database server's clock, the one the windows are in (see claimTurns); `now` is not used. */
    async rateStates(): Promise<RateState[]> {
      const { rows } = await db.query<{ org_id: string; rate_limit: number; rate_window: unknown; now: number }>(
        `SELECT org_id, rate_limit, rate_window, ${PG_CLOCK_MS} AS now FROM webhooks WHERE rate_limit IS NOT NULL ORDER BY org_id`,
      );
      return rows.map((r) => ({ orgId: r.org_id, limit: r.rate_limit, window: decodeRateWindow(r.rate_window ?? []), now: Number(r.now) }));
    },
  };
}

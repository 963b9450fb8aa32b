import type { Context } from 'koa';
import { validationError, type InvalidParam } from '../../domain/errors.ts';
import { iso } from '../../domain/iso.ts';
import { Permission } from '../../domain/permissions.ts';
import { RFC3339_EXPECTED, rfc3339Ms } from '../../domain/rfc3339.ts';
import type { AttemptRow } from '../../store/types.ts';
import { STATS_WINDOWS, type DeliveryLogService, type RequestAsSent, type StatsWindow } from '../../services/delivery-log.ts';
import { attemptStatsView, deliveryView } from '../../services/views.ts';
import type { SecuredRouter } from '../secured-router.ts';

const STATUSES = ['pending', 'failed', 'delivered', 'dead'] as const;
const MAX_PAGE = 200;
/** An anticipation request id as the feed accepts one (domain/feed-event.ts). */
const MAX_REQUEST_ID = 200;
const CONTROL_CHARACTER = /[\u0000-\u001f\u007f]/;
const WINDOWS = Object.keys(STATS_WINDOWS) as StatsWindow[];

function attemptView(a: AttemptRow) {
  return {
    attempt: a.attempt,
    started_at: iso(a.startedAt),
    duration_ms: a.durationMs,
    url: a.url,
    status_code: a.statusCode,
    error: a.errorClass,
    error_detail: a.errorDetail,
    response_body: a.responseBody,
    outcome: a.outcome,
    webhook_timestamp: a.sentTimestamp,
    webhook_signature: a.sentSignature,
  };
}

/**
 * Epoch ms of the time parameter `name`, undefined when absent or invalid (then noted in
 * `invalid`). Strict RFC 3339: a date or time that does not exist (2026-02-30, 24:00, an offset
 * of +24:00) is refused, not rolled over into another window.
 */
function parseTime(name: string, value: unknown, invalid: InvalidParam[]): number | undefined {
  if (value === undefined) return undefined;
  const ms = typeof value === 'string' ? rfc3339Ms(value) : Number.NaN;
  if (Number.isNaN(ms)) {
    invalid.push({ name, reason: `must be ${RFC3339_EXPECTED}` });
    return undefined;
  }
  return ms;
}

function parseRequestId(value: string | undefined, invalid: InvalidParam[]): string | undefined {
  if (value === undefined) return undefined;
  if (value === '' || [...value].length > MAX_REQUEST_ID || CONTROL_CHARACTER.test(value)) {
    invalid.push({ name: 'request_id', reason: `must be an anticipation request id: 1 to ${MAX_REQUEST_ID} characters, no control characters` });
    return undefined;
  }
  return value;
}

function requestView(r: RequestAsSent) {
  return { method: 'POST', url: r.url, headers: r.headers, body: r.body, attempt: r.attempt, sent_at: iso(r.sentAt), signed_at: iso(r.signedAt), signature: r.signature };
}

function deliveryId(ctx: Context): number {
  const raw = (ctx as Context & { params: Record<string, string> }).params.id ?? '';
  if (!/^\d{1,15}$/.test(raw)) throw validationError('the delivery id must be a positive integer', [{ name: 'id', reason: 'must be a positive integer' }]);
  return Number(raw);
}

function single(value: string | string[] | undefined): string | undefined {
  return Array.isArray(value) ? value[0] : value;
}

export function registerDeliveryRoutes(router: SecuredRouter, services: { deliveryLog: DeliveryLogService }): void {
  router.route(['GET'], '/webhook/deliveries', Permission.webhookRead, async (ctx, principal) => {
    const invalid: InvalidParam[] = [];
    const q = ctx.query;
    const status = single(q.status);
    if (status !== undefined && !(STATUSES as readonly string[]).includes(status)) invalid.push({ name: 'status', reason: `must be one of ${STATUSES.join(', ')}` });
    const since = parseTime('since', single(q.since), invalid);
    const until = parseTime('until', single(q.until), invalid);
    const requestId = parseRequestId(single(q.request_id), invalid);
    const limitText = single(q.limit) ?? '50';
    const limit = Number(limitText);
    if (!/^\d+$/.test(limitText) || limit < 1 || limit > MAX_PAGE) invalid.push({ name: 'limit', reason: `must be an integer from 1 to ${MAX_PAGE}` });
    const cursor = single(q.cursor);
    let beforeId: number | undefined;
    if (cursor !== undefined) {
      const decoded = Buffer.from(cursor, 'base64url').toString('utf8');
      if (!/^\d{1,15}$/.test(decoded)) invalid.push({ name: 'cursor', reason: 'must be a next_cursor value from a previous page' });
      else beforeId = Number(decoded);
    }
    if (invalid.length > 0) throw validationError('the query is invalid', invalid);
    const page = await services.deliveryLog.page(principal.orgId, {
      status: status as (typeof STATUSES)[number] | undefined,
      since,
      until,
      beforeId,
      requestId,
      limit,
    });
    ctx.body = {
      data: page.deliveries.map(deliveryView),
      next_cursor: page.nextBeforeId === null ? null : Buffer.from(String(page.nextBeforeId)).toString('base64url'),
    };
  });

  router.route(['GET'], '/webhook/deliveries/:id', Permission.webhookRead, async (ctx, principal) => {
    // Signatures only to those who may read the secret (see DeliveryLogService.detail).
    const withSignature = principal.permissions.includes(Permission.webhookManage);
    const { delivery, attempts, request } = await services.deliveryLog.detail(principal.orgId, deliveryId(ctx), withSignature);
    ctx.body = { ...deliveryView(delivery), attempt_log: attempts.map(attemptView), request: requestView(request) };
  });

  router.route(['GET'], '/webhook/stats', Permission.webhookRead, async (ctx, principal) => {
    const window = single(ctx.query.window) ?? '1h';
    if (!(WINDOWS as string[]).includes(window)) {
      throw validationError('the query is invalid', [{ name: 'window', reason: `must be one of ${WINDOWS.join(', ')}` }]);
    }
    ctx.body = attemptStatsView(await services.deliveryLog.attemptStats(principal.orgId, window as StatsWindow));
  });

  router.route(['POST'], '/webhook/deliveries/:id/replay', Permission.webhookManage, async (ctx, principal) => {
    const delivery = await services.deliveryLog.replay(principal.orgId, deliveryId(ctx));
    ctx.status = 202;
    ctx.body = { message: `Event ${delivery.eventId} queued again as delivery ${delivery.id}`, delivery: deliveryView(delivery) };
  });

  router.route(
    ['POST'],
    '/webhook/recover',
    Permission.webhookManage,
    async (ctx, principal) => {
      const body = ctx.state.body as Record<string, unknown>;
      const invalid: InvalidParam[] = [];
      if (body.since === undefined) invalid.push({ name: 'since', reason: 'is required' });
      const since = parseTime('since', body.since, invalid);
      const until = parseTime('until', body.until, invalid);
      if (invalid.length > 0) throw validationError('the request body is invalid', invalid);
      // In chunks, each a transaction of its own that waits for the lock on its own (in the store).
      const result = await services.deliveryLog.recover(principal.orgId, since!, until);
      ctx.status = 202;
      ctx.body = {
        message: `${result.requeued} event(s) queued again, ${result.retriedNow} failed delivery(ies) made due now`,
        requeued: result.requeued,
        retried_now: result.retriedNow,
      };
    },
    { body: true },
  );

  router.route(['POST'], '/webhook/test', Permission.webhookManage, async (ctx, principal) => {
    const delivery = await services.deliveryLog.sendTest(principal.orgId);
    ctx.status = 202;
    ctx.body = { message: `Test event ${delivery.eventId} queued as delivery ${delivery.id}`, delivery: deliveryView(delivery) };
  });
}

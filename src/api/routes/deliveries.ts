import type { Context } from 'koa';
import { iso } from '../../domain/iso.ts';
import { Permission } from '../../domain/permissions.ts';
import type { AttemptRow } from '../../store/values.ts';
import { statusOfName, type DeliveryLogService, type DeliveryDetail } from '../../services/delivery-log.ts';
import { attemptStatsView, deliveryView } from '../../services/views.ts';
import { firstValues, parseRequest } from '../request-validation.ts';
import { DeliveriesQuery, DeliveryIdParams, encodeCursor, RecoverRequest, StatsQuery, TestRequest } from '../schemas/requests.ts';
import type { Answer } from '../schemas/answers.ts';
import type { DeliveryPage, DeliveryQueued, RecoverResult } from '../schemas/deliveries.ts';
import type { SecuredRouter } from '../secured-router.ts';

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

function requestView(r: DeliveryDetail['request']) {
  const c = r.clientCertificate;
  return {
    method: 'POST',
    url: r.url,
    headers: r.headers,
    body: r.body,
    attempt: r.attempt,
    sent_at: iso(r.sentAt),
    signed_at: iso(r.signedAt),
    signature: r.signature,
    client_certificate: c === null ? null : { subject: c.subject, fingerprint_sha256: c.fingerprintSha256 },
  };
}

function deliveryId(ctx: Context): number {
  const params = (ctx as Context & { params: Record<string, string> }).params;
  return parseRequest(DeliveryIdParams, params, 'the delivery id must be a positive integer').id;
}

export function registerDeliveryRoutes(router: SecuredRouter, services: { deliveryLog: DeliveryLogService }): void {
  router.route(['GET'], '/webhook/deliveries', Permission.webhookRead, async (ctx, principal) => {
    const query = parseRequest(DeliveriesQuery, firstValues(ctx.query), 'the query is invalid');
    const page = await services.deliveryLog.page(principal.orgId, {
      // A state name (`retrying`...) filters as the status it names.
      status: query.status === undefined ? undefined : (statusOfName(query.status) ?? undefined),
      since: query.since,
      until: query.until,
      beforeId: query.cursor,
      requestId: query.request_id,
      limit: query.limit,
    });
    ctx.body = {
      data: page.deliveries.map(deliveryView),
      next_cursor: page.nextBeforeId === null ? null : encodeCursor(page.nextBeforeId),
    } satisfies Answer<typeof DeliveryPage>;
  });

  router.route(['GET'], '/webhook/deliveries/:id', Permission.webhookRead, async (ctx, principal) => {
    // Signatures only to those who may read the secret (see DeliveryLogService.detail).
    const withSignature = principal.permissions.includes(Permission.webhookManage);
    const { delivery, attempts, request } = await services.deliveryLog.detail(principal.orgId, deliveryId(ctx), withSignature);
    ctx.body = { ...deliveryView(delivery), attempt_log: attempts.map(attemptView), request: requestView(request) };
  });

  router.route(['GET'], '/webhook/stats', Permission.webhookRead, async (ctx, principal) => {
    const { window } = parseRequest(StatsQuery, firstValues(ctx.query), 'the query is invalid');
    ctx.body = attemptStatsView(await services.deliveryLog.attemptStats(principal.orgId, window));
  });

  router.route(['POST'], '/webhook/deliveries/:id/replay', Permission.webhookManage, async (ctx, principal, by) => {
    const delivery = await services.deliveryLog.replay(by, principal.orgId, deliveryId(ctx));
    ctx.status = 202;
    ctx.body = { message: `Event ${delivery.eventId} queued again as delivery ${delivery.id}`, delivery: deliveryView(delivery) } satisfies Answer<typeof DeliveryQueued>;
  });

  router.route(['POST'], '/webhook/deliveries/:id/retry', Permission.webhookManage, async (ctx, principal, by) => {
    const due = await services.deliveryLog.retryNow(by, principal.orgId, deliveryId(ctx));
    ctx.status = 202;
    ctx.body = { message: `Delivery ${due.id} is due now: its next attempt starts within seconds`, delivery: deliveryView(due) } satisfies Answer<typeof DeliveryQueued>;
  });

  router.route(
    ['POST'],
    '/webhook/recover',
    Permission.webhookManage,
    async (ctx, principal, by) => {
      const { since, until } = parseRequest(RecoverRequest, ctx.state.body as Record<string, unknown>, 'the request body is invalid');
      // In chunks, each a transaction of its own that waits for the lock on its own (in the store).
      const result = await services.deliveryLog.recover(by, principal.orgId, since, until);
      ctx.status = 202;
      ctx.body = {
        message: `${result.requeued} event(s) queued again, ${result.retriedNow} failed delivery(ies) made due now`,
        requeued: result.requeued,
        retried_now: result.retriedNow,
      } satisfies Answer<typeof RecoverResult>;
    },
    { body: true },
  );

  router.route(
    ['POST'],
    '/webhook/test',
    Permission.webhookManage,
    async (ctx, principal, by) => {
      const { kind } = parseRequest(TestRequest, ctx.state.body as Record<string, unknown>, 'the request body is invalid');
      const delivery = await services.deliveryLog.sendTest(by, principal.orgId, kind);
      ctx.status = 202;
      const what = kind === 'sample_status_change' ? 'Sample status change (marked "test": true)' : 'Test event';
      ctx.body = { message: `${what} ${delivery.eventId} queued as delivery ${delivery.id}`, delivery: deliveryView(delivery) } satisfies Answer<typeof DeliveryQueued>;
    },
    { body: true },
  );
}

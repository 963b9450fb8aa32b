/** The document's operations on the delivery log, and the public ones (probes, this document, metrics). */
import { ErrorCode } from '../../domain/errors.ts';
import { Permission } from '../../domain/permissions.ts';
import { Health, OpenApiDocument, Readiness } from '../schemas/answers.ts';
import { AttemptStats, DeliveryDetail, DeliveryPage, DeliveryQueued, RecoverResult } from '../schemas/deliveries.ts';
import { DeliveriesQuery, RecoverRequest, StatsQuery, TestRequest } from '../schemas/requests.ts';
import { operation, queryParameters } from './operation.ts';
import { answer, BODY_LIMIT, problemAnswer, problemContent, requestBody, securedErrors, shared } from './responses.ts';

type Json = Record<string, unknown>;

const READ = securedErrors({ body: false });

const validationFailed = (description: string) => problemAnswer(description, [ErrorCode.validation]);
const webhookNotConfigured = problemAnswer('The organization has no webhook (`webhook_not_configured`).', [ErrorCode.webhookNotConfigured]);

/** The paths of the delivery log. */
export function deliveryPaths(): Record<string, Json> {
  return {
    '/webhook/test': {
      post: operation({
        tag: 'deliveries',
        operationId: 'sendTestEvent',
        summary: 'Send a test event to the webhook',
        description:
          "Stores and queues a test event for the organization's webhook, delivered (and signed) like any other: by default a `webhook.test` notification; with `{\"kind\": \"sample_status_change\"}`, a status change of an anticipation request in the real event's shape, marked `\"test\": true` and about a made-up request (`ar_test_...`), so that the receiver's real code path runs. Either is ordered on its own: nothing waits for it. Follow it with `GET /webhook/deliveries/{id}`. The body is optional (none, or `{}`, sends a `webhook.test`). Permission: `webhook:manage` (saas_admin).",
        permission: Permission.webhookManage,
        requestBody: { ...requestBody(TestRequest, { kind: 'sample_status_change' }, `${BODY_LIMIT} Optional: an empty body counts as \`{}\` (a \`webhook.test\`). Unknown members are ignored.`), required: false },
        responses: {
          202: answer('Queued; `delivery` is the test delivery.', DeliveryQueued),
          ...securedErrors({ body: true }),
          422: validationFailed('`kind` is not one of `webhook_test`, `sample_status_change` (`validation_failed`).'),
          404: webhookNotConfigured,
          503: shared('DatabaseBusy'),
        },
      }),
    },
    '/webhook/deliveries': {
      get: operation({
        tag: 'deliveries',
        operationId: 'listDeliveries',
        summary: "List the organization's deliveries, newest first",
        description:
          "One page of the delivery log of the caller's organization, newest first, filtered by status, creation time and anticipation request. Pass `next_cursor` as `cursor` for the next (older) page; it is null on the last page. With `request_id`, one call reads at most 500,000 deliveries of the log (newest first, within `since`/`until` when given): a page may then hold fewer than `limit` deliveries, even none, and still have a `next_cursor` that searches on from there. Permission: `webhook:read` (saas_admin, saas_viewer).",
        permission: Permission.webhookRead,
        parameters: queryParameters(DeliveriesQuery),
        responses: {
          200: answer('A page of deliveries.', DeliveryPage),
          ...READ,
          422: validationFailed(
            'A query parameter is invalid (`validation_failed`, each one in `invalid_params`): `status`, `since`, `until`, `request_id`, `limit` or `cursor`.',
          ),
        },
      }),
    },
    '/webhook/deliveries/{id}': {
      get: operation({
        tag: 'deliveries',
        operationId: 'getDelivery',
        summary: 'One delivery with its attempts',
        description:
          "A delivery of the caller's organization with the log of every attempt (time, duration, HTTP status or error class, and the start of the response body) and the request hookrelay sends for it: every header and the exact body (`request`; its signature only for callers with `webhook:manage`). Permission: `webhook:read` (saas_admin, saas_viewer).",
        permission: Permission.webhookRead,
        responses: {
          200: answer('The delivery and its attempts.', DeliveryDetail),
          ...READ,
          404: problemAnswer(
            "No delivery with this id in the caller's organization (`delivery_not_found`); a delivery of another organization gets the same answer.",
            [ErrorCode.deliveryNotFound],
          ),
          422: validationFailed('The id is not a positive integer (`validation_failed`).'),
        },
      }),
    },
    '/webhook/stats': {
      get: operation({
        tag: 'deliveries',
        operationId: 'getAttemptStats',
        summary: 'Attempts per minute (succeeded, failed) over the last hour or day',
        description:
          "The delivery attempts of the caller's organization's webhook, counted by the time they started: those that delivered (a 2xx answer) and those that failed, per minute over the last hour (`window=1h`, 60 buckets) or per quarter of an hour over the last day (`window=24h`, 96 buckets). Attempts, not deliveries: a delivery that failed twice, then delivered, counts two failed attempts and one that succeeded, each in its own bucket. The console's chart. Permission: `webhook:read` (saas_admin, saas_viewer).",
        permission: Permission.webhookRead,
        parameters: queryParameters(StatsQuery),
        responses: {
          200: answer('The attempts of the window, per bucket.', AttemptStats),
          ...READ,
          422: validationFailed('`window` is neither `1h` nor `24h` (`validation_failed`).'),
        },
      }),
    },
    '/webhook/deliveries/{id}/replay': {
      post: operation({
        tag: 'deliveries',
        operationId: 'replayDelivery',
        summary: "Send a delivery's event again",
        description:
          'Queues the event of this delivery again, as a new delivery with a fresh retry schedule and the same `webhook-id` and body. The same `webhook-id` means that a receiver that de-duplicates by it (as Standard Webhooks advises) takes the replay for the delivery it already has and skips it: replay what the receiver never processed, or have it forget that id first. Refused while the event already has a delivery pending (a delivery waiting for a retry: `POST /webhook/deliveries/{id}/retry` sends that one now). No request body. Permission: `webhook:manage` (saas_admin).',
        permission: Permission.webhookManage,
        responses: {
          202: answer('Queued; `delivery` is the new delivery.', DeliveryQueued),
          ...READ,
          404: problemAnswer('The organization has no webhook (`webhook_not_configured`), or no delivery with this id (`delivery_not_found`).', [
            ErrorCode.webhookNotConfigured,
            ErrorCode.deliveryNotFound,
          ]),
          422: validationFailed('The id is not a positive integer, or the event already has a pending delivery (`validation_failed`).'),
          503: shared('DatabaseBusy'),
        },
      }),
    },
    '/webhook/deliveries/{id}/retry': {
      post: operation({
        tag: 'deliveries',
        operationId: 'retryDeliveryNow',
        summary: 'Retry a waiting delivery now',
        description:
          "Brings the next attempt of a delivery that is waiting for it (`state` `retrying`: its last attempt failed, the next is scheduled at `next_attempt_at`) forward to now, and wakes the dispatcher: it goes out within seconds (after the webhook's pause following failures, at most a few seconds, or a `Retry-After` it answered). The delivery keeps its id, its attempts and its retry schedule; a request's changes still go out in order: a later change of the same request stays queued behind it. Anything else is refused with 409 `delivery_not_waiting`, whose `detail` says what to do instead: a delivered or dead delivery has no next attempt (replay it), one in flight is being attempted now, one that was never attempted is queued already, one queued behind an earlier change of its request waits for that one (retry that one), and the deliveries of a disabled webhook are held until it is enabled. No request body. Permission: `webhook:manage` (saas_admin).",
        permission: Permission.webhookManage,
        responses: {
          202: answer('Due now; `delivery` is the delivery, its `next_attempt_at` now.', DeliveryQueued),
          ...READ,
          404: problemAnswer(
            "The organization has no webhook (`webhook_not_configured`), or no delivery with this id in the caller's organization (`delivery_not_found`; a delivery of another organization gets the same answer).",
            [ErrorCode.webhookNotConfigured, ErrorCode.deliveryNotFound],
          ),
          409: problemAnswer('The delivery is not waiting for a retry (`delivery_not_waiting`): delivered, dead, in flight, not attempted yet, queued behind an earlier change of its request, or held by a disabled webhook; `detail` says which, and what to do.', [
            ErrorCode.deliveryNotWaiting,
          ]),
          422: validationFailed('The id is not a positive integer (`validation_failed`).'),
          503: shared('DatabaseBusy'),
        },
      }),
    },
    '/webhook/recover': {
      post: operation({
        tag: 'deliveries',
        operationId: 'recoverDeliveries',
        summary: 'Re-queue every undelivered event of a time window',
        description:
          "For the events of the caller's organization received in [`since`, `until`): those whose deliveries are dead, and those stored while the organization had no webhook, get a new delivery; failed deliveries waiting for a retry are made due now. Permission: `webhook:manage` (saas_admin).",
        permission: Permission.webhookManage,
        requestBody: requestBody(RecoverRequest, { since: '2026-11-22T00:00:00Z' }, BODY_LIMIT),
        responses: {
          202: answer('Queued.', RecoverResult, { example: { message: '3 event(s) queued again, 1 failed delivery(ies) made due now', requeued: 3, retried_now: 1 } }),
          ...securedErrors({ body: true }),
          404: webhookNotConfigured,
          422: validationFailed('`since` is missing, a time is not RFC 3339, or `since` is not before `until` (`validation_failed`).'),
          503: shared('DatabaseBusy'),
        },
      }),
    },
  };
}

/** The public paths: no token, no version, no rate limit. */
export function publicPaths(): Json {
  return {
    '/healthz': {
      get: operation({
        tag: 'operations',
        operationId: 'getHealth',
        summary: 'Liveness probe',
        description: 'Answers 200 while the process serves HTTP. No authentication, no `Version` header, no rate limit.',
        security: [],
        permission: null,
        responses: { 200: answer('The process is alive.', Health, { example: { status: 'ok' } }, null) },
      }),
    },
    '/readyz': {
      get: operation({
        tag: 'operations',
        operationId: 'getReadiness',
        summary: 'Readiness probe',
        description:
          'Answers 200 when the daemon can serve requests (its database answers a query and takes writes), 503 while it cannot or is shutting down, with the reason: `disk_full` (writes paused; they resume by themselves once space is freed), `io_error` (the database file cannot be read or written), `database_damaged` (nothing is written any more: check it, restore a backup, restart), `feed_not_a_file` (something other than a regular file is at the feed path, a symbolic link say: it is not read, and the daemon waits for a regular file there), `feed_reader_failing` (the feed reader keeps failing at one position, or reading standard input failed: see the detail and the log), `identity_provider_unreachable` (auth.provider is set and its keys could not be fetched at start, or not for longer than `auth.provider.maxStale`: its tokens are refused, the daemon\'s own work), `stopping`. While the provider cannot be reached but the last keys fetched are younger than `auth.provider.maxStale`, the answer is 200 with `degraded` listing `identity_provider_unreachable`. No authentication, no `Version` header, no rate limit. The 503 body is this plain status object, not a problem.',
        security: [],
        permission: null,
        responses: {
          200: answer('Ready.', Readiness, { example: { status: 'ready' } }, null),
          503: answer(
            'Not ready (database unavailable, unwritable or damaged, or shutting down).',
            Readiness,
            {
              example: {
                status: 'not_ready',
                reason: 'disk_full',
                detail: 'the disk holding the database is full; writes are paused and retried, and resume by themselves once space is freed',
                since: '2026-11-23T08:30:00.000Z',
              },
            },
            null,
          ),
        },
      }),
    },
    '/openapi.json': {
      get: operation({
        tag: 'operations',
        operationId: 'getOpenApi',
        summary: 'This OpenAPI document',
        description: 'The OpenAPI 3.1 description of the API, served verbatim from `docs/openapi.json` of the installed release. No authentication.',
        security: [],
        permission: null,
        responses: { 200: answer('The OpenAPI document.', OpenApiDocument, {}, null) },
      }),
    },
    '/metrics': {
      get: operation({
        tag: 'operations',
        operationId: 'getMetrics',
        summary: 'Prometheus metrics',
        description:
          "The daemon's metrics in the Prometheus text exposition format (docs/metrics.md lists every metric and what to alert on). Served here unless `metrics.listen` gives them a listener of their own, or `metrics.enabled` is false. Without a token this answers only when the listener is on a loopback address, or when `metrics.allowUnauthenticated` is true; with `metrics.token` (or `metrics.tokenFile`) set, it needs `Authorization: Bearer <metrics token>`. No `Version` header, no rate limit. Gauges read from the database are at most `metrics.refreshInterval` (15 s) old.",
        security: [{}, { metricsToken: [] }],
        permission: null,
        responses: {
          200: {
            description: 'The metrics.',
            content: {
              'text/plain': {
                schema: { type: 'string', description: 'Prometheus text format, version 0.0.4 (`text/plain; version=0.0.4; charset=utf-8`).' },
                example:
                  '# HELP hookrelay_events_ingested_total Feed lines stored as new events by this process.\n# TYPE hookrelay_events_ingested_total counter\nhookrelay_events_ingested_total 1042\n',
              },
            },
          },
          401: {
            description: 'A metrics token is configured and the request did not send it (`missing_token`) or sent another (`invalid_token`).',
            content: problemContent([ErrorCode.missingToken, ErrorCode.invalidToken]),
          },
          403: {
            description:
              'No metrics token is configured and this listener is not on a loopback address (nor is `metrics.allowUnauthenticated` set): the metrics are not served to the network unprotected (`forbidden`).',
            content: problemContent([ErrorCode.forbidden]),
          },
        },
      }),
    },
  };
}

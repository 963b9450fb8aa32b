/**
 * The delivery log's answers (GET /webhook/deliveries, /webhook/deliveries/{id}, /webhook/stats,
 * replay, recover, test), as zod schemas: see answers.ts.
 */
import { z } from 'zod';
import { DeliveryState as States, STATS_WINDOWS, type StatsWindow } from '../../services/delivery-log.ts';
import { TestKind } from '../../services/test-events.ts';
import { AttemptError } from '../../domain/retry-policy.ts';
import { dateTime, nullableDateTime } from './answers.ts';

const ATTEMPT_ERRORS = Object.values(AttemptError) as [AttemptError, ...AttemptError[]];

/** The windows of GET /webhook/stats, as the service defines them. */
export const STATS_WINDOW_NAMES = Object.keys(STATS_WINDOWS) as [StatsWindow, ...StatsWindow[]];

export const DeliveryStatus = z.enum(['pending', 'failed', 'delivered', 'dead']).meta({
  id: 'DeliveryStatus',
  description:
    "v1's names, kept as they were: `pending`: not attempted yet; `failed`: **retrying**, not final: its last attempt failed and the next is scheduled at `next_attempt_at` (it can be retried now); `delivered`: a 2xx answer; `dead`: **failed for good**, the retry schedule is used up (kept, replayable). `state` says the same in words that cannot be misread.",
});

export const DeliveryState = z.enum(Object.values(States) as [States, ...States[]]).meta({
  id: 'DeliveryState',
  description:
    'The delivery\'s state, `status` in other words: `queued` (`pending`: not attempted yet), `retrying` (`failed`: its last attempt failed; the next is at `next_attempt_at`, and `POST /webhook/deliveries/{id}/retry` brings it forward), `delivered`, `failed_for_good` (`dead`: no attempt is left; replay it to send the event again). Added within v1.',
});

/** The `status` filter of GET /webhook/deliveries: a status, or a state naming the same deliveries (`retrying` is `failed`...). */
export const DeliveryStatusFilter = z.enum([...DeliveryStatus.options, ...DeliveryState.options]);

/** What a test sends (POST /webhook/test's `kind`). */
export const TestKinds = z.enum(Object.values(TestKind) as [TestKind, ...TestKind[]]);

/** A delivery as lists show it (services/views.ts deliveryView). */
const deliveryFields = {
  id: z.int().min(1).meta({ description: 'Delivery id; a replay makes a new one.' }),
  event_id: z.string().meta({ description: 'The event id, sent as `webhook-id` on every attempt and replay.' }),
  event_type: z.string().meta({ description: '`anticipation_request.status_changed`, or `webhook.test`.', examples: ['anticipation_request.status_changed'] }),
  anticipation_request_id: z.string().nullable().meta({ description: 'null for test events.' }),
  status: DeliveryStatus,
  state: DeliveryState,
  attempts: z.int().min(0),
  next_attempt_at: nullableDateTime('When the next attempt is due; null unless pending or failed.'),
  last_attempt_at: nullableDateTime(),
  last_status_code: z.int().nullable().meta({ description: 'HTTP status of the last attempt, if it got an answer.' }),
  last_error: z.string().nullable().meta({ description: 'What went wrong in the last attempt.' }),
  created_at: dateTime(),
  updated_at: dateTime(),
  trace_id: z
    .string()
    .regex(/^[0-9a-f]{32}$/)
    .nullable()
    .meta({
      description:
        "The event's W3C trace id (32 lower-case hex digits): the producer's, when its feed line carried a `traceparent`, or the one hookrelay started when it read the event while tracing was on. Every attempt of the event (retries and replays included) is a span of this trace, and sends it to the receiver in its `traceparent` header while tracing is on. null: the event has no trace (read while tracing was off from a line without `traceparent`, a test event, or stored before hookrelay kept trace context). Added within v1.",
      examples: ['4bf92f3577b34da6a3ce929d0e0e4736'],
    }),
};

export const Delivery = z.strictObject(deliveryFields).meta({ id: 'Delivery' });

export const DeliveryAttempt = z
  .strictObject({
    attempt: z.int().min(1).meta({ description: 'Attempt number, from 1.' }),
    started_at: dateTime(),
    duration_ms: z.int().min(0),
    url: z.string().meta({ description: 'The URL the attempt was sent to.' }),
    status_code: z.int().nullable().meta({ description: 'HTTP status of the answer; null when there was none (network error, timeout, refused address).' }),
    // The classes of AttemptError, from the domain (test/dispatch/invalid-request.test.ts checks the description names each).
    error: z
      .enum(ATTEMPT_ERRORS)
      .nullable()
      .meta({
        description:
          "Class of failure, when the attempt failed: `http_status`, `timeout`, `connection_error`, `dns_error`, `tls_error`, `blocked_address`, `invalid_url`, `proxy_error` (the operator's egress proxy could not be reached or refused the tunnel: no request reached the receiver), `oauth2_token_failed` (no access token for the receiver: its token service refused, failed or could not be reached; retried), `credentials_unavailable` (the webhook's sealed client certificate key or OAuth2 secret does not open on this instance: the operator's credential key is missing or another one; nothing was sent, retried, the webhook's health left as it was), or `invalid_request` (the request itself cannot be sent: a header value HTTP cannot carry, such as an event id, its `webhook-id`, with characters beyond Latin-1; nothing was sent, the delivery is dead at once and the webhook's health is left as it was).",
      }),
    error_detail: z.string().nullable().meta({ description: 'What went wrong, in words.' }),
    response_body: z
      .string()
      .nullable()
      .meta({
        description:
          'The start of the response body (at most 20 KiB are read). For a receiver on an internal network (reached through a network the operator granted), only its size, as "(not stored: N bytes from a receiver on an internal network; ...)", unless the operator keeps such answers for the organization (delivery.storeInternalResponses). Wherever the receiver repeated one of the webhook\'s credentials (a value of its `headers` answers show as null), it reads `[hidden: value of header NAME]`, to every caller; without `webhook:manage`, so does every copy of the signature the attempts sent (`[hidden: value of header webhook-signature]`).',
      }),
    outcome: z.enum(['delivered', 'retry', 'dead', 'disabled', 'abandoned']).meta({ description: 'What the attempt led to.' }),
    webhook_timestamp: z
      .int()
      .nullable()
      .meta({
        description:
          'The `webhook-timestamp` (seconds) of the request this attempt sent, or was sending when it ended (a timeout, a closed connection). null when it sent nothing (a refused address or URL, a DNS, TLS or connection failure before any request went out), and for attempts recorded before this was kept. Added within v1.',
      }),
    webhook_signature: z
      .string()
      .nullable()
      .meta({
        description:
          'The `webhook-signature` header that request carried (`v1,<base64>`, one per signing secret, space-separated), exactly as sent: it verifies over the body with `webhook-id` and `webhook_timestamp`. Only for callers with `webhook:manage` (see `request.signature`); null for others, when the request was unsigned (`active_hmac` false then), or when nothing was sent. Added within v1.',
      }),
  })
  .meta({ id: 'DeliveryAttempt' });

export const DeliveryRequest = z
  .strictObject({
    method: z.literal('POST'),
    url: z.string().meta({ format: 'uri', description: "Where that attempt went; for a preview, where the next attempt goes (the webhook's URL now)." }),
    headers: z.record(z.string(), z.string()).meta({
      description:
        "Every header as the receiver gets it, by lower-case name, in the order they are sent: `host`, `connection`, `content-type` (`application/json`), `user-agent` (`hookrelay/VERSION`), `webhook-id`, `webhook-timestamp` (seconds), `webhook-signature` (`v1,<base64>`, one per signing secret, newest first; as sent; left out when `signature` is not `included`), `content-length`, then the webhook's own headers (`Webhook.headers`) by lower-case name: the ones the webhook has now (an attempt does not record them), each value that may be a credential shown as `(set; value hidden)`; with `oauth2`, `authorization` (its access token, `(set; value hidden)`). While tracing is on, each attempt also sends `traceparent` (and `tracestate`) after `webhook-signature`, its own span's: not recorded, so not shown here; `trace_id` names its trace.",
    }),
    body: z.string().meta({ description: 'The exact body, byte for byte (UTF-8): what the signature covers, after `webhook-id.webhook-timestamp.`.' }),
    attempt: z
      .int()
      .min(1)
      .nullable()
      .meta({ description: 'The attempt (its number in `attempt_log`) that sent this request; null: no attempt sent one yet, and this is a preview made now.' }),
    sent_at: nullableDateTime('When that attempt started; null for a preview.'),
    signed_at: dateTime('The second `webhook-timestamp` names: when the attempt signed its request, or, for a preview, when this answer was made.'),
    signature: z.enum(['included', 'withheld', 'unsigned']).meta({
      description:
        '`included`: `webhook-signature` is in `headers`; `withheld`: the request is signed, but the caller lacks `webhook:manage`; `unsigned`: the attempt sent no signature (`active_hmac` was false), or, for a preview, the webhook does not sign.',
    }),
    client_certificate: z
      .strictObject({ subject: z.string(), fingerprint_sha256: z.string() })
      .nullable()
      .meta({
        description:
          "The client certificate the webhook presents in the TLS handshake (mutual TLS), as it has it now (an attempt does not record it); null: none of its own (an operator's certificate for the organization is not shown here). Never its key. Added within v1.",
      }),
  })
  .meta({
    id: 'DeliveryRequest',
    description:
      'The request as sent: every header and the body of the request the latest attempt that sent one carried (`attempt`), with the `webhook-timestamp` and `webhook-signature` it recorded, as the receiver got them. The body and `webhook-id` are the same bytes on every attempt and replay. When no attempt has sent a request yet (never attempted, or every attempt ended before sending; attempts recorded before hookrelay kept their timestamp count as such), a preview: `attempt` and `sent_at` are null, and `webhook-timestamp` and `webhook-signature` are those of a request signed when this answer was made (`signed_at`), with the secrets that sign now, as the next attempt would carry them. The signature is only given to callers with `webhook:manage`, who may read the secret anyway: a signature less than five minutes old lets whoever holds it make the receiver accept this request. Added within v1.',
    examples: [
      {
        method: 'POST',
        url: 'https://hooks.acme.example/hookrelay',
        headers: {
          host: 'hooks.acme.example',
          connection: 'keep-alive',
          'content-type': 'application/json',
          'user-agent': 'hookrelay/0.1.0',
          'webhook-id': 'evt_7c1f0e2a9b3d4c58',
          'webhook-timestamp': '1795336260',
          'webhook-signature': 'v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=',
          'content-length': '243',
        },
        body: '{"type":"anticipation_request.status_changed","timestamp":"2026-11-22T08:30:00.000Z","data":{"event_id":"evt_7c1f0e2a9b3d4c58","organization_id":"acme","anticipation_request_id":"ar_5e21d9","occurred_at":"2026-11-22T08:30:00.000Z","status":"approved","previous_status":"submitted"}}',
        attempt: 2,
        sent_at: '2026-11-22T08:31:00.012Z',
        signed_at: '2026-11-22T08:31:00.000Z',
        signature: 'included',
        client_certificate: null,
      },
    ],
  });

export const DeliveryDetail = z
  .strictObject({
    ...deliveryFields,
    attempt_log: z.array(DeliveryAttempt).meta({ description: 'Every attempt, oldest first.' }),
    request: DeliveryRequest,
  })
  .meta({ id: 'DeliveryDetail' });

export const DeliveryPage = z
  .strictObject({
    data: z.array(Delivery),
    next_cursor: z
      .string()
      .nullable()
      .meta({
        description:
          'Pass as `cursor` for the next (older) page; null on the last page. A search by `request_id` may give one with a page shorter than `limit`: the older deliveries are still to be searched.',
      }),
  })
  .meta({ id: 'DeliveryPage' });

export const DeliveryQueued = z.strictObject({ message: z.string(), delivery: Delivery }).meta({ id: 'DeliveryQueued' });

export const RecoverResult = z
  .strictObject({
    message: z.string(),
    requeued: z.int().min(0).meta({ description: 'Events given a new delivery (dead or never queued).' }),
    retried_now: z.int().min(0).meta({ description: 'Failed deliveries whose next attempt was moved to now.' }),
  })
  .meta({ id: 'RecoverResult' });

const count = () => z.int().min(0);

export const AttemptStats = z
  .strictObject({
    window: z.enum(STATS_WINDOW_NAMES).meta({ description: 'The window asked for.' }),
    bucket_seconds: z.literal(Object.values(STATS_WINDOWS).map((w) => w.bucketMs / 1000)).meta({ type: 'integer', description: 'The length of a bucket: a minute over the last hour, a quarter of an hour over the last day.' }),
    from: dateTime('The start of the first bucket (buckets are aligned on their length, UTC).'),
    until: dateTime('The end of the last bucket, which is the one under way (so `until` is after now).'),
    succeeded: count().meta({ description: 'Attempts in the window that delivered (a 2xx answer).' }),
    failed: count().meta({ description: 'Attempts in the window that did not: an error status, a redirect, a timeout, a connection, DNS or TLS failure, a refused address.' }),
    buckets: z
      .array(z.strictObject({ start: dateTime(), succeeded: count(), failed: count() }))
      .meta({ description: 'Every bucket of the window, oldest first, empty ones included (60 or 96).' }),
  })
  .meta({ id: 'AttemptStats' });

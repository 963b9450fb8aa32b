/**
 * What the admin API reads from a request: bodies, query and path parameters, as zod schemas.
 * The routes validate with them (request-validation.ts) and docs/openapi.json is generated from
 * them. The shape (types, required fields, enums, bounds, formats) is the schema's; the rules
 * the domain checks for the CLI as well keep their sentences there (`worded`), and the
 * semantic checks that need the store (the URL policy, the e-mail lookup) stay in services/.
 */
import { z } from 'zod';
import { RFC3339_EXPECTED, rfc3339Ms } from '../../domain/rfc3339.ts';
import { checkRateLimit } from '../../domain/rate-window.ts';
import { checkEmail, checkWebhookUrl, MAX_EMAIL_LENGTH, MAX_WEBHOOK_URL_LENGTH } from '../../domain/validation.ts';
import { checkWebhookHeaders, MAX_HEADER_NAME_LENGTH, MAX_HEADER_VALUE_LENGTH, MAX_WEBHOOK_HEADERS } from '../../domain/webhook-headers.ts';
import { MAX_CERTIFICATE_CHAIN_BYTES, MAX_PRIVATE_KEY_BYTES } from '../../domain/client-certificate.ts';
import { MAX_AUDIENCE_LENGTH, MAX_CLIENT_ID_LENGTH, MAX_CLIENT_SECRET_LENGTH, MAX_SCOPE_LENGTH } from '../../domain/oauth2-settings.ts';
import { reasons, worded } from '../request-validation.ts';
import { DeliveryStatusFilter, STATS_WINDOW_NAMES, TestKinds } from './deliveries.ts';

/** A required string: absent or null "is required", anything else but a string "must be a string". */
const requiredString = { error: (issue: { input?: unknown }) => (issue.input == null ? 'is required' : 'must be a string') };

/** `required` for a field the domain words: absent or null "is required", then the domain's check. */
function required(check: (value: unknown) => string | null) {
  return (value: unknown) => (value == null ? ['is required'] : reasons(check(value)));
}

const NOT_OCCURRED =
  'A date or time that does not exist (2026-02-30, 24:00, an offset beyond ±23:59) or without an offset is 422 `validation_failed` naming the parameter, never rolled over into another time.';

/**
 * An RFC 3339 date-time, read strictly (domain/rfc3339.ts) into epoch ms. Absent is "is
 * required" (when the field is), anything else that is not a date-time that exists says what
 * one looks like.
 */
function time(description: string) {
  const expected = `must be ${RFC3339_EXPECTED}`;
  return z
    .string({ error: (issue) => (issue.input === undefined ? 'is required' : expected) })
    .transform((value, ctx) => {
      const ms = rfc3339Ms(value);
      if (Number.isNaN(ms)) {
        ctx.issues.push({ code: 'custom', input: value, message: expected });
        return z.NEVER;
      }
      return ms;
    })
    .meta({ format: 'date-time', description });
}

/**
 * An integer parameter of the query or the path, written in decimal digits (at most `digits`,
 * when given): `message` for anything else, or out of [`min`, `max`].
 */
function integerText(min: number, max: number, message: string, digits?: number) {
  const decimal = digits === undefined ? /^\d+$/ : new RegExp(`^\\d{1,${digits}}$`);
  const error = { error: message };
  return z.preprocess((value) => (typeof value === 'string' && decimal.test(value) ? Number(value) : value), z.int(error).min(min, error).max(max, error));
}

// ---- bodies

export const UpdateRoleRequest = z
  .object({
    email: worded(z.string(requiredString).trim().max(MAX_EMAIL_LENGTH), required(checkEmail)).meta({
      description: "E-mail of an existing user of the caller's organization, compared case-insensitively and without surrounding spaces.",
      examples: ['bob@acme.example'],
    }),
    role_name: z.string(requiredString).meta({ description: 'One of the names `GET /users/get_roles` returns.', examples: ['saas_admin'] }),
  })
  .meta({ id: 'UpdateRoleRequest' });

/** An e-mail that names a user of the caller's organization (add_user, remove_user), read as update_role reads one. */
function userEmail(description: string) {
  return worded(z.string(requiredString).trim().max(MAX_EMAIL_LENGTH), required(checkEmail)).meta({ description, examples: ['bob@acme.example'] });
}

export const AddUserRequest = z
  .object({
    email: userEmail(
      "E-mail of the new user, unique in the caller's organization (compared case-insensitively, without surrounding spaces); kept as sent, trimmed. Tokens name the user by it (`sub`).",
    ),
    role_name: z.string(requiredString).meta({ description: 'One of the names `GET /users/get_roles` returns.', examples: ['saas_viewer'] }),
  })
  .meta({ id: 'AddUserRequest' });

export const RemoveUserRequest = z
  .object({
    email: userEmail("E-mail of an existing user of the caller's organization, compared case-insensitively and without surrounding spaces."),
  })
  .meta({ id: 'RemoveUserRequest' });

/** An HTTP token (RFC 9110 section 5.6.2) of 1-100 characters: a header name (domain/webhook-headers.ts). */
const HEADER_NAME = new RegExp(`^[!#$%&'*+.^_\`|~0-9A-Za-z-]{1,${MAX_HEADER_NAME_LENGTH}}$`);
/** Printable ASCII, no space at either end: a header value (domain/webhook-headers.ts). */
const HEADER_VALUE = /^[\x21-\x7e]([\x20-\x7e]*[\x21-\x7e])?$/;

export const RegisterWebhookRequest = z
  .object({
    webhook_url: worded(z.string(requiredString).min(1).max(MAX_WEBHOOK_URL_LENGTH), required(checkWebhookUrl)).meta({
      format: 'uri',
      description:
        'Absolute https URL of the receiver, at most 2048 characters, without user-info or fragment. Plain http only when the operator set `delivery.allowHttp` (development).',
      examples: ['https://hooks.acme.example/hookrelay'],
    }),
    active_hmac: z
      .boolean({ error: 'must be true or false' })
      .default(true)
      .meta({ description: 'Sign deliveries with the Standard Webhooks scheme (`webhook-signature`). Defaults to true.' }),
    headers: worded(
      z
        .record(z.string().regex(HEADER_NAME), z.string().min(1).max(MAX_HEADER_VALUE_LENGTH).regex(HEADER_VALUE))
        .nullable()
        .optional(),
      (value) => {
        const checked = checkWebhookHeaders(value);
        return checked.ok ? [] : checked.problems.map((p) => p.reason);
      },
    ).meta({
      maxProperties: MAX_WEBHOOK_HEADERS,
      description:
        "Headers sent on every delivery attempt, after hookrelay's own, as an object of names to values (as Svix and Hook0 take them), at most 20. Names are HTTP tokens of at most 100 characters, case-insensitive (the same name twice, in two spellings, is refused) and sent as spelt; values are 1-4096 printable ASCII characters, no control characters, no spaces at either end. Reserved, refused with 422 `validation_failed` naming the header: `webhook-*` (`webhook-id`, `webhook-timestamp`, `webhook-signature`), `content-*` (`content-type`, `content-length`...), `proxy-*`, `user-agent`, `host`, `transfer-encoding`, `connection`, `keep-alive`, `upgrade`, `te`, `trailer`, `expect`, `http2-settings`. A registration describes the whole webhook: absent, null or `{}` means no headers, and a registration without `headers` removes those the webhook had (the answer's `message` names them). Values that may be credentials are never shown again (see `Webhook.headers`): keep them on your side to register again. Added within v1.",
      examples: [{ 'X-Environment': 'production', Authorization: 'Bearer 0123456789abcdef' }],
    }),
    rate_limit: worded(z.int().min(1).max(10_000).nullable().optional(), (value) => (value === undefined ? [] : reasons(checkRateLimit(value)))).meta({
      description:
        'Deliveries per second at most, 1-10,000; null or left out: no limit (a registration sets every setting: left out, the limit is removed). Deliveries over the rate wait, unclaimed: no attempt, no failure. Added within v1.',
    }),
    client_certificate: z
      .object({
        certificate: z.string().max(MAX_CERTIFICATE_CHAIN_BYTES).meta({ description: "PEM: the client's certificate first, then its intermediates, if any (not the root). At most 32 KiB, 8 certificates." }),
        private_key: z.string().max(MAX_PRIVATE_KEY_BYTES).meta({ description: 'PEM private key of the first certificate, unencrypted (PKCS #8, or PKCS #1 / SEC 1): RSA of 2048 bits or more, EC P-256 or P-384, or Ed25519. At most 16 KiB.' }),
      })
      .nullable()
      .optional()
      .meta({
        description:
          "A client certificate every delivery presents to the receiver (mutual TLS), for a receiver behind a gateway that admits only callers with one. Checked: the key must be the certificate's, the certificate valid now (not expired, not before its start) and for TLS clients (extended key usage), the chain in order; each problem is 422 `validation_failed` naming `client_certificate.certificate` or `client_certificate.private_key`, and changes nothing. The key is sealed in the database (AES-256-GCM, under a key kept outside it) and never shown again: answers show the certificate's subject, issuer, SHA-256 fingerprint and validity. Left out, the webhook keeps the certificate it has (unlike the other settings: its key cannot be sent back); null removes it; a new one replaces it from the next attempt. Added within v1.",
      }),
    oauth2: z
      .object({
        token_url: z.string().max(MAX_WEBHOOK_URL_LENGTH).meta({ format: 'uri', description: 'The token endpoint (https; held to the same address rules as `webhook_url`, at registration and at every fetch).' }),
        client_id: z.string().min(1).max(MAX_CLIENT_ID_LENGTH),
        client_secret: z.string().min(1).max(MAX_CLIENT_SECRET_LENGTH).meta({ description: 'Sealed in the database, never shown again, never logged.' }),
        scope: z.string().max(MAX_SCOPE_LENGTH).nullable().optional().meta({ description: 'Scopes to ask for, space-separated.' }),
        audience: z.string().max(MAX_AUDIENCE_LENGTH).nullable().optional().meta({ description: 'Sent as `audience` in the token request (Auth0, Okta and others pick the token\'s audience by it).' }),
        client_auth: z
          .enum(['client_secret_basic', 'client_secret_post'])
          .optional()
          .meta({ description: '`client_secret_basic` (the default): the id and secret in an HTTP Basic header; `client_secret_post`: in the form body.' }),
      })
      .nullable()
      .optional()
      .meta({
        description:
          "OAuth2 client credentials (RFC 6749 section 4.4): hookrelay gets an access token from `token_url` and sends it as `Authorization: Bearer` on every delivery, cached until shortly before it expires; a receiver's 401 makes it fetch a new token once and send the attempt again once. An `Authorization` header in `headers` next to `oauth2` is refused (422 naming both). A token URL the address rules refuse is 422 `webhook_url_not_allowed` naming `oauth2.token_url`. Left out, the webhook keeps the credentials it has; null removes them; an object replaces them (give the secret again). Added within v1.",
      }),
  })
  .meta({ id: 'RegisterWebhookRequest' });

export const TestRequest = z
  .object({
    kind: TestKinds.default('webhook_test').meta({
      default: 'webhook_test',
      description:
        'What to send: `webhook_test` (the default), a `webhook.test` notification; or `sample_status_change`, a status change of an anticipation request in the real event\'s shape (`type` `anticipation_request.status_changed`, the same `data` members), with `"test": true` beside `type` and a made-up request id (`ar_test_...`), so that a receiver\'s real code path runs. Added within v1.',
    }),
  })
  .meta({ id: 'TestRequest' });

export const RecoverRequest = z
  .object({
    since: time(`Start of the window (RFC 3339, with seconds and an offset), inclusive; compared with the time each event was received. ${NOT_OCCURRED}`),
    until: time(`End of the window (RFC 3339, with seconds and an offset), exclusive; now when absent. ${NOT_OCCURRED}`).optional(),
  })
  .meta({ id: 'RecoverRequest' });

// ---- query and path parameters (the document lists each as a parameter, with its description)

/** An anticipation request id as the feed accepts one (domain/feed-event.ts): 1 to 200 characters, no control characters. */
const MAX_REQUEST_ID = 200;
const REQUEST_ID_REASON = `must be an anticipation request id: 1 to ${MAX_REQUEST_ID} characters, no control characters`;
const CONTROL_CHARACTER = /[\u0000-\u001f\u007f]/;

/** A list's `cursor`: the opaque `next_cursor` of the previous page (a base64url id), read as that id. Shared by every paged list. */
export const PageCursor = z
  .string()
  .transform((cursor, ctx) => {
    const decoded = Buffer.from(cursor, 'base64url').toString('utf8');
    if (/^\d{1,15}$/.test(decoded)) return Number(decoded);
    ctx.issues.push({ code: 'custom', input: cursor, message: 'must be a next_cursor value from a previous page' });
    return z.NEVER;
  })
  .optional()
  .meta({ description: 'The `next_cursor` of the previous page (opaque).' });

/** A page's cursor: the id of the last delivery of the previous page, base64url (`next_cursor`). */
export function encodeCursor(beforeId: number): string {
  return Buffer.from(String(beforeId)).toString('base64url');
}

export const MAX_PAGE = 200;
export const DEFAULT_PAGE = 50;

export const DeliveriesQuery = z.object({
  status: DeliveryStatusFilter.optional().meta({
    description:
      '`pending` (not attempted yet), `failed` (retrying: its last attempt failed, a retry is scheduled), `delivered`, or `dead` (failed for good: retries used up; replayable); or the same by their `state` names: `queued`, `retrying`, `failed_for_good` (`retrying` and `failed_for_good` added within v1).',
  }),
  since: time(`Only deliveries created at or after this time (RFC 3339, with seconds and an offset). ${NOT_OCCURRED}`)
    .optional()
    .meta({ examples: ['2026-11-22T00:00:00Z'] }),
  until: time(`Only deliveries created before this time (RFC 3339, with seconds and an offset). ${NOT_OCCURRED}`).optional(),
  request_id: z
    .string()
    // Characters as JSON Schema counts them (code points), not UTF-16 units as zod's max() does.
    .refine((value) => value !== '' && [...value].length <= MAX_REQUEST_ID && !CONTROL_CHARACTER.test(value), { error: REQUEST_ID_REASON })
    .optional()
    .meta({
      minLength: 1,
      maxLength: MAX_REQUEST_ID,
      description: 'Only the deliveries of this anticipation request (its `anticipation_request_id`, exactly): 1 to 200 characters, no control characters.',
      examples: ['ar_5e21d9'],
    }),
  limit: integerText(1, MAX_PAGE, `must be an integer from 1 to ${MAX_PAGE}`).default(DEFAULT_PAGE).meta({ default: DEFAULT_PAGE, description: 'Page size.' }),
  cursor: PageCursor,
});

export const StatsQuery = z.object({
  window: z.enum(STATS_WINDOW_NAMES).default('1h').meta({ description: '`1h` (the default) or `24h`.' }),
});

export const DeliveryIdParams = z.object({
  id: integerText(1, 999_999_999_999_999, 'must be a positive integer', 15).meta({ description: "A delivery's `id`, as listed by `GET /webhook/deliveries`.", examples: [42] }),
});

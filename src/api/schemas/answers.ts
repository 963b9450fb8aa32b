/**
 * The answers of the admin API, as zod schemas: what the routes send and what
 * docs/openapi.json says of it (generated from these, src/api/openapi/). A schema with an `id`
 * is a component (`#/components/schemas/<id>`); descriptions and examples are its metadata.
 */
import { z } from 'zod';
import { ALL_PERMISSIONS } from '../../domain/permissions.ts';
import { ROLE_NAME_PATTERN } from '../../domain/validation.ts';
import { DisabledReason } from '../../domain/webhook-health.ts';

/** A time as answers give it: UTC, ISO 8601 with milliseconds (`iso()`). */
export function dateTime(description?: string) {
  return z.string().meta({ format: 'date-time', ...(description === undefined ? {} : { description }) });
}

/** A time, or null. */
export function nullableDateTime(description?: string) {
  return z
    .string()
    .nullable()
    .meta({ format: 'date-time', ...(description === undefined ? {} : { description }) });
}

/** A Standard Webhooks secret: `whsec_` + base64 of 32 bytes. */
function secret(description: string) {
  return z
    .string()
    .regex(/^whsec_[A-Za-z0-9+/]{43}=$/)
    .meta({ description });
}

export const Role = z
  .strictObject({
    name: z.string().regex(ROLE_NAME_PATTERN).meta({ description: 'Identifier of the role, as used in `role_name`.', examples: ['saas_admin'] }),
    description: z.string().meta({ description: 'What the role may do.' }),
    permissions: z
      .array(z.enum(ALL_PERMISSIONS as [string, ...string[]]))
      .meta({
        description:
          'What the role permits: the permissions it grants, sorted (docs/api.md, "Permissions and roles"). A permission stored for the role that this version does not know grants nothing and is not listed. Added within v1.',
        examples: [['roles:read', 'webhook:read']],
      }),
  })
  .meta({ id: 'Role' });

/** A user of the organization as the team endpoints answer it. A function: each schema that holds these fields gets its own. */
function teamUserFields() {
  return {
    email: z.string().meta({ description: 'E-mail of the user, as it was added (tokens name the user by it, compared case-insensitively).', examples: ['bob@acme.example'] }),
    role_name: z.string().regex(ROLE_NAME_PATTERN).meta({ description: 'The role of the user (`GET /users/get_roles`).', examples: ['saas_viewer'] }),
    created_at: dateTime('When the user was added (UTC, ISO 8601 with milliseconds).'),
    updated_at: dateTime('The last change of the user: added, or their role changed (UTC).'),
  };
}

export const TeamUser = z.strictObject(teamUserFields()).meta({ id: 'TeamUser' });

/** POST /users/add_user: the user added, with a message. */
export const UserAdded = z
  .strictObject({ message: z.string().meta({ description: 'A confirmation in plain words.' }), ...teamUserFields() })
  .meta({ id: 'UserAdded' });

/** GET /users/me (inline in the document: no component of its own). */
export const Me = z.object({
  email: z.string(),
  organization_id: z.string(),
  role: z.string(),
  permissions: z.array(z.enum(ALL_PERMISSIONS as [string, ...string[]])),
});

export const Message = z
  .strictObject({
    message: z.string().meta({ description: 'A confirmation in plain words.' }),
  })
  .meta({ id: 'Message' });

export const WebhookStatus = z.enum(['active', 'failing', 'disabled']).meta({
  id: 'WebhookStatus',
  description:
    'Delivery health of the webhook. `active`; `failing` after `delivery.failingAfterFailures` consecutive failed attempts (3); `disabled` after a 410 Gone, after failing without a success for `delivery.disableAfter` (5 days), or by the operator (`hookrelay webhook disable`). Deliveries for a disabled webhook are held, not dropped; registering the webhook again, or `hookrelay webhook enable`, makes it `active`.',
});

export const WebhookHeaders = z.record(z.string(), z.string().nullable()).meta({
  id: 'WebhookHeaders',
  description:
    'The headers sent on every delivery (see `RegisterWebhookRequest.headers`), name to value, in their order, as spelt; `{}` when none. A value that may be a credential is null: set, never shown (to anyone, admins included). Credentials are the values of `authorization`, `proxy-authorization`, `cookie`, `set-cookie`, of any name containing `key`, `token`, `secret`, `password`, `passwd`, `auth`, `signature`, `credential`, `session`, `cookie`, `jwt` or `bearer`, and any value starting with an authorization scheme (`Bearer `, `Basic `, `Digest `, `Token `, `ApiKey `). Registering null as a value is refused: send the value itself. Added within v1.',
  examples: [{ 'X-Environment': 'production', Authorization: null }],
});

export const ClientCertificate = z
  .strictObject({
    subject: z.string().meta({ description: "The client certificate's subject, its attributes joined with \", \"." , examples: ['CN=hookrelay.acme.example, O=Acme'] }),
    issuer: z.string().meta({ description: 'Who issued it (its issuer\'s subject).' }),
    fingerprint_sha256: z
      .string()
      .regex(/^[0-9A-F]{2}(:[0-9A-F]{2}){31}$/)
      .meta({ description: 'SHA-256 of the certificate (DER), as `openssl x509 -noout -fingerprint -sha256` prints it: which certificate the receiver sees.' }),
    serial_number: z.string().meta({ description: 'Its serial number, hexadecimal.' }),
    not_before: dateTime('Valid from (UTC).'),
    not_after: dateTime('Valid until (UTC): register a new one before then. hookrelay warns `delivery.clientCertificateExpiryWarning` (14 days) ahead, in its log, `hookrelay status` and a metric.'),
    key_type: z.string().meta({ description: 'The key\'s type and size: `RSA 2048` (or more), `EC P-256`, `EC P-384`, `Ed25519`.' }),
  })
  .meta({
    description:
      'The client certificate every delivery presents to the receiver in its TLS handshake (mutual TLS), as `client_certificate` of `register_webhook` set it. Never its private key: it is sealed in the database, opened only to connect, and shown to no one. Added within v1.',
  });

export const OAuth2Client = z
  .strictObject({
    token_url: z.string().meta({ format: 'uri', description: 'The token endpoint hookrelay gets access tokens from (client credentials grant).' }),
    client_id: z.string(),
    scope: z.string().nullable().meta({ description: 'Scopes asked for, space-separated; null: none asked.' }),
    audience: z.string().nullable().meta({ description: 'Sent as `audience`; null: not sent.' }),
    client_auth: z.enum(['client_secret_basic', 'client_secret_post']).meta({ description: 'How the client authenticates to the token endpoint: HTTP Basic (the default) or in the form body.' }),
  })
  .meta({
    description:
      'The OAuth2 client credentials every delivery gets its `Authorization: Bearer` access token with, as `oauth2` of `register_webhook` set them. Never the client secret (sealed in the database, shown to no one) nor a token. Added within v1.',
  });

/** A webhook's configuration (services/views.ts webhookView): every answer that shows the webhook has these. */
const webhookFields = {
  webhook_url: z.string().meta({ format: 'uri', description: 'The URL that receives the notifications.' }),
  active_hmac: z.boolean().meta({ description: 'Whether deliveries are signed.' }),
  headers: WebhookHeaders,
  status: WebhookStatus,
  rate_limit: z
    .int()
    .min(1)
    .max(10_000)
    .nullable()
    .meta({ description: 'At most this many deliveries start in any one-second window (docs/delivery.md, "Rate limit"); null: no limit. Added within v1.' }),
  client_certificate: ClientCertificate.nullable().meta({ description: 'The client certificate deliveries present (mutual TLS); null: none of its own (the operator may have set one for the organization: docs/delivery.md, "Receiver authentication"). Added within v1.' }),
  oauth2: OAuth2Client.nullable().meta({ description: 'The OAuth2 client credentials deliveries get their access token with; null: none. Added within v1.' }),
  created_at: dateTime('First registration (UTC, ISO 8601 with milliseconds).'),
  updated_at: dateTime('Last registration or change (UTC).'),
};

/** Why the webhook has its status (webhookHealthView), and the rotation under way (secretRotationView). */
const webhookHealthFields = {
  status_detail: z.string().meta({
    description:
      'One sentence on why the webhook has its status: since when it is failing, how many attempts in a row failed, the latest error, when it will be disabled; or why it was disabled and how to enable it again.',
  }),
  consecutive_failures: z
    .int()
    .min(0)
    .meta({ description: 'Failed attempts in a row since the last success (a success, re-registering or enabling resets it). `status` becomes `failing` at `delivery.failingAfterFailures` (3).' }),
  failing_since: nullableDateTime(
    'When the current run of failed attempts began (UTC); null after a success. Failing without a success for `delivery.disableAfter` (5 days) from this time disables the webhook.',
  ),
  last_success_at: nullableDateTime('The last successful delivery (UTC), or null when none has succeeded yet.'),
  disabled_reason: z
    .enum(Object.values(DisabledReason))
    .nullable()
    .meta({
      description:
        'Why the webhook is (or was last) disabled: `gone` (the receiver answered 410 Gone), `failing_too_long` (no success for `delivery.disableAfter`), `operator` (`hookrelay webhook disable`); null when it never was, or after it was registered again or enabled.',
    }),
  last_error: z
    .strictObject({
      at: dateTime('When the attempt ended (UTC).'),
      status_code: z
        .int()
        .nullable()
        .meta({ description: 'The HTTP status the receiver answered, or null when no answer came (timeout, connection, DNS, TLS, refused address).' }),
      error: z.string().meta({ description: 'What went wrong, for example `HTTP 503`, `DNS lookup failed (ENOTFOUND)`, `no complete response within the attempt deadline`.' }),
    })
    .nullable()
    .meta({
      description:
        "The latest failed attempt among the webhook's recent deliveries (pending or dead), when the webhook is failing, disabled or its last attempts failed; null otherwise. The deliveries themselves: `GET /webhook/deliveries`.",
    }),
  previous_secret_expires_at: nullableDateTime(
    "While a secret rotation's grace period runs (`delivery.secretRotationGrace`, 24 h by default, after `POST /webhook/rotate_secret`): until when the previous secret keeps signing beside the new one (UTC). Null when no rotation is under way, or the webhook does not sign. Added within v1 (served to every version).",
  ),
};

export const Webhook = z.strictObject({ ...webhookFields, ...webhookHealthFields }).meta({ id: 'Webhook' });

export const WebhookRegistration = z
  .strictObject({
    message: z.string().meta({
      description:
        'What happened: registered or replaced (naming the old URL), whether HMAC signing is on, and which headers the webhook had that this registration did not set again (they are no longer sent).',
    }),
    ...webhookFields,
    secret: secret('The signing secret, only in the response that generated it. Store it now; later, only admins can read it (`GET /webhook/get_secret`).').optional(),
  })
  .meta({ id: 'WebhookRegistration' });

export const WebhookChange = z
  .strictObject({
    message: z.string().meta({ description: 'What changed: disabled (deliveries held) or enabled (held deliveries go out).' }),
    ...webhookFields,
    ...webhookHealthFields,
  })
  .meta({ id: 'WebhookChange' });

export const WebhookSecret = z
  .strictObject({
    secret: secret('Standard Webhooks secret: `whsec_` + base64 of 32 random bytes.'),
  })
  .meta({ id: 'WebhookSecret' });

export const SecretRotation = z
  .strictObject({
    message: z.string(),
    secret: secret('The new signing secret (an admin can read it again with `GET /webhook/get_secret`).'),
    previous_secret_expires_at: dateTime('Until then the previous secret signs too.'),
  })
  .meta({ id: 'SecretRotation' });

export const Health = z.strictObject({ status: z.literal('ok') }).meta({ id: 'Health' });

export const Readiness = z
  .strictObject({
    status: z.enum(['ready', 'not_ready']),
    reason: z
      .string()
      .meta({ description: 'Why not ready (only with `not_ready`, and not always): `disk_full`, `io_error`, `database_damaged`, `feed_not_a_file`, `feed_reader_failing`, `identity_provider_unreachable`, `stopping`.' })
      .optional(),
    detail: z.string().meta({ description: 'What is wrong and what to do, for an operator.' }).optional(),
    since: dateTime('When the storage fault was first seen.').optional(),
    degraded: z
      .array(
        z.strictObject({
          reason: z.string().meta({ description: '`identity_provider_unreachable`: the last fetch of the identity provider\'s keys failed; the keys fetched before still verify its tokens (until `auth.provider.maxStale`).' }),
          detail: z.string(),
          since: dateTime('When the fault was first seen.').optional(),
        }),
      )
      .meta({ description: 'Ready, but something works on borrowed time (only with `ready`).' })
      .optional(),
  })
  .meta({ id: 'Readiness' });

/** GET /openapi.json (inline: the document describes itself only this far). */
export const OpenApiDocument = z.looseObject({ openapi: z.literal('3.1.0'), info: z.looseObject({}), paths: z.looseObject({}) });

/** What a route may set as the body of an answer of `schema`: its handlers say `satisfies Answer<typeof X>`, so the compiler holds them to the schema the document shows. */
export type Answer<S extends z.ZodType> = z.input<S>;

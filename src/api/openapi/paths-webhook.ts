/** The document's operations on users and roles, and on the organization's webhook. */
import { z } from 'zod';
import { ErrorCode } from '../../domain/errors.ts';
import { Permission } from '../../domain/permissions.ts';
import { Me, Message, Role, SecretRotation, Webhook, WebhookChange, WebhookRegistration, WebhookSecret } from '../schemas/answers.ts';
import { RegisterWebhookRequest, UpdateRoleRequest } from '../schemas/requests.ts';
import { alias, operation } from './operation.ts';
import { teamPaths } from './paths-team.ts';
import { answer, problemAnswer, problemExample, requestBody, securedErrors, shared } from './responses.ts';

type Json = Record<string, unknown>;

const READ = securedErrors({ body: false });
const WRITE = securedErrors({ body: true });

const webhookNotConfigured = (instance: string) =>
  problemAnswer('The organization has registered no webhook (`webhook_not_configured`).', [ErrorCode.webhookNotConfigured], [
    problemExample(ErrorCode.webhookNotConfigured, instance, 'organization "acme" has no webhook; register one first'),
  ]);

const updateRole = operation({
  tag: 'users',
  operationId: 'updateRole',
  summary: "Change a user's role",
  description:
    "Sets the role of an existing user of the caller's organization, identified by e-mail (compared case-insensitively). Idempotent: giving a user the role they already have succeeds and changes nothing. PUT is the documented method; POST and PATCH are accepted with identical behaviour for clients written against the seed interface, which names no method. Permission: `users:manage` (saas_admin).",
  permission: Permission.usersManage,
  requestBody: { $ref: '#/components/requestBodies/UpdateRole' },
  responses: {
    200: answer('The role was changed, or the user already had it (the message says which).', Message, {
      examples: {
        changed: { message: 'Role of bob@acme.example updated from saas_viewer to saas_admin' },
        unchanged: { message: 'bob@acme.example already has the role saas_admin; nothing changed' },
      },
    }),
    ...WRITE,
    404: problemAnswer(
      "No user with this e-mail in the caller's organization (`user_not_found`). A user of another organization gets exactly the same answer as an unknown e-mail.",
      [ErrorCode.userNotFound],
      [
        problemExample(ErrorCode.userNotFound, '/users/update_role', 'no user with e-mail "nobody@acme.example" in organization "acme"', {
          invalid_params: [{ name: 'email', reason: 'is not the e-mail of a user of this organization' }],
        }),
      ],
    ),
    409: problemAnswer(
      'The change would leave the organization with no user whose role grants `users:manage` (`last_user_manager`). Give another user such a role first.',
      [ErrorCode.lastUserManager],
    ),
    422: problemAnswer(
      'A field is missing or has the wrong type or form (`validation_failed`, each field in `invalid_params`), or `role_name` is not a role (`role_not_found`, with the valid names in `valid_role_names`).',
      [ErrorCode.validation, ErrorCode.roleNotFound],
      [
        problemExample(ErrorCode.validation, '/users/update_role', 'the request body is invalid', {
          invalid_params: [
            { name: 'email', reason: 'is required' },
            { name: 'role_name', reason: 'is required' },
          ],
        }),
        problemExample(ErrorCode.roleNotFound, '/users/update_role', 'role "root" does not exist; valid roles: saas_admin, saas_viewer', {
          invalid_params: [{ name: 'role_name', reason: 'must be one of: saas_admin, saas_viewer' }],
          valid_role_names: ['saas_admin', 'saas_viewer'],
        }),
      ],
    ),
    503: shared('DatabaseBusy'),
  },
});

/** An example webhook's configuration, as every answer that shows the webhook starts. */
const exampleWebhook = {
  webhook_url: 'https://hooks.acme.example/hookrelay',
  active_hmac: true,
  headers: { 'X-Environment': 'production', Authorization: null },
  status: 'active',
  rate_limit: null,
  client_certificate: {
    subject: 'CN=hookrelay.acme.example, O=Acme',
    issuer: 'CN=Acme Partner CA',
    fingerprint_sha256: '5B:0E:71:8A:2C:94:3F:D6:11:7A:C0:9E:4B:28:E3:56:9D:0F:A1:62:7C:B8:45:13:E9:2A:D7:60:3B:F4:88:1C',
    serial_number: '4F2A9C11D3E0B876',
    not_before: '2026-09-01T00:00:00.000Z',
    not_after: '2027-09-01T00:00:00.000Z',
    key_type: 'EC P-256',
  },
  oauth2: null,
  created_at: '2026-11-22T05:07:00.570Z',
  updated_at: '2026-11-22T05:07:00.570Z',
};

const healthy = {
  status_detail: 'active; last success at 2026-11-22T06:12:40.102Z',
  consecutive_failures: 0,
  failing_since: null,
  last_success_at: '2026-11-22T06:12:40.102Z',
  disabled_reason: null,
  last_error: null,
  previous_secret_expires_at: null,
};

const registerWebhook = operation({
  tag: 'webhook',
  operationId: 'registerWebhook',
  summary: "Register or replace the organization's webhook",
  description:
    "Sets the one webhook of the caller's organization. Registering again replaces the URL (and `active_hmac`) and says so in the message; it also makes a `failing` or `disabled` webhook `active` again. The signing secret is kept, and so are the client certificate and the OAuth2 client credentials when the registration leaves them out (null removes them). When HMAC is active and the organization has no signing secret yet, a Standard Webhooks secret (`whsec_` + base64 of 32 random bytes) is generated and returned once, as `secret`, in this response; admins can read it again with `GET /webhook/get_secret`. POST is the documented method; PUT is accepted with identical behaviour. Permission: `webhook:manage` (saas_admin).",
  permission: Permission.webhookManage,
  requestBody: { $ref: '#/components/requestBodies/RegisterWebhook' },
  responses: {
    200: answer(
      'An existing webhook was replaced. `secret` is present only if this call generated the secret (HMAC turned on for the first time).',
      WebhookRegistration,
      {
        example: {
          message:
            'Webhook replaced: https://hooks.acme.example/hookrelay was replaced by https://hooks2.acme.example/in (one webhook per organization). HMAC signing is on with the existing secret',
          ...exampleWebhook,
          webhook_url: 'https://hooks2.acme.example/in',
          updated_at: '2026-11-22T05:07:00.598Z',
        },
      },
    ),
    201: answer(
      'The organization had no webhook; it is registered. With `active_hmac` true (the default) the response carries the new signing secret (an admin can read it again with `GET /webhook/get_secret`).',
      WebhookRegistration,
      {
        example: {
          message:
            'Webhook registered: status changes of anticipation requests will be sent to https://hooks.acme.example/hookrelay. HMAC signing is on: give the secret below to your receiver, which verifies signatures with it (an admin can read it again with GET /webhook/get_secret)',
          ...exampleWebhook,
          headers: {},
          secret: 'whsec_/mS9sRbxK07UafQv+3FLjM724Ww0TQGNgD2/DJ7Rwho=',
        },
      },
    ),
    ...WRITE,
    422: problemAnswer(
      '`webhook_url` is missing, not a string, longer than 2048 characters, not an absolute URL, or has a fragment; or `active_hmac` is not a boolean; or `client_certificate` is refused (`client_certificate.private_key` does not match the certificate, is weak or encrypted; `client_certificate.certificate` expired, not valid yet, not for TLS clients, too large); or `oauth2` is incomplete, or comes with an `Authorization` header in `headers` (both named) (`validation_failed`, each field in `invalid_params`). Or `oauth2.token_url` is refused by the same rules as `webhook_url` (`webhook_url_not_allowed`, `invalid_params` naming `oauth2.token_url`). Or the URL points where webhooks may not go (`webhook_url_not_allowed`, with its `reason`): not https (http only when `delivery.allowHttp` is set), user-info in the URL, or a host that is, or resolves to, a loopback, private, link-local or reserved address in any notation (unless the operator allows that network with `delivery.allowNetworks`). Nothing is changed.',
      [ErrorCode.validation, ErrorCode.webhookUrlNotAllowed],
      [
        problemExample(ErrorCode.validation, '/webhook/register_webhook', 'the request body is invalid', {
          invalid_params: [
            { name: 'webhook_url', reason: 'must not contain a fragment (#...)' },
            { name: 'active_hmac', reason: 'must be true or false' },
          ],
        }),
        problemExample(ErrorCode.webhookUrlNotAllowed, '/webhook/register_webhook', 'webhook_url must not point at a private address: hooks.internal.example resolves to one', {
          invalid_params: [{ name: 'webhook_url', reason: 'must not point at a private address: hooks.internal.example resolves to one' }],
          reason: 'private_address',
        }),
      ],
    ),
    503: shared('DatabaseBusy'),
  },
});

/** A change of the webhook's status (disable, enable). */
function statusChange(action: 'disable' | 'enable', spec: { operationId: string; summary: string; description: string; example: Json }): Json {
  return operation({
    tag: 'webhook',
    ...spec,
    permission: Permission.webhookManage,
    responses: {
      200: answer('The webhook after the change, with a message.', WebhookChange, { example: spec.example }),
      ...READ,
      404: webhookNotConfigured(`/webhook/${action}`),
    },
  });
}

/** The paths of users and roles, and of the webhook (without its deliveries). */
export function userAndWebhookPaths(): Record<string, Json> {
  return {
    '/users/me': {
      get: operation({
        tag: 'users',
        operationId: 'getMe',
        summary: 'Who the token is',
        description:
          "The caller's e-mail, organization, role and the permissions that role grants, so that a client (the console) can show who is signed in and enable only the actions it may take; the API checks every call anyway. Permission: `webhook:read` (saas_admin, saas_viewer).",
        permission: Permission.webhookRead,
        responses: {
          200: answer('The caller.', Me, {
            example: { email: 'ada@acme.example', organization_id: 'acme', role: 'saas_admin', permissions: ['roles:read', 'users:manage', 'webhook:read', 'webhook:manage'] },
          }),
          ...READ,
        },
      }),
    },
    '/users/get_roles': {
      get: operation({
        tag: 'users',
        operationId: 'getRoles',
        summary: 'List the roles that can be assigned to users',
        description:
          'The complete current set of roles, sorted by name, each with what it permits (`permissions`, added within v1). The set is open-ended: operators add roles with `hookrelay roles add`, and they appear here at once. Permission: `roles:read` (saas_admin, saas_viewer).',
        permission: Permission.rolesRead,
        responses: {
          200: answer('Every role, as `{ name, description, permissions }`.', z.array(Role), {
            example: [
              { name: 'saas_admin', description: 'read plus specific modifications for the associated SaaS', permissions: ['audit:read', 'roles:read', 'users:manage', 'webhook:manage', 'webhook:read'] },
              { name: 'saas_viewer', description: 'view-only access to the SaaS resources', permissions: ['roles:read', 'webhook:read'] },
            ],
          }),
          ...READ,
        },
      }),
    },
    '/users/update_role': {
      put: updateRole,
      post: alias(updateRole, {
        operationId: 'updateRolePost',
        summary: "Change a user's role (POST, same as PUT)",
        description: 'Identical to `PUT /users/update_role`; accepted because the seed interface names no method. Prefer PUT. Permission: `users:manage` (saas_admin).',
      }),
      patch: alias(updateRole, {
        operationId: 'updateRolePatch',
        summary: "Change a user's role (PATCH, same as PUT)",
        description: 'Identical to `PUT /users/update_role`; accepted because the seed interface names no method. Prefer PUT. Permission: `users:manage` (saas_admin).',
      }),
    },
    ...teamPaths(),
    '/webhook/register_webhook': {
      post: registerWebhook,
      put: alias(registerWebhook, {
        operationId: 'registerWebhookPut',
        summary: "Register or replace the organization's webhook (PUT, same as POST)",
        description: 'Identical to `POST /webhook/register_webhook`; accepted because the seed interface names no method. Prefer POST. Permission: `webhook:manage` (saas_admin).',
      }),
    },
    '/webhook/get_webhook': {
      get: operation({
        tag: 'webhook',
        operationId: 'getWebhook',
        summary: "Read the organization's webhook",
        description:
          "The caller's organization's webhook configuration and its metadata. Never includes the signing secret. Also says why the webhook has its status: `status_detail` (one sentence), the run of failed attempts (`consecutive_failures`, `failing_since`), the latest error, the last success and why it was disabled. Permission: `webhook:read` (saas_admin, saas_viewer). And whether a secret rotation is under way: `previous_secret_expires_at`.",
        permission: Permission.webhookRead,
        responses: {
          200: answer('The webhook configuration.', Webhook, { example: { ...exampleWebhook, ...healthy } }),
          ...READ,
          404: webhookNotConfigured('/webhook/get_webhook'),
        },
      }),
    },
    '/webhook/get_secret': {
      get: operation({
        tag: 'webhook',
        operationId: 'getSecret',
        summary: "Read the webhook's signing secret",
        description:
          "The Standard Webhooks signing secret of the organization's webhook, for admins who lost the copy shown at registration. Permission: `webhook:manage` (saas_admin only: viewers cannot read it). The operator can also print it with `hookrelay webhook secret --org ORG`.",
        permission: Permission.webhookManage,
        responses: {
          200: answer('The signing secret.', WebhookSecret, { example: { secret: 'whsec_/mS9sRbxK07UafQv+3FLjM724Ww0TQGNgD2/DJ7Rwho=' } }),
          ...READ,
          404: problemAnswer(
            'No webhook is registered (`webhook_not_configured`), or it was registered with `active_hmac` false and never had a secret (`secret_not_configured`).',
            [ErrorCode.webhookNotConfigured, ErrorCode.secretNotConfigured],
          ),
        },
      }),
    },
    '/webhook/disable': {
      post: statusChange('disable', {
        operationId: 'disableWebhook',
        summary: 'Disable the webhook',
        description:
          "Disables the organization's webhook: its deliveries are held (kept, pending), not dropped, until it is enabled; `hookrelay webhook disable` does the same. Permission: `webhook:manage` (saas_admin).",
        example: {
          message: 'Webhook disabled: its deliveries are held, not dropped, until it is enabled',
          ...exampleWebhook,
          status: 'disabled',
          ...healthy,
          status_detail: 'disabled by an operator; deliveries are held until it is enabled',
          disabled_reason: 'operator',
        },
      }),
    },
    '/webhook/enable': {
      post: statusChange('enable', {
        operationId: 'enableWebhook',
        summary: 'Enable the webhook',
        description:
          "Enables the organization's webhook (after it was disabled by an operator, or automatically after failing for too long): held deliveries go out, and the count of failures starts over; `hookrelay webhook enable` does the same. Permission: `webhook:manage` (saas_admin).",
        example: { message: 'Webhook enabled: held deliveries go out', ...exampleWebhook, ...healthy },
      }),
    },
    '/webhook/rotate_secret': {
      post: operation({
        tag: 'webhook',
        operationId: 'rotateSecret',
        summary: 'Rotate the signing secret',
        description:
          'Generates a new Standard Webhooks secret and returns it, once. Until `previous_secret_expires_at` (`delivery.secretRotationGrace`, 24 h by default) deliveries carry two signatures, with the new and the previous secret, so receivers can switch without losing messages. No request body. Permission: `webhook:manage` (saas_admin).',
        permission: Permission.webhookManage,
        responses: {
          200: answer('The new secret.', SecretRotation, {
            example: {
              message:
                'Signing secret rotated: give the new secret to your receiver (an admin can read it again with GET /webhook/get_secret); the previous one keeps signing until previous_secret_expires_at',
              secret: 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw79IheAqvQqg=',
              previous_secret_expires_at: '2026-11-23T05:07:00.570Z',
            },
          }),
          ...READ,
          404: problemAnswer('The organization has no webhook (`webhook_not_configured`), or HMAC signing is off for it (`secret_not_configured`).', [
            ErrorCode.webhookNotConfigured,
            ErrorCode.secretNotConfigured,
          ]),
          503: shared('DatabaseBusy'),
        },
      }),
    },
  };
}

/** `components.requestBodies`: the bodies two methods of an operation share. */
export function sharedRequestBodies(): Json {
  return {
    UpdateRole: requestBody(UpdateRoleRequest, { email: 'bob@acme.example', role_name: 'saas_admin' }),
    RegisterWebhook: requestBody(RegisterWebhookRequest, { webhook_url: 'https://hooks.acme.example/hookrelay' }),
  };
}

/** The document's operations on the organization's API keys (api_keys/*). */
import { z } from 'zod';
import { ErrorCode } from '../../domain/errors.ts';
import { Permission } from '../../domain/permissions.ts';
import { Message } from '../schemas/answers.ts';
import { ApiKeyCreated, ApiKeyInfo, CreateApiKeyRequest, RevokeApiKeyRequest } from '../schemas/api-keys.ts';
import { operation } from './operation.ts';
import { answer, BODY_LIMIT, problemAnswer, requestBody, securedErrors, shared } from './responses.ts';

type Json = Record<string, unknown>;

const BODY = `${BODY_LIMIT} Unknown members are ignored. An empty body counts as \`{}\`.`;
const KEY_EXAMPLE = {
  name: 'ci-deploy',
  role_name: 'saas_viewer',
  prefix: 'hkr_1f3a9c07',
  created_at: '2026-11-22T05:07:00.570Z',
  created_by: 'ada@acme.example',
  expires_at: '2027-02-20T05:07:00.570Z',
  last_used_at: null,
};

const listApiKeys = operation({
  tag: 'users',
  operationId: 'listApiKeys',
  summary: "List the organization's API keys",
  description:
    "The caller's organization's keys that are not revoked, expired ones included, by name: each one's name, role, public prefix, creator, expiry and last use (written at most once a minute). Never a key itself. Permission: `api_keys:manage` (saas_admin). `hookrelay api-key list --org ORG` prints the same. Added within v1.",
  permission: Permission.apiKeysManage,
  responses: {
    200: answer('The keys.', z.array(ApiKeyInfo), { example: [KEY_EXAMPLE] }),
    ...securedErrors({ body: false }),
  },
});

const createApiKey = operation({
  tag: 'users',
  operationId: 'createApiKey',
  summary: 'Create an API key for a machine',
  description:
    "Creates a key of the caller's organization with a role and an optional expiry (at most 365 days; none: until revoked). The answer holds the key, once: the server keeps only its SHA-256. Send it as `Authorization: Bearer <key>`; it acts as its role in the organization, as `api-key:<name>` in the audit trail. The role's permissions must all be the caller's own (403 `api_key_role_too_high`). At most 50 keys neither revoked nor expired per organization (409 `api_key_limit_reached`). Permission: `api_keys:manage` (saas_admin). `hookrelay api-key create` does the same. Added within v1.",
  permission: Permission.apiKeysManage,
  requestBody: requestBody(CreateApiKeyRequest, { name: 'ci-deploy', role_name: 'saas_viewer', expires_in: '90d' }, BODY),
  responses: {
    201: answer('The key was created; `key` is shown this once.', ApiKeyCreated, {
      example: { message: 'API key ci-deploy created; store the key now, it is not shown again', key: 'hkr_1f3a9c07_Qm9ndXMga2V5IGZvciBkb2N1bWVudGF0aW9uIG9ubHkuAA', ...KEY_EXAMPLE },
    }),
    ...securedErrors({ body: true }),
    403: problemAnswer(
      "The caller's role lacks `api_keys:manage` (`forbidden`), or the key's role grants a permission the caller's does not (`api_key_role_too_high`). Nothing is changed.",
      [ErrorCode.forbidden, ErrorCode.apiKeyRoleTooHigh],
    ),
    409: problemAnswer(
      'A key of this name that is not revoked exists (`api_key_already_exists`), or the organization holds 50 keys neither revoked nor expired (`api_key_limit_reached`). Nothing is changed.',
      [ErrorCode.apiKeyExists, ErrorCode.apiKeyLimit],
    ),
    422: problemAnswer(
      'A field is missing or has the wrong type or form, or the expiry is out of bounds (`validation_failed`, each field in `invalid_params`), or `role_name` is not a role (`role_not_found`). Nothing is changed.',
      [ErrorCode.validation, ErrorCode.roleNotFound],
    ),
    503: shared('DatabaseBusy'),
  },
});

const revokeApiKey = operation({
  tag: 'users',
  operationId: 'revokeApiKey',
  summary: 'Revoke an API key',
  description:
    "Revokes the caller's organization's key of this name: the next request with it is refused (401 `invalid_token`). Its name may be given to a new key. Permission: `api_keys:manage` (saas_admin). `hookrelay api-key revoke` does the same. Added within v1.",
  permission: Permission.apiKeysManage,
  requestBody: requestBody(RevokeApiKeyRequest, { name: 'ci-deploy' }, BODY),
  responses: {
    200: answer('The key was revoked.', Message, { example: { message: 'API key ci-deploy (hkr_1f3a9c07) revoked; it is refused from now on' } }),
    ...securedErrors({ body: true }),
    404: problemAnswer("The organization has no key of this name that is not revoked (`api_key_not_found`); another organization's key gets the same answer.", [ErrorCode.apiKeyNotFound]),
    422: problemAnswer('`name` is missing or not a key name (`validation_failed`, in `invalid_params`).', [ErrorCode.validation]),
    503: shared('DatabaseBusy'),
  },
});

/** The paths of the API keys. */
export function apiKeyPaths(): Record<string, Json> {
  return {
    '/api_keys/list_api_keys': { get: listApiKeys },
    '/api_keys/create_api_key': { post: createApiKey },
    '/api_keys/revoke_api_key': { post: revokeApiKey },
  };
}

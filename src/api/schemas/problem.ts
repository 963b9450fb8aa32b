/**
 * The error answers' shapes (RFC 9457 problem+json, written by problem.ts) and the API version,
 * as zod schemas: the codes and their statuses come from domain/errors.ts and problem.ts, the
 * versions from version.ts, so the document cannot list others.
 */
import { z } from 'zod';
import { ErrorCode as Codes } from '../../domain/errors.ts';
import { statusOf } from '../problem.ts';
import { SUPPORTED_VERSIONS } from '../version.ts';

export const ApiVersion = z.enum(SUPPORTED_VERSIONS).meta({ id: 'ApiVersion', description: 'A supported API version, canonical form.' });

const CODES = Object.values(Codes) as [Codes, ...Codes[]];

export const ErrorCode = z.enum(CODES).meta({
  id: 'ErrorCode',
  description:
    'Stable machine code of an error. HTTP status of each: `validation_failed` 422, `user_not_found` 404, `user_already_exists` 409, `organization_not_found` 404, `organization_already_exists` 409, `role_not_found` 422, `role_already_exists` 409, `last_user_manager` 409, `webhook_not_configured` 404, `webhook_url_not_allowed` 422, `secret_not_configured` 404, `delivery_not_found` 404, `delivery_not_waiting` 409, `invalid_config` 500, `database_too_new` 500, `database_busy` 503, `database_damaged` 500, `signing_key_unavailable` 500, `credential_key_unavailable` 500, `malformed_json` 400, `payload_too_large` 413, `unsupported_media_type` 415, `unsupported_version` 400, `not_found` 404, `method_not_allowed` 405, `missing_token` 401, `invalid_token` 401, `forbidden` 403, `rate_limited` 429, `internal_error` 500. The 500 codes `invalid_config`, `database_too_new`, `database_damaged`, `signing_key_unavailable` and `credential_key_unavailable` are operator-side failures: a client sees them only as `internal_error`. `database_busy` (503, with `Retry-After`) is a write that waited `database.busyTimeout` for the database lock another process held. `organization_not_found`, `organization_already_exists`, `user_already_exists` and `role_already_exists` are answered by the operator CLI; no operation of this API returns them.',
  'x-status-by-code': Object.fromEntries(CODES.map((code) => [code, statusOf(code)])),
});

export const InvalidParam = z
  .strictObject({
    name: z.string().meta({ description: 'JSON name of the offending request field.' }),
    reason: z.string().meta({ description: 'What is expected of it.' }),
  })
  .meta({ id: 'InvalidParam' });

export const Problem = z
  .strictObject({
    type: z
      .string()
      .regex(/^urn:hookrelay:problem:[a-z_]+$/)
      .meta({ format: 'uri', description: '`urn:hookrelay:problem:` followed by `code`.' }),
    title: z.string().meta({ description: 'Short summary of the kind of problem; the same for every occurrence of a code.' }),
    status: z.int().min(400).max(599).meta({ description: 'The HTTP status code.' }),
    detail: z.string().meta({ description: 'Explanation of this occurrence, for people. Never a stack trace or an internal message.' }),
    code: ErrorCode,
    instance: z.string().meta({ format: 'uri-reference', description: 'The request path.' }),
    invalid_params: z.array(InvalidParam).meta({ description: 'Each request field that failed validation.' }).optional(),
    valid_role_names: z.array(z.string()).meta({ description: 'With `role_not_found`: the role names that exist.' }).optional(),
    supported_versions: z.array(ApiVersion).meta({ description: 'With `unsupported_version`: the versions served.' }).optional(),
    limit_bytes: z.int().meta({ description: 'With `payload_too_large`: the largest accepted body.' }).optional(),
    retry_after_seconds: z.int().min(1).meta({ description: 'With `rate_limited`: the same value as `Retry-After`.' }).optional(),
    reason: z
      .enum(['scheme_not_allowed', 'credentials_not_allowed', 'loopback_address', 'private_address', 'link_local_address', 'reserved_address'])
      .meta({ description: '`webhook_url_not_allowed`: why the URL was refused (docs/api.md, "Webhook registration").' })
      .optional(),
  })
  .meta({ id: 'Problem', description: 'RFC 9457 problem details, with the stable `code` and a few documented extension members.' });

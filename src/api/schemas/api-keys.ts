/**
 * API keys (api_keys/*): requests and answers, as zod schemas (see requests.ts and answers.ts
 * for the conventions). No answer but the creation's carries the key, and that one only once.
 */
import { z } from 'zod';
import { API_KEY_NAME } from '../../domain/api-keys.ts';
import { dateTime, nullableDateTime } from './answers.ts';

const requiredString = { error: (issue: { input?: unknown }) => (issue.input == null ? 'is required' : 'must be a string') };
const NAME_REASON = 'must be 1-64 of A-Z a-z 0-9 . _ -, starting with a letter or digit';
const keyName = (description: string) =>
  z.string(requiredString).regex(API_KEY_NAME, NAME_REASON).meta({ description, examples: ['ci-deploy'] });

export const CreateApiKeyRequest = z
  .object({
    name: keyName("The key's name, unique among the organization's keys that are not revoked; what `revoke_api_key` and the audit trail call it."),
    role_name: z.string(requiredString).meta({
      description: "One of the names `GET /users/get_roles` returns; its permissions must all be the caller's own (403 `api_key_role_too_high` otherwise).",
      examples: ['saas_viewer'],
    }),
    expires_in: z
      .string({ error: 'must be a duration such as 90d, 12h or 30m' })
      .regex(/^[0-9]{1,6}(s|m|h|d)$/, 'must be a duration such as 90d, 12h or 30m')
      .nullable()
      .optional()
      .meta({ description: 'How long the key lives, from 1m to 365d (`90d`, `12h`, `30m`); absent or null: until revoked.', examples: ['90d'] }),
  })
  .meta({ id: 'CreateApiKeyRequest' });

export const RevokeApiKeyRequest = z.object({ name: keyName('The name of a key of the organization that is not revoked.') }).meta({ id: 'RevokeApiKeyRequest' });

function apiKeyFields() {
  return {
    name: z.string(),
    role_name: z.string(),
    prefix: z.string().meta({ description: 'The public start of the key (`hkr_` and 8 hex digits), to recognize it; the rest is never shown again.', examples: ['hkr_1f3a9c07'] }),
    created_at: dateTime(),
    created_by: z.string().nullable().meta({ description: 'Who created it: an e-mail, a Unix user (CLI), or `api-key:<name>`.' }),
    expires_at: nullableDateTime('When it stops working; null: until revoked.'),
    last_used_at: nullableDateTime('Its last accepted use, written at most once a minute; null: never used.'),
  };
}

/** A key as listed: never the key itself. */
export const ApiKeyInfo = z.strictObject(apiKeyFields()).meta({ id: 'ApiKeyInfo' });

/** POST /api_keys/create_api_key: the key, once. */
export const ApiKeyCreated = z
  .strictObject({
    message: z.string().meta({ description: 'A confirmation in plain words.' }),
    key: z.string().meta({
      description: 'The key: send it as `Authorization: Bearer <key>`. Shown in this answer only; the server keeps only its hash. Store it now.',
      examples: ['hkr_1f3a9c07_Qm9ndXMga2V5IGZvciBkb2N1bWVudGF0aW9uIG9ubHkuAA'],
    }),
    ...apiKeyFields(),
  })
  .meta({ id: 'ApiKeyCreated' });

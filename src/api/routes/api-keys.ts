import type { ApiKey } from '../../domain/api-keys.ts';
import { parseDuration } from '../../domain/duration.ts';
import { Permission } from '../../domain/permissions.ts';
import type { ApiKeyService } from '../../services/api-keys.ts';
import { apiKeyView } from '../../services/views.ts';
import { parseRequest } from '../request-validation.ts';
import type { Answer, Message } from '../schemas/answers.ts';
import { CreateApiKeyRequest, RevokeApiKeyRequest, type ApiKeyCreated, type ApiKeyInfo } from '../schemas/api-keys.ts';
import type { SecuredRouter } from '../secured-router.ts';

/** A key as the API lists it: the shared view, checked against the answer's schema. */
export function apiKeyAnswer(key: ApiKey): Answer<typeof ApiKeyInfo> {
  return apiKeyView(key);
}

const body = (ctx: { state: { body?: unknown } }) => ctx.state.body as Record<string, unknown>;

/**
 * The organization's API keys (`hookrelay api-key` does the same through the same service).
 * Permission `api_keys:manage` (saas_admin): a key's role is never above its creator's.
 */
export function registerApiKeyRoutes(router: SecuredRouter, services: { apiKeys: ApiKeyService }): void {
  router.route(['GET'], '/api_keys/list_api_keys', Permission.apiKeysManage, async (ctx, principal) => {
    ctx.body = (await services.apiKeys.list(principal.orgId)).map(apiKeyAnswer);
  });

  router.route(
    ['POST'],
    '/api_keys/create_api_key',
    Permission.apiKeysManage,
    async (ctx, principal, by) => {
      const request = parseRequest(CreateApiKeyRequest, body(ctx), 'the request body is invalid');
      const expiresInMs = request.expires_in == null ? null : parseDuration(request.expires_in);
      const input = { orgId: principal.orgId, name: request.name, roleName: request.role_name, expiresInMs, creatorPermissions: principal.permissions };
      const created = await services.apiKeys.create(by, input);
      ctx.status = 201;
      // The key is in this answer and nowhere else, ever: no caching (the API's answers are never cached anyway).
      ctx.body = { message: `API key ${created.apiKey.name} created; store the key now, it is not shown again`, key: created.key, ...apiKeyAnswer(created.apiKey) } satisfies Answer<typeof ApiKeyCreated>;
    },
    { body: true },
  );

  router.route(
    ['POST'],
    '/api_keys/revoke_api_key',
    Permission.apiKeysManage,
    async (ctx, principal, by) => {
      const request = parseRequest(RevokeApiKeyRequest, body(ctx), 'the request body is invalid');
      const key = await services.apiKeys.revoke(by, principal.orgId, request.name);
      ctx.body = { message: `API key ${key.name} (${key.prefix}) revoked; it is refused from now on` } satisfies Answer<typeof Message>;
    },
    { body: true },
  );
}

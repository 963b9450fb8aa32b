/**
 * docs/openapi.json, generated: the shapes from the zod schemas the routes validate with
 * (src/api/schemas/), the rest (descriptions, examples, the problem documents, security schemes,
 * the version header) from here and the files beside it. `npm run build` writes it
 * (scripts/build-openapi.mjs); test/api/openapi-document.test.ts fails when the committed file
 * is not what this generates, and lints it.
 */
import { LATEST_VERSION, SUPPORTED_VERSIONS } from '../version.ts';
import { DeliveryIdParams } from '../schemas/requests.ts';
import { ORGANIZATION_HEADER } from '../provider-auth.ts';
import { componentSchemas } from './json-schema.ts';
import { parameter } from './operation.ts';
import { apiKeyPaths } from './paths-api-keys.ts';
import { auditPaths } from './paths-audit.ts';
import { deliveryPaths, publicPaths } from './paths-deliveries.ts';
import { sharedRequestBodies, userAndWebhookPaths } from './paths-webhook.ts';
import { SHARED_RESPONSES } from './responses.ts';

type Json = Record<string, unknown>;

/** The path parameters each authenticated path takes (the Version and Hookrelay-Organization headers, and the delivery id in the path). */
function pathParameters(path: string): Json[] {
  const parameters: Json[] = [{ $ref: '#/components/parameters/Version' }, { $ref: '#/components/parameters/Organization' }];
  if (path.includes('{id}')) parameters.push({ $ref: '#/components/parameters/DeliveryId' });
  return parameters;
}

function paths(): Json {
  const authenticated: Record<string, Json> = { ...userAndWebhookPaths(), ...deliveryPaths(), ...auditPaths(), ...apiKeyPaths() };
  const out: Record<string, Json> = {};
  for (const [path, item] of Object.entries(authenticated)) out[path] = { parameters: pathParameters(path), ...item };
  return { ...out, ...publicPaths() };
}

/** Every spelling of the Version header the API accepts (version.ts), the newest first. */
function versionSpellings(): string[] {
  return [...[...SUPPORTED_VERSIONS].reverse().flatMap((v) => [v, v.slice(1)]), 'v1', '1'];
}

/** The whole document, as docs/openapi.json holds it. */
export function openApiDocument(): Json {
  return {
    openapi: '3.1.0',
    info: {
      title: 'hookrelay admin API',
      version: LATEST_VERSION.slice(1),
      summary: 'Roles, users and the webhook of an organization, for a self-hosted webhook relay.',
      description:
        "The admin API of hookrelay: list the roles, change a user's role, register and read the organization's webhook (the one URL that receives every status change of the organization's anticipation requests), rotate its signing secret, and inspect, replay and recover its deliveries. The paths of the seed interface are kept as they are.\n\n**Authentication.** Every operation but the three public ones (`/healthz`, `/readyz`, `/openapi.json`) needs `Authorization: Bearer <JWT>`. The token must carry `exp`, the caller's e-mail in `sub` and the organization id in `org` (claim names are configurable). Everything an operation reads or changes belongs to the organization of the token.\n\n**Versions.** Send `Version` (`v1`, `v1.0`, `v1.1`, `v1.2`, or the same without `v`; `v1` means `v1.0`). Absent means the newest, `v1.2`. The version used is echoed in the `Version` response header. All current versions behave identically; changes within v1 are additive.\n\n**Errors.** Every error is an RFC 9457 `application/problem+json` body (`Problem`) with a stable `code`; `type` is `urn:hookrelay:problem:<code>`. A path the API does not serve gets 404 `not_found`; a method a path does not accept gets 405 `method_not_allowed` with `Allow` (see the `NotFound` and `MethodNotAllowed` responses). `HEAD` is answered for every `GET` route and `OPTIONS` for every path (200, `Allow`).\n\nMore: docs/api.md in the hookrelay repository.",
      license: { name: 'Apache-2.0', identifier: 'Apache-2.0' },
    },
    servers: [
      {
        url: 'http://127.0.0.1:8080',
        description: 'The default listen address (`api.listen`). hookrelay serves plain HTTP; put a TLS-terminating reverse proxy in front of it to offer https.',
      },
    ],
    tags: [
      { name: 'users', description: 'Roles and the roles of users' },
      { name: 'webhook', description: "The organization's webhook" },
      { name: 'deliveries', description: 'The delivery log: list, inspect, replay, recover, test' },
      { name: 'audit', description: "Who changed what: the organization's audit trail" },
      { name: 'operations', description: 'Probes and this description (no authentication)' },
    ],
    security: [{ bearerAuth: [] }],
    paths: paths(),
    components: {
      securitySchemes: {
        bearerAuth: {
          type: 'http',
          scheme: 'bearer',
          bearerFormat: 'JWT',
          description:
            "A JWT signed with the one algorithm the daemon is configured for (HS256 by default; RS256, ES256 or EdDSA with a configured public key); tokens with any other `alg` are refused. Required claims: `exp`, the e-mail claim (`sub` by default) and the organization claim (`org` by default); `nbf` is honoured; `iss` and `aud` are checked when configured; clock tolerance at most 60 s. `hookrelay token issue --org ORG --email EMAIL` prints such a token. The caller's role, and so their permissions, is read from the store on every request. A machine sends an API key instead (`hkr_...`, from `POST /api_keys/create_api_key`): it acts as its role in its organization until revoked or expired.",
        },
        metricsToken: {
          type: 'http',
          scheme: 'bearer',
          description: 'The metrics token (`metrics.token` or `metrics.tokenFile`), not a JWT. Required by `GET /metrics` when one is configured; see docs/metrics.md.',
        },
      },
      parameters: {
        Version: {
          name: 'Version',
          in: 'header',
          required: false,
          description:
            'The API version the client is written for. Accepted spellings, exactly: `v1.2`, `1.2`, `v1.1`, `1.1`, `v1.0`, `1.0`, and `v1`, `1` (meaning v1.0). Absent or blank means the newest, v1.2. Anything else is 400 `unsupported_version`. All current versions behave identically.',
          schema: { type: 'string', enum: versionSpellings() },
          example: LATEST_VERSION,
        },
        Organization: {
          name: ORGANIZATION_HEADER,
          in: 'header',
          required: false,
          description:
            "Which organization the request is for, when the caller's token is one of the identity provider's (`auth.provider`) and its organization claim lists several: it must be one of them. Ignored for the daemon's own tokens and API keys, whose organization is fixed. Without it, a token listing several organizations is 401.",
          schema: { type: 'string', minLength: 1, maxLength: 200 },
          example: 'acme',
        },
        DeliveryId: parameter(DeliveryIdParams, 'id', 'path'),
      },
      headers: {
        Version: {
          description: 'The API version that served the request, in canonical form.',
          required: true,
          schema: { $ref: '#/components/schemas/ApiVersion' },
        },
        VersionUnlessUnsupported: {
          description: 'The API version that served the request; absent when the error is `unsupported_version`.',
          required: false,
          schema: { $ref: '#/components/schemas/ApiVersion' },
        },
        WWWAuthenticate: {
          description:
            'RFC 6750 challenge: `Bearer realm="hookrelay"` without a token, `Bearer realm="hookrelay", error="invalid_token", error_description="..."` with a bad one.',
          required: true,
          schema: { type: 'string' },
          example: 'Bearer realm="hookrelay", error="invalid_token", error_description="The token has expired; issue a new one"',
        },
        WWWAuthenticateInsufficientScope: {
          description: 'RFC 6750 challenge for a token without the needed permission.',
          required: true,
          schema: { type: 'string', const: 'Bearer realm="hookrelay", error="insufficient_scope"' },
        },
        RetryAfter: {
          description: 'Seconds to wait before the next request with this token (at least 1).',
          required: true,
          schema: { type: 'integer', minimum: 1 },
        },
        Allow: { description: 'The methods the path accepts.', required: true, schema: { type: 'string' }, example: 'HEAD, GET' },
      },
      requestBodies: sharedRequestBodies(),
      responses: SHARED_RESPONSES,
      schemas: componentSchemas(),
    },
  };
}

/** The document as docs/openapi.json holds it: two-space JSON and a final newline. */
export function openApiText(): string {
  return `${JSON.stringify(openApiDocument(), null, 2)}\n`;
}

/**
 * The answers of the document: success answers of a schema, with examples checked against it
 * when the document is built, and the problem documents (RFC 9457), whose examples are made from
 * the code, title and status problem.ts gives their code, so that none can contradict them.
 */
import type { z } from 'zod';
import { ErrorCode } from '../../domain/errors.ts';
import { PROBLEM_TYPE_PREFIX, statusOf, titleOf } from '../problem.ts';
import { Problem } from '../schemas/problem.ts';
import { jsonSchema } from './json-schema.ts';

type Json = Record<string, unknown>;

export const VERSION_HEADER = { Version: { $ref: '#/components/headers/Version' } };

/** A reference to a response of `components.responses`. */
export function shared(name: keyof typeof SHARED_RESPONSES): Json {
  return { $ref: `#/components/responses/${name}` };
}

/** `value` if `schema` accepts it; the build fails on an example that contradicts its schema. */
export function checked<T>(schema: z.ZodType, value: T, at: string): T {
  const result = schema.safeParse(value);
  if (!result.success) throw new Error(`${at}: the example contradicts its schema: ${JSON.stringify(result.error.issues)}`);
  return value;
}

/** Examples of a media type: one (`example`) or several by name (`examples`). */
export type Examples = { readonly example: unknown } | { readonly examples: Readonly<Record<string, unknown>> } | Record<string, never>;

/** The media type object of `schema` with its examples, each checked against it. */
export function media(schema: z.ZodType, examples: Examples, at: string): Json {
  const out: Json = { schema: jsonSchema(schema, at) };
  if ('example' in examples) out.example = checked(schema, examples.example, `${at} example`);
  if ('examples' in examples) {
    out.examples = Object.fromEntries(Object.entries(examples.examples).map(([name, value]) => [name, { value: checked(schema, value, `${at} examples.${name}`) }]));
  }
  return out;
}

/** A success answer: application/json of `schema`, with the Version header (`headers` null: the public routes, which have none). */
export function answer(description: string, schema: z.ZodType, examples: Examples = {}, headers: Json | null = VERSION_HEADER): Json {
  return { description, ...(headers === null ? {} : { headers }), content: { 'application/json': media(schema, examples, description) } };
}

/** A problem body with `code`, as the API writes it (problem.ts writeProblem). */
export function problemExample(code: ErrorCode, instance: string, detail: string, extra: Json = {}): Json {
  return { type: PROBLEM_TYPE_PREFIX + code, title: titleOf(code), status: statusOf(code), detail, code, instance, ...extra };
}

/**
 * The problem+json content of an answer that is one of `codes` (all of one status), with its
 * examples: each is a Problem, with one of these codes.
 */
export function problemContent(codes: readonly ErrorCode[], examples: readonly Json[] = []): Json {
  const statuses = new Set(codes.map(statusOf));
  if (statuses.size !== 1) throw new Error(`one answer, one status: ${codes.join(', ')}`);
  const content: Json = { schema: { allOf: [{ $ref: '#/components/schemas/Problem' }, { properties: { code: { enum: [...codes] } } }] } };
  if (examples.length > 0) {
    content.examples = Object.fromEntries(
      examples.map((example) => {
        const code = example.code as ErrorCode;
        if (!codes.includes(code)) throw new Error(`an example of ${codes.join(', ')} has the code ${code}`);
        return [code, { value: checked(Problem, example, `problem ${code}`) }];
      }),
    );
  }
  return { 'application/problem+json': content };
}

/** An error answer: a problem whose code is one of `codes`, with the Version header. */
export function problemAnswer(description: string, codes: readonly ErrorCode[], examples: readonly Json[] = []): Json {
  return { description, headers: VERSION_HEADER, content: problemContent(codes, examples) };
}

export const BODY_LIMIT = 'A JSON object of at most `api.bodyLimitBytes` (64 KiB by default).';

/** A JSON request body of `schema`, with an example checked against it. */
export function requestBody(schema: z.ZodType, example: unknown, description = `${BODY_LIMIT} Unknown members are ignored. An empty body counts as \`{}\`.`): Json {
  return { required: true, description, content: { 'application/json': media(schema, { example }, description) } };
}

/** `components.responses`: the answers many operations share. */
export const SHARED_RESPONSES = {
  BadRequestVersion: {
    description:
      'The `Version` header names no supported version (`unsupported_version`). Sent before authentication, so it needs no token. This answer has no `Version` header, since no version was selected.',
    headers: {},
    content: problemContent(
      [ErrorCode.unsupportedVersion],
      [
        problemExample(ErrorCode.unsupportedVersion, '/users/get_roles', 'Version "v2" is not supported; send one of v1.0, 1.0, v1.1, 1.1, v1.2, 1.2, v1, 1, or omit the header for v1.2', {
          supported_versions: ['v1.0', 'v1.1', 'v1.2'],
        }),
      ],
    ),
  },
  BadRequestBody: {
    description:
      'The `Version` header names no supported version (`unsupported_version`, without a `Version` response header), or the body is not a JSON object (`malformed_json`).',
    headers: { Version: { $ref: '#/components/headers/VersionUnlessUnsupported' } },
    content: problemContent(
      [ErrorCode.unsupportedVersion, ErrorCode.malformedJson],
      [problemExample(ErrorCode.malformedJson, '/users/update_role', 'The body is not valid JSON (27 characters); send a JSON object')],
    ),
  },
  Unauthorized: {
    description:
      'No access token (`missing_token`), or a token that is malformed, signed with another key or algorithm, with a `crit` header (no extension is implemented, RFC 7515 §4.1.11), without `exp`, expired, not yet valid, with the wrong `iss`/`aud`, without the e-mail or organization claim, or whose subject is not a user of its organization (`invalid_token`).',
    headers: { ...VERSION_HEADER, 'WWW-Authenticate': { $ref: '#/components/headers/WWWAuthenticate' } },
    content: problemContent(
      [ErrorCode.missingToken, ErrorCode.invalidToken],
      [
        problemExample(ErrorCode.missingToken, '/users/get_roles', 'Send an access token: Authorization: Bearer <JWT>'),
        problemExample(ErrorCode.invalidToken, '/users/get_roles', 'The token has expired; issue a new one'),
      ],
    ),
  },
  Forbidden: {
    description:
      "The token is valid but the caller's current role does not grant the permission this operation needs (`forbidden`). The role is read from the store on every request.",
    headers: { ...VERSION_HEADER, 'WWW-Authenticate': { $ref: '#/components/headers/WWWAuthenticateInsufficientScope' } },
    content: problemContent(
      [ErrorCode.forbidden],
      [problemExample(ErrorCode.forbidden, '/users/update_role', 'Your role (saas_viewer) does not allow this operation; it needs the permission users:manage')],
    ),
  },
  PayloadTooLarge: {
    description: 'The request body is larger than `api.bodyLimitBytes` (64 KiB by default).',
    headers: VERSION_HEADER,
    content: problemContent(
      [ErrorCode.payloadTooLarge],
      [problemExample(ErrorCode.payloadTooLarge, '/webhook/register_webhook', 'The body is larger than 65536 bytes; send a smaller JSON object', { limit_bytes: 65536 })],
    ),
  },
  UnsupportedMediaType: {
    description: 'A non-empty body with a `Content-Type` other than `application/json` (or another `+json` type). A body sent without `Content-Type` is read as JSON.',
    headers: VERSION_HEADER,
    content: problemContent([ErrorCode.unsupportedMediaType]),
  },
  TooManyRequests: {
    description: 'The per-token rate limit (`api.rateLimitPerMinute` sustained, `api.rateLimitBurst` at once) is exhausted. Retry after the number of seconds in `Retry-After`.',
    headers: { ...VERSION_HEADER, 'Retry-After': { $ref: '#/components/headers/RetryAfter' } },
    content: problemContent(
      [ErrorCode.rateLimited],
      [problemExample(ErrorCode.rateLimited, '/users/get_roles', 'Rate limit of 600 requests per minute exceeded for this token; retry after 1 s', { retry_after_seconds: 1 })],
    ),
  },
  DatabaseBusy: {
    description:
      'The database stayed locked by another process (a `hookrelay` CLI command such as `ingest` or `deliveries recover`, a backup) for `database.busyTimeout` (5 s by default) while this write waited for it: nothing was changed (for `POST /webhook/recover`, the detail says how much of the window was done before; recovering again does the rest, nothing is queued twice). Retry after the number of seconds in `Retry-After`. The daemon keeps serving other requests while a write waits.',
    headers: { ...VERSION_HEADER, 'Retry-After': { $ref: '#/components/headers/RetryAfter' } },
    content: problemContent(
      [ErrorCode.databaseBusy],
      [
        problemExample(
          ErrorCode.databaseBusy,
          '/webhook/register_webhook',
          'the database has been locked by another process for 5.0 s (a hookrelay CLI command or a backup, say); nothing was changed: try again shortly',
        ),
      ],
    ),
  },
  InternalError: {
    description: 'An unexpected failure. The body says only `internal_error`; the cause is in the daemon log, never in the answer.',
    headers: {},
    content: problemContent(
      [ErrorCode.internal],
      [problemExample(ErrorCode.internal, '/webhook/get_webhook', 'An internal error occurred; the operator can find it in the daemon log.')],
    ),
  },
  NotFound: {
    description: 'Returned for any path the API does not serve (`not_found`). Not attached to an operation: it is what every undocumented path gets.',
    headers: {},
    content: problemContent([ErrorCode.notFound], [problemExample(ErrorCode.notFound, '/users/roles', 'There is no /users/roles; see /openapi.json for the API')]),
  },
  MethodNotAllowed: {
    description:
      'Returned for a method a served path does not accept (`method_not_allowed`), with the accepted methods in `Allow`. Not attached to an operation: it is what every undocumented method of a documented path gets.',
    headers: { Allow: { $ref: '#/components/headers/Allow' } },
    content: problemContent(
      [ErrorCode.methodNotAllowed],
      [problemExample(ErrorCode.methodNotAllowed, '/users/get_roles', 'DELETE is not allowed on /users/get_roles; allowed: HEAD, GET')],
    ),
  },
} as const;

/** The answers every authenticated operation may give besides its own: 401, 403, 429, 500 (and 400 for the version, or the body). */
export function securedErrors(options: { readonly body: boolean }): Json {
  return {
    400: shared(options.body ? 'BadRequestBody' : 'BadRequestVersion'),
    401: shared('Unauthorized'),
    403: shared('Forbidden'),
    ...(options.body ? { 413: shared('PayloadTooLarge'), 415: shared('UnsupportedMediaType') } : {}),
    429: shared('TooManyRequests'),
    500: shared('InternalError'),
  };
}

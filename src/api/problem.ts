import type { Context } from 'koa';
import { ErrorCode, EXCERPT_CHARS, HookrelayError } from '../domain/errors.ts';

/** HTTP status and title of every error code: the only place codes meet HTTP. */
const STATUS: Record<ErrorCode, { status: number; title: string; expose?: boolean }> = {
  [ErrorCode.validation]: { status: 422, title: 'The request is invalid' },
  [ErrorCode.userNotFound]: { status: 404, title: 'User not found' },
  [ErrorCode.userExists]: { status: 409, title: 'User already exists' },
  [ErrorCode.orgNotFound]: { status: 404, title: 'Organization not found' },
  [ErrorCode.orgExists]: { status: 409, title: 'Organization already exists' },
  [ErrorCode.roleNotFound]: { status: 422, title: 'Unknown role' },
  [ErrorCode.roleExists]: { status: 409, title: 'Role already exists' },
  [ErrorCode.lastUserManager]: { status: 409, title: 'The organization would have no user manager' },
  [ErrorCode.webhookNotConfigured]: { status: 404, title: 'No webhook configured' },
  [ErrorCode.webhookUrlNotAllowed]: { status: 422, title: 'Webhook URL not allowed' },
  [ErrorCode.secretNotConfigured]: { status: 404, title: 'No signing secret' },
  [ErrorCode.deliveryNotFound]: { status: 404, title: 'Delivery not found' },
  [ErrorCode.deliveryNotWaiting]: { status: 409, title: 'Delivery is not waiting for a retry' },
  [ErrorCode.apiKeyNotFound]: { status: 404, title: 'API key not found' },
  [ErrorCode.apiKeyExists]: { status: 409, title: 'API key already exists' },
  [ErrorCode.apiKeyLimit]: { status: 409, title: 'Too many API keys' },
  [ErrorCode.apiKeyRoleTooHigh]: { status: 403, title: 'Role above the caller\'s' },
  [ErrorCode.config]: { status: 500, title: 'Internal server error' },
  [ErrorCode.databaseTooNew]: { status: 500, title: 'Internal server error' },
  [ErrorCode.databaseDamaged]: { status: 500, title: 'Internal server error' },
  [ErrorCode.databaseBusy]: { status: 503, title: 'Database busy', expose: true },
  [ErrorCode.keyUnavailable]: { status: 500, title: 'Internal server error' },
  [ErrorCode.credentialKeyUnavailable]: { status: 500, title: 'Internal server error' },
  [ErrorCode.malformedJson]: { status: 400, title: 'Malformed JSON body' },
  [ErrorCode.payloadTooLarge]: { status: 413, title: 'Request body too large' },
  [ErrorCode.unsupportedMediaType]: { status: 415, title: 'Unsupported media type' },
  [ErrorCode.unsupportedVersion]: { status: 400, title: 'Unsupported API version' },
  [ErrorCode.notFound]: { status: 404, title: 'Not found' },
  [ErrorCode.methodNotAllowed]: { status: 405, title: 'Method not allowed' },
  [ErrorCode.missingToken]: { status: 401, title: 'Authentication required' },
  [ErrorCode.invalidToken]: { status: 401, title: 'Invalid access token' },
  [ErrorCode.forbidden]: { status: 403, title: 'Forbidden' },
  [ErrorCode.rateLimited]: { status: 429, title: 'Too many requests' },
  [ErrorCode.internal]: { status: 500, title: 'Internal server error' },
};

export const PROBLEM_TYPE_PREFIX = 'urn:hookrelay:problem:';

/** Characters of a request path that must not be repeated as they are: controls (C0, DEL, C1), invisible and bidirectional ones. */
const UNSHOWABLE = /[\u0000-\u0020\u007f-\u00a0\u00ad\u200b-\u200f\u2028\u2029\u202a-\u202e\u2060-\u206f\ufeff]/g;

/**
 * A request path as an answer (`instance`) or the access log repeats it: at most `max`
 * characters, then "...", with what cannot be shown as it is percent-encoded (so it stays a
 * URI reference). A 15,000-character path comes back as a short excerpt, never whole.
 */
export function pathExcerpt(path: string, max: number = EXCERPT_CHARS): string {
  const cut = path.length > max ? `${path.slice(0, max)}...` : path;
  return cut.replace(UNSHOWABLE, (c) => encodeURIComponent(c));
}

export function statusOf(code: ErrorCode): number {
  return STATUS[code].status;
}

/** The `title` of every problem with this code. */
export function titleOf(code: ErrorCode): string {
  return STATUS[code].title;
}

/**
 * Writes `err` as an RFC 9457 problem+json response. Only codes whose status is below 500 (and
 * `database_busy`, whose message says nothing of the server but to try again) carry their
 * message as `detail`; anything else says "internal error" and nothing more.
 */
export function writeProblem(ctx: Context, err: HookrelayError): void {
  const { status, title, expose } = STATUS[err.code];
  const exposed = status < 500 || expose === true;
  const body: Record<string, unknown> = {
    type: PROBLEM_TYPE_PREFIX + (exposed ? err.code : ErrorCode.internal),
    title,
    status,
    detail: exposed ? err.message : 'An internal error occurred; the operator can find it in the daemon log.',
    code: exposed ? err.code : ErrorCode.internal,
    instance: pathExcerpt(ctx.path),
  };
  if (exposed) {
    if (err.invalidParams.length > 0) body.invalid_params = err.invalidParams;
    Object.assign(body, err.details);
  }
  ctx.status = status;
  ctx.type = 'application/problem+json';
  ctx.body = body;
}

/** Shorthand for protocol-level errors raised by the API adapter itself. */
export function problem(code: ErrorCode, message: string, details?: Record<string, unknown>): HookrelayError {
  return new HookrelayError(code, message, details ? { details } : {});
}

import { TERMINAL_UNSAFE_SOURCE } from './terminal-text.ts';

/**
 * The one error model of hookrelay. Every failure that a caller can act on is a
 * `HookrelayError` with a stable machine `code`; adapters (api/, cli.ts) map codes to
 * HTTP statuses and exit codes. Nothing here knows about HTTP.
 */

export const ErrorCode = {
  validation: 'validation_failed',
  userNotFound: 'user_not_found',
  userExists: 'user_already_exists',
  orgNotFound: 'organization_not_found',
  orgExists: 'organization_already_exists',
  roleNotFound: 'role_not_found',
  roleExists: 'role_already_exists',
  lastUserManager: 'last_user_manager',
  webhookNotConfigured: 'webhook_not_configured',
  webhookUrlNotAllowed: 'webhook_url_not_allowed',
  secretNotConfigured: 'secret_not_configured',
  deliveryNotFound: 'delivery_not_found',
  deliveryNotWaiting: 'delivery_not_waiting',
  apiKeyNotFound: 'api_key_not_found',
  apiKeyExists: 'api_key_already_exists',
  apiKeyLimit: 'api_key_limit_reached',
  /** A key's role would grant a permission its creator's role does not. */
  apiKeyRoleTooHigh: 'api_key_role_too_high',
  config: 'invalid_config',
  databaseTooNew: 'database_too_new',
  databaseDamaged: 'database_damaged',
  databaseBusy: 'database_busy',
  keyUnavailable: 'signing_key_unavailable',
  /** The key-encryption key that seals the webhooks' credentials is missing, or does not open them (services/credential-key.ts). */
  credentialKeyUnavailable: 'credential_key_unavailable',
  // Protocol-level codes, raised by the API adapter but part of the same stable vocabulary.
  malformedJson: 'malformed_json',
  payloadTooLarge: 'payload_too_large',
  unsupportedMediaType: 'unsupported_media_type',
  unsupportedVersion: 'unsupported_version',
  notFound: 'not_found',
  methodNotAllowed: 'method_not_allowed',
  missingToken: 'missing_token',
  invalidToken: 'invalid_token',
  forbidden: 'forbidden',
  rateLimited: 'rate_limited',
  internal: 'internal_error',
} as const;
export type ErrorCode = (typeof ErrorCode)[keyof typeof ErrorCode];

/** One field that failed validation: `name` is the field's JSON name, `reason` says what is expected. */
export interface InvalidParam {
  readonly name: string;
  readonly reason: string;
}

export interface HookrelayErrorOptions {
  readonly cause?: unknown;
  readonly invalidParams?: readonly InvalidParam[];
  /** Extra, non-secret facts a client may use (for example the list of valid role names). */
  readonly details?: Readonly<Record<string, unknown>>;
}

export class HookrelayError extends Error {
  readonly code: ErrorCode;
  readonly invalidParams: readonly InvalidParam[];
  readonly details: Readonly<Record<string, unknown>>;

  constructor(code: ErrorCode, message: string, options: HookrelayErrorOptions = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.name = 'HookrelayError';
    this.code = code;
    this.invalidParams = options.invalidParams ?? [];
    this.details = options.details ?? {};
  }
}

const TERMINAL_UNSAFE_ALL = new RegExp(TERMINAL_UNSAFE_SOURCE, 'gu');

/** Longest excerpt of a client's input that an error message quotes (see excerpt). */
export const EXCERPT_CHARS = 40;

/**
 * A client's input as an error message may quote it: at most EXCERPT_CHARS characters (then
 * "..."), in double quotes, escaped as JSON (quotes, backslashes, control characters), with
 * line separators and bidirectional controls escaped too, so that no answer or log line echoes
 * a large or misleading value back.
 */
export function excerpt(value: string): string {
  const cut = value.length > EXCERPT_CHARS ? `${value.slice(0, EXCERPT_CHARS)}...` : value;
  // JSON.stringify escapes C0 and lone surrogates; what a terminal must not get raw besides (DEL, C1, format and bidi characters) as JSON escapes too.
  return JSON.stringify(cut).replace(TERMINAL_UNSAFE_ALL, (c) => c.split('').map((unit) => `\\u${unit.charCodeAt(0).toString(16).padStart(4, '0')}`).join(''));
}

/** Shorthand for a validation failure that lists each offending field. */
export function validationError(message: string, invalidParams: readonly InvalidParam[]): HookrelayError {
  return new HookrelayError(ErrorCode.validation, message, { invalidParams });
}

export function isHookrelayError(err: unknown): err is HookrelayError {
  return err instanceof HookrelayError;
}

/** True when `err` is `database_busy`: a store's wait for the lock ended without it (nothing was changed). */
export function isDatabaseBusy(err: unknown): boolean {
  return err instanceof HookrelayError && err.code === ErrorCode.databaseBusy;
}

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
  secretNotConfigured: 'secret_not_configured',
  deliveryNotFound: 'delivery_not_found',
  config: 'invalid_config',
  databaseTooNew: 'database_too_new',
  databaseDamaged: 'database_damaged',
  keyUnavailable: 'signing_key_unavailable',
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

/** Shorthand for a validation failure that lists each offending field. */
export function validationError(message: string, invalidParams: readonly InvalidParam[]): HookrelayError {
  return new HookrelayError(ErrorCode.validation, message, { invalidParams });
}

export function isHookrelayError(err: unknown): err is HookrelayError {
  return err instanceof HookrelayError;
}

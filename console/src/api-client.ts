/**
 * The admin API as the console uses it (docs/openapi.json): every call sends `Version`, the
 * token only as `Authorization: Bearer`, never in a URL; failures become an `ApiError` holding
 * the problem+json `title`/`detail`/`code`, or a network failure. Given a fetch function, no
 * DOM access (unit-tested under Node).
 */

export const API_VERSION = 'v1.2';

export type DeliveryStatus = 'pending' | 'failed' | 'delivered' | 'dead';
export const DELIVERY_STATUSES: readonly DeliveryStatus[] = ['pending', 'failed', 'delivered', 'dead'];

export interface Webhook {
  readonly webhook_url: string;
  readonly active_hmac: boolean;
  /** Headers sent on every delivery, name to value; null: a credential, set but never shown. */
  readonly headers: Readonly<Record<string, string | null>>;
  /** Deliveries per second at most; null: no limit. */
  readonly rate_limit: number | null;
  /** The client certificate deliveries present (mutual TLS), never its key; null: none of its own. */
  readonly client_certificate: {
    readonly subject: string;
    readonly issuer: string;
    readonly fingerprint_sha256: string;
    readonly not_before: string;
    readonly not_after: string;
    readonly key_type: string;
  } | null;
  /** The OAuth2 client credentials deliveries get their access token with, never the secret; null: none. */
  readonly oauth2: { readonly token_url: string; readonly client_id: string; readonly scope: string | null; readonly audience: string | null; readonly client_auth: string } | null;
  readonly status: 'active' | 'failing' | 'disabled';
  readonly created_at: string;
  readonly updated_at: string;
  readonly status_detail: string;
  readonly consecutive_failures: number;
  readonly failing_since: string | null;
  readonly last_success_at: string | null;
  readonly disabled_reason: string | null;
  readonly last_error: { readonly at: string; readonly status_code: number | null; readonly error: string } | null;
  /** While a secret rotation's grace period runs: until when the previous secret signs too. */
  readonly previous_secret_expires_at: string | null;
}

export interface Delivery {
  readonly id: number;
  readonly event_id: string;
  readonly event_type: string;
  readonly anticipation_request_id: string | null;
  readonly status: DeliveryStatus;
  /** `status` in words that cannot be misread: `retrying` is `failed`, `failed_for_good` is `dead`. */
  readonly state?: 'queued' | 'retrying' | 'delivered' | 'failed_for_good';
  readonly attempts: number;
  readonly next_attempt_at: string | null;
  readonly last_attempt_at: string | null;
  readonly last_status_code: number | null;
  readonly last_error: string | null;
  readonly created_at: string;
  readonly updated_at: string;
  /** The event's W3C trace id; null when it has none (absent from a daemon older than issue 44). */
  readonly trace_id?: string | null;
}

export interface DeliveryAttempt {
  readonly attempt: number;
  readonly started_at: string;
  readonly duration_ms: number;
  readonly url: string;
  readonly status_code: number | null;
  readonly error: string | null;
  readonly error_detail: string | null;
  readonly response_body: string | null;
  readonly outcome: string;
  /** The webhook-timestamp (seconds) of the request it sent; null when it sent none. */
  readonly webhook_timestamp: number | null;
  /** The webhook-signature it sent: admins only; null otherwise, or when unsigned or nothing was sent. */
  readonly webhook_signature: string | null;
}

/** How a delivery's request shows its signature (see DeliveryRequest). */
export type SignatureShown = 'included' | 'withheld' | 'unsigned';

/**
 * The request the latest attempt that sent one sent for a delivery (or, none sent yet, the one
 * the next attempt would send): every header by lower-case name, and the exact body.
 */
export interface DeliveryRequest {
  readonly method: string;
  readonly url: string;
  readonly headers: Readonly<Record<string, string>>;
  readonly body: string;
  /** The attempt that sent it; null: a preview made when the API answered. */
  readonly attempt: number | null;
  /** When that attempt started; null for a preview. */
  readonly sent_at: string | null;
  /** When webhook-timestamp and webhook-signature were made: by that attempt, or when the API answered. */
  readonly signed_at: string;
  readonly signature: SignatureShown;
  /** The client certificate the webhook presents (mutual TLS); null: none of its own. */
  readonly client_certificate?: { readonly subject: string; readonly fingerprint_sha256: string } | null;
}

export interface DeliveryDetail extends Delivery {
  readonly attempt_log: readonly DeliveryAttempt[];
  readonly request: DeliveryRequest;
}

export type StatsWindow = '1h' | '24h';
export const STATS_WINDOWS: readonly StatsWindow[] = ['1h', '24h'];

/** GET /webhook/stats: attempts per bucket of the window, oldest first. */
export interface AttemptStats {
  readonly window: StatsWindow;
  readonly bucket_seconds: number;
  readonly from: string;
  readonly until: string;
  readonly succeeded: number;
  readonly failed: number;
  readonly buckets: ReadonlyArray<{ readonly start: string; readonly succeeded: number; readonly failed: number }>;
}

export interface DeliveryPage {
  readonly data: readonly Delivery[];
  readonly next_cursor: string | null;
}

export interface DeliveryQueued {
  readonly message: string;
  readonly delivery: Delivery;
}

export interface RecoverResult {
  readonly message: string;
  readonly requeued: number;
  readonly retried_now: number;
}

/** GET /users/me: who the token is. */
export interface Me {
  readonly email: string;
  readonly organization_id: string;
  readonly role: string;
  readonly permissions: readonly string[];
}

/** POST /webhook/disable, /webhook/enable: the webhook after the change. */
export interface WebhookChange extends Webhook {
  readonly message: string;
}

/** The permission the console's actions need (saas_admin has it, saas_viewer not). */
export const MANAGE_PERMISSION = 'webhook:manage';
/** The permission that adds and removes users and changes their roles. */
export const USERS_PERMISSION = 'users:manage';
/** The permission that reads the organization's audit trail. */
export const AUDIT_PERMISSION = 'audit:read';

/** GET /users/get_roles: a role and what it permits. */
export interface Role {
  readonly name: string;
  readonly description: string;
  /** Absent from a daemon older than the team page. */
  readonly permissions?: readonly string[];
}

/** GET /users/get_users: a user of the organization. */
export interface TeamUser {
  readonly email: string;
  readonly role_name: string;
  readonly created_at: string;
  readonly updated_at: string;
}

export const API_KEYS_PERMISSION = 'api_keys:manage';

/** GET /api_keys/list_api_keys: a key as listed (never the key itself). */
export interface ApiKeyInfo {
  readonly name: string;
  readonly role_name: string;
  readonly prefix: string;
  readonly created_at: string;
  readonly created_by: string | null;
  readonly expires_at: string | null;
  readonly last_used_at: string | null;
}

/** POST /api_keys/create_api_key: the key, shown this once. */
export interface ApiKeyCreated extends ApiKeyInfo {
  readonly message: string;
  readonly key: string;
}

/** What POST /webhook/register_webhook takes: the whole webhook. */
export interface WebhookSettings {
  readonly webhook_url: string;
  readonly active_hmac: boolean;
  readonly headers: Readonly<Record<string, string>>;
  /** Null: no limit. A string the console could not read as a number is sent as typed, for the API to refuse in its words. */
  readonly rate_limit: number | string | null;
}

/** The answer of a registration: the webhook, a message, and the new signing secret when this call made one (shown once). */
export interface WebhookRegistration extends WebhookChange {
  readonly secret?: string;
}

/** An entry of the audit trail (GET /audit/list). */
export interface AuditEntry {
  readonly id: number;
  readonly at: string;
  readonly actor: { readonly kind: string; readonly name: string | null; readonly organization_id: string | null };
  readonly action: string;
  readonly target: string | null;
  /** Field to before and after; `{ changed: true }` for a secret or a credential, whose values are never kept. */
  readonly changes: Readonly<Record<string, unknown>> | null;
  readonly request_id: string | null;
  readonly source: string | null;
  readonly outcome: string;
  readonly code: string | null;
}

export interface AuditQuery {
  /** RFC 3339. */
  readonly since?: string | undefined;
  readonly actor?: string | undefined;
  readonly action?: string | undefined;
  readonly outcome?: string | undefined;
  readonly cursor?: string | undefined;
}

export interface AuditPage {
  readonly data: readonly AuditEntry[];
  readonly next_cursor: string | null;
}

export interface SecretRotation {
  readonly message: string;
  readonly secret: string;
  readonly previous_secret_expires_at: string;
}

export interface DeliveryQuery {
  readonly status?: DeliveryStatus | undefined;
  /** RFC 3339. */
  readonly since?: string | undefined;
  /** RFC 3339. */
  readonly until?: string | undefined;
  /** An anticipation request id. */
  readonly request_id?: string | undefined;
  readonly cursor?: string | undefined;
  readonly limit?: number | undefined;
}

/** What a failed call amounts to. */
export type ApiFailure =
  | { readonly kind: 'network'; readonly message: string }
  | {
      readonly kind: 'problem';
      readonly status: number;
      readonly title: string;
      readonly detail: string;
      /** The problem's stable `code`, or null when the answer was not problem+json. */
      readonly code: string | null;
      /** What was wrong with each field (`invalid_params`), for forms to show beside it; also said in `detail`. */
      readonly invalidParams?: readonly InvalidParam[];
    };

export interface InvalidParam {
  readonly name: string;
  readonly reason: string;
}

export class ApiError extends Error {
  readonly failure: ApiFailure;
  constructor(failure: ApiFailure) {
    super(failure.kind === 'network' ? failure.message : `${failure.title}: ${failure.detail}`);
    this.name = 'ApiError';
    this.failure = failure;
  }
}

export const NETWORK_MESSAGE = 'The hookrelay daemon cannot be reached: check that it is running and that this page is served by it.';

/** A 401 whose problem says the token has expired (`invalid_token`, "The token has expired; ..."). */
export function isExpiredTokenFailure(failure: ApiFailure): boolean {
  return failure.kind === 'problem' && failure.status === 401 && /expired/i.test(failure.detail);
}

export const isUnauthorized = (failure: ApiFailure): boolean => failure.kind === 'problem' && failure.status === 401;
export const isForbidden = (failure: ApiFailure): boolean => failure.kind === 'problem' && failure.status === 403;

/** The parts of a fetch Response the client reads (the browser's `Response` fits). */
export interface ResponseLike {
  readonly status: number;
  readonly headers: { get(name: string): string | null };
  text(): Promise<string>;
}

export interface RequestLike {
  readonly method: string;
  readonly headers: Record<string, string>;
  readonly body?: string;
  readonly credentials: 'omit';
  readonly cache: 'no-store';
}

/** The browser's `fetch` fits. */
export type FetchLike = (url: string, init: RequestLike) => Promise<ResponseLike>;

export interface ApiClientOptions {
  readonly fetch: FetchLike;
  /** Where the API is: an origin-relative path ending in `/` (`/`), or an absolute URL ending in `/`. */
  readonly base: string;
  /** The current token, or null when signed out. */
  readonly token: () => string | null;
}

/** A query string (with its `?`) of the values set, in their order; empty when none is. */
export function queryString(values: Readonly<Record<string, string | undefined>>): string {
  const params = new URLSearchParams();
  for (const [name, value] of Object.entries(values)) if (value !== undefined && value !== '') params.set(name, value);
  const text = params.toString();
  return text === '' ? '' : `?${text}`;
}

/** The query string of `GET /webhook/deliveries` (with its `?`), empty when there is nothing to send. */
export function deliveriesQueryString(query: DeliveryQuery): string {
  const params = new URLSearchParams();
  if (query.status !== undefined) params.set('status', query.status);
  if (query.since !== undefined) params.set('since', query.since);
  if (query.until !== undefined) params.set('until', query.until);
  if (query.request_id !== undefined) params.set('request_id', query.request_id);
  if (query.limit !== undefined) params.set('limit', String(query.limit));
  if (query.cursor !== undefined) params.set('cursor', query.cursor);
  const text = params.toString();
  return text === '' ? '' : `?${text}`;
}

/** The failure an answer with status >= 400 amounts to, from its problem+json body when it has one. */
export function problemFromResponse(status: number, contentType: string | null, bodyText: string): ApiFailure {
  let body: unknown = null;
  if (contentType !== null && /json/i.test(contentType)) {
    try {
      body = JSON.parse(bodyText);
    } catch {
      body = null;
    }
  }
  const field = (name: string): string | null => {
    if (typeof body !== 'object' || body === null) return null;
    const value = (body as Record<string, unknown>)[name];
    return typeof value === 'string' && value !== '' ? value : null;
  };
  const detail = field('detail') ?? `The daemon answered ${status} without an explanation.`;
  // What was wrong with each parameter (`invalid_params`), said after the detail.
  const params = typeof body === 'object' && body !== null ? (body as Record<string, unknown>).invalid_params : undefined;
  const invalidParams = Array.isArray(params)
    ? params.filter((p): p is InvalidParam => typeof p === 'object' && p !== null && typeof p.name === 'string' && typeof p.reason === 'string')
    : [];
  const reasons = invalidParams.map((p) => `${p.name} ${p.reason}`);
  return {
    kind: 'problem',
    status,
    title: field('title') ?? `HTTP ${status}`,
    detail: reasons.length === 0 ? detail : `${detail}: ${reasons.join('; ')}.`,
    code: field('code'),
    ...(invalidParams.length === 0 ? {} : { invalidParams }),
  };
}

export function createApiClient(options: ApiClientOptions) {
  const base = options.base.endsWith('/') ? options.base : `${options.base}/`;

  async function call<T>(method: 'GET' | 'POST', path: string, body?: Record<string, unknown>): Promise<T> {
    const token = options.token();
    if (token === null) {
      throw new ApiError({ kind: 'problem', status: 401, title: 'Authentication required', detail: 'Sign in first.', code: 'missing_token' });
    }
    const headers: Record<string, string> = {
      Accept: 'application/json, application/problem+json',
      Authorization: `Bearer ${token}`,
      Version: API_VERSION,
    };
    const init: RequestLike =
      body === undefined
        ? { method, headers, credentials: 'omit', cache: 'no-store' }
        : { method, headers: { ...headers, 'Content-Type': 'application/json' }, body: JSON.stringify(body), credentials: 'omit', cache: 'no-store' };
    let response: ResponseLike;
    let text: string;
    try {
      response = await options.fetch(`${base}${path.replace(/^\//, '')}`, init);
      text = await response.text();
    } catch {
      throw new ApiError({ kind: 'network', message: NETWORK_MESSAGE });
    }
    const contentType = response.headers.get('Content-Type');
    if (response.status >= 400) throw new ApiError(problemFromResponse(response.status, contentType, text));
    try {
      return JSON.parse(text) as T;
    } catch {
      throw new ApiError({ kind: 'problem', status: response.status, title: 'Unexpected answer', detail: `The daemon answered ${response.status} with a body that is not JSON.`, code: null });
    }
  }

  const id = (value: number) => {
    if (!Number.isSafeInteger(value) || value < 1) throw new RangeError(`not a delivery id: ${value}`);
    return String(value);
  };

  return {
    me: () => call<Me>('GET', '/users/me'),
    getWebhook: () => call<Webhook>('GET', '/webhook/get_webhook'),
    disableWebhook: () => call<WebhookChange>('POST', '/webhook/disable'),
    enableWebhook: () => call<WebhookChange>('POST', '/webhook/enable'),
    sendTest: () => call<DeliveryQueued>('POST', '/webhook/test'),
    rotateSecret: () => call<SecretRotation>('POST', '/webhook/rotate_secret'),
    listDeliveries: (query: DeliveryQuery) => call<DeliveryPage>('GET', `/webhook/deliveries${deliveriesQueryString(query)}`),
    getDelivery: (deliveryId: number) => call<DeliveryDetail>('GET', `/webhook/deliveries/${id(deliveryId)}`),
    stats: (window: StatsWindow) => call<AttemptStats>('GET', `/webhook/stats?window=${window === '24h' ? '24h' : '1h'}`),
    replay: (deliveryId: number) => call<DeliveryQueued>('POST', `/webhook/deliveries/${id(deliveryId)}/replay`),
    retryNow: (deliveryId: number) => call<DeliveryQueued>('POST', `/webhook/deliveries/${id(deliveryId)}/retry`),
    recover: (since: string, until?: string) => call<RecoverResult>('POST', '/webhook/recover', until === undefined ? { since } : { since, until }),
    registerWebhook: (settings: WebhookSettings) => call<WebhookRegistration>('POST', '/webhook/register_webhook', { ...settings }),
    getRoles: () => call<Role[]>('GET', '/users/get_roles'),
    getUsers: () => call<TeamUser[]>('GET', '/users/get_users'),
    // update_role's documented method is PUT; POST is accepted alike, and the client sends GET and POST only.
    updateRole: (email: string, roleName: string) => call<{ message: string }>('POST', '/users/update_role', { email, role_name: roleName }),
    addUser: (email: string, roleName: string) => call<TeamUser & { message: string }>('POST', '/users/add_user', { email, role_name: roleName }),
    removeUser: (email: string) => call<{ message: string }>('POST', '/users/remove_user', { email }),
    listApiKeys: () => call<ApiKeyInfo[]>('GET', '/api_keys/list_api_keys'),
    createApiKey: (name: string, roleName: string, expiresIn: string | null) =>
      call<ApiKeyCreated>('POST', '/api_keys/create_api_key', expiresIn === null ? { name, role_name: roleName } : { name, role_name: roleName, expires_in: expiresIn }),
    revokeApiKey: (name: string) => call<{ message: string }>('POST', '/api_keys/revoke_api_key', { name }),
    listAudit: (query: AuditQuery) => call<AuditPage>('GET', `/audit/list${queryString({ since: query.since, actor: query.actor, action: query.action, outcome: query.outcome, cursor: query.cursor })}`),
  };
}

export type ApiClient = ReturnType<typeof createApiClient>;

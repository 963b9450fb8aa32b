/**
 * The admin API's side of the audit trail: each request's id, the audit context of a request
 * (who, from where: services/audit.ts records it), and the refusals of requests that would
 * change something (401 and 403 on the routes that need a manage permission), recorded as
 * `denied` entries.
 */
import { randomUUID } from 'node:crypto';
import type { Context, Middleware, Next } from 'koa';
import { ActorKind, AuditAction, AuditOutcome, type AuditContext } from '../domain/audit.ts';
import { ErrorCode, isHookrelayError } from '../domain/errors.ts';
import { Permission } from '../domain/permissions.ts';
import type { Principal } from '../domain/types.ts';
import type { AuditTrail } from '../services/audit.ts';
import { ApiKeyRefusal } from './api-key-auth.ts';

/** A request id a client or a proxy may send (X-Request-Id) and have kept: short, and nothing a log or terminal would act on. */
const REQUEST_ID = /^[A-Za-z0-9._:-]{1,128}$/;

/** Sets the request's id (the client's X-Request-Id when well-formed, a UUID otherwise) and answers it as X-Request-Id. */
export function requestId(): Middleware {
  return async function setRequestId(ctx: Context, next: Next): Promise<void> {
    const given = ctx.get('X-Request-Id');
    const id = REQUEST_ID.test(given) ? given : randomUUID();
    ctx.state.requestId = id;
    ctx.set('X-Request-Id', id);
    await next();
  };
}

/**
 * Whether the request comes from a browser, which on this listener is the console: browsers
 * send Origin with every POST and Sec-Fetch-Site with every fetch on a secure origin, and the
 * API answers no cross-origin request (no CORS), so a browser's request that reaches a route
 * is the console's. A label for the trail, not a proof: any other client can send the headers.
 */
function fromBrowser(ctx: Context): boolean {
  return ctx.get('Origin') !== '' || ctx.get('Sec-Fetch-Site') !== '';
}

/** The audit context of a request: its principal (when authenticated), its id, its source address. */
export function auditContextOf(ctx: Context): AuditContext {
  const principal = ctx.state.principal as Principal | undefined;
  const requestId = typeof ctx.state.requestId === 'string' ? ctx.state.requestId : null;
  const actor =
    principal === undefined
      ? { kind: ActorKind.anonymous, name: null, orgId: null }
      : { kind: fromBrowser(ctx) ? ActorKind.console : ActorKind.api, name: principal.email, orgId: principal.orgId };
  return { actor, requestId, source: ctx.ip || null };
}

/** Permissions whose routes change something (or reveal a secret): a refusal on one of them is audited. */
const MANAGE_PERMISSIONS: ReadonlySet<Permission> = new Set([Permission.usersManage, Permission.webhookManage, Permission.apiKeysManage]);

/**
 * A bucket for the refusals of callers without a valid token: at most `perMinute` recorded a
 * minute (burst as large); the others are counted, and the count goes into the next one
 * recorded (`changes.unrecorded_refusals`). A flood of junk requests then costs the trail a
 * bounded number of rows (perMinute a minute, kept audit.retention), not one per request.
 */
export class AnonymousRefusals {
  readonly #perMinute: number;
  readonly #now: () => number;
  #tokens: number;
  #at: number;
  #skipped = 0;

  constructor(perMinute: number, now: () => number = () => performance.now()) {
    this.#perMinute = perMinute;
    this.#now = now;
    this.#tokens = perMinute;
    this.#at = now();
  }

  /** Null: do not record this one (counted); otherwise how many went unrecorded before it. */
  take(): number | null {
    const now = this.#now();
    this.#tokens = Math.min(this.#perMinute, this.#tokens + ((now - this.#at) / 60_000) * this.#perMinute);
    this.#at = now;
    if (this.#tokens < 1) {
      this.#skipped++;
      return null;
    }
    this.#tokens--;
    const skipped = this.#skipped;
    this.#skipped = 0;
    return skipped;
  }
}

/**
 * Records a refusal (401 from authentication, 403 from the permission check) of a request to a
 * route that needs `permission`, when that is a manage permission, then lets the error through.
 * Mounted before authentication in the route's chain.
 */
export function auditRefusals(audit: AuditTrail, permission: Permission, path: string, anonymous: AnonymousRefusals): Middleware {
  if (!MANAGE_PERMISSIONS.has(permission)) return (_ctx, next) => next();
  return async function recordRefusal(ctx: Context, next: Next): Promise<void> {
    try {
      await next();
    } catch (err) {
      const code = isHookrelayError(err) ? err.code : null;
      if (err instanceof ApiKeyRefusal) await recordKeyRefused(ctx, audit, path, err, anonymous);
      else if (code === ErrorCode.missingToken || code === ErrorCode.invalidToken || code === ErrorCode.forbidden) await recordDenied(ctx, audit, path, code, anonymous);
      throw err;
    }
  };
}

async function recordDenied(ctx: Context, audit: AuditTrail, path: string, code: string, anonymous: AnonymousRefusals): Promise<void> {
  const by = auditContextOf(ctx);
  const action = routeAction(ctx.method, path);
  // The route's path as declared (never the client's raw path, which may be anything).
  let changes: Record<string, unknown> = { method: ctx.method, path };
  if (by.actor.kind === ActorKind.anonymous) {
    const skipped = anonymous.take();
    if (skipped === null) return;
    if (skipped > 0) changes = { ...changes, unrecorded_refusals: skipped };
  }
  await audit.refused(by, { action: action as AuditAction, orgId: by.actor.orgId, target: null }, AuditOutcome.denied, code, changes);
}

/**
 * A refused API key (unknown, revoked, expired): `api_key.use_refused`, in the key's organization
 * when it has a row (its admins see it in their trail), with the key's prefix (never the key),
 * within the anonymous refusals' bound (the caller proved nothing).
 */
async function recordKeyRefused(ctx: Context, audit: AuditTrail, path: string, err: ApiKeyRefusal, anonymous: AnonymousRefusals): Promise<void> {
  const skipped = anonymous.take();
  if (skipped === null) return;
  const { reason, orgId, name, prefix } = err.refusal;
  const changes: Record<string, unknown> = { method: ctx.method, path, reason, prefix, ...(skipped > 0 ? { unrecorded_refusals: skipped } : {}) };
  const target = name === null ? null : `api-key ${name}`;
  await audit.refused(auditContextOf(ctx), { action: AuditAction.apiKeyUseRefused, orgId, target }, AuditOutcome.denied, err.code, changes);
}

/** The action of each audited route (method and path), for its refusals: what it would have done. */
export const ROUTE_ACTIONS: Readonly<Record<string, string>> = {
  'POST /webhook/register_webhook': AuditAction.webhookRegister,
  'PUT /webhook/register_webhook': AuditAction.webhookRegister,
  'POST /webhook/rotate_secret': AuditAction.webhookSecretRotate,
  'POST /webhook/disable': AuditAction.webhookDisable,
  'POST /webhook/enable': AuditAction.webhookEnable,
  'POST /webhook/test': AuditAction.webhookTest,
  'POST /webhook/recover': AuditAction.webhookRecover,
  'POST /webhook/deliveries/:id/replay': AuditAction.deliveryReplay,
  'POST /webhook/deliveries/:id/retry': AuditAction.deliveryRetry,
  'PUT /users/update_role': AuditAction.roleUpdate,
  'POST /users/update_role': AuditAction.roleUpdate,
  'PATCH /users/update_role': AuditAction.roleUpdate,
  'POST /users/add_user': AuditAction.userAdd,
  'POST /users/remove_user': AuditAction.userRemove,
  'DELETE /users/remove_user': AuditAction.userRemove,
  'POST /api_keys/create_api_key': AuditAction.apiKeyCreate,
  'POST /api_keys/revoke_api_key': AuditAction.apiKeyRevoke,
};

/** The action a refusal of `method path` is recorded under. */
export function routeAction(method: string, path: string): string {
  return ROUTE_ACTIONS[`${method} ${path}`] ?? AuditAction.request;
}

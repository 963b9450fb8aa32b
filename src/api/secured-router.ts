import type { Context } from 'koa';
import type { AuditContext } from '../domain/audit.ts';
import type { Permission } from '../domain/permissions.ts';
import type { Principal } from '../domain/types.ts';

/**
 * Declares authenticated routes: every one gets version, rate limit, authentication and its
 * permission. The handler gets the caller and the request's audit context (`by`), which every
 * write method of the services takes first (services/audit.ts).
 */
export interface SecuredRouter {
  route(
    methods: readonly string[],
    path: string,
    permission: Permission,
    handler: (ctx: Context, principal: Principal, by: AuditContext) => void | Promise<void>,
    options?: { readonly body?: boolean },
  ): void;
}


import type { Context } from 'koa';
import type { Permission } from '../domain/permissions.ts';
import type { Principal } from '../domain/types.ts';

/** Declares authenticated routes: every one gets version, rate limit, authentication and its permission. */
export interface SecuredRouter {
  route(
    methods: readonly string[],
    path: string,
    permission: Permission,
    handler: (ctx: Context, principal: Principal) => void | Promise<void>,
    options?: { readonly body?: boolean },
  ): void;
}


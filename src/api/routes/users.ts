import { iso } from '../../domain/iso.ts';
import { Permission } from '../../domain/permissions.ts';
import type { User } from '../../domain/types.ts';
import type { RoleService } from '../../services/roles.ts';
import type { UserService } from '../../services/users.ts';
import type { Answer, Me, Message, Role, TeamUser, UserAdded } from '../schemas/answers.ts';
import { parseRequest } from '../request-validation.ts';
import { AddUserRequest, RemoveUserRequest, UpdateRoleRequest } from '../schemas/requests.ts';
import type { SecuredRouter } from '../secured-router.ts';

/** A user of the organization as the team endpoints answer it. */
function teamUserView(user: User): Answer<typeof TeamUser> {
  return { email: user.email, role_name: user.roleName, created_at: iso(user.createdAt), updated_at: iso(user.updatedAt) };
}

const body = (ctx: { state: { body?: unknown } }) => ctx.state.body as Record<string, unknown>;

export function registerUserRoutes(router: SecuredRouter, services: { roles: RoleService; users: UserService }): void {
  // Who the token is, for clients such as the console that show the caller and enable only the
  // actions its role grants (the API checks each call anyway).
  router.route(['GET'], '/users/me', Permission.webhookRead, (ctx, principal) => {
    ctx.body = { email: principal.email, organization_id: principal.orgId, role: principal.roleName, permissions: [...principal.permissions] } satisfies Answer<typeof Me>;
  });

  router.route(['GET'], '/users/get_roles', Permission.rolesRead, async (ctx) => {
    ctx.body = (await services.roles.list()).map(
      (role): Answer<typeof Role> => ({ name: role.name, description: role.description, permissions: [...role.permissions].sort() }),
    );
  });

  router.route(
    ['PUT', 'POST', 'PATCH'],
    '/users/update_role',
    Permission.usersManage,
    async (ctx, principal, by) => {
      const request = parseRequest(UpdateRoleRequest, body(ctx), 'the request body is invalid');
      const change = await services.users.setRole(by, principal.orgId, request);
      ctx.body = {
        message: change.changed
          ? `Role of ${change.user.email} updated from ${change.previousRoleName} to ${change.user.roleName}`
          : `${change.user.email} already has the role ${change.user.roleName}; nothing changed`,
      } satisfies Answer<typeof Message>;
    },
    { body: true },
  );

  registerTeamRoutes(router, services);
}

/**
 * The team: the organization's users, and adding and removing one (`hookrelay users add|remove`
 * do the same through the same service). Reading the team needs `roles:read`, as reading the
 * roles does: who holds which role is the other half of what the roles say, and viewers see both.
 * Every call is scoped to the token's organization; an e-mail of another one is 404 like an
 * unknown one.
 */
function registerTeamRoutes(router: SecuredRouter, services: { users: UserService }): void {
  router.route(['GET'], '/users/get_users', Permission.rolesRead, async (ctx, principal) => {
    ctx.body = (await services.users.list(principal.orgId)).map(teamUserView);
  });

  router.route(
    ['POST'],
    '/users/add_user',
    Permission.usersManage,
    async (ctx, principal, by) => {
      const request = parseRequest(AddUserRequest, body(ctx), 'the request body is invalid');
      const user = await services.users.add(by, { orgId: principal.orgId, email: request.email, roleName: request.role_name });
      ctx.status = 201;
      ctx.body = { message: `${user.email} added with the role ${user.roleName}`, ...teamUserView(user) } satisfies Answer<typeof UserAdded>;
    },
    { body: true },
  );

  router.route(
    ['POST'],
    '/users/remove_user',
    Permission.usersManage,
    async (ctx, principal, by) => {
      const request = parseRequest(RemoveUserRequest, body(ctx), 'the request body is invalid');
      // Never forced: the last user who can manage users stays (409 last_user_manager), as with update_role.
      const user = await services.users.remove(by, principal.orgId, request.email);
      ctx.body = {
        message: `${user.email} removed (had the role ${user.roleName}); their tokens are refused from now on`,
      } satisfies Answer<typeof Message>;
    },
    { body: true },
  );
}

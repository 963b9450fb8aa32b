import { Permission } from '../../domain/permissions.ts';
import type { RoleService } from '../../services/roles.ts';
import type { UserService } from '../../services/users.ts';
import type { Answer, Me, Message, Role } from '../schemas/answers.ts';
import { parseRequest } from '../request-validation.ts';
import { UpdateRoleRequest } from '../schemas/requests.ts';
import type { SecuredRouter } from '../secured-router.ts';

export function registerUserRoutes(router: SecuredRouter, services: { roles: RoleService; users: UserService }): void {
  // Who the token is, for clients such as the console that show the caller and enable only the
  // actions its role grants (the API checks each call anyway).
  router.route(['GET'], '/users/me', Permission.webhookRead, (ctx, principal) => {
    ctx.body = { email: principal.email, organization_id: principal.orgId, role: principal.roleName, permissions: [...principal.permissions] } satisfies Answer<typeof Me>;
  });

  router.route(['GET'], '/users/get_roles', Permission.rolesRead, async (ctx) => {
    ctx.body = (await services.roles.list()).map((role): Answer<typeof Role> => ({ name: role.name, description: role.description }));
  });

  router.route(
    ['PUT', 'POST', 'PATCH'],
    '/users/update_role',
    Permission.usersManage,
    async (ctx, principal) => {
      const body = parseRequest(UpdateRoleRequest, ctx.state.body as Record<string, unknown>, 'the request body is invalid');
      const change = await services.users.setRole(principal.orgId, body);
      ctx.body = {
        message: change.changed
          ? `Role of ${change.user.email} updated from ${change.previousRoleName} to ${change.user.roleName}`
          : `${change.user.email} already has the role ${change.user.roleName}; nothing changed`,
      } satisfies Answer<typeof Message>;
    },
    { body: true },
  );
}

import { ErrorCode, excerpt, HookrelayError, validationError, type InvalidParam } from '../domain/errors.ts';
import { ALL_PERMISSIONS, isPermission, type Permission } from '../domain/permissions.ts';
import type { Role } from '../domain/types.ts';
import { checkRoleName } from '../domain/validation.ts';
import type { Store } from '../store/store.ts';

export function createRoleService(store: Store) {
  return {
    list(): Role[] {
      return store.roles.list();
    },
    add(input: { name: string; description: string; permissions: readonly string[] }): Role {
      const invalid: InvalidParam[] = [];
      const nameProblem = checkRoleName(input.name);
      if (nameProblem) invalid.push({ name: 'name', reason: nameProblem });
      const description = input.description.trim();
      if (description === '' || description.length > 500) invalid.push({ name: 'description', reason: 'must be 1-500 characters' });
      const unknown = input.permissions.filter((p) => !isPermission(p));
      if (unknown.length > 0) {
        invalid.push({ name: 'permissions', reason: `unknown permission(s) ${unknown.join(', ')}; valid: ${ALL_PERMISSIONS.join(', ')}` });
      }
      if (invalid.length > 0) throw validationError('the role is invalid', invalid);
      const permissions = [...new Set(input.permissions)] as Permission[];
      if (!store.roles.insert({ name: input.name, description, permissions }, store.clock.now())) {
        throw new HookrelayError(ErrorCode.roleExists, `role ${excerpt(input.name)} already exists`);
      }
      return { name: input.name, description, permissions, builtin: false };
    },
    /** The role, or a `role_not_found` error that lists the valid names. */
    require(name: string): Role {
      const role = store.roles.get(name);
      if (role) return role;
      const valid = store.roles.list().map((r) => r.name);
      throw new HookrelayError(ErrorCode.roleNotFound, `role ${excerpt(name)} does not exist; valid roles: ${valid.join(', ')}`, {
        invalidParams: [{ name: 'role_name', reason: `must be one of: ${valid.join(', ')}` }],
        details: { valid_role_names: valid },
      });
    },
  };
}
export type RoleService = ReturnType<typeof createRoleService>;

import { ErrorCode, excerpt, HookrelayError, validationError, type InvalidParam } from '../domain/errors.ts';
import { ALL_PERMISSIONS, isPermission, type Permission } from '../domain/permissions.ts';
import type { Role } from '../domain/types.ts';
import { checkRoleName, checkText } from '../domain/validation.ts';
import type { Store, Tx } from '../store/repos.ts';
import { AuditAction, type AuditContext } from '../domain/audit.ts';
import type { AuditRecorder, AuditTrail } from './audit.ts';

/** The role, or a `role_not_found` error that lists the valid names. */
async function requireRole(tx: Tx, name: string): Promise<Role> {
  const role = await tx.roles.get(name);
  if (role) return role;
  const valid = (await tx.roles.list()).map((r) => r.name);
  throw new HookrelayError(ErrorCode.roleNotFound, `role ${excerpt(name)} does not exist; valid roles: ${valid.join(', ')}`, {
    invalidParams: [{ name: 'role_name', reason: `must be one of: ${valid.join(', ')}` }],
    details: { valid_role_names: valid },
  });
}

export function createRoleService(store: Store, audit: AuditTrail) {
  return {
    list(): Promise<Role[]> {
      return store.read((tx) => tx.roles.list());
    },
    add(by: AuditContext, input: { name: string; description: string; permissions: readonly string[] }): Promise<Role> {
      return audit.change(by, { action: AuditAction.roleAdd, orgId: null, target: input.name }, (rec) => addRole(store, rec, input));
    },
    /** The role, or a `role_not_found` error that lists the valid names; in `tx` when given. */
    require(name: string, tx?: Tx): Promise<Role> {
      return tx ? requireRole(tx, name) : store.read((t) => requireRole(t, name));
    },
  };
}
export type RoleService = ReturnType<typeof createRoleService>;

/** A custom role, checked and inserted; its entry recorded in the same transaction. */
async function addRole(store: Store, rec: AuditRecorder, input: { name: string; description: string; permissions: readonly string[] }): Promise<Role> {
  const invalid: InvalidParam[] = [];
  const nameProblem = checkRoleName(input.name);
  if (nameProblem) invalid.push({ name: 'name', reason: nameProblem });
  const description = input.description.trim();
  const descriptionProblem = checkText(description, 500);
  if (descriptionProblem) invalid.push({ name: 'description', reason: descriptionProblem });
  const unknown = input.permissions.filter((p) => !isPermission(p));
  if (unknown.length > 0) {
    invalid.push({ name: 'permissions', reason: `unknown permission(s) ${unknown.join(', ')}; valid: ${ALL_PERMISSIONS.join(', ')}` });
  }
  if (invalid.length > 0) throw validationError('the role is invalid', invalid);
  const permissions = [...new Set(input.permissions)] as Permission[];
  await store.transaction(async (tx) => {
    if (!(await tx.roles.insert({ name: input.name, description, permissions }, store.clock.now()))) {
      throw new HookrelayError(ErrorCode.roleExists, `role ${excerpt(input.name)} already exists`);
    }
    await rec.record(tx, { changes: { description: { before: null, after: description }, permissions: { before: null, after: permissions } } });
  });
  return { name: input.name, description, permissions, builtin: false };
}

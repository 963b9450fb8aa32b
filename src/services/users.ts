import { ErrorCode, excerpt, HookrelayError, validationError, type InvalidParam } from '../domain/errors.ts';
import { Permission } from '../domain/permissions.ts';
import type { Principal, User } from '../domain/types.ts';
import { checkEmail, emailKey } from '../domain/validation.ts';
import type { Store, Tx } from '../store/repos.ts';
import { AuditAction, type AuditContext } from '../domain/audit.ts';
import type { AuditRecorder, AuditTrail } from './audit.ts';
import type { OrgService } from './orgs.ts';
import type { RoleService } from './roles.ts';

export interface RoleChange {
  readonly user: User;
  readonly previousRoleName: string;
  readonly changed: boolean;
}

function checkStringField(name: string, value: unknown, invalid: InvalidParam[]): value is string {
  if (value === undefined || value === null) {
    invalid.push({ name, reason: 'is required' });
    return false;
  }
  if (typeof value !== 'string') {
    invalid.push({ name, reason: 'must be a string' });
    return false;
  }
  return true;
}

export function createUserService(store: Store, orgs: OrgService, roles: RoleService, audit: AuditTrail) {
  function notFound(orgId: string, email: string): HookrelayError {
    // Same answer whether the e-mail is unknown or belongs to another organization.
    return new HookrelayError(ErrorCode.userNotFound, `no user with e-mail ${excerpt(email)} in organization "${orgId}"`, {
      invalidParams: [{ name: 'email', reason: 'is not the e-mail of a user of this organization' }],
    });
  }

  /** Refuses to leave an organization without anyone who can manage users. */
  async function assertAnotherManager(tx: Tx, user: User): Promise<void> {
    const current = await roles.require(user.roleName, tx);
    if (!current.permissions.includes(Permission.usersManage)) return;
    if ((await tx.users.countOthersWithPermission(user.orgId, user.id, Permission.usersManage)) === 0) {
      throw new HookrelayError(
        ErrorCode.lastUserManager,
        `${user.email} is the last user of organization "${user.orgId}" who can manage users; give another user such a role first`,
      );
    }
  }

  /**
   * setRole's checks and change, its entry recorded in the same transaction.
   */
  async function setRole(rec: AuditRecorder, orgId: string, input: { email: unknown; role_name: unknown }): Promise<RoleChange> {
    const invalid: InvalidParam[] = [];
    if (checkStringField('email', input.email, invalid)) {
      const problem = checkEmail(input.email);
      if (problem) invalid.push({ name: 'email', reason: problem });
    }
    checkStringField('role_name', input.role_name, invalid);
    if (invalid.length > 0) throw validationError('the request body is invalid', invalid);
    const email = input.email as string;
    const roleName = input.role_name as string;

    return store.transaction(async (tx) => {
      const user = await tx.users.findByEmail(orgId, emailKey(email));
      if (!user) throw notFound(orgId, email.trim());
      const role = await roles.require(roleName, tx);
      if (user.roleName === role.name) {
        await rec.record(tx, { target: user.email, changes: null });
        return { user, previousRoleName: user.roleName, changed: false };
      }
      if (!role.permissions.includes(Permission.usersManage)) await assertAnotherManager(tx, user);
      const now = store.clock.now();
      await tx.users.setRole(user.id, role.name, now);
      await rec.record(tx, { target: user.email, changes: { role_name: { before: user.roleName, after: role.name } } });
      return { user: { ...user, roleName: role.name, updatedAt: now }, previousRoleName: user.roleName, changed: true };
    });
  }

  return {
    add(by: AuditContext, input: { orgId: string; email: string; roleName: string }): Promise<User> {
      return audit.change(by, { action: AuditAction.userAdd, orgId: input.orgId, target: input.email.trim() }, async (rec) => {
        const problem = checkEmail(input.email);
        if (problem) throw validationError(`email ${problem}`, [{ name: 'email', reason: problem }]);
        return store.transaction(async (tx) => {
          await orgs.require(input.orgId, tx);
          await roles.require(input.roleName, tx);
          const email = input.email.trim();
          const user = await tx.users.insert({ orgId: input.orgId, email, emailKey: emailKey(email), roleName: input.roleName }, store.clock.now());
          if (!user) throw new HookrelayError(ErrorCode.userExists, `a user with e-mail ${excerpt(email)} already exists in organization "${input.orgId}"`);
          await rec.record(tx, { changes: { role_name: { before: null, after: user.roleName } } });
          return user;
        });
      });
    },

    list(orgId: string): Promise<User[]> {
      return store.read(async (tx) => {
        await orgs.require(orgId, tx);
        return tx.users.listByOrg(orgId);
      });
    },

    /**
     * Changes a user's role within `orgId`. Input comes straight from a request body, so
     * it is checked here: both fields required strings, a well-formed e-mail.
     */
    setRole(by: AuditContext, orgId: string, input: { email: unknown; role_name: unknown }): Promise<RoleChange> {
      const target = typeof input.email === 'string' ? input.email.trim() : null;
      return audit.change(by, { action: AuditAction.roleUpdate, orgId, target }, (rec) => setRole(rec, orgId, input));
    },

    remove(by: AuditContext, orgId: string, email: string, options: { force?: boolean } = {}): Promise<User> {
      return audit.change(by, { action: AuditAction.userRemove, orgId, target: email.trim() }, (rec) =>
        store.transaction(async (tx) => {
          const user = await tx.users.findByEmail(orgId, emailKey(email));
          if (!user) throw notFound(orgId, email.trim());
          if (!options.force) await assertAnotherManager(tx, user);
          await tx.users.remove(user.id);
          await rec.record(tx, { target: user.email, changes: { role_name: { before: user.roleName, after: null }, ...(options.force ? { forced: true } : {}) } });
          return user;
        }),
      );
    },

    /** The caller behind a verified token, with the permissions of their current role; null if unknown. */
    principal(orgId: string, email: string): Promise<Principal | null> {
      return store.read(async (tx) => {
        const user = await tx.users.findByEmail(orgId, emailKey(email));
        if (!user) return null;
        const role = await tx.roles.get(user.roleName);
        return { orgId, email: user.email, roleName: user.roleName, permissions: role?.permissions ?? [] };
      });
    },
  };
}
export type UserService = ReturnType<typeof createUserService>;

import type { User } from '../../domain/types.ts';
import type { Permission } from '../../domain/permissions.ts';
import type { Db } from './connection.ts';
import type { UsersRepo } from '../repos.ts';
import { toUser, type UserRow } from '../row-mappers.ts';
import { positional, USER_SQL } from '../sql.ts';
import type { Sync } from './sync-repo.ts';

export function createSqliteUsersRepo(db: Db): Sync<UsersRepo> {
  const insert = db.prepare<[string, string, string, string, number, number], { id: number }>(USER_SQL.insert(positional('org', 'email', 'emailKey', 'role', 'createdAt', 'updatedAt')));
  const byEmail = db.prepare<[string, string], UserRow>(USER_SQL.byEmail(positional('org', 'emailKey')));
  const byOrg = db.prepare<[string], UserRow>(USER_SQL.byOrg(positional('org')));
  const setRole = db.prepare<[string, number, number]>(USER_SQL.setRole(positional('role', 'now', 'id')));
  const remove = db.prepare<[number]>(USER_SQL.remove(positional('id')));
  const countOthersWith = db.prepare<[string, number, string], { n: number }>(USER_SQL.countOthersWithPermission('sqlite', positional('org', 'except', 'permission')));

  return {
    insert(user: { orgId: string; email: string; emailKey: string; roleName: string }, now: number): User | null {
      const row = insert.get(user.orgId, user.email, user.emailKey, user.roleName, now, now);
      if (row === undefined) return null;
      return { id: row.id, orgId: user.orgId, email: user.email, roleName: user.roleName, createdAt: now, updatedAt: now };
    },
    findByEmail(orgId: string, emailKey: string): User | null {
      const row = byEmail.get(orgId, emailKey);
      return row ? toUser(row) : null;
    },
    listByOrg(orgId: string): User[] {
      return byOrg.all(orgId).map(toUser);
    },
    setRole(userId: number, roleName: string, now: number): void {
      setRole.run(roleName, now, userId);
    },
    remove(userId: number): void {
      remove.run(userId);
    },
    countOthersWithPermission(orgId: string, exceptUserId: number, permission: Permission): number {
      return countOthersWith.get(orgId, exceptUserId, permission)?.n ?? 0;
    },
  };
}

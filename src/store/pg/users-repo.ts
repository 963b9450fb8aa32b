import type { User } from '../../domain/types.ts';
import type { Permission } from '../../domain/permissions.ts';
import type { UsersRepo } from '../repos.ts';
import { toUser, type UserRow } from '../row-mappers.ts';
import { numbered, USER_SQL } from '../sql.ts';
import type { PgConnection } from './connection.ts';

const INSERT = USER_SQL.insert(numbered('org', 'email', 'emailKey', 'role', 'createdAt', 'updatedAt'));
const BY_EMAIL = USER_SQL.byEmail(numbered('org', 'emailKey'));
const BY_ORG = USER_SQL.byOrg(numbered('org'));
const SET_ROLE = USER_SQL.setRole(numbered('role', 'now', 'id'));
const REMOVE = USER_SQL.remove(numbered('id'));
const COUNT_OTHERS_WITH = USER_SQL.countOthersWithPermission('postgres', numbered('org', 'except', 'permission'));

/**
 * Users on PostgreSQL: the statements of ../sql.ts, as on SQLite. Ids come from an identity
 * column: unlike SQLite's rowid (max + 1), they are never handed out twice, and an insert that
 * finds the e-mail taken, or rolls back, still uses one up.
 */
export function createPgUsersRepo(db: PgConnection): UsersRepo {
  return {
    async insert(user: { orgId: string; email: string; emailKey: string; roleName: string }, now: number): Promise<User | null> {
      const { rows } = await db.query<{ id: number }>(INSERT, [user.orgId, user.email, user.emailKey, user.roleName, now, now]);
      const id = rows[0]?.id;
      if (id === undefined) return null;
      return { id, orgId: user.orgId, email: user.email, roleName: user.roleName, createdAt: now, updatedAt: now };
    },
    async findByEmail(orgId: string, emailKey: string): Promise<User | null> {
      const { rows } = await db.query<UserRow>(BY_EMAIL, [orgId, emailKey]);
      return rows[0] === undefined ? null : toUser(rows[0]);
    },
    async listByOrg(orgId: string): Promise<User[]> {
      const { rows } = await db.query<UserRow>(BY_ORG, [orgId]);
      return rows.map(toUser);
    },
    async setRole(userId: number, roleName: string, now: number): Promise<void> {
      await db.query(SET_ROLE, [roleName, now, userId]);
    },
    async remove(userId: number): Promise<void> {
      await db.query(REMOVE, [userId]);
    },
    async countOthersWithPermission(orgId: string, exceptUserId: number, permission: Permission): Promise<number> {
      const { rows } = await db.query<{ n: number }>(COUNT_OTHERS_WITH, [orgId, exceptUserId, permission]);
      return rows[0]?.n ?? 0;
    },
  };
}

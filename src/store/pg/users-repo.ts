import type { User } from '../../domain/types.ts';
import type { Permission } from '../../domain/permissions.ts';
import type { UsersRepo } from '../repos.ts';
import { toUser, USER_COLUMNS as COLUMNS, type UserRow } from '../rows.ts';
import type { PgConnection } from './connection.ts';


/**
 * Users on PostgreSQL, as ../sqlite/users-repo.ts on SQLite. Ids come from an identity column: unlike
 * SQLite's rowid (max + 1), they are never handed out twice, and an insert that finds the
 * e-mail taken, or rolls back, still uses one up.
 */
export function createPgUsersRepo(db: PgConnection): UsersRepo {
  return {
    async insert(user: { orgId: string; email: string; emailKey: string; roleName: string }, now: number): Promise<User | null> {
      const { rows } = await db.query<{ id: number }>(
        `INSERT INTO users (org_id, email, email_key, role_name, created_at, updated_at) VALUES ($1, $2, $3, $4, $5, $5)
         ON CONFLICT (org_id, email_key) DO NOTHING RETURNING id`,
        [user.orgId, user.email, user.emailKey, user.roleName, now],
      );
      const id = rows[0]?.id;
      if (id === undefined) return null;
      return { id, orgId: user.orgId, email: user.email, roleName: user.roleName, createdAt: now, updatedAt: now };
    },
    async findByEmail(orgId: string, emailKey: string): Promise<User | null> {
      const { rows } = await db.query<UserRow>(`SELECT ${COLUMNS} FROM users WHERE org_id = $1 AND email_key = $2`, [orgId, emailKey]);
      return rows[0] === undefined ? null : toUser(rows[0]);
    },
    /** By e-mail key, which is COLLATE "C": in byte order, as SQLite sorts it. */
    async listByOrg(orgId: string): Promise<User[]> {
      const { rows } = await db.query<UserRow>(`SELECT ${COLUMNS} FROM users WHERE org_id = $1 ORDER BY email_key`, [orgId]);
      return rows.map(toUser);
    },
    async setRole(userId: number, roleName: string, now: number): Promise<void> {
      await db.query('UPDATE users SET role_name = $1, updated_at = $2 WHERE id = $3', [roleName, now, userId]);
    },
    async remove(userId: number): Promise<void> {
      await db.query('DELETE FROM users WHERE id = $1', [userId]);
    },
    /** Users of the organization, other than one, whose role grants the permission (an element of the role's JSON array). */
    async countOthersWithPermission(orgId: string, exceptUserId: number, permission: Permission): Promise<number> {
      const { rows } = await db.query<{ n: number }>(
        `SELECT count(*) AS n FROM users u JOIN roles r ON r.name = u.role_name
         WHERE u.org_id = $1 AND u.id <> $2 AND r.permissions::jsonb ? $3`,
        [orgId, exceptUserId, permission],
      );
      return rows[0]?.n ?? 0;
    },
  };
}

import type { User } from '../../domain/types.ts';
import type { Permission } from '../../domain/permissions.ts';
import type { Db } from './db.ts';
import type { UsersRepo } from '../repos.ts';
import { toUser, USER_COLUMNS as COLUMNS, type UserRow } from '../rows.ts';
import type { Sync } from './sync-repo.ts';


export function createUsersRepo(db: Db): Sync<UsersRepo> {
  const insert = db.prepare<[string, string, string, string, number, number]>(
    'INSERT INTO users (org_id, email, email_key, role_name, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (org_id, email_key) DO NOTHING',
  );
  const byEmail = db.prepare<[string, string], UserRow>(`SELECT ${COLUMNS} FROM users WHERE org_id = ? AND email_key = ?`);
  const byOrg = db.prepare<[string], UserRow>(`SELECT ${COLUMNS} FROM users WHERE org_id = ? ORDER BY email_key`);
  const setRole = db.prepare<[string, number, number]>('UPDATE users SET role_name = ?, updated_at = ? WHERE id = ?');
  const remove = db.prepare<[number]>('DELETE FROM users WHERE id = ?');
  // Users of the organization, other than one, whose role grants the given permission.
  const countOthersWith = db.prepare<[string, number, string], { n: number }>(`
    SELECT count(*) AS n FROM users u JOIN roles r ON r.name = u.role_name
    WHERE u.org_id = ? AND u.id <> ? AND EXISTS (SELECT 1 FROM json_each(r.permissions) WHERE value = ?)`);

  return {
    /** Inserts; returns the new user, or null when the e-mail is taken in that organization. */
    insert(user: { orgId: string; email: string; emailKey: string; roleName: string }, now: number): User | null {
      const info = insert.run(user.orgId, user.email, user.emailKey, user.roleName, now, now);
      if (info.changes !== 1) return null;
      return { id: Number(info.lastInsertRowid), orgId: user.orgId, email: user.email, roleName: user.roleName, createdAt: now, updatedAt: now };
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

import type { Permission } from '../../domain/permissions.ts';
import type { Role } from '../../domain/types.ts';
import type { RolesRepo } from '../repos.ts';
import { ROLE_COLUMNS, toRole, type RoleRow } from '../rows.ts';
import type { PgConnection } from './connection.ts';


/** Roles on PostgreSQL, as ../sqlite/roles-repo.ts on SQLite; `name` is COLLATE "C", so list() sorts by bytes as SQLite does. */
export function createPgRolesRepo(db: PgConnection): RolesRepo {
  return {
    async list(): Promise<Role[]> {
      const { rows } = await db.query<RoleRow>(`SELECT ${ROLE_COLUMNS} FROM roles ORDER BY name`);
      return rows.map(toRole);
    },
    async get(name: string): Promise<Role | null> {
      const { rows } = await db.query<RoleRow>(`SELECT ${ROLE_COLUMNS} FROM roles WHERE name = $1`, [name]);
      return rows[0] === undefined ? null : toRole(rows[0]);
    },
    async insert(role: { name: string; description: string; permissions: readonly Permission[] }, now: number): Promise<boolean> {
      const r = await db.query(
        'INSERT INTO roles (name, description, permissions, builtin, created_at) VALUES ($1, $2, $3, false, $4) ON CONFLICT (name) DO NOTHING',
        [role.name, role.description, JSON.stringify(role.permissions), now],
      );
      return r.rowCount === 1;
    },
  };
}

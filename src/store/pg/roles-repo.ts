import type { Permission } from '../../domain/permissions.ts';
import type { Role } from '../../domain/types.ts';
import type { RolesRepo } from '../repos.ts';
import { toRole, type RoleRow } from '../row-mappers.ts';
import { numbered, ROLE_SQL } from '../sql.ts';
import type { PgConnection } from './connection.ts';

const BY_NAME = ROLE_SQL.byName(numbered('name'));
const INSERT = ROLE_SQL.insert(numbered('name', 'description', 'permissions', 'now'));

/** Roles on PostgreSQL: the statements of ../sql.ts, as on SQLite. */
export function createPgRolesRepo(db: PgConnection): RolesRepo {
  return {
    async list(): Promise<Role[]> {
      const { rows } = await db.query<RoleRow>(ROLE_SQL.all);
      return rows.map(toRole);
    },
    async get(name: string): Promise<Role | null> {
      const { rows } = await db.query<RoleRow>(BY_NAME, [name]);
      return rows[0] === undefined ? null : toRole(rows[0]);
    },
    async insert(role: { name: string; description: string; permissions: readonly Permission[] }, now: number): Promise<boolean> {
      const r = await db.query(INSERT, [role.name, role.description, JSON.stringify(role.permissions), now]);
      return r.rowCount === 1;
    },
  };
}

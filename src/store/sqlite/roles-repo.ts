import type { Permission } from '../../domain/permissions.ts';
import type { Role } from '../../domain/types.ts';
import type { Db } from './connection.ts';
import type { RolesRepo } from '../repos.ts';
import { toRole, type RoleRow } from '../row-mappers.ts';
import { positional, ROLE_SQL } from '../sql.ts';
import type { Sync } from './sync-repo.ts';

export function createSqliteRolesRepo(db: Db): Sync<RolesRepo> {
  const all = db.prepare<[], RoleRow>(ROLE_SQL.all);
  const byName = db.prepare<[string], RoleRow>(ROLE_SQL.byName(positional('name')));
  const insert = db.prepare<[string, string, string, number]>(ROLE_SQL.insert(positional('name', 'description', 'permissions', 'now')));
  return {
    list(): Role[] {
      return all.all().map(toRole);
    },
    get(name: string): Role | null {
      const row = byName.get(name);
      return row ? toRole(row) : null;
    },
    insert(role: { name: string; description: string; permissions: readonly Permission[] }, now: number): boolean {
      return insert.run(role.name, role.description, JSON.stringify(role.permissions), now).changes === 1;
    },
  };
}

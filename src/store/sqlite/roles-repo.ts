import type { Permission } from '../../domain/permissions.ts';
import type { Role } from '../../domain/types.ts';
import type { Db } from './db.ts';
import type { RolesRepo } from '../repos.ts';
import { ROLE_COLUMNS, toRole, type RoleRow } from '../rows.ts';
import type { Sync } from './sync-repo.ts';


export function createRolesRepo(db: Db): Sync<RolesRepo> {
  const all = db.prepare<[], RoleRow>(`SELECT ${ROLE_COLUMNS} FROM roles ORDER BY name`);
  const byName = db.prepare<[string], RoleRow>(`SELECT ${ROLE_COLUMNS} FROM roles WHERE name = ?`);
  const insert = db.prepare<[string, string, string, number]>(
    'INSERT INTO roles (name, description, permissions, builtin, created_at) VALUES (?, ?, ?, 0, ?) ON CONFLICT (name) DO NOTHING',
  );
  return {
    list(): Role[] {
      return all.all().map(toRole);
    },
    get(name: string): Role | null {
      const row = byName.get(name);
      return row ? toRole(row) : null;
    },
    /** Inserts a custom role; returns false when the name is taken. */
    insert(role: { name: string; description: string; permissions: readonly Permission[] }, now: number): boolean {
      return insert.run(role.name, role.description, JSON.stringify(role.permissions), now).changes === 1;
    },
  };
}

import type { Organization } from '../../domain/types.ts';
import type { Db } from './db.ts';
import type { OrgsRepo } from '../repos.ts';
import { ORG_COLUMNS, toOrg, type OrgRow } from '../rows.ts';
import type { Sync } from './sync-repo.ts';


export function createOrgsRepo(db: Db): Sync<OrgsRepo> {
  const insert = db.prepare<[string, string, number]>('INSERT INTO organizations (id, name, created_at) VALUES (?, ?, ?) ON CONFLICT (id) DO NOTHING');
  const byId = db.prepare<[string], OrgRow>(`SELECT ${ORG_COLUMNS} FROM organizations WHERE id = ?`);
  const all = db.prepare<[], OrgRow>(`SELECT ${ORG_COLUMNS} FROM organizations ORDER BY id`);
  return {
    /** Inserts; returns false when the id is taken. */
    insert(org: Organization): boolean {
      return insert.run(org.id, org.name, org.createdAt).changes === 1;
    },
    get(id: string): Organization | null {
      const row = byId.get(id);
      return row ? toOrg(row) : null;
    },
    list(): Organization[] {
      return all.all().map(toOrg);
    },
  };
}

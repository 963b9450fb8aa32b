import type { Organization } from '../../domain/types.ts';
import type { Db } from './connection.ts';
import type { OrgsRepo } from '../repos.ts';
import { toOrg, type OrgRow } from '../row-mappers.ts';
import { ORG_SQL, positional } from '../sql.ts';
import type { Sync } from './sync-repo.ts';

export function createSqliteOrgsRepo(db: Db): Sync<OrgsRepo> {
  const insert = db.prepare<[string, string, number]>(ORG_SQL.insert(positional('id', 'name', 'createdAt')));
  const byId = db.prepare<[string], OrgRow>(ORG_SQL.byId(positional('id')));
  const all = db.prepare<[], OrgRow>(ORG_SQL.all);
  return {
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

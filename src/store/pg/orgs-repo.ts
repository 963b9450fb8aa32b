import type { Organization } from '../../domain/types.ts';
import type { OrgsRepo } from '../repos.ts';
import { toOrg, type OrgRow } from '../row-mappers.ts';
import { numbered, ORG_SQL } from '../sql.ts';
import type { PgConnection } from './connection.ts';

const INSERT = ORG_SQL.insert(numbered('id', 'name', 'createdAt'));
const BY_ID = ORG_SQL.byId(numbered('id'));

/** Organizations on PostgreSQL: the statements of ../sql.ts, as on SQLite. */
export function createPgOrgsRepo(db: PgConnection): OrgsRepo {
  return {
    async insert(org: Organization): Promise<boolean> {
      const r = await db.query(INSERT, [org.id, org.name, org.createdAt]);
      return r.rowCount === 1;
    },
    async get(id: string): Promise<Organization | null> {
      const { rows } = await db.query<OrgRow>(BY_ID, [id]);
      return rows[0] === undefined ? null : toOrg(rows[0]);
    },
    async list(): Promise<Organization[]> {
      const { rows } = await db.query<OrgRow>(ORG_SQL.all);
      return rows.map(toOrg);
    },
  };
}

import type { Organization } from '../../domain/types.ts';
import type { OrgsRepo } from '../repos.ts';
import { ORG_COLUMNS, toOrg, type OrgRow } from '../rows.ts';
import type { PgConnection } from './connection.ts';


/** Organizations on PostgreSQL, as ../sqlite/orgs-repo.ts on SQLite; `id` is COLLATE "C", so list() sorts by bytes as SQLite does. */
export function createPgOrgsRepo(db: PgConnection): OrgsRepo {
  return {
    async insert(org: Organization): Promise<boolean> {
      const r = await db.query('INSERT INTO organizations (id, name, created_at) VALUES ($1, $2, $3) ON CONFLICT (id) DO NOTHING', [org.id, org.name, org.createdAt]);
      return r.rowCount === 1;
    },
    async get(id: string): Promise<Organization | null> {
      const { rows } = await db.query<OrgRow>(`SELECT ${ORG_COLUMNS} FROM organizations WHERE id = $1`, [id]);
      return rows[0] === undefined ? null : toOrg(rows[0]);
    },
    async list(): Promise<Organization[]> {
      const { rows } = await db.query<OrgRow>(`SELECT ${ORG_COLUMNS} FROM organizations ORDER BY id`);
      return rows.map(toOrg);
    },
  };
}

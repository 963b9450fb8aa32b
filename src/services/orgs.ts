import { ErrorCode, HookrelayError, validationError } from '../domain/errors.ts';
import type { Organization } from '../domain/types.ts';
import { checkOrgId, checkText } from '../domain/validation.ts';
import type { Store, Tx } from '../store/repos.ts';
import { AuditAction, type AuditContext } from '../domain/audit.ts';
import type { AuditTrail } from './audit.ts';

/** The organization, or an `organization_not_found` error. */
async function requireOrg(tx: Tx, id: string): Promise<Organization> {
  const org = await tx.orgs.get(id);
  if (!org) throw new HookrelayError(ErrorCode.orgNotFound, `organization "${id}" does not exist; create it with: hookrelay orgs add ${id}`);
  return org;
}

export function createOrgService(store: Store, audit: AuditTrail) {
  return {
    add(by: AuditContext, input: { id: string; name?: string | undefined }): Promise<Organization> {
      return audit.change(by, { action: AuditAction.orgAdd, orgId: input.id, target: input.id }, async (rec) => {
        const problem = checkOrgId(input.id);
        if (problem) throw validationError(`organization id ${problem}`, [{ name: 'id', reason: problem }]);
        const name = input.name?.trim() || input.id;
        const nameProblem = checkText(name, 500);
        if (nameProblem) throw validationError(`organization name ${nameProblem}`, [{ name: 'name', reason: nameProblem }]);
        const org: Organization = { id: input.id, name, createdAt: store.clock.now() };
        await store.transaction(async (tx) => {
          if (!(await tx.orgs.insert(org))) throw new HookrelayError(ErrorCode.orgExists, `organization "${input.id}" already exists`);
          await rec.record(tx, { changes: { name: { before: null, after: name } } });
        });
        return org;
      });
    },
    list(): Promise<Organization[]> {
      return store.read((tx) => tx.orgs.list());
    },
    /** The organization, or an `organization_not_found` error; in `tx` when given. */
    require(id: string, tx?: Tx): Promise<Organization> {
      return tx ? requireOrg(tx, id) : store.read((t) => requireOrg(t, id));
    },
  };
}
export type OrgService = ReturnType<typeof createOrgService>;

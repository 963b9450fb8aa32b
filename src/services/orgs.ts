import { ErrorCode, HookrelayError, validationError } from '../domain/errors.ts';
import type { Organization } from '../domain/types.ts';
import { checkOrgId, checkText } from '../domain/validation.ts';
import type { Store, Tx } from '../store/repos.ts';

/** The organization, or an `organization_not_found` error. */
async function requireOrg(tx: Tx, id: string): Promise<Organization> {
  const org = await tx.orgs.get(id);
  if (!org) throw new HookrelayError(ErrorCode.orgNotFound, `organization "${id}" does not exist; create it with: hookrelay orgs add ${id}`);
  return org;
}

export function createOrgService(store: Store) {
  return {
    async add(input: { id: string; name?: string | undefined }): Promise<Organization> {
      const problem = checkOrgId(input.id);
      if (problem) throw validationError(`organization id ${problem}`, [{ name: 'id', reason: problem }]);
      const name = input.name?.trim() || input.id;
      const nameProblem = checkText(name, 500);
      if (nameProblem) throw validationError(`organization name ${nameProblem}`, [{ name: 'name', reason: nameProblem }]);
      const org: Organization = { id: input.id, name, createdAt: store.clock.now() };
      if (!(await store.transaction((tx) => tx.orgs.insert(org)))) {
        throw new HookrelayError(ErrorCode.orgExists, `organization "${input.id}" already exists`);
      }
      return org;
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

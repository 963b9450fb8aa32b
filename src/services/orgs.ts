import { ErrorCode, HookrelayError, validationError } from '../domain/errors.ts';
import type { Organization } from '../domain/types.ts';
import { checkOrgId } from '../domain/validation.ts';
import type { Store } from '../store/store.ts';

export function createOrgService(store: Store) {
  return {
    add(input: { id: string; name?: string | undefined }): Organization {
      const problem = checkOrgId(input.id);
      if (problem) throw validationError(`organization id ${problem}`, [{ name: 'id', reason: problem }]);
      const name = input.name?.trim() || input.id;
      const org: Organization = { id: input.id, name, createdAt: store.clock.now() };
      if (!store.orgs.insert(org)) {
        throw new HookrelayError(ErrorCode.orgExists, `organization "${input.id}" already exists`);
      }
      return org;
    },
    list(): Organization[] {
      return store.orgs.list();
    },
    /** The organization, or an `organization_not_found` error. */
    require(id: string): Organization {
      const org = store.orgs.get(id);
      if (!org) throw new HookrelayError(ErrorCode.orgNotFound, `organization "${id}" does not exist; create it with: hookrelay orgs add ${id}`);
      return org;
    },
  };
}
export type OrgService = ReturnType<typeof createOrgService>;

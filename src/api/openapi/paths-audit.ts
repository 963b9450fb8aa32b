/** The document's operation on the audit trail (GET /audit/list). */
import { ErrorCode } from '../../domain/errors.ts';
import { Permission } from '../../domain/permissions.ts';
import { AuditPage, AuditQuery } from '../schemas/audit.ts';
import { operation, queryParameters } from './operation.ts';
import { answer, problemAnswer, securedErrors } from './responses.ts';

type Json = Record<string, unknown>;

export function auditPaths(): Record<string, Json> {
  return {
    '/audit/list': {
      get: operation({
        tag: 'audit',
        operationId: 'listAuditEntries',
        summary: "The organization's audit trail, newest first",
        description:
          "Who changed what in the caller's organization, newest first: every change made through the API, the console and the CLI (roles, users, the webhook and its secret, replays, retries, recoveries, tests, tokens and console links issued), and every refused attempt to change something (401 and 403 on an operation that needs a manage permission) made with a token of the organization. Only the caller's organization's entries. Filters: `since`, `actor`, `action`, `outcome`. Pass `next_cursor` as `cursor` for the next (older) page. Each entry carries its `hash`, chained to the previous entry's: `hookrelay audit verify` checks the chain on the server (docs/operations.md, \"Audit trail\"). Permission: `audit:read` (saas_admin). Added within v1.",
        permission: Permission.auditRead,
        parameters: queryParameters(AuditQuery),
        responses: {
          200: answer('A page of entries.', AuditPage),
          ...securedErrors({ body: false }),
          422: problemAnswer('A query parameter is invalid (`validation_failed`, each one in `invalid_params`): `since`, `actor`, `action`, `outcome`, `limit` or `cursor`.', [ErrorCode.validation]),
        },
      }),
    },
  };
}

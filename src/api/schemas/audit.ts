/**
 * The audit trail's reader (GET /audit/list): its query and its answer, as zod schemas (see
 * requests.ts and answers.ts for the conventions).
 */
import { z } from 'zod';
import { ActorKind, AuditOutcome } from '../../domain/audit.ts';
import { RFC3339_EXPECTED, rfc3339Ms } from '../../domain/rfc3339.ts';
import { dateTime } from './answers.ts';
import { encodeCursor, MAX_PAGE, DEFAULT_PAGE, PageCursor } from './requests.ts';

export { encodeCursor };

const expected = `must be ${RFC3339_EXPECTED}`;
const LIMIT_REASON = `must be an integer from 1 to ${MAX_PAGE}`;
/** An action's name, or an actor's: printable, short. */
const NAME = /^[^\u0000-\u001f\u007f]{1,320}$/;

export const AuditQuery = z.object({
  since: z
    .string({ error: expected })
    .transform((value, ctx) => {
      const ms = rfc3339Ms(value);
      if (Number.isNaN(ms)) {
        ctx.issues.push({ code: 'custom', input: value, message: expected });
        return z.NEVER;
      }
      return ms;
    })
    .optional()
    .meta({ format: 'date-time', description: 'Only entries recorded at or after this time (RFC 3339, with seconds and an offset).', examples: ['2026-11-22T00:00:00Z'] }),
  actor: z.string().regex(NAME, { error: 'must be 1 to 320 characters, no control characters' }).optional().meta({ description: "Only entries of this actor: a token's e-mail, or a Unix user for the CLI's (exactly)." }),
  action: z.string().regex(NAME, { error: 'must be 1 to 320 characters, no control characters' }).optional().meta({ description: 'Only entries of this action, such as `role.update` (docs/api.md lists them).', examples: ['role.update'] }),
  outcome: z.enum(Object.values(AuditOutcome) as [AuditOutcome, ...AuditOutcome[]]).optional().meta({ description: '`ok`, `denied` (refused: 401, 403) or `failed` (the change was refused for another reason: its `code` says which).' }),
  limit: z
    .preprocess((value) => (typeof value === 'string' && /^\d+$/.test(value) ? Number(value) : value), z.int({ error: LIMIT_REASON }).min(1, { error: LIMIT_REASON }).max(MAX_PAGE, { error: LIMIT_REASON }))
    .default(DEFAULT_PAGE)
    .meta({ default: DEFAULT_PAGE, description: 'Page size.' }),
  cursor: PageCursor,
});

export const AuditEntry = z
  .strictObject({
    id: z.int().min(1).meta({ description: 'The entry\'s number in the chain (1, 2, ... across all organizations: the numbers between two of yours are other organizations\').' }),
    at: dateTime('When it was recorded.'),
    actor: z.strictObject({
      kind: z.enum(Object.values(ActorKind) as [ActorKind, ...ActorKind[]]).meta({
        description: '`api` (a token), `console` (a token, from the console in a browser), `cli` (a Unix user on the server), `system` (the daemon itself: retention), `anonymous` (no valid token).',
      }),
      name: z.string().nullable().meta({ description: "The token's e-mail, the Unix user, or the daemon's part; null for anonymous." }),
      organization_id: z.string().nullable().meta({ description: "The token's organization; null but for api and console." }),
    }),
    action: z.string().meta({ description: 'What was done (or attempted), such as `role.update`, `webhook.replace`: docs/api.md lists them.', examples: ['role.update'] }),
    organization_id: z.string().nullable().meta({ description: 'The organization the action concerns.' }),
    target: z.string().nullable().meta({ description: "What it was done to: a user's e-mail, `delivery 42`; null when the action says it all." }),
    changes: z.record(z.string(), z.unknown()).nullable().meta({
      description: 'What changed, mostly as `{ field: { before, after } }`. Secrets, tokens and header credentials are never here: only `{ "changed": true }`. A webhook URL shows its origin only (its path and query may hold a token). null when nothing changed.',
    }),
    request_id: z.string().nullable().meta({ description: 'The request\'s id (the `X-Request-Id` of its answer); null for the CLI.' }),
    source: z.string().nullable().meta({ description: "The client's address, as the daemon saw it; null for the CLI." }),
    outcome: z.enum(Object.values(AuditOutcome) as [AuditOutcome, ...AuditOutcome[]]),
    code: z.string().nullable().meta({ description: 'The error code of a `denied` or `failed` attempt (`forbidden`, `invalid_token`, `last_user_manager`, ...); null when `ok`.' }),
    hash: z.string().meta({ description: 'SHA-256 (hex) of the entry and the previous entry\'s hash: what `hookrelay audit verify` checks (docs/operations.md, "Audit trail").' }),
  })
  .meta({ id: 'AuditEntry' });

export const AuditPage = z
  .strictObject({
    data: z.array(AuditEntry).meta({ description: 'Newest first.' }),
    next_cursor: z.string().nullable().meta({ description: 'Pass as `cursor` for the next (older) page; null on the last page.' }),
  })
  .meta({ id: 'AuditPage' });

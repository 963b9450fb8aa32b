/** The document's operations on the team: the organization's users, added and removed. */
import { z } from 'zod';
import { ErrorCode } from '../../domain/errors.ts';
import { Permission } from '../../domain/permissions.ts';
import { Message, TeamUser, UserAdded } from '../schemas/answers.ts';
import { AddUserRequest, RemoveUserRequest } from '../schemas/requests.ts';
import { operation } from './operation.ts';
import { answer, BODY_LIMIT, problemAnswer, problemExample, requestBody, securedErrors, shared } from './responses.ts';

type Json = Record<string, unknown>;

const BODY = `${BODY_LIMIT} Unknown members are ignored. An empty body counts as \`{}\`.`;

const userNotFound = (instance: string) =>
  problemAnswer(
    "No user with this e-mail in the caller's organization (`user_not_found`). A user of another organization gets exactly the same answer as an unknown e-mail.",
    [ErrorCode.userNotFound],
    [
      problemExample(ErrorCode.userNotFound, instance, 'no user with e-mail "nobody@acme.example" in organization "acme"', {
        invalid_params: [{ name: 'email', reason: 'is not the e-mail of a user of this organization' }],
      }),
    ],
  );

const invalidBody = (instance: string, fields: readonly string[]) =>
  problemExample(ErrorCode.validation, instance, 'the request body is invalid', { invalid_params: fields.map((name) => ({ name, reason: 'is required' })) });

const getUsers = operation({
  tag: 'users',
  operationId: 'getUsers',
  summary: "List the organization's users and their roles",
  description:
    "Every user of the caller's organization, sorted by e-mail (case-insensitively), with their role; what each role permits is `GET /users/get_roles`. Users of other organizations are never listed. Permission: `roles:read` (saas_admin, saas_viewer): who holds which role is the other half of what the roles say. `hookrelay users list --org ORG` prints the same.",
  permission: Permission.rolesRead,
  responses: {
    200: answer('The users.', z.array(TeamUser), {
      example: [
        { email: 'ada@acme.example', role_name: 'saas_admin', created_at: '2026-11-22T05:07:00.570Z', updated_at: '2026-11-22T05:07:00.570Z' },
        { email: 'bob@acme.example', role_name: 'saas_viewer', created_at: '2026-11-22T05:09:12.004Z', updated_at: '2026-11-23T10:41:55.310Z' },
      ],
    }),
    ...securedErrors({ body: false }),
  },
});

const addUser = operation({
  tag: 'users',
  operationId: 'addUser',
  summary: 'Add a user to the organization, with a role',
  description:
    "Adds a user to the caller's organization with one of the roles of `GET /users/get_roles`. The user can then be given tokens (`hookrelay token issue`, `hookrelay console link`, or an identity provider whose tokens carry that e-mail and organization). Permission: `users:manage` (saas_admin). `hookrelay users add` does the same.",
  permission: Permission.usersManage,
  requestBody: requestBody(AddUserRequest, { email: 'bob@acme.example', role_name: 'saas_viewer' }, BODY),
  responses: {
    201: answer('The user was added.', UserAdded, {
      example: {
        message: 'bob@acme.example added with the role saas_viewer',
        email: 'bob@acme.example',
        role_name: 'saas_viewer',
        created_at: '2026-11-22T05:09:12.004Z',
        updated_at: '2026-11-22T05:09:12.004Z',
      },
    }),
    ...securedErrors({ body: true }),
    409: problemAnswer("The organization already has a user with this e-mail, compared case-insensitively (`user_already_exists`). Nothing is changed: change their role with `update_role`.", [
      ErrorCode.userExists,
    ]),
    422: problemAnswer(
      'A field is missing or has the wrong type or form (`validation_failed`, each field in `invalid_params`), or `role_name` is not a role (`role_not_found`, with the valid names in `valid_role_names`). Nothing is changed.',
      [ErrorCode.validation, ErrorCode.roleNotFound],
      [invalidBody('/users/add_user', ['email', 'role_name'])],
    ),
    503: shared('DatabaseBusy'),
  },
});

const removeUser = operation({
  tag: 'users',
  operationId: 'removeUser',
  summary: 'Remove a user from the organization',
  description:
    "Removes a user of the caller's organization, identified by e-mail (compared case-insensitively). Their tokens are refused from the next request on (401 `invalid_token`), whatever their expiry. Refused, like `update_role`, when it would leave the organization with no user whose role grants `users:manage` (409 `last_user_manager`): an organization cannot lock itself out (the operator's `hookrelay users remove --force` can). Removing oneself is allowed when another user can manage users. POST, as the other actions of the seed's paths. Permission: `users:manage` (saas_admin).",
  permission: Permission.usersManage,
  requestBody: requestBody(RemoveUserRequest, { email: 'bob@acme.example' }, BODY),
  responses: {
    200: answer('The user was removed.', Message, {
      example: { message: 'bob@acme.example removed (had the role saas_viewer); their tokens are refused from now on' },
    }),
    ...securedErrors({ body: true }),
    404: userNotFound('/users/remove_user'),
    409: problemAnswer(
      'The user is the last of the organization whose role grants `users:manage` (`last_user_manager`). Give another user such a role first. Nothing is changed.',
      [ErrorCode.lastUserManager],
      [
        problemExample(
          ErrorCode.lastUserManager,
          '/users/remove_user',
          'ada@acme.example is the last user of organization "acme" who can manage users; give another user such a role first',
        ),
      ],
    ),
    422: problemAnswer('`email` is missing, not a string, or not an e-mail address (`validation_failed`, in `invalid_params`). Nothing is changed.', [ErrorCode.validation], [
      invalidBody('/users/remove_user', ['email']),
    ]),
    503: shared('DatabaseBusy'),
  },
});

/** The paths of the team. */
export function teamPaths(): Record<string, Json> {
  return {
    '/users/get_users': { get: getUsers },
    '/users/add_user': { post: addUser },
    '/users/remove_user': { post: removeUser },
  };
}

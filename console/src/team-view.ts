/**
 * #/team: the organization's users and their roles, the roles and what each permits; for a
 * caller whose role grants users:manage, changing a user's role (update_role), adding a user and
 * removing one. Every answer, the last-admin guard's included, is shown as the API gives it.
 */
import { apiKeysSection } from './api-keys-section.ts';
import { AUDIT_PERMISSION, USERS_PERMISSION, type Role, type TeamUser } from './api-client.ts';
import { h, headerRow, labelCells, marked, replace, scrollingTable, time, type Child } from './dom.ts';
import { field, fieldErrors, fillSelect } from './fields.ts';
import { actionGuard, confirmDialog, createMessages, heading, type ActionGuard, type Messages, type Session, type View } from './ui.ts';

export const USER_COLUMNS = ['E-mail', 'Role', 'Added', 'Changed'] as const;
export const ROLE_COLUMNS = ['Role', 'Description', 'Permits'] as const;

/** What each permission lets a role do, in the page's words (an unknown one is shown by its name). */
const PERMITS: Readonly<Record<string, string>> = {
  'roles:read': 'see the roles and the team',
  'users:manage': 'add and remove users and change their roles',
  'webhook:read': 'see the webhook and its deliveries',
  'webhook:manage': 'register and change the webhook, test, replay, recover, rotate its secret',
  'audit:read': 'read the audit trail',
  'api_keys:manage': 'create, list and revoke API keys for machines',
};

/** The team as last loaded. */
interface Team {
  readonly users: readonly TeamUser[];
  readonly roles: readonly Role[];
}

/** What the forms need of the page that holds them. */
interface FormContext {
  readonly session: Session;
  readonly messages: Messages;
  readonly guard: ActionGuard;
  readonly team: () => Team;
  isDisposed(): boolean;
  /** Says an API change went through (its message), then loads the team again. */
  done(message: string): Promise<void>;
}

function userRows(users: readonly TeamUser[]): HTMLTableRowElement[] {
  if (users.length === 0) return [h('tr', null, h('td', { colspan: USER_COLUMNS.length, class: 'empty' }, 'No users.'))];
  return users.map((u) =>
    labelCells(
      h('tr', null, h('td', { class: 'mono' }, marked(u.email)), h('td', null, u.role_name), h('td', null, time(u.created_at)), h('td', null, time(u.updated_at))),
      USER_COLUMNS,
    ),
  );
}

function roleRows(roles: readonly Role[]): HTMLTableRowElement[] {
  return roles.map((r) =>
    labelCells(
      h(
        'tr',
        null,
        h('th', { scope: 'row', class: 'mono' }, r.name),
        h('td', null, r.description),
        h('td', null, r.permissions === undefined ? 'not said by this daemon' : permitList(r.permissions)),
      ),
      ROLE_COLUMNS,
    ),
  );
}

function permitList(permissions: readonly string[]): Child {
  if (permissions.length === 0) return 'nothing';
  return h('ul', { class: 'permits' }, ...permissions.map((p) => h('li', null, PERMITS[p] ?? p, ' ', h('code', null, p))));
}

export const teamView: View = (root: HTMLElement, session: Session) => {
  const messages = createMessages();
  let disposed = false;
  let team: Team = { users: [], roles: [] };
  let shown: string | null = null;
  const usersBody = h('tbody', null, h('tr', null, h('td', { colspan: USER_COLUMNS.length, class: 'empty' }, 'Loading…')));
  const usersTable = h('table', { class: 'team cards', 'aria-busy': 'true' }, h('caption', null, 'The users of this organization'), headerRow(USER_COLUMNS), usersBody);
  const rolesBody = h('tbody');
  const rolesTable = h('table', { class: 'roles cards' }, h('caption', null, 'The roles a user can have'), headerRow(ROLE_COLUMNS), rolesBody);
  const fieldsets = [h('fieldset'), h('fieldset'), h('fieldset')] as const;
  const guard = actionGuard(session, fieldsets, {
    may: () => session.permits(USERS_PERMISSION),
    noteText: 'Your role cannot change the team: it can see the users and their roles; adding, removing and changing them needs users:manage (saas_admin).',
  });
  const forms: Array<(team: Team) => void> = [];

  const load = async (): Promise<void> => {
    try {
      const [users, roles] = await Promise.all([session.api.getUsers(), session.api.getRoles()]);
      if (disposed) return;
      messages.clearAlert('load');
      usersTable.removeAttribute('aria-busy');
      team = { users, roles };
      for (const update of forms) update(team);
      keys.update(roleNames(team));
      const json = JSON.stringify(team);
      if (json === shown) return;
      shown = json;
      replace(usersBody, ...userRows(users));
      replace(rolesBody, ...roleRows(roles));
    } catch (err) {
      if (disposed) return;
      usersTable.removeAttribute('aria-busy');
      session.fail(err, messages, 'load');
    }
  };

  const context: FormContext = {
    session,
    messages,
    guard,
    team: () => team,
    isDisposed: () => disposed,
    async done(message) {
      messages.clearAlert();
      const audit = session.permits(AUDIT_PERMISSION) ? [' ', h('a', { href: '#/audit' }, 'See it in the audit trail')] : [];
      messages.showStatus(`${message}.`, ...audit);
      await load();
    },
  };
  const change = changeRoleForm(context, fieldsets[0]);
  const add = addUserForm(context, fieldsets[1]);
  const remove = removeUserForm(context, fieldsets[2]);
  forms.push(change.update, add.update, remove.update);
  // The organization's API keys, for a caller who may manage them (api-keys-section.ts).
  const keys = apiKeysSection(session);

  root.append(
    heading('Team'),
    messages.alert,
    messages.status,
    guard.note,
    scrollingTable(usersTable, 'Users'),
    h('h2', null, 'Roles'),
    scrollingTable(rolesTable, 'Roles'),
    section('team-change', 'Change a role', change.form),
    section('team-add', 'Add a user', add.form),
    section('team-remove', 'Remove a user', remove.form),
    remove.dialog,
    keys.element,
  );
  void load();
  session.live(load);
  void keys.load();
  session.live(keys.load);
  return () => {
    disposed = true;
    guard.dispose();
  };
};

function section(id: string, title: string, ...content: Child[]): HTMLElement {
  return h('section', { class: 'team-form', 'aria-labelledby': `${id}-heading` }, h('h2', { id: `${id}-heading` }, title), ...content);
}

/** Runs a change of the team: the fieldset disabled meanwhile, the API's refusal shown in the alert and beside the fields. */
function attempt(page: FormContext, fieldset: HTMLFieldSetElement, errors: ReturnType<typeof fieldErrors>, call: () => Promise<{ message: string }>) {
  return page.guard.run(fieldset, async () => {
    page.messages.clearStatus();
    errors.clear();
    try {
      const answer = await call();
      if (!page.isDisposed()) await page.done(answer.message);
    } catch (err) {
      if (page.isDisposed()) return;
      errors.show(err);
      page.session.fail(err, page.messages, 'action');
    }
  });
}

const emails = (team: Team) => team.users.map((u) => u.email);
const roleNames = (team: Team) => team.roles.map((r) => r.name);

/** update_role: a user and the role to give them (their current one chosen when the user is). */
function changeRoleForm(page: FormContext, fieldset: HTMLFieldSetElement) {
  const user = h('select', { id: 'team-role-user', name: 'email' });
  const role = h('select', { id: 'team-role-name', name: 'role_name' });
  const userField = field(user, 'User');
  const roleField = field(role, 'New role');
  const errors = fieldErrors({ email: { control: user, error: userField.error }, role_name: { control: role, error: roleField.error } });
  const currentRole = () => page.team().users.find((u) => u.email === user.value)?.role_name;
  const showCurrent = () => {
    const current = currentRole();
    if (current !== undefined) role.value = current;
  };
  user.addEventListener('change', showCurrent);
  const form = h('form', { class: 'change-form', novalidate: true }, fieldset);
  fieldset.append(userField.element, roleField.element, h('div', { class: 'field field-button' }, h('button', { type: 'submit' }, 'Change role')));
  form.addEventListener('submit', (event) => {
    event.preventDefault();
    void attempt(page, fieldset, errors, () => page.session.api.updateRole(user.value, role.value));
  });
  const update = (team: Team) => {
    const first = user.options.length === 0;
    fillSelect(user, emails(team));
    fillSelect(role, roleNames(team));
    if (first) showCurrent();
  };
  return { form, update };
}

/** add_user: an e-mail and a role (the least one, saas_viewer, chosen first). */
function addUserForm(page: FormContext, fieldset: HTMLFieldSetElement) {
  const email = h('input', { id: 'team-add-email', name: 'email', type: 'email', autocomplete: 'off', spellcheck: 'false', maxlength: 320 });
  const role = h('select', { id: 'team-add-role', name: 'role_name' });
  const emailField = field(email, 'E-mail');
  const roleField = field(role, 'Role');
  const errors = fieldErrors({ email: { control: email, error: emailField.error }, role_name: { control: role, error: roleField.error } });
  const form = h('form', { class: 'change-form', novalidate: true }, fieldset);
  fieldset.append(emailField.element, roleField.element, h('div', { class: 'field field-button' }, h('button', { type: 'submit' }, 'Add user')));
  form.addEventListener('submit', (event) => {
    event.preventDefault();
    void attempt(page, fieldset, errors, async () => {
      const answer = await page.session.api.addUser(email.value, role.value);
      email.value = '';
      return answer;
    });
  });
  return { form, update: (team: Team) => fillSelect(role, roleNames(team), 'saas_viewer') };
}

/** remove_user, after a confirmation. */
function removeUserForm(page: FormContext, fieldset: HTMLFieldSetElement) {
  const user = h('select', { id: 'team-remove-user', name: 'email' });
  const userField = field(user, 'User', 'Their tokens are refused from their next request on. The last user who can manage users cannot be removed.');
  const errors = fieldErrors({ email: { control: user, error: userField.error } });
  const confirmText = h('span');
  const dialog = confirmDialog({
    title: 'Remove this user?',
    text: '',
    confirm: 'Remove user',
    onConfirm: () => void attempt(page, fieldset, errors, () => page.session.api.removeUser(user.value)),
  });
  dialog.element.querySelector('p')?.replaceChildren(confirmText);
  const form = h('form', { class: 'change-form', novalidate: true }, fieldset);
  fieldset.append(userField.element, h('div', { class: 'field field-button' }, h('button', { type: 'submit' }, 'Remove user…')));
  form.addEventListener('submit', (event) => {
    event.preventDefault();
    if (user.value === '') return;
    replace(confirmText, marked(user.value), ' can no longer sign in or call the API. Adding them again gives them a role anew.');
    dialog.open();
  });
  return { form, dialog: dialog.element, update: (team: Team) => fillSelect(user, emails(team)) };
}

/**
 * The team page's API keys (api_keys/*), for a caller whose role grants api_keys:manage: the
 * organization's keys (prefix, role, expiry, last use; never a key), creating one, whose key is
 * shown once with the hint to copy it now, and revoking one after a confirmation.
 */
import { API_KEYS_PERMISSION, type ApiKeyInfo } from './api-client.ts';
import { h, headerRow, labelCells, replace, scrollingTable, time } from './dom.ts';
import { field, fieldErrors, fillSelect } from './fields.ts';
import { confirmDialog, createMessages, type Session } from './ui.ts';

export const KEY_COLUMNS = ['Name', 'Prefix', 'Role', 'Expires', 'Last used'] as const;
const EXPIRIES: ReadonlyArray<readonly [value: string, label: string]> = [
  ['', 'Never (until revoked)'],
  ['30d', '30 days'],
  ['90d', '90 days'],
  ['365d', '365 days'],
];

function keyRows(keys: readonly ApiKeyInfo[]): HTMLTableRowElement[] {
  if (keys.length === 0) return [h('tr', null, h('td', { colspan: KEY_COLUMNS.length, class: 'empty' }, 'No API keys.'))];
  return keys.map((k) =>
    labelCells(
      h(
        'tr',
        null,
        h('td', { class: 'mono' }, k.name),
        h('td', { class: 'mono' }, k.prefix),
        h('td', null, k.role_name),
        h('td', null, k.expires_at === null ? 'never' : time(k.expires_at)),
        h('td', null, k.last_used_at === null ? 'never' : time(k.last_used_at)),
      ),
      KEY_COLUMNS,
    ),
  );
}

/**
 * The section, hidden from a caller who may not manage keys (what GET /users/me says, once it
 * has answered); `update` gives it the role names, `load` reads the keys again.
 */
export function apiKeysSection(session: Session): { element: HTMLElement; update(roles: readonly string[]): void; load(): Promise<void> } {
  const messages = createMessages();
  const body = h('tbody', null, h('tr', null, h('td', { colspan: KEY_COLUMNS.length, class: 'empty' }, 'Loading…')));
  const table = h('table', { class: 'api-keys cards' }, h('caption', null, 'The API keys of this organization'), headerRow(KEY_COLUMNS), body);
  const shown = h('div', { class: 'api-key-shown', hidden: true });
  const names = h('select', { id: 'api-key-revoke-name', name: 'name' });

  const load = async (): Promise<void> => {
    element.hidden = !session.permits(API_KEYS_PERMISSION);
    if (element.hidden) return;
    try {
      const keys = await session.api.listApiKeys();
      messages.clearAlert('load');
      replace(body, ...keyRows(keys));
      fillSelect(names, keys.map((k) => k.name));
    } catch (err) {
      session.fail(err, messages, 'load');
    }
  };
  const create = createForm(session, messages, shown, () => load());
  const revoke = revokeForm(session, messages, names, () => load());
  const element: HTMLElement = h(
    'section',
    { class: 'team-keys', 'aria-labelledby': 'api-keys-heading', hidden: true },
    h('h2', { id: 'api-keys-heading' }, 'API keys'),
    h('p', null, 'Keys let machines call the API as a role of this organization: send one as Authorization: Bearer <key>.'),
    messages.alert,
    messages.status,
    scrollingTable(table, 'The API keys'),
    shown,
    h('h3', null, 'Create a key'),
    create.form,
    h('h3', null, 'Revoke a key'),
    revoke.form,
    revoke.dialog,
  );
  return { element, update: create.update, load };
}

function createForm(session: Session, messages: ReturnType<typeof createMessages>, shown: HTMLElement, load: () => Promise<void>) {
  const name = h('input', { id: 'api-key-name', name: 'name', autocomplete: 'off', spellcheck: 'false', maxlength: 64 });
  const role = h('select', { id: 'api-key-role', name: 'role_name' });
  const expires = h('select', { id: 'api-key-expires', name: 'expires_in' }, ...EXPIRIES.map(([value, label]) => h('option', { value }, label)));
  const nameField = field(name, 'Name', 'Letters, digits, . _ -; what the key is for.');
  const roleField = field(role, 'Role', 'Never above your own.');
  const expiresField = field(expires, 'Expires');
  const errors = fieldErrors({ name: { control: name, error: nameField.error }, role_name: { control: role, error: roleField.error }, expires_in: { control: expires, error: expiresField.error } });
  const fieldset = h('fieldset', null, nameField.element, roleField.element, expiresField.element, h('div', { class: 'field field-button' }, h('button', { type: 'submit' }, 'Create key')));
  const form = h('form', { class: 'change-form', novalidate: true }, fieldset);
  form.addEventListener('submit', (event) => {
    event.preventDefault();
    fieldset.disabled = true;
    errors.clear();
    messages.clearStatus();
    session.api
      .createApiKey(name.value, role.value, expires.value === '' ? null : expires.value)
      .then(async (created) => {
        name.value = '';
        shown.hidden = false;
        replace(
          shown,
          h('p', null, h('strong', null, `Key ${created.name}: copy it now, it is not shown again.`)),
          h('p', null, h('code', { class: 'mono secret', tabindex: 0 }, created.key)),
        );
        await load();
      })
      .catch((err: unknown) => {
        errors.show(err);
        session.fail(err, messages, 'action');
      })
      .finally(() => {
        fieldset.disabled = false;
      });
  });
  return { form, update: (roles: readonly string[]) => fillSelect(role, roles, 'saas_viewer') };
}

function revokeForm(session: Session, messages: ReturnType<typeof createMessages>, names: HTMLSelectElement, load: () => Promise<void>) {
  const nameField = field(names, 'Key', 'The next request with it is refused.');
  const fieldset = h('fieldset', null, nameField.element, h('div', { class: 'field field-button' }, h('button', { type: 'submit' }, 'Revoke key…')));
  const revoke = () => {
    fieldset.disabled = true;
    session.api
      .revokeApiKey(names.value)
      .then(async (answer) => {
        messages.clearAlert();
        messages.showStatus(answer.message);
        await load();
      })
      .catch((err: unknown) => session.fail(err, messages, 'action'))
      .finally(() => {
        fieldset.disabled = false;
      });
  };
  const dialog = confirmDialog({ title: 'Revoke this key?', text: 'Machines that use it are refused from their next request on. This cannot be undone.', confirm: 'Revoke key', onConfirm: revoke });
  const form = h('form', { class: 'change-form', novalidate: true }, fieldset);
  form.addEventListener('submit', (event) => {
    event.preventDefault();
    if (names.value !== '') dialog.open();
  });
  return { form, dialog: dialog.element };
}

/**
 * #/audit: the organization's audit trail (GET /audit/list), newest first: when, who (and from
 * where), what action on what, what changed, and the outcome; filtered by time, actor, action and
 * outcome, a page at a time. Secrets are never in it: the API says only that one changed.
 */
import { AUDIT_PERMISSION, type AuditEntry, type AuditQuery } from './api-client.ts';
import { h, headerRow, labelCells, marked, replace, scrollingTable, time, withTimes, type Child } from './dom.ts';
import { field } from './fields.ts';
import { localInputToIso, NONE } from './format.ts';
import { createMessages, heading, type Session, type View } from './ui.ts';

export const AUDIT_COLUMNS = ['Time', 'Actor', 'Action', 'Target', 'What changed', 'Outcome'] as const;

/** The actions the trail records (src/domain/audit.ts), for the filter. */
export const AUDIT_ACTIONS = [
  'role.update',
  'user.add',
  'user.remove',
  'webhook.register',
  'webhook.replace',
  'webhook.secret_rotate',
  'webhook.disable',
  'webhook.enable',
  'webhook.test',
  'webhook.recover',
  'delivery.replay',
  'delivery.retry',
  'token.issue',
  'console_link.issue',
  'role.add',
  'org.add',
  'db.prune',
  'db.copy',
  'audit.prune',
  'request',
] as const;
const OUTCOMES = ['ok', 'denied', 'failed'] as const;

/** A value of a change as text: strings as they are (times shown as the console shows times), none for null, JSON otherwise. */
function valueText(value: unknown): Child[] {
  if (value === null || value === undefined) return ['none'];
  if (typeof value === 'string') return withTimes(value);
  return [JSON.stringify(value)];
}

type Plain = Record<string, unknown>;
const isPlain = (v: unknown): v is Plain => typeof v === 'object' && v !== null && !Array.isArray(v);

/** One change in words: `before → after`; a secret or a credential only whether it is set, never its value. Null: not a change but a group of them. */
function changeWords(c: Plain): Child[] | null {
  if ('before' in c || 'after' in c) {
    // A URL is kept as its origin only (its path or query may hold a token): the same origin on both sides, changed, is a new path or query.
    if (c.changed === true && c.before === c.after) return [...valueText(c.after), ' (path or query changed; not kept)'];
    return [...valueText(c.before), ' → ', ...valueText(c.after)];
  }
  if ('set_before' in c || 'set_after' in c) {
    if (c.set_before && c.set_after) return [c.changed === false ? 'unchanged' : 'changed', ' (value not kept)'];
    return [c.set_after ? 'added (value not kept)' : 'removed'];
  }
  if (c.changed === true) return ['changed (value not kept)'];
  return null;
}

/** What changed, one line a field; a group's fields (a header of `headers`) named `headers.X-Environment`. */
function changeLines(changes: Plain, prefix = ''): HTMLLIElement[] {
  return Object.entries(changes).flatMap(([key, value]) => {
    const name = prefix + key;
    const words = isPlain(value) ? changeWords(value) : valueText(value);
    if (words === null) return changeLines(value as Plain, `${name}.`);
    return [h('li', null, h('code', null, marked(name)), ': ', ...words)];
  });
}

function changeList(changes: AuditEntry['changes']): Child {
  const lines = changeLines(changes ?? {});
  return lines.length === 0 ? NONE : h('ul', { class: 'changes' }, ...lines);
}

function entryRows(entries: readonly AuditEntry[], filtered: boolean): HTMLTableRowElement[] {
  if (entries.length === 0) {
    return [h('tr', null, h('td', { colspan: AUDIT_COLUMNS.length, class: 'empty' }, filtered ? 'No entry matches.' : 'No entry yet.'))];
  }
  return entries.map((e) => {
    const where = [e.actor.kind, e.source === null ? null : `from ${e.source}`].filter((x) => x !== null).join(' ');
    const row = h(
      'tr',
      null,
      h('td', null, time(e.at)),
      h(
        'td',
        { class: 'actor' },
        e.actor.name === null ? 'anonymous' : marked(e.actor.name),
        ' ',
        h('span', { class: 'outcome' }, where),
        ...(e.request_id === null ? [] : [' ', h('span', { class: 'outcome' }, `request ${e.request_id}`)]),
      ),
      h('td', { class: 'mono' }, e.action),
      h('td', { class: 'mono' }, e.target === null ? NONE : marked(e.target)),
      h('td', null, changeList(e.changes)),
      h(
        'td',
        null,
        h('span', { class: `badge outcome-${e.outcome}` }, e.outcome),
        ...(e.code === null ? [] : [' ', h('span', { class: 'outcome mono' }, e.code)]),
      ),
    );
    return labelCells(row, AUDIT_COLUMNS);
  });
}

/** The filter form; `query()` reads it (empty fields left out). */
function filterForm() {
  const since = h('input', { id: 'audit-since', name: 'since', type: 'datetime-local' });
  const actor = h('input', { id: 'audit-actor', name: 'actor', type: 'search', autocomplete: 'off', spellcheck: 'false', placeholder: 'an e-mail, a Unix user' });
  const option = (value: string, text = value) => h('option', { value }, text);
  const action = h('select', { id: 'audit-action', name: 'action' }, option('', 'All'), ...AUDIT_ACTIONS.map((a) => option(a)));
  const outcome = h('select', { id: 'audit-outcome', name: 'outcome' }, option('', 'All'), ...OUTCOMES.map((o) => option(o)));
  const form = h(
    'form',
    { class: 'filters', 'aria-label': 'Filter the audit trail' },
    field(since, 'Since').element,
    field(actor, 'Actor').element,
    field(action, 'Action').element,
    field(outcome, 'Outcome').element,
    h('div', { class: 'field field-button' }, h('button', { type: 'submit' }, 'Apply')),
  );
  const query = (): AuditQuery => ({
    since: localInputToIso(since.value) ?? undefined,
    actor: actor.value.trim() || undefined,
    action: action.value || undefined,
    outcome: outcome.value || undefined,
  });
  return { form, query };
}

export const auditView: View = (root: HTMLElement, session: Session) => {
  root.append(heading('Audit trail'));
  if (!session.permits(AUDIT_PERMISSION)) {
    root.append(h('p', { class: 'note' }, 'Your role cannot read the audit trail: it needs the permission audit:read (saas_admin has it).'));
    return () => {};
  }
  const messages = createMessages();
  const filters = filterForm();
  const caption = h('caption', null, 'Newest first');
  const body = h('tbody', null, h('tr', null, h('td', { colspan: AUDIT_COLUMNS.length, class: 'empty' }, 'Loading…')));
  const table = h('table', { class: 'audit cards', 'aria-busy': 'true' }, caption, headerRow(AUDIT_COLUMNS), body);
  const newestButton = h('button', { type: 'button' }, 'Newest');
  const olderButton = h('button', { type: 'button' }, 'Older');
  const pageLabel = h('span', { class: 'page' });
  let query: AuditQuery = {};
  let pages: Array<string | undefined> = [undefined];
  let next: string | null = null;
  let shown: string | null = null;
  let disposed = false;
  let sequence = 0;

  const load = async (): Promise<void> => {
    const mine = ++sequence;
    try {
      const page = await session.api.listAudit({ ...query, cursor: pages[pages.length - 1] });
      if (disposed || mine !== sequence) return;
      messages.clearAlert('load');
      table.removeAttribute('aria-busy');
      next = page.next_cursor;
      olderButton.disabled = next === null;
      newestButton.disabled = pages.length === 1;
      pageLabel.textContent = `Page ${pages.length}`;
      const json = JSON.stringify(page.data);
      if (json === shown) return;
      shown = json;
      replace(body, ...entryRows(page.data, Object.values(query).some((v) => v !== undefined)));
    } catch (err) {
      if (disposed || mine !== sequence) return;
      table.removeAttribute('aria-busy');
      session.fail(err, messages, 'load');
    }
  };
  const reload = (cursors: Array<string | undefined>) => {
    pages = cursors;
    shown = null;
    table.setAttribute('aria-busy', 'true');
    void load();
  };
  filters.form.addEventListener('submit', (event) => {
    event.preventDefault();
    query = filters.query();
    reload([undefined]);
  });
  newestButton.addEventListener('click', () => reload([undefined]));
  olderButton.addEventListener('click', () => {
    if (next !== null) reload([...pages, next]);
  });
  newestButton.disabled = true;
  olderButton.disabled = true;

  root.append(
    messages.alert,
    h('p', null, 'Every change to this organization, through the API, the console or the CLI, and every refused attempt to change something. Secrets and credentials are never in it: only that they changed.'),
    filters.form,
    scrollingTable(table, 'Audit trail'),
    h('nav', { class: 'paging', 'aria-label': 'Pages of the audit trail' }, newestButton, olderButton, pageLabel),
  );
  void load();
  session.live(load);
  return () => {
    disposed = true;
  };
};

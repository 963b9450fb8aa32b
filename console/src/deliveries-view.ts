/** #/deliveries: the delivery log, newest first, with filters, keyset paging and recovery. */
import { DELIVERY_STATUSES, type DeliveryPage } from './api-client.ts';
import { describe, filtersFromForm, INITIAL_STATE, newest, older, queryOf, searchGoesOn, withFilters, type DeliveriesState, type DeliveryFilters } from './deliveries-state.ts';
import { h, headerRow, marked, replace, scrollingTable, time } from './dom.ts';
import { localInputToIso, msToLocalInput, NONE, orNone, STATUS_LABELS } from './format.ts';
import { REFRESH_INTERVAL_MS } from './live.ts';
import { deliveryHref } from './route.ts';
import { actionGuard, createMessages, heading, type Messages, type Session, type View } from './ui.ts';

export const DELIVERY_COLUMNS = ['Event', 'Request', 'Status', 'Attempts', 'Last status code', 'Next attempt', 'Created'] as const;

/** Kept while the reader opens a delivery and comes back; reset at sign-out. */
let state: DeliveriesState = INITIAL_STATE;

export function resetDeliveriesState(): void {
  state = INITIAL_STATE;
}

const inputValue = (iso: string | null) => (iso === null ? '' : msToLocalInput(Date.parse(iso)));

function rows(page: DeliveryPage, searching: boolean): HTMLTableRowElement[] {
  if (page.data.length === 0) {
    const text = searching ? 'No delivery of this request among the newest deliveries searched; Older searches further back.' : 'No deliveries match.';
    return [h('tr', null, h('td', { colspan: DELIVERY_COLUMNS.length, class: 'empty' }, text))];
  }
  return page.data.map((d) =>
    h(
      'tr',
      null,
      h('td', null, h('a', { href: deliveryHref(d.id), class: 'mono' }, marked(d.event_id))),
      h('td', { class: 'mono' }, d.anticipation_request_id === null ? (d.event_type === 'webhook.test' ? 'test event' : NONE) : marked(d.anticipation_request_id)),
      h('td', null, h('span', { class: `badge badge-${d.status}` }, STATUS_LABELS[d.status])),
      h('td', { class: 'num' }, d.attempts),
      h('td', { class: 'num' }, orNone(d.last_status_code)),
      h('td', null, time(d.next_attempt_at)),
      h('td', null, time(d.created_at)),
    ),
  );
}

export const deliveriesView: View = (root: HTMLElement, session: Session) => {
  const messages = createMessages();
  let disposed = false;
  let shown: string | null = null;
  let nextCursor: string | null = null;
  let sequence = 0;

  const filters = filterForm(state.filters);
  // A search by request that has read only part of the log so far (see searchGoesOn).
  const searchNote = h('p', { class: 'hint', hidden: true }, 'The search by request reads the log a part at a time: Older searches the older deliveries.');

  const { table, body, paging, newestButton, olderButton, showPage } = pagedTable(state);
  const updatePaging = () => showPage(state, nextCursor);

  const load = async (): Promise<void> => {
    const mine = ++sequence;
    try {
      const page = await session.api.listDeliveries(queryOf(state));
      if (disposed || mine !== sequence) return;
      messages.clearAlert('load');
      table.removeAttribute('aria-busy');
      nextCursor = page.next_cursor;
      updatePaging();
      const searching = searchGoesOn(state, page.data.length, page.next_cursor);
      searchNote.hidden = !searching;
      const json = JSON.stringify([page.data, searching]);
      if (json === shown) return;
      shown = json;
      // Keep the keyboard focus on the same delivery link across a refresh.
      const focused = document.activeElement;
      const href = focused instanceof HTMLAnchorElement && body.contains(focused) ? focused.getAttribute('href') : null;
      replace(body, ...rows(page, searching));
      if (href !== null) body.querySelector<HTMLAnchorElement>(`a[href="${CSS.escape(href)}"]`)?.focus();
    } catch (err) {
      if (disposed || mine !== sequence) return;
      table.removeAttribute('aria-busy');
      session.fail(err, messages, 'load');
    }
  };
  const reload = () => {
    shown = null;
    table.setAttribute('aria-busy', 'true');
    updatePaging();
    void load();
  };

  filters.form.addEventListener('submit', (event) => {
    event.preventDefault();
    state = withFilters(state, filtersFromForm(filters.values()));
    nextCursor = null;
    reload();
  });
  newestButton.addEventListener('click', () => {
    state = newest(state);
    reload();
  });
  olderButton.addEventListener('click', () => {
    if (nextCursor === null) return;
    state = older(state, nextCursor);
    reload();
  });

  const recover = recoverSection(session, messages, {
    isDisposed: () => disposed,
    refresh: () => {
      shown = null;
      return load();
    },
  });

  updatePaging();
  root.append(
    heading('Deliveries'),
    messages.alert,
    messages.status,
    recover.guard.note,
    filters.form,
    h('p', { class: 'hint' }, `The table refreshes itself every ${REFRESH_INTERVAL_MS / 1000} seconds.`),
    scrollingTable(table, 'Deliveries'),
    searchNote,
    paging,
    recover.element,
  );
  void load();
  session.live(load);
  return () => {
    disposed = true;
    recover.guard.dispose();
  };
};

/** The table of deliveries, and the paging under it. */
function pagedTable(initial: DeliveriesState) {
  const caption = h('caption', null, describe(initial));
  const body = h('tbody', null, h('tr', null, h('td', { colspan: DELIVERY_COLUMNS.length, class: 'empty' }, 'Loading…')));
  const table = h('table', { class: 'deliveries', 'aria-busy': 'true' }, caption, headerRow(DELIVERY_COLUMNS), body);
  const newestButton = h('button', { type: 'button' }, 'Newest');
  const olderButton = h('button', { type: 'button' }, 'Older');
  const pageLabel = h('span', { class: 'page' });
  const paging = h('nav', { class: 'paging', 'aria-label': 'Pages of deliveries' }, newestButton, olderButton, pageLabel);
  /** Says which page of `shown` is on screen, and whether an older one follows (`nextCursor`). */
  const showPage = (shown: DeliveriesState, nextCursor: string | null) => {
    newestButton.disabled = shown.page === 1;
    olderButton.disabled = nextCursor === null;
    pageLabel.textContent = `Page ${shown.page}`;
    caption.textContent = describe(shown);
  };
  return { table, body, paging, newestButton, olderButton, showPage };
}

/** The filter form, showing `current`. */
function filterForm(current: DeliveryFilters) {
  const status = h('select', { id: 'filter-status', name: 'status' }, h('option', { value: '' }, 'All'), ...DELIVERY_STATUSES.map((s) => h('option', { value: s }, STATUS_LABELS[s])));
  const since = h('input', { id: 'filter-since', name: 'since', type: 'datetime-local' });
  const until = h('input', { id: 'filter-until', name: 'until', type: 'datetime-local' });
  const request = h('input', { id: 'filter-request', name: 'request_id', type: 'search', maxlength: 200, autocomplete: 'off', spellcheck: 'false', class: 'mono' });
  status.value = current.status ?? '';
  since.value = inputValue(current.since);
  until.value = inputValue(current.until);
  request.value = current.requestId ?? '';
  const form = h(
    'form',
    { class: 'filters', 'aria-label': 'Filter deliveries' },
    h('div', { class: 'field' }, h('label', { for: 'filter-status' }, 'Status'), status),
    h('div', { class: 'field' }, h('label', { for: 'filter-since' }, 'Since'), since),
    h('div', { class: 'field' }, h('label', { for: 'filter-until' }, 'Until'), until),
    h('div', { class: 'field' }, h('label', { for: 'filter-request' }, 'Request'), request),
    h('div', { class: 'field field-button' }, h('button', { type: 'submit' }, 'Apply')),
  );
  return { form, values: () => ({ status: status.value, since: since.value, until: until.value, requestId: request.value }) };
}

/**
 * The recovery form (admins): queues again what was not delivered since a time, then has the
 * table redrawn (`refresh`). Its guard is the page's: its note goes at the top of the page.
 */
function recoverSection(session: Session, messages: Messages, page: { isDisposed(): boolean; refresh(): Promise<void> }) {
  const recoverSince = h('input', { id: 'recover-since', name: 'since', type: 'datetime-local', required: true });
  recoverSince.value = msToLocalInput(Date.now() - 86_400_000);
  const recoverButton = h('button', { type: 'submit' }, 'Recover');
  const guard = actionGuard(session, [recoverButton]);
  const recoverForm = h(
    'form',
    { class: 'recover' },
    h('div', { class: 'field' }, h('label', { for: 'recover-since' }, 'Recover since'), recoverSince),
    h('div', { class: 'field field-button' }, recoverButton),
  );
  recoverForm.addEventListener('submit', (event) => {
    event.preventDefault();
    const sinceIso = localInputToIso(recoverSince.value);
    if (sinceIso === null) {
      messages.showAlert('action', 'Choose the time to recover from.');
      return;
    }
    void guard.run(recoverButton, async () => {
      try {
        const result = await session.api.recover(sinceIso);
        if (page.isDisposed()) return;
        messages.clearAlert();
        messages.showStatus(result.message);
        await page.refresh();
      } catch (err) {
        if (!page.isDisposed()) session.fail(err, messages, 'action');
      }
    });
  });
  const element = h(
    'section',
    { class: 'recover-section', 'aria-labelledby': 'recover-heading' },
    h('h2', { id: 'recover-heading' }, 'Recover failed deliveries'),
    h('p', null, 'Queues again every event received since this time that was not delivered (dead, or never queued), and makes failed deliveries due now.'),
    recoverForm,
  );
  return { element, guard };
}

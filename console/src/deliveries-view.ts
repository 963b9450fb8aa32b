/** #/deliveries: the delivery log, newest first, with filters, keyset paging and recovery. */
import { DELIVERY_STATUSES, type DeliveryPage } from './api-client.ts';
import { describe, filtersFromForm, INITIAL_STATE, newest, older, queryOf, searchGoesOn, withFilters, type DeliveriesState } from './deliveries-state.ts';
import { h, headerRow, marked, replace, scrollingTable, time } from './dom.ts';
import { localInputToIso, msToLocalInput, NONE, orNone } from './format.ts';
import { REFRESH_INTERVAL_MS } from './live.ts';
import { deliveryHref } from './route.ts';
import { actionGuard, createMessages, heading, type Session, type View } from './ui.ts';

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
      h('td', null, h('span', { class: `badge badge-${d.status}` }, d.status)),
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

  // Filters
  const status = h('select', { id: 'filter-status', name: 'status' }, h('option', { value: '' }, 'All'), ...DELIVERY_STATUSES.map((s) => h('option', { value: s }, s)));
  const since = h('input', { id: 'filter-since', name: 'since', type: 'datetime-local' });
  const until = h('input', { id: 'filter-until', name: 'until', type: 'datetime-local' });
  const request = h('input', { id: 'filter-request', name: 'request_id', type: 'search', maxlength: 200, autocomplete: 'off', spellcheck: 'false', class: 'mono' });
  status.value = state.filters.status ?? '';
  since.value = inputValue(state.filters.since);
  until.value = inputValue(state.filters.until);
  request.value = state.filters.requestId ?? '';
  const filters = h(
    'form',
    { class: 'filters', 'aria-label': 'Filter deliveries' },
    h('div', { class: 'field' }, h('label', { for: 'filter-status' }, 'Status'), status),
    h('div', { class: 'field' }, h('label', { for: 'filter-since' }, 'Since'), since),
    h('div', { class: 'field' }, h('label', { for: 'filter-until' }, 'Until'), until),
    h('div', { class: 'field' }, h('label', { for: 'filter-request' }, 'Request'), request),
    h('div', { class: 'field field-button' }, h('button', { type: 'submit' }, 'Apply')),
  );
  // A search by request that has read only part of the log so far (see searchGoesOn).
  const searchNote = h('p', { class: 'hint', hidden: true }, 'The search by request reads the log a part at a time: Older searches the older deliveries.');

  // Table and paging
  const caption = h('caption', null, describe(state));
  const body = h('tbody', null, h('tr', null, h('td', { colspan: DELIVERY_COLUMNS.length, class: 'empty' }, 'Loading…')));
  const table = h('table', { class: 'deliveries', 'aria-busy': 'true' }, caption, headerRow(DELIVERY_COLUMNS), body);
  const newestButton = h('button', { type: 'button' }, 'Newest');
  const olderButton = h('button', { type: 'button' }, 'Older');
  const pageLabel = h('span', { class: 'page' });
  const updatePaging = () => {
    newestButton.disabled = state.page === 1;
    olderButton.disabled = nextCursor === null;
    pageLabel.textContent = `Page ${state.page}`;
    caption.textContent = describe(state);
  };

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

  filters.addEventListener('submit', (event) => {
    event.preventDefault();
    state = withFilters(state, filtersFromForm({ status: status.value, since: since.value, until: until.value, requestId: request.value }));
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

  // Recover
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
        if (disposed) return;
        messages.clearAlert();
        messages.showStatus(result.message);
        shown = null;
        await load();
      } catch (err) {
        if (!disposed) session.fail(err, messages, 'action');
      }
    });
  });

  updatePaging();
  root.append(
    heading('Deliveries'),
    messages.alert,
    messages.status,
    guard.note,
    filters,
    h('p', { class: 'hint' }, `The table refreshes itself every ${REFRESH_INTERVAL_MS / 1000} seconds.`),
    scrollingTable(table, 'Deliveries'),
    searchNote,
    h('nav', { class: 'paging', 'aria-label': 'Pages of deliveries' }, newestButton, olderButton, pageLabel),
    h(
      'section',
      { class: 'recover-section', 'aria-labelledby': 'recover-heading' },
      h('h2', { id: 'recover-heading' }, 'Recover failed deliveries'),
      h('p', null, 'Queues again every event received since this time that was not delivered (dead, or never queued), and makes failed deliveries due now.'),
      recoverForm,
    ),
  );
  void load();
  session.live(load);
  return () => {
    disposed = true;
    guard.dispose();
  };
};

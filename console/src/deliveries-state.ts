/**
 * Filters and keyset paging of the delivery log: what the table shows, kept while the page
 * refreshes itself and while the reader looks at a delivery and comes back. No DOM access.
 */
import { DELIVERY_STATUSES, type DeliveryQuery, type DeliveryStatus } from './api-client.ts';
import { formatTime, localInputToIso, STATUS_LABELS, type Locale } from './format.ts';

/** Rows per page. */
export const PAGE_SIZE = 50;

export interface DeliveryFilters {
  readonly status: DeliveryStatus | null;
  /** RFC 3339 (UTC). */
  readonly since: string | null;
  readonly until: string | null;
  /** An anticipation request id. */
  readonly requestId: string | null;
}

export interface DeliveriesState {
  readonly filters: DeliveryFilters;
  /** The cursor of the page shown; null for the newest page. */
  readonly cursor: string | null;
  /** 1 for the newest page. */
  readonly page: number;
}

export const INITIAL_STATE: DeliveriesState = { filters: { status: null, since: null, until: null, requestId: null }, cursor: null, page: 1 };

/**
 * The filters of the form's values (a `<select>` value, two `datetime-local` values, a request
 * id: spaces around it dropped, empty for none; the API says what is wrong with one it refuses).
 */
export function filtersFromForm(values: { status: string; since: string; until: string; requestId: string }): DeliveryFilters {
  const status = (DELIVERY_STATUSES as readonly string[]).includes(values.status) ? (values.status as DeliveryStatus) : null;
  const requestId = values.requestId.trim();
  return { status, since: localInputToIso(values.since), until: localInputToIso(values.until), requestId: requestId === '' ? null : requestId };
}

/** New filters start again from the newest page. */
export const withFilters = (_state: DeliveriesState, filters: DeliveryFilters): DeliveriesState => ({ filters, cursor: null, page: 1 });

/** The next (older) page: the API's `next_cursor` of the page shown. */
export const older = (state: DeliveriesState, nextCursor: string): DeliveriesState => ({ ...state, cursor: nextCursor, page: state.page + 1 });

export const newest = (state: DeliveriesState): DeliveriesState => ({ ...state, cursor: null, page: 1 });

export function queryOf(state: DeliveriesState): DeliveryQuery {
  const { status, since, until, requestId } = state.filters;
  return {
    limit: PAGE_SIZE,
    ...(status === null ? {} : { status }),
    ...(since === null ? {} : { since }),
    ...(until === null ? {} : { until }),
    ...(requestId === null ? {} : { request_id: requestId }),
    ...(state.cursor === null ? {} : { cursor: state.cursor }),
  };
}

/** The table's caption: what it shows, its times as every time is shown (formatTime: local, with the zone). */
export function describe(state: DeliveriesState, where: Locale = {}): string {
  const parts: string[] = [];
  const at = (iso: string) => formatTime(iso, where)?.text ?? iso;
  if (state.filters.status !== null) parts.push(`status ${STATUS_LABELS[state.filters.status]}`);
  if (state.filters.since !== null) parts.push(`since ${at(state.filters.since)}`);
  if (state.filters.until !== null) parts.push(`until ${at(state.filters.until)}`);
  if (state.filters.requestId !== null) parts.push(`request ${state.filters.requestId}`);
  const filter = parts.length === 0 ? 'all' : parts.join(', ');
  return `Deliveries, newest first (${filter}; page ${state.page})`;
}

/**
 * A search by request reads part of the log per call (docs/console.md): a page shorter than a
 * full one that still has an older page means the older deliveries are not searched yet.
 */
export function searchGoesOn(state: DeliveriesState, rows: number, nextCursor: string | null): boolean {
  return state.filters.requestId !== null && rows < PAGE_SIZE && nextCursor !== null;
}

/** #/deliveries/ID: one delivery, its attempts, how to verify it, and Retry now or Replay (whichever it takes). */
import type { DeliveryAttempt, DeliveryDetail, DeliveryRequest } from './api-client.ts';
import { h, headerRow, marked, replace, scrollingTable, time, type Child } from './dom.ts';
import { deliveryActions, formatDuration, formatRelative, NONE, orNone, STATUS_LABELS } from './format.ts';
import { deliveryHref } from './route.ts';
import { VERIFY_SNIPPETS } from './snippets.ts';
import { actionGuard, confirmDialog, createMessages, heading, type Messages, type Session } from './ui.ts';

export const ATTEMPT_COLUMNS = ['Attempt', 'Started', 'Duration', 'Status code', 'Error', 'Response'] as const;

function row(term: string, field: string, ...value: Child[]): HTMLElement[] {
  return [h('dt', null, term), h('dd', { 'data-field': field }, ...value)];
}

/** The status as a badge in words that cannot be misread (STATUS_LABELS), and what it means: when a retry comes, or that none will. */
function statusLine(d: DeliveryDetail): Child[] {
  const badge = h('span', { class: `badge badge-${d.status}` }, STATUS_LABELS[d.status]);
  const relative = formatRelative(d.next_attempt_at, Date.now());
  switch (d.status) {
    case 'failed':
      return [badge, ' its last attempt failed; next attempt at ', time(d.next_attempt_at), relative === null ? null : ` (${relative})`];
    case 'dead':
      return [badge, ' dead: no attempt is left; Replay sends the event again'];
    case 'pending':
      return [badge, ' not attempted yet: it goes out as soon as the webhook takes it'];
    default:
      return [badge];
  }
}

function facts(d: DeliveryDetail): HTMLElement[] {
  const relative = formatRelative(d.next_attempt_at, Date.now());
  const sentTo = d.attempt_log[d.attempt_log.length - 1]?.url ?? null;
  return [
    ...row('Event', 'event', h('span', { class: 'mono' }, marked(d.event_id))),
    ...row('Type', 'type', h('span', { class: 'mono' }, d.event_type)),
    ...row('Request', 'request', h('span', { class: 'mono' }, d.anticipation_request_id === null ? (d.event_type === 'webhook.test' ? 'test event' : NONE) : marked(d.anticipation_request_id))),
    ...row('Status', 'status', ...statusLine(d)),
    ...row('Attempts', 'attempts', String(d.attempts)),
    // The event's trace: the one its attempts' spans belong to and send to the receiver (traceparent).
    ...row('Trace', 'trace', d.trace_id === null || d.trace_id === undefined ? NONE : h('span', { class: 'mono' }, d.trace_id)),
    // A retrying delivery's status line says when its next attempt is.
    ...(d.status === 'failed' ? [] : row('Next attempt', 'next-attempt', time(d.next_attempt_at), relative === null ? null : ` (${relative})`)),
    ...row('Created', 'created', time(d.created_at)),
    ...(sentTo === null ? [] : row('Sent to', 'url', h('span', { class: 'url' }, marked(sentTo)))),
  ];
}

function errorText(a: DeliveryAttempt): string {
  if (a.error === null && a.error_detail === null) return NONE;
  if (a.error === null) return a.error_detail ?? NONE;
  return a.error_detail === null ? a.error : `${a.error}: ${a.error_detail}`;
}

function attemptRows(d: DeliveryDetail): HTMLTableRowElement[] {
  if (d.attempt_log.length === 0) return [h('tr', null, h('td', { colspan: ATTEMPT_COLUMNS.length, class: 'empty' }, 'No attempt yet.'))];
  return d.attempt_log.map((a) =>
    h(
      'tr',
      null,
      h('td', { class: 'num' }, String(a.attempt), ' ', h('span', { class: 'outcome' }, a.outcome)),
      h('td', null, time(a.started_at)),
      h('td', { class: 'num' }, formatDuration(a.duration_ms)),
      h('td', { class: 'num' }, orNone(a.status_code)),
      h('td', { class: 'error' }, errorText(a)),
      h(
        'td',
        null,
        a.response_body === null ? NONE : h('pre', { class: 'response', tabindex: 0, 'aria-label': `Response to attempt ${a.attempt}` }, a.response_body === '' ? '(empty)' : a.response_body),
      ),
    ),
  );
}

/** The headers that change with the time they are made (webhook-timestamp and the signature over it). */
const TIMED_HEADERS = new Set(['webhook-timestamp', 'webhook-signature']);

/** What the request section shows but for its time: when only the time changed, the section is updated in place. */
const requestShape = (r: DeliveryRequest) => JSON.stringify([r.url, r.body, r.signature, r.client_certificate ?? null, Object.keys(r.headers), Object.entries(r.headers).filter(([name]) => !TIMED_HEADERS.has(name))]);

/**
 * "The request as sent": every header and the exact body of the request the latest attempt that
 * sent one sent, with the timestamp and the signature it recorded, which the text says. Before
 * any attempt sent one, a preview: the timestamp and the signature are made when the API
 * answers, and the text says so. The values of those two are updated in place on each refresh
 * (a new attempt, or a new preview), so that a reader's selection elsewhere in the section stays.
 */
function requestSection() {
  const note = h('p');
  const line = h('p', { class: 'request-line' });
  const headersBody = h('tbody');
  const body = h('pre', { class: 'request-body', tabindex: 0, 'aria-label': 'Request body' });
  const section = h(
    'section',
    { class: 'request', 'aria-labelledby': 'request-heading' },
    h('h2', { id: 'request-heading' }, 'The request as sent'),
    note,
    line,
    h('div', { class: 'table-wrap', role: 'region', 'aria-label': 'Request headers', tabindex: 0 }, h('table', { class: 'headers' }, h('caption', null, 'Headers'), headerRow(['Header', 'Value']), headersBody)),
    h('h3', null, 'Body'),
    body,
  );
  section.hidden = true;
  let shape: string | null = null;
  const timed = new Map<string, HTMLElement>();
  return {
    element: section,
    show(r: DeliveryRequest): void {
      section.hidden = false;
      const next = requestShape(r);
      if (next === shape) {
        for (const [name, cell] of timed) replace(cell, marked(r.headers[name] ?? ''));
        replace(note, ...noteText(r));
        return;
      }
      shape = next;
      replace(note, ...noteText(r));
      const cert = r.client_certificate ?? null;
      replace(
        line,
        h('span', { class: 'method' }, r.method),
        ' ',
        h('span', { class: 'url' }, marked(r.url)),
        ...(cert === null ? [] : [h('span', { class: 'client-certificate' }, ' presenting the client certificate ', marked(cert.subject), ' (SHA-256 ', h('code', null, cert.fingerprint_sha256), ')')]),
      );
      timed.clear();
      replace(
        headersBody,
        ...Object.entries(r.headers).map(([name, value]) => {
          const cell = h('td', { class: 'header-value', 'data-header': name }, marked(value));
          if (TIMED_HEADERS.has(name)) timed.set(name, cell);
          return h('tr', null, h('th', { scope: 'row', class: 'mono' }, marked(name)), cell);
        }),
      );
      body.textContent = r.body;
    },
  };
}

function noteText(r: DeliveryRequest): Child[] {
  const withheld = 'The signature is shown to admins only: one less than five minutes old would let whoever holds it have the receiver accept this request.';
  if (r.attempt !== null) {
    const base: Child[] = [
      `As attempt ${r.attempt} sent it at `,
      time(r.sent_at),
      ': every header the receiver got, with the webhook-timestamp (',
      time(r.signed_at),
      ') and the signature that attempt sent. Every attempt and replay sends this body and webhook-id; each attempt signs anew, with its own timestamp.',
    ];
    if (r.signature === 'included') return [...base, ' The signature verifies against this body with the secret that signed it then.'];
    if (r.signature === 'withheld') return [...base, ' ', withheld];
    return [...base, ' That attempt sent no signature (signing was off).'];
  }
  const base: Child[] = [
    'Not sent yet: no attempt has sent this request. Every attempt and replay sends this body and webhook-id; the timestamp and the signature below are those of a request signed at ',
    time(r.signed_at),
    ', as the next attempt would carry them',
  ];
  if (r.signature === 'included') return [...base, ': they verify against this body with the webhook’s secret.'];
  if (r.signature === 'withheld') return [...base, '. ', withheld];
  return [...base, '. This webhook does not sign its requests (signing is off).'];
}

function verifySection(eventId: () => string): HTMLElement {
  const idText = h('code', null, marked(eventId()));
  return h(
    'section',
    { class: 'verify', 'aria-labelledby': 'verify-heading' },
    h('h2', { id: 'verify-heading' }, 'Verify the signature'),
    h(
      'p',
      null,
      'Every attempt and replay of this event carries the header webhook-id: ',
      idText,
      ', with webhook-timestamp and webhook-signature (when signing is on). The receiver checks them with the webhook’s secret over the raw body, with any Standard Webhooks library:',
    ),
    ...VERIFY_SNIPPETS.flatMap((s) => [h('h3', null, s.language), h('pre', { class: 'snippet', tabindex: 0, 'aria-label': `${s.language} example` }, h('code', null, s.code))]),
  );
}

/** What the action section needs of its page. */
interface ActionPage {
  readonly session: Session;
  readonly messages: Messages;
  isDisposed(): boolean;
  /** Loads the delivery again (after Retry now: its new next attempt). */
  reload(): Promise<void>;
}

/**
 * The delivery's actions, each offered only where the API accepts it (deliveryActions): Retry
 * now for a delivery waiting for its next attempt, Replay for a delivered or dead one, nothing
 * for one not attempted yet; with a line on what each does, and that a replay keeps its
 * webhook-id (a receiver that de-duplicates by it skips the replay).
 */
function actionSection(id: number, page: ActionPage) {
  const { session, messages } = page;
  const retryButton = h('button', { type: 'button' }, 'Retry now');
  const replayButton = h('button', { type: 'button' }, 'Replay');
  const hint = h('p', { class: 'hint', 'data-field': 'actions-hint' });
  const guard = actionGuard(session, [retryButton, replayButton]);
  retryButton.hidden = true;
  replayButton.hidden = true;
  retryButton.addEventListener('click', () =>
    void guard.run(retryButton, async () => {
      messages.clearStatus();
      try {
        const due = await session.api.retryNow(id);
        if (page.isDisposed()) return;
        messages.clearAlert();
        messages.showStatus(`Delivery ${due.delivery.id} is due now: its next attempt starts within seconds.`);
        await page.reload();
      } catch (err) {
        if (!page.isDisposed()) session.fail(err, messages, 'action');
      }
    }),
  );
  const dialog = confirmDialog({
    title: 'Send this event again?',
    text: 'The event is queued again as a new delivery, with a fresh retry schedule and the same body and webhook-id: a receiver that de-duplicates by webhook-id takes it for the delivery it already has and skips it.',
    confirm: 'Replay now',
    onConfirm: () =>
      void guard.run(replayButton, async () => {
        messages.clearStatus();
        try {
          const queued = await session.api.replay(id);
          if (page.isDisposed()) return;
          messages.clearAlert();
          messages.showStatus('Replayed as ', h('a', { href: deliveryHref(queued.delivery.id) }, `delivery ${queued.delivery.id}`));
        } catch (err) {
          if (!page.isDisposed()) session.fail(err, messages, 'action');
        }
      }),
  });
  replayButton.addEventListener('click', () => dialog.open());
  return {
    element: h('div', { class: 'actions' }, retryButton, replayButton, hint),
    dialog: dialog.element,
    guard,
    /** Offers what the delivery's status allows. */
    show(d: DeliveryDetail): void {
      const offered = deliveryActions(d.status);
      retryButton.hidden = !offered.retryNow;
      replayButton.hidden = !offered.replay;
      replace(hint, ...actionHint(d, offered));
    },
  };
}

function actionHint(d: DeliveryDetail, offered: { retryNow: boolean; replay: boolean }): Child[] {
  if (offered.retryNow) return ['Retry now sends it at once instead of at its next attempt; later changes of its request stay queued behind it.'];
  if (offered.replay) {
    return [
      'A replay keeps the webhook-id (',
      h('code', null, marked(d.event_id)),
      '): a receiver that de-duplicates by it skips the replay as a delivery it already has.',
    ];
  }
  return ['Queued: it goes out as soon as the webhook takes it; there is nothing to retry or replay yet.'];
}

export function deliveryView(id: number) {
  return (root: HTMLElement, session: Session) => {
    const messages = createMessages();
    const list = h('dl', { class: 'facts', 'aria-busy': 'true' });
    const attemptsBody = h('tbody', null, h('tr', null, h('td', { colspan: ATTEMPT_COLUMNS.length, class: 'empty' }, 'Loading…')));
    const attempts = h('table', { class: 'attempts' }, h('caption', null, 'Attempts, oldest first'), headerRow(ATTEMPT_COLUMNS), attemptsBody);
    let disposed = false;
    let shown: string | null = null;
    let detail: DeliveryDetail | null = null;
    const verify = verifySection(() => detail?.event_id ?? '…');
    verify.hidden = true;
    const request = requestSection();

    const load = async (): Promise<void> => {
      try {
        const answer = await session.api.getDelivery(id);
        if (disposed) return;
        messages.clearAlert('load');
        list.removeAttribute('aria-busy');
        detail = answer;
        request.show(answer.request);
        // The request's time changes on every answer: the rest is redrawn only when it changed.
        const json = JSON.stringify({ ...answer, request: null });
        if (json === shown) return;
        shown = json;
        replace(list, ...facts(answer));
        replace(attemptsBody, ...attemptRows(answer));
        actions.show(answer);
        const code = verify.querySelector('p code');
        if (code !== null) replace(code, marked(answer.event_id));
        verify.hidden = false;
      } catch (err) {
        if (disposed) return;
        list.removeAttribute('aria-busy');
        session.fail(err, messages, 'load');
      }
    };
    const actions = actionSection(id, { session, messages, isDisposed: () => disposed, reload: load });

    root.append(
      heading(`Delivery ${id}`),
      messages.alert,
      messages.status,
      actions.guard.note,
      list,
      actions.element,
      h('h2', null, 'Attempts'),
      scrollingTable(attempts, 'Attempts'),
      request.element,
      verify,
      actions.dialog,
    );
    void load();
    session.live(load);
    return () => {
      disposed = true;
      actions.guard.dispose();
    };
  };
}

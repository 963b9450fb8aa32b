/**
 * #/webhook/edit: registering the organization's webhook, or changing it (URL, signing, its own
 * headers, rate limit), through POST /webhook/register_webhook: the API's checks and answers,
 * its reasons shown beside the fields. A header value that may be a credential is never shown
 * (the API answers null): its row says so, and it must be typed again to be kept.
 */
import { ApiError, type Webhook, type WebhookRegistration, type WebhookSettings } from './api-client.ts';
import { h, replace } from './dom.ts';
import { field, fieldErrors } from './fields.ts';
import { actionGuard, createMessages, heading, type Session, type View } from './ui.ts';

/** One header row: its name and value inputs. */
interface HeaderRow {
  readonly element: HTMLElement;
  readonly name: HTMLInputElement;
  readonly value: HTMLInputElement;
}

/** The header rows of the form, numbered in the labels as they are shown. */
function headerRows(list: HTMLElement) {
  const rows: HeaderRow[] = [];
  const relabel = () =>
    rows.forEach((row, i) => {
      row.name.setAttribute('aria-label', `Header ${i + 1} name`);
      row.value.setAttribute('aria-label', `Header ${i + 1} value`);
      row.element.querySelector('button')?.setAttribute('aria-label', `Remove header ${i + 1}`);
    });
  const add = (name = '', value: string | null = '') => {
    const nameInput = h('input', { type: 'text', class: 'mono header-name', autocomplete: 'off', spellcheck: 'false', maxlength: 100 });
    const valueInput = h('input', { type: 'text', class: 'mono header-value', autocomplete: 'off', spellcheck: 'false', maxlength: 4096 });
    nameInput.value = name;
    valueInput.value = value ?? '';
    if (value === null) valueInput.placeholder = 'value hidden: type it again';
    const remove = h('button', { type: 'button' }, 'Remove');
    const row: HeaderRow = { element: h('li', { class: 'header-row' }, nameInput, valueInput, remove), name: nameInput, value: valueInput };
    remove.addEventListener('click', () => {
      rows.splice(rows.indexOf(row), 1);
      row.element.remove();
      relabel();
    });
    rows.push(row);
    list.append(row.element);
    relabel();
    return row;
  };
  return {
    add,
    set(headers: Readonly<Record<string, string | null>>) {
      rows.length = 0;
      list.replaceChildren();
      for (const [name, value] of Object.entries(headers)) add(name, value);
    },
    /** The headers to send: every row with a name or a value, as typed (the API says what is wrong with one). */
    values(): Record<string, string> {
      const out: Record<string, string> = {};
      for (const row of rows) if (row.name.value !== '' || row.value.value !== '') out[row.name.value] = row.value.value;
      return out;
    },
  };
}

/** The form's controls. */
function controls() {
  const url = h('input', { id: 'webhook-url', name: 'webhook_url', type: 'url', inputmode: 'url', autocomplete: 'off', spellcheck: 'false', class: 'mono wide' });
  const hmac = h('input', { id: 'webhook-hmac', name: 'active_hmac', type: 'checkbox' });
  const rate = h('input', { id: 'webhook-rate', name: 'rate_limit', type: 'text', inputmode: 'numeric', autocomplete: 'off' });
  const list = h('ul', { class: 'header-rows' });
  const headers = headerRows(list);
  const addHeader = h('button', { type: 'button' }, 'Add header');
  const headersError = h('p', { class: 'field-error', id: 'webhook-headers-error', hidden: true });
  const headersSet = h(
    'fieldset',
    { class: 'headers-set', 'aria-describedby': 'webhook-headers-hint webhook-headers-error' },
    h('legend', null, 'Headers'),
    h('p', { class: 'hint', id: 'webhook-headers-hint' }, 'Sent on every delivery, after hookrelay’s own. A value that may be a credential is never shown again: type it again to keep it.'),
    list,
    addHeader,
    headersError,
  );
  addHeader.addEventListener('click', () => headers.add().name.focus());
  const urlField = field(url, 'URL', 'An absolute https URL: every status change of the organization’s anticipation requests is sent to it.');
  const hmacField = field(hmac, 'Sign deliveries (Standard Webhooks signatures)', 'Turned on for the first time, a signing secret is made and shown once.');
  const rateField = field(rate, 'Rate limit', 'Deliveries per second at most, 1 to 10,000; empty: no limit.');
  const errors = fieldErrors({
    webhook_url: { control: url, error: urlField.error },
    active_hmac: { control: hmac, error: hmacField.error },
    headers: { control: headersSet, error: headersError },
    rate_limit: { control: rate, error: rateField.error },
  });
  return { url, hmac, rate, headers, errors, elements: [urlField.element, hmacField.element, headersSet, rateField.element] };
}

type Controls = ReturnType<typeof controls>;

function fill(c: Controls, webhook: Webhook | null): void {
  c.url.value = webhook?.webhook_url ?? '';
  c.hmac.checked = webhook?.active_hmac ?? true;
  c.rate.value = webhook?.rate_limit === null || webhook === null ? '' : String(webhook.rate_limit);
  c.headers.set(webhook?.headers ?? {});
}

function settingsOf(c: Controls): WebhookSettings {
  const rate = c.rate.value.trim();
  return { webhook_url: c.url.value, active_hmac: c.hmac.checked, headers: c.headers.values(), rate_limit: rate === '' ? null : /^\d+$/.test(rate) ? Number(rate) : rate };
}

function showSecret(box: HTMLElement, secret: string): void {
  replace(
    box,
    h('label', { for: 'registered-secret' }, 'Signing secret'),
    h('output', { id: 'registered-secret', class: 'secret' }, secret),
    h('p', null, 'It is shown once: give it to your receiver now, which verifies the signatures with it (an admin can read it again with GET /webhook/get_secret).'),
  );
  box.hidden = false;
}

export const webhookFormView: View = (root: HTMLElement, session: Session) => {
  const messages = createMessages();
  const title = heading('Webhook settings');
  const c = controls();
  const submit = h('button', { type: 'submit', class: 'primary' }, 'Save');
  const fieldset = h('fieldset', { class: 'webhook-fields' }, ...c.elements, h('p', { class: 'hint' }, 'Saving describes the whole webhook: headers not listed are removed, and a failing or disabled webhook becomes active again.'), h('div', { class: 'actions' }, submit));
  const form = h('form', { class: 'webhook-form', novalidate: true, 'aria-labelledby': 'webhook-form-title', 'aria-busy': 'true' }, fieldset);
  title.id = 'webhook-form-title';
  const guard = actionGuard(session, [fieldset]);
  const secretBox = h('div', { class: 'secret-box', hidden: true });
  let disposed = false;
  const mode = (exists: boolean) => {
    title.textContent = exists ? 'Change the webhook' : 'Register the webhook';
    submit.textContent = exists ? 'Save changes' : 'Register webhook';
  };

  const load = async (): Promise<void> => {
    try {
      const webhook = await session.api.getWebhook();
      if (disposed) return;
      fill(c, webhook);
      mode(true);
    } catch (err) {
      if (disposed) return;
      const failure = err instanceof ApiError ? err.failure : null;
      if (failure?.kind === 'problem' && failure.code === 'webhook_not_configured') {
        fill(c, null);
        mode(false);
      } else session.fail(err, messages, 'load');
    }
    form.removeAttribute('aria-busy');
  };

  const save = (): Promise<void> =>
    guard.run(fieldset, async () => {
      messages.clearStatus();
      c.errors.clear();
      try {
        const { message, secret, ...webhook }: WebhookRegistration = await session.api.registerWebhook(settingsOf(c));
        if (disposed) return;
        messages.clearAlert();
        messages.showStatus(`${message}.`);
        if (secret !== undefined) showSecret(secretBox, secret);
        fill(c, webhook);
        mode(true);
      } catch (err) {
        if (disposed) return;
        c.errors.show(err);
        session.fail(err, messages, 'action');
      }
    });
  form.addEventListener('submit', (event) => {
    event.preventDefault();
    secretBox.hidden = true;
    secretBox.replaceChildren();
    void save();
  });

  root.append(title, messages.alert, messages.status, guard.note, secretBox, form, h('p', null, h('a', { href: '#/webhook' }, 'Back to the webhook')));
  void load();
  return () => {
    disposed = true;
    guard.dispose();
  };
};

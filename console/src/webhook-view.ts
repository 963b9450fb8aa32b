/** #/webhook: the organization's webhook, its health, test event and secret rotation. */
import { ApiError, type SecretRotation, type Webhook, type WebhookChange } from './api-client.ts';
import { chartSection, CHART_REFRESH_MS } from './chart-view.ts';
import { h, marked, replace, time, withTimes, type Child } from './dom.ts';
import { deliveryHref } from './route.ts';
import { actionGuard, confirmDialog, createMessages, heading, type ActionGuard, type Messages, type Session, type View } from './ui.ts';

function row(term: string, ...value: Child[]): HTMLElement[] {
  return [h('dt', null, term), h('dd', null, ...value)];
}

/** The rotation under way, as GET /webhook/get_webhook says (whoever rotated, from wherever). */
function rotationState(webhook: Webhook): Child[] {
  const until = webhook.previous_secret_expires_at;
  if (until !== null) return ['rotated; the previous secret keeps signing until ', time(until)];
  if (!webhook.active_hmac) return ['none (signing is off)'];
  return ['none'];
}

/** The webhook's own headers, one per line; a credential's value is never answered (null): said to be set. */
function headerLines(webhook: Webhook): Child[] {
  const entries = Object.entries(webhook.headers ?? {});
  if (entries.length === 0) return ['none'];
  return entries.map(([name, value]) => h('div', { class: 'header-line' }, h('code', null, marked(name)), ': ', value === null ? h('em', null, 'set; value hidden') : h('code', null, marked(value))));
}

/** The client certificate: who it names, which one, until when (never its key, which the API never answers). */
function certificateLines(webhook: Webhook): Child[] {
  const c = webhook.client_certificate;
  if (c === null || c === undefined) return ['none'];
  return [
    h('div', null, marked(c.subject), ` (${c.key_type}), issued by `, marked(c.issuer)),
    h('div', null, 'SHA-256 ', h('code', { class: 'fingerprint' }, c.fingerprint_sha256)),
    h('div', null, 'valid until ', time(c.not_after)),
  ];
}

/** The OAuth2 client credentials: token URL, client id, scope (the secret is never answered: said to be set). */
function oauth2Lines(webhook: Webhook): Child[] {
  const o = webhook.oauth2;
  if (o === null || o === undefined) return ['none'];
  return [
    h('div', null, 'token URL ', h('span', { class: 'url' }, marked(o.token_url))),
    h('div', null, 'client ', h('code', null, marked(o.client_id)), '; client secret ', h('em', null, 'set; value hidden')),
    ...(o.scope === null ? [] : [h('div', null, 'scope ', h('code', null, marked(o.scope)))]),
    ...(o.audience === null ? [] : [h('div', null, 'audience ', h('code', null, marked(o.audience)))]),
  ];
}

function facts(webhook: Webhook): HTMLElement[] {
  const lastError = webhook.last_error;
  return [
    ...row('URL', h('span', { class: 'url' }, marked(webhook.webhook_url))),
    ...row('Signing', webhook.active_hmac ? 'on (Standard Webhooks signatures)' : 'off'),
    ...row('Headers', ...headerLines(webhook)),
    ...row('Rate limit', webhook.rate_limit === null ? 'none' : `at most ${webhook.rate_limit} deliveries per second`),
    ...row('Client certificate', ...certificateLines(webhook)),
    ...row('OAuth2', ...oauth2Lines(webhook)),
    ...row('Status', h('span', { class: `badge badge-${webhook.status}` }, webhook.status), ' ', h('span', { class: 'detail' }, ...withTimes(webhook.status_detail))),
    ...row('Last success', time(webhook.last_success_at)),
    ...row('Last failure', ...(lastError === null ? [time(null)] : [time(lastError.at), ': ', lastError.error])),
    ...row('Secret rotation', ...rotationState(webhook)),
  ];
}

/** The action buttons of the page, in their order on it. */
interface Buttons {
  readonly sendTest: HTMLButtonElement;
  readonly rotate: HTMLButtonElement;
  readonly disable: HTMLButtonElement;
  readonly enable: HTMLButtonElement;
}

/** What the actions need of the page that holds them. */
interface ActionContext {
  readonly session: Session;
  readonly messages: Messages;
  readonly guard: ActionGuard;
  readonly buttons: Buttons;
  readonly secretBox: HTMLElement;
  /** Whether the page is gone: a late answer is dropped. */
  isDisposed(): boolean;
  /** Shows a webhook as the API answered it. */
  show(answer: Webhook): void;
  /** Loads the webhook again and redraws it, changed or not (the rotation state). */
  reload(): Promise<void>;
}

export const webhookView: View = (root: HTMLElement, session: Session) => {
  const messages = createMessages();
  const list = h('dl', { class: 'facts', 'aria-busy': 'true' });
  const buttons: Buttons = {
    sendTest: h('button', { type: 'button' }, 'Send test event'),
    rotate: h('button', { type: 'button' }, 'Rotate secret'),
    disable: h('button', { type: 'button', hidden: true }, 'Disable'),
    enable: h('button', { type: 'button', hidden: true }, 'Enable'),
  };
  const guard = actionGuard(session, [buttons.sendTest, buttons.rotate, buttons.disable, buttons.enable]);
  const secretBox = h('div', { class: 'secret-box', hidden: true });
  // The form that registers the webhook, or changes it (webhook-form.ts).
  const edit = h('a', { href: '#/webhook/edit', class: 'button' }, 'Change settings');
  let disposed = false;
  let webhook: Webhook | null = null;

  const show = (answer: Webhook) => {
    list.removeAttribute('aria-busy');
    const json = JSON.stringify(answer);
    if (webhook === null || json !== JSON.stringify(webhook)) replace(list, ...facts(answer));
    webhook = answer;
    // One of the two: Disable while it is on, Enable once it is disabled.
    buttons.disable.hidden = answer.status === 'disabled';
    buttons.enable.hidden = answer.status !== 'disabled';
  };

  const load = async (): Promise<void> => {
    try {
      const answer = await session.api.getWebhook();
      if (disposed) return;
      messages.clearAlert('load');
      edit.textContent = 'Change settings';
      show(answer);
    } catch (err) {
      if (disposed) return;
      list.removeAttribute('aria-busy');
      if (err instanceof ApiError && err.failure.kind === 'problem' && err.failure.code === 'webhook_not_configured') edit.textContent = 'Register the webhook';
      session.fail(err, messages, 'load');
    }
  };

  const dialogs = wireActions({
    session,
    messages,
    guard,
    buttons,
    secretBox,
    isDisposed: () => disposed,
    show,
    reload: () => {
      webhook = null;
      return load();
    },
  });
  const chart = chartSection(session.api, (err) => {
    if (!disposed) session.fail(err, messages, 'load');
  });

  root.append(
    heading('Webhook'),
    messages.alert,
    messages.status,
    guard.note,
    list,
    h('div', { class: 'actions' }, edit, buttons.sendTest, buttons.rotate, buttons.disable, buttons.enable),
    secretBox,
    chart.element,
    ...dialogs,
  );
  void load();
  void chart.load();
  session.live(load);
  session.live(() => chart.load(), CHART_REFRESH_MS);
  return () => {
    disposed = true;
    guard.dispose();
    chart.dispose();
  };
};

function showSecret(secretBox: HTMLElement, rotation: SecretRotation): void {
  replace(
    secretBox,
    h('label', { for: 'new-secret' }, 'New secret'),
    h('output', { id: 'new-secret', class: 'secret' }, rotation.secret),
    h(
      'p',
      null,
      'It is shown once: give it to your receiver now (an admin can read it again with GET /webhook/get_secret). Until ',
      time(rotation.previous_secret_expires_at),
      ' deliveries are signed with both the new and the previous secret.',
    ),
  );
  secretBox.hidden = false;
}

/** Makes the buttons act: test event, rotation and disabling after a confirmation, enabling. Returns the dialogs, for the page to hold. */
function wireActions(page: ActionContext): HTMLElement[] {
  const { session, messages, guard, buttons } = page;
  const attempt = (button: HTMLButtonElement, action: () => Promise<void>) =>
    guard.run(button, async () => {
      try {
        await action();
      } catch (err) {
        if (!page.isDisposed()) session.fail(err, messages, 'action');
      }
    });

  const rotateDialog = confirmDialog({
    title: 'Rotate the signing secret?',
    text: 'A new secret is made and shown once. The previous secret keeps signing alongside it for a grace period (24 hours by default), so the receiver can switch without losing deliveries.',
    confirm: 'Rotate',
    onConfirm: () =>
      void attempt(buttons.rotate, async () => {
        messages.clearStatus();
        const rotation = await session.api.rotateSecret();
        if (page.isDisposed()) return;
        messages.clearAlert();
        showSecret(page.secretBox, rotation);
        await page.reload();
      }),
  });

  const change = (button: HTMLButtonElement, call: () => Promise<WebhookChange>) =>
    attempt(button, async () => {
      messages.clearStatus();
      const { message, ...answer } = await call();
      if (page.isDisposed()) return;
      messages.clearAlert();
      page.show(answer);
      messages.showStatus(message);
    });

  const disableDialog = confirmDialog({
    title: 'Disable the webhook?',
    text: 'Nothing is sent to the receiver until the webhook is enabled again; its deliveries are held meanwhile, not dropped.',
    confirm: 'Disable webhook',
    onConfirm: () => void change(buttons.disable, () => session.api.disableWebhook()),
  });
  buttons.disable.addEventListener('click', () => disableDialog.open());
  buttons.enable.addEventListener('click', () => void change(buttons.enable, () => session.api.enableWebhook()));

  buttons.sendTest.addEventListener('click', () =>
    void attempt(buttons.sendTest, async () => {
      const queued = await session.api.sendTest();
      if (page.isDisposed()) return;
      messages.clearAlert();
      messages.showStatus(`${queued.message}. `, h('a', { href: deliveryHref(queued.delivery.id) }, `See delivery ${queued.delivery.id}`));
    }),
  );
  buttons.rotate.addEventListener('click', () => {
    page.secretBox.hidden = true;
    page.secretBox.replaceChildren();
    rotateDialog.open();
  });
  return [rotateDialog.element, disableDialog.element];
}

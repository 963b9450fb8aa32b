/** #/webhook: the organization's webhook, its health, test event and secret rotation. */
import type { SecretRotation, Webhook } from './api-client.ts';
import { chartSection, CHART_REFRESH_MS } from './chart-view.ts';
import { h, marked, replace, time, type Child } from './dom.ts';
import { deliveryHref } from './route.ts';
import { actionGuard, confirmDialog, createMessages, heading, type Session, type View } from './ui.ts';

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

function facts(webhook: Webhook): HTMLElement[] {
  const lastError = webhook.last_error;
  return [
    ...row('URL', h('span', { class: 'url' }, marked(webhook.webhook_url))),
    ...row('Signing', webhook.active_hmac ? 'on (Standard Webhooks signatures)' : 'off'),
    ...row('Headers', ...headerLines(webhook)),
    ...row('Rate limit', webhook.rate_limit === null ? 'none' : `at most ${webhook.rate_limit} deliveries per second`),
    ...row('Status', h('span', { class: `badge badge-${webhook.status}` }, webhook.status), ' ', h('span', { class: 'detail' }, webhook.status_detail)),
    ...row('Last success', time(webhook.last_success_at)),
    ...row('Last failure', ...(lastError === null ? [time(null)] : [time(lastError.at), ': ', lastError.error])),
    ...row('Secret rotation', ...rotationState(webhook)),
  ];
}

export const webhookView: View = (root: HTMLElement, session: Session) => {
  const messages = createMessages();
  const list = h('dl', { class: 'facts', 'aria-busy': 'true' });
  const sendTest = h('button', { type: 'button' }, 'Send test event');
  const rotate = h('button', { type: 'button' }, 'Rotate secret');
  const disable = h('button', { type: 'button', hidden: true }, 'Disable');
  const enable = h('button', { type: 'button', hidden: true }, 'Enable');
  const guard = actionGuard(session, [sendTest, rotate, disable, enable]);
  const secretBox = h('div', { class: 'secret-box', hidden: true });
  let disposed = false;
  let webhook: Webhook | null = null;

  const show = (answer: Webhook) => {
    list.removeAttribute('aria-busy');
    const json = JSON.stringify(answer);
    if (webhook === null || json !== JSON.stringify(webhook)) replace(list, ...facts(answer));
    webhook = answer;
    // One of the two: Disable while it is on, Enable once it is disabled.
    disable.hidden = answer.status === 'disabled';
    enable.hidden = answer.status !== 'disabled';
  };

  const load = async (): Promise<void> => {
    try {
      const answer = await session.api.getWebhook();
      if (disposed) return;
      messages.clearAlert('load');
      show(answer);
    } catch (err) {
      if (disposed) return;
      list.removeAttribute('aria-busy');
      session.fail(err, messages, 'load');
    }
  };

  const showSecret = (rotation: SecretRotation) => {
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
  };

  const dialog = confirmDialog({
    title: 'Rotate the signing secret?',
    text: 'A new secret is made and shown once. The previous secret keeps signing alongside it for a grace period (24 hours by default), so the receiver can switch without losing deliveries.',
    confirm: 'Rotate',
    onConfirm: () =>
      void guard.run(rotate, async () => {
        messages.clearStatus();
        try {
          const rotation = await session.api.rotateSecret();
          if (disposed) return;
          messages.clearAlert();
          showSecret(rotation);
          webhook = null; // redraw the rotation state
          await load();
        } catch (err) {
          if (!disposed) session.fail(err, messages, 'action');
        }
      }),
  });

  const change = (button: HTMLButtonElement, call: () => Promise<Webhook & { message: string }>) =>
    guard.run(button, async () => {
      messages.clearStatus();
      try {
        const { message, ...answer } = await call();
        if (disposed) return;
        messages.clearAlert();
        show(answer);
        messages.showStatus(message);
      } catch (err) {
        if (!disposed) session.fail(err, messages, 'action');
      }
    });

  const disableDialog = confirmDialog({
    title: 'Disable the webhook?',
    text: 'Nothing is sent to the receiver until the webhook is enabled again; its deliveries are held meanwhile, not dropped.',
    confirm: 'Disable webhook',
    onConfirm: () => void change(disable, () => session.api.disableWebhook()),
  });
  disable.addEventListener('click', () => disableDialog.open());
  enable.addEventListener('click', () => void change(enable, () => session.api.enableWebhook()));

  sendTest.addEventListener('click', () =>
    void guard.run(sendTest, async () => {
      try {
        const queued = await session.api.sendTest();
        if (disposed) return;
        messages.clearAlert();
        messages.showStatus(`${queued.message}. `, h('a', { href: deliveryHref(queued.delivery.id) }, `See delivery ${queued.delivery.id}`));
      } catch (err) {
        if (!disposed) session.fail(err, messages, 'action');
      }
    }),
  );
  rotate.addEventListener('click', () => {
    secretBox.hidden = true;
    secretBox.replaceChildren();
    dialog.open();
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
    h('div', { class: 'actions' }, sendTest, rotate, disable, enable),
    secretBox,
    chart.element,
    dialog.element,
    disableDialog.element,
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

/**
 * The DOM's side of the app (console-app.ts): draws the page ConsoleApp asks for in the page's
 * header and main elements, the sign-in form and the header's controls calling back into it.
 */
import type { AppControls, HeaderContent, Notice, Screen } from './app-contract.ts';
import { deliveriesView, resetDeliveriesState } from './deliveries-view.ts';
import { deliveryView } from './delivery-view.ts';
import { h, marked, replace } from './dom.ts';
import type { ProviderOption } from './oidc.ts';
import type { Route } from './route.ts';
import { auditView } from './audit-view.ts';
import { teamView } from './team-view.ts';
import { createMessages, heading, showFailure, type Session, type View } from './ui.ts';
import { webhookFormView } from './webhook-form.ts';
import { webhookView } from './webhook-view.ts';

export function createScreen(header: HTMLElement, main: HTMLElement): Screen {
  return {
    show(page, app, moveFocus) {
      main.replaceChildren();
      let endView = () => {};
      if (page.kind === 'sign-in') {
        header.hidden = true;
        header.replaceChildren();
        signInView(main, page.notice, page.provider, app);
      } else if (page.kind === 'signing-in') {
        header.hidden = true;
        main.append(h('p', { class: 'hint', role: 'status' }, 'Signing in…'));
      } else {
        drawHeader(header, page.header, app);
        endView = viewOf(page.route)(main, viewSession(app));
      }
      if (moveFocus) main.querySelector<HTMLElement>('h1')?.focus();
      return endView;
    },
    showHeader(content, app) {
      drawHeader(header, content, app);
    },
    forgetViewState: resetDeliveriesState,
  };
}

function viewOf(route: Route): View {
  switch (route.view) {
    case 'webhook':
      return webhookView;
    case 'webhook-edit':
      return webhookFormView;
    case 'team':
      return teamView;
    case 'audit':
      return auditView;
    case 'deliveries':
      return deliveriesView;
    case 'delivery':
      return deliveryView(route.id);
    case 'not-found':
      return notFoundView(route.path);
  }
}

/** What views get: the app's controls, with a failed call's alert shown in the view's own messages. */
function viewSession(app: AppControls): Session {
  return {
    api: app.api,
    canManage: () => app.canManage(),
    permits: (permission) => app.permits(permission),
    onReadOnly: (listener) => app.onReadOnly(listener),
    live: (refresh, intervalMs) => app.live(refresh, intervalMs),
    fail(error, messages, source) {
      if (app.failed(error) === 'show') showFailure(messages, source, error);
    },
  };
}

function noticeText(notice: Notice, provider: ProviderOption | null): string {
  if (typeof notice === 'object' && 'provider' in notice) return notice.provider;
  if (notice === 'expired' && provider?.kind === 'ready') return `Your session has ended: sign in with ${provider.provider.name} again, or open a new link.`;
  if (notice === 'expired') {
    return 'Your access token has expired: ask for a new link (an operator makes one with hookrelay console link --org ORG --email EMAIL), or paste a new token.';
  }
  if (notice === 'malformed') return 'This is not an access token: paste the whole token (three parts separated by dots), or open the link you were given.';
  return `This access token is not accepted (${notice.refused}). Ask for a new link (hookrelay console link), or paste another token.`;
}

function signInView(root: HTMLElement, notice: Notice | null, provider: ProviderOption | null, app: AppControls): void {
  const messages = createMessages();
  if (notice !== null) messages.showAlert('load', noticeText(notice, provider));
  const field = h('textarea', { id: 'access-token', name: 'token', rows: 5, required: true, autocomplete: 'off', autocapitalize: 'off', spellcheck: 'false' });
  const ready = provider?.kind === 'ready' ? provider.provider : null;
  const form = h(
    'form',
    { class: 'sign-in', 'aria-labelledby': 'sign-in-heading' },
    h('label', { for: 'access-token' }, 'Access token'),
    field,
    h('div', { class: 'actions' }, h('button', { type: 'submit', class: ready === null ? 'primary' : null }, 'Sign in')),
  );
  form.addEventListener('submit', (event) => {
    event.preventDefault();
    app.submitToken(field.value);
  });
  const title = heading('Sign in');
  title.id = 'sign-in-heading';
  root.append(title, messages.alert);
  if (ready !== null) {
    const button = h('button', { type: 'button', class: 'primary', id: 'sign-in-provider' }, `Sign in with ${ready.name}`);
    button.addEventListener('click', () => app.signInWithProvider());
    root.append(
      h('section', { class: 'sign-in-provider', 'aria-label': `Sign in with ${ready.name}` }, h('p', null, `You are sent to ${ready.name} to sign in, and back here.`), h('div', { class: 'actions' }, button)),
      h('h2', null, 'Or with a link or token'),
    );
  } else if (provider?.kind === 'unavailable') {
    root.append(h('p', { class: 'hint', role: 'status' }, `Sign-in with ${provider.name} is not available now: ${provider.detail}`));
  }
  root.append(
    h(
      'p',
      null,
      'Open the link an operator gave you (',
      h('code', null, 'hookrelay console link --org ORG --email EMAIL'),
      ' prints one), or paste an access token of this daemon. It is kept in this tab only, until you sign out or close it.',
    ),
    form,
  );
}

function notFoundView(path: string): View {
  return (root) => {
    root.append(heading('Page not found'), h('p', null, `The console has no page ${path}. `, h('a', { href: '#/webhook' }, 'Go to the webhook')));
    return () => {};
  };
}

function drawHeader(header: HTMLElement, content: HeaderContent, app: AppControls): void {
  const link = (href: string, text: string, current: boolean) => h('a', { href, 'aria-current': current ? 'page' : null }, text);
  const { route } = content;
  const signOutButton = h('button', { type: 'button', class: 'sign-out' }, 'Sign out');
  signOutButton.addEventListener('click', () => app.signOut());
  header.hidden = false;
  replace(
    header,
    h('p', { class: 'brand' }, 'hookrelay'),
    h(
      'nav',
      { 'aria-label': 'Console' },
      h(
        'ul',
        null,
        h('li', null, link('#/webhook', 'Webhook', route.view === 'webhook' || route.view === 'webhook-edit')),
        h('li', null, link('#/deliveries', 'Deliveries', route.view === 'deliveries')),
        h('li', null, link('#/team', 'Team', route.view === 'team')),
        h('li', null, link('#/audit', 'Audit', route.view === 'audit')),
      ),
    ),
    h(
      'p',
      { class: 'who' },
      'Organization ',
      h('strong', { class: 'mono' }, content.org === null ? 'unknown' : marked(content.org)),
      h('span', { class: 'sep' }, ' · '),
      content.email === null ? 'e-mail not in token' : marked(content.email),
      content.role === null ? null : h('span', { class: 'sep' }, ' · '),
      content.role,
    ),
    signOutButton,
  );
}

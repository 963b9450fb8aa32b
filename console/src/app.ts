/**
 * The console's entry point: sign-in (a link's `#token=` fragment, or a pasted token), the
 * header, and the hash router that shows one view at a time. The token lives in sessionStorage
 * and goes only into the `Authorization` header of API calls (docs/console.md).
 */
import { ApiError, createApiClient, isExpiredTokenFailure, MANAGE_PERMISSION, type ApiFailure } from './api-client.ts';
import { deliveriesView, resetDeliveriesState } from './deliveries-view.ts';
import { deliveryView } from './delivery-view.ts';
import { h, marked, replace } from './dom.ts';
import { createPoller, type Poller } from './live.ts';
import { apiBaseFromPath, parseRoute, type Route } from './route.ts';
import { canManageFromRole, decodePayload, identityOf, isExpired, looksLikeJwt, normalizeToken, TOKEN_KEY, tokenFromHash, type Identity } from './token.ts';
import { createMessages, heading, type Cleanup, type Session, type View } from './ui.ts';
import { webhookView } from './webhook-view.ts';

type Notice = 'expired' | 'malformed' | { readonly refused: string };

const header = document.getElementById('top') as HTMLElement;
const main = document.getElementById('main') as HTMLElement;

/** sessionStorage, or memory when the browser refuses storage. */
const store = (() => {
  let memory: string | null = null;
  return {
    get(): string | null {
      try {
        return sessionStorage.getItem(TOKEN_KEY);
      } catch {
        return memory;
      }
    },
    set(value: string): void {
      memory = value;
      try {
        sessionStorage.setItem(TOKEN_KEY, value);
      } catch {
        // kept in memory for this page
      }
    },
    clear(): void {
      memory = null;
      try {
        sessionStorage.removeItem(TOKEN_KEY);
      } catch {
        // nothing stored
      }
    },
  };
})();

let token: string | null = null;
let identity: Identity | null = null;
let readOnly = false;
/** Whether GET /users/me has answered for the current token (views wait for it: the role decides the buttons). */
let established = false;
let notice: Notice | null = null;
let expiryTimer: ReturnType<typeof setTimeout> | undefined;
const readOnlyListeners = new Set<() => void>();
let cleanup: Cleanup | null = null;
let pollers: Poller[] = [];

const currentToken = (): string | null => (token !== null && identity !== null && !isExpired(identity, Date.now()) ? token : null);

const api = createApiClient({ fetch: (url, init) => fetch(url, init), base: apiBaseFromPath(location.pathname), token: currentToken });

/** Longest delay setTimeout honours. */
const MAX_TIMER_MS = 2 ** 31 - 1;

function signIn(raw: string): boolean {
  const candidate = normalizeToken(raw);
  const payload = looksLikeJwt(candidate) ? decodePayload(candidate) : null;
  if (payload === null) {
    signOut('malformed', false);
    return false;
  }
  const who = identityOf(payload);
  if (isExpired(who, Date.now())) {
    signOut('expired', false);
    return false;
  }
  store.set(candidate);
  token = candidate;
  identity = who;
  readOnly = canManageFromRole(who.role) === false;
  established = false;
  notice = null;
  clearTimeout(expiryTimer);
  const delay = who.expiresAt === null ? null : who.expiresAt - Date.now() + 250;
  if (delay !== null && delay < MAX_TIMER_MS) {
    expiryTimer = setTimeout(() => {
      if (token === candidate) signOut('expired');
    }, delay);
  }
  return true;
}

function signOut(why: Notice | null, show = true): void {
  store.clear();
  token = null;
  identity = null;
  readOnly = false;
  established = false;
  notice = why;
  clearTimeout(expiryTimer);
  resetDeliveriesState();
  if (show) render(true);
}

function markReadOnly(): void {
  if (readOnly) return;
  readOnly = true;
  for (const listener of readOnlyListeners) listener();
  renderHeader(parseRoute(location.hash));
}

/** A 401: the token is expired or refused; back to the sign-in view, saying which. */
function refused(failure: ApiFailure): void {
  const expired = isExpiredTokenFailure(failure) || (identity !== null && isExpired(identity, Date.now()));
  signOut(expired ? 'expired' : { refused: failure.kind === 'problem' ? failure.detail : failure.message });
}

/**
 * Asks the API who the token is (GET /users/me): the organization, e-mail and role to show, and
 * whether the actions are open to the caller. Then shows the view.
 */
async function establish(moveFocus: boolean): Promise<void> {
  const forToken = token;
  try {
    const me = await api.me();
    if (token !== forToken || identity === null) return;
    identity = { ...identity, org: me.organization_id, email: me.email, role: me.role };
    readOnly = !me.permissions.includes(MANAGE_PERMISSION);
  } catch (err) {
    if (token !== forToken) return;
    const failure = err instanceof ApiError ? err.failure : null;
    if (failure !== null && failure.kind === 'problem' && failure.status === 401) return refused(failure);
    if (failure !== null && failure.kind === 'problem' && failure.status === 403) readOnly = true;
    // Otherwise (the daemon unreachable, or one without /users/me): the token's role claim if
    // any, and the API's 403s, tell; the views say what is wrong.
  }
  established = true;
  render(moveFocus);
}

function start(moveFocus: boolean): void {
  render(moveFocus);
  void establish(moveFocus);
}

const session: Session = {
  api,
  get identity(): Identity {
    return identity ?? identityOf({});
  },
  canManage: () => !readOnly,
  onReadOnly(listener) {
    readOnlyListeners.add(listener);
    return () => readOnlyListeners.delete(listener);
  },
  fail(error, messages, source) {
    if (!(error instanceof ApiError)) {
      messages.showAlert(source, 'Something went wrong in the console: ', error instanceof Error ? error.message : String(error));
      return;
    }
    const failure = error.failure;
    if (failure.kind === 'network') {
      messages.showAlert(source, failure.message);
      return;
    }
    if (failure.status === 401) return refused(failure);
    if (failure.status === 403) markReadOnly();
    messages.showAlert(source, h('strong', null, failure.title), ' ', failure.detail);
  },
  live(refresh, intervalMs) {
    const poller = createPoller({ run: refresh, isVisible: () => document.visibilityState === 'visible', ...(intervalMs === undefined ? {} : { intervalMs }) });
    pollers.push(poller);
    poller.start();
  },
};

function noticeContent(why: Notice): string {
  if (why === 'expired') {
    return 'Your access token has expired: ask for a new link (an operator makes one with hookrelay console link --org ORG --email EMAIL), or paste a new token.';
  }
  if (why === 'malformed') return 'This is not an access token: paste the whole token (three parts separated by dots), or open the link you were given.';
  return `This access token is not accepted (${why.refused}). Ask for a new link (hookrelay console link), or paste another token.`;
}

function signInView(root: HTMLElement): void {
  const messages = createMessages();
  if (notice !== null) messages.showAlert('load', noticeContent(notice));
  const field = h('textarea', { id: 'access-token', name: 'token', rows: 5, required: true, autocomplete: 'off', autocapitalize: 'off', spellcheck: 'false' });
  const form = h(
    'form',
    { class: 'sign-in', 'aria-labelledby': 'sign-in-heading' },
    h('label', { for: 'access-token' }, 'Access token'),
    field,
    h('div', { class: 'actions' }, h('button', { type: 'submit', class: 'primary' }, 'Sign in')),
  );
  form.addEventListener('submit', (event) => {
    event.preventDefault();
    if (!signIn(field.value)) return render(true);
    if (parseRoute(location.hash).view === 'not-found') history.replaceState(null, '', `${location.pathname}#/webhook`);
    start(true);
  });
  const title = heading('Sign in');
  title.id = 'sign-in-heading';
  root.append(
    title,
    messages.alert,
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

function renderHeader(route: Route): void {
  if (identity === null) return;
  const link = (href: string, text: string, current: boolean) => h('a', { href, 'aria-current': current ? 'page' : null }, text);
  const role = identity.role ?? (readOnly ? 'viewer (read-only)' : null);
  const signOutButton = h('button', { type: 'button', class: 'sign-out' }, 'Sign out');
  signOutButton.addEventListener('click', () => signOut(null));
  header.hidden = false;
  replace(
    header,
    h('p', { class: 'brand' }, 'hookrelay'),
    h(
      'nav',
      { 'aria-label': 'Console' },
      h('ul', null, h('li', null, link('#/webhook', 'Webhook', route.view === 'webhook')), h('li', null, link('#/deliveries', 'Deliveries', route.view === 'deliveries'))),
    ),
    h(
      'p',
      { class: 'who' },
      'Organization ',
      h('strong', { class: 'mono' }, identity.org === null ? 'unknown' : marked(identity.org)),
      h('span', { class: 'sep' }, ' · '),
      identity.email === null ? 'e-mail not in token' : marked(identity.email),
      role === null ? null : h('span', { class: 'sep' }, ' · '),
      role,
    ),
    signOutButton,
  );
}

function render(moveFocus: boolean): void {
  cleanup?.();
  cleanup = null;
  for (const poller of pollers) poller.stop();
  pollers = [];
  main.replaceChildren();
  if (token === null) {
    header.hidden = true;
    header.replaceChildren();
    signInView(main);
  } else if (!established) {
    header.hidden = true;
    main.append(h('p', { class: 'hint', role: 'status' }, 'Signing in…'));
  } else {
    const route = parseRoute(location.hash);
    renderHeader(route);
    const view: View =
      route.view === 'webhook' ? webhookView : route.view === 'deliveries' ? deliveriesView : route.view === 'delivery' ? deliveryView(route.id) : notFoundView(route.path);
    cleanup = view(main, session);
  }
  if (moveFocus) main.querySelector<HTMLElement>('h1')?.focus();
}

/** A sign-in link: take the token out of the address bar at once, then sign in with it. */
function takeLinkToken(): boolean {
  const linkToken = tokenFromHash(location.hash);
  if (linkToken === null) return false;
  history.replaceState(null, '', `${location.pathname}#/webhook`);
  signIn(linkToken);
  return true;
}

function boot(): void {
  if (!takeLinkToken()) {
    const saved = store.get();
    if (saved !== null) signIn(saved);
  }
  window.addEventListener('hashchange', () => {
    if (takeLinkToken() && token !== null) start(true);
    else render(true);
  });
  document.addEventListener('visibilitychange', () => {
    if (document.visibilityState === 'visible') for (const poller of pollers) poller.now();
  });
  if (token === null) render(false);
  else start(false);
}

boot();

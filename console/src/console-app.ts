/**
 * The console's state and its steps, with no DOM: who is signed in (the token, what it says and
 * what GET /users/me adds), which page the address bar asks for, and the live refreshes of the
 * view shown. The browser's storage, address bar, clock and fetch come in as a
 * ConsoleEnvironment and the page is drawn by a Screen (screen.ts), so that sign-in and routing
 * run under Node (test/console/app.test.ts). The token goes only into the `Authorization`
 * header of API calls (docs/console.md).
 */
import { ApiError, createApiClient, isExpiredTokenFailure, MANAGE_PERMISSION, type ApiClient, type ApiFailure, type FetchLike } from './api-client.ts';
import { createPoller, type Poller } from './live.ts';
import { parseRoute, type Route } from './route.ts';
import { canManageFromRole, decodePayload, identityOf, isExpired, looksLikeJwt, normalizeToken, tokenFromHash, type Identity } from './token.ts';

/** Why the sign-in page is shown instead of the console, when it is not a first visit or a sign-out. */
export type Notice = 'expired' | 'malformed' | { readonly refused: string };

/** What the header says: the current route (for the navigation) and who is signed in. */
export interface HeaderContent {
  readonly route: Route;
  readonly org: string | null;
  readonly email: string | null;
  /** The role to show: GET /users/me's, else the token's claim, else "viewer (read-only)" once the API has said so. */
  readonly role: string | null;
}

/** What the page shows: the sign-in form, a wait for GET /users/me, or a route's view under the header. */
export type Page =
  | { readonly kind: 'sign-in'; readonly notice: Notice | null }
  | { readonly kind: 'signing-in' }
  | { readonly kind: 'view'; readonly route: Route; readonly header: HeaderContent };

/** Where the signed-in token is kept: the tab's sessionStorage in the browser. */
export interface TokenStore {
  get(): string | null;
  set(token: string): void;
  clear(): void;
}

/** The address bar: its hash routes the console. */
export interface AddressBar {
  /** `location.hash`: `#/deliveries`, `#token=…`, or empty. */
  readonly hash: string;
  /** Replaces the current history entry's hash (history.replaceState), so Back never returns to it; fires no hashchange. */
  replaceHash(hash: string): void;
}

/** Time in epoch milliseconds, and timers; the browser's Date.now and setTimeout. */
export interface Clock {
  now(): number;
  setTimer(fn: () => void, ms: number): unknown;
  clearTimer(handle: unknown): void;
}

export interface ConsoleEnvironment {
  readonly fetch: FetchLike;
  /** Where the API is (apiBaseFromPath of the page's path). */
  readonly apiBase: string;
  readonly address: AddressBar;
  readonly storage: TokenStore;
  readonly clock: Clock;
  /** Whether the page is seen (document.visibilityState): a hidden page skips its refreshes. */
  isVisible(): boolean;
}

/** What the page's controls and views can ask of the app. */
export interface AppControls {
  readonly api: ApiClient;
  /** The sign-in form's token. */
  submitToken(raw: string): void;
  /** The header's Sign out button. */
  signOut(): void;
  /** False once the caller is known to be a viewer (role claim, GET /users/me, or a 403 from the API). */
  canManage(): boolean;
  /**
   * Whether the caller's role grants `permission`, as GET /users/me listed them; unknown (the
   * daemon did not say), the same as canManage(). The API checks every call anyway.
   */
  permits(permission: string): boolean;
  /** Calls `listener` when the caller turns out to be a viewer; returns the unsubscribe. */
  onReadOnly(listener: () => void): () => void;
  /** Runs `refresh` every `intervalMs` while the current view is shown and the page visible. */
  live(refresh: () => Promise<void>, intervalMs?: number): void;
  /**
   * What a failed call means for the session: a 401 signs out ('signed-out': the view that made
   * the call is gone, nothing more to show), a 403 turns on viewer mode; otherwise 'show'.
   */
  failed(error: unknown): 'signed-out' | 'show';
}

/** Draws pages: the DOM's side of the app (screen.ts), a recorder in the unit tests. */
export interface Screen {
  /**
   * Replaces the page shown with `page`, moving the focus to its heading when `moveFocus` (a
   * reader's own navigation, not the first load); returns what ends the view it started.
   */
  show(page: Page, app: AppControls, moveFocus: boolean): () => void;
  /** Redraws the header alone: the view stays as it is, its buttons updated by onReadOnly. */
  showHeader(header: HeaderContent, app: AppControls): void;
  /** Forgets what views keep from one showing to the next (the delivery log's filters and page). */
  forgetViewState(): void;
}

/** Who is signed in. One object per sign-in: an answer meant for an earlier one is told by identity. */
interface Caller {
  readonly token: string;
  identity: Identity;
  /** Whether the caller is known to be a viewer: the role claim, GET /users/me, or a 403. */
  readOnly: boolean;
  /** Whether GET /users/me has answered: views wait for it, since the role decides their buttons. */
  established: boolean;
  /** The permissions GET /users/me listed; null until it has. */
  permissions: readonly string[] | null;
}

/** Longest delay setTimeout honours; a later expiry is left to the API's 401. */
const MAX_TIMER_MS = 2 ** 31 - 1;
/** The expiry sign-out waits this long after `exp`: a timer may fire a little early, and the page must not say "expired" while the token still works. */
const EXPIRY_MARGIN_MS = 250;

export class ConsoleApp implements AppControls {
  readonly api: ApiClient;
  private readonly env: ConsoleEnvironment;
  private readonly screen: Screen;
  private caller: Caller | null = null;
  private notice: Notice | null = null;
  private expiryTimer: unknown = null;
  private endView: (() => void) | null = null;
  private pollers: Poller[] = [];
  private readonly readOnlyListeners = new Set<() => void>();

  constructor(env: ConsoleEnvironment, screen: Screen) {
    this.env = env;
    this.screen = screen;
    this.api = createApiClient({ fetch: env.fetch, base: env.apiBase, token: () => this.currentToken() });
  }

  /** Signs in from a link's `#token=` or the stored token, if any, and shows the page. */
  start(): void {
    if (!this.takeLinkToken()) {
      const saved = this.env.storage.get();
      if (saved !== null) this.signIn(saved);
    }
    if (this.caller === null) this.render(false);
    else this.begin(false);
  }

  /** The address bar's hash changed: a link, a click, Back or Forward. */
  hashChanged(): void {
    if (this.takeLinkToken() && this.caller !== null) this.begin(true);
    else this.render(true);
  }

  /** The page became visible or hidden: a visible page catches up at once. */
  visibilityChanged(): void {
    if (!this.env.isVisible()) return;
    for (const poller of this.pollers) poller.now();
  }

  submitToken(raw: string): void {
    if (!this.signIn(raw)) {
      this.render(true);
      return;
    }
    if (parseRoute(this.env.address.hash).view === 'not-found') this.env.address.replaceHash('#/webhook');
    this.begin(true);
  }

  signOut(): void {
    this.endSession(null);
  }

  canManage(): boolean {
    return !(this.caller?.readOnly ?? false);
  }

  permits(permission: string): boolean {
    const permissions = this.caller?.permissions ?? null;
    return permissions === null ? this.canManage() : permissions.includes(permission);
  }

  onReadOnly(listener: () => void): () => void {
    this.readOnlyListeners.add(listener);
    return () => this.readOnlyListeners.delete(listener);
  }

  live(refresh: () => Promise<void>, intervalMs?: number): void {
    const { clock } = this.env;
    const poller = createPoller({
      run: refresh,
      isVisible: () => this.env.isVisible(),
      setTimer: (fn, ms) => clock.setTimer(fn, ms),
      clearTimer: (handle) => clock.clearTimer(handle),
      ...(intervalMs === undefined ? {} : { intervalMs }),
    });
    this.pollers.push(poller);
    poller.start();
  }

  failed(error: unknown): 'signed-out' | 'show' {
    const failure = error instanceof ApiError ? error.failure : null;
    if (failure?.kind !== 'problem') return 'show';
    if (failure.status === 401) {
      this.refused(failure);
      return 'signed-out';
    }
    if (failure.status === 403) this.markReadOnly();
    return 'show';
  }

  /** What the page shows now. */
  page(): Page {
    if (this.caller === null) return { kind: 'sign-in', notice: this.notice };
    if (!this.caller.established) return { kind: 'signing-in' };
    const route = parseRoute(this.env.address.hash);
    return { kind: 'view', route, header: this.headerContent(this.caller, route) };
  }

  /** The token to send, while it has not expired. */
  private currentToken(): string | null {
    const caller = this.caller;
    return caller !== null && !isExpired(caller.identity, this.env.clock.now()) ? caller.token : null;
  }

  /**
   * A sign-in link: takes the token out of the address bar before anything else (it must not
   * stay in the history), then signs in with it. False when the hash holds no token.
   */
  private takeLinkToken(): boolean {
    const linkToken = tokenFromHash(this.env.address.hash);
    if (linkToken === null) return false;
    this.env.address.replaceHash('#/webhook');
    this.signIn(linkToken);
    return true;
  }

  /** Keeps a token that has a JWT's form and has not expired; otherwise signs out saying why. */
  private signIn(raw: string): boolean {
    const token = normalizeToken(raw);
    const payload = looksLikeJwt(token) ? decodePayload(token) : null;
    if (payload === null) {
      this.endSession('malformed', false);
      return false;
    }
    const identity = identityOf(payload);
    if (isExpired(identity, this.env.clock.now())) {
      this.endSession('expired', false);
      return false;
    }
    this.env.storage.set(token);
    const caller: Caller = { token, identity, readOnly: canManageFromRole(identity.role) === false, established: false, permissions: null };
    this.caller = caller;
    this.notice = null;
    this.scheduleExpiry(caller);
    return true;
  }

  private scheduleExpiry(caller: Caller): void {
    const { clock } = this.env;
    if (this.expiryTimer !== null) clock.clearTimer(this.expiryTimer);
    this.expiryTimer = null;
    const expiresAt = caller.identity.expiresAt;
    if (expiresAt === null) return;
    const delay = expiresAt - clock.now() + EXPIRY_MARGIN_MS;
    if (delay >= MAX_TIMER_MS) return;
    this.expiryTimer = clock.setTimer(() => {
      if (this.caller === caller) this.endSession('expired');
    }, delay);
  }

  /** Forgets the token and whatever views keep; shows the sign-in page with `notice` unless `redraw` is false. */
  private endSession(notice: Notice | null, redraw = true): void {
    this.env.storage.clear();
    this.caller = null;
    this.notice = notice;
    if (this.expiryTimer !== null) this.env.clock.clearTimer(this.expiryTimer);
    this.expiryTimer = null;
    this.screen.forgetViewState();
    if (redraw) this.render(true);
  }

  /** A 401: the token has expired or is refused; back to the sign-in page, saying which. */
  private refused(failure: ApiFailure): void {
    const expired = isExpiredTokenFailure(failure) || (this.caller !== null && isExpired(this.caller.identity, this.env.clock.now()));
    this.endSession(expired ? 'expired' : { refused: failure.kind === 'problem' ? failure.detail : failure.message });
  }

  private markReadOnly(): void {
    const caller = this.caller;
    if (caller === null || caller.readOnly) return;
    caller.readOnly = true;
    for (const listener of this.readOnlyListeners) listener();
    this.screen.showHeader(this.headerContent(caller, parseRoute(this.env.address.hash)), this);
  }

  /** Shows "Signing in…" while GET /users/me says who the token is, then the view. */
  private begin(moveFocus: boolean): void {
    this.render(moveFocus);
    void this.establish(moveFocus);
  }

  /**
   * Asks the API who the token is (GET /users/me): the organization, e-mail and role to show,
   * and whether the actions are open to the caller. Then shows the view.
   */
  private async establish(moveFocus: boolean): Promise<void> {
    const caller = this.caller;
    if (caller === null) return;
    try {
      const me = await this.api.me();
      if (this.caller !== caller) return;
      caller.identity = { ...caller.identity, org: me.organization_id, email: me.email, role: me.role };
      caller.readOnly = !me.permissions.includes(MANAGE_PERMISSION);
      caller.permissions = me.permissions;
    } catch (err) {
      if (this.caller !== caller) return;
      const failure = err instanceof ApiError ? err.failure : null;
      if (failure?.kind === 'problem' && failure.status === 401) return this.refused(failure);
      if (failure?.kind === 'problem' && failure.status === 403) caller.readOnly = true;
      // Otherwise (the daemon unreachable, or one without /users/me) the token's role claim, if
      // any, and the API's 403s decide the buttons; the views say what is wrong.
    }
    caller.established = true;
    this.render(moveFocus);
  }

  /** Ends the view shown and its live refreshes, then shows the page of the current state. */
  private render(moveFocus: boolean): void {
    this.endView?.();
    this.endView = null;
    for (const poller of this.pollers) poller.stop();
    this.pollers = [];
    this.endView = this.screen.show(this.page(), this, moveFocus);
  }

  private headerContent(caller: Caller, route: Route): HeaderContent {
    const { org, email, role } = caller.identity;
    return { route, org, email, role: role ?? (caller.readOnly ? 'viewer (read-only)' : null) };
  }
}

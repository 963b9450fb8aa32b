/**
 * The console's state and its steps, with no DOM: who is signed in (the token, what it says and
 * what GET /users/me adds), which page the address bar asks for, and the live refreshes of the
 * view shown. The browser's storage, address bar, clock and fetch come in as a
 * ConsoleEnvironment and the page is drawn by a Screen (screen.ts), so that sign-in and routing
 * run under Node (test/console/app.test.ts). The token goes only into the `Authorization`
 * header of API calls (docs/console.md).
 */
import type { AppControls, ConsoleEnvironment, HeaderContent, Notice, Page, Screen } from './app-contract.ts';
import { ApiError, createApiClient, isExpiredTokenFailure, MANAGE_PERMISSION, type ApiClient, type ApiFailure } from './api-client.ts';
import { createPoller, type Poller } from './live.ts';
import { parseRoute, type Route } from './route.ts';
import {
  acceptedCode,
  beginSignIn,
  endSessionUrl,
  exchangeCode,
  OIDC_PENDING_KEY,
  OIDC_SESSION_KEY,
  parsePending,
  parseSession,
  type ProviderAnswer,
  providerAnswerOf,
  type ProviderOption,
  providerOptionOf,
  type ProviderSignIn,
  type ProviderTokens,
  refreshTokens,
  TokenRequestError,
} from './oidc.ts';
import { canManageFromRole, decodePayload, identityOf, isExpired, looksLikeJwt, normalizeToken, tokenFromHash, type Identity } from './token.ts';

/** Who is signed in. One object per sign-in: an answer meant for an earlier one is told by identity. */
interface Caller {
  /** Replaced by a refresh of a provider's token: calls read it when they are made. */
  token: string;
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
/** A provider's token with a refresh token is refreshed this long before it expires (or at two thirds of a shorter life). */
const REFRESH_AHEAD_MS = 60_000;
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
  /** How the sign-in page may sign in besides links: null until GET console/sign-in.json answers. */
  private providerOption: ProviderOption | null = null;
  private providerOptionLoad: Promise<ProviderOption> | null = null;
  /** The identity provider's answer is being exchanged for a token. */
  private exchanging = false;
  private refreshTimer: unknown = null;

  constructor(env: ConsoleEnvironment, screen: Screen) {
    this.env = env;
    this.screen = screen;
    this.api = createApiClient({ fetch: env.fetch, base: env.apiBase, token: () => this.currentToken() });
  }

  /**
   * Signs in from the identity provider's answer (the query it sent the browser back with), a
   * link's `#token=` or the stored token, if any, and shows the page.
   */
  start(): void {
    const answer = providerAnswerOf(this.env.address.search);
    if (answer !== null) {
      // Out of the address bar and its history before anything else, like a link's token.
      this.env.address.replaceSearchAndHash('', this.env.address.hash);
      void this.finishProviderSignIn(answer);
      return;
    }
    void this.loadProviderOption().then((option) => {
      // The sign-in page gains its "Sign in with" button; a provider's token, its refresh.
      if (option.kind === 'none') return;
      if (this.caller === null && !this.exchanging) this.render(false);
      else if (this.caller !== null) this.scheduleRefresh(this.caller);
    });
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
    // A token of this daemon's: no session at the provider to refresh or end.
    this.env.tabStore.remove(OIDC_SESSION_KEY);
    if (!this.signIn(raw)) {
      this.render(true);
      return;
    }
    if (parseRoute(this.env.address.hash).view === 'not-found') this.env.address.replaceHash('#/webhook');
    this.begin(true);
  }

  signInWithProvider(): void {
    void this.goToProvider();
  }

  signOut(): void {
    const session = parseSession(this.env.tabStore.get(OIDC_SESSION_KEY));
    this.endSession(null);
    const provider = this.readyProvider();
    const url = session !== null && provider !== null ? endSessionUrl(provider, session.idToken) : null;
    // The session at the provider ends too, where it has an end_session_endpoint: it sends the browser back here.
    if (url !== null) this.env.address.leaveFor(url);
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
    if (this.exchanging) return { kind: 'signing-in' };
    if (this.caller === null) return { kind: 'sign-in', notice: this.notice, provider: this.providerOption ?? { kind: 'none' } };
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
    this.env.tabStore.remove(OIDC_SESSION_KEY);
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

  /** GET console/sign-in.json, once: whether the daemon offers sign-in through the identity provider. */
  private loadProviderOption(): Promise<ProviderOption> {
    this.providerOptionLoad ??= (async () => {
      let option: ProviderOption = { kind: 'none' };
      try {
        const response = await this.env.fetch(`${this.env.apiBase}console/sign-in.json`, { method: 'GET', headers: { Accept: 'application/json' }, credentials: 'omit', cache: 'no-store' });
        if (response.status === 200) option = providerOptionOf(JSON.parse(await response.text()));
      } catch {
        // An older daemon, or none reachable: links and pasted tokens only.
      }
      this.providerOption = option;
      return option;
    })();
    return this.providerOptionLoad;
  }

  private readyProvider(): ProviderSignIn | null {
    return this.providerOption?.kind === 'ready' ? this.providerOption.provider : null;
  }

  /** Starts the authorization code flow: a new state and verifier kept in the tab, then the provider's page. */
  private async goToProvider(): Promise<void> {
    const provider = this.readyProvider();
    if (provider === null) return;
    const back = new URL(provider.redirectUri);
    if (back.origin !== this.env.address.origin) {
      // The tab's storage, where the verifier waits, belongs to this origin only.
      this.showNotice({ provider: `Sign-in through ${provider.name} comes back to ${back.origin}, not to this address: open the console at ${provider.redirectUri}` });
      return;
    }
    let started: Awaited<ReturnType<typeof beginSignIn>>;
    try {
      const route = parseRoute(this.env.address.hash);
      started = await beginSignIn(provider, route.view === 'not-found' ? '#/webhook' : this.env.address.hash || '#/webhook', this.env.clock.now());
    } catch {
      this.showNotice({ provider: 'This browser cannot make the sign-in\'s code challenge here (WebCrypto needs HTTPS, or localhost): open the console over HTTPS' });
      return;
    }
    this.env.tabStore.set(OIDC_PENDING_KEY, JSON.stringify(started.pending));
    this.env.address.leaveFor(started.url);
  }

  /** The provider sent the browser back: checks its answer, exchanges the code, signs in with the access token. */
  private async finishProviderSignIn(answer: ProviderAnswer): Promise<void> {
    this.exchanging = true;
    this.render(false);
    const pending = parsePending(this.env.tabStore.get(OIDC_PENDING_KEY));
    this.env.tabStore.remove(OIDC_PENDING_KEY);
    const option = await this.loadProviderOption();
    let failure: string | null = null;
    let tokens: ProviderTokens | null = null;
    if (option.kind !== 'ready') {
      failure = option.kind === 'unavailable' ? `Sign-in through ${option.name} is not available now: ${option.detail}` : 'This daemon does not offer sign-in through an identity provider (console.oidc.clientId is not set)';
    } else {
      const accepted = acceptedCode(answer, pending, option.provider, this.env.clock.now());
      if (!accepted.ok) failure = accepted.reason;
      else {
        try {
          tokens = await exchangeCode(this.env.fetch, option.provider, pending!, accepted.code);
        } catch (err) {
          failure = err instanceof TokenRequestError ? err.message : `The sign-in failed (${String(err)})`;
        }
      }
    }
    this.exchanging = false;
    if (tokens !== null && !looksLikeJwt(tokens.accessToken)) {
      failure = `${this.readyProvider()?.name ?? 'The identity provider'} gave an access token hookrelay cannot verify (not a JWT): the administrator sets console.oidc.scopes or console.oidc.resource so that it issues one for hookrelay (auth.provider.audience)`;
    }
    if (failure !== null || tokens === null) {
      this.endSession({ provider: failure ?? 'The sign-in failed' });
      return;
    }
    this.env.tabStore.set(OIDC_SESSION_KEY, JSON.stringify({ idToken: tokens.idToken, refreshToken: tokens.refreshToken }));
    if (!this.signIn(tokens.accessToken)) {
      this.render(false);
      return;
    }
    this.env.address.replaceHash(pending?.returnTo ?? '#/webhook');
    this.scheduleRefresh(this.caller!);
    this.begin(false);
  }

  /** Shows the sign-in page with `notice`, signed out. */
  private showNotice(notice: Notice): void {
    this.notice = notice;
    if (this.caller === null) this.render(true);
  }

  /**
   * A token of the provider that came with a refresh token is refreshed before it expires, so a
   * console left open stays signed in as long as the provider's session allows. A refresh that
   * fails leaves the token to expire as any other (the sign-in page then says so).
   */
  private scheduleRefresh(caller: Caller): void {
    const { clock } = this.env;
    if (this.refreshTimer !== null) clock.clearTimer(this.refreshTimer);
    this.refreshTimer = null;
    const session = parseSession(this.env.tabStore.get(OIDC_SESSION_KEY));
    const provider = this.readyProvider();
    const expiresAt = caller.identity.expiresAt;
    if (session?.refreshToken == null || provider === null || expiresAt === null) return;
    const left = expiresAt - clock.now();
    const delay = Math.max(0, left - Math.min(REFRESH_AHEAD_MS, left / 3));
    if (delay >= MAX_TIMER_MS) return;
    this.refreshTimer = clock.setTimer(() => void this.refresh(caller, provider, session.refreshToken!), delay);
  }

  private async refresh(caller: Caller, provider: ProviderSignIn, refreshToken: string): Promise<void> {
    this.refreshTimer = null;
    let tokens: ProviderTokens;
    try {
      tokens = await refreshTokens(this.env.fetch, provider, refreshToken);
    } catch {
      return;
    }
    const payload = decodePayload(tokens.accessToken);
    if (this.caller !== caller || payload === null) return;
    const identity = identityOf(payload);
    if (isExpired(identity, this.env.clock.now())) return;
    const previous = parseSession(this.env.tabStore.get(OIDC_SESSION_KEY));
    this.env.tabStore.set(OIDC_SESSION_KEY, JSON.stringify({ idToken: tokens.idToken ?? previous?.idToken ?? null, refreshToken: tokens.refreshToken ?? refreshToken }));
    this.env.storage.set(tokens.accessToken);
    caller.token = tokens.accessToken;
    // Who the caller is stays what GET /users/me said; only the expiry moves.
    caller.identity = { ...caller.identity, expiresAt: identity.expiresAt };
    this.scheduleExpiry(caller);
    this.scheduleRefresh(caller);
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
    this.env.tabStore.remove(OIDC_SESSION_KEY);
    if (this.refreshTimer !== null) this.env.clock.clearTimer(this.refreshTimer);
    this.refreshTimer = null;
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

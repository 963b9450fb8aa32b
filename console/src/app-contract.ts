/**
 * What the console's app (console-app.ts) and its surroundings agree on: the browser's parts it is
 * given (ConsoleEnvironment), the screen that draws its pages (Screen, screen.ts), what a page
 * holds, and what views may ask of the app (AppControls). Types only.
 */
import type { ApiClient, FetchLike } from './api-client.ts';
import type { ProviderOption } from './oidc.ts';
import type { Route } from './route.ts';

/** Why the sign-in page is shown instead of the console, when it is not a first visit or a sign-out. */
export type Notice = 'expired' | 'malformed' | { readonly refused: string } | { readonly provider: string };

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
  | { readonly kind: 'sign-in'; readonly notice: Notice | null; readonly provider: ProviderOption }
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
  /** `location.search`: the identity provider's answer (`?code=…&state=…`), or empty. */
  readonly search: string;
  /** `location.origin`. */
  readonly origin: string;
  /** Replaces the current history entry's hash (history.replaceState), so Back never returns to it; fires no hashchange. */
  replaceHash(hash: string): void;
  /** Replaces the current history entry's query and hash (history.replaceState): the provider's answer leaves the address bar and its history. */
  replaceSearchAndHash(search: string, hash: string): void;
  /** Leaves the console for `url` (location.assign): the identity provider's sign-in or sign-out. */
  leaveFor(url: string): void;
}

/** The tab's sessionStorage by key, for what sign-in through the provider keeps (oidc.ts). */
export interface TabStore {
  get(key: string): string | null;
  set(key: string, value: string): void;
  remove(key: string): void;
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
  /** The tab's storage for the provider's sign-in under way and its ID and refresh tokens. */
  readonly tabStore: TabStore;
  readonly clock: Clock;
  /** Whether the page is seen (document.visibilityState): a hidden page skips its refreshes. */
  isVisible(): boolean;
}

/** What the page's controls and views can ask of the app. */
export interface AppControls {
  readonly api: ApiClient;
  /** The sign-in form's token. */
  submitToken(raw: string): void;
  /** The sign-in page's "Sign in with" button: off to the identity provider. */
  signInWithProvider(): void;
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


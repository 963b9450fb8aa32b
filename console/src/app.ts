/**
 * The console's entry point (index.html loads app.js): hands the browser's storage, address
 * bar, clock and fetch to a ConsoleApp drawing into the page's header and main elements, and
 * passes the browser's events on to it.
 */
import type { AddressBar, Clock, TabStore, TokenStore } from './app-contract.ts';
import { ConsoleApp } from './console-app.ts';
import { apiBaseFromPath } from './route.ts';
import { createScreen } from './screen.ts';
import { TOKEN_KEY } from './token.ts';

/** The tab's sessionStorage, or memory for this page when the browser refuses storage (a privacy setting, a sandbox). */
function tabStorage(): TokenStore {
  let memory: string | null = null;
  return {
    get() {
      try {
        return sessionStorage.getItem(TOKEN_KEY);
      } catch {
        return memory;
      }
    },
    set(token) {
      memory = token;
      try {
        sessionStorage.setItem(TOKEN_KEY, token);
      } catch {
        // memory holds it for this page
      }
    },
    clear() {
      memory = null;
      try {
        sessionStorage.removeItem(TOKEN_KEY);
      } catch {
        // there is nothing stored to remove
      }
    },
  };
}

/** The tab's sessionStorage by key; nothing kept when the browser refuses storage (sign-in through the provider then fails with a clear notice). */
const tabStore: TabStore = {
  get(key) {
    try {
      return sessionStorage.getItem(key);
    } catch {
      return null;
    }
  },
  set(key, value) {
    try {
      sessionStorage.setItem(key, value);
    } catch {
      // refused: see above
    }
  },
  remove(key) {
    try {
      sessionStorage.removeItem(key);
    } catch {
      // nothing stored to remove
    }
  },
};

const addressBar: AddressBar = {
  get hash() {
    return location.hash;
  },
  get search() {
    return location.search;
  },
  get origin() {
    return location.origin;
  },
  replaceHash(hash) {
    history.replaceState(null, '', `${location.pathname}${hash}`);
  },
  replaceSearchAndHash(search, hash) {
    history.replaceState(null, '', `${location.pathname}${search}${hash}`);
  },
  leaveFor(url) {
    location.assign(url);
  },
};

const clock: Clock = {
  now: () => Date.now(),
  setTimer: (fn, ms) => setTimeout(fn, ms),
  clearTimer: (handle) => clearTimeout(handle as ReturnType<typeof setTimeout>),
};

const app = new ConsoleApp(
  {
    fetch: (url, init) => fetch(url, init),
    apiBase: apiBaseFromPath(location.pathname),
    address: addressBar,
    storage: tabStorage(),
    tabStore,
    clock,
    isVisible: () => document.visibilityState === 'visible',
  },
  createScreen(document.getElementById('top') as HTMLElement, document.getElementById('main') as HTMLElement),
);
window.addEventListener('hashchange', () => app.hashChanged());
document.addEventListener('visibilitychange', () => app.visibilityChanged());
app.start();

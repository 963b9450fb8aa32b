/** Parts every view uses: the session it runs in, its messages, confirmations, viewer mode. */
import { ApiError, type ApiClient } from './api-client.ts';
import { h, replace, uid, withTimes, type Child } from './dom.ts';

/** Where a message came from: a refresh's failure is cleared by the next refresh that works. */
export type Source = 'load' | 'action';

export interface Messages {
  readonly alert: HTMLElement;
  readonly status: HTMLElement;
  showAlert(source: Source, ...content: Child[]): void;
  showStatus(...content: Child[]): void;
  /** Clears the alert if it came from `source` (any source when omitted). */
  clearAlert(source?: Source): void;
  clearStatus(): void;
}

/**
 * One alert (role="alert") and one status (role="status") per view, hidden while empty so that
 * a page never has two of either.
 */
export function createMessages(): Messages {
  const alert = h('div', { role: 'alert', class: 'msg msg-alert', hidden: true });
  const status = h('div', { role: 'status', class: 'msg msg-status', hidden: true });
  let alertSource: Source | null = null;
  return {
    alert,
    status,
    showAlert(source, ...content) {
      alertSource = source;
      alert.hidden = false;
      replace(alert, ...content);
    },
    showStatus(...content) {
      status.hidden = false;
      replace(status, ...content);
    },
    clearAlert(source) {
      if (source !== undefined && source !== alertSource) return;
      alertSource = null;
      alert.hidden = true;
      alert.replaceChildren();
    },
    clearStatus() {
      status.hidden = true;
      status.replaceChildren();
    },
  };
}

/**
 * A failed call's alert: the problem's title and detail, the network failure's message, or an
 * error of the console itself.
 */
export function showFailure(messages: Messages, source: Source, error: unknown): void {
  if (!(error instanceof ApiError)) {
    messages.showAlert(source, 'Something went wrong in the console: ', error instanceof Error ? error.message : String(error));
    return;
  }
  const failure = error.failure;
  if (failure.kind === 'network') messages.showAlert(source, failure.message);
  else messages.showAlert(source, h('strong', null, failure.title), ' ', ...withTimes(failure.detail));
}

/** What a view gets from the app (screen.ts makes it from ConsoleApp). */
export interface Session {
  readonly api: ApiClient;
  /** False once the caller is known to be a viewer (role claim, or a 403 from the API). */
  canManage(): boolean;
  /** Whether the caller's role grants `permission` (GET /users/me); unknown, the same as canManage(). */
  permits(permission: string): boolean;
  /** Calls `listener` when the caller turns out to be a viewer; returns the unsubscribe. */
  onReadOnly(listener: () => void): () => void;
  /** Shows what a failed call means (signs out on 401, viewer mode on 403). */
  fail(error: unknown, messages: Messages, source: Source): void;
  /** Runs `refresh` every `intervalMs` (REFRESH_INTERVAL_MS by default) while the view is shown and the page visible. */
  live(refresh: () => Promise<void>, intervalMs?: number): void;
}

export type Cleanup = () => void;
export type View = (root: HTMLElement, session: Session) => Cleanup;

export const VIEWER_NOTE_ID = 'viewer-note';

/** What an action guard disables: a button, or a fieldset (every control of a form at once). */
export type Guarded = HTMLButtonElement | HTMLFieldSetElement;

/**
 * The action buttons of a view: disabled, with the note "Viewers cannot change anything", when
 * the caller cannot change anything (`may`, canManage() by default); disabled while their own
 * action runs. `noteText` says what the caller may not do, when it is not the webhook.
 */
export function actionGuard<B extends Guarded>(
  session: Session,
  buttons: readonly B[],
  options: { readonly may?: () => boolean; readonly noteText?: string } = {},
) {
  const may = options.may ?? (() => session.canManage());
  // The note is in the page only for a viewer (not merely hidden): nothing says "viewer" to an admin.
  const slot = h('div', { class: 'note-slot' });
  const note = h(
    'p',
    { class: 'note', id: VIEWER_NOTE_ID },
    options.noteText ?? 'Viewers cannot change anything: your role can read this organization’s webhook and deliveries, not change them.',
  );
  const busy = new Set<B>();
  const apply = () => {
    const readOnly = !may();
    if (readOnly && note.parentNode !== slot) slot.replaceChildren(note);
    if (!readOnly && note.parentNode === slot) slot.replaceChildren();
    for (const button of buttons) {
      button.disabled = readOnly || busy.has(button);
      if (readOnly) button.setAttribute('aria-describedby', VIEWER_NOTE_ID);
      else button.removeAttribute('aria-describedby');
    }
  };
  apply();
  const unsubscribe = session.onReadOnly(apply);
  return {
    /** Where the viewer note goes. */
    note: slot,
    /** Runs `action` with `button` disabled meanwhile. */
    async run(button: B, action: () => Promise<void>): Promise<void> {
      busy.add(button);
      apply();
      try {
        await action();
      } finally {
        busy.delete(button);
        apply();
      }
    },
    dispose: unsubscribe,
  };
}

export type ActionGuard = ReturnType<typeof actionGuard>;

/** A modal `<dialog>` asking to confirm: its heading is its name; Cancel has the focus first. */
export function confirmDialog(options: { title: string; text: string; confirm: string; onConfirm: () => void }) {
  const titleId = uid('dialog-title');
  const confirm = h('button', { type: 'button', class: 'primary' }, options.confirm);
  const cancel = h('button', { type: 'button', autofocus: true }, 'Cancel');
  const dialog = h(
    'dialog',
    { 'aria-labelledby': titleId, class: 'confirm' },
    h('h2', { id: titleId }, options.title),
    h('p', null, options.text),
    h('div', { class: 'buttons' }, confirm, cancel),
  );
  cancel.addEventListener('click', () => dialog.close());
  confirm.addEventListener('click', () => {
    dialog.close();
    options.onConfirm();
  });
  return {
    element: dialog,
    open(): void {
      if (!dialog.open) dialog.showModal();
    },
  };
}

/** The view's heading, focusable so that the app can move the focus to it on navigation. */
export const heading = (text: string): HTMLHeadingElement => h('h1', { tabindex: -1 }, text);

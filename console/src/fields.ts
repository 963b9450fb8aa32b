/**
 * Form fields of the pages that change something (the team, the webhook form): a control with
 * its label, a hint, and the API's reason beside it when a call refuses it (`invalid_params`).
 * The console checks nothing the API checks: the API's answer is the one shown.
 */
import { ApiError } from './api-client.ts';
import { h, type Child } from './dom.ts';

export type Control = HTMLInputElement | HTMLSelectElement;

/** A labelled control in a `.field`, described by its hint (when given) and its error slot. */
export function field(control: Control, label: string, hint?: Child): { element: HTMLElement; error: HTMLElement } {
  const id = control.id;
  const error = h('p', { class: 'field-error', id: `${id}-error`, hidden: true });
  const hintEl = hint === undefined ? null : h('p', { class: 'hint', id: `${id}-hint` }, hint);
  control.setAttribute('aria-describedby', [hintEl === null ? null : hintEl.id, error.id].filter((x) => x !== null).join(' '));
  const checkbox = control instanceof HTMLInputElement && control.type === 'checkbox';
  const labelEl = h('label', { for: id }, label);
  const element = checkbox
    ? h('div', { class: 'field field-check' }, h('div', { class: 'check' }, control, labelEl), hintEl, error)
    : h('div', { class: 'field' }, labelEl, control, hintEl, error);
  return { element, error };
}

/**
 * The error slots of a form by request field name: `show` puts each refused field's reasons beside
 * it (and marks its control invalid), `clear` empties them. Returns from `show` whether any
 * reason had a field to go to.
 */
export function fieldErrors(fields: Readonly<Record<string, { control: HTMLElement; error: HTMLElement }>>) {
  const clear = () => {
    for (const { control, error } of Object.values(fields)) {
      error.hidden = true;
      error.textContent = '';
      control.removeAttribute('aria-invalid');
    }
  };
  return {
    clear,
    show(err: unknown): boolean {
      clear();
      const failure = err instanceof ApiError ? err.failure : null;
      const params = failure?.kind === 'problem' ? (failure.invalidParams ?? []) : [];
      let shown = false;
      for (const param of params) {
        const slot = fields[param.name];
        if (slot === undefined) continue;
        slot.error.hidden = false;
        slot.error.textContent = slot.error.textContent === '' ? param.reason : `${slot.error.textContent}; ${param.reason}`;
        slot.control.setAttribute('aria-invalid', 'true');
        shown = true;
      }
      return shown;
    },
  };
}

/** Puts `values` into `select` as its options (value and text), keeping the chosen one when it is still there. */
export function fillSelect(select: HTMLSelectElement, values: readonly string[], preferred?: string): void {
  const chosen = select.value;
  const current = [...select.options].map((o) => o.value);
  if (current.length !== values.length || current.some((v, i) => v !== values[i])) {
    select.replaceChildren(...values.map((value) => h('option', { value }, value)));
  }
  if (values.includes(chosen)) select.value = chosen;
  else if (preferred !== undefined && values.includes(preferred)) select.value = preferred;
}

/**
 * What an audit entry says changed, for the changes whose values may hold a credential: a
 * webhook's URL (its path and query often carry the receiver's token: only its origin is
 * shown, and whether the rest changed), its headers (a value that may be a credential is never
 * shown, only whether it was set and changed) and its secret (only that it changed).
 */
import { iso } from './iso.ts';
import type { Webhook } from './types.ts';
import { loggableUrl } from './validation.ts';
import { isCredentialHeader, type WebhookHeaders } from './webhook-headers.ts';

type Changes = Record<string, unknown>;

/** `{ before, after }` of a value that may be shown, or nothing when it stayed. */
function plain(changes: Changes, name: string, before: unknown, after: unknown): void {
  if (before !== after) changes[name] = { before, after };
}

/** The headers' changes by name: shown values before and after, or, for a credential, only that it was set and whether it changed. */
export function headerChanges(before: WebhookHeaders, after: WebhookHeaders): Changes | null {
  const was = new Map(before.map(([n, v]) => [n.toLowerCase(), { name: n, value: v }]));
  const is = new Map(after.map(([n, v]) => [n.toLowerCase(), { name: n, value: v }]));
  const changes: Changes = {};
  for (const key of new Set([...was.keys(), ...is.keys()])) {
    const b = was.get(key);
    const a = is.get(key);
    if (b?.value === a?.value && b?.name === a?.name) continue;
    const name = a?.name ?? b!.name;
    const secret = (b !== undefined && isCredentialHeader(b.name, b.value)) || (a !== undefined && isCredentialHeader(a.name, a.value));
    changes[name] = secret ? { set_before: b !== undefined, set_after: a !== undefined, changed: true } : { before: b?.value ?? null, after: a?.value ?? null };
  }
  return Object.keys(changes).length === 0 ? null : changes;
}

/** The URL's change: origins, and whether the whole URL changed (a path or a query alone may carry a token). */
export function urlChange(before: string | null, after: string): Changes | null {
  if (before === after) return null;
  return { before: before === null ? null : loggableUrl(before), after: loggableUrl(after), changed: true };
}

/**
 * A registration's changes: URL, signing, headers, rate limit, status, and the secret (only
 * that a new one was made). `before` is the webhook it replaced, null for a new one.
 */
export function registrationChanges(before: (Webhook & { readonly secret: string | null }) | null, after: Webhook, newSecret: boolean): Changes {
  const changes: Changes = {};
  const url = urlChange(before?.url ?? null, after.url);
  if (url !== null) changes.url = url;
  plain(changes, 'active_hmac', before?.activeHmac ?? null, after.activeHmac);
  plain(changes, 'rate_limit', before?.rateLimit ?? null, after.rateLimit);
  plain(changes, 'status', before?.status ?? null, after.status);
  const headers = headerChanges(before?.headers ?? [], after.headers);
  if (headers !== null) changes.headers = headers;
  if (newSecret) changes.secret = { changed: true };
  return changes;
}

/** A secret rotation's changes: the secret changed, and until when the previous one signs. */
export function rotationChanges(previousSecretExpiresAt: number): Changes {
  return { secret: { changed: true }, previous_secret_expires_at: iso(previousSecretExpiresAt) };
}

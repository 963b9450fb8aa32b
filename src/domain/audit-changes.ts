/**
 * What an audit entry says changed, for the changes whose values may hold a credential: a
 * webhook's URL (its path and query often carry the receiver's token: only its origin is
 * shown, and whether the rest changed), its headers (a value that may be a credential is never
 * shown, only whether it was set and changed) and its secret (only that it changed).
 */
import { iso } from './iso.ts';
import type { ClientCertificateInfo } from './client-certificate.ts';
import type { OAuth2Settings } from './oauth2-settings.ts';
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
export function registrationChanges(before: (Webhook & { readonly secret: string | null }) | null, after: Webhook, newSecret: boolean, clientSecretChanged = false): Changes {
  const changes: Changes = {};
  const url = urlChange(before?.url ?? null, after.url);
  if (url !== null) changes.url = url;
  plain(changes, 'active_hmac', before?.activeHmac ?? null, after.activeHmac);
  plain(changes, 'rate_limit', before?.rateLimit ?? null, after.rateLimit);
  plain(changes, 'status', before?.status ?? null, after.status);
  const headers = headerChanges(before?.headers ?? [], after.headers);
  if (headers !== null) changes.headers = headers;
  if (newSecret) changes.secret = { changed: true };
  const certificate = certificateChange(before?.clientCertificate ?? null, after.clientCertificate);
  if (certificate !== null) changes.client_certificate = certificate;
  const oauth2 = oauth2Change(before?.oauth2 ?? null, after.oauth2, clientSecretChanged);
  if (oauth2 !== null) changes.oauth2 = oauth2;
  return changes;
}

/** What may be shown of a client certificate in the trail: who it names, which one, until when. */
function certificateSummary(c: ClientCertificateInfo | null): Changes | null {
  return c === null ? null : { subject: c.subject, issuer: c.issuer, fingerprint_sha256: c.fingerprintSha256, not_after: iso(c.notAfter) };
}

/** A client certificate's change: the certificates before and after, and that the private key changed (never any of it). */
export function certificateChange(before: ClientCertificateInfo | null, after: ClientCertificateInfo | null): Changes | null {
  if (before?.fingerprintSha256 === after?.fingerprintSha256) return null;
  return { before: certificateSummary(before), after: certificateSummary(after), private_key: { set_before: before !== null, set_after: after !== null, changed: true } };
}

function oauth2Summary(o: OAuth2Settings | null): Changes | null {
  return o === null ? null : { token_url: o.tokenUrl, client_id: o.clientId, scope: o.scope, audience: o.audience, client_auth: o.clientAuth };
}

/** OAuth2's change: the settings before and after, and whether the client secret changed (never its value). */
export function oauth2Change(before: OAuth2Settings | null, after: OAuth2Settings | null, clientSecretChanged: boolean): Changes | null {
  const b = oauth2Summary(before);
  const a = oauth2Summary(after);
  if (JSON.stringify(b) === JSON.stringify(a) && !clientSecretChanged) return null;
  return { before: b, after: a, client_secret: { set_before: before !== null, set_after: after !== null, changed: clientSecretChanged } };
}

/** A secret rotation's changes: the secret changed, and until when the previous one signs. */
export function rotationChanges(previousSecretExpiresAt: number): Changes {
  return { secret: { changed: true }, previous_secret_expires_at: iso(previousSecretExpiresAt) };
}

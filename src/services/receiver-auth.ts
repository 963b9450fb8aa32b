/**
 * A registration's credentials for the receiver (docs/delivery.md "Receiver authentication"):
 * `client_certificate` (mutual TLS) and `oauth2` (client credentials), checked, their token
 * URL held to the URL policy, their secrets sealed with the credential key
 * (services/credential-key.ts). Each is kept when a registration leaves it out (its secret is
 * never shown again, as the signing secret is kept), removed by `null`, replaced by an object.
 */
import { randomBytes } from 'node:crypto';
import { checkClientCertificate, materialText, type CheckedClientCertificate, type ClientCertificateInfo } from '../domain/client-certificate.ts';
import { ErrorCode, HookrelayError, validationError, type InvalidParam } from '../domain/errors.ts';
import { checkOAuth2, type OAuth2Input, type OAuth2Settings } from '../domain/oauth2-settings.ts';
import { sealContext } from '../domain/sealing.ts';
import type { WebhookWithSecret } from '../domain/types.ts';
import type { WebhookHeaders } from '../domain/webhook-headers.ts';
import type { Tx } from '../store/repos.ts';
import type { SealedCredentials } from '../store/values.ts';
import type { CredentialVault } from './credential-key.ts';

/** The columns the sealed values are bound to (their additional authenticated data names them). */
export const SEALED_CLIENT_CERTIFICATE = 'client_certificate';
export const SEALED_OAUTH2_SECRET = 'oauth2_client_secret';

/** What a registration does with one credential. */
export type CredentialChange<T> = { readonly kind: 'keep' } | { readonly kind: 'remove' } | { readonly kind: 'set'; readonly value: T };

export interface ReceiverAuthChanges {
  readonly certificate: CredentialChange<CheckedClientCertificate>;
  readonly oauth2: CredentialChange<OAuth2Input>;
}

const KEEP = { kind: 'keep' } as const;
const REMOVE = { kind: 'remove' } as const;

/** Whether the webhook's own headers hold an Authorization header (refused while OAuth2 is set: the token is sent there). */
function authorizationHeader(headers: WebhookHeaders): string | null {
  return headers.find(([name]) => name.toLowerCase() === 'authorization')?.[0] ?? null;
}

const CONFLICT = (header: string): InvalidParam[] => [
  { name: 'headers', reason: `must not set ${JSON.stringify(header)} while the webhook has oauth2: hookrelay sends its access token in Authorization (remove the header, or remove oauth2 with "oauth2": null)` },
  { name: 'oauth2', reason: `cannot be set with an Authorization header in headers (${JSON.stringify(header)}): hookrelay sends its access token there` },
];

/**
 * The credentials of a registration, checked at `now` (epoch ms): every problem at once, each
 * naming its field, nothing of a key or a secret quoted. `headers` are the registration's own
 * (already checked): an Authorization header next to `oauth2` is refused, naming both.
 */
export function checkReceiverAuth(input: { client_certificate?: unknown; oauth2?: unknown }, headers: WebhookHeaders, now: number): { ok: true; value: ReceiverAuthChanges } | { ok: false; problems: InvalidParam[] } {
  const problems: InvalidParam[] = [];
  let certificate: CredentialChange<CheckedClientCertificate> = KEEP;
  let oauth2: CredentialChange<OAuth2Input> = KEEP;
  const cc = input.client_certificate;
  if (cc === null) certificate = REMOVE;
  else if (cc !== undefined) {
    const o = cc as Record<string, unknown>;
    if (typeof cc !== 'object' || Array.isArray(cc)) {
      problems.push({ name: 'client_certificate', reason: 'must be an object {"certificate": PEM, "private_key": PEM}, or null to remove it' });
    } else if (typeof o.certificate !== 'string' || typeof o.private_key !== 'string') {
      if (typeof o.certificate !== 'string') problems.push({ name: 'client_certificate.certificate', reason: o.certificate == null ? 'is required' : 'must be a string of PEM text' });
      if (typeof o.private_key !== 'string') problems.push({ name: 'client_certificate.private_key', reason: o.private_key == null ? 'is required' : 'must be a string of PEM text' });
    } else {
      const extra = Object.keys(o).filter((k) => k !== 'certificate' && k !== 'private_key');
      if (extra.length > 0) problems.push({ name: 'client_certificate', reason: `has no field ${JSON.stringify(extra[0]!.slice(0, 40))}; the fields are certificate and private_key` });
      const checked = checkClientCertificate(o.certificate, o.private_key, now);
      if (checked.ok) certificate = { kind: 'set', value: checked.value };
      else problems.push(...checked.problems);
    }
  }
  if (input.oauth2 === null) oauth2 = REMOVE;
  else if (input.oauth2 !== undefined) {
    const checked = checkOAuth2(input.oauth2);
    if (checked.ok) oauth2 = { kind: 'set', value: checked.value };
    else problems.push(...checked.problems);
  }
  const header = authorizationHeader(headers);
  if (header !== null && input.oauth2 !== undefined && input.oauth2 !== null) problems.push(...CONFLICT(header));
  return problems.length > 0 ? { ok: false, problems } : { ok: true, value: { certificate, oauth2 } };
}

/** What a registration stores of its credentials, sealed: with the webhook's current ones where it keeps them. */
export interface StoredReceiverAuth {
  readonly clientCertificate: ClientCertificateInfo | null;
  readonly oauth2: OAuth2Settings | null;
  readonly sealed: SealedCredentials;
  /** For the audit entry: whether the client secret is another one than before (compared opened, never shown). */
  readonly clientSecretChanged: boolean;
}

/**
 * The credentials to store, in the registration's transaction: sealed where the registration
 * sets them, the webhook's own where it keeps them (`existing`, null for a new webhook). An
 * Authorization header kept next to an OAuth2 set before is refused here (nothing is written:
 * the transaction is given up).
 */
export async function storedReceiverAuth(
  tx: Tx,
  vault: CredentialVault,
  orgId: string,
  existing: WebhookWithSecret | null,
  changes: ReceiverAuthChanges,
  headers: WebhookHeaders,
): Promise<StoredReceiverAuth> {
  const before = existing === null ? null : await tx.webhooks.sealedCredentials(orgId);
  const keptOAuth2 = changes.oauth2.kind === 'keep' ? (existing?.oauth2 ?? null) : null;
  const header = authorizationHeader(headers);
  if (keptOAuth2 !== null && header !== null) throw validationError('the request body is invalid', CONFLICT(header));
  let clientCertificate: ClientCertificateInfo | null = null;
  let sealedCertificate: string | null = null;
  if (changes.certificate.kind === 'set') {
    clientCertificate = changes.certificate.value.info;
    sealedCertificate = vault.seal(sealContext(orgId, SEALED_CLIENT_CERTIFICATE), materialText(changes.certificate.value.material));
  } else if (changes.certificate.kind === 'keep') {
    clientCertificate = existing?.clientCertificate ?? null;
    sealedCertificate = clientCertificate === null ? null : (before?.clientCertificate ?? null);
  }
  let oauth2: OAuth2Settings | null = keptOAuth2;
  let sealedSecret: string | null = keptOAuth2 === null ? null : (before?.oauth2ClientSecret ?? null);
  let clientSecretChanged = changes.oauth2.kind === 'remove' && existing?.oauth2 != null;
  if (changes.oauth2.kind === 'set') {
    const { settings, clientSecret } = changes.oauth2.value;
    oauth2 = { ...settings, revision: randomBytes(8).toString('hex') };
    sealedSecret = vault.seal(sealContext(orgId, SEALED_OAUTH2_SECRET), clientSecret);
    clientSecretChanged = true;
    if (before?.oauth2ClientSecret != null && existing?.oauth2 != null) {
      try {
        clientSecretChanged = vault.open(sealContext(orgId, SEALED_OAUTH2_SECRET), before.oauth2ClientSecret, 'OAuth2 client secret') !== clientSecret;
      } catch {
        // The old one does not open (another key): changed, as far as anyone can tell.
      }
    }
  }
  return { clientCertificate, oauth2, sealed: { clientCertificate: sealedCertificate, oauth2ClientSecret: sealedSecret }, clientSecretChanged };
}

/** A refusal of the token URL by the URL policy, as registration answers it (the same words as a webhook URL's). */
export function tokenUrlNotAllowed(refusal: { reason: string; message: string }): HookrelayError {
  return new HookrelayError(ErrorCode.webhookUrlNotAllowed, `oauth2.token_url ${refusal.message}`, {
    invalidParams: [{ name: 'oauth2.token_url', reason: refusal.message }],
    details: { reason: refusal.reason },
  });
}

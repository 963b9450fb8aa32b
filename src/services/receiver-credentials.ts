/**
 * The secrets deliveries authenticate to receivers with, opened for the deliverer only: a
 * webhook's client certificate with its key, its OAuth2 client secret (read from the database,
 * opened with the credential key), and the operator's client certificates (read from files at
 * start, delivery.clientCertificate and delivery.organizationClientCertificates). Nothing here
 * logs or returns a secret to anything but the deliverer.
 */
import { readFileSync } from 'node:fs';
import type { Config } from '../config/load.ts';
import { parseOrganizationCertificate } from '../config/receiver-auth-schema.ts';
import { checkClientCertificate, materialOf, splitPem, type ClientCertificateInfo, type ClientCertificateMaterial } from '../domain/client-certificate.ts';
import { ErrorCode, HookrelayError } from '../domain/errors.ts';
import type { CertificateExpiry } from '../domain/certificate-expiry.ts';
import { sealContext } from '../domain/sealing.ts';
import type { Store } from '../store/repos.ts';
import type { CredentialVault } from './credential-key.ts';
import { SEALED_CLIENT_CERTIFICATE, SEALED_OAUTH2_SECRET } from './receiver-auth.ts';

/** A client certificate ready to present: what may be shown of it, and its material. */
export interface PresentedCertificate {
  readonly info: ClientCertificateInfo;
  readonly material: ClientCertificateMaterial;
}

/** What the deliverer asks for when it has not got it yet (it keeps what it gets, keyed by fingerprint and revision). */
export interface ReceiverCredentials {
  /** The organization's webhook's client certificate with its key; null: it has none (any more). */
  clientCertificate(orgId: string): Promise<PresentedCertificate | null>;
  /** The organization's webhook's OAuth2 client secret; null: it has none (any more). */
  oauth2ClientSecret(orgId: string): Promise<string | null>;
}

export function createReceiverCredentials(store: Store, vault: CredentialVault): ReceiverCredentials {
  return {
    async clientCertificate(orgId) {
      const [webhook, sealed] = await store.read(async (tx) => [await tx.webhooks.get(orgId), await tx.webhooks.sealedCredentials(orgId)] as const);
      if (webhook?.clientCertificate == null || sealed?.clientCertificate == null) return null;
      const material = materialOf(vault.open(sealContext(orgId, SEALED_CLIENT_CERTIFICATE), sealed.clientCertificate, 'client certificate key'));
      if (material === null) throw new HookrelayError(ErrorCode.credentialKeyUnavailable, 'the sealed client certificate is damaged');
      return { info: webhook.clientCertificate, material };
    },
    async oauth2ClientSecret(orgId) {
      const sealed = await store.read((tx) => tx.webhooks.sealedCredentials(orgId));
      if (sealed?.oauth2ClientSecret == null) return null;
      return vault.open(sealContext(orgId, SEALED_OAUTH2_SECRET), sealed.oauth2ClientSecret, 'OAuth2 client secret');
    },
  };
}

/** The operator's client certificates: one for every organization, one per organization (either may be absent). */
export interface OperatorCertificates {
  readonly shared: PresentedCertificate | null;
  readonly byOrg: ReadonlyMap<string, PresentedCertificate>;
}

export const NO_OPERATOR_CERTIFICATES: OperatorCertificates = { shared: null, byOrg: new Map() };

function readPem(file: string, key: string): string {
  try {
    return readFileSync(file, 'utf8');
  } catch (err) {
    throw new HookrelayError(ErrorCode.config, `cannot read ${key} ${file}: ${(err as NodeJS.ErrnoException).code ?? String(err)}`);
  }
}

function presented(certText: string, keyText: string | null, key: string, now: number): PresentedCertificate {
  const pem = splitPem(certText);
  const privateKey = keyText ?? pem.privateKey;
  if (privateKey === null) throw new HookrelayError(ErrorCode.config, `${key} holds no private key: put it in the file, or name it with delivery.clientCertificate.keyFile`);
  const checked = checkClientCertificate(pem.certificate, privateKey, now, { certificate: `${key}'s certificate`, privateKey: `${key}'s private key` }, { allowExpired: true });
  if (!checked.ok) throw new HookrelayError(ErrorCode.config, checked.problems.map((p) => `${p.name} ${p.reason}`).join('; '));
  return checked.value;
}

/**
 * Reads and checks the operator's client certificates (at start): a file that cannot be read,
 * a key that does not match, a weak key is a configuration error; an expired certificate is
 * taken (and reported by the expiry warning): refusing to start would stop every delivery.
 */
export function loadOperatorCertificates(delivery: Pick<Config['delivery'], 'clientCertificate' | 'organizationClientCertificates'>, now: number): OperatorCertificates {
  const { certFile, keyFile } = delivery.clientCertificate;
  const shared = certFile === null ? null : presented(readPem(certFile, 'delivery.clientCertificate.certFile'), keyFile === null ? null : readPem(keyFile, 'delivery.clientCertificate.keyFile'), 'delivery.clientCertificate', now);
  const byOrg = new Map<string, PresentedCertificate>();
  for (const entry of delivery.organizationClientCertificates) {
    const parsed = parseOrganizationCertificate(entry);
    if (typeof parsed === 'string') throw new HookrelayError(ErrorCode.config, `key "delivery.organizationClientCertificates" ${parsed}`);
    byOrg.set(parsed.orgId, presented(readPem(parsed.file, `delivery.organizationClientCertificates (${parsed.orgId})`), null, `delivery.organizationClientCertificates (${parsed.orgId})`, now));
  }
  return { shared, byOrg };
}

/**
 * Every client certificate deliveries may present, with when it expires: the webhooks' own
 * (read from the database) and the operator's (`operator`, read at start), by organization.
 */
export async function certificateExpiries(store: Store, operator: OperatorCertificates): Promise<CertificateExpiry[]> {
  const out: CertificateExpiry[] = [];
  const of = (orgId: string | null, source: CertificateExpiry['source'], info: ClientCertificateInfo): CertificateExpiry => ({ orgId, source, subject: info.subject, fingerprintSha256: info.fingerprintSha256, notAfter: info.notAfter });
  for (const w of await store.read((tx) => tx.webhooks.listWithHealth())) if (w.clientCertificate !== null) out.push(of(w.orgId, 'webhook', w.clientCertificate));
  for (const [orgId, c] of operator.byOrg) out.push(of(orgId, 'operator', c.info));
  if (operator.shared !== null) out.push(of(null, 'operator', operator.shared.info));
  return out;
}

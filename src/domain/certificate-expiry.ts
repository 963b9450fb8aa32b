/**
 * When the client certificates deliveries present expire (docs/delivery.md "Receiver
 * authentication"): a webhook's own, or the operator's for an organization or for all. Pure:
 * what `hookrelay status`, the metric and the daemon's warning say of them.
 */
import { iso } from './iso.ts';

export interface CertificateExpiry {
  /** The organization whose deliveries present it; null: every organization without one of its own (delivery.clientCertificate). */
  readonly orgId: string | null;
  /** `webhook`: registered with the webhook; `operator`: from the daemon's configuration. */
  readonly source: 'webhook' | 'operator';
  readonly subject: string;
  readonly fingerprintSha256: string;
  /** Epoch ms. */
  readonly notAfter: number;
}

const DAY_MS = 86_400_000;

/** `expired` once past not-after, `expiring` within `warnMs` of it (0: never), else `valid`. */
export function expiryState(e: CertificateExpiry, now: number, warnMs: number): 'expired' | 'expiring' | 'valid' {
  if (e.notAfter <= now) return 'expired';
  return warnMs > 0 && e.notAfter - now <= warnMs ? 'expiring' : 'valid';
}

/** Whole days left (rounded down; negative once expired). */
export function daysLeft(e: CertificateExpiry, now: number): number {
  return Math.floor((e.notAfter - now) / DAY_MS);
}

/** Whose certificate, in words: "acme's webhook", "the operator's for acme", "the operator's for every organization". */
export function certificateOwner(e: CertificateExpiry): string {
  if (e.source === 'webhook') return `${e.orgId}'s webhook`;
  return e.orgId === null ? "the operator's for every organization (delivery.clientCertificate)" : `the operator's for ${e.orgId} (delivery.organizationClientCertificates)`;
}

/** One sentence for the log and `status`: whose certificate, which, when it expires, and what to do. */
export function expirySentence(e: CertificateExpiry, now: number): string {
  const when = e.notAfter <= now ? `expired on ${iso(e.notAfter)}` : `expires on ${iso(e.notAfter)} (in ${daysLeft(e, now)} days)`;
  const fix = e.source === 'webhook' ? 'register a new one (client_certificate on register_webhook, or hookrelay webhook set --client-cert)' : 'replace the file and restart the daemon';
  return `the client certificate of ${certificateOwner(e)}, ${e.subject} (SHA-256 ${e.fingerprintSha256}), ${when}: ${fix}`;
}

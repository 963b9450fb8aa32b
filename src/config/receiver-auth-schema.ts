/**
 * The delivery keys of receiver authentication (docs/delivery.md "Receiver authentication",
 * docs/operations.md "The credential key"): the key-encryption key that seals the webhooks'
 * credentials, the operator's client certificates, and the expiry warning. A group of their
 * own, spread into delivery, so that the schema file stays a table of contents.
 */
import { checkOrgId } from '../domain/validation.ts';

export const RECEIVER_AUTH_KEYS = {
  credentialKeyFile: {
    type: { kind: 'string', nullable: true },
    default: null,
    doc: "File holding the key-encryption key (32 random bytes, base64url) that seals the webhooks' client certificate keys and OAuth2 client secrets in the database (AES-256-GCM). null means <stateDir>/credential-key, generated (mode 0600) at the daemon's first start, or by `hookrelay migrate`. Back it up with the database: without it the sealed credentials cannot be read. Every instance sharing a PostgreSQL database must have the same key. A file named here (a systemd credential, say) is never generated.",
  },
  clientCertificate: {
    certFile: {
      type: { kind: 'string', nullable: true },
      default: null,
      doc: 'PEM file of a client certificate (and its intermediates) that every delivery presents to its receiver (mutual TLS) when neither the webhook nor its organization has one of its own. It may hold the private key too. Read and checked at start (the key must match; an expired certificate is logged, not refused). null: none.',
    },
    keyFile: {
      type: { kind: 'string', nullable: true },
      default: null,
      doc: "PEM file of delivery.clientCertificate.certFile's private key (unencrypted; mode 0600 or a systemd credential); null: the key is in certFile.",
    },
  },
  organizationClientCertificates: {
    type: { kind: 'stringList' },
    default: [],
    doc: 'Client certificates for one organization each, as "ORG=FILE" entries (such as "acme=/etc/hookrelay/acme-client.pem"), FILE holding the certificate, its intermediates and its private key in PEM: that organization\'s deliveries present it, unless its webhook has a certificate of its own (client_certificate on register_webhook). Read and checked at start.',
  },
  clientCertificateExpiryWarning: {
    type: { kind: 'duration', min: 0, max: 365 * 86_400_000 },
    default: '14d',
    doc: 'A client certificate (a webhook\'s own or the operator\'s) that expires within this long is logged as a warning, at start and every 12 hours, and flagged in `hookrelay status`; 0 turns the warning off. hookrelay_webhook_client_certificate_expiry_seconds has every certificate\'s expiry for alerts.',
  },
} as const;

/** An "ORG=FILE" entry of delivery.organizationClientCertificates, or why it is not one. */
export function parseOrganizationCertificate(entry: string): { orgId: string; file: string } | string {
  const eq = entry.indexOf('=');
  if (eq <= 0 || eq === entry.length - 1) return `must list "ORG=FILE" entries such as "acme=/etc/hookrelay/acme-client.pem"; got ${JSON.stringify(entry.slice(0, 80))}`;
  const orgId = entry.slice(0, eq);
  if (checkOrgId(orgId) !== null) return `names ${JSON.stringify(orgId.slice(0, 40))}, which is not an organization id`;
  return { orgId, file: entry.slice(eq + 1) };
}

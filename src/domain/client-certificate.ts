/**
 * A client certificate a webhook presents to its receiver (mutual TLS): the checks at
 * registration, what answers may show of it (never the key), and its stored form. Pure: the
 * certificate chain and the key are parsed with node:crypto, nothing is read or written.
 */
import { createPrivateKey, type KeyObject, X509Certificate } from 'node:crypto';
import type { InvalidParam } from './errors.ts';

/** Largest certificate chain taken (PEM text): a leaf and a few intermediates are 2-10 KiB. */
export const MAX_CERTIFICATE_CHAIN_BYTES = 32 * 1024;
/** Largest private key taken (PEM text): an RSA 8192 key is about 6.5 KiB. */
export const MAX_PRIVATE_KEY_BYTES = 16 * 1024;
/** Most certificates in a chain: the leaf and its intermediates (the root stays with the receiver). */
export const MAX_CHAIN_CERTIFICATES = 8;
/** The weakest RSA key taken (NIST SP 800-131A), and the largest (what a handshake can afford). */
export const MIN_RSA_BITS = 2048;
export const MAX_RSA_BITS = 8192;

/** What may be shown of a client certificate: never its key. Times are epoch ms. */
export interface ClientCertificateInfo {
  /** The leaf's subject, its attributes joined with ", " ("CN=hookrelay, O=Acme"). */
  readonly subject: string;
  readonly issuer: string;
  /** SHA-256 of the leaf's DER, as openssl prints it (upper-case hex pairs joined with ":"). */
  readonly fingerprintSha256: string;
  readonly serialNumber: string;
  readonly notBefore: number;
  readonly notAfter: number;
  /** "RSA 2048", "EC P-256", "EC P-384", "Ed25519". */
  readonly keyType: string;
}

/** The chain and the key as a TLS client presents them (PEM). The key is a secret: sealed at rest, never shown. */
export interface ClientCertificateMaterial {
  readonly certificate: string;
  readonly privateKey: string;
}

export interface CheckedClientCertificate {
  readonly info: ClientCertificateInfo;
  /** Normalised: the certificates re-encoded as PEM, the key as unencrypted PKCS #8 PEM. */
  readonly material: ClientCertificateMaterial;
}

const CERTIFICATE_BLOCK = /-----BEGIN CERTIFICATE-----[\s\S]*?-----END CERTIFICATE-----/g;
const ANY_BLOCK = /-----BEGIN ([A-Z0-9 ]+)-----/g;
const CLIENT_AUTH_OID = '1.3.6.1.5.5.7.3.2';
const ANY_EKU_OID = '2.5.29.37.0';

/** Named curves by the names OpenSSL gives them. */
const CURVES: Readonly<Record<string, string>> = { prime256v1: 'P-256', secp384r1: 'P-384' };

function oneLine(name: string): string {
  return name.split('\n').filter((part) => part !== '').join(', ');
}

/** The key's type and size as a sentence fragment, or why such a key is refused. */
function keyType(key: KeyObject): { type: string } | { refused: string } {
  const details = key.asymmetricKeyDetails ?? {};
  switch (key.asymmetricKeyType) {
    case 'rsa':
    case 'rsa-pss': {
      const bits = details.modulusLength ?? 0;
      if (bits < MIN_RSA_BITS) return { refused: `is an RSA key of ${bits} bits; at least ${MIN_RSA_BITS} are needed` };
      if (bits > MAX_RSA_BITS) return { refused: `is an RSA key of ${bits} bits; at most ${MAX_RSA_BITS} are taken` };
      return { type: `RSA ${bits}` };
    }
    case 'ec': {
      const curve = CURVES[details.namedCurve ?? ''];
      if (curve === undefined) return { refused: `is an EC key on ${details.namedCurve ?? 'an unnamed curve'}; use P-256 or P-384` };
      return { type: `EC ${curve}` };
    }
    case 'ed25519':
      return { type: 'Ed25519' };
    default:
      return { refused: `is a ${key.asymmetricKeyType ?? 'secret'} key; use RSA (${MIN_RSA_BITS} bits or more), EC P-256 or P-384, or Ed25519` };
  }
}

/** The certificates of a PEM chain, in order, or why it is not one. */
function parseChain(pem: string): X509Certificate[] | string {
  const kinds = [...pem.matchAll(ANY_BLOCK)].map((m) => m[1]!);
  if (kinds.some((k) => k !== 'CERTIFICATE')) return `must hold only certificates (PEM "BEGIN CERTIFICATE" blocks); it holds a ${kinds.find((k) => k !== 'CERTIFICATE')} block: the key goes in private_key`;
  const blocks = pem.match(CERTIFICATE_BLOCK) ?? [];
  if (blocks.length === 0) return 'must be a PEM certificate ("-----BEGIN CERTIFICATE-----"), followed by its intermediates if any';
  if (blocks.length > MAX_CHAIN_CERTIFICATES) return `must hold at most ${MAX_CHAIN_CERTIFICATES} certificates (the client certificate and its intermediates); got ${blocks.length}`;
  const chain: X509Certificate[] = [];
  for (const [i, block] of blocks.entries()) {
    try {
      chain.push(new X509Certificate(block));
    } catch {
      return `holds a certificate that cannot be read (number ${i + 1} of ${blocks.length})`;
    }
  }
  return chain;
}

/** The private key, or why it cannot be used. */
function parseKey(pem: string): KeyObject | string {
  if (!/-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----/.test(pem)) return 'must be a PEM private key ("-----BEGIN PRIVATE KEY-----", or an RSA or EC one)';
  if (/ENCRYPTED/.test(pem)) return 'is encrypted with a passphrase; give it unencrypted (hookrelay encrypts it at rest itself)';
  try {
    return createPrivateKey({ key: pem, format: 'pem' });
  } catch {
    return 'cannot be read as a private key';
  }
}

/**
 * Checks a client certificate and its key (`certificate`: the PEM chain, the client's own
 * certificate first; `privateKey`: its PEM key) at `now` (epoch ms). Refused, each with the
 * field named and nothing of the key quoted: sizes over the bounds, text that is not PEM, a
 * chain out of order, a key of a weak or unknown type, a key that is not the certificate's, a
 * certificate not valid yet or expired (unless `allowExpired`: an operator's file, reported
 * rather than refused), one whose extended key usage excludes TLS clients.
 */
export function checkClientCertificate(
  certificate: string,
  privateKey: string,
  now: number,
  names: { certificate: string; privateKey: string } = { certificate: 'client_certificate.certificate', privateKey: 'client_certificate.private_key' },
  options: { allowExpired?: boolean } = {},
): { ok: true; value: CheckedClientCertificate } | { ok: false; problems: InvalidParam[] } {
  const problems: InvalidParam[] = [];
  const cert = (reason: string) => problems.push({ name: names.certificate, reason });
  const key = (reason: string) => problems.push({ name: names.privateKey, reason });
  if (Buffer.byteLength(certificate) > MAX_CERTIFICATE_CHAIN_BYTES) cert(`must be at most ${MAX_CERTIFICATE_CHAIN_BYTES / 1024} KiB of PEM text`);
  if (Buffer.byteLength(privateKey) > MAX_PRIVATE_KEY_BYTES) key(`must be at most ${MAX_PRIVATE_KEY_BYTES / 1024} KiB of PEM text`);
  if (problems.length > 0) return { ok: false, problems };
  const chain = parseChain(certificate);
  const parsedKey = parseKey(privateKey);
  if (typeof chain === 'string') cert(chain);
  if (typeof parsedKey === 'string') key(parsedKey);
  if (typeof chain === 'string' || typeof parsedKey === 'string') return { ok: false, problems };
  const leaf = chain[0]!;
  const type = keyType(parsedKey);
  if ('refused' in type) key(type.refused);
  else if (!leaf.checkPrivateKey(parsedKey)) key("does not match the certificate: it is not the private key of the certificate's public key (the first certificate of the chain must be the client's own)");
  for (let i = 0; i + 1 < chain.length; i++) {
    if (!chain[i]!.checkIssued(chain[i + 1]!)) {
      cert(`must list the certificates in order, the client's own first, then each one's issuer: certificate ${i + 2} did not issue certificate ${i + 1}`);
      break;
    }
  }
  const notBefore = Date.parse(leaf.validFrom);
  const notAfter = Date.parse(leaf.validTo);
  if (!options.allowExpired) {
    if (notAfter <= now) cert(`expired on ${new Date(notAfter).toISOString()}; give a certificate that is valid now`);
    else if (notBefore > now) cert(`is not valid before ${new Date(notBefore).toISOString()}; give a certificate that is valid now`);
  }
  const usages = leaf.keyUsage;
  if (usages !== undefined && usages.length > 0 && !usages.includes(CLIENT_AUTH_OID) && !usages.includes(ANY_EKU_OID)) {
    cert('is not for TLS clients: its extended key usage does not include clientAuth, so receivers refuse it');
  }
  if (problems.length > 0 || 'refused' in type) return { ok: false, problems };
  const info: ClientCertificateInfo = {
    subject: oneLine(leaf.subject),
    issuer: oneLine(leaf.issuer),
    fingerprintSha256: leaf.fingerprint256,
    serialNumber: leaf.serialNumber,
    notBefore,
    notAfter,
    keyType: type.type,
  };
  const material = { certificate: chain.map((c) => c.toString().trim()).join('\n') + '\n', privateKey: parsedKey.export({ type: 'pkcs8', format: 'pem' }).toString() };
  return { ok: true, value: { info, material } };
}

/** The stored form of what may be shown (JSON text), or null for none. */
export function storedClientCertificate(info: ClientCertificateInfo | null): string | null {
  return info === null ? null : JSON.stringify(info);
}

/** What a stored value says (JSON text), or null: none, or a damaged value (the webhook then presents none). */
export function parseStoredClientCertificate(stored: unknown): ClientCertificateInfo | null {
  if (typeof stored !== 'string' || stored === '') return null;
  try {
    const v = JSON.parse(stored) as Partial<ClientCertificateInfo>;
    if (typeof v.fingerprintSha256 !== 'string' || typeof v.notAfter !== 'number' || typeof v.subject !== 'string') return null;
    return {
      subject: v.subject,
      issuer: typeof v.issuer === 'string' ? v.issuer : '',
      fingerprintSha256: v.fingerprintSha256,
      serialNumber: typeof v.serialNumber === 'string' ? v.serialNumber : '',
      notBefore: typeof v.notBefore === 'number' ? v.notBefore : 0,
      notAfter: v.notAfter,
      keyType: typeof v.keyType === 'string' ? v.keyType : '',
    };
  } catch {
    return null;
  }
}

/** The material as sealed (JSON of the chain and the key) and back. */
export function materialText(material: ClientCertificateMaterial): string {
  return JSON.stringify({ certificate: material.certificate, private_key: material.privateKey });
}

export function materialOf(text: string): ClientCertificateMaterial | null {
  try {
    const v = JSON.parse(text) as { certificate?: unknown; private_key?: unknown };
    return typeof v.certificate === 'string' && typeof v.private_key === 'string' ? { certificate: v.certificate, privateKey: v.private_key } : null;
  } catch {
    return null;
  }
}

/** A certificate and a key from one PEM text (an operator's file holding both), split; null parts when missing. */
export function splitPem(text: string): { certificate: string; privateKey: string | null } {
  const key = /-----BEGIN ([A-Z0-9 ]*)PRIVATE KEY-----[\s\S]*?-----END \1PRIVATE KEY-----/.exec(text);
  const certificates = text.match(CERTIFICATE_BLOCK) ?? [];
  return { certificate: certificates.join('\n'), privateKey: key === null ? null : key[0] };
}

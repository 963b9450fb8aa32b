/**
 * Credentials sealed at rest: AES-256-GCM under a key-encryption key (KEK) kept outside the
 * database (services/credential-key.ts), so that a copy of the database alone does not hand
 * over a webhook's private key or client secret. Each sealed value is bound to where it is
 * stored (its organization and column, as additional authenticated data): copied to another
 * row, it does not open. Pure: the key is given.
 *
 * Form: `hrs1.<key id>.<iv>.<ciphertext>.<tag>`, base64url parts. The key id (the first 8 bytes
 * of SHA-256 of the KEK, hex) tells "another key sealed this" (an instance with another key file)
 * from "this is damaged".
 */
import { createCipheriv, createDecipheriv, createHash, randomBytes } from 'node:crypto';

export const SEALED_VERSION = 'hrs1';
export const KEK_BYTES = 32;

/** Why a sealed value did not open. */
export class SealError extends Error {
  readonly reason: 'wrong_key' | 'damaged';
  /** The key id the value was sealed with, when it could be read. */
  readonly sealedWith: string | null;
  constructor(reason: 'wrong_key' | 'damaged', sealedWith: string | null, message: string) {
    super(message);
    this.name = 'SealError';
    this.reason = reason;
    this.sealedWith = sealedWith;
  }
}

/** The public id of a KEK: SHA-256 of it, first 8 bytes in hex (says which key, reveals nothing of it). */
export function kekId(kek: Buffer): string {
  return createHash('sha256').update(kek).digest('hex').slice(0, 16);
}

/** Where a sealed value of a webhook is stored: its additional authenticated data. */
export function sealContext(orgId: string, column: string): string {
  return `hookrelay/webhook/${orgId}/${column}`;
}

/** `plaintext` sealed under `kek`, bound to `context`. A fresh 96-bit IV each time. */
export function seal(kek: Buffer, context: string, plaintext: string): string {
  if (kek.length !== KEK_BYTES) throw new Error(`a key-encryption key is ${KEK_BYTES} bytes`);
  const iv = randomBytes(12);
  const cipher = createCipheriv('aes-256-gcm', kek, iv);
  cipher.setAAD(Buffer.from(context, 'utf8'));
  const ciphertext = Buffer.concat([cipher.update(plaintext, 'utf8'), cipher.final()]);
  const b64 = (b: Buffer) => b.toString('base64url');
  return [SEALED_VERSION, kekId(kek), b64(iv), b64(ciphertext), b64(cipher.getAuthTag())].join('.');
}

/** Opens what `seal` made with `kek` and `context`; throws SealError when another key sealed it, or it is damaged or was moved. */
export function unseal(kek: Buffer, context: string, sealed: string): string {
  const parts = sealed.split('.');
  if (parts.length !== 5 || parts[0] !== SEALED_VERSION) throw new SealError('damaged', null, 'the stored value is not a sealed credential');
  const [, id, iv, ciphertext, tag] = parts as [string, string, string, string, string];
  if (id !== kekId(kek)) throw new SealError('wrong_key', id, `it was sealed with credential key ${id}, and this key is ${kekId(kek)}`);
  try {
    const decipher = createDecipheriv('aes-256-gcm', kek, Buffer.from(iv, 'base64url'));
    decipher.setAAD(Buffer.from(context, 'utf8'));
    decipher.setAuthTag(Buffer.from(tag, 'base64url'));
    return Buffer.concat([decipher.update(Buffer.from(ciphertext, 'base64url')), decipher.final()]).toString('utf8');
  } catch {
    throw new SealError('damaged', id, 'the sealed value does not open with this key: it was damaged, or moved from another webhook');
  }
}

/**
 * API keys for machines (docs/api.md, "API keys"): the key's form, its public prefix and the
 * hash that is all the store keeps of it. Pure but for the random bytes a new key is made of.
 *
 * A key reads `hkr_<8 hex>_<43 base64url>`: `hkr_` tells it from a JWT (which starts with
 * `eyJ`) before any JWT library sees it; the 8 hex characters are its public prefix, shown in
 * lists and used to find its row; the rest is 32 random bytes. The store keeps SHA-256 of the
 * whole key. A slow password hash (scrypt, argon2) is for secrets people choose, which can be
 * guessed; 256 random bits cannot, so a fast hash loses nothing, and a slow one would cost
 * every request its price.
 */
import { createHash, randomBytes, timingSafeEqual } from 'node:crypto';

export const API_KEY_SCHEME = 'hkr_';
/** Keys an organization may hold at once (neither revoked nor expired). */
export const MAX_API_KEYS_PER_ORG = 50;
/** The longest expiry a key may be given (365 days, ms); a key without one lives until revoked. */
export const MAX_API_KEY_LIFETIME_MS = 365 * 86_400_000;
/** A key's last use is written at most this often (ms): a use is a hint, not a record, and a write per request would cost the store. */
export const LAST_USE_GRANULARITY_MS = 60_000;
/** Name of a key: what `revoke` and the audit trail call it. */
export const API_KEY_NAME = /^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$/;

const KEY_FORM = /^hkr_([0-9a-f]{8})_([A-Za-z0-9_-]{43})$/;

/** A new key (shown once), its public prefix (`hkr_` and 8 hex) and the hash the store keeps. */
export interface NewApiKey {
  readonly key: string;
  readonly prefix: string;
  readonly hash: string;
}

/** SHA-256 (hex) of the whole key: what the store keeps and compares. */
export function hashApiKey(key: string): string {
  return createHash('sha256').update(key, 'utf8').digest('hex');
}

export function makeApiKey(): NewApiKey {
  const prefix = `${API_KEY_SCHEME}${randomBytes(4).toString('hex')}`;
  const key = `${prefix}_${randomBytes(32).toString('base64url')}`;
  return { key, prefix, hash: hashApiKey(key) };
}

/** Whether a bearer token claims to be an API key (then it is never given to the JWT verifier). */
export function looksLikeApiKey(token: string): boolean {
  return token.startsWith(API_KEY_SCHEME);
}

/** The public prefix of a well-formed key, or null. */
export function apiKeyPrefix(key: string): string | null {
  const match = KEY_FORM.exec(key);
  return match === null ? null : `${API_KEY_SCHEME}${match[1]}`;
}

/** Compares a key's hash with a stored one in constant time. */
export function sameApiKeyHash(key: string, storedHash: string): boolean {
  const given = Buffer.from(hashApiKey(key), 'hex');
  const stored = Buffer.from(storedHash, 'hex');
  return given.length === stored.length && timingSafeEqual(given, stored);
}

/** A key as lists show it: never its secret, nor its hash. Times are epoch ms. */
export interface ApiKey {
  readonly id: number;
  readonly orgId: string;
  readonly name: string;
  readonly roleName: string;
  readonly prefix: string;
  readonly createdAt: number;
  readonly createdBy: string | null;
  readonly expiresAt: number | null;
  readonly lastUsedAt: number | null;
  readonly revokedAt: number | null;
}

/** A key's row with its hash: what authentication compares. */
export interface StoredApiKey extends ApiKey {
  readonly hash: string;
}

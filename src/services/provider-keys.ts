import { createPublicKey, type KeyObject } from 'node:crypto';
import type { JWK } from 'jose';
import type { ProviderConfig } from '../config/provider-schema.ts';
import type { Clock } from '../domain/clock.ts';
import { formatDuration } from '../domain/duration.ts';
import type { Logger } from '../log.ts';

/** A discovery document or JWKS as fetched, with its Cache-Control max-age (ms) or null. */
export type ProviderDocumentFetch = (url: string) => Promise<{ readonly body: unknown; readonly maxAgeMs: number | null }>;

/** One usable signing key of the provider: the algorithms it may verify, decided by the key. */
export interface ProviderKey {
  readonly kid: string | null;
  readonly algorithms: readonly string[];
  /** A KeyObject, not a WebCrypto key: one RSA key may verify RS256 and PS256 alike. */
  readonly key: KeyObject;
}

export const FetchOutcome = { ok: 'ok', unreachable: 'unreachable', noUsableKey: 'no_usable_key', invalid: 'invalid' } as const;
export type FetchOutcome = (typeof FetchOutcome)[keyof typeof FetchOutcome];

/**
 * Where a browser signs in at the provider (the console's authorization code flow with PKCE), as
 * its discovery document says: https:// URLs, endSession null when the provider has none.
 */
export interface ProviderEndpoints {
  readonly authorization: string;
  readonly token: string;
  readonly endSession: string | null;
}

/** What readiness, `hookrelay status` and the metrics say of the provider's keys. */
export interface ProviderKeysHealth {
  /** fresh: the last fetch worked; stale: it failed, the keys still serve (within maxStale); unavailable: no keys, or older than maxStale. */
  readonly state: 'fresh' | 'stale' | 'unavailable';
  readonly keys: number;
  /** Epoch ms of the last fetch that worked, or null. */
  readonly fetchedAt: number | null;
  readonly lastError: string | null;
  readonly since: number | null;
}

/** The algorithms a JWK may verify: its own alg when it has one, otherwise what its kty/crv allow. */
export function keyAlgorithms(jwk: JWK, accepted: readonly string[]): string[] {
  if (jwk.use !== undefined && jwk.use !== 'sig') return [];
  const byType: string[] =
    jwk.kty === 'RSA' ? ['RS256', 'PS256'] : jwk.kty === 'EC' && jwk.crv === 'P-256' ? ['ES256'] : jwk.kty === 'OKP' && jwk.crv === 'Ed25519' ? ['EdDSA'] : [];
  const own = typeof jwk.alg === 'string' ? (byType.includes(jwk.alg) ? [jwk.alg] : []) : byType;
  return own.filter((alg) => accepted.includes(alg));
}

/**
 * The identity provider's signing keys (auth.provider): fetched at start, cached, fetched again
 * on schedule (refreshInterval, or a shorter Cache-Control max-age) and when a token names an
 * unknown kid, but never more often than minRefreshInterval whatever callers send (concurrent
 * askers share one fetch). A failed fetch keeps the last keys, which serve until maxStale after
 * the last fetch that worked. jose's createRemoteJWKSet is not used: its cooldown is the same
 * idea, but it drops nothing when the provider is down and has no bound on staleness to report.
 */
export class ProviderKeys {
  readonly #config: ProviderConfig;
  readonly #fetch: ProviderDocumentFetch;
  readonly #clock: Clock;
  readonly #log: Logger;
  #keys: ProviderKey[] = [];
  #fetchedAt: number | null = null;
  #lastAttemptAt = Number.NEGATIVE_INFINITY;
  #lastError: string | null = null;
  #failingSince: number | null = null;
  #inFlight: Promise<void> | null = null;
  #endpoints: ProviderEndpoints | null = null;
  #timer: NodeJS.Timeout | null = null;
  #nextDelay: number;
  readonly fetches: Record<FetchOutcome, number> = { ok: 0, unreachable: 0, no_usable_key: 0, invalid: 0 };

  constructor(deps: { config: ProviderConfig; fetch: ProviderDocumentFetch; clock: Clock; log: Logger }) {
    this.#config = deps.config;
    this.#fetch = deps.fetch;
    this.#clock = deps.clock;
    this.#log = deps.log;
    this.#nextDelay = deps.config.refreshInterval;
  }

  /** Fetches the keys once (a failure is logged and reported by health(), not thrown), then keeps them fresh. */
  async start(): Promise<void> {
    await this.refresh();
    if (this.#fetchedAt === null) {
      this.#log.error({ issuer: this.#config.issuer, err: this.#lastError }, "the identity provider's keys could not be fetched at start: its tokens are refused (401) and /readyz answers 503 until they are; the daemon's own tokens work");
    }
    this.#schedule();
  }

  stop(): void {
    if (this.#timer !== null) clearTimeout(this.#timer);
    this.#timer = null;
  }

  #schedule(): void {
    this.#timer = setTimeout(() => {
      void this.refresh().finally(() => {
        if (this.#timer !== null) this.#schedule();
      });
    }, this.#nextDelay);
    this.#timer.unref();
  }

  /** Fetches the keys unless a fetch started less than minRefreshInterval ago; concurrent callers share one fetch. */
  refresh(): Promise<void> {
    if (this.#inFlight !== null) return this.#inFlight;
    if (this.#clock.now() - this.#lastAttemptAt < this.#config.minRefreshInterval) return Promise.resolve();
    this.#lastAttemptAt = this.#clock.now();
    this.#inFlight = this.#fetchKeys().finally(() => {
      this.#inFlight = null;
    });
    return this.#inFlight;
  }

  async #jwksUrl(): Promise<string> {
    if (this.#config.jwksUrl !== null) return this.#config.jwksUrl;
    const issuer = this.#config.issuer!;
    const { body } = await this.#fetch(`${issuer.replace(/\/$/, '')}/.well-known/openid-configuration`);
    const doc = body as { issuer?: unknown; jwks_uri?: unknown };
    if (doc?.issuer !== issuer) throw new InvalidDocument(`the discovery document's issuer ${JSON.stringify(doc?.issuer)} is not auth.provider.issuer ${JSON.stringify(issuer)}`);
    if (!isHttpsUrl(doc.jwks_uri)) throw new InvalidDocument('the discovery document has no https:// jwks_uri');
    this.#endpoints = endpointsOf(body as Record<string, unknown>);
    return doc.jwks_uri;
  }

  async #fetchKeys(): Promise<void> {
    let outcome: FetchOutcome = FetchOutcome.ok;
    try {
      const url = await this.#jwksUrl();
      const { body, maxAgeMs } = await this.#fetch(url);
      const keys = this.#usableKeys(body);
      if (keys.length === 0) {
        outcome = FetchOutcome.noUsableKey;
        throw new InvalidDocument(`the JWKS at ${url} has no usable key (accepted: ${this.#config.algorithms.join(', ')}; "use": "sig" or none); the last keys fetched stay in use`);
      }
      this.#keys = keys;
      this.#fetchedAt = this.#clock.now();
      this.#lastError = null;
      this.#failingSince = null;
      const { refreshInterval, minRefreshInterval } = this.#config;
      this.#nextDelay = maxAgeMs === null ? refreshInterval : Math.min(refreshInterval, Math.max(minRefreshInterval, maxAgeMs));
      this.#log.info({ keys: keys.length, kids: keys.map((k) => k.kid) }, "fetched the identity provider's keys");
    } catch (err) {
      if (outcome === FetchOutcome.ok) outcome = err instanceof InvalidDocument ? FetchOutcome.invalid : FetchOutcome.unreachable;
      this.#lastError = (err as Error).message;
      this.#failingSince ??= this.#clock.now();
      this.#nextDelay = this.#config.minRefreshInterval;
      this.#log.warn({ outcome, err: this.#lastError }, "fetching the identity provider's keys failed");
    } finally {
      this.fetches[outcome] += 1;
    }
  }

  #usableKeys(body: unknown): ProviderKey[] {
    const list = (body as { keys?: unknown })?.keys;
    if (!Array.isArray(list)) throw new InvalidDocument('the JWKS is not an object with a "keys" list');
    const out: ProviderKey[] = [];
    for (const jwk of list as JWK[]) {
      const algorithms = keyAlgorithms(jwk, this.#config.algorithms);
      if (algorithms.length === 0) continue;
      try {
        out.push({ kid: typeof jwk.kid === 'string' ? jwk.kid : null, algorithms, key: createPublicKey({ key: jwk as import('node:crypto').JsonWebKey, format: 'jwk' }) });
      } catch (err) {
        this.#log.warn({ kid: jwk.kid, err: (err as Error).message }, 'a key of the JWKS cannot be imported; it is left out');
      }
    }
    return out;
  }

  /** Whether the cached keys may verify tokens now (some keys, fetched within maxStale), or the 401 sentence why not. */
  usable(): true | string {
    if (this.#fetchedAt === null) return `hookrelay could not fetch the identity provider's keys yet (${this.#lastError ?? 'no fetch finished'}); use a token from \`hookrelay token issue\` meanwhile`;
    const age = this.#clock.now() - this.#fetchedAt;
    if (age > this.#config.maxStale) return `the identity provider's keys are older than auth.provider.maxStale (${formatDuration(this.#config.maxStale)}): it could not be reached since; use a token from \`hookrelay token issue\` meanwhile`;
    return true;
  }

  /**
   * The key for a token header's kid: from the cache, or after one refresh when the kid is
   * unknown (at most one fetch per minRefreshInterval). No kid: the one key, if there is one.
   */
  async find(kid: string | null): Promise<ProviderKey | null> {
    const cached = this.#lookup(kid);
    if (cached !== null) return cached;
    await this.refresh();
    return this.#lookup(kid);
  }

  #lookup(kid: string | null): ProviderKey | null {
    if (kid === null) return this.#keys.length === 1 ? this.#keys[0]! : null;
    return this.#keys.find((key) => key.kid === kid) ?? null;
  }

  /** The sign-in endpoints of the last discovery document read, or null (none read yet, no discovery, or it has none). */
  endpoints(): ProviderEndpoints | null {
    return this.#endpoints;
  }

  health(): ProviderKeysHealth {
    const usable = this.usable() === true;
    const state = !usable ? 'unavailable' : this.#lastError === null ? 'fresh' : 'stale';
    return { state, keys: this.#keys.length, fetchedAt: this.#fetchedAt, lastError: this.#lastError, since: this.#failingSince };
  }
}

class InvalidDocument extends Error {}

function isHttpsUrl(value: unknown): value is string {
  return typeof value === 'string' && URL.canParse(value) && new URL(value).protocol === 'https:';
}

/** The browser sign-in endpoints of a discovery document: both of authorization and token must be https:// URLs. */
function endpointsOf(doc: Record<string, unknown>): ProviderEndpoints | null {
  if (!isHttpsUrl(doc.authorization_endpoint) || !isHttpsUrl(doc.token_endpoint)) return null;
  return { authorization: doc.authorization_endpoint, token: doc.token_endpoint, endSession: isHttpsUrl(doc.end_session_endpoint) ? doc.end_session_endpoint : null };
}

/**
 * OAuth2 access tokens for receivers that want one (RFC 6749 section 4.4, client credentials):
 * fetched from the webhook's token URL through the same connections, address guard and egress
 * proxy as its deliveries, cached per webhook and settings revision until shortly before they
 * expire, one fetch shared by every attempt that needs a token meanwhile. A token and the
 * client secret are never logged, never part of an error, never stored.
 */
import { isIP } from 'node:net';
import type { Dispatcher } from 'undici';
import { urlRefusal } from '../domain/address-policy.ts';
import { parseTokenAnswer, refreshMarginMs, tokenErrorCode, tokenRequest, type OAuth2Settings } from '../domain/oauth2-settings.ts';
import type { ReceiverCredentials } from '../services/receiver-credentials.ts';
import { BLOCKED_CODE, type NetworkGuard } from './network-guard.ts';
import { ProxyError } from './proxy-tunnel.ts';

/** A token answer larger than this is refused (a JWT access token is a few KiB). */
const MAX_TOKEN_ANSWER_BYTES = 64 * 1024;
/** A token whose answer gave no lifetime is used this long at most (or until a receiver answers 401). */
export const UNDATED_TOKEN_MS = 60 * 60_000;

/** Why no token could be had: a sentence for the attempt log (the tenant's), naming the token URL, never a secret. */
export class OAuth2TokenError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'OAuth2TokenError';
  }
}

interface Cached {
  readonly token: string;
  /** performance.now() after which the token is not used any more. */
  readonly renewAt: number;
}

interface Entry {
  cached: Cached | null;
  /** The fetch under way, shared by every attempt that waits for a token. */
  pending: Promise<Cached> | null;
}

/** Where a token fetch goes: the org's connections (guard, proxy, CA) and its policy's guard. */
export interface TokenRoute {
  readonly dispatcher: Dispatcher;
  readonly guard: NetworkGuard;
}

export interface OAuth2TokensOptions {
  readonly credentials: Pick<ReceiverCredentials, 'oauth2ClientSecret'>;
  readonly allowHttp: boolean;
  /** One fetch's deadline, ms (the attempt deadline). */
  readonly timeoutMs: number;
  readonly userAgent: string;
}

/** The token URL as an error names it: without its query (which could carry anything). */
function shownUrl(url: URL): string {
  return `${url.origin}${url.pathname}`;
}

/** The access tokens of every webhook with OAuth2 (see the module's comment). */
export class OAuth2Tokens {
  readonly #options: OAuth2TokensOptions;
  readonly #entries = new Map<string, Entry>();
  /** Token requests made (for tests and the log's figures). */
  fetches = 0;

  constructor(options: OAuth2TokensOptions) {
    this.#options = options;
  }

  /**
   * A token for the organization's webhook: the cached one while it is good, else a new one
   * (the fetch shared with whoever else waits). `signal` ends the wait for this attempt only.
   */
  async token(orgId: string, settings: OAuth2Settings, route: TokenRoute, signal: AbortSignal): Promise<string> {
    const entry = this.#entry(orgId, settings);
    if (entry.cached !== null && performance.now() < entry.cached.renewAt) return entry.cached.token;
    entry.pending ??= this.#fetch(orgId, settings, route).then(
      (cached) => {
        entry.cached = cached;
        entry.pending = null;
        return cached;
      },
      (err: unknown) => {
        entry.pending = null;
        throw err;
      },
    );
    let onAbort: (() => void) | null = null;
    const aborted = new Promise<never>((_, reject) => {
      onAbort = () => reject(signal.reason);
      if (signal.aborted) onAbort();
      else signal.addEventListener('abort', onAbort, { once: true });
    });
    try {
      return (await Promise.race([entry.pending, aborted])).token;
    } finally {
      if (onAbort !== null) signal.removeEventListener('abort', onAbort);
    }
  }

  /** The receiver refused `token` (401): it is not used again (a token fetched since by another attempt is kept). */
  refused(orgId: string, settings: OAuth2Settings, token: string): void {
    const entry = this.#entry(orgId, settings);
    if (entry.cached?.token === token) entry.cached = null;
  }

  #entry(orgId: string, settings: OAuth2Settings): Entry {
    const key = `${orgId}\u0000${settings.revision}`;
    let entry = this.#entries.get(key);
    if (entry === undefined) {
      // The organization's entries of earlier revisions are forgotten: their settings are gone.
      for (const k of this.#entries.keys()) if (k.startsWith(`${orgId}\u0000`)) this.#entries.delete(k);
      this.#entries.set(key, (entry = { cached: null, pending: null }));
    }
    return entry;
  }

  async #fetch(orgId: string, settings: OAuth2Settings, route: TokenRoute): Promise<Cached> {
    const url = new URL(settings.tokenUrl);
    const where = `the token service at ${shownUrl(url)}`;
    const refused = urlRefusal(url, this.#options.allowHttp);
    if (refused !== null) throw new OAuth2TokenError(`${where} cannot be used: the token URL ${refused.message}`);
    const host = url.hostname.replace(/^\[(.*)\]$/, '$1');
    if (isIP(host) !== 0) {
      const why = route.guard.refusal(host);
      if (why !== null) throw new OAuth2TokenError(`${where} cannot be used: ${why}`);
    }
    const secret = await this.#options.credentials.oauth2ClientSecret(orgId);
    if (secret === null) throw new OAuth2TokenError(`${where} cannot be asked: the webhook's OAuth2 client secret is gone (register oauth2 again)`);
    const { body, headers } = tokenRequest(settings, secret);
    const controller = new AbortController();
    const timer = setTimeout(() => controller.abort(new Error('deadline')), this.#options.timeoutMs);
    this.fetches++;
    const started = performance.now();
    try {
      const res = await route.dispatcher.request({
        origin: url.origin,
        path: url.pathname + url.search,
        method: 'POST',
        headers: { ...headers, 'user-agent': this.#options.userAgent },
        body,
        signal: controller.signal,
      });
      const chunks: Buffer[] = [];
      let size = 0;
      for await (const chunk of res.body as AsyncIterable<Buffer>) {
        size += chunk.length;
        if (size > MAX_TOKEN_ANSWER_BYTES) throw new OAuth2TokenError(`${where} answered more than ${MAX_TOKEN_ANSWER_BYTES / 1024} KiB`);
        chunks.push(chunk);
      }
      let parsed: unknown = null;
      try {
        parsed = JSON.parse(Buffer.concat(chunks).toString('utf8'));
      } catch {
        // Not JSON: said below by status, or as not a token answer.
      }
      if (res.statusCode !== 200) {
        const code = tokenErrorCode(parsed);
        throw new OAuth2TokenError(`${where} answered HTTP ${res.statusCode}${code === null ? '' : ` (${code})`}`);
      }
      const answer = parseTokenAnswer(parsed);
      if (!answer.ok) throw new OAuth2TokenError(`${where} gave no usable token: ${answer.why}`);
      const lifetime = answer.expiresInSeconds === null ? UNDATED_TOKEN_MS : answer.expiresInSeconds * 1000;
      // Counted from when it was asked for: the service's clock started no earlier.
      return { token: answer.token, renewAt: started + lifetime - (answer.expiresInSeconds === null ? 0 : refreshMarginMs(lifetime)) };
    } catch (err) {
      if (err instanceof OAuth2TokenError) throw err;
      if (controller.signal.aborted) throw new OAuth2TokenError(`${where} did not answer within ${this.#options.timeoutMs / 1000} s`);
      if (err instanceof ProxyError) throw new OAuth2TokenError(`${where} could not be reached: ${err.message}`);
      const e = err as NodeJS.ErrnoException & { cause?: NodeJS.ErrnoException };
      if (e.code === BLOCKED_CODE || e.cause?.code === BLOCKED_CODE) throw new OAuth2TokenError(`${where} cannot be used: ${(e.cause ?? e).message}`);
      throw new OAuth2TokenError(`${where} could not be reached (${e.code ?? e.cause?.code ?? e.name})`);
    } finally {
      clearTimeout(timer);
    }
  }
}

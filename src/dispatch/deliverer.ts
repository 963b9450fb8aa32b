import { readFileSync } from 'node:fs';
import { isIP, type LookupFunction } from 'node:net';
import pRetry from 'p-retry';
import { urlRefusal, type NetworkPolicies } from '../domain/address-policy.ts';
import type { Clock } from '../domain/clock.ts';
import { ErrorCode, HookrelayError } from '../domain/errors.ts';
import { AttemptError, parseRetryAfter, type AttemptResult } from '../domain/retry-policy.ts';
import { credentialEchoes, hideEchoes } from '../domain/credential-echoes.ts';
import { deliveryHeaders, unsendableRequest } from '../domain/delivery-request.ts';
import type { WebhookHeaders } from '../domain/webhook-headers.ts';
import type { TraceHeaders } from './attempt-tracing.ts';
import { createDeliveryClient, NotSentInTime, SEND_BY, type DeliveryClient, type SendByOptions } from './http-client.ts';

export { NotSentInTime } from './http-client.ts';
import { BLOCKED_CODE, createNetworkGuard, type NetworkGuard } from './network-guard.ts';
import { ProxyError } from './proxy-tunnel.ts';
import type { EgressProxies, EgressProxy, ProxyTarget } from '../domain/egress-proxy.ts';
import type { ClientCertificateInfo } from '../domain/client-certificate.ts';
import { isHookrelayError } from '../domain/errors.ts';
import type { OAuth2Settings } from '../domain/oauth2-settings.ts';
import { NO_OPERATOR_CERTIFICATES, type OperatorCertificates, type PresentedCertificate, type ReceiverCredentials } from '../services/receiver-credentials.ts';
import { CertifiedRoutes } from './certified-routes.ts';
import { OAuth2TokenError, OAuth2Tokens } from './oauth2-tokens.ts';

/** At most this much of a response body is read and kept. */
export const MAX_RESPONSE_BYTES = 20 * 1024;

/** What the attempt log holds instead of the body of an internal receiver's answer (see delivery.storeInternalResponses). */
export function internalBodyWithheld(bytes: number, cut: boolean): string {
  return `(not stored: ${cut ? 'at least ' : ''}${bytes} bytes from a receiver on an internal network; the operator can keep them with delivery.storeInternalResponses)`;
}

/**
 * What follows the error code of a failed connection to an internal receiver in the attempt
 * log, instead of the error's message: a TLS error names the certificate's names and addresses,
 * a connection error the address and port it tried (see delivery.storeInternalResponses).
 */
export const INTERNAL_ERROR_WITHHELD = ' (details not stored: the receiver is on an internal network; the operator can keep them with delivery.storeInternalResponses)';

export interface DeliveryRequest {
  /** The organization whose webhook this is: its network grants apply. */
  readonly orgId: string;
  readonly url: string;
  /** The event id: the `webhook-id` header, the same on every attempt and replay. */
  readonly eventId: string;
  /** The exact body bytes stored at ingestion. */
  readonly payload: string;
  /** Signing secrets, newest first; empty when active_hmac is off. */
  readonly secrets: readonly string[];
  /** The webhook's own headers, sent after hookrelay's (none when absent). */
  readonly headers?: WebhookHeaders;
  /** The W3C trace context this attempt sends (tracing on, tracing.propagate): not signed, not part of the body. */
  readonly trace?: TraceHeaders | undefined;
  /** The webhook's own client certificate, as its due row names it (the deliverer opens its key); none when absent or null. */
  readonly clientCertificate?: ClientCertificateInfo | null;
  /** The webhook's OAuth2 client credentials: an access token goes in Authorization; none when absent or null. */
  readonly oauth2?: OAuth2Settings | null;
  /**
   * The latest moment (performance.now()) the request may start going out: its lease could
   * lapse before an attempt begun later ends (AttemptRunner.start). Checked once more right
   * before its first byte is written (http-client.ts's SEND_BY), so that a pause between the
   * attempt's start and its write (a connection slow to open, the process frozen) sends
   * nothing late: deliver() then throws NotSentInTime, the one failure it does not report as
   * an attempt's result (there was no attempt). Absent: no limit.
   */
  readonly sendBy?: number;
}

export interface DelivererOptions {
  /** The networks each organization's webhook may reach, and whose internal answers are kept. */
  readonly networks: NetworkPolicies;
  readonly clock: Clock;
  readonly timeoutMs: number;
  readonly allowHttp: boolean;
  readonly userAgent: string;
  /** PEM text of extra trusted CAs. */
  readonly extraCa: string | null;
  /** Most attempts in flight at once (delivery.concurrency): bounds the connections to one origin. */
  readonly concurrency: number;
  /** The egress proxies (delivery.proxy, delivery.organizationProxies); none when absent. */
  readonly proxies?: EgressProxies;
  /** What a CONNECT asks the proxy for (delivery.proxyTarget); "address" when absent. */
  readonly proxyTarget?: ProxyTarget;
  /** Opens the webhooks' client certificates and OAuth2 client secrets (sealed in the database); without it, none are used. */
  readonly credentials?: ReceiverCredentials;
  /** The operator's client certificates (delivery.clientCertificate, delivery.organizationClientCertificates); none when absent. */
  readonly operatorCertificates?: OperatorCertificates;
}

const TLS_CODES = /^(ERR_TLS_|CERT_|UNABLE_TO_|DEPTH_ZERO_|SELF_SIGNED_|ERR_SSL_|EPROTO$)/;
/**
 * Errors before any response that are worth trying again at once, inside the attempt. undici
 * reports a kept-alive connection the receiver closed as UND_ERR_SOCKET ("other side closed").
 */
const TRANSIENT_CODES = new Set(['ECONNRESET', 'ECONNREFUSED', 'EPIPE', 'EAI_AGAIN', 'ENETUNREACH', 'EHOSTUNREACH', 'UND_ERR_SOCKET']);

/** Reads the operator's extra CA certificates (delivery.caFile). */
export function loadExtraCa(caFile: string | null): string | null {
  if (caFile === null) return null;
  try {
    return readFileSync(caFile, 'utf8');
  } catch (err) {
    throw new HookrelayError(ErrorCode.config, `cannot read delivery.caFile ${caFile}: ${(err as NodeJS.ErrnoException).code ?? String(err)}`);
  }
}

/** The connections and the address guard of one network policy (the shared one, or an organization's own). */
interface Route {
  readonly guard: NetworkGuard;
  readonly client: DeliveryClient;
}

class Refused extends Error {
  readonly result: Pick<AttemptResult, 'error' | 'errorDetail'>;
  constructor(error: AttemptError, detail: string) {
    super(detail);
    this.result = { error, errorDetail: detail };
  }
}

/**
 * The Standard Webhooks headers of the request an attempt made last (send sets them as it makes
 * the request), reported in its AttemptResult: sentTimestamp and sentSignature.
 */
interface Sent {
  timestamp: number | null;
  signature: string | null;
  /** The OAuth2 access token it carried (hidden wherever the answer repeats it; never stored). */
  token: string | null;
}

/** Connection errors that leave no request sent: no connection was made. */
const NOT_CONNECTED_CODES = new Set(['ECONNREFUSED', 'ENETUNREACH', 'EHOSTUNREACH', 'EADDRNOTAVAIL', 'UND_ERR_CONNECT_TIMEOUT']);

/**
 * Whether a failed attempt may have sent its request: not when its address was refused, its
 * name did not resolve, its TLS handshake failed or no connection was made. A timeout or a
 * connection closed on it may have come before, while or after the request went out.
 */
function maySendFailed(err: unknown, error: AttemptError): boolean {
  if (error === AttemptError.timeout) return true;
  if (error !== AttemptError.connection) return false;
  const e = err as NodeJS.ErrnoException & { cause?: NodeJS.ErrnoException };
  return !NOT_CONNECTED_CODES.has(e.code ?? e.cause?.code ?? '');
}

/** An attempt its deadline ended. */
const TIMED_OUT = { error: AttemptError.timeout, detail: 'no complete response within the attempt deadline' } as const;

/**
 * The error class and the sentence of an attempt that failed without an answer. With
 * `withhold` (a receiver on an internal network, for an organization whose log does not keep
 * what they say), the messages of TLS and connection errors are left out: they name the
 * certificate's names and addresses, or the address tried.
 */
function classify(err: unknown, deadlineHit: boolean, withhold: boolean): { error: AttemptError; detail: string } {
  if (deadlineHit) return TIMED_OUT;
  const e = err as NodeJS.ErrnoException & { cause?: NodeJS.ErrnoException };
  const code = e.code ?? e.cause?.code ?? '';
  if (code === BLOCKED_CODE || e.cause?.code === BLOCKED_CODE) return { error: AttemptError.blocked, detail: (e.cause ?? e).message };
  // The proxy's own failures say nothing of the receiver, nor of the proxy's address or credentials (proxy-tunnel.ts).
  if (err instanceof ProxyError) return { error: AttemptError.proxy, detail: err.message };
  if (code === 'ENOTFOUND' || code === 'EAI_AGAIN' || code === 'EAI_NONAME') return { error: AttemptError.dns, detail: `DNS lookup failed (${code})` };
  // undici's name for a connection the receiver closed before its answer was complete; the
  // attempt log calls it a socket hang up, node:http's words, whatever the client.
  if (code === 'UND_ERR_SOCKET') return { error: AttemptError.connection, detail: 'ECONNRESET: socket hang up (the receiver closed the connection)' };
  if (TLS_CODES.test(code)) return { error: AttemptError.tls, detail: withhold ? `TLS failed (${code})${INTERNAL_ERROR_WITHHELD}` : `TLS failed (${code}): ${e.message}`.slice(0, 500) };
  return { error: AttemptError.connection, detail: withhold ? `${code || e.name}${INTERNAL_ERROR_WITHHELD}` : `${code || e.name}: ${e.message}`.slice(0, 500) };
}

/**
 * The result as the attempt log keeps it: the webhook's credentials this request carried
 * (its headers that isCredentialHeader takes for credentials) replaced by a marker wherever
 * the receiver's answer, or an error's sentence, repeats them. A receiver that echoes the
 * request's headers would otherwise show them to every reader of the log, viewers included,
 * where get_webhook and the request view show them to nobody.
 */
function hideCredentials(request: DeliveryRequest, result: AttemptResult, token: string | null): AttemptResult {
  if ((request.headers === undefined && token === null) || (result.responseBody === null && result.errorDetail === null)) return result;
  const echoes = credentialEchoes(token === null ? (request.headers ?? []) : [...(request.headers ?? []), ['authorization', `Bearer ${token}`]]);
  if (echoes.length === 0) return result;
  const responseBody = hideEchoes(result.responseBody, echoes);
  // A marker is longer than a short credential: what is kept stays within its bound.
  return { ...result, responseBody: responseBody !== null && responseBody.length > MAX_RESPONSE_BYTES ? responseBody.slice(0, MAX_RESPONSE_BYTES) : responseBody, errorDetail: hideEchoes(result.errorDetail, echoes) };
}

/** The result of an attempt its deadline, or the daemon's shutdown, cut short: with the request it was sending, if it had made one. */
function cutShort(started: number, deadlineHit: boolean, sent: Sent): AttemptResult {
  const { error, detail } = deadlineHit ? TIMED_OUT : { error: AttemptError.connection, detail: 'aborted: the daemon is stopping' };
  return { statusCode: null, responseBody: null, retryAfterMs: null, error, errorDetail: detail, durationMs: Math.round(performance.now() - started), sentTimestamp: sent.timestamp, sentSignature: sent.signature };
}

/** What a receiver answered, as the attempt keeps it. */
interface Answer {
  readonly statusCode: number;
  readonly body: string;
  readonly retryAfter: string | undefined;
}

/**
 * Makes one delivery attempt: POST the stored bytes with Standard Webhooks headers, under
 * one overall deadline, without following redirects, reading at most 20 KiB of the answer.
 * Never throws: every outcome is an AttemptResult. A connection error before any response
 * is retried briefly inside the attempt (p-retry); undici retries nothing of its own.
 */
export class Deliverer {
  readonly #options: DelivererOptions;
  readonly #networks: NetworkPolicies;
  readonly #proxies: EgressProxies | null;
  readonly #shared: Route;
  /**
   * An organization granted networks of its own gets connections of its own: a kept-alive
   * connection to an internal receiver must never carry another organization's attempt. So
   * does one with a proxy of its own (or none, "direct"): its connections go another way.
   */
  readonly #own = new Map<string, Route>();
  /** Connections that present a client certificate, one pool per certificate and route (certified-routes.ts). */
  readonly #certified: CertifiedRoutes<Route>;
  /** Access tokens of webhooks with OAuth2 (oauth2-tokens.ts). */
  readonly tokens: OAuth2Tokens;

  constructor(options: DelivererOptions) {
    this.#options = options;
    this.#networks = options.networks;
    this.#proxies = options.proxies ?? null;
    this.#shared = this.#connect(createNetworkGuard(this.#networks.shared), this.#proxies?.shared ?? null);
    this.#certified = new CertifiedRoutes(options.credentials ?? null, options.operatorCertificates ?? NO_OPERATOR_CERTIFICATES, (base, certificate) => {
      const route = base === '' ? this.#shared : this.#own.get(base)!;
      return this.#connect(route.guard, base === '' ? (this.#proxies?.shared ?? null) : (this.#proxies?.forOrg(base) ?? null), certificate);
    });
    this.tokens = new OAuth2Tokens({
      credentials: options.credentials ?? { oauth2ClientSecret: () => Promise.resolve(null) },
      allowHttp: options.allowHttp,
      timeoutMs: options.timeoutMs,
      userAgent: options.userAgent,
    });
  }

  /** Closes the kept-alive connections; call once no attempt is in flight. */
  async close(): Promise<void> {
    await Promise.all([this.#shared, ...this.#own.values(), ...this.#certified.all()].map((r) => r.client.destroy()));
  }

  /** @param shutdown aborts the attempt when the daemon stops. */
  async deliver(request: DeliveryRequest, shutdown?: AbortSignal): Promise<AttemptResult> {
    const started = performance.now();
    // One controller per attempt, for the deadline and the shutdown both, and nothing left
    // behind on the shared shutdown signal once the attempt is over.
    const controller = new AbortController();
    const signal = controller.signal;
    let deadlineHit = false;
    const timer = setTimeout(() => {
      deadlineHit = true;
      controller.abort(new Error('attempt deadline'));
    }, this.#options.timeoutMs);
    const onShutdown = () => controller.abort(shutdown?.reason);
    if (shutdown?.aborted) onShutdown();
    else shutdown?.addEventListener('abort', onShutdown, { once: true });
    // undici acts on an abort only once the request has a connection: an attempt still
    // connecting (a TLS handshake never answered) would run on to the connect timeout. The
    // attempt ends when its signal fires, whatever undici is doing; the connection it was
    // opening is dropped once undici gets to it.
    const sent: Sent = { timestamp: null, signature: null, token: null };
    const cut = new Promise<AttemptResult>((resolve) => {
      signal.addEventListener('abort', () => resolve(cutShort(started, deadlineHit, sent)), { once: true });
    });
    try {
      if (signal.aborted) return cutShort(started, deadlineHit, sent);
      const result = await Promise.race([this.#attempt(request, signal, started, () => deadlineHit, sent), cut]);
      return hideCredentials(request, result, sent.token);
    } finally {
      clearTimeout(timer);
      shutdown?.removeEventListener('abort', onShutdown);
    }
  }

  #connect(guard: NetworkGuard, proxy: EgressProxy | null, certificate?: PresentedCertificate): Route {
    const options = this.#options;
    return {
      guard,
      client: createDeliveryClient({
        extraCa: options.extraCa,
        lookup: guard.lookup as LookupFunction,
        connectionsPerOrigin: options.concurrency,
        connectTimeoutMs: options.timeoutMs,
        proxy: proxy === null ? undefined : { proxy, target: options.proxyTarget ?? 'address', guard },
        clientCertificate: certificate?.material,
      }),
    };
  }

  /** The connections and guard an organization's attempts go through (see #own), and the key CertifiedRoutes knows it by ('' for the shared one). */
  #route(orgId: string): { route: Route; key: string } {
    if (!this.#networks.hasOwnNetworks(orgId) && this.#proxies?.hasOwn(orgId) !== true) return { route: this.#shared, key: '' };
    let r = this.#own.get(orgId);
    if (r === undefined) this.#own.set(orgId, (r = this.#connect(createNetworkGuard(this.#networks.forOrg(orgId)), this.#proxies?.forOrg(orgId) ?? null)));
    return { route: r, key: orgId };
  }

  /** The route of an attempt: the organization's, through the pool of the client certificate it presents, if any. */
  async #routeFor(request: DeliveryRequest): Promise<{ base: Route; via: Route }> {
    const { route, key } = this.#route(request.orgId);
    const own = request.clientCertificate ?? null;
    if (own === null && !this.#certified.concerns(request.orgId)) return { base: route, via: route };
    try {
      return { base: route, via: await this.#certified.route(request.orgId, key, route, own) };
    } catch (err) {
      if (isHookrelayError(err)) throw new Refused(AttemptError.credentials, `the webhook's client certificate cannot be used: ${err.message}`);
      throw err;
    }
  }

  /** The OAuth2 access token of the attempt, or null when the webhook has none; a failure is the attempt's (oauth2_token_failed). */
  async #token(request: DeliveryRequest, base: Route, signal: AbortSignal): Promise<string | null> {
    if (request.oauth2 == null) return null;
    try {
      return await this.tokens.token(request.orgId, request.oauth2, { dispatcher: base.client.dispatcher, guard: base.guard }, signal);
    } catch (err) {
      if (err instanceof OAuth2TokenError) throw new Refused(AttemptError.oauth2, err.message);
      if (isHookrelayError(err)) throw new Refused(AttemptError.credentials, `the webhook's OAuth2 client secret cannot be used: ${err.message}`);
      throw err;
    }
  }

  /** Applies the URL policy before an attempt; returns the host without IPv6 brackets. */
  #checkTarget(url: URL, guard: NetworkGuard): string {
    // The policy registration applied, again: a webhook registered before it (or before the
    // operator changed delivery.allowHttp) is held to it too.
    const refused = urlRefusal(url, this.#options.allowHttp);
    if (refused !== null) throw new Refused(AttemptError.invalidUrl, `the webhook URL ${refused.message}`);
    const host = url.hostname.replace(/^\[(.*)\]$/, '$1');
    // IP literals never reach the lookup function, so they are checked here (the URL parser
    // has already normalised forms such as 127.1, 2130706433 and 0x7f.0.0.1).
    if (isIP(host) !== 0) {
      const why = guard.refusal(host);
      if (why !== null) throw new Refused(AttemptError.blocked, why);
    }
    return host;
  }

  async #send(url: URL, host: string, request: DeliveryRequest, signal: AbortSignal, route: Route, sent: Sent, token: string | null): Promise<Answer> {
    const timestamp = Math.floor(this.#options.clock.now() / 1000);
    const headers = deliveryHeaders({
      eventId: request.eventId,
      timestampSeconds: timestamp,
      body: request.payload,
      secrets: request.secrets,
      userAgent: this.#options.userAgent,
      ...(request.headers === undefined ? {} : { custom: request.headers }),
      trace: request.trace,
    });
    // What the attempt reports it sent (the attempt log keeps it): this request's, a retry's inside the attempt replacing it.
    sent.timestamp = timestamp;
    sent.signature = headers['webhook-signature'] ?? null;
    if (token !== null) {
      // Registration refuses an Authorization header of the webhook's own next to OAuth2; a row changed by other means loses it here.
      for (const name of Object.keys(headers)) if (name.toLowerCase() === 'authorization') delete headers[name];
      headers.authorization = `Bearer ${token}`;
      sent.token = token;
    }
    const options: SendByOptions = {
      origin: url.origin,
      path: url.pathname + url.search,
      method: 'POST',
      headers,
      body: request.payload,
      signal,
      ...(request.sendBy === undefined ? {} : { [SEND_BY]: request.sendBy }),
    };
    const res = await route.client.dispatcher.request(options);
    const chunks: Buffer[] = [];
    let size = 0;
    // Read to the end, so that the connection goes back to the pool for the next attempt; only
    // an answer longer than what is kept is cut off (leaving the loop destroys the body, and
    // with it that connection), so a receiver answering a gigabyte costs 20 KiB of memory.
    for await (const chunk of res.body as AsyncIterable<Buffer>) {
      const kept = chunk.subarray(0, MAX_RESPONSE_BYTES - size);
      chunks.push(kept);
      size += kept.length;
      if (size >= MAX_RESPONSE_BYTES) break;
    }
    const retryAfter = res.headers['retry-after'];
    const header = Array.isArray(retryAfter) ? retryAfter[0] : retryAfter;
    // An answer from a receiver reached through a granted internal network: its status and size
    // are logged, not its body, unless the operator keeps them for this organization. The
    // connection went to an address the guard checked for this host: an IP literal, or what the
    // name resolved to (withheld when any of its addresses is internal).
    if (!this.#networks.storesInternalResponses(request.orgId) && route.guard.reachesInternal(host, this.#networks.isInternal)) {
      return { statusCode: res.statusCode, body: internalBodyWithheld(size, size >= MAX_RESPONSE_BYTES), retryAfter: header };
    }
    return { statusCode: res.statusCode, body: Buffer.concat(chunks).toString('utf8'), retryAfter: header };
  }

  /** One attempt under `signal` (deadline and shutdown); `deadlineHit` tells a timeout from a shutdown; `sent` gets the request's headers. */
  async #attempt(request: DeliveryRequest, signal: AbortSignal, started: number, deadlineHit: () => boolean, sent: Sent): Promise<AttemptResult> {
    const elapsed = () => Math.round(performance.now() - started);
    const base = { statusCode: null, responseBody: null, retryAfterMs: null, sentTimestamp: null, sentSignature: null };
    /** Where the attempt was going, once its target passed the policy. */
    let target: { via: Route; host: string } | null = null;
    try {
      // A request no HTTP client can carry fails the same way on every attempt: found before
      // anything is sent (not read from the client's error), so that the delivery is dead at
      // once and its webhook's health is left alone (see decideOutcome, concernsReceiver).
      const unsendable = unsendableRequest(request.eventId, this.#options.userAgent, request.headers);
      if (unsendable !== null) throw new Refused(AttemptError.invalidRequest, unsendable);
      const url = new URL(request.url);
      const host = this.#checkTarget(url, this.#route(request.orgId).route.guard);
      const { base: orgRoute, via } = await this.#routeFor(request);
      const send = (token: string | null) =>
        pRetry(() => this.#send(url, host, request, signal, via, sent, token), {
          retries: 2,
          minTimeout: 100,
          factor: 4,
          randomize: false,
          signal,
          shouldRetry: ({ error }) => !signal.aborted && TRANSIENT_CODES.has((error as NodeJS.ErrnoException).code ?? ''),
        });
      const token = await this.#token(request, orgRoute, signal);
      target = { via, host };
      let res = await send(token);
      if (res.statusCode === 401 && token !== null && request.oauth2 != null) {
        // The receiver refused the token (revoked, or its keys rotated before it expired): one
        // new token, and the attempt's request sent once more with it.
        this.tokens.refused(request.orgId, request.oauth2, token);
        const fresh = await this.#token(request, orgRoute, signal);
        res = await send(fresh);
      }
      const ok = res.statusCode >= 200 && res.statusCode < 300;
      return {
        statusCode: res.statusCode,
        error: ok ? null : AttemptError.http,
        errorDetail: ok ? null : res.statusCode >= 300 && res.statusCode < 400 ? `redirect (${res.statusCode}) not followed` : `HTTP ${res.statusCode}`,
        responseBody: res.body,
        durationMs: elapsed(),
        retryAfterMs: parseRetryAfter(res.retryAfter, this.#options.clock.now()),
        sentTimestamp: sent.timestamp,
        sentSignature: sent.signature,
      };
    } catch (err) {
      // A refusal after a request went out (no new token after a 401) keeps what that request sent.
      if (err instanceof Refused) return { ...base, ...err.result, durationMs: elapsed(), ...(sent.timestamp === null ? {} : { sentTimestamp: sent.timestamp, sentSignature: sent.signature }) };
      // Nothing of it went out: no attempt to report (see DeliveryRequest.sendBy).
      if (err instanceof NotSentInTime) throw err;
      if (err instanceof TypeError && (err as NodeJS.ErrnoException).code === 'ERR_INVALID_URL') {
        return { ...base, error: AttemptError.invalidUrl, errorDetail: 'the webhook URL is not a valid URL', durationMs: elapsed() };
      }
      // Judged as the body of an answer is (see #send): on the addresses the connection could have gone to.
      const withhold = target !== null && !this.#networks.storesInternalResponses(request.orgId) && target.via.guard.reachesInternal(target.host, this.#networks.isInternal);
      const { error, detail } = classify(err, deadlineHit(), withhold);
      if (!maySendFailed(err, error)) return { ...base, error, errorDetail: detail, durationMs: elapsed() };
      return { ...base, error, errorDetail: detail, durationMs: elapsed(), sentTimestamp: sent.timestamp, sentSignature: sent.signature };
    }
  }
}

/** A deliverer over `options` (see Deliverer). */
export function createDeliverer(options: DelivererOptions): Deliverer {
  return new Deliverer(options);
}

/**
 * Connections that present a client certificate (mutual TLS). A certificate is part of a TLS
 * connection, so each certificate gets a connection pool of its own: one per (route, SHA-256
 * fingerprint), where the route is the shared one or an organization's own (networks, proxy).
 * A webhook's certificate replaced is used from its next attempt: the due row names the new
 * fingerprint, which has no pool yet; the old pool is closed once no organization uses it, its
 * requests in flight left to end. Which certificate: the webhook's own, else the operator's for
 * its organization (delivery.organizationClientCertificates), else the operator's for all
 * (delivery.clientCertificate), else none.
 */
import type { ClientCertificateInfo } from '../domain/client-certificate.ts';
import type { OperatorCertificates, PresentedCertificate, ReceiverCredentials } from '../services/receiver-credentials.ts';
import type { DeliveryClient } from './http-client.ts';

/** Whatever the deliverer routes through: a client whose connections can be closed. */
export interface Closable {
  readonly client: DeliveryClient;
}

export class CertifiedRoutes<R extends Closable> {
  readonly #credentials: Pick<ReceiverCredentials, 'clientCertificate'> | null;
  readonly #operator: OperatorCertificates;
  readonly #make: (base: string, certificate: PresentedCertificate) => R;
  readonly #routes = new Map<string, { readonly route: R; readonly users: Set<string> }>();
  /** The pool each organization used last, by organization. */
  readonly #inUse = new Map<string, string>();
  /** Webhooks' own certificates opened, by organization (the key stays in memory, as a TLS context holds it anyway). */
  readonly #opened = new Map<string, PresentedCertificate>();

  constructor(credentials: Pick<ReceiverCredentials, 'clientCertificate'> | null, operator: OperatorCertificates, make: (base: string, certificate: PresentedCertificate) => R) {
    this.#credentials = credentials;
    this.#operator = operator;
    this.#make = make;
  }

  /**
   * Whether an attempt of `orgId` that names no certificate of its own webhook's must still be
   * routed here: an operator's certificate may apply, or its organization used a pool until now
   * (its certificate was just removed: the pool is released).
   */
  concerns(orgId: string): boolean {
    return this.#operator.shared !== null || this.#operator.byOrg.size > 0 || this.#inUse.has(orgId);
  }

  /**
   * The route an attempt of `orgId` goes through: `base` (key `baseKey`) when it presents no
   * certificate, else the pool of its certificate over the same base. `own`: the webhook's own
   * certificate as its due row names it (opened here the first time it is seen; throws when it
   * does not open).
   */
  async route(orgId: string, baseKey: string, base: R, own: ClientCertificateInfo | null): Promise<R> {
    const certificate = await this.#certificate(orgId, own);
    if (certificate === null) {
      this.#release(orgId);
      return base;
    }
    const key = `${baseKey}\u0000${certificate.info.fingerprintSha256}`;
    let entry = this.#routes.get(key);
    if (entry === undefined) this.#routes.set(key, (entry = { route: this.#make(baseKey, certificate), users: new Set() }));
    if (this.#inUse.get(orgId) !== key) {
      this.#release(orgId);
      this.#inUse.set(orgId, key);
      entry.users.add(orgId);
    }
    return entry.route;
  }

  /** Every pool, to close at shutdown. */
  all(): R[] {
    return [...this.#routes.values()].map((e) => e.route);
  }

  async #certificate(orgId: string, own: ClientCertificateInfo | null): Promise<PresentedCertificate | null> {
    if (own !== null && this.#credentials !== null) {
      const opened = this.#opened.get(orgId);
      if (opened?.info.fingerprintSha256 === own.fingerprintSha256) return opened;
      const loaded = await this.#credentials.clientCertificate(orgId);
      if (loaded !== null) {
        this.#opened.set(orgId, loaded);
        return loaded;
      }
    }
    this.#opened.delete(orgId);
    return this.#operator.byOrg.get(orgId) ?? this.#operator.shared;
  }

  /** The organization no longer uses the pool it used: closed when nobody else does. */
  #release(orgId: string): void {
    const key = this.#inUse.get(orgId);
    if (key === undefined) return;
    this.#inUse.delete(orgId);
    const entry = this.#routes.get(key);
    if (entry === undefined) return;
    entry.users.delete(orgId);
    if (entry.users.size === 0) {
      this.#routes.delete(key);
      // Requests in flight on it end as they would; new ones go to the new pool.
      void entry.route.client.close().catch(() => {});
    }
  }
}

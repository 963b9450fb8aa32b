import type { Permission } from './permissions.ts';
import type { ClientCertificateInfo } from './client-certificate.ts';
import type { OAuth2Settings } from './oauth2-settings.ts';
import type { WebhookHeaders } from './webhook-headers.ts';

export interface Organization {
  readonly id: string;
  readonly name: string;
  readonly createdAt: number;
}

export interface Role {
  readonly name: string;
  readonly description: string;
  readonly permissions: readonly Permission[];
  readonly builtin: boolean;
}

export interface User {
  readonly id: number;
  readonly orgId: string;
  readonly email: string;
  readonly roleName: string;
  readonly createdAt: number;
  readonly updatedAt: number;
}

export const WebhookStatus = {
  active: 'active',
  failing: 'failing',
  disabled: 'disabled',
} as const;
export type WebhookStatus = (typeof WebhookStatus)[keyof typeof WebhookStatus];

export interface Webhook {
  readonly orgId: string;
  readonly url: string;
  readonly activeHmac: boolean;
  /** The receiver's own headers, sent on every attempt (webhook-headers.ts); empty: none. */
  readonly headers: WebhookHeaders;
  readonly status: WebhookStatus;
  /** At most this many deliveries start in any second (see domain/rate-window.ts); null: no limit. */
  readonly rateLimit: number | null;
  /** The client certificate it presents to its receiver (mutual TLS), never the key; null: none of its own. */
  readonly clientCertificate: ClientCertificateInfo | null;
  /** The OAuth2 client credentials it gets access tokens with, never the secret; null: none. */
  readonly oauth2: OAuth2Settings | null;
  readonly createdAt: number;
  readonly updatedAt: number;
}

/** The webhook plus its signing secret; only services that sign or reveal it ever load this. */
export interface WebhookWithSecret extends Webhook {
  readonly secret: string | null;
}

/** The authenticated caller of an admin operation, re-read from the store on every request. */
export interface Principal {
  readonly orgId: string;
  readonly email: string;
  readonly roleName: string;
  readonly permissions: readonly Permission[];
}

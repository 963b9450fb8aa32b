/**
 * A real OpenID provider for the tests: panva's oidc-provider (a certified implementation) on
 * https://127.0.0.1:<port>, with its own signing keys, issuing JWT access tokens through the
 * client credentials grant (features.resourceIndicators with accessTokenFormat 'jwt'). Each
 * client stands for one caller: the claims its tokens carry, and the algorithm they are signed
 * with, are the test's. The JWKS requests are counted; rotate() swaps in a provider with a new
 * key first (the old one still published), stop() closes it as an outage would.
 */
import { generateKeyPairSync, type KeyObject } from 'node:crypto';
import { createServer, type Server } from 'node:https';
import type { AddressInfo } from 'node:net';
import type { TestContext } from 'node:test';
import Provider from 'oidc-provider';
import { Agent, request } from 'undici';
import { createTestTls, type TestTls } from './receivers.ts';

export const RESOURCE = 'https://hookrelay.test/api';

export interface OidcCaller {
  readonly clientId: string;
  /** Claims added to its tokens (e-mail, organization...). */
  readonly claims: Record<string, unknown>;
  /** The algorithm its tokens are signed with (ES256 by default). */
  readonly alg?: 'RS256' | 'PS256' | 'ES256' | 'EdDSA';
}

export interface TestOidcProvider {
  readonly issuer: string;
  readonly jwksUrl: string;
  readonly tls: TestTls;
  /** Requests for the JWKS so far. */
  jwksRequests(): number;
  /** A JWT access token for `caller` (registered as a client on first use). */
  token(caller: OidcCaller): Promise<string>;
  /** A new ES256 key signs from now on; the previous keys stay published. Returns the new kid. */
  rotate(): string;
  /** The server stops answering (connections refused), as when the provider is down. */
  stop(): Promise<void>;
  /** The provider's private key for `kid` (to forge tokens the tests need). */
  privateJwk(kid: string): Record<string, unknown>;
}

function jwkOf(key: KeyObject, kid: string, alg: string): Record<string, unknown> {
  return { ...(key.export({ format: 'jwk' }) as Record<string, unknown>), kid, alg, use: 'sig' };
}

function newKeys(): Record<string, Record<string, unknown>> {
  const stamp = Math.random().toString(36).slice(2, 8);
  return {
    [`es-${stamp}`]: jwkOf(generateKeyPairSync('ec', { namedCurve: 'P-256' }).privateKey, `es-${stamp}`, 'ES256'),
    [`rs-${stamp}`]: jwkOf(generateKeyPairSync('rsa', { modulusLength: 2048 }).privateKey, `rs-${stamp}`, 'RS256'),
    [`ps-${stamp}`]: jwkOf(generateKeyPairSync('rsa', { modulusLength: 2048 }).privateKey, `ps-${stamp}`, 'PS256'),
    [`ed-${stamp}`]: jwkOf(generateKeyPairSync('ed25519').privateKey, `ed-${stamp}`, 'EdDSA'),
  };
}

/** Starts the provider; it is stopped when the test ends. */
export async function startOidcProvider(t: TestContext): Promise<TestOidcProvider> {
  const tls = createTestTls(t);
  let jwksRequests = 0;
  let handler: ReturnType<Provider['callback']> | null = null;
  const server: Server = createServer({ cert: tls.certPem, key: tls.keyPem }, (req, res) => {
    if (req.url?.startsWith('/jwks')) jwksRequests += 1;
    handler!(req, res);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const issuer = `https://127.0.0.1:${(server.address() as AddressInfo).port}`;
  const clients = new Map<string, OidcCaller>();
  // Newest first: oidc-provider signs with the first key of the alg asked for.
  let keys: Array<Record<string, Record<string, unknown>>> = [newKeys()];

  function build(): void {
    // Its start-up notices (the in-memory adapter of a development set-up) say nothing to a test.
    const { warn, info } = console;
    console.warn = console.info = () => {};
    try {
      buildProvider();
    } finally {
      Object.assign(console, { warn, info });
    }
  }
  function buildProvider(): void {
    const provider = new Provider(issuer, {
      clients: [...clients.values()].map((c) => ({ client_id: c.clientId, client_secret: `${c.clientId}-secret-0123456789`, grant_types: ['client_credentials'], redirect_uris: [], response_types: [] })),
      jwks: { keys: keys.flatMap((set) => Object.values(set)) as never },
      features: {
        clientCredentials: { enabled: true },
        devInteractions: { enabled: false },
        resourceIndicators: {
          enabled: true,
          defaultResource: () => RESOURCE,
          useGrantedResource: () => true,
          getResourceServerInfo: (_ctx: unknown, _resource: string, client: { clientId: string }) => ({
            scope: 'api',
            audience: RESOURCE,
            accessTokenFormat: 'jwt',
            accessTokenTTL: 600,
            jwt: { sign: { alg: clients.get(client.clientId)?.alg ?? 'ES256' } },
          }),
        },
      },
      extraTokenClaims: (_ctx: unknown, token: { clientId?: string }) => clients.get(token.clientId ?? '')?.claims,
    } as never);
    handler = provider.callback();
  }
  build();

  const dispatcher = new Agent({ connect: { ca: tls.caPem } });
  t.after(async () => {
    await dispatcher.close();
    server.closeAllConnections();
    await new Promise((resolve) => server.close(resolve));
  });

  return {
    issuer,
    jwksUrl: `${issuer}/jwks`,
    tls,
    jwksRequests: () => jwksRequests,
    async token(caller) {
      if (!clients.has(caller.clientId)) {
        clients.set(caller.clientId, caller);
        build();
      }
      const res = await request(`${issuer}/token`, {
        method: 'POST',
        dispatcher,
        headers: {
          'content-type': 'application/x-www-form-urlencoded',
          authorization: `Basic ${Buffer.from(`${caller.clientId}:${caller.clientId}-secret-0123456789`).toString('base64')}`,
        },
        body: new URLSearchParams({ grant_type: 'client_credentials', scope: 'api', resource: RESOURCE }).toString(),
      });
      const body = (await res.body.json()) as { access_token?: string; error_description?: string };
      if (res.statusCode !== 200 || body.access_token === undefined) throw new Error(`token request failed: ${res.statusCode} ${JSON.stringify(body)}`);
      return body.access_token;
    },
    rotate() {
      const set = newKeys();
      keys = [set, ...keys];
      build();
      return Object.keys(set)[0]!;
    },
    async stop() {
      server.closeAllConnections();
      await new Promise((resolve) => server.close(resolve));
    },
    privateJwk(kid) {
      for (const set of keys) if (set[kid]) return set[kid];
      throw new Error(`no key ${kid}`);
    },
  };
}

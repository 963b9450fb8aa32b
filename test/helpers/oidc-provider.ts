/**
 * A real OpenID provider for the tests: panva's oidc-provider (a certified implementation) on
 * https://127.0.0.1:<port>, with its own signing keys, issuing JWT access tokens through the
 * client credentials grant (features.resourceIndicators with accessTokenFormat 'jwt'). Each
 * client stands for one caller: the claims its tokens carry, and the algorithm they are signed
 * with, are the test's. The JWKS requests are counted; rotate() swaps in a provider with a new
 * key first (the old one still published), stop() closes it as an outage would.
 *
 * For the console's sign-in (authorization code with PKCE), consoleClient() registers a public
 * client with its redirect URI: people sign in on the provider's own login page (oidc-provider's
 * development interactions: any password), as the account named in `accounts`, whose claims its
 * access tokens carry; the grant is given without a consent page, as to a first-party
 * application, and refresh tokens are issued. end_session_endpoint ends the session.
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

/** A person who signs in on the provider's login page: the login typed there is the account id. */
export interface OidcAccount {
  /** Claims added to the access tokens issued to the console for this account (e-mail, organization...). */
  readonly claims: Record<string, unknown>;
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
  /**
   * Registers the console as a public client (no secret, PKCE required) whose redirect URI and
   * post-logout redirect URI are `redirectUri`; its access tokens live `accessTokenTtlSeconds`.
   */
  consoleClient(options: { clientId: string; redirectUri: string; accessTokenTtlSeconds: number }): void;
  /** Who may sign in on the login page: login -> the claims of their tokens. */
  readonly accounts: Map<string, OidcAccount>;
  /** Token requests by grant type so far (authorization_code, refresh_token, client_credentials). */
  tokenRequests(): Record<string, number>;
  /**
   * Registers a confidential client for the client credentials grant with a secret the test
   * chooses (what a relay is given to fetch tokens), whose access tokens (JWTs for RESOURCE)
   * live `accessTokenTtlSeconds`.
   */
  serviceClient(options: { clientId: string; secret: string; accessTokenTtlSeconds: number; authMethod?: 'client_secret_basic' | 'client_secret_post' }): void;
  /** The server listens again on its port after stop() (the token service is back). */
  restart(): Promise<void>;
  /** The provider's public keys, as its JWKS serves them (for a receiver that verifies its tokens). */
  publicJwks(): { keys: Record<string, unknown>[] };
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
  const tokenRequests: Record<string, number> = {};
  let handler: ReturnType<Provider['callback']> | null = null;
  const server: Server = createServer({ cert: tls.certPem, key: tls.keyPem }, (req, res) => {
    if (req.url?.startsWith('/jwks')) jwksRequests += 1;
    if (req.url?.startsWith('/token') && req.method === 'POST') {
      const chunks: Buffer[] = [];
      req.on('data', (chunk: Buffer) => chunks.push(chunk));
      req.on('end', () => {
        const grant = new URLSearchParams(Buffer.concat(chunks).toString('utf8')).get('grant_type') ?? 'none';
        tokenRequests[grant] = (tokenRequests[grant] ?? 0) + 1;
      });
    }
    handler!(req, res);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const issuer = `https://127.0.0.1:${(server.address() as AddressInfo).port}`;
  const clients = new Map<string, OidcCaller>();
  const accounts = new Map<string, OidcAccount>();
  let consoleClient: { clientId: string; redirectUri: string; accessTokenTtlSeconds: number } | null = null;
  const serviceClients = new Map<string, { clientId: string; secret: string; accessTokenTtlSeconds: number; authMethod?: 'client_secret_basic' | 'client_secret_post' }>();
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
    const console_ = consoleClient;
    const publicClients =
      console_ === null
        ? []
        : [
            {
              client_id: console_.clientId,
              token_endpoint_auth_method: 'none',
              grant_types: ['authorization_code', 'refresh_token'],
              response_types: ['code'],
              redirect_uris: [console_.redirectUri],
              post_logout_redirect_uris: [console_.redirectUri],
            },
          ];
    const provider = new Provider(issuer, {
      clients: [
        ...[...clients.values()].map((c) => ({ client_id: c.clientId, client_secret: `${c.clientId}-secret-0123456789`, grant_types: ['client_credentials'], redirect_uris: [], response_types: [] })),
        ...publicClients,
        ...[...serviceClients.values()].map((c) => ({
          client_id: c.clientId,
          client_secret: c.secret,
          token_endpoint_auth_method: c.authMethod ?? 'client_secret_basic',
          grant_types: ['client_credentials'],
          redirect_uris: [],
          response_types: [],
        })),
      ],
      jwks: { keys: keys.flatMap((set) => Object.values(set)) as never },
      cookies: { keys: ['test-cookie-key-0123456789abcdef'] },
      // The login page: any password; the login is the account id.
      findAccount: (_ctx: unknown, id: string) => ({ accountId: id, claims: () => ({ sub: id, email: id }) }),
      // A first-party application: the grant is given without a consent page.
      loadExistingGrant: async (ctx: any) => {
        const grantId = ctx.oidc.result?.consent?.grantId ?? ctx.oidc.session.grantIdFor(ctx.oidc.client.clientId);
        if (grantId) return ctx.oidc.provider.Grant.find(grantId);
        const grant = new ctx.oidc.provider.Grant({ clientId: ctx.oidc.client.clientId, accountId: ctx.oidc.session.accountId });
        grant.addOIDCScope('openid email profile offline_access');
        grant.addResourceScope(RESOURCE, 'api');
        await grant.save();
        return grant;
      },
      issueRefreshToken: async (_ctx: unknown, client: { grantTypeAllowed(type: string): boolean }) => client.grantTypeAllowed('refresh_token'),
      // As the default, without its notice: a public client may call from its redirect URIs' origins.
      clientBasedCORS: (_ctx: unknown, origin: string, client: { clientAuthMethod: string; redirectUris: string[] }) =>
        client.clientAuthMethod === 'none' && client.redirectUris.some((uri) => new URL(uri).origin === origin),
      features: {
        clientCredentials: { enabled: true },
        devInteractions: { enabled: true },
        rpInitiatedLogout: {
          enabled: true,
          logoutSource: (ctx: any, form: string) => {
            ctx.body = `<!DOCTYPE html><html><head><meta charset="utf-8"><title>Sign out</title></head><body><h1>Sign out of the test provider?</h1>${form}<button type="submit" form="op.logoutForm" value="yes" name="logout">Yes, sign me out</button></body></html>`;
          },
        },
        resourceIndicators: {
          enabled: true,
          defaultResource: () => RESOURCE,
          useGrantedResource: () => true,
          getResourceServerInfo: (_ctx: unknown, _resource: string, client: { clientId: string }) => ({
            scope: 'api',
            audience: RESOURCE,
            accessTokenFormat: 'jwt',
            accessTokenTTL: client.clientId === console_?.clientId ? console_.accessTokenTtlSeconds : (serviceClients.get(client.clientId)?.accessTokenTtlSeconds ?? 600),
            jwt: { sign: { alg: clients.get(client.clientId)?.alg ?? 'ES256' } },
          }),
        },
      },
      extraTokenClaims: (_ctx: unknown, token: { clientId?: string; accountId?: string }) =>
        token.accountId !== undefined ? accounts.get(token.accountId)?.claims : clients.get(token.clientId ?? '')?.claims,
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
    consoleClient(options) {
      consoleClient = options;
      build();
    },
    accounts,
    tokenRequests: () => ({ ...tokenRequests }),
    serviceClient(options) {
      serviceClients.set(options.clientId, options);
      build();
    },
    async restart() {
      await new Promise<void>((resolve) => server.listen(Number(new URL(issuer).port), '127.0.0.1', resolve));
    },
    publicJwks() {
      return {
        keys: keys.flatMap((set) => Object.values(set)).map((jwk) => {
          const { d, p, q, dp, dq, qi, ...pub } = jwk as Record<string, unknown>;
          return pub;
        }),
      };
    },
    privateJwk(kid) {
      for (const set of keys) if (set[kid]) return set[kid];
      throw new Error(`no key ${kid}`);
    },
  };
}

import { readFileSync } from 'node:fs';
import { get } from 'node:https';
import { isIP } from 'node:net';
import { rootCertificates } from 'node:tls';
import { ErrorCode, HookrelayError } from '../domain/errors.ts';
import { createNetworkGuard } from './network-guard.ts';

/** A JSON document of the identity provider, and how long it says it may be cached (ms), or null. */
export interface ProviderDocument {
  readonly body: unknown;
  readonly maxAgeMs: number | null;
}

export type ProviderFetch = (url: string) => Promise<ProviderDocument>;

/** Largest discovery document or JWKS read; a provider's is a few KiB. */
const MAX_DOCUMENT_BYTES = 1024 * 1024;
const ALLOW_HINT = 'allow its network with auth.provider.allowNetworks if the identity provider is meant to be internal';

function maxAge(cacheControl: string | undefined): number | null {
  const match = /(?:^|,)\s*max-age=(\d+)/i.exec(cacheControl ?? '');
  return match ? Number(match[1]) * 1000 : null;
}

function readCaFile(path: string): string {
  try {
    return readFileSync(path, 'utf8');
  } catch (err) {
    throw new HookrelayError(ErrorCode.config, `cannot read auth.provider.caFile ${path}: ${(err as NodeJS.ErrnoException).code ?? String(err)}`);
  }
}

/**
 * GETs the provider's discovery document and JWKS as delivery reaches a webhook: HTTPS only,
 * the name resolved and every address checked against the address rules (internal networks
 * refused unless auth.provider.allowNetworks allows them), the connection pinned to a checked
 * address, extra CAs from auth.provider.caFile, one deadline (`timeoutMs`), no redirects.
 * Errors are HookrelayErrors whose message is one line naming the URL.
 */
export function createProviderFetch(options: { caFile: string | null; allowNetworks: readonly string[]; timeoutMs: number }): ProviderFetch {
  const guard = createNetworkGuard(options.allowNetworks, ALLOW_HINT);
  const ca = options.caFile === null ? undefined : [...rootCertificates, readCaFile(options.caFile)];
  const fail = (url: string, why: string) => new HookrelayError(ErrorCode.config, `the identity provider at ${url} cannot be read: ${why}`);

  return (url) =>
    new Promise<ProviderDocument>((resolve, reject) => {
      const target = new URL(url);
      if (target.protocol !== 'https:') return reject(fail(url, 'only https:// is accepted'));
      const host = target.hostname.replace(/^\[(.*)\]$/, '$1');
      if (isIP(host) !== 0) {
        const refusal = guard.refusal(host);
        if (refusal !== null) return reject(fail(url, refusal));
      }
      const request = get(target, { lookup: guard.lookup as never, ...(ca ? { ca } : {}), timeout: options.timeoutMs, headers: { accept: 'application/json' } }, (response) => {
        if (response.statusCode !== 200) {
          response.resume();
          return reject(fail(url, `it answered HTTP ${response.statusCode}`));
        }
        const chunks: Buffer[] = [];
        let size = 0;
        response.on('data', (chunk: Buffer) => {
          size += chunk.length;
          if (size > MAX_DOCUMENT_BYTES) request.destroy(new Error(`the document is larger than ${MAX_DOCUMENT_BYTES} bytes`));
          else chunks.push(chunk);
        });
        response.on('end', () => {
          try {
            resolve({ body: JSON.parse(Buffer.concat(chunks).toString('utf8')), maxAgeMs: maxAge(response.headers['cache-control']) });
          } catch {
            reject(fail(url, 'its answer is not JSON'));
          }
        });
        response.on('error', (err) => reject(fail(url, err.message)));
      });
      const deadline = setTimeout(() => request.destroy(new Error(`no answer within ${options.timeoutMs} ms`)), options.timeoutMs);
      request.on('close', () => clearTimeout(deadline));
      request.on('error', (err: NodeJS.ErrnoException) => reject(fail(url, err.code && !err.message.includes(err.code) ? `${err.message} (${err.code})` : err.message)));
    });
}

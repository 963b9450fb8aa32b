import type { Context, Next } from 'koa';
import { ErrorCode, excerpt } from '../domain/errors.ts';
import { problem } from './problem.ts';

/** API versions this daemon serves, oldest first. All are wire-compatible in this release. */
export const SUPPORTED_VERSIONS = ['v1.0', 'v1.1', 'v1.2'] as const;
export type ApiVersion = (typeof SUPPORTED_VERSIONS)[number];
export const LATEST_VERSION: ApiVersion = 'v1.2';

/**
 * Every accepted spelling of the `Version` header and the version it selects: `v1.2`, `1.2`,
 * `v1.1`, `1.1`, `v1.0`, `1.0`, and the major-only `v1`/`1` (= v1.0). Exact matches only, so the
 * list in the 400 answer is the whole truth (no `v01`, `1.00` or `V1.2`).
 */
const ACCEPTED_SPELLINGS: ReadonlyMap<string, ApiVersion> = new Map<string, ApiVersion>([
  ...SUPPORTED_VERSIONS.flatMap((v): Array<[string, ApiVersion]> => [
    [v, v],
    [v.slice(1), v],
  ]),
  ['v1', 'v1.0'],
  ['1', 'v1.0'],
]);

/** Maps a `Version` header to a supported version; absent or blank means the newest. Null for anything else. */
export function negotiateVersion(header: string | undefined): ApiVersion | null {
  if (header === undefined || header.trim() === '') return LATEST_VERSION;
  return ACCEPTED_SPELLINGS.get(header.trim()) ?? null;
}

export async function versionMiddleware(ctx: Context, next: Next): Promise<void> {
  const version = negotiateVersion(ctx.get('Version') || undefined);
  if (version === null) {
    throw problem(
      ErrorCode.unsupportedVersion,
      `Version ${excerpt(ctx.get('Version'))} is not supported; send one of ${[...ACCEPTED_SPELLINGS.keys()].join(', ')}, or omit the header for ${LATEST_VERSION}`,
      { supported_versions: [...SUPPORTED_VERSIONS] },
    );
  }
  ctx.state.apiVersion = version;
  ctx.set('Version', version);
  await next();
}

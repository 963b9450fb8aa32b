import type { Context, Next } from 'koa';
import { ErrorCode } from '../domain/errors.ts';
import { problem } from './problem.ts';

/** API versions this daemon serves, oldest first. All are wire-compatible in this release. */
export const SUPPORTED_VERSIONS = ['v1.0', 'v1.1', 'v1.2'] as const;
export type ApiVersion = (typeof SUPPORTED_VERSIONS)[number];
export const LATEST_VERSION: ApiVersion = 'v1.2';

/**
 * Maps a `Version` header to a supported version: `v1.2`, `1.2`, `v1.1`, `1.1`, `v1.0`, `1.0`,
 * and the major-only `v1`/`1` (= v1.0). An absent or blank header means the newest version.
 * Returns null for anything else.
 */
export function negotiateVersion(header: string | undefined): ApiVersion | null {
  if (header === undefined || header.trim() === '') return LATEST_VERSION;
  const match = /^v?(\d+)(?:\.(\d+))?$/i.exec(header.trim());
  if (!match) return null;
  const candidate = `v${Number(match[1])}.${Number(match[2] ?? 0)}`;
  return (SUPPORTED_VERSIONS as readonly string[]).includes(candidate) ? (candidate as ApiVersion) : null;
}

export async function versionMiddleware(ctx: Context, next: Next): Promise<void> {
  const version = negotiateVersion(ctx.get('Version') || undefined);
  if (version === null) {
    const accepted = SUPPORTED_VERSIONS.flatMap((v) => [v, v.slice(1)]).concat(['v1', '1']);
    throw problem(
      ErrorCode.unsupportedVersion,
      `Version "${ctx.get('Version').slice(0, 40)}" is not supported; send one of ${accepted.join(', ')}, or omit the header for ${LATEST_VERSION}`,
      { supported_versions: [...SUPPORTED_VERSIONS] },
    );
  }
  ctx.state.apiVersion = version;
  ctx.set('Version', version);
  await next();
}

import { randomBytes } from 'node:crypto';
import { chmodSync, linkSync, readFileSync, statSync, unlinkSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import type { Config } from '../config/load.ts';
import { ErrorCode, HookrelayError } from '../domain/errors.ts';
import type { Logger } from '../log.ts';
import { ensureDirectory, pathError } from '../store/directories.ts';

/** Key material for the one pinned JWT algorithm. */
export interface AuthKeys {
  readonly algorithm: Config['auth']['algorithm'];
  /** What verifies a token: the HS256 secret or a PEM public key. */
  readonly verifyKey: string;
  /** What signs a token (`hookrelay token issue`): the HS256 secret, a PEM private key, or null. */
  readonly signKey: string | null;
}

export const GENERATED_SECRET_FILE = 'jwt-secret';

function readKeyFile(path: string, what: string): string {
  try {
    return readFileSync(path, 'utf8').trim();
  } catch (err) {
    throw new HookrelayError(ErrorCode.keyUnavailable, `cannot read ${what} ${path}: ${(err as NodeJS.ErrnoException).code ?? String(err)}`);
  }
}

/**
 * Reads the state directory's generated HS256 secret, creating it on first use. Creation is
 * atomic (write a private temp file, then hard-link it into place), so the daemon and a CLI
 * started at the same moment agree on one secret.
 */
function generatedSecret(stateDir: string, log: Logger, create: boolean): string {
  const path = join(stateDir, GENERATED_SECRET_FILE);
  if (create) ensureDirectory(stateDir, 0o700, 'the state directory');
  try {
    const mode = statSync(path).mode & 0o777;
    if ((mode & 0o077) !== 0) {
      log.warn({ path, mode: mode.toString(8) }, 'JWT secret file is readable by other users; run: chmod 600 on it');
    }
    return readKeyFile(path, 'JWT secret file');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
    if (!create) {
      throw new HookrelayError(
        ErrorCode.keyUnavailable,
        `there is no JWT secret at ${resolve(path)}: the daemon generates it at its first start (or \`hookrelay migrate\`); point at the daemon's install with --state-dir or --config, or set auth.secret or auth.secretFile`,
      );
    }
  }
  const temp = `${path}.${process.pid}.${randomBytes(4).toString('hex')}.tmp`;
  try {
    writeFileSync(temp, randomBytes(32).toString('base64url') + '\n', { mode: 0o600, flag: 'wx' });
  } catch (err) {
    throw pathError(err, 'the JWT secret file', path);
  }
  chmodSync(temp, 0o600);
  try {
    linkSync(temp, path);
    log.info({ path }, 'generated a new HS256 JWT secret (32 random bytes) in the state directory');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
  } finally {
    unlinkSync(temp);
  }
  return readKeyFile(path, 'JWT secret file');
}

/** The keys come from the secret generated in the state directory (HS256, neither auth.secret nor auth.secretFile set). */
export function usesGeneratedSecret(auth: Config['auth']): boolean {
  return auth.algorithm === 'HS256' && auth.secret === null && auth.secretFile === null;
}

/**
 * Resolves the JWT keys: configured secret, secret file, or a generated secret in the state
 * directory. Only what creates an install (the daemon, `migrate`) generates that secret
 * (`create`, the default); a CLI command run elsewhere must not make a second one, whose tokens
 * the daemon would refuse.
 */
export function loadAuthKeys(config: Config, log: Logger, options: { create?: boolean } = {}): AuthKeys {
  const { auth } = config;
  if (auth.algorithm === 'HS256') {
    let secret: string;
    if (auth.secret !== null) secret = auth.secret;
    else if (auth.secretFile !== null) secret = readKeyFile(auth.secretFile, 'JWT secret file');
    else secret = generatedSecret(config.stateDir, log, options.create ?? true);
    if (Buffer.byteLength(secret) < 32) {
      throw new HookrelayError(ErrorCode.config, 'the HS256 JWT secret must be at least 32 bytes long; generate one with: openssl rand -base64 32');
    }
    return { algorithm: auth.algorithm, verifyKey: secret, signKey: secret };
  }
  const publicKey = readKeyFile(auth.publicKeyFile!, 'JWT public key file');
  const privateKey = auth.privateKeyFile === null ? null : readKeyFile(auth.privateKeyFile, 'JWT private key file');
  return { algorithm: auth.algorithm, verifyKey: publicKey, signKey: privateKey };
}

/** Generates the state directory's JWT secret if the configuration uses it and it does not exist yet (`migrate`). */
export function ensureGeneratedSecret(config: Config, log: Logger): void {
  if (usesGeneratedSecret(config.auth)) generatedSecret(config.stateDir, log, true);
}

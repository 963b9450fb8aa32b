/**
 * The key-encryption key (KEK) that seals the webhooks' credentials for their receivers (a
 * client certificate's private key, an OAuth2 client secret) in the database: 32 random bytes
 * in a file outside it, delivery.credentialKeyFile or <stateDir>/credential-key, generated as
 * the JWT secret is (atomically, mode 0600) by what creates an install, the daemon's start and
 * `hookrelay migrate`, never by another command (one run as another user, root by sudo, would
 * make a file the daemon cannot read). A copy of the database without this file does not hand
 * the credentials over; a backup must hold both (docs/operations.md, "The credential key").
 */
import { randomBytes } from 'node:crypto';
import { chmodSync, linkSync, readFileSync, statSync, unlinkSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import type { Config } from '../config/load.ts';
import { ErrorCode, HookrelayError } from '../domain/errors.ts';
import { KEK_BYTES, kekId, SealError, seal, unseal } from '../domain/sealing.ts';
import type { Logger } from '../log.ts';
import { ensureDirectory, pathError } from '../store/directories.ts';

export const GENERATED_CREDENTIAL_KEY_FILE = 'credential-key';

type KeyConfig = Pick<Config, 'stateDir'> & { readonly delivery: Pick<Config['delivery'], 'credentialKeyFile'> };

/** Where the KEK is: the file configured, or the one generated in the state directory. */
export function credentialKeyPath(config: KeyConfig): { path: string; generated: boolean } {
  const configured = config.delivery.credentialKeyFile;
  return configured === null ? { path: resolve(join(config.stateDir, GENERATED_CREDENTIAL_KEY_FILE)), generated: true } : { path: configured, generated: false };
}

function unavailable(message: string): HookrelayError {
  return new HookrelayError(ErrorCode.credentialKeyUnavailable, message);
}

function readKey(path: string, log: Logger | null): Buffer {
  let text: string;
  try {
    const mode = statSync(path).mode & 0o777;
    if ((mode & 0o077) !== 0) log?.warn({ path, mode: mode.toString(8) }, 'the credential key file is readable by other users; run: chmod 600 on it');
    text = readFileSync(path, 'utf8').trim();
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code === 'ENOENT') throw Object.assign(unavailable(`there is no credential key at ${path}`), { missing: true });
    throw unavailable(`cannot read the credential key file ${path}: ${code ?? String(err)}`);
  }
  const key = Buffer.from(text, 'base64url');
  if (key.length !== KEK_BYTES || key.toString('base64url') !== text.replace(/=+$/, '')) {
    throw unavailable(`the credential key file ${path} must hold ${KEK_BYTES} random bytes in base64url (openssl rand 32 | basenc --base64url makes one)`);
  }
  return key;
}

/** Creates the generated key file if it is missing (atomically: a daemon and `migrate` started together agree on one). */
function generate(path: string, stateDir: string, log: Logger): void {
  ensureDirectory(stateDir, 0o700, 'the state directory');
  const temp = `${path}.${process.pid}.${randomBytes(4).toString('hex')}.tmp`;
  try {
    writeFileSync(temp, randomBytes(KEK_BYTES).toString('base64url') + '\n', { mode: 0o600, flag: 'wx' });
  } catch (err) {
    throw pathError(err, 'the credential key file', path);
  }
  chmodSync(temp, 0o600);
  try {
    linkSync(temp, path);
    log.info({ path }, 'generated the credential key (32 random bytes) that seals webhook credentials; back it up with the database');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
  } finally {
    unlinkSync(temp);
  }
}

/**
 * Generates <stateDir>/credential-key if the configuration uses it and it does not exist yet
 * (the daemon's start, `migrate`), and checks that the key can be read: a daemon that could not
 * open its webhooks' credentials stops before it serves.
 */
export function ensureCredentialKey(config: KeyConfig, log: Logger): void {
  const { path, generated } = credentialKeyPath(config);
  try {
    readKey(path, log);
  } catch (err) {
    if (!generated || !(err as { missing?: boolean }).missing) throw err;
    generate(path, config.stateDir, log);
    readKey(path, log);
  }
}

/** Seals and opens the webhooks' credentials with the KEK, read from its file on first use. */
export interface CredentialVault {
  /** The KEK's public id (its SHA-256, first 8 bytes): which key sealed what, in errors and `status`. */
  keyId(): string;
  seal(context: string, plaintext: string): string;
  /** Opens a sealed value; `credential_key_unavailable` saying why when it does not open. */
  open(context: string, sealed: string, what: string): string;
}

export function createCredentialVault(config: KeyConfig, log: Logger | null = null): CredentialVault {
  const { path, generated } = credentialKeyPath(config);
  let key: Buffer | null = null;
  const kek = (): Buffer => {
    if (key !== null) return key;
    try {
      key = readKey(path, log);
    } catch (err) {
      if ((err as { missing?: boolean }).missing) {
        throw unavailable(
          generated
            ? `there is no credential key at ${path}: the daemon generates it at its start (or \`hookrelay migrate\`); point at the daemon's install with --state-dir or --config`
            : `there is no credential key at ${path} (delivery.credentialKeyFile)`,
        );
      }
      throw err;
    }
    return key;
  };
  return {
    keyId: () => kekId(kek()),
    seal: (context, plaintext) => seal(kek(), context, plaintext),
    open(context, sealed, what) {
      try {
        return unseal(kek(), context, sealed);
      } catch (err) {
        if (!(err instanceof SealError)) throw err;
        const why =
          err.reason === 'wrong_key'
            ? `it was sealed with another credential key (${err.sealedWith}; this instance's ${path} is ${kekId(kek())}): every instance sharing the database needs the same key file, restored with the database from the same backup`
            : 'the sealed value is damaged';
        throw unavailable(`the ${what} cannot be opened: ${why}`);
      }
    },
  };
}

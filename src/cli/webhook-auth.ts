/**
 * `hookrelay webhook set`'s options for the receiver's authentication: the client certificate
 * files (mutual TLS) and the OAuth2 client credentials, read into what register_webhook takes
 * (`client_certificate`, `oauth2`). The service checks them as it checks the API's; here only
 * what the command line itself gets wrong: a file that cannot be read, flags that go together.
 * A secret is read from a file, never from the command line (which other users can see in ps).
 */
import { readFileSync } from 'node:fs';
import { splitPem } from '../domain/client-certificate.ts';
import { UsageError } from './shared.ts';

export interface ReceiverAuthOptions {
  /** A file, or false for --no-client-cert (true: neither given, commander's default of a negatable option). */
  clientCert?: string | boolean;
  clientKey?: string;
  /** A URL, or false for --no-oauth2. */
  oauth2?: boolean;
  oauth2TokenUrl?: string;
  oauth2ClientId?: string;
  oauth2ClientSecretFile?: string;
  oauth2Scope?: string;
  oauth2Audience?: string;
  oauth2ClientAuth?: string;
}

function readText(flag: string, file: string): string {
  try {
    return readFileSync(file, 'utf8');
  } catch (err) {
    throw new UsageError(`cannot read ${flag} ${file}: ${(err as NodeJS.ErrnoException).code ?? String(err)}`);
  }
}

/** The certificate part: kept (absent), removed (null) or given. */
function certificateOption(options: ReceiverAuthOptions): { client_certificate?: { certificate: string; private_key: string } | null } {
  if (options.clientCert === false) {
    if (options.clientKey !== undefined) throw new UsageError('--no-client-cert removes the client certificate: leave --client-key out');
    return { client_certificate: null };
  }
  if (typeof options.clientCert !== 'string') {
    if (options.clientKey !== undefined) throw new UsageError('--client-key goes with --client-cert FILE: give the certificate too');
    return {};
  }
  const certText = readText('--client-cert', options.clientCert);
  if (options.clientKey !== undefined) return { client_certificate: { certificate: certText, private_key: readText('--client-key', options.clientKey) } };
  const split = splitPem(certText);
  if (split.privateKey === null) throw new UsageError(`--client-cert ${options.clientCert} holds no private key: give it with --client-key FILE`);
  return { client_certificate: { certificate: split.certificate, private_key: split.privateKey } };
}

/** The OAuth2 part: kept (no flag), removed (--no-oauth2) or given (the URL, the id and the secret's file together). */
function oauth2Option(options: ReceiverAuthOptions): { oauth2?: Record<string, string> | null } {
  const given = (['oauth2TokenUrl', 'oauth2ClientId', 'oauth2ClientSecretFile', 'oauth2Scope', 'oauth2Audience', 'oauth2ClientAuth'] as const).filter((k) => options[k] !== undefined);
  if (options.oauth2 === false) {
    if (given.length > 0) throw new UsageError('--no-oauth2 removes the OAuth2 client credentials: leave the other --oauth2-* options out');
    return { oauth2: null };
  }
  if (given.length === 0) return {};
  const missing = [
    ['--oauth2-token-url', options.oauth2TokenUrl],
    ['--oauth2-client-id', options.oauth2ClientId],
    ['--oauth2-client-secret-file', options.oauth2ClientSecretFile],
  ].filter(([, v]) => v === undefined).map(([flag]) => flag);
  if (missing.length > 0) throw new UsageError(`OAuth2 needs ${missing.join(', ')} too (the token URL, the client id and the file of the client secret go together)`);
  // One line: a trailing newline (echo secret > file) is not part of the secret.
  const secret = readText('--oauth2-client-secret-file', options.oauth2ClientSecretFile!).replace(/\r?\n$/, '');
  return {
    oauth2: {
      token_url: options.oauth2TokenUrl!,
      client_id: options.oauth2ClientId!,
      client_secret: secret,
      ...(options.oauth2Scope === undefined ? {} : { scope: options.oauth2Scope }),
      ...(options.oauth2Audience === undefined ? {} : { audience: options.oauth2Audience }),
      ...(options.oauth2ClientAuth === undefined ? {} : { client_auth: options.oauth2ClientAuth }),
    },
  };
}

/** What `webhook set`'s options say of the receiver's authentication, as register_webhook takes it. */
export function receiverAuthOptions(options: ReceiverAuthOptions): { client_certificate?: unknown; oauth2?: unknown } {
  return { ...certificateOption(options), ...oauth2Option(options) };
}

/**
 * Client certificates for the mutual TLS tests, made with the openssl CLI: a client CA (which
 * the receivers trust for clients), client certificates it signs (valid now, expired, not yet
 * valid, of several key types, for servers only), and a receiver that requires one of them.
 */
import { execFileSync } from 'node:child_process';
import { randomBytes, X509Certificate } from 'node:crypto';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { TestContext } from 'node:test';
import { tempDir } from './helpers.ts';
import { startReceiver, type Receiver, type Responder, type TestTls } from './receivers.ts';

export interface ClientCa {
  readonly dir: string;
  readonly caPem: string;
  /** A client certificate signed by this CA (openssl `ca`, so that any validity can be given). */
  issue(options?: ClientCertOptions): ClientCert;
}

export interface ClientCertOptions {
  readonly cn?: string;
  /** `ec` (P-256, the default), `ec384`, `rsa2048`, `rsa1024`, `ed25519`. */
  readonly key?: 'ec' | 'ec384' | 'rsa2048' | 'rsa1024' | 'ed25519';
  /** openssl dates (YYYYMMDDHHMMSSZ); default: from an hour ago, for two days. */
  readonly startDate?: string;
  readonly endDate?: string;
  /** extendedKeyUsage; default clientAuth. */
  readonly usage?: string;
}

export interface ClientCert {
  readonly certPem: string;
  readonly keyPem: string;
  readonly certFile: string;
  readonly keyFile: string;
  /** SHA-256 fingerprint, as X509Certificate gives it (AA:BB:...). */
  readonly fingerprint: string;
}

const KEYS: Record<NonNullable<ClientCertOptions['key']>, string[]> = {
  ec: ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-256'],
  ec384: ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-384'],
  rsa2048: ['-newkey', 'rsa:2048'],
  rsa1024: ['-newkey', 'rsa:1024'],
  ed25519: ['-newkey', 'ed25519'],
};

/** An openssl date (YYYYMMDDHHMMSSZ) of epoch ms. */
export function opensslDate(ms: number): string {
  return new Date(ms).toISOString().replace(/[-:T]/g, '').replace(/\.\d+Z$/, 'Z');
}

/** A client CA in a temp directory (removed when the test ends). */
export function createClientCa(t: TestContext): ClientCa {
  const dir = tempDir(t, 'hookrelay-client-ca-');
  const file = (f: string) => join(dir, f);
  const openssl = (...args: string[]) => execFileSync('openssl', args, { cwd: dir, stdio: ['ignore', 'ignore', 'pipe'] });
  openssl('req', '-x509', ...KEYS.ec, '-nodes', '-keyout', file('ca.key'), '-out', file('ca.pem'), '-days', '3', '-subj', '/CN=hookrelay test client CA',
    '-addext', 'basicConstraints=critical,CA:TRUE', '-addext', 'keyUsage=critical,keyCertSign,cRLSign');
  writeFileSync(file('index.txt'), '');
  writeFileSync(file('ca.cnf'), ['[ca]', 'default_ca=d', '[d]', 'database=index.txt', 'new_certs_dir=.', 'default_md=sha256', 'policy=p', 'serial=serial', 'unique_subject=no', '[p]', 'commonName=supplied', ''].join('\n'));
  let n = 0;
  return {
    dir,
    caPem: readFileSync(file('ca.pem'), 'utf8'),
    issue(options = {}) {
      n += 1;
      const name = `client${n}`;
      openssl('req', ...KEYS[options.key ?? 'ec'], '-nodes', '-keyout', file(`${name}.key`), '-out', file(`${name}.csr`), '-subj', `/CN=${options.cn ?? `hookrelay client ${n}`}`);
      writeFileSync(file(`${name}.ext`), ['basicConstraints=critical,CA:FALSE', `extendedKeyUsage=${options.usage ?? 'clientAuth'}`, ''].join('\n'));
      writeFileSync(file('serial'), `${randomBytes(8).toString('hex')}\n`);
      const now = Date.now();
      openssl('ca', '-batch', '-notext', '-config', file('ca.cnf'), '-cert', file('ca.pem'), '-keyfile', file('ca.key'), '-in', file(`${name}.csr`), '-out', file(`${name}.pem`),
        '-extfile', file(`${name}.ext`), '-startdate', options.startDate ?? opensslDate(now - 3_600_000), '-enddate', options.endDate ?? opensslDate(now + 2 * 86_400_000));
      const certPem = readFileSync(file(`${name}.pem`), 'utf8');
      return { certPem, keyPem: readFileSync(file(`${name}.key`), 'utf8'), certFile: file(`${name}.pem`), keyFile: file(`${name}.key`), fingerprint: new X509Certificate(certPem).fingerprint256 };
    },
  };
}

/** An HTTPS receiver on 127.0.0.1 (the server certificate of `tls`) that requires a client certificate from `ca`: a connection without one is refused in the handshake. */
export function startMtlsReceiver(t: TestContext, tls: TestTls, ca: ClientCa, responder?: Responder): Promise<Receiver> {
  return startReceiver(t, tls, responder, { requestCert: true, rejectUnauthorized: true, ca: ca.caPem });
}

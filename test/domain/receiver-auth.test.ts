/**
 * The pure parts of receiver authentication (issue 43): a client certificate's checks
 * (src/domain/client-certificate.ts), the sealing of credentials (src/domain/sealing.ts) and
 * OAuth2's settings and token request (src/domain/oauth2-settings.ts). Certificates are real,
 * made by openssl (test/helpers/client-certs.ts).
 */
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { join } from 'node:path';
import { describe, test } from 'node:test';
import { checkClientCertificate, materialOf, materialText, parseStoredClientCertificate, splitPem, storedClientCertificate } from '../../src/domain/client-certificate.ts';
import { checkOAuth2, parseStoredOAuth2, parseTokenAnswer, refreshMarginMs, storedOAuth2, tokenErrorCode, tokenRequest } from '../../src/domain/oauth2-settings.ts';
import { kekId, SealError, seal, sealContext, unseal } from '../../src/domain/sealing.ts';
import { createClientCa, opensslDate } from '../helpers/client-certs.ts';

const NOW = () => Date.now();

describe('client certificate checks', () => {
  test('a valid certificate of each accepted key type passes, with what may be shown and a normalised key', (t) => {
    const ca = createClientCa(t);
    for (const [key, type] of [['ec', 'EC P-256'], ['ec384', 'EC P-384'], ['rsa2048', 'RSA 2048'], ['ed25519', 'Ed25519']] as const) {
      const c = ca.issue({ key, cn: `client ${key}` });
      const checked = checkClientCertificate(c.certPem, c.keyPem, NOW());
      assert.ok(checked.ok, `${key}: ${JSON.stringify(!checked.ok && checked.problems)}`);
      assert.equal(checked.value.info.keyType, type);
      assert.equal(checked.value.info.subject, `CN=client ${key}`);
      assert.equal(checked.value.info.issuer, 'CN=hookrelay test client CA');
      assert.equal(checked.value.info.fingerprintSha256, c.fingerprint);
      assert.match(checked.value.material.privateKey, /^-----BEGIN PRIVATE KEY-----/);
      assert.ok(checked.value.info.notAfter > NOW());
    }
  });

  test('a chain: the client certificate first, then its issuer; out of order it is refused', (t) => {
    const ca = createClientCa(t);
    const c = ca.issue();
    assert.ok(checkClientCertificate(c.certPem + ca.caPem, c.keyPem, NOW()).ok);
    const reversed = checkClientCertificate(ca.caPem + c.certPem, c.keyPem, NOW());
    assert.ok(!reversed.ok);
    // The key is not the first certificate's, and the order is wrong: both said.
    assert.deepEqual(reversed.problems.map((p) => p.name).sort(), ['client_certificate.certificate', 'client_certificate.private_key']);
  });

  test('refused, each naming the field and nothing of the key: mismatch, expired, not yet valid, weak, server-only, encrypted, not PEM, a key in the certificate field, too large', (t) => {
    const ca = createClientCa(t);
    const a = ca.issue();
    const b = ca.issue();
    const reasons = (cert: string, key: string) => {
      const r = checkClientCertificate(cert, key, NOW());
      assert.ok(!r.ok, 'refused');
      for (const p of r.problems) assert.doesNotMatch(p.reason, /PRIVATE KEY-----\n[A-Za-z0-9+/]/, 'no key text quoted');
      return r.problems.map((p) => `${p.name}: ${p.reason}`).join(' | ');
    };
    assert.match(reasons(a.certPem, b.keyPem), /^client_certificate\.private_key: does not match the certificate/);
    const expired = ca.issue({ startDate: '20200101000000Z', endDate: '20210101000000Z' });
    assert.match(reasons(expired.certPem, expired.keyPem), /^client_certificate\.certificate: expired on 2021-01-01T00:00:00\.000Z/);
    const future = ca.issue({ startDate: opensslDate(NOW() + 86_400_000), endDate: opensslDate(NOW() + 3 * 86_400_000) });
    assert.match(reasons(future.certPem, future.keyPem), /^client_certificate\.certificate: is not valid before /);
    const weak = ca.issue({ key: 'rsa1024' });
    assert.match(reasons(weak.certPem, weak.keyPem), /private_key: is an RSA key of 1024 bits; at least 2048 are needed/);
    const server = ca.issue({ usage: 'serverAuth' });
    assert.match(reasons(server.certPem, server.keyPem), /certificate: is not for TLS clients/);
    const encrypted = execFileSync('openssl', ['pkcs8', '-topk8', '-v2', 'aes-256-cbc', '-passout', 'pass:secret', '-in', a.keyFile], { encoding: 'utf8' });
    assert.match(reasons(a.certPem, encrypted), /private_key: is encrypted with a passphrase/);
    assert.match(reasons('hello', a.keyPem), /certificate: must be a PEM certificate/);
    assert.match(reasons(a.certPem, 'hello'), /private_key: must be a PEM private key/);
    assert.match(reasons(a.certPem + a.keyPem, a.keyPem), /certificate: must hold only certificates .* PRIVATE KEY block/);
    assert.match(reasons(a.certPem + 'x'.repeat(33 * 1024), a.keyPem), /certificate: must be at most 32 KiB/);
    // An expired operator's certificate is taken (reported elsewhere), a mismatch is not.
    assert.ok(checkClientCertificate(expired.certPem, expired.keyPem, NOW(), undefined, { allowExpired: true }).ok);
  });

  test('stored forms: what may be shown round-trips, a damaged value reads as none; the material and a combined PEM file split', (t) => {
    const ca = createClientCa(t);
    const c = ca.issue();
    const checked = checkClientCertificate(c.certPem, c.keyPem, NOW());
    assert.ok(checked.ok);
    assert.deepEqual(parseStoredClientCertificate(storedClientCertificate(checked.value.info)), checked.value.info);
    assert.equal(parseStoredClientCertificate('{not json'), null);
    assert.equal(parseStoredClientCertificate(null), null);
    assert.deepEqual(materialOf(materialText(checked.value.material)), checked.value.material);
    const split = splitPem(`${c.certPem}\n${ca.caPem}\n${c.keyPem}`);
    assert.equal(split.privateKey?.trim(), c.keyPem.trim());
    assert.ok(checkClientCertificate(split.certificate, split.privateKey!, NOW()).ok);
  });
});

describe('sealing', () => {
  const kek = randomBytes(32);
  const context = sealContext('acme', 'client_certificate');

  test('seals and opens; every seal is different; nothing of the plaintext shows', () => {
    const a = seal(kek, context, 'the private key');
    const b = seal(kek, context, 'the private key');
    assert.notEqual(a, b);
    assert.ok(!a.includes('private'));
    assert.match(a, new RegExp(`^hrs1\\.${kekId(kek)}\\.`));
    assert.equal(unseal(kek, context, a), 'the private key');
  });

  test('another key, another place, or a changed byte: it does not open, and says which', () => {
    const sealed = seal(kek, context, 'secret');
    const other = randomBytes(32);
    assert.throws(() => unseal(other, context, sealed), (err: unknown) => err instanceof SealError && err.reason === 'wrong_key' && err.sealedWith === kekId(kek));
    assert.throws(() => unseal(kek, sealContext('globex', 'client_certificate'), sealed), (err: unknown) => err instanceof SealError && err.reason === 'damaged');
    const parts = sealed.split('.');
    parts[3] = Buffer.from('tampered').toString('base64url');
    assert.throws(() => unseal(kek, context, parts.join('.')), (err: unknown) => err instanceof SealError && err.reason === 'damaged');
    assert.throws(() => unseal(kek, context, 'plain text'), (err: unknown) => err instanceof SealError && err.reason === 'damaged');
  });
});

describe('OAuth2 settings', () => {
  test('checked: required fields, their shapes, unknown fields; the secret is never quoted', () => {
    const ok = checkOAuth2({ token_url: 'https://idp.example/token', client_id: 'hookrelay', client_secret: 's3cr3t value', scope: 'events:write  x' });
    assert.ok(!ok.ok);
    assert.deepEqual(ok.problems.map((p) => p.name), ['oauth2.scope']);
    const good = checkOAuth2({ token_url: 'https://idp.example/token', client_id: 'hookrelay', client_secret: 's3cr3t value', scope: 'events:write x', audience: 'https://api.example' });
    assert.ok(good.ok);
    assert.deepEqual(good.value.settings, { tokenUrl: 'https://idp.example/token', clientId: 'hookrelay', scope: 'events:write x', audience: 'https://api.example', clientAuth: 'client_secret_basic' });
    const bad = checkOAuth2({ token_url: 'not a url', client_secret: 'line\nbreak-SECRET', client_auth: 'private_key_jwt', extra: 1 });
    assert.ok(!bad.ok);
    assert.deepEqual(bad.problems.map((p) => p.name).sort(), ['oauth2', 'oauth2.client_auth', 'oauth2.client_id', 'oauth2.client_secret', 'oauth2.token_url']);
    assert.ok(!JSON.stringify(bad.problems).includes('SECRET'));
    assert.ok(!checkOAuth2('x').ok);
  });

  test('the token request: client_secret_basic (form-encoded, then base64) or client_secret_post; scope and audience when set', () => {
    const settings = { tokenUrl: 'https://idp.example/token', clientId: 'hook relay', scope: 'a b', audience: 'https://api', clientAuth: 'client_secret_basic', revision: 'r1' } as const;
    const basic = tokenRequest(settings, 'p@ss:word');
    assert.equal(basic.body, 'grant_type=client_credentials&scope=a+b&audience=https%3A%2F%2Fapi');
    assert.equal(Buffer.from(basic.headers.authorization!.replace('Basic ', ''), 'base64').toString(), 'hook+relay:p%40ss%3Aword');
    const post = tokenRequest({ ...settings, clientAuth: 'client_secret_post', scope: null, audience: null }, 'pw');
    assert.equal(post.body, 'grant_type=client_credentials&client_id=hook+relay&client_secret=pw');
    assert.equal(post.headers.authorization, undefined);
    assert.deepEqual(parseStoredOAuth2(storedOAuth2(settings)), settings);
  });

  test('token answers, error codes and the refresh margin', () => {
    assert.deepEqual(parseTokenAnswer({ access_token: 'abc', token_type: 'Bearer', expires_in: 300 }), { ok: true, token: 'abc', expiresInSeconds: 300 });
    assert.deepEqual(parseTokenAnswer({ access_token: 'abc' }), { ok: true, token: 'abc', expiresInSeconds: null });
    assert.ok(!parseTokenAnswer({ access_token: 'a b' }).ok);
    assert.ok(!parseTokenAnswer({ access_token: 'abc', token_type: 'mac' }).ok);
    assert.equal(tokenErrorCode({ error: 'invalid_client', error_description: 'secret s3cr3t is wrong' }), 'invalid_client');
    assert.equal(tokenErrorCode({ error: 'spaces are not a code' }), null);
    assert.equal(refreshMarginMs(3_600_000), 360_000);
    assert.equal(refreshMarginMs(120_000), 30_000);
    assert.equal(refreshMarginMs(20_000), 10_000);
  });
});

test('the helper CA issues what it is asked (the fixtures the other tests rest on)', (t) => {
  const ca = createClientCa(t);
  const c = ca.issue({ startDate: '20200101000000Z', endDate: '20210101000000Z' });
  const dates = execFileSync('openssl', ['x509', '-noout', '-enddate', '-in', join(ca.dir, 'client1.pem')], { encoding: 'utf8' });
  assert.match(dates, /2021/);
  assert.ok(c.certPem.includes('BEGIN CERTIFICATE'));
});

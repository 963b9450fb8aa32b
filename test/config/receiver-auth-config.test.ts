/**
 * The configuration keys of receiver authentication (issue 43): the operator's client
 * certificates (paths made absolute, "ORG=FILE" entries checked) and the credential key file.
 */
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { test } from 'node:test';
import { loadConfig } from '../../src/config/load.ts';
import { ErrorCode, HookrelayError } from '../../src/domain/errors.ts';
import { tempDir } from '../helpers/helpers.ts';

test('defaults, paths made absolute, and the per-organization entries', (t) => {
  const cwd = tempDir(t);
  const defaults = loadConfig({ env: {}, cwd });
  assert.equal(defaults.delivery.credentialKeyFile, null);
  assert.deepEqual(defaults.delivery.clientCertificate, { certFile: null, keyFile: null });
  assert.deepEqual(defaults.delivery.organizationClientCertificates, []);
  assert.equal(defaults.delivery.clientCertificateExpiryWarning, 14 * 86_400_000);
  const set = loadConfig({
    env: {
      HOOKRELAY_DELIVERY_CREDENTIAL_KEY_FILE: 'keys/kek',
      HOOKRELAY_DELIVERY_CLIENT_CERTIFICATE_CERT_FILE: 'c.pem',
      HOOKRELAY_DELIVERY_CLIENT_CERTIFICATE_KEY_FILE: 'c.key',
      HOOKRELAY_DELIVERY_ORGANIZATION_CLIENT_CERTIFICATES: 'acme=certs/acme.pem,globex=/etc/g.pem',
      HOOKRELAY_DELIVERY_CLIENT_CERTIFICATE_EXPIRY_WARNING: '30d',
    },
    cwd,
  });
  assert.equal(set.delivery.credentialKeyFile, join(cwd, 'keys/kek'));
  assert.deepEqual(set.delivery.clientCertificate, { certFile: join(cwd, 'c.pem'), keyFile: join(cwd, 'c.key') });
  assert.deepEqual(set.delivery.organizationClientCertificates, [`acme=${join(cwd, 'certs/acme.pem')}`, 'globex=/etc/g.pem']);
  assert.equal(set.delivery.clientCertificateExpiryWarning, 30 * 86_400_000);
});

test('refused: an entry that is not ORG=FILE, an organization twice, a key file without a certificate file', (t) => {
  const cwd = tempDir(t);
  const refused = (env: Record<string, string>, message: RegExp) =>
    assert.throws(() => loadConfig({ env, cwd }), (err: unknown) => err instanceof HookrelayError && err.code === ErrorCode.config && message.test(err.message));
  refused({ HOOKRELAY_DELIVERY_ORGANIZATION_CLIENT_CERTIFICATES: '/etc/acme.pem' }, /"delivery\.organizationClientCertificates" must list "ORG=FILE" entries/);
  refused({ HOOKRELAY_DELIVERY_ORGANIZATION_CLIENT_CERTIFICATES: 'acme=/a.pem,acme=/b.pem' }, /two entries for "acme"/);
  refused({ HOOKRELAY_DELIVERY_CLIENT_CERTIFICATE_KEY_FILE: '/c.key' }, /"delivery\.clientCertificate\.keyFile" is set but "delivery\.clientCertificate\.certFile" is not/);
});

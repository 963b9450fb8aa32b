/**
 * The sealed credentials on both backends (issue 43): what one instance seals, another opens
 * from the same row with the same credential key (several instances on PostgreSQL), and an
 * instance with another key cannot: its attempts fail with credentials_unavailable, saying
 * what to do, nothing sent and the webhook's health left alone. The credential key file is
 * generated once, mode 0600, and a CLI does not make one.
 */
import assert from 'node:assert/strict';
import { statSync } from 'node:fs';
import { join } from 'node:path';
import { after, describe, test } from 'node:test';
import { createNetworkPolicies } from '../../src/domain/address-policy.ts';
import { systemClock } from '../../src/domain/clock.ts';
import { AttemptError, concernsReceiver } from '../../src/domain/retry-policy.ts';
import { createDeliverer } from '../../src/dispatch/deliverer.ts';
import { createAuditTrail } from '../../src/services/audit.ts';
import { createCredentialVault, ensureCredentialKey } from '../../src/services/credential-key.ts';
import { createOrgService } from '../../src/services/orgs.ts';
import { createReceiverCredentials } from '../../src/services/receiver-credentials.ts';
import { createTargetCheck } from '../../src/services/webhook-target.ts';
import { createWebhookService } from '../../src/services/webhooks.ts';
import { BY_TEST } from '../helpers/audit-helpers.ts';
import { createClientCa } from '../helpers/client-certs.ts';
import { silentLog, tempDir } from '../helpers/helpers.ts';
import { stopPgServer } from '../helpers/pg-harness.ts';
import { STORE_BACKENDS } from '../helpers/store-backends.ts';

after(stopPgServer);

const NETWORKS = { allowNetworks: [], organizationNetworks: [], storeInternalResponses: [] };

for (const backend of STORE_BACKENDS) {
  describe(`sealed credentials: ${backend.name}`, () => {
    test('one instance seals, another with the same key opens the same row; one with another key cannot, and says why', async (t) => {
      const { store } = await backend.open(t);
      const shared = { stateDir: tempDir(t), delivery: { credentialKeyFile: null } };
      ensureCredentialKey(shared, silentLog);
      const other = { stateDir: tempDir(t), delivery: { credentialKeyFile: null } };
      ensureCredentialKey(other, silentLog);
      const audit = createAuditTrail(store, silentLog);
      const orgs = createOrgService(store, audit);
      await orgs.add(BY_TEST, { id: 'acme', name: 'Acme' });
      const webhooks = createWebhookService(store, orgs, { checkTarget: createTargetCheck(createNetworkPolicies(NETWORKS), false), disableAfterMs: 1, secretRotationGraceMs: 1, vault: createCredentialVault(shared) }, audit);
      const ca = createClientCa(t);
      const cert = ca.issue();
      await webhooks.register(BY_TEST, 'acme', {
        webhook_url: 'https://hooks.example.com/in',
        client_certificate: { certificate: cert.certPem, private_key: cert.keyPem },
        oauth2: { token_url: 'https://idp.example/token', client_id: 'c', client_secret: 'the-client-secret-1' },
      });

      // "Another instance": a vault of its own over the same key file.
      const sameKey = createReceiverCredentials(store, createCredentialVault(shared));
      const opened = await sameKey.clientCertificate('acme');
      assert.equal(opened?.info.fingerprintSha256, cert.fingerprint);
      assert.match(opened?.material.privateKey ?? '', /BEGIN PRIVATE KEY/);
      assert.equal(await sameKey.oauth2ClientSecret('acme'), 'the-client-secret-1');

      const otherKey = createReceiverCredentials(store, createCredentialVault(other));
      await assert.rejects(otherKey.oauth2ClientSecret('acme'), (err: Error) => /it was sealed with another credential key \([0-9a-f]{16}; this instance's .* is [0-9a-f]{16}\): every instance sharing the database needs the same key file/.test(err.message));

      // Its deliverer: the attempt fails before anything is sent, and does not count against the receiver.
      const deliverer = createDeliverer({ networks: createNetworkPolicies(NETWORKS), clock: systemClock, timeoutMs: 2000, allowHttp: false, userAgent: 'test', extraCa: null, concurrency: 1, credentials: otherKey });
      t.after(() => deliverer.close());
      const webhook = await webhooks.get('acme');
      const result = await deliverer.deliver({ orgId: 'acme', url: 'https://hooks.example.com/in', eventId: 'evt_1', payload: '{}', secrets: [], clientCertificate: webhook.clientCertificate, oauth2: webhook.oauth2 });
      assert.equal(result.error, AttemptError.credentials);
      assert.match(result.errorDetail ?? '', /^the webhook's client certificate cannot be used: the client certificate key cannot be opened: it was sealed with another credential key/);
      assert.equal(result.sentTimestamp, null);
      assert.equal(concernsReceiver(result), false);
    });
  });
}

test('the credential key file: generated once, mode 0600; a configured file is never generated; without it, sealing says where it looked', (t) => {
  const stateDir = tempDir(t);
  const config = { stateDir, delivery: { credentialKeyFile: null } };
  assert.throws(() => createCredentialVault(config).seal('x', 'y'), /there is no credential key at .*credential-key: the daemon generates it at its start/);
  ensureCredentialKey(config, silentLog);
  const path = join(stateDir, 'credential-key');
  assert.equal(statSync(path).mode & 0o777, 0o600);
  const id = createCredentialVault(config).keyId();
  ensureCredentialKey(config, silentLog);
  assert.equal(createCredentialVault(config).keyId(), id, 'not generated again');
  const configured = { stateDir, delivery: { credentialKeyFile: join(stateDir, 'elsewhere') } };
  assert.throws(() => ensureCredentialKey(configured, silentLog), /there is no credential key at .*elsewhere/);
});

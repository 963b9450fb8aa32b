/**
 * Client certificates near their expiry (issue 43): the daemon warns at start of every
 * certificate that expires within delivery.clientCertificateExpiryWarning (a webhook's own, the
 * operator's), hookrelay_webhook_client_certificate_expiry_seconds has each one's expiry, and
 * `hookrelay status` flags them. Certificates are real (openssl), the daemon runs in process,
 * the CLI is the built one.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { loadConfig } from '../../src/config/load.ts';
import { createLogger } from '../../src/log.ts';
import { createRelay } from '../../src/relay.ts';
import { assertBuilt, CLI, cleanEnv } from '../helpers/feed-helpers.ts';
import { call, seedOrg, startRelay, tempDir } from '../helpers/helpers.ts';
import { createClientCa, opensslDate } from '../helpers/client-certs.ts';
import { parsePrometheusText, sampleValue } from '../helpers/prometheus-text.ts';

const DAY = 86_400_000;

test('expiring certificates: a warning at start, the expiry metric, and status flags them', async (t) => {
  assertBuilt();
  const ca = createClientCa(t);
  const soon = ca.issue({ cn: 'acme soon', endDate: opensslDate(Date.now() + 5 * DAY) });
  const later = ca.issue({ cn: 'operator for all', endDate: opensslDate(Date.now() + 60 * DAY) });
  const dir = tempDir(t);
  const operatorFile = join(dir, 'operator.pem');
  writeFileSync(operatorFile, later.certPem + later.keyPem, { mode: 0o600 });
  const stateDir = join(dir, 'state');
  const overrides = { stateDir, 'delivery.clientCertificate.certFile': operatorFile };

  // A first daemon: the webhook registers a certificate that expires in 5 days.
  const first = await startRelay(t, overrides);
  const { admin } = await seedOrg(first.services, 'acme');
  const registered = await call(first.baseUrl, 'POST', '/webhook/register_webhook', {
    token: first.token('acme', admin),
    body: { webhook_url: 'https://hooks.example.com/in', client_certificate: { certificate: soon.certPem, private_key: soon.keyPem } },
  });
  assert.equal(registered.status, 201, registered.text);
  const metrics = parsePrometheusText(await (await fetch(`${first.baseUrl}/metrics`)).text());
  assert.equal(sampleValue(metrics, 'hookrelay_webhook_client_certificate_expiry_seconds', { org: 'acme', source: 'webhook' }), Math.floor(Date.parse(registered.body.client_certificate.not_after) / 1000));
  assert.ok(Math.abs(sampleValue(metrics, 'hookrelay_webhook_client_certificate_expiry_seconds', { org: '*', source: 'operator' }) * 1000 - (Date.now() + 60 * DAY)) < 2 * DAY);
  await first.relay.stop();

  // A second daemon on the same state: its start warns of the webhook's (5 days left, within the 14 days), not of the operator's (60).
  const lines: string[] = [];
  const relay = createRelay(loadConfig({ env: {}, overrides: { ...overrides, 'api.listen': '127.0.0.1:0' } }), { log: createLogger('info', { write: (line: string) => void lines.push(line) }) });
  await relay.start();
  t.after(() => relay.stop());
  const warnings = lines.map((l) => JSON.parse(l) as Record<string, any>).filter((r) => r.level === 40 && typeof r.fingerprint === 'string');
  assert.equal(warnings.length, 1, JSON.stringify(warnings));
  assert.equal(warnings[0]!.org, 'acme');
  assert.equal(warnings[0]!.source, 'webhook');
  assert.equal(warnings[0]!.fingerprint, soon.fingerprint);
  assert.match(warnings[0]!.msg, /^the client certificate of acme's webhook, CN=acme soon \(SHA-256 .*\), expires on .* \(in [45] days\): register a new one/);
  assert.ok(!lines.join('\n').includes(soon.keyPem.split('\n')[1]!), 'no key in the log');

  // status: both listed, the webhook's flagged.
  const status = spawnSync(process.execPath, [CLI, 'status', '--json', '--state-dir', stateDir], { env: { ...cleanEnv(), HOOKRELAY_DELIVERY_CLIENT_CERTIFICATE_CERT_FILE: operatorFile }, encoding: 'utf8' });
  assert.equal(status.status, 0, status.stderr);
  const view = JSON.parse(status.stdout) as { client_certificates: Array<Record<string, unknown>> };
  assert.deepEqual(view.client_certificates.map((c) => [c.organization_id, c.source, c.state]), [['acme', 'webhook', 'expiring'], [null, 'operator', 'valid']]);
  const human = spawnSync(process.execPath, [CLI, 'status', '--state-dir', stateDir], { env: cleanEnv(), encoding: 'utf8' });
  assert.match(human.stdout, /EXPIRES SOON \([45] days\)/);
});

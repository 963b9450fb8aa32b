/**
 * The errors of receivers on internal networks are stored like their answers' bodies (issue
 * 31, point 6): a TLS error names the certificate's names and addresses, a refused connection
 * the address it tried; for an organization whose log does not keep internal answers
 * (delivery.storeInternalResponses), the attempt log keeps the error code and a note, not the
 * message. Real HTTPS receivers with certificates made for the test, a real relay.
 */
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { createServer as createHttpsServer } from 'node:https';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { test, type TestContext } from 'node:test';
import { call, seedOrg, startRelay } from '../helpers/helpers.ts';
import { appendFeed, attemptsOf, createTestTls, FAST_DELIVERY, feedLine, waitForDelivery, type TestTls } from '../helpers/receivers.ts';
import { freePort } from '../helpers/feed-helpers.ts';
import { BY_TEST } from '../helpers/audit-helpers.ts';

/** An HTTPS receiver on 127.0.0.1 whose certificate (signed by the test CA) is for an internal name and address, not for 127.0.0.1. */
async function startMisnamedReceiver(t: TestContext, tls: TestTls): Promise<string> {
  const file = (f: string) => join(tls.dir, f);
  const openssl = (...args: string[]) => execFileSync('openssl', args, { cwd: tls.dir, stdio: ['ignore', 'ignore', 'pipe'] });
  openssl('req', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-256', '-nodes', '-keyout', file('internal.key'), '-out', file('internal.csr'), '-subj', '/CN=internal-db.corp.example');
  writeFileSync(file('internal.ext'), 'subjectAltName=DNS:internal-db.corp.example,IP:10.20.30.40\nextendedKeyUsage=serverAuth\n');
  openssl('x509', '-req', '-in', file('internal.csr'), '-CA', tls.caFile, '-CAkey', tls.caKeyFile, '-set_serial', '0x1234', '-days', '2', '-extfile', file('internal.ext'), '-out', file('internal.pem'));
  const server = createHttpsServer({ key: readFileSync(file('internal.key')), cert: readFileSync(file('internal.pem')) }, (_req, res) => res.end('ok'));
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  t.after(() => new Promise<void>((resolve) => server.close(() => resolve())));
  return `https://127.0.0.1:${(server.address() as AddressInfo).port}/hook`;
}

test('a TLS or connection error of an internal receiver is stored without its message, unless the organization keeps internal answers', async (t) => {
  const tls = createTestTls(t);
  const relay = await startRelay(t, {
    'delivery.caFile': tls.caFile,
    'delivery.organizationNetworks': 'acme=127.0.0.1/32,keeper=127.0.0.1/32',
    'delivery.storeInternalResponses': 'keeper',
    ...FAST_DELIVERY,
    'delivery.retrySchedule': '1h',
  });
  const misnamed = await startMisnamedReceiver(t, tls);
  const closed = `https://127.0.0.1:${await freePort()}/hook`;
  for (const orgId of ['acme', 'keeper']) await seedOrg(relay.services, orgId);

  const cases = [
    { url: misnamed, error: 'tls_error', withheld: 'TLS failed (ERR_TLS_CERT_ALTNAME_INVALID) (details not stored: the receiver is on an internal network; the operator can keep them with delivery.storeInternalResponses)', kept: /^TLS failed \(ERR_TLS_CERT_ALTNAME_INVALID\): .*10\.20\.30\.40/ },
    { url: closed, error: 'connection_error', withheld: 'ECONNREFUSED (details not stored: the receiver is on an internal network; the operator can keep them with delivery.storeInternalResponses)', kept: /^ECONNREFUSED: connect ECONNREFUSED 127\.0\.0\.1:\d+/ },
  ];
  for (const [i, c] of cases.entries()) {
    await relay.services.webhooks.register(BY_TEST, 'acme', { webhook_url: c.url });
    await relay.services.webhooks.register(BY_TEST, 'keeper', { webhook_url: c.url });
    appendFeed(relay.config.feed.path, [feedLine('acme', `evt_acme_${i}`), feedLine('keeper', `evt_keeper_${i}`)]);
    const acme = await waitForDelivery(relay.store, 'acme', `evt_acme_${i}`, (d) => d.attempts >= 1, `acme's attempt ${i}`);
    const keeper = await waitForDelivery(relay.store, 'keeper', `evt_keeper_${i}`, (d) => d.attempts >= 1, `keeper's attempt ${i}`);

    const [withheld] = attemptsOf(relay.store, acme.id);
    assert.equal(withheld!.errorClass, c.error);
    assert.equal(withheld!.errorDetail, c.withheld);
    const [kept] = attemptsOf(relay.store, keeper.id);
    assert.equal(kept!.errorClass, c.error);
    assert.match(kept!.errorDetail ?? '', c.kept);

    // Through the API, the tenant sees the class and the code, nothing the certificate or the socket said.
    const token = relay.token('acme', 'admin@acme.test');
    const detail = await call(relay.baseUrl, 'GET', `/webhook/deliveries/${acme.id}`, { token });
    assert.equal(detail.status, 200, detail.text);
    assert.doesNotMatch(detail.text, /10\.20\.30\.40|internal-db|connect ECONNREFUSED/);
  }
});

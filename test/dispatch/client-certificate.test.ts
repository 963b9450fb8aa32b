/**
 * Mutual TLS (issue 43): real HTTPS receivers on 127.0.0.1 that require a client certificate
 * from a test CA. Without one the handshake is refused; with the webhook's certificate the
 * delivery goes through; a certificate replaced is the one the receiver sees from the next
 * attempt; through the egress proxy (CONNECT, then TLS with the certificate); and the
 * operator's certificates (per organization from a file) when the webhook has none.
 */
import assert from 'node:assert/strict';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { call, seedOrg, tempDir } from '../helpers/helpers.ts';
import { createClientCa, startMtlsReceiver, type ClientCert } from '../helpers/client-certs.ts';
import { attemptsOf, deliveriesOfEvent, feedLine, startConnectProxy, startDeliveryRig, waitForDelivery } from '../helpers/receivers.ts';

function certificateBody(c: ClientCert) {
  return { certificate: c.certPem, private_key: c.keyPem };
}

test('a receiver that requires a client certificate refuses the handshake without one, takes the webhook\'s, and sees a replaced one from the next attempt', async (t) => {
  const rig = await startDeliveryRig(t);
  const ca = createClientCa(t);
  const receiver = await startMtlsReceiver(t, rig.tls, ca);
  const { admin } = await seedOrg(rig.relay.services, 'org-a');
  const token = rig.relay.token('org-a', admin);
  const plain = await call(rig.relay.baseUrl, 'POST', '/webhook/register_webhook', { token, body: { webhook_url: receiver.url } });
  assert.equal(plain.status, 201, plain.text);

  // No certificate: refused in the handshake, nothing reaches the receiver's application.
  rig.feed(feedLine('org-a', 'evt_1'));
  const failed = await waitForDelivery(rig.relay.store, 'org-a', 'evt_1', (d) => d.attempts >= 1, 'a first attempt');
  const [first] = attemptsOf(rig.relay.store, failed.id);
  assert.equal(first?.statusCode, null);
  assert.match(first?.errorClass ?? '', /^(tls_error|connection_error)$/, JSON.stringify(first));
  assert.equal(receiver.requests.length, 0);

  // The webhook's certificate: the retry goes through, presenting it.
  const a = ca.issue({ cn: 'org-a client' });
  const withA = await call(rig.relay.baseUrl, 'POST', '/webhook/register_webhook', { token, body: { webhook_url: receiver.url, client_certificate: certificateBody(a) } });
  assert.equal(withA.status, 200, withA.text);
  assert.equal(withA.body.client_certificate.fingerprint_sha256, a.fingerprint);
  assert.match(withA.body.message, /Deliveries present the client certificate CN=org-a client/);
  await waitForDelivery(rig.relay.store, 'org-a', 'evt_1', (d) => d.status === 'delivered', 'evt_1 delivered with the certificate');
  assert.equal(receiver.requests.at(-1)?.clientCertificate, a.fingerprint);

  // Kept when a registration leaves it out (a new URL path, same receiver).
  const kept = await call(rig.relay.baseUrl, 'POST', '/webhook/register_webhook', { token, body: { webhook_url: `${receiver.url}?v=2` } });
  assert.equal(kept.body.client_certificate.fingerprint_sha256, a.fingerprint);
  rig.feed(feedLine('org-a', 'evt_2'));
  await waitForDelivery(rig.relay.store, 'org-a', 'evt_2', (d) => d.status === 'delivered', 'evt_2 delivered');
  assert.equal(receiver.requestsFor('evt_2')[0]?.clientCertificate, a.fingerprint);

  // Rotated: the next attempt presents the new one (a new connection pool for it).
  const b = ca.issue({ cn: 'org-a client 2026' });
  const withB = await call(rig.relay.baseUrl, 'POST', '/webhook/register_webhook', { token, body: { webhook_url: receiver.url, client_certificate: certificateBody(b) } });
  assert.equal(withB.body.client_certificate.fingerprint_sha256, b.fingerprint);
  rig.feed(feedLine('org-a', 'evt_3'));
  await waitForDelivery(rig.relay.store, 'org-a', 'evt_3', (d) => d.status === 'delivered', 'evt_3 delivered');
  assert.equal(receiver.requestsFor('evt_3')[0]?.clientCertificate, b.fingerprint);

  // Removed with null: refused again.
  const removed = await call(rig.relay.baseUrl, 'POST', '/webhook/register_webhook', { token, body: { webhook_url: receiver.url, client_certificate: null } });
  assert.equal(removed.body.client_certificate, null);
  rig.feed(feedLine('org-a', 'evt_4'));
  await waitForDelivery(rig.relay.store, 'org-a', 'evt_4', (d) => d.attempts >= 1, 'evt_4 attempted');
  assert.equal(receiver.requestsFor('evt_4').length, 0);
  assert.equal(deliveriesOfEvent(rig.relay.store, 'org-a', 'evt_4')[0]?.status, 'pending');
});

test('through the egress proxy: CONNECT, then TLS to the receiver presenting the webhook\'s certificate', async (t) => {
  const proxy = await startConnectProxy(t);
  const rig = await startDeliveryRig(t, { 'delivery.proxy': proxy.url });
  const ca = createClientCa(t);
  const receiver = await startMtlsReceiver(t, rig.tls, ca);
  const { admin } = await seedOrg(rig.relay.services, 'org-p');
  const c = ca.issue();
  const registered = await call(rig.relay.baseUrl, 'POST', '/webhook/register_webhook', { token: rig.relay.token('org-p', admin), body: { webhook_url: receiver.url, client_certificate: certificateBody(c) } });
  assert.equal(registered.status, 201, registered.text);
  rig.feed(feedLine('org-p', 'evt_p1'));
  await waitForDelivery(rig.relay.store, 'org-p', 'evt_p1', (d) => d.status === 'delivered', 'delivered through the proxy');
  assert.equal(receiver.requestsFor('evt_p1')[0]?.clientCertificate, c.fingerprint);
  assert.ok(proxy.tunnels.some((x) => x.authority === `127.0.0.1:${receiver.port}` && x.status === 200), JSON.stringify(proxy.tunnels));
});

test("the operator's certificate for an organization (a PEM file with the key) is presented when its webhook has none; the webhook's own wins", async (t) => {
  const ca = createClientCa(t);
  const operator = ca.issue({ cn: 'operator for org-o', key: 'rsa2048' });
  const file = join(tempDir(t), 'org-o.pem');
  writeFileSync(file, operator.certPem + ca.caPem + operator.keyPem, { mode: 0o600 });
  const rig = await startDeliveryRig(t, { 'delivery.organizationClientCertificates': `org-o=${file}` });
  const receiver = await startMtlsReceiver(t, rig.tls, ca);
  const { admin } = await seedOrg(rig.relay.services, 'org-o');
  const token = rig.relay.token('org-o', admin);
  await call(rig.relay.baseUrl, 'POST', '/webhook/register_webhook', { token, body: { webhook_url: receiver.url } });
  rig.feed(feedLine('org-o', 'evt_o1'));
  await waitForDelivery(rig.relay.store, 'org-o', 'evt_o1', (d) => d.status === 'delivered', 'delivered with the operator\'s certificate');
  assert.equal(receiver.requestsFor('evt_o1')[0]?.clientCertificate, operator.fingerprint);

  const own = ca.issue({ cn: 'org-o itself' });
  await call(rig.relay.baseUrl, 'POST', '/webhook/register_webhook', { token, body: { webhook_url: receiver.url, client_certificate: certificateBody(own) } });
  rig.feed(feedLine('org-o', 'evt_o2'));
  await waitForDelivery(rig.relay.store, 'org-o', 'evt_o2', (d) => d.status === 'delivered', 'delivered with its own certificate');
  assert.equal(receiver.requestsFor('evt_o2')[0]?.clientCertificate, own.fingerprint);
});

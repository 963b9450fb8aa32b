/**
 * Run by test/dispatch/proxy.test.ts inside a network namespace whose /etc/hosts says
 * receiver.hookrelay.test is 127.0.0.1 and internal.hookrelay.test is 127.0.0.2 (not a
 * `.test.ts` file: it needs that hosts file, so `npm test` does not run it on its own). The
 * relay may reach 127.0.0.1 only. Through a real CONNECT proxy, with the proxy asked for the
 * checked address and for the name: a name the policy allows is delivered, signed, and the
 * proxy is asked for what the mode says; a name resolving to a refused address is refused at
 * registration, and, stored anyway, at every attempt before the proxy sees anything.
 */
import assert from 'node:assert/strict';
import { createServer as createNetServer, type AddressInfo } from 'node:net';
import { test } from 'node:test';
import { Webhook } from 'standardwebhooks';
import { AttemptError } from '../../src/domain/retry-policy.ts';
import { assertProblem, call, seedOrg } from '../helpers/helpers.ts';
import { attemptsOf, createTestTls, deliveriesOfEvent, feedLine, startConnectProxy, startDeliveryRig, startReceiver, waitFor, waitForDelivery } from '../helpers/receivers.ts';
import { repos } from '../helpers/sqlite-repos.ts';

for (const target of ['address', 'name'] as const) {
  test(`proxyTarget ${target}: a name is resolved and checked before the proxy is asked for the ${target}; a refused one never reaches it`, async (t) => {
    const tls = createTestTls(t, 'DNS:receiver.hookrelay.test,IP:127.0.0.1');
    const proxy = await startConnectProxy(t);
    const rig = await startDeliveryRig(t, { 'delivery.caFile': tls.caFile, 'delivery.proxy': proxy.url, 'delivery.proxyTarget': target });
    const receiver = await startReceiver(t, tls);
    const { admin } = await seedOrg(rig.relay.services, 'org-a');
    const token = rig.relay.token('org-a', admin);

    const url = `https://receiver.hookrelay.test:${receiver.port}/hook`;
    const registered = await call(rig.relay.baseUrl, 'POST', '/webhook/register_webhook', { token, body: { webhook_url: url, headers: { 'X-Tenant': 'org-a' } } });
    assert.equal(registered.status, 201, registered.text);
    rig.feed(feedLine('org-a', 'evt_named'));
    await waitForDelivery(rig.relay.store, 'org-a', 'evt_named', (d) => d.status === 'delivered', 'delivered by name through the proxy', 20_000);
    const [req] = receiver.requests;
    assert.ok(req);
    assert.equal(req.headers.host, `receiver.hookrelay.test:${receiver.port}`);
    assert.equal(req.headers['x-tenant'], 'org-a');
    new Webhook(registered.body.secret as string).verify(req.body.toString('utf8'), {
      'webhook-id': req.headers['webhook-id'] as string,
      'webhook-timestamp': req.headers['webhook-timestamp'] as string,
      'webhook-signature': req.headers['webhook-signature'] as string,
    });
    const asked = target === 'address' ? `127.0.0.1:${receiver.port}` : `receiver.hookrelay.test:${receiver.port}`;
    assert.deepEqual(proxy.tunnels.map((x) => x.authority), [asked]);

    // internal.hookrelay.test is 127.0.0.2, which nothing grants; something listens there, to see that nothing reaches it.
    let reached = 0;
    const internal = createNetServer((socket) => {
      reached++;
      socket.destroy();
    });
    await new Promise<void>((resolve) => internal.listen(0, '127.0.0.2', resolve));
    t.after(() => new Promise<void>((resolve) => internal.close(() => resolve())));
    const internalUrl = `https://internal.hookrelay.test:${(internal.address() as AddressInfo).port}/hook`;
    const refused = await call(rig.relay.baseUrl, 'POST', '/webhook/register_webhook', { token, body: { webhook_url: internalUrl } });
    const problem = assertProblem(refused, 422, 'webhook_url_not_allowed');
    assert.equal(problem.reason, 'loopback_address');

    // Stored anyway (as a webhook registered before the operator narrowed the policy would be): every attempt refuses it.
    const connectionsBefore = proxy.connections();
    await repos(rig.relay.store).webhooks.upsert('org-a', internalUrl, true, 'whsec_' + Buffer.alloc(32, 1).toString('base64'), Date.now());
    rig.feed(feedLine('org-a', 'evt_internal'));
    const attempt = await waitFor('an attempt of evt_internal', () => {
      const d = deliveriesOfEvent(rig.relay.store, 'org-a', 'evt_internal')[0];
      return d === undefined ? undefined : attemptsOf(rig.relay.store, d.id)[0];
    }, 20_000);
    assert.equal(attempt.errorClass, AttemptError.blocked, JSON.stringify(attempt));
    assert.match(attempt.errorDetail ?? '', /^internal\.hookrelay\.test resolves to an address in a refused range \(loopback/);
    assert.equal(attempt.sentTimestamp, null);
    assert.equal(proxy.connections(), connectionsBefore, 'the proxy was not even connected to');
    assert.equal(proxy.tunnels.length, 1);
    assert.equal(reached, 0);
  });
}

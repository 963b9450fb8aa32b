/**
 * Unit tests of the pure parts of the delivery engine: which addresses the network guard
 * refuses (every range, IPv4-mapped and other embedded forms, the operator's allowlist, the
 * lookup function's array form), and the retry policy (schedule, jitter bounds, dead after the
 * last step, 410, Retry-After parsing and clamping, the floor after a 429 or a timeout).
 */
import { orderingKey, testOrderingKey } from '../../src/domain/ordering.ts';
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { join } from 'node:path';
import { Webhook } from 'standardwebhooks';
import { loadConfig } from '../../src/config/load.ts';
import { systemClock } from '../../src/domain/clock.ts';
import { BLOCKED_CODE, createNetworkGuard } from '../../src/dispatch/network-guard.ts';
import { AttemptError, decideOutcome, parseRetryAfter, type AttemptResult, type RetryPolicy } from '../../src/domain/retry-policy.ts';
import { generateWebhookSecret } from '../../src/domain/secrets.ts';
import { signatureHeader } from '../../src/domain/signature.ts';
import { createServices } from '../../src/services/services.ts';
import { openSqliteStore } from '../../src/store/sqlite/store.ts';
import { tempDir } from '../helpers/helpers.ts';
import { repos } from '../helpers/sqlite-repos.ts';
import { BY_TEST } from '../helpers/audit-helpers.ts';

const guard = createNetworkGuard([]);

/** [address, a word the refusal must contain] */
const REFUSED: ReadonlyArray<readonly [string, RegExp]> = [
  ['0.0.0.0', /unspecified/],
  ['0.1.2.3', /this network/],
  ['10.0.0.1', /private/],
  ['10.255.255.255', /private/],
  ['100.64.0.1', /carrier-grade NAT/],
  ['100.127.255.254', /carrier-grade NAT/],
  ['127.0.0.1', /loopback/],
  ['127.255.255.254', /loopback/],
  ['169.254.169.254', /link-local/],
  ['169.254.0.1', /link-local/],
  ['172.16.0.1', /private/],
  ['172.31.255.255', /private/],
  ['192.0.0.170', /IETF/],
  ['192.0.2.1', /documentation/],
  ['192.88.99.1', /6to4/],
  ['192.168.1.1', /private/],
  ['198.18.0.1', /benchmarking/],
  ['198.19.255.255', /benchmarking/],
  ['198.51.100.7', /documentation/],
  ['203.0.113.9', /documentation/],
  ['224.0.0.1', /multicast/],
  ['239.255.255.250', /multicast/],
  ['240.0.0.1', /reserved/],
  ['255.255.255.255', /broadcast/],
  ['::', /unspecified/],
  ['::1', /loopback/],
  ['::127.0.0.1', /IPv4-compatible/],
  ['64:ff9b:1::a00:1', /NAT64/],
  ['100::1', /discard/],
  ['2001::1', /Teredo/],
  ['2001:db8::1', /documentation/],
  ['2002:7f00:1::1', /6to4/],
  ['fc00::1', /unique-local/],
  ['fd12:3456::1', /unique-local/],
  ['fe80::1', /link-local/],
  ['febf:ffff::1', /link-local/],
  ['fec0::1', /site-local/],
  ['ff02::1', /multicast/],
  // IPv4-mapped IPv6, in every spelling, is judged by the IPv4 rules.
  ['::ffff:127.0.0.1', /loopback/],
  ['::ffff:7f00:1', /loopback/],
  ['0:0:0:0:0:ffff:7f00:0001', /loopback/],
  ['::FFFF:127.0.0.1', /loopback/],
  ['::ffff:169.254.169.254', /link-local/],
  ['::ffff:a9fe:a9fe', /link-local/],
  ['::ffff:10.1.2.3', /private/],
  ['::ffff:c0a8:101', /private/],
  ['::ffff:100.64.0.1', /carrier-grade NAT/],
  ['::ffff:0.0.0.0', /unspecified/],
  ['[::ffff:127.0.0.1]', /loopback/],
  ['[::1]', /loopback/],
];

const ALLOWED = ['8.8.8.8', '1.1.1.1', '93.184.216.34', '172.32.0.1', '192.169.0.1', '100.128.0.1', '11.0.0.1', '2606:4700:4700::1111', '2001:4860:4860::8888', '::ffff:8.8.8.8', '::ffff:5db8:d822'];

test('network guard: every refused range is refused, with the address and the reason in the refusal', () => {
  for (const [address, reason] of REFUSED) {
    const why = guard.refusal(address);
    assert.ok(why !== null, `${address} must be refused`);
    assert.match(why, reason, `${address}: ${why}`);
    assert.ok(why.includes(address.replace(/^\[(.*)\]$/, '$1')), `the refusal of ${address} does not name it: ${why}`);
    assert.match(why, /delivery\.allowNetworks/);
  }
});

test('network guard: public addresses (IPv4, IPv6, IPv4-mapped public) are allowed', () => {
  for (const address of ALLOWED) assert.equal(guard.refusal(address), null, address);
});

test('network guard: NAT64 addresses are judged by the IPv4 address they embed', () => {
  // 64:ff9b::/96 (RFC 6052) reaches a.b.c.d through a NAT64 gateway: private targets are refused.
  for (const address of ['64:ff9b::7f00:1', '64:ff9b::127.0.0.1', '64:ff9b::a9fe:a9fe', '64:ff9b::10.0.0.5', '64:ff9b::c0a8:1']) {
    assert.match(guard.refusal(address) ?? '', /^64:ff9b::\S+ is in a refused range \(NAT64 \((127\.0\.0\.1: loopback|169\.254\.169\.254: link-local|10\.0\.0\.5: private|192\.168\.0\.1: private)/, address);
  }
  assert.equal(guard.refusal('64:ff9b::8.8.8.8'), null);
  assert.equal(guard.refusal('64:ff9b::808:808'), null);
  // The allowlist applies to the embedded address too.
  assert.equal(createNetworkGuard(['10.0.0.0/8']).refusal('64:ff9b::10.0.0.5'), null);
});

test('network guard: text that is not an IP address is refused (refusal() takes literals only)', () => {
  for (const text of ['localhost', 'example.com', '127.1', '2130706433', '0x7f.0.0.1', '']) {
    assert.match(guard.refusal(text) ?? '', /not an IP address/, JSON.stringify(text));
  }
});

test('network guard: allowNetworks opens exactly the listed networks, IPv4-mapped forms included', () => {
  const allowing = createNetworkGuard(['127.0.0.1/32', '10.20.0.0/16', 'fd00:1::/32']);
  for (const address of ['127.0.0.1', '::ffff:127.0.0.1', '::ffff:7f00:1', '10.20.1.2', '10.20.255.255', 'fd00:1::5']) {
    assert.equal(allowing.refusal(address), null, address);
  }
  for (const address of ['127.0.0.2', '::1', '10.21.0.1', '10.0.0.1', '169.254.169.254', 'fd00:2::5']) {
    assert.ok(allowing.refusal(address) !== null, `${address} must still be refused`);
  }
});

type LookupResult = { err: NodeJS.ErrnoException | null; address: unknown; family: number | undefined };

function lookup(g: ReturnType<typeof createNetworkGuard>, host: string, options: { all?: boolean; family?: number } | number): Promise<LookupResult> {
  return new Promise((resolve) => g.lookup(host, options, (err, address, family) => resolve({ err, address, family })));
}

test('network guard lookup: a name resolving to loopback is refused in both the array and the single form', async () => {
  for (const options of [{ all: true }, { all: false }, {}, 0, 4]) {
    const r = await lookup(guard, 'localhost', options);
    assert.ok(r.err, `localhost must be refused with options ${JSON.stringify(options)}`);
    assert.equal(r.err.code, BLOCKED_CODE);
    assert.match(r.err.message, /^localhost resolves to an address in a refused range \(loopback\); allow its network with delivery\.organizationNetworks or delivery\.allowNetworks/);
    assert.doesNotMatch(r.err.message, /127\.0\.0\.1|::1/, 'the refusal names the address a name resolved to');
  }
});

test('network guard lookup: an allowed name hands the checked addresses to the socket (array form for all: true)', async () => {
  const allowing = createNetworkGuard(['127.0.0.0/8', '::1/128']);
  const all = await lookup(allowing, 'localhost', { all: true });
  assert.equal(all.err, null);
  assert.ok(Array.isArray(all.address) && all.address.length > 0, 'all: true must get an array');
  for (const entry of all.address as Array<{ address: string; family: number }>) {
    assert.equal(allowing.refusal(entry.address), null);
    assert.ok(entry.family === 4 || entry.family === 6);
  }
  const one = await lookup(allowing, 'localhost', {});
  assert.equal(one.err, null);
  assert.equal(typeof one.address, 'string');
  assert.ok(one.family === 4 || one.family === 6);
  const missing = await lookup(allowing, 'no-such-host.invalid', { all: true });
  assert.ok(missing.err);
  assert.notEqual(missing.err.code, BLOCKED_CODE);
});

const POLICY: RetryPolicy = { scheduleMs: [5_000, 300_000, 1_800_000], jitter: 0.2, minBackoffAfterThrottleMs: 60_000, maxRetryAfterMs: 3_600_000 };
const NOW = 1_800_000_000_000;

function result(over: Partial<AttemptResult>): AttemptResult {
  return { statusCode: null, error: null, errorDetail: null, responseBody: null, durationMs: 10, retryAfterMs: null, sentTimestamp: null, sentSignature: null, ...over };
}
const http = (statusCode: number, retryAfterMs: number | null = null) =>
  result({ statusCode, error: statusCode >= 200 && statusCode < 300 ? null : AttemptError.http, retryAfterMs });

test('retry policy: any 2xx is delivered, whatever the attempt number', () => {
  for (const code of [200, 201, 202, 204, 299]) {
    for (const attempt of [1, 3, 4, 99]) assert.deepEqual(decideOutcome(http(code), attempt, POLICY, NOW, 0.5), { kind: 'delivered' });
  }
});

test('retry policy: failures follow the schedule (attempt n waits step n), then the delivery is dead', () => {
  for (const failure of [http(500), http(404), http(302), http(400), result({ error: AttemptError.connection }), result({ error: AttemptError.blocked }), result({ error: AttemptError.tls })]) {
    POLICY.scheduleMs.forEach((step, i) => {
      assert.deepEqual(decideOutcome(failure, i + 1, POLICY, NOW, 0.5), { kind: 'retry', at: NOW + step });
    });
    assert.deepEqual(decideOutcome(failure, POLICY.scheduleMs.length + 1, POLICY, NOW, 0.5), { kind: 'dead' });
    assert.deepEqual(decideOutcome(failure, POLICY.scheduleMs.length + 5, POLICY, NOW, 0.5), { kind: 'dead' });
  }
});

test('retry policy: jitter stays within +-jitter of the step, reaching both ends', () => {
  const step = POLICY.scheduleMs[1]!;
  const low = decideOutcome(http(500), 2, POLICY, NOW, 0);
  const high = decideOutcome(http(500), 2, POLICY, NOW, 0.999_999_999);
  assert.deepEqual(low, { kind: 'retry', at: NOW + step * 0.8 });
  assert.equal(high.kind, 'retry');
  assert.equal((high as { at: number }).at, NOW + Math.round(step * 1.2));
  for (let i = 0; i < 1000; i++) {
    const outcome = decideOutcome(http(503), 2, POLICY, NOW, Math.random());
    assert.equal(outcome.kind, 'retry');
    const wait = (outcome as { at: number }).at - NOW;
    assert.ok(wait >= step * 0.8 && wait <= step * 1.2, `wait ${wait} is outside +-20 % of ${step}`);
  }
  const none = { ...POLICY, jitter: 0 };
  for (const random of [0, 0.3, 0.999]) assert.deepEqual(decideOutcome(http(500), 1, none, NOW, random), { kind: 'retry', at: NOW + 5_000 });
});

test('retry policy: 410 Gone disables the webhook, even when the schedule is used up', () => {
  assert.deepEqual(decideOutcome(http(410), 1, POLICY, NOW, 0.5), { kind: 'disable' });
  assert.deepEqual(decideOutcome(http(410), 99, POLICY, NOW, 0.5), { kind: 'disable' });
});

test('retry policy: Retry-After on 429 and 503 lengthens the wait, clamped to maxRetryAfter', () => {
  const none = { ...POLICY, jitter: 0 };
  assert.deepEqual(decideOutcome(http(503, 120_000), 1, none, NOW, 0.5), { kind: 'retry', at: NOW + 120_000 });
  // Shorter than the step: the step wins.
  assert.deepEqual(decideOutcome(http(503, 1_000), 2, none, NOW, 0.5), { kind: 'retry', at: NOW + 300_000 });
  // Clamped.
  assert.deepEqual(decideOutcome(http(503, 100 * 3_600_000), 1, none, NOW, 0.5), { kind: 'retry', at: NOW + 3_600_000 });
  assert.deepEqual(decideOutcome(http(429, 100 * 3_600_000), 1, none, NOW, 0.5), { kind: 'retry', at: NOW + 3_600_000 });
  assert.deepEqual(decideOutcome(http(429, 90_000), 1, none, NOW, 0.5), { kind: 'retry', at: NOW + 90_000 });
  // Only 429 and 503 are throttling answers: a Retry-After elsewhere is ignored.
  assert.deepEqual(decideOutcome(http(500, 120_000), 1, none, NOW, 0.5), { kind: 'retry', at: NOW + 5_000 });
  assert.deepEqual(decideOutcome(http(301, 120_000), 1, none, NOW, 0.5), { kind: 'retry', at: NOW + 5_000 });
  // The schedule still ends: Retry-After does not extend it.
  assert.deepEqual(decideOutcome(http(503, 120_000), 4, none, NOW, 0.5), { kind: 'dead' });
});

test('retry policy: a 429 and a timeout wait at least a minute; a 503 without Retry-After follows the schedule', () => {
  const none = { ...POLICY, jitter: 0 };
  assert.deepEqual(decideOutcome(http(429), 1, none, NOW, 0.5), { kind: 'retry', at: NOW + 60_000 });
  assert.deepEqual(decideOutcome(http(429, 2_000), 1, none, NOW, 0.5), { kind: 'retry', at: NOW + 60_000 });
  assert.deepEqual(decideOutcome(result({ error: AttemptError.timeout }), 1, none, NOW, 0.5), { kind: 'retry', at: NOW + 60_000 });
  assert.deepEqual(decideOutcome(result({ error: AttemptError.timeout }), 2, none, NOW, 0.5), { kind: 'retry', at: NOW + 300_000 });
  assert.deepEqual(decideOutcome(http(503), 1, none, NOW, 0.5), { kind: 'retry', at: NOW + 5_000 });
  // Jitter below the floor does not undercut it.
  assert.deepEqual(decideOutcome(http(429), 1, { ...POLICY, scheduleMs: [60_000] }, NOW, 0), { kind: 'retry', at: NOW + 60_000 });
});

test('parseRetryAfter: delta-seconds and HTTP dates, null when absent or invalid, never negative', () => {
  assert.equal(parseRetryAfter(undefined, NOW), null);
  assert.equal(parseRetryAfter('', NOW), null);
  assert.equal(parseRetryAfter('   ', NOW), null);
  assert.equal(parseRetryAfter('0', NOW), 0);
  assert.equal(parseRetryAfter('120', NOW), 120_000);
  assert.equal(parseRetryAfter(' 7 ', NOW), 7_000);
  const inTwoMinutes = new Date(NOW + 120_000).toUTCString();
  assert.equal(parseRetryAfter(inTwoMinutes, NOW), 120_000);
  // The two obsolete HTTP-date forms (RFC 850 and asctime) are accepted too.
  assert.equal(parseRetryAfter('Sunday, 06-Nov-94 08:49:37 GMT', Date.parse('1994-11-06T08:49:00Z')), 37_000);
  assert.equal(parseRetryAfter('Sun Nov  6 08:49:37 1994', Date.parse('1994-11-06T08:49:00Z')), 37_000, 'asctime dates are GMT, not local time');
  assert.equal(parseRetryAfter(new Date(NOW - 60_000).toUTCString(), NOW), 0);
  assert.equal(parseRetryAfter('soon', NOW), null);
  assert.equal(parseRetryAfter('-5', NOW), null);
  assert.equal(parseRetryAfter('1.5', NOW), null);
  assert.equal(parseRetryAfter('12abc', NOW), null);
  // Absurd values parse (to a huge wait) and are clamped by the policy, not here.
  assert.ok((parseRetryAfter('99999999999', NOW) ?? 0) > 3_600_000);
});

test('signature: one v1 signature per secret, newest first, verified by the standardwebhooks library', () => {
  const current = generateWebhookSecret();
  const previous = generateWebhookSecret();
  const body = '{"type":"x","timestamp":"2026-11-22T08:30:00.000Z","data":{"event_id":"evt_1","note":"é"}}';
  const timestamp = Math.floor(Date.now() / 1000);
  const header = signatureHeader([current, previous], 'evt_1', timestamp, body);
  const parts = header.split(' ');
  assert.equal(parts.length, 2);
  for (const part of parts) assert.match(part, /^v1,[A-Za-z0-9+/]{43}=$/);
  const headers = { 'webhook-id': 'evt_1', 'webhook-timestamp': String(timestamp), 'webhook-signature': header };
  assert.deepEqual(new Webhook(current).verify(body, headers), JSON.parse(body));
  assert.deepEqual(new Webhook(previous).verify(body, headers), JSON.parse(body));
  assert.throws(() => new Webhook(generateWebhookSecret()).verify(body, headers), /No matching signature/);
  assert.throws(() => new Webhook(current).verify(body.replace('evt_1', 'evt_2'), headers), /No matching signature/);
  assert.equal(signatureHeader([], 'evt_1', timestamp, body), '');
});

test('webhook health in the store: failing after N failures in a row, disabled after failing too long, success and enable reset it', async (t) => {
  const dir = tempDir(t);
  const store = openSqliteStore(join(dir, 'hookrelay.db'), systemClock);
  t.after(() => store.close());
  const services = createServices(store, loadConfig({ env: {}, overrides: { stateDir: dir } }));
  await services.orgs.add(BY_TEST, { id: 'org-a' });
  await services.webhooks.register(BY_TEST, 'org-a', { webhook_url: 'https://hooks.example.com/in' });
  const day = 86_400_000;
  const t0 = 1_800_000_000_000;
  const fail = (at: number) => repos(store).webhooks.recordFailure('org-a', at, 3, 5 * day);
  const state = () => ({ status: repos(store).webhooks.get('org-a')!.status, ...repos(store).webhooks.health('org-a')! });

  fail(t0);
  fail(t0 + 1);
  assert.deepEqual(state(), { status: 'active', consecutiveFailures: 2, failingSince: t0, lastSuccessAt: null, disabledReason: null });
  fail(t0 + 2);
  assert.equal(state().status, 'failing');
  repos(store).webhooks.recordSuccess('org-a', t0 + 3);
  assert.deepEqual(state(), { status: 'active', consecutiveFailures: 0, failingSince: null, lastSuccessAt: t0 + 3, disabledReason: null });

  // Failing since t1, without a success: disabled once five days have passed, not before.
  const t1 = t0 + day;
  fail(t1);
  fail(t1 + 5 * day - 1);
  assert.equal(state().status, 'active');
  fail(t1 + 5 * day);
  assert.deepEqual(state(), { status: 'disabled', consecutiveFailures: 3, failingSince: t1, lastSuccessAt: t0 + 3, disabledReason: 'failing_too_long' });
  // A late success (an attempt that was in flight) does not re-enable it; only the operator or a re-registration does.
  repos(store).webhooks.recordSuccess('org-a', t1 + 5 * day + 1);
  assert.equal(state().status, 'disabled');
  await services.webhooks.setEnabled(BY_TEST, 'org-a', true);
  assert.deepEqual(state(), { status: 'active', consecutiveFailures: 0, failingSince: null, lastSuccessAt: t1 + 5 * day + 1, disabledReason: null });
  await services.webhooks.setEnabled(BY_TEST, 'org-a', false);
  assert.equal(state().disabledReason, 'operator');
});

test('ordering keys: one per (organization, request), distinct across organizations and requests, safe integers', () => {
  assert.equal(orderingKey('acme', 'ar_1'), orderingKey('acme', 'ar_1'));
  const keys = new Set<number>();
  for (let org = 0; org < 20; org++) {
    for (let request = 0; request < 500; request++) keys.add(orderingKey(`org-${org}`, `ar_${request}`));
  }
  assert.equal(keys.size, 10_000, 'no two of 10,000 (organization, request) pairs share a key');
  assert.notEqual(orderingKey('ab', 'c'), orderingKey('a', 'bc'), 'the separator keeps the parts apart');
  assert.notEqual(testOrderingKey('acme', 'evt_1'), orderingKey('acme', 'evt_1'), 'a test event never waits for a request');
  for (const key of keys) assert.ok(Number.isSafeInteger(key) && key >= 0, String(key));
});

/**
 * A webhook's own headers, the pure rules (src/domain/webhook-headers.ts): what register_webhook
 * and `webhook set --header` accept and refuse (naming the header, never quoting a value),
 * which values count as credentials, the stored form, and how the request as sent takes them
 * (after hookrelay's own, never overriding them).
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { deliveryHeaders } from '../../src/domain/delivery-request.ts';
import {
  checkWebhookHeaders,
  HIDDEN_HEADER_VALUE,
  isCredentialHeader,
  loggedHeaders,
  MAX_WEBHOOK_HEADERS,
  parseHeaderLine,
  parseStoredHeaders,
  reservedHeader,
  shownHeaders,
  storedHeaders,
} from '../../src/domain/webhook-headers.ts';

function refusal(input: unknown): string {
  const result = checkWebhookHeaders(input);
  assert.equal(result.ok, false, `accepted ${JSON.stringify(input)}`);
  if (result.ok) throw new Error('unreachable');
  assert.ok(result.problems.every((p) => p.name === 'headers'));
  return result.problems.map((p) => p.reason).join(' | ');
}

test('headers are an object of names to values, kept in order and as spelt; absent, null or {} is none', () => {
  assert.deepEqual(checkWebhookHeaders(undefined), { ok: true, headers: [] });
  assert.deepEqual(checkWebhookHeaders(null), { ok: true, headers: [] });
  assert.deepEqual(checkWebhookHeaders({}), { ok: true, headers: [] });
  assert.deepEqual(checkWebhookHeaders({ 'X-Environment': 'production', Authorization: 'Bearer abc.def', "x-odd!#$%&'*+.^_`|~": 'a b  c' }), {
    ok: true,
    headers: [
      ['X-Environment', 'production'],
      ['Authorization', 'Bearer abc.def'],
      ["x-odd!#$%&'*+.^_`|~", 'a b  c'],
    ],
  });
  const twenty = Object.fromEntries(Array.from({ length: MAX_WEBHOOK_HEADERS }, (_, i) => [`X-H${i}`, `v${i}`]));
  assert.equal(checkWebhookHeaders(twenty).ok, true);
});

test('reserved names are refused, case-insensitively, each named with why', () => {
  for (const name of ['webhook-id', 'Webhook-Timestamp', 'WEBHOOK-SIGNATURE', 'webhook-anything', 'Content-Type', 'content-length', 'Content-Encoding', 'Host', 'Transfer-Encoding', 'Connection', 'Keep-Alive', 'Upgrade', 'TE', 'Trailer', 'Expect', 'Proxy-Authorization', 'proxy-connection', 'User-Agent']) {
    assert.notEqual(reservedHeader(name), null, name);
    const reason = refusal({ 'X-Fine': 'ok', [name]: 'x' });
    assert.match(reason, new RegExp(`must not set "${name}": it is reserved \\(`), reason);
    assert.doesNotMatch(reason, /X-Fine/);
  }
  for (const name of ['Authorization', 'Cookie', 'X-Api-Key', 'X-Webhook', 'Contentful-Id', 'Hostname', 'Accept']) assert.equal(reservedHeader(name), null, name);
});

test('bad names, bad values, duplicates and too many are refused, naming the header and never quoting the value', () => {
  assert.match(refusal(['X-A', 'b']), /must be an object of header names to values/);
  assert.match(refusal('X-A: b'), /must be an object/);
  assert.match(refusal(Object.fromEntries(Array.from({ length: 21 }, (_, i) => [`X-H${i}`, 'v']))), /at most 20 headers; got 21/);
  assert.match(refusal({ 'X A': 'v' }), /must not have "X A" as a name: a header name is 1-100 letters, digits/);
  assert.match(refusal({ 'X-A:': 'v' }), /"X-A:" as a name/);
  assert.match(refusal({ '': 'v' }), /"" as a name/);
  assert.match(refusal({ ['X'.repeat(101)]: 'v' }), /as a name/);
  assert.match(refusal({ 'X-Tenant': 'a', 'x-tenant': 'b' }), /must not set "x-tenant" twice: header names are case-insensitive \("X-Tenant" and "x-tenant"\)/);
  assert.match(refusal({ 'X-N': 5 }), /must give "X-N" a string value$/);
  assert.match(refusal({ Authorization: null }), /must give "Authorization" a string value \(null is how answers show a hidden credential: send the value itself\)/);
  assert.match(refusal({ 'X-E': '' }), /must not give "X-E" an empty value/);
  assert.match(refusal({ 'X-L': 'v'.repeat(4097) }), /longer than 4096 characters/);
  const secret = 'Bearer s3cr3t-value';
  for (const bad of [`${secret}\r\nX-Injected: 1`, `${secret}\n`, `${secret}\u0000`, `${secret}\t`, ` ${secret}`, `${secret} `, `${secret}é`, `${secret}\u2028`, `${secret}\u007f`]) {
    const reason = refusal({ Authorization: bad });
    assert.match(reason, /must give "Authorization" a value of printable ASCII characters, without control characters and without spaces at either end/);
    assert.doesNotMatch(reason, /s3cr3t/, 'the value is never quoted');
  }
  // Every problem at once.
  const all = refusal({ Host: 'x', 'X-Ok': 'fine', 'Bad Name': 'x', 'X-Empty': '' });
  assert.equal(all.split(' | ').length, 3, all);
  // A long name is quoted as a short excerpt.
  assert.ok(refusal({ ['Proxy-' + 'x'.repeat(90)]: 'v' }).length < 200);
});

test('credential-like values: by name (authorization, cookies, key, token, secret, password, auth, signature, credential, session...) or by an auth scheme in the value', () => {
  for (const name of ['Authorization', 'proxy-authorization', 'Cookie', 'Set-Cookie', 'X-Api-Key', 'apikey', 'X-Auth-Token', 'X-Access-Token', 'X-Client-Secret', 'X-Password', 'X-Passwd', 'X-Hub-Signature', 'X-Credential', 'X-Session-Id', 'X-JWT', 'X-Authentication']) {
    assert.equal(isCredentialHeader(name, 'plain'), true, name);
  }
  for (const value of ['Bearer abc', 'basic dXNlcjpwYXNz', 'Token abc', 'Digest x=1', 'ApiKey z']) assert.equal(isCredentialHeader('X-Forward-To', value), true, value);
  for (const [name, value] of [['X-Environment', 'production'], ['X-Tenant', 'acme'], ['Accept-Language', 'en'], ['X-Bearing', 'north']] as const) {
    assert.equal(isCredentialHeader(name, value), false, name);
  }
  const headers = [['X-Environment', 'production'], ['Authorization', 'Bearer abc'], ['X-Route', 'Basic zzz']] as const;
  assert.deepEqual(shownHeaders(headers), { 'X-Environment': 'production', Authorization: null, 'X-Route': null });
  assert.deepEqual(loggedHeaders(headers), [['x-environment', 'production'], ['authorization', HIDDEN_HEADER_VALUE], ['x-route', HIDDEN_HEADER_VALUE]]);
});

test('stored as a JSON array of [name, value] pairs; what cannot be read back is no header', () => {
  const headers = [['X-B', '2'], ['X-A', '1']] as const;
  assert.equal(storedHeaders([]), null);
  assert.equal(storedHeaders(headers), '[["X-B","2"],["X-A","1"]]');
  assert.deepEqual(parseStoredHeaders(storedHeaders(headers)), headers);
  assert.deepEqual(parseStoredHeaders([['X-B', '2']]), [['X-B', '2']], 'jsonb arrives parsed');
  for (const damaged of [null, undefined, '', 'not json', '{"X-A":"1"}', 5, [['X-A']], [['X-A', 1]], [[1, 'x']]]) assert.deepEqual(parseStoredHeaders(damaged), [], JSON.stringify(damaged));
  assert.deepEqual(parseStoredHeaders('[["X-A","1"],["X-B"]]'), [['X-A', '1']]);
});

test("--header 'Name: value' splits at the first colon, spaces around the value dropped", () => {
  assert.deepEqual(parseHeaderLine('X-Environment: production'), ['X-Environment', 'production']);
  assert.deepEqual(parseHeaderLine('Authorization:Bearer a:b:c'), ['Authorization', 'Bearer a:b:c']);
  assert.deepEqual(parseHeaderLine('  X-A  :   v w  '), ['X-A', 'v w']);
  assert.equal(parseHeaderLine('no colon here'), null);
  assert.equal(parseHeaderLine(': value'), null);
});

test("the request carries the webhook's headers after hookrelay's own, which they never replace", () => {
  const base = { eventId: 'evt_1', timestampSeconds: 1_700_000_000, body: '{}', secrets: ['whsec_' + Buffer.alloc(32, 7).toString('base64')], userAgent: 'hookrelay/test' };
  const plain = deliveryHeaders(base);
  const withCustom = deliveryHeaders({ ...base, custom: [['X-Environment', 'production'], ['Authorization', 'Bearer t']] });
  assert.deepEqual(Object.keys(withCustom), [...Object.keys(plain), 'X-Environment', 'Authorization']);
  assert.equal(withCustom['X-Environment'], 'production');
  assert.equal(withCustom.Authorization, 'Bearer t');
  // A stored row that breaks today's rules (written by hand, or under older rules) cannot override or duplicate.
  const forged = deliveryHeaders({ ...base, custom: [['Webhook-Signature', 'v1,forged'], ['Content-Type', 'text/plain'], ['X-A', '1'], ['x-a', '2']] });
  assert.equal(forged['webhook-signature'], plain['webhook-signature']);
  assert.equal(forged['content-type'], 'application/json');
  assert.equal(forged['Webhook-Signature'], undefined);
  assert.deepEqual(Object.keys(forged), [...Object.keys(plain), 'X-A']);
});

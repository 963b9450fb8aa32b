/**
 * What an attempt span says of where it went (dispatch/attempt-tracing.ts): the webhook URL's
 * origin only, never its user-info, path or query, which may carry the receiver's secret.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { urlAttributes } from '../../src/dispatch/attempt-tracing.ts';
import { requestSpanName } from '../../src/api/request-tracing.ts';

test('url.full is the origin: no user-info, path, query or fragment; the port is the scheme\'s when not given', () => {
  assert.deepEqual(urlAttributes('https://user:s3cr3t@hooks.example.com:8443/T000/B000/XXXX?token=abc#f'), {
    'url.full': 'https://hooks.example.com:8443',
    'url.scheme': 'https',
    'server.address': 'hooks.example.com',
    'server.port': 8443,
  });
  assert.deepEqual(urlAttributes('http://[::1]/hook'), { 'url.full': 'http://[::1]', 'url.scheme': 'http', 'server.address': '::1', 'server.port': 80 });
  assert.equal(urlAttributes('https://hooks.example.com/x')['server.port'], 443);
  assert.deepEqual(urlAttributes('not a url'), {});
});

test('a request span is named by its method and route, or its method alone when no route matched', () => {
  assert.equal(requestSpanName('GET', '/webhook/deliveries/:id'), 'GET /webhook/deliveries/:id');
  assert.equal(requestSpanName('GET', undefined), 'GET');
  assert.equal(requestSpanName('GET', /regex/), 'GET');
});

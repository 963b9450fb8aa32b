/**
 * The browser console's own logic (console/src), without a browser: sign-in tokens, routes,
 * formatting, the API client's requests and failures, the delivery log's paging state, the
 * live refresh schedule, and the app's sign-in and routing (ConsoleApp in a fake browser). The
 * page itself is tested end to end in test/e2e/console.e2e.test.ts.
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import {
  API_VERSION,
  ApiError,
  createApiClient,
  deliveriesQueryString,
  isExpiredTokenFailure,
  isForbidden,
  isUnauthorized,
  MANAGE_PERMISSION,
  NETWORK_MESSAGE,
  problemFromResponse,
  type FetchLike,
  type RequestLike,
  type ResponseLike,
} from '../../console/src/api-client.ts';
import { describe as describeState, filtersFromForm, INITIAL_STATE, newest, older, PAGE_SIZE, queryOf, searchGoesOn, withFilters } from '../../console/src/deliveries-state.ts';
import { chartModel, MARGIN, niceCeiling, PLOT_HEIGHT } from '../../console/src/chart.ts';
import type { AppControls, ConsoleEnvironment, HeaderContent, Page, Screen } from '../../console/src/app-contract.ts';
import { ConsoleApp } from '../../console/src/console-app.ts';
import type { AttemptStats } from '../../console/src/api-client.ts';
import { deliveryActions, formatDuration, formatRelative, formatTime, localInputToIso, markInvisible, msToLocalInput, NONE, orNone, STATUS_LABELS, timesIn } from '../../console/src/format.ts';
import { createPoller, REFRESH_INTERVAL_MS } from '../../console/src/live.ts';
import { codeChallenge } from '../../console/src/oidc.ts';
import { apiBaseFromPath, deliveryHref, parseRoute, routeHash, type Route } from '../../console/src/route.ts';
import { VERIFY_SNIPPETS } from '../../console/src/snippets.ts';
import { canManageFromRole, decodePayload, identityOf, isExpired, looksLikeJwt, normalizeToken, TOKEN_KEY, tokenFromHash } from '../../console/src/token.ts';

const b64url = (value: unknown) => Buffer.from(typeof value === 'string' ? value : JSON.stringify(value)).toString('base64url');
const jwt = (payload: unknown) => `${b64url({ alg: 'HS256', typ: 'JWT' })}.${b64url(payload)}.c2lnbmF0dXJl`;

describe('token', () => {
  const token = jwt({ sub: 'ada@acme.example', org: 'acme', exp: 2_000_000_000, iat: 1_999_996_400 });

  test('the storage key is hookrelay.token', () => {
    assert.equal(TOKEN_KEY, 'hookrelay.token');
  });

  test('reads the token of a sign-in link fragment', () => {
    assert.equal(tokenFromHash(`#token=${token}`), token);
    assert.equal(tokenFromHash(`token=${token}`), token);
    assert.equal(tokenFromHash(`#token=${encodeURIComponent(token)}&next=%2Fdeliveries`), token);
    assert.equal(tokenFromHash(`#x=1&token=${token}`), token);
  });

  test('a fragment without a token is a route, not a sign-in', () => {
    assert.equal(tokenFromHash(''), null);
    assert.equal(tokenFromHash('#/webhook'), null);
    assert.equal(tokenFromHash('#/deliveries/12'), null);
    assert.equal(tokenFromHash('#token='), null);
    assert.equal(tokenFromHash('#token=%E0%A4%A'), null, 'a broken escape is no token');
  });

  test('a pasted token loses spaces, line breaks and a Bearer prefix', () => {
    assert.equal(normalizeToken(`  Bearer ${token}\n`), token);
    assert.equal(normalizeToken(`${token.slice(0, 20)}\n${token.slice(20)}`), token);
    assert.equal(normalizeToken('bearer   abc.def.ghi'), 'abc.def.ghi');
  });

  test('looksLikeJwt accepts three base64url parts only', () => {
    assert.equal(looksLikeJwt(token), true);
    assert.equal(looksLikeJwt('abc.def.'), true, 'an empty signature has the form (the API refuses it)');
    assert.equal(looksLikeJwt('abc.def'), false);
    assert.equal(looksLikeJwt('a.b.c.d'), false);
    assert.equal(looksLikeJwt('ab+c.def.ghi'), false);
    assert.equal(looksLikeJwt(''), false);
    assert.equal(looksLikeJwt(`a.${'b'.repeat(20_000)}.c`), false, 'too long');
  });

  test('decodes the payload, UTF-8 included', () => {
    assert.deepEqual(decodePayload(jwt({ sub: 'zoë@acme.example', org: 'acme', n: 1 })), { sub: 'zoë@acme.example', org: 'acme', n: 1 });
  });

  test('decodePayload never throws: null for anything but a JSON object', () => {
    assert.equal(decodePayload('not a token'), null);
    assert.equal(decodePayload(`${b64url({})}.${b64url('{not json')}.x`), null);
    assert.equal(decodePayload(`${b64url({})}.${b64url([1, 2])}.x`), null);
    assert.equal(decodePayload(`${b64url({})}.${b64url('"text"')}.x`), null);
    assert.equal(decodePayload(`${b64url({})}.${b64url('null')}.x`), null);
    assert.equal(decodePayload(`${b64url({})}.${Buffer.from([0xff, 0xfe, 0x7b]).toString('base64url')}.x`), null, 'invalid UTF-8');
    assert.equal(decodePayload(`${b64url({})}.a.x`), null, 'a base64 length that cannot be');
  });

  test('identityOf reads org, e-mail, role and exp', () => {
    assert.deepEqual(identityOf({ sub: 'ada@acme.example', org: 'acme', exp: 1_900_000_000, role: 'saas_admin' }), {
      org: 'acme',
      email: 'ada@acme.example',
      role: 'saas_admin',
      expiresAt: 1_900_000_000_000,
    });
    assert.deepEqual(identityOf({ sub: 'user-42', email: 'bob@acme.example', organization_id: 'acme' }), {
      org: 'acme',
      email: 'bob@acme.example',
      role: null,
      expiresAt: null,
    });
    assert.deepEqual(identityOf({ sub: 'user-42', org: 7, exp: '1900000000', role: '' }), { org: null, email: 'user-42', role: null, expiresAt: null });
  });

  test('isExpired from exp; a token without exp is left to the API', () => {
    const who = identityOf({ exp: 1000 });
    assert.equal(isExpired(who, 999_999), false);
    assert.equal(isExpired(who, 1_000_000), true);
    assert.equal(isExpired(identityOf({}), Number.MAX_SAFE_INTEGER), false);
  });

  test('canManageFromRole knows the built-in roles only', () => {
    assert.equal(canManageFromRole('saas_viewer'), false);
    assert.equal(canManageFromRole('saas_admin'), true);
    assert.equal(canManageFromRole('auditor'), null);
    assert.equal(canManageFromRole(null), null);
  });
});

describe('route', () => {
  test('parses the hash routes', () => {
    for (const hash of ['', '#', '#/', '#/webhook', '#/webhook/', '#/webhook?x=1']) assert.deepEqual(parseRoute(hash), { view: 'webhook' }, hash);
    assert.deepEqual(parseRoute('#/deliveries'), { view: 'deliveries' });
    assert.deepEqual(parseRoute('#/deliveries/'), { view: 'deliveries' });
    assert.deepEqual(parseRoute('#/deliveries/42'), { view: 'delivery', id: 42 });
    assert.deepEqual(parseRoute('#/deliveries/999999999999999'), { view: 'delivery', id: 999_999_999_999_999 });
    assert.deepEqual(parseRoute('#/webhook/edit'), { view: 'webhook-edit' });
    assert.deepEqual(parseRoute('#/team'), { view: 'team' });
    assert.deepEqual(parseRoute('#/audit/'), { view: 'audit' });
  });

  test('anything else is not found', () => {
    for (const hash of ['#/deliveries/0', '#/deliveries/01', '#/deliveries/-1', '#/deliveries/1e3', '#/deliveries/1234567890123456', '#/deliveries/4/x', '#/users', '#token']) {
      assert.equal(parseRoute(hash).view, 'not-found', hash);
    }
  });

  test('routeHash is the inverse of parseRoute', () => {
    for (const hash of ['#/webhook', '#/webhook/edit', '#/deliveries', '#/deliveries/7', '#/team', '#/audit']) assert.equal(routeHash(parseRoute(hash)), hash);
    assert.equal(deliveryHref(15), '#/deliveries/15');
  });

  test('the API base is the console path without console/', () => {
    assert.equal(apiBaseFromPath('/console/'), '/');
    assert.equal(apiBaseFromPath('/console/index.html'), '/');
    assert.equal(apiBaseFromPath('/console'), '/');
    assert.equal(apiBaseFromPath('/hookrelay/console/'), '/hookrelay/');
    assert.equal(apiBaseFromPath('/elsewhere/'), '/');
  });
});

describe('format', () => {
  const utc = { locale: 'en-US', timeZone: 'UTC' };

  test('times in the given locale and zone, the zone named, with UTC for the title and the ISO kept for datetime', () => {
    assert.deepEqual(formatTime('2026-11-22T08:05:09.123Z', utc), { text: 'Nov 22, 2026, 8:05:09 AM UTC', utc: '2026-11-22 08:05:09 UTC', iso: '2026-11-22T08:05:09.123Z' });
    assert.deepEqual(formatTime('2026-11-22T09:05:09.123+01:00', { locale: 'en-US', timeZone: 'America/New_York' }), {
      text: 'Nov 22, 2026, 3:05:09 AM EST',
      utc: '2026-11-22 08:05:09 UTC',
      iso: '2026-11-22T09:05:09.123+01:00',
    });
    assert.equal(formatTime('2026-11-22T08:05:09.123Z', { locale: 'de-DE', timeZone: 'Europe/Berlin' })?.text, '22.11.2026, 09:05:09 MEZ');
    assert.equal(formatTime(null), null);
    assert.equal(formatTime(undefined), null);
    assert.equal(formatTime('yesterday'), null);
  });

  test('times inside text from the API are found, each to be shown as every time is', () => {
    assert.deepEqual(timesIn('failing since 2026-11-22T08:00:00.000Z: 4 attempt(s) in a row failed; disabled if none succeeds by 2026-11-27T08:00:00Z'), [
      'failing since ',
      { time: '2026-11-22T08:00:00.000Z' },
      ': 4 attempt(s) in a row failed; disabled if none succeeds by ',
      { time: '2026-11-27T08:00:00Z' },
    ]);
    assert.deepEqual(timesIn('no time here'), ['no time here']);
    assert.deepEqual(timesIn(''), ['']);
  });

  test('status names that tell retrying from failed for good, and the actions each status takes', () => {
    assert.deepEqual(STATUS_LABELS, { pending: 'queued', failed: 'retrying', delivered: 'delivered', dead: 'failed for good' });
    assert.deepEqual(deliveryActions('failed'), { retryNow: true, replay: false });
    assert.deepEqual(deliveryActions('pending'), { retryNow: false, replay: false });
    assert.deepEqual(deliveryActions('dead'), { retryNow: false, replay: true });
    assert.deepEqual(deliveryActions('delivered'), { retryNow: false, replay: true });
  });

  test('relative times', () => {
    const now = Date.parse('2026-11-22T08:00:00Z');
    assert.equal(formatRelative('2026-11-22T08:05:00Z', now, 'en'), 'in 5 minutes');
    assert.equal(formatRelative('2026-11-22T06:00:00Z', now, 'en'), '2 hours ago');
    assert.equal(formatRelative('2026-11-22T08:00:00.400Z', now, 'en'), 'now');
    assert.equal(formatRelative('2026-11-22T08:00:30Z', now, 'en'), 'in 30 seconds');
    assert.equal(formatRelative('2026-11-25T08:00:00Z', now, 'en'), 'in 3 days');
    assert.equal(formatRelative(null, now), null);
  });

  test('durations', () => {
    assert.equal(formatDuration(0), '0 ms');
    assert.equal(formatDuration(85.4), '85 ms');
    assert.equal(formatDuration(1000), '1.0 s');
    assert.equal(formatDuration(1349), '1.3 s');
    assert.equal(formatDuration(59_960), '60.0 s');
    assert.equal(formatDuration(60_000), '1 min');
    assert.equal(formatDuration(125_000), '2 min 5 s');
    assert.equal(formatDuration(null), NONE);
    assert.equal(formatDuration(-1), NONE);
    assert.equal(formatDuration(Number.NaN), NONE);
  });

  test('datetime-local values are local time, sent as UTC', () => {
    const local = new Date(2026, 10, 22, 8, 30); // 22 November 2026, 08:30 local
    assert.equal(localInputToIso('2026-11-22T08:30'), local.toISOString());
    assert.equal(localInputToIso('2026-11-22T08:30:15'), new Date(2026, 10, 22, 8, 30, 15).toISOString());
    assert.equal(msToLocalInput(local.getTime()), '2026-11-22T08:30');
    assert.equal(localInputToIso(msToLocalInput(local.getTime())), local.toISOString());
    assert.equal(localInputToIso(''), null);
    assert.equal(localInputToIso('2026-11-22'), null);
    assert.equal(localInputToIso('2026-13-45T99:99'), null);
  });

  test('absent values', () => {
    assert.equal(orNone(null), NONE);
    assert.equal(orNone(undefined), NONE);
    assert.equal(orNone(''), NONE);
    assert.equal(orNone(0), '0');
    assert.equal(orNone(503), '503');
  });

  test('ids: invisible and direction-changing characters are marked with their code (markInvisible), so that "evt_\\u202Efdp.exe" does not read as "evt_exe.pdf"', () => {
    assert.deepEqual(markInvisible('evt_\u202efdp.exe'), ['evt_', { mark: '⟨U+202E⟩', codePoint: 0x202e }, 'fdp.exe']);
    assert.deepEqual(markInvisible('evt_7c1f'), ['evt_7c1f']);
    assert.deepEqual(markInvisible(''), ['']);
    assert.deepEqual(markInvisible('\u200b\u{e0041}'), [{ mark: '⟨U+200B⟩', codePoint: 0x200b }, { mark: '⟨U+E0041⟩', codePoint: 0xe0041 }]);
    assert.deepEqual(markInvisible('a\ud800'), ['a', { mark: '⟨U+D800⟩', codePoint: 0xd800 }]);
    // The marks and the text, read in order, name every character: nothing invisible is left.
    const parts = markInvisible('soft\u00adhyphen\x1b[2J');
    const read = parts.map((p) => (typeof p === 'string' ? p : p.mark)).join('');
    assert.equal(read, 'soft⟨U+00AD⟩hyphen⟨U+001B⟩[2J');
    assert.doesNotMatch(read, /[\u0000-\u001f\u007f-\u009f\u00ad\u200b-\u200f\u202a-\u202e\u2066-\u2069]/);
  });
});

interface Recorded {
  readonly url: string;
  readonly init: RequestLike;
}

function fakeFetch(answer: { status: number; type?: string; body?: string } | Error) {
  const calls: Recorded[] = [];
  const fetch: FetchLike = async (url, init) => {
    calls.push({ url, init });
    if (answer instanceof Error) throw answer;
    const response: ResponseLike = {
      status: answer.status,
      headers: { get: (name) => (name.toLowerCase() === 'content-type' ? (answer.type ?? 'application/json; charset=utf-8') : null) },
      text: async () => answer.body ?? '',
    };
    return response;
  };
  return { fetch, calls };
}

const TOKEN = jwt({ sub: 'ada@acme.example', org: 'acme', exp: 2_000_000_000 });

async function failureOf(promise: Promise<unknown>) {
  const err = await promise.then(
    () => assert.fail('expected a failure'),
    (e: unknown) => e,
  );
  assert.ok(err instanceof ApiError);
  return err.failure;
}

describe('api client', () => {
  test('sends Version and the bearer token, never the token in the URL', async () => {
    const { fetch, calls } = fakeFetch({ status: 200, body: '{"webhook_url":"https://x.example/"}' });
    const api = createApiClient({ fetch, base: '/', token: () => TOKEN });
    const webhook = await api.getWebhook();
    assert.equal(webhook.webhook_url, 'https://x.example/');
    assert.equal(calls.length, 1);
    const [call] = calls;
    assert.equal(call?.url, '/webhook/get_webhook');
    assert.equal(call?.init.method, 'GET');
    assert.equal(call?.init.headers.Version, API_VERSION);
    assert.equal(API_VERSION, 'v1.2');
    assert.equal(call?.init.headers.Authorization, `Bearer ${TOKEN}`);
    assert.equal(call?.init.credentials, 'omit');
    assert.equal(call?.init.body, undefined);
    assert.equal(call?.init.headers['Content-Type'], undefined);
    assert.ok(!call?.url.includes(TOKEN));
  });

  test('the API keys: list, create (with and without an expiry), revoke', async () => {
    const { fetch, calls } = fakeFetch({ status: 200, body: '{}' });
    const api = createApiClient({ fetch, base: '/', token: () => TOKEN });
    await api.listApiKeys();
    await api.createApiKey('ci', 'saas_viewer', null);
    await api.createApiKey('ci', 'saas_viewer', '90d');
    await api.revokeApiKey('ci');
    assert.deepEqual(
      calls.map((c) => [c.init.method, c.url, c.init.body ?? null]),
      [
        ['GET', '/api_keys/list_api_keys', null],
        ['POST', '/api_keys/create_api_key', '{"name":"ci","role_name":"saas_viewer"}'],
        ['POST', '/api_keys/create_api_key', '{"name":"ci","role_name":"saas_viewer","expires_in":"90d"}'],
        ['POST', '/api_keys/revoke_api_key', '{"name":"ci"}'],
      ],
    );
  });

  test('every operation: method, path, body', async () => {
    const { fetch, calls } = fakeFetch({ status: 202, body: '{}' });
    const api = createApiClient({ fetch, base: '/prefix', token: () => TOKEN });
    await api.me();
    await api.disableWebhook();
    await api.enableWebhook();
    await api.sendTest();
    await api.rotateSecret();
    await api.listDeliveries({ status: 'failed', limit: 50, cursor: 'MTI' });
    await api.listDeliveries({ request_id: 'ar 5/é', limit: 50 });
    await api.getDelivery(12);
    await api.stats('1h');
    await api.stats('24h');
    await api.replay(12);
    await api.recover('2026-11-22T00:00:00.000Z');
    await api.recover('2026-11-22T00:00:00.000Z', '2026-11-23T00:00:00.000Z');
    assert.deepEqual(
      calls.map((c) => [c.init.method, c.url, c.init.body ?? null, c.init.headers['Content-Type'] ?? null]),
      [
        ['GET', '/prefix/users/me', null, null],
        ['POST', '/prefix/webhook/disable', null, null],
        ['POST', '/prefix/webhook/enable', null, null],
        ['POST', '/prefix/webhook/test', null, null],
        ['POST', '/prefix/webhook/rotate_secret', null, null],
        ['GET', '/prefix/webhook/deliveries?status=failed&limit=50&cursor=MTI', null, null],
        ['GET', '/prefix/webhook/deliveries?request_id=ar+5%2F%C3%A9&limit=50', null, null],
        ['GET', '/prefix/webhook/deliveries/12', null, null],
        ['GET', '/prefix/webhook/stats?window=1h', null, null],
        ['GET', '/prefix/webhook/stats?window=24h', null, null],
        ['POST', '/prefix/webhook/deliveries/12/replay', null, null],
        ['POST', '/prefix/webhook/recover', '{"since":"2026-11-22T00:00:00.000Z"}', 'application/json'],
        ['POST', '/prefix/webhook/recover', '{"since":"2026-11-22T00:00:00.000Z","until":"2026-11-23T00:00:00.000Z"}', 'application/json'],
      ],
    );
    for (const c of calls) {
      assert.equal(c.init.headers.Version, 'v1.2');
      assert.equal(c.init.headers.Authorization, `Bearer ${TOKEN}`);
    }
  });

  test('the actions need webhook:manage (GET /users/me lists the caller\'s permissions)', () => {
    assert.equal(MANAGE_PERMISSION, 'webhook:manage');
  });

  test('a delivery id must be a positive integer', async () => {
    const { fetch, calls } = fakeFetch({ status: 200, body: '{}' });
    const api = createApiClient({ fetch, base: '/', token: () => TOKEN });
    assert.throws(() => api.getDelivery(0), RangeError);
    assert.throws(() => api.replay(1.5), RangeError);
    assert.throws(() => api.getDelivery(Number.NaN), RangeError);
    assert.equal(calls.length, 0);
  });

  test('the deliveries query string', () => {
    assert.equal(deliveriesQueryString({}), '');
    assert.equal(
      deliveriesQueryString({ status: 'dead', since: '2026-11-22T00:00:00.000Z', until: '2026-11-23T00:00:00.000Z', limit: 50, cursor: 'MTIz' }),
      '?status=dead&since=2026-11-22T00%3A00%3A00.000Z&until=2026-11-23T00%3A00%3A00.000Z&limit=50&cursor=MTIz',
    );
  });

  test('a problem+json answer becomes its title, detail and code', async () => {
    const problem = {
      type: 'urn:hookrelay:problem:validation_failed',
      title: 'The request is invalid',
      status: 422,
      detail: 'event evt_1 already has a pending delivery (3)',
      code: 'validation_failed',
      instance: '/webhook/deliveries/2/replay',
    };
    const { fetch } = fakeFetch({ status: 422, type: 'application/problem+json', body: JSON.stringify(problem) });
    const api = createApiClient({ fetch, base: '/', token: () => TOKEN });
    assert.deepEqual(await failureOf(api.replay(2)), { kind: 'problem', status: 422, title: problem.title, detail: problem.detail, code: 'validation_failed' });
  });

  test('a problem that names invalid parameters says what was wrong with each', () => {
    const body = JSON.stringify({
      title: 'The request is invalid',
      status: 422,
      detail: 'the query is invalid',
      code: 'validation_failed',
      invalid_params: [
        { name: 'request_id', reason: 'must be an anticipation request id: 1 to 200 characters, no control characters' },
        { name: 'limit', reason: 'must be an integer from 1 to 200' },
        { name: 42, reason: 'not a parameter' },
      ],
    });
    assert.deepEqual(problemFromResponse(422, 'application/problem+json', body), {
      kind: 'problem',
      status: 422,
      title: 'The request is invalid',
      detail: 'the query is invalid: request_id must be an anticipation request id: 1 to 200 characters, no control characters; limit must be an integer from 1 to 200.',
      code: 'validation_failed',
      // Each field's reason as well, for a form to show beside the field (fields.ts).
      invalidParams: [
        { name: 'request_id', reason: 'must be an anticipation request id: 1 to 200 characters, no control characters' },
        { name: 'limit', reason: 'must be an integer from 1 to 200' },
      ],
    });
  });

  test('an answer that is not problem+json still says what happened', async () => {
    const { fetch } = fakeFetch({ status: 502, type: 'text/html', body: '<html><b>Bad gateway</b></html>' });
    const api = createApiClient({ fetch, base: '/', token: () => TOKEN });
    const failure = await failureOf(api.getWebhook());
    assert.deepEqual(failure, { kind: 'problem', status: 502, title: 'HTTP 502', detail: 'The daemon answered 502 without an explanation.', code: null });
    assert.deepEqual(problemFromResponse(500, 'application/problem+json', '{broken'), { kind: 'problem', status: 500, title: 'HTTP 500', detail: 'The daemon answered 500 without an explanation.', code: null });
  });

  test('a success that is not JSON is a failure', async () => {
    const { fetch } = fakeFetch({ status: 200, type: 'text/html', body: '<html>' });
    const api = createApiClient({ fetch, base: '/', token: () => TOKEN });
    const failure = await failureOf(api.getWebhook());
    assert.equal(failure.kind, 'problem');
  });

  test('a network failure says the daemon cannot be reached', async () => {
    const { fetch } = fakeFetch(new TypeError('Failed to fetch'));
    const api = createApiClient({ fetch, base: '/', token: () => TOKEN });
    const failure = await failureOf(api.listDeliveries({}));
    assert.deepEqual(failure, { kind: 'network', message: NETWORK_MESSAGE });
    assert.match(NETWORK_MESSAGE, /cannot be reached/);
  });

  test('without a token nothing is sent', async () => {
    const { fetch, calls } = fakeFetch({ status: 200, body: '{}' });
    const api = createApiClient({ fetch, base: '/', token: () => null });
    const failure = await failureOf(api.getWebhook());
    assert.equal(calls.length, 0);
    assert.equal(isUnauthorized(failure), true);
    assert.equal(isExpiredTokenFailure(failure), false);
  });

  test('an expired token is told apart from another 401', () => {
    const expired = problemFromResponse(401, 'application/problem+json', JSON.stringify({ title: 'Invalid access token', detail: 'The token has expired; issue a new one', code: 'invalid_token' }));
    const unverifiable = problemFromResponse(401, 'application/problem+json', JSON.stringify({ title: 'Invalid access token', detail: 'The token could not be verified', code: 'invalid_token' }));
    const forbidden = problemFromResponse(403, 'application/problem+json', JSON.stringify({ title: 'Forbidden', detail: 'Your role (saas_viewer) does not allow this operation', code: 'forbidden' }));
    assert.equal(isExpiredTokenFailure(expired), true);
    assert.equal(isExpiredTokenFailure(unverifiable), false);
    assert.equal(isUnauthorized(unverifiable), true);
    assert.equal(isForbidden(forbidden), true);
    assert.equal(isForbidden(unverifiable), false);
    assert.equal(isExpiredTokenFailure({ kind: 'network', message: 'expired' }), false);
  });
});

describe('delivery log state', () => {
  test('the form values become filters; unknown values are dropped', () => {
    assert.deepEqual(filtersFromForm({ status: '', since: '', until: '', requestId: '' }), { status: null, since: null, until: null, requestId: null });
    assert.deepEqual(filtersFromForm({ status: 'sent', since: 'x', until: '', requestId: '   ' }), { status: null, since: null, until: null, requestId: null });
    const f = filtersFromForm({ status: 'dead', since: '2026-11-22T08:00', until: '2026-11-23T08:00', requestId: ' ar_5e21d9 ' });
    assert.equal(f.status, 'dead');
    assert.equal(f.requestId, 'ar_5e21d9', 'spaces around the id dropped');
    assert.equal(f.since, new Date(2026, 10, 22, 8, 0).toISOString());
    assert.equal(f.until, new Date(2026, 10, 23, 8, 0).toISOString());
  });

  test('keyset paging: Older follows next_cursor, Newest and new filters go back to the first page', () => {
    const filtered = withFilters(INITIAL_STATE, { status: 'failed', since: null, until: null, requestId: null });
    assert.deepEqual(queryOf(filtered), { limit: PAGE_SIZE, status: 'failed' });
    const second = older(filtered, 'MTAw');
    assert.deepEqual(second, { filters: filtered.filters, cursor: 'MTAw', page: 2 });
    assert.deepEqual(queryOf(second), { limit: PAGE_SIZE, status: 'failed', cursor: 'MTAw' });
    const third = older(second, 'NTA');
    assert.equal(third.page, 3);
    assert.deepEqual(newest(third), { filters: filtered.filters, cursor: null, page: 1 });
    assert.deepEqual(withFilters(third, INITIAL_STATE.filters), INITIAL_STATE);
  });

  test('the caption says what is shown', () => {
    assert.equal(describeState(INITIAL_STATE), 'Deliveries, newest first (all; page 1)');
    const state = older(withFilters(INITIAL_STATE, { status: 'dead', since: '2026-11-22T00:00:00.000Z', until: null, requestId: null }), 'MQ');
    assert.equal(describeState(state, { locale: 'en-US', timeZone: 'UTC' }), 'Deliveries, newest first (status failed for good, since Nov 22, 2026, 12:00:00 AM UTC; page 2)');
    assert.equal(describeState(withFilters(INITIAL_STATE, { status: null, since: null, until: null, requestId: 'ar_7' })), 'Deliveries, newest first (request ar_7; page 1)');
  });

  test('a search by request is sent as request_id, with the other filters', () => {
    const state = withFilters(INITIAL_STATE, { status: 'failed', since: '2026-11-22T00:00:00.000Z', until: null, requestId: 'ar_7' });
    assert.deepEqual(queryOf(state), { limit: PAGE_SIZE, status: 'failed', since: '2026-11-22T00:00:00.000Z', request_id: 'ar_7' });
    assert.deepEqual(queryOf(older(state, 'OTk')), { limit: PAGE_SIZE, status: 'failed', since: '2026-11-22T00:00:00.000Z', request_id: 'ar_7', cursor: 'OTk' });
  });

  test('a short page of a search by request that has an older page means the search goes on', () => {
    const search = withFilters(INITIAL_STATE, { status: null, since: null, until: null, requestId: 'ar_7' });
    assert.equal(searchGoesOn(search, 0, 'MTA'), true);
    assert.equal(searchGoesOn(search, PAGE_SIZE - 1, 'MTA'), true);
    assert.equal(searchGoesOn(search, PAGE_SIZE, 'MTA'), false, 'a full page: ordinary paging');
    assert.equal(searchGoesOn(search, 3, null), false, 'the end of the log');
    assert.equal(searchGoesOn(INITIAL_STATE, 0, 'MTA'), false, 'not a search by request');
  });
});

describe('live refresh', () => {
  /** Timers run by hand: `fire()` runs the pending one. */
  function manualTimers() {
    const pending = new Map<number, { fn: () => void; ms: number }>();
    let next = 0;
    return {
      setTimer: (fn: () => void, ms: number) => {
        pending.set(++next, { fn, ms });
        return next;
      },
      clearTimer: (handle: unknown) => void pending.delete(handle as number),
      pending,
      async fire(): Promise<void> {
        const [entry] = pending;
        assert.ok(entry, 'a timer is pending');
        pending.delete(entry[0]);
        entry[1].fn();
        await new Promise((resolve) => setImmediate(resolve));
      },
    };
  }

  test('refreshes every 3 seconds while visible, and not while hidden', async () => {
    assert.equal(REFRESH_INTERVAL_MS, 3000);
    const timers = manualTimers();
    let visible = true;
    let runs = 0;
    const poller = createPoller({ run: async () => void runs++, isVisible: () => visible, ...timers });
    poller.start();
    assert.equal(runs, 0, 'the first refresh is one interval away');
    assert.deepEqual([...timers.pending.values()].map((t) => t.ms), [3000]);
    await timers.fire();
    assert.equal(runs, 1);
    visible = false;
    await timers.fire();
    assert.equal(runs, 1, 'hidden: the turn is skipped');
    assert.equal(timers.pending.size, 1, 'but the schedule goes on');
    visible = true;
    poller.now();
    await new Promise((resolve) => setImmediate(resolve));
    assert.equal(runs, 2, 'visible again: at once');
    assert.equal(timers.pending.size, 1, 'one schedule, not two');
    poller.stop();
    assert.equal(timers.pending.size, 0);
    poller.now();
    assert.equal(runs, 2, 'stopped stays stopped');
  });

  test('refreshes never overlap, and a failed one does not stop the schedule', async () => {
    const timers = manualTimers();
    let release: () => void = () => {};
    let runs = 0;
    const poller = createPoller({
      run: () => {
        runs++;
        return new Promise<void>((resolve, reject) => {
          release = runs === 1 ? resolve : () => reject(new Error('refresh failed'));
        });
      },
      isVisible: () => true,
      ...timers,
    });
    poller.start();
    await timers.fire();
    assert.equal(runs, 1);
    assert.equal(timers.pending.size, 0, 'nothing scheduled while a refresh runs');
    poller.now();
    assert.equal(runs, 1, 'no second refresh meanwhile');
    release();
    await new Promise((resolve) => setImmediate(resolve));
    assert.equal(timers.pending.size, 1);
    await timers.fire();
    assert.equal(runs, 2);
    release();
    await new Promise((resolve) => setImmediate(resolve));
    assert.equal(timers.pending.size, 1, 'scheduled again after a failure');
    poller.stop();
  });
});

describe('verification snippets', () => {
  test('JavaScript, Python and Go with the Standard Webhooks libraries', () => {
    const byLanguage = new Map(VERIFY_SNIPPETS.map((s) => [s.language, s.code]));
    assert.deepEqual([...byLanguage.keys()], ['JavaScript', 'Python', 'Go']);
    assert.match(byLanguage.get('JavaScript') ?? '', /from "standardwebhooks"[\s\S]*new Webhook\(secret\)\.verify\(payload, headers\)/);
    assert.match(byLanguage.get('Python') ?? '', /from standardwebhooks\.webhooks import Webhook[\s\S]*Webhook\(secret\)\.verify\(payload, headers\)/);
    assert.match(byLanguage.get('Go') ?? '', /"github\.com\/standard-webhooks\/standard-webhooks\/libraries\/go"[\s\S]*standardwebhooks\.NewWebhook\(secret\)[\s\S]*wh\.Verify\(payload, headers\)/);
  });
});

describe('the chart of attempts', () => {
  /** A window's stats: `counts` maps bucket numbers to [succeeded, failed]. */
  function stats(window: '1h' | '24h', counts: Record<number, [number, number]>, first = '2026-11-22T08:00:00Z'): AttemptStats {
    const bucketSeconds = window === '1h' ? 60 : 900;
    const n = window === '1h' ? 60 : 96;
    const from = Date.parse(first);
    const buckets = Array.from({ length: n }, (_, i) => ({ start: new Date(from + i * bucketSeconds * 1000).toISOString(), succeeded: counts[i]?.[0] ?? 0, failed: counts[i]?.[1] ?? 0 }));
    return {
      window,
      bucket_seconds: bucketSeconds,
      from: buckets[0]!.start,
      until: new Date(from + n * bucketSeconds * 1000).toISOString(),
      succeeded: buckets.reduce((s, b) => s + b.succeeded, 0),
      failed: buckets.reduce((s, b) => s + b.failed, 0),
      buckets,
    };
  }
  const utc = { locale: 'en-GB', timeZone: 'UTC' };

  test('the scale ends on 1, 2 or 5 times a power of ten, at least the largest bar', () => {
    const cases: Array<[number, number]> = [[0, 1], [0.5, 1], [1, 1], [2, 2], [3, 5], [5, 5], [7, 10], [10, 10], [11, 20], [49, 50], [51, 100], [101, 200], [999, 1000], [1001, 2000], [4200, 5000]];
    for (const [n, expected] of cases) assert.equal(niceCeiling(n), expected, `niceCeiling(${n})`);
  });

  test('bars stack the failed on the succeeded, scaled to the plot; one per bucket, side by side with a gap', () => {
    const m = chartModel(stats('1h', { 0: [1, 0], 7: [4, 3], 59: [0, 2] }), { width: 640, ...utc });
    assert.deepEqual([m.width, m.height, m.plot], [640, MARGIN.top + PLOT_HEIGHT + MARGIN.bottom, { x: MARGIN.left, y: MARGIN.top, width: 640 - MARGIN.left - MARGIN.right, height: PLOT_HEIGHT }]);
    assert.equal(m.bars.length, 60);
    assert.equal(m.yMax, 10, 'the busiest minute has 7');
    const slot = m.plot.width / 60;
    const bottom = MARGIN.top + PLOT_HEIGHT;
    const close = (a: number, b: number, what: string) => assert.ok(Math.abs(a - b) < 1e-9, `${what}: ${a} is not ${b}`);
    const b7 = m.bars[7]!;
    close(b7.x, MARGIN.left + 7 * slot + 0.5, 'x');
    close(b7.width, slot - 1, 'width');
    close(b7.okHeight, 0.4 * PLOT_HEIGHT, 'succeeded height');
    close(b7.okY, bottom - 0.4 * PLOT_HEIGHT, 'succeeded y');
    close(b7.failHeight, 0.3 * PLOT_HEIGHT, 'failed height');
    close(b7.failY, bottom - 0.7 * PLOT_HEIGHT, 'failed on top');
    assert.deepEqual([m.bars[1]!.okHeight, m.bars[1]!.failHeight], [0, 0], 'an empty minute');
    close(m.bars[59]!.failY + m.bars[59]!.failHeight, bottom, 'failed alone starts at the bottom');
    assert.deepEqual(m.yTicks.map((t) => [t.label, t.at]), [['0', bottom], ['5', bottom - PLOT_HEIGHT / 2], ['10', MARGIN.top]]);
    assert.deepEqual(chartModel(stats('1h', { 3: [0, 1] }), { width: 640, ...utc }).yTicks.map((t) => t.label), ['0', '1'], 'no half of one');
  });

  test('time labels fall on round minutes or hours, as many as fit: fewer on a phone', () => {
    const wide = chartModel(stats('1h', {}), { width: 640, ...utc });
    assert.deepEqual(wide.xTicks.map((t) => t.label), ['8:00', '8:10', '8:20', '8:30', '8:40', '8:50']);
    assert.deepEqual(wide.xTicks.map((t) => t.anchor), ['middle', 'middle', 'middle', 'middle', 'middle', 'middle']);
    assert.ok(wide.xTicks.every((t, i) => i === 0 || t.at - wide.xTicks[i - 1]!.at >= 64), 'at least 64 px apart');
    const phone = chartModel(stats('1h', {}), { width: 350, ...utc });
    assert.deepEqual(phone.xTicks.map((t) => t.label), ['8:00', '8:15', '8:30', '8:45']);
    // A label near an edge ends (or starts) at the chart's edge rather than past it.
    const late = chartModel(stats('1h', {}, '2026-11-22T08:02:00Z'), { width: 350, locale: 'en-US', timeZone: 'UTC' });
    assert.deepEqual(late.xTicks.map((t) => [t.label, t.anchor]), [['8:15 AM', 'middle'], ['8:30 AM', 'middle'], ['8:45 AM', 'middle'], ['9:00 AM', 'end']]);
    const early = chartModel(stats('1h', {}, '2026-11-22T08:00:00Z'), { width: 350, locale: 'en-US', timeZone: 'UTC' });
    assert.equal(early.xTicks[0]?.anchor, 'middle', 'the first label fits in the margin');
    const day = chartModel(stats('24h', {}), { width: 640, ...utc });
    assert.deepEqual(day.xTicks.map((t) => t.label), ['9:00', '12:00', '15:00', '18:00', '21:00', '0:00', '3:00', '6:00']);
    assert.equal(day.bars.length, 96);
    assert.equal(chartModel(stats('1h', {}), { width: 12, ...utc }).width, 160, 'never narrower than 160 px');
  });

  test('the sentence and the table of figures: totals, the busiest bucket, the buckets that had attempts', () => {
    const m = chartModel(stats('1h', { 0: [1, 0], 7: [4, 3], 59: [0, 2] }), { width: 640, ...utc });
    assert.equal(m.summary, 'In the last hour: 5 attempts succeeded, 5 failed. Busiest minute: 8:07, 7 attempts.');
    assert.deepEqual(m.rows, [
      { start: '2026-11-22T08:00:00.000Z', label: '8:00', succeeded: 1, failed: 0 },
      { start: '2026-11-22T08:07:00.000Z', label: '8:07', succeeded: 4, failed: 3 },
      { start: '2026-11-22T08:59:00.000Z', label: '8:59', succeeded: 0, failed: 2 },
    ]);
    const day = chartModel(stats('24h', { 2: [1, 0] }), { width: 640, ...utc });
    assert.equal(day.summary, 'In the last day: 1 attempt succeeded, 0 failed. Busiest quarter hour: 8:30–8:45, 1 attempt.');
    assert.deepEqual(day.rows.map((r) => r.label), ['8:30–8:45']);
    const none = chartModel(stats('1h', {}), { width: 640, ...utc });
    assert.equal(none.summary, 'In the last hour: 0 attempts succeeded, 0 failed.');
    assert.deepEqual([none.rows, none.yMax], [[], 1]);
    assert.ok(none.bars.every((b) => b.okHeight === 0 && b.failHeight === 0));
  });
});

/** Epoch ms the fake browser's clock starts at; tokens expire relative to it. */
const NOW = 1_900_000_000_000;
const tokenFor = (email: string, lifetimeSeconds: number, extra: Record<string, unknown> = {}) => jwt({ sub: email, org: 'acme', exp: NOW / 1000 + lifetimeSeconds, ...extra });
const ADA = tokenFor('ada@acme.example', 3600);
const ADMIN_ME = { email: 'ada@acme.example', organization_id: 'acme', role: 'saas_admin', permissions: ['webhook:read', 'webhook:manage'] };
const problem = (status: number, detail: string) => ({ status, type: 'application/problem+json', body: JSON.stringify({ title: 'Invalid access token', detail, code: 'invalid_token' }) });
const settle = () => new Promise((resolve) => setImmediate(resolve));
/** Settles until `done` holds (WebCrypto's digest answers from the thread pool, after more than one turn), at most 200 turns. */
async function settleUntil(done: () => boolean): Promise<void> {
  for (let turn = 0; turn < 200 && !done(); turn++) await new Promise((resolve) => setTimeout(resolve, 1));
}

/** The sign-in page of a daemon without console.oidc: links and pasted tokens only. */
const NO_PROVIDER = { kind: 'none' } as const;

type Answer = { status: number; type?: string; body?: string } | Error;

/**
 * A browser for ConsoleApp under Node: an address bar with a history (navigate, Back and Forward
 * fire hashchange; replaceHash rewrites the current entry and fires nothing, as
 * history.replaceState does), the tab's storage, a clock whose timers run when `advance` passes
 * them, a daemon answering GET /users/me with `me`, and a screen that records the pages shown.
 * `onView` plays the view a page starts (a live refresh, for instance).
 */
function fakeBrowser(options: { hash?: string; stored?: string; me?: Answer; onView?: (app: AppControls, route: Route) => void; signInSettings?: unknown; search?: string; kept?: Record<string, string>; token?: Answer; origin?: string } = {}) {
  const entries = [options.hash ?? '#/webhook'];
  let at = 0;
  let now = NOW;
  const timers = new Map<number, { fn: () => void; due: number }>();
  let timerIds = 0;
  const tab = { stored: options.stored ?? null, visible: true, viewsEnded: 0, viewStateForgotten: 0, left: [] as string[], kept: new Map<string, string>(Object.entries(options.kept ?? {})), signInSettingsAsked: 0, search: options.search ?? '' };
  const requests: Recorded[] = [];
  const pages: Page[] = [];
  const headers: HeaderContent[] = [];
  const env: ConsoleEnvironment = {
    fetch: async (url, init) => {
      // How the page may sign in, asked once at start: the tests of sign-in through the provider look at it.
      if (url === '/console/sign-in.json') {
        tab.signInSettingsAsked += 1;
        return { status: 200, headers: { get: () => 'application/json' }, text: async () => JSON.stringify(options.signInSettings ?? { provider: null }) };
      }
      requests.push({ url, init });
      const answer =
        url === '/users/me'
          ? (options.me ?? { status: 200, body: JSON.stringify(ADMIN_ME) })
          : url === PROVIDER_SETTINGS.provider.token_endpoint
            ? (options.token ?? { status: 500, body: '{}' })
            : { status: 200, body: '{}' };
      if (answer instanceof Error) throw answer;
      return { status: answer.status, headers: { get: (name) => (name.toLowerCase() === 'content-type' ? (answer.type ?? 'application/json') : null) }, text: async () => answer.body ?? '' };
    },
    apiBase: '/',
    address: {
      get hash() {
        return entries[at] ?? '';
      },
      get search() {
        return tab.search;
      },
      origin: options.origin ?? 'http://127.0.0.1:8080',
      replaceHash: (hash) => void (entries[at] = hash),
      replaceSearchAndHash: (search, hash) => {
        tab.search = search;
        entries[at] = hash;
      },
      leaveFor: (url) => void tab.left.push(url),
    },
    storage: { get: () => tab.stored, set: (token) => void (tab.stored = token), clear: () => void (tab.stored = null) },
    tabStore: { get: (key) => tab.kept.get(key) ?? null, set: (key, value) => void tab.kept.set(key, value), remove: (key) => void tab.kept.delete(key) },
    clock: {
      now: () => now,
      setTimer: (fn, ms) => {
        timers.set(++timerIds, { fn, due: now + ms });
        return timerIds;
      },
      clearTimer: (handle) => void timers.delete(handle as number),
    },
    isVisible: () => tab.visible,
  };
  const screen: Screen = {
    show(page, app) {
      pages.push(page);
      if (page.kind !== 'view') return () => {};
      options.onView?.(app, page.route);
      return () => void tab.viewsEnded++;
    },
    showHeader: (header) => void headers.push(header),
    forgetViewState: () => void tab.viewStateForgotten++,
  };
  const app = new ConsoleApp(env, screen);
  return {
    app,
    tab,
    requests,
    pages,
    headers,
    timers,
    get page(): Page | undefined {
      return pages.at(-1);
    },
    get history(): readonly string[] {
      return [...entries];
    },
    get hash(): string {
      return env.address.hash;
    },
    /** A click on a link, or a hash typed into the address bar: a new history entry. */
    navigate(hash: string): void {
      entries.splice(at + 1, Infinity, hash);
      at += 1;
      app.hashChanged();
    },
    back(): void {
      assert.ok(at > 0, 'there is a previous entry');
      at -= 1;
      app.hashChanged();
    },
    forward(): void {
      assert.ok(at < entries.length - 1, 'there is a next entry');
      at += 1;
      app.hashChanged();
    },
    /** Moves the clock on by `ms`, running the timers due by then in their order. */
    async advance(ms: number): Promise<void> {
      const until = now + ms;
      for (;;) {
        const due = [...timers].filter(([, t]) => t.due <= until).sort(([, a], [, b]) => a.due - b.due)[0];
        if (due === undefined) break;
        timers.delete(due[0]);
        now = due[1].due;
        due[1].fn();
        await settle();
      }
      now = until;
    },
  };
}

/** A browser signed in as Ada (an admin) on `hash`, her view shown. */
async function signedIn(options: Parameters<typeof fakeBrowser>[0] = {}) {
  const browser = fakeBrowser({ stored: ADA, ...options });
  browser.app.start();
  await settle();
  assert.equal(browser.page?.kind, 'view');
  return browser;
}

const viewRoute = (page: Page | undefined): Route | undefined => (page?.kind === 'view' ? page.route : undefined);

describe('sign-in (ConsoleApp)', () => {
  test('a sign-in link: the token is stored and gone from the address bar and its history before anything else; GET /users/me then says who and what for', async () => {
    const browser = fakeBrowser({ hash: `#token=${encodeURIComponent(ADA)}` });
    browser.app.start();
    assert.equal(browser.hash, '#/webhook');
    assert.deepEqual(browser.history, ['#/webhook'], 'the link entry is replaced, not pushed');
    assert.equal(browser.tab.stored, ADA);
    assert.deepEqual(browser.pages, [{ kind: 'signing-in' }], 'no view before the role is known');
    assert.deepEqual(
      browser.requests.map((r) => [r.url, r.init.headers.Authorization]),
      [['/users/me', `Bearer ${ADA}`]],
    );
    await settle();
    const route = { view: 'webhook' } as const;
    assert.deepEqual(browser.page, { kind: 'view', route, header: { route, org: 'acme', email: 'ada@acme.example', role: 'saas_admin' } });
    assert.equal(browser.app.canManage(), true);
  });

  test('GET /users/me without webhook:manage makes the session read-only; its e-mail, organization and role are the header\'s', async () => {
    const me = { email: 'vic@acme.example', organization_id: 'acme-eu', role: 'saas_viewer', permissions: ['webhook:read'] };
    const browser = await signedIn({ me: { status: 200, body: JSON.stringify(me) } });
    assert.equal(browser.app.canManage(), false);
    assert.deepEqual(browser.page?.kind === 'view' && browser.page.header, { route: { view: 'webhook' }, org: 'acme-eu', email: 'vic@acme.example', role: 'saas_viewer' });
  });

  test('permits(): what GET /users/me listed (the team page needs users:manage, the audit page audit:read); before it answers, the same as canManage()', async () => {
    const me = { email: 'may@acme.example', organization_id: 'acme', role: 'webhook_admin', permissions: ['webhook:read', 'webhook:manage', 'roles:read'] };
    const browser = await signedIn({ me: { status: 200, body: JSON.stringify(me) } });
    assert.equal(browser.app.canManage(), true);
    assert.equal(browser.app.permits('webhook:manage'), true);
    assert.equal(browser.app.permits('users:manage'), false);
    assert.equal(browser.app.permits('audit:read'), false);
    const unknown = await signedIn({ me: { status: 404, body: '' } });
    assert.equal(unknown.app.permits('users:manage'), unknown.app.canManage());
  });

  test('a fresh load signs in with the stored token; without one, the sign-in page, with no notice', async () => {
    const browser = await signedIn({ hash: '#/deliveries' });
    assert.deepEqual(viewRoute(browser.page), { view: 'deliveries' });
    const fresh = fakeBrowser();
    fresh.app.start();
    assert.deepEqual(fresh.pages, [{ kind: 'sign-in', notice: null, provider: NO_PROVIDER }]);
    assert.equal(fresh.requests.length, 0);
  });

  test('an expired link shows the expired page: nothing stored, nothing sent, the token gone from the address bar all the same', () => {
    const browser = fakeBrowser({ hash: `#token=${tokenFor('ada@acme.example', -1)}` });
    browser.app.start();
    assert.deepEqual(browser.pages, [{ kind: 'sign-in', notice: 'expired', provider: NO_PROVIDER }]);
    assert.equal(browser.tab.stored, null);
    assert.equal(browser.requests.length, 0);
    assert.deepEqual(browser.history, ['#/webhook']);
  });

  test('a token that expires while the page is open signs out then, with the expired page', async () => {
    const browser = await signedIn({ stored: tokenFor('ada@acme.example', 60) });
    await browser.advance(60_000);
    assert.equal(browser.page?.kind, 'view', 'still signed in at exp itself: the timer waits a little longer');
    await browser.advance(250);
    assert.deepEqual(browser.page, { kind: 'sign-in', notice: 'expired', provider: NO_PROVIDER });
    assert.equal(browser.tab.stored, null);
    assert.equal(browser.tab.viewsEnded, 1);
    assert.equal(browser.tab.viewStateForgotten, 1);
    assert.equal(browser.timers.size, 0);
  });

  test('a 401 from GET /users/me signs out, saying why: expired, or refused with the API\'s reason', async () => {
    const expired = fakeBrowser({ stored: ADA, me: problem(401, 'The token has expired; ask for a new one') });
    expired.app.start();
    await settle();
    assert.deepEqual(expired.pages, [{ kind: 'signing-in' }, { kind: 'sign-in', notice: 'expired', provider: NO_PROVIDER }]);
    assert.equal(expired.tab.stored, null);
    const refused = fakeBrowser({ stored: ADA, me: problem(401, 'The token could not be verified') });
    refused.app.start();
    await settle();
    assert.deepEqual(refused.page, { kind: 'sign-in', notice: { refused: 'The token could not be verified' }, provider: NO_PROVIDER });
  });

  test('a 401 from a view\'s call signs out; a 403 makes the session read-only once and redraws the header; other failures are the view\'s to show', async () => {
    const browser = await signedIn({ me: new Error('connection refused') });
    assert.equal(browser.page?.kind === 'view' && browser.page.header.role, null, 'no role claim, no answer from /users/me');
    assert.equal(browser.app.canManage(), true);
    let turnedReadOnly = 0;
    browser.app.onReadOnly(() => turnedReadOnly++);
    const forbidden = new ApiError({ kind: 'problem', status: 403, title: 'Forbidden', detail: 'Your role does not allow this operation', code: 'forbidden' });
    assert.equal(browser.app.failed(forbidden), 'show');
    assert.equal(browser.app.failed(forbidden), 'show');
    assert.equal(browser.app.canManage(), false);
    assert.equal(turnedReadOnly, 1);
    assert.deepEqual(browser.headers, [{ route: { view: 'webhook' }, org: 'acme', email: 'ada@acme.example', role: 'viewer (read-only)' }]);
    assert.equal(browser.app.failed(new ApiError({ kind: 'network', message: NETWORK_MESSAGE })), 'show');
    assert.equal(browser.app.failed(new TypeError('a bug')), 'show');
    assert.equal(browser.page?.kind, 'view');
    const unauthorized = new ApiError({ kind: 'problem', status: 401, title: 'Invalid access token', detail: 'The token has been revoked', code: 'invalid_token' });
    assert.equal(browser.app.failed(unauthorized), 'signed-out');
    assert.deepEqual(browser.page, { kind: 'sign-in', notice: { refused: 'The token has been revoked' }, provider: NO_PROVIDER });
    assert.equal(browser.tab.stored, null);
    assert.equal(browser.tab.viewsEnded, 1);
  });

  test('a pasted token: what is not one says so; a good one is cleaned up, kept, and leaves an unknown page for the webhook', async () => {
    const browser = fakeBrowser({ hash: '#/nope' });
    browser.app.start();
    browser.app.submitToken('my password');
    assert.deepEqual(browser.page, { kind: 'sign-in', notice: 'malformed', provider: NO_PROVIDER });
    browser.app.submitToken(`Bearer ${ADA.slice(0, 30)}\n${ADA.slice(30)}\n`);
    assert.equal(browser.tab.stored, ADA);
    assert.deepEqual(browser.history, ['#/webhook']);
    await settle();
    assert.deepEqual(viewRoute(browser.page), { view: 'webhook' });
    const onDelivery = fakeBrowser({ hash: '#/deliveries/7' });
    onDelivery.app.start();
    onDelivery.app.submitToken(ADA);
    await settle();
    assert.deepEqual(viewRoute(onDelivery.page), { view: 'delivery', id: 7 }, 'a known page stays');
  });

  test('Sign out forgets the token and what the views kept; an answer for the session signed out of changes nothing', async () => {
    const browser = await signedIn();
    browser.app.signOut();
    assert.deepEqual(browser.page, { kind: 'sign-in', notice: null, provider: NO_PROVIDER });
    assert.equal(browser.tab.stored, null);
    assert.equal(browser.tab.viewStateForgotten, 1);
    assert.equal(browser.tab.viewsEnded, 1);
    const hasty = fakeBrowser({ stored: ADA });
    hasty.app.start();
    hasty.app.signOut();
    await settle();
    assert.deepEqual(hasty.pages, [{ kind: 'signing-in' }, { kind: 'sign-in', notice: null, provider: NO_PROVIDER }], 'GET /users/me answered after the sign-out');
  });
});

describe('routing (ConsoleApp)', () => {
  test('each hash shows its view, in the header\'s navigation too; the empty hash is the default page (the webhook), an unknown one the not-found page', async () => {
    const browser = await signedIn();
    const cases: ReadonlyArray<readonly [string, Route]> = [
      ['#/deliveries', { view: 'deliveries' }],
      ['#/deliveries/42', { view: 'delivery', id: 42 }],
      ['#/webhook', { view: 'webhook' }],
      ['', { view: 'webhook' }],
      ['#/', { view: 'webhook' }],
      ['#/deliveries/0', { view: 'not-found', path: '/deliveries/0' }],
      ['#/users', { view: 'not-found', path: '/users' }],
    ];
    for (const [hash, route] of cases) {
      browser.navigate(hash);
      assert.deepEqual(browser.page?.kind === 'view' && [browser.page.route, browser.page.header.route], [route, route], hash);
    }
    assert.equal(browser.tab.viewsEnded, cases.length, 'each view is ended when the next is shown');
    assert.equal(browser.requests.length, 1, 'a page change does not ask who the token is again');
  });

  test('signed out, every hash shows the sign-in page', () => {
    const browser = fakeBrowser();
    browser.app.start();
    for (const hash of ['#/deliveries', '#/deliveries/42', '#/nope']) {
      browser.navigate(hash);
      assert.deepEqual(browser.page, { kind: 'sign-in', notice: null, provider: NO_PROVIDER }, hash);
    }
  });

  test('Back and Forward show each entry\'s page again; only the view shown refreshes itself, and a page made visible again refreshes at once', async () => {
    const refreshes: string[] = [];
    const browser = await signedIn({ onView: (app, route) => app.live(async () => void refreshes.push(route.view)) });
    browser.navigate('#/deliveries');
    browser.navigate('#/deliveries/42');
    browser.back();
    browser.back();
    browser.forward();
    assert.deepEqual(browser.pages.slice(1).map(viewRoute), [
      { view: 'webhook' },
      { view: 'deliveries' },
      { view: 'delivery', id: 42 },
      { view: 'deliveries' },
      { view: 'webhook' },
      { view: 'deliveries' },
    ]);
    assert.equal(browser.hash, '#/deliveries');
    assert.equal(browser.timers.size, 2, 'the token\'s expiry and the shown view\'s refresh; the others stopped');
    await browser.advance(REFRESH_INTERVAL_MS);
    assert.deepEqual(refreshes, ['deliveries']);
    browser.tab.visible = false;
    await browser.advance(REFRESH_INTERVAL_MS);
    assert.deepEqual(refreshes, ['deliveries'], 'a hidden page skips its turn');
    browser.app.visibilityChanged();
    browser.tab.visible = true;
    browser.app.visibilityChanged();
    await settle();
    assert.deepEqual(refreshes, ['deliveries', 'deliveries']);
  });

  test('a sign-in link opened while signed in: the new token, and Back never returns to the link', async () => {
    const browser = await signedIn();
    browser.navigate('#/deliveries');
    const other = tokenFor('bob@acme.example', 3600);
    browser.navigate(`#token=${other}`);
    assert.deepEqual(browser.history, ['#/webhook', '#/deliveries', '#/webhook']);
    assert.equal(browser.tab.stored, other);
    assert.deepEqual(browser.page, { kind: 'signing-in' });
    assert.equal(browser.requests.at(-1)?.init.headers.Authorization, `Bearer ${other}`);
    await settle();
    assert.deepEqual(viewRoute(browser.page), { view: 'webhook' });
    browser.back();
    assert.deepEqual(viewRoute(browser.page), { view: 'deliveries' });
  });
});

/** GET console/sign-in.json of a daemon with console.oidc set (the provider's endpoints from its discovery document). */
const PROVIDER_SETTINGS = {
  provider: {
    name: 'Keycloak',
    issuer: 'https://idp.example/realms/acme',
    client_id: 'hookrelay-console',
    authorization_endpoint: 'https://idp.example/realms/acme/auth',
    token_endpoint: 'https://idp.example/realms/acme/token',
    end_session_endpoint: 'https://idp.example/realms/acme/logout',
    scope: 'openid email',
    resource: null,
    redirect_uri: 'http://127.0.0.1:8080/console/',
  },
};

describe('sign-in through the identity provider (ConsoleApp)', () => {
  test('the S256 code challenge is RFC 7636\'s (its appendix B example)', async () => {
    assert.equal(await codeChallenge('dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk'), 'E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM');
  });

  /** The sign-in page after sign-in.json answered. */
  async function signInPage(options: Parameters<typeof fakeBrowser>[0] = {}) {
    const browser = fakeBrowser({ signInSettings: PROVIDER_SETTINGS, ...options });
    browser.app.start();
    await settle();
    return browser;
  }

  test('the sign-in page offers the provider once sign-in.json says so; the button goes to its authorization endpoint with a PKCE challenge, the verifier kept in the tab', async () => {
    const browser = await signInPage({ hash: '#/deliveries' });
    assert.equal(browser.tab.signInSettingsAsked, 1);
    const page = browser.page;
    assert.equal(page?.kind, 'sign-in');
    assert.equal(page?.kind === 'sign-in' && page.provider.kind, 'ready');
    browser.app.signInWithProvider();
    await settleUntil(() => browser.tab.left.length > 0);
    assert.equal(browser.tab.left.length, 1);
    const url = new URL(browser.tab.left[0]!);
    assert.equal(`${url.origin}${url.pathname}`, PROVIDER_SETTINGS.provider.authorization_endpoint);
    const q = Object.fromEntries(url.searchParams);
    assert.equal(q.response_type, 'code');
    assert.equal(q.client_id, 'hookrelay-console');
    assert.equal(q.redirect_uri, 'http://127.0.0.1:8080/console/');
    assert.equal(q.scope, 'openid email');
    assert.equal(q.code_challenge_method, 'S256');
    assert.equal(q.resource, undefined, 'no resource parameter unless console.oidc.resource is set');
    const pending = JSON.parse(browser.tab.kept.get('hookrelay.oidc.pending')!) as { state: string; verifier: string; returnTo: string };
    assert.equal(q.state, pending.state);
    assert.match(pending.verifier, /^[A-Za-z0-9_-]{43}$/);
    const challenge = Buffer.from(await crypto.subtle.digest('SHA-256', new TextEncoder().encode(pending.verifier))).toString('base64url');
    assert.equal(q.code_challenge, challenge, 'the challenge is the verifier\'s SHA-256 (the verifier itself never leaves the tab)');
    assert.equal(pending.returnTo, '#/deliveries');
  });

  test('back from the provider: the code is exchanged with the verifier, the query leaves the address bar, and the access token signs in on the page it started from', async () => {
    const access = tokenFor('ada@acme.example', 600);
    const pending = { state: 'st-1', verifier: 'v'.repeat(43), returnTo: '#/deliveries', createdAt: NOW - 5_000 };
    const browser = fakeBrowser({
      signInSettings: PROVIDER_SETTINGS,
      search: `?code=c0de&state=st-1&iss=${encodeURIComponent(PROVIDER_SETTINGS.provider.issuer)}`,
      hash: '',
      kept: { 'hookrelay.oidc.pending': JSON.stringify(pending) },
      token: { status: 200, body: JSON.stringify({ access_token: access, id_token: 'id.tok.en', refresh_token: 'rt-1', token_type: 'Bearer', expires_in: 600 }) },
    });
    browser.app.start();
    assert.equal(browser.tab.search, '', 'the code is out of the address bar before anything else');
    assert.deepEqual(browser.page, { kind: 'signing-in' });
    await settle();
    await settle();
    const exchange = browser.requests.find((r) => r.url === PROVIDER_SETTINGS.provider.token_endpoint);
    assert.ok(exchange, 'the token endpoint was called');
    const form = Object.fromEntries(new URLSearchParams(exchange.init.body));
    assert.deepEqual(form, { grant_type: 'authorization_code', code: 'c0de', redirect_uri: 'http://127.0.0.1:8080/console/', code_verifier: pending.verifier, client_id: 'hookrelay-console' });
    assert.equal(exchange.init.headers.Authorization, undefined, 'a public client: no credentials');
    assert.equal(browser.tab.kept.has('hookrelay.oidc.pending'), false, 'the verifier is used once');
    assert.equal(browser.tab.stored, access);
    assert.equal(browser.requests.at(-1)?.init.headers.Authorization, `Bearer ${access}`);
    assert.deepEqual(viewRoute(browser.page), { view: 'deliveries' });
  });

  test('an answer that does not match the sign-in this tab started, or that is an error, is not exchanged and says why', async () => {
    const pending = { state: 'st-1', verifier: 'v'.repeat(43), returnTo: '#/webhook', createdAt: NOW - 5_000 };
    const cases: Array<[string, Record<string, string>, RegExp]> = [
      ['?code=c0de&state=other', { 'hookrelay.oidc.pending': JSON.stringify(pending) }, /not for a sign-in started in this tab/],
      ['?code=c0de&state=st-1', {}, /not for a sign-in started in this tab/],
      ['?code=c0de&state=st-1', { 'hookrelay.oidc.pending': JSON.stringify({ ...pending, createdAt: NOW - 11 * 60_000 }) }, /longer than 10 minutes/],
      ['?code=c0de&state=st-1&iss=https%3A%2F%2Fevil.example', { 'hookrelay.oidc.pending': JSON.stringify(pending) }, /comes from https:\/\/evil\.example, not from https:\/\/idp\.example/],
      ['?error=access_denied&error_description=The+user+cancelled&state=st-1', { 'hookrelay.oidc.pending': JSON.stringify(pending) }, /Keycloak did not sign you in \(access_denied: The user cancelled\)/],
    ];
    for (const [search, kept, reason] of cases) {
      const browser = fakeBrowser({ signInSettings: PROVIDER_SETTINGS, search, kept, token: { status: 200, body: JSON.stringify({ access_token: ADA }) } });
      browser.app.start();
      await settle();
      await settle();
      assert.equal(browser.requests.some((r) => r.url === PROVIDER_SETTINGS.provider.token_endpoint), false, search);
      assert.equal(browser.tab.stored, null, search);
      const page = browser.page;
      assert.ok(page?.kind === 'sign-in' && typeof page.notice === 'object' && page.notice !== null && 'provider' in page.notice && reason.test(page.notice.provider), `${search}: ${JSON.stringify(page)}`);
    }
  });

  test('a refused exchange, or an access token that is not a JWT, signs nobody in and says what to change', async () => {
    const pending = JSON.stringify({ state: 'st-1', verifier: 'v'.repeat(43), returnTo: '#/webhook', createdAt: NOW });
    const refused = fakeBrowser({ signInSettings: PROVIDER_SETTINGS, search: '?code=c&state=st-1', kept: { 'hookrelay.oidc.pending': pending }, token: { status: 400, body: JSON.stringify({ error: 'invalid_grant', error_description: 'PKCE verification failed' }) } });
    refused.app.start();
    await settle();
    await settle();
    assert.deepEqual(refused.page, { kind: 'sign-in', notice: { provider: 'Keycloak refused the token request (PKCE verification failed)' }, provider: { kind: 'ready', provider: refused.page?.kind === 'sign-in' && refused.page.provider.kind === 'ready' ? refused.page.provider.provider : null } });
    const opaque = fakeBrowser({ signInSettings: PROVIDER_SETTINGS, search: '?code=c&state=st-1', kept: { 'hookrelay.oidc.pending': pending }, token: { status: 200, body: JSON.stringify({ access_token: 'opaque-abc', id_token: 'x.y.z' }) } });
    opaque.app.start();
    await settle();
    await settle();
    assert.equal(opaque.tab.stored, null);
    const page = opaque.page;
    assert.ok(page?.kind === 'sign-in' && typeof page.notice === 'object' && page.notice !== null && 'provider' in page.notice && /not a JWT.*console\.oidc\.scopes or console\.oidc\.resource/.test(page.notice.provider));
  });

  test('a token with a refresh token is refreshed before it expires: calls carry the new token, the rotated refresh token is kept', async () => {
    const first = tokenFor('ada@acme.example', 300);
    const second = tokenFor('ada@acme.example', 900);
    const browser = fakeBrowser({
      signInSettings: PROVIDER_SETTINGS,
      stored: first,
      kept: { 'hookrelay.oidc.session': JSON.stringify({ idToken: 'id.tok.en', refreshToken: 'rt-1' }) },
      token: { status: 200, body: JSON.stringify({ access_token: second, refresh_token: 'rt-2' }) },
    });
    browser.app.start();
    await settle();
    assert.equal(browser.page?.kind, 'view');
    await browser.advance(240_000 - 1);
    assert.equal(browser.requests.some((r) => r.url === PROVIDER_SETTINGS.provider.token_endpoint), false, 'not before a minute ahead of the expiry');
    await browser.advance(1);
    await settle();
    const refresh = browser.requests.find((r) => r.url === PROVIDER_SETTINGS.provider.token_endpoint);
    assert.deepEqual(Object.fromEntries(new URLSearchParams(refresh?.init.body)), { grant_type: 'refresh_token', refresh_token: 'rt-1', client_id: 'hookrelay-console' });
    assert.equal(browser.tab.stored, second);
    assert.deepEqual(JSON.parse(browser.tab.kept.get('hookrelay.oidc.session')!), { idToken: 'id.tok.en', refreshToken: 'rt-2' });
    await browser.advance(120_000);
    assert.equal(browser.page?.kind, 'view', 'still signed in past the first token\'s expiry');
  });

  test('Sign out ends the session at the provider (its end_session_endpoint, back to the console); a link session is only forgotten', async () => {
    const browser = fakeBrowser({ signInSettings: PROVIDER_SETTINGS, stored: ADA, kept: { 'hookrelay.oidc.session': JSON.stringify({ idToken: 'id.tok.en', refreshToken: null }) } });
    browser.app.start();
    await settle();
    browser.app.signOut();
    assert.equal(browser.tab.stored, null);
    assert.equal(browser.tab.kept.size, 0);
    const url = new URL(browser.tab.left[0]!);
    assert.equal(`${url.origin}${url.pathname}`, PROVIDER_SETTINGS.provider.end_session_endpoint);
    assert.deepEqual(Object.fromEntries(url.searchParams), { client_id: 'hookrelay-console', post_logout_redirect_uri: 'http://127.0.0.1:8080/console/', id_token_hint: 'id.tok.en' });

    const link = fakeBrowser({ signInSettings: PROVIDER_SETTINGS, hash: `#token=${ADA}`, kept: { 'hookrelay.oidc.session': JSON.stringify({ idToken: 'stale', refreshToken: null }) } });
    link.app.start();
    await settle();
    link.app.signOut();
    assert.deepEqual(link.tab.left, [], 'signed in by a link: nothing to end at the provider');
  });

  test('opened at another address than the redirect URI, the button says where to sign in instead of starting a sign-in whose verifier would be lost', async () => {
    const browser = await signInPage({ origin: 'http://localhost:8080' });
    browser.app.signInWithProvider();
    await settle();
    assert.deepEqual(browser.tab.left, []);
    const page = browser.page;
    assert.ok(page?.kind === 'sign-in' && typeof page.notice === 'object' && page.notice !== null && 'provider' in page.notice && page.notice.provider.includes('open the console at http://127.0.0.1:8080/console/'));
  });
});

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { parseClaimPath, readClaim } from '../../src/domain/claim-path.ts';

test('a setting without a leading "/" is one claim name, dots and slashes included', () => {
  assert.deepEqual(parseClaimPath('https://example.com/claims.org'), { ok: true, path: ['https://example.com/claims.org'] });
  assert.deepEqual(parseClaimPath('email'), { ok: true, path: ['email'] });
});

test('a setting starting with "/" is a JSON Pointer, with ~1 for "/" and ~0 for "~"', () => {
  assert.deepEqual(parseClaimPath('/realm_access/org'), { ok: true, path: ['realm_access', 'org'] });
  assert.deepEqual(parseClaimPath('/https:~1~1example.com~1claims/org'), { ok: true, path: ['https://example.com/claims', 'org'] });
  assert.deepEqual(parseClaimPath('/a~0b'), { ok: true, path: ['a~b'] });
});

test('a malformed pointer is refused with a sentence', () => {
  for (const bad of ['/a~2', '/a~', '/a//b', '/', '']) {
    const parsed = parseClaimPath(bad);
    assert.equal(parsed.ok, false, bad);
  }
});

test('readClaim follows own properties of objects only', () => {
  const claims = { a: { b: 'x', list: ['y'] }, 'https://e.com/c.org': 'z' };
  assert.equal(readClaim(claims, ['a', 'b']), 'x');
  assert.equal(readClaim(claims, ['https://e.com/c.org']), 'z');
  assert.deepEqual(readClaim(claims, ['a', 'list']), ['y']);
  assert.equal(readClaim(claims, ['a', 'list', '0']), undefined);
  assert.equal(readClaim(claims, ['a', 'toString']), undefined);
  assert.equal(readClaim(claims, ['missing', 'b']), undefined);
});

/**
 * The SQLite driver (better-sqlite3 13) is built for Node-API 10: on an older Node.js it kills
 * the process with SIGSEGV when it loads. hookrelay refuses such a Node.js first, with one line.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { ErrorCode, HookrelayError } from '../../src/domain/errors.ts';
import { assertSupportedNode } from '../../src/store/sqlite/connection.ts';

test('a Node.js without Node-API 10 (Node 20, Node 22 before 22.14) is refused with one line naming both versions', () => {
  for (const versions of [{ node: '20.20.2', napi: '9' }, { node: '22.13.1', napi: '9' }, { node: '18.20.4', napi: '9' }]) {
    assert.throws(
      () => assertSupportedNode(versions),
      (err: unknown) =>
        err instanceof HookrelayError &&
        err.code === ErrorCode.config &&
        err.message.includes(`Node.js ${versions.node} is too old`) &&
        err.message.includes('22.14 or newer') &&
        !err.message.includes('\n'),
    );
  }
});

test('Node 22.14 and later, and the Node.js running this test, are accepted', () => {
  assertSupportedNode({ node: '22.14.0', napi: '10' });
  assertSupportedNode({ node: '24.21.0', napi: '10' });
  assertSupportedNode({ node: '26.0.0', napi: '10' });
  assertSupportedNode();
});

/**
 * The dispatcher's table of webhooks: a wake-up that arrives while a commit reads the queues is
 * not undone by what that read found. The read can predate the change that woke the webhook (a
 * change committed while it ran): had its "drained" cleared the webhook's work, the change would
 * wait for the next poll (30 s with delivery.pollInterval 30s), as test/e2e/scale-out.e2e.test.ts
 * ("connections cut by the server") saw on PostgreSQL once the daemon's start got a little slower.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { WebhookTable } from '../../src/dispatch/webhook-table.ts';

function table(): WebhookTable {
  return new WebhookTable({ deliverableWebhooks: async () => [] }, { giveBack: () => {}, request: () => {} });
}

test('a queue read to its end clears the work of a webhook not woken since the read began, and notes its next retry', () => {
  const t = table();
  const hook = t.hookFor('acme');
  t.woken(hook);
  const mark = t.wakeMark();
  t.noteDrained([{ orgId: 'acme', nextRetryAt: 1234 }], mark);
  assert.equal(hook.hasWork, false);
  assert.equal(hook.retryAt, 1234);
});

test('a webhook woken while the read ran keeps its work: the next commit claims what woke it', () => {
  const t = table();
  const hook = t.hookFor('acme');
  const mark = t.wakeMark(); // the commit begins, its reads start
  t.woken(hook); // the feed commits a change of acme meanwhile
  t.noteDrained([{ orgId: 'acme', nextRetryAt: null }], mark);
  assert.equal(hook.hasWork, true, 'the wake-up outlives a read that began before it');
  assert.equal(hook.retryAt, null);
  // The next commit's read began after the wake-up: what it finds holds.
  t.noteDrained([{ orgId: 'acme', nextRetryAt: 99 }], t.wakeMark());
  assert.equal(hook.hasWork, false);
  assert.equal(hook.retryAt, 99);
});

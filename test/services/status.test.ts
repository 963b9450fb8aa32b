/**
 * The status service behind `hookrelay status` and the metrics gauges, on real SQLite files:
 * queue counts equal to a plain count whatever the chunk size, the oldest due delivery (fresh,
 * retries, leases, disabled webhooks), the latest failure and the sentence that explains a
 * webhook's status, the feed's lag across a rotation; and the query plans of the gauge reads:
 * partial indexes, never a scan of the deliveries.
 */
import assert from 'node:assert/strict';
import { appendFileSync, renameSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { test, type TestContext } from 'node:test';
import { createNetworkPolicies } from '../../src/domain/address-policy.ts';
import type { Clock } from '../../src/domain/clock.ts';
import { WebhookStatus } from '../../src/domain/types.ts';
import { healthSentence } from '../../src/domain/webhook-health.ts';
import { createIngestService } from '../../src/services/ingest.ts';
import { createStatusService } from '../../src/services/status.ts';
import { createCredentialVault } from '../../src/services/credential-key.ts';
import { createTargetCheck } from '../../src/services/webhook-target.ts';
import { createWebhookService } from '../../src/services/webhooks.ts';
import { createOrgService } from '../../src/services/orgs.ts';
import { SQLITE_QUEUE_GAUGE_SQL } from '../../src/store/sqlite/deliveries-repo.ts';
import { DeliveryStatus } from '../../src/store/values.ts';
import { openSqliteStore, type SqliteStore as Store } from '../../src/store/sqlite/store.ts';
import { silentLog, tempDir } from '../helpers/helpers.ts';
import { repos } from '../helpers/sqlite-repos.ts';
import { testAudit } from '../helpers/audit-helpers.ts';

const LEASE_MS = 30_000;
const DAY = 86_400_000;

interface ManualClock extends Clock {
  at: number;
}

function openTestStore(t: TestContext, orgs: readonly string[]): Store {
  const clock: ManualClock = { at: 1_000_000, now: () => clock.at };
  const store = openSqliteStore(join(tempDir(t, 'hookrelay-status-'), 'hookrelay.db'), clock);
  t.after(() => store.close());
  for (const org of orgs) {
    repos(store).orgs.insert({ id: org, name: org, createdAt: 0 });
    repos(store).webhooks.upsert(org, `https://hooks.example/${org}?token=abc`, false, null, 0);
  }
  return store;
}

/** Ingests one status change per request at the clock's time; returns the delivery ids, in order. */
async function queue(store: Store, orgId: string, requests: readonly string[]): Promise<number[]> {
  const lines = requests.map((request) => ({ bytes: Buffer.from(JSON.stringify({ organization_id: orgId, anticipation_request_id: request, status: 'approved' })), position: null }));
  await createIngestService(store, silentLog).ingest('test', lines, null);
  return (store.db.prepare('SELECT id FROM deliveries WHERE org_id = ? ORDER BY id DESC LIMIT ?').pluck().all(orgId, requests.length) as number[]).reverse();
}

function fail(store: Store, id: number, at: number, retryAt: number, error = 'HTTP 503', code: number | null = 503): void {
  repos(store).deliveries.lease([id], at + LEASE_MS, at);
  repos(store).deliveries.settle(id, { status: DeliveryStatus.pending, attempts: 1, nextAttemptAt: retryAt, at, statusCode: code, error });
}

function settle(store: Store, id: number, at: number, status: 'delivered' | 'dead'): void {
  repos(store).deliveries.lease([id], at + LEASE_MS, at);
  repos(store).deliveries.settle(id, { status, attempts: 1, nextAttemptAt: at, at, statusCode: status === 'delivered' ? 200 : 500, error: status === 'dead' ? 'HTTP 500' : null });
}

const count = (store: Store, where: string, ...args: unknown[]) => store.db.prepare(`SELECT count(*) FROM deliveries WHERE ${where}`).pluck().get(...args) as number;

test('queue counts are those of a plain count, whatever the chunk size, with held deliveries of disabled webhooks apart', async (t) => {
  const store = openTestStore(t, ['org-a', 'org-b', 'org-off']);
  const clock = store.clock as ManualClock;
  const a = await queue(store, 'org-a', Array.from({ length: 23 }, (_, i) => `ar_${i}`));
  const b = await queue(store, 'org-b', Array.from({ length: 9 }, (_, i) => `ar_${i}`));
  const off = await queue(store, 'org-off', ['ar_1', 'ar_2', 'ar_3']);
  const now = clock.at;
  for (const id of a.slice(0, 5)) fail(store, id, now, now + 60_000);
  for (const id of a.slice(5, 8)) settle(store, id, now, 'delivered');
  settle(store, a[8]!, now, 'dead');
  repos(store).deliveries.lease([a[9]!], now + LEASE_MS, now); // in flight
  for (const id of b.slice(0, 2)) fail(store, id, now, now + 60_000);
  fail(store, off[0]!, now, now + 60_000);
  repos(store).webhooks.setStatus('org-off', WebhookStatus.disabled, 'operator', now);

  const expected = {
    new: count(store, "org_id <> 'org-off' AND status = 'pending' AND attempts = 0 AND lease_expires_at IS NULL"),
    retrying: count(store, "org_id <> 'org-off' AND status = 'pending' AND (attempts > 0 OR lease_expires_at IS NOT NULL)"),
    held: count(store, "org_id = 'org-off' AND status = 'pending'"),
    rateLimited: 0,
  };
  assert.deepEqual(expected, { new: 13 + 7, retrying: 6 + 2, held: 3, rateLimited: 0 }, 'the scenario is what the test means');
  for (const chunkRows of [1, 2, 5, 7, 1000]) {
    const snapshot = await createStatusService(store, { disableAfterMs: 5 * DAY, chunkRows }).queue();
    assert.deepEqual(snapshot.totals, expected, `chunks of ${chunkRows}`);
    assert.deepEqual(
      snapshot.organizations.map((o) => [o.orgId, o.webhookStatus, o.fresh, o.tried]),
      [['org-a', 'active', 13, 6], ['org-b', 'active', 7, 2], ['org-off', 'disabled', 2, 1]],
    );
  }
});

test('the oldest due delivery: fresh ones are due since queued, retries from their time, leased ones and disabled webhooks do not count', async (t) => {
  const store = openTestStore(t, ['org-a', 'org-b']);
  const clock = store.clock as ManualClock;
  const status = createStatusService(store, { disableAfterMs: 5 * DAY });
  assert.equal((await status.queue()).oldestDueAt, null, 'nothing queued');

  const t0 = clock.at;
  const [first] = await queue(store, 'org-a', ['ar_1']);
  clock.at = t0 + 1000;
  await queue(store, 'org-a', ['ar_2']);
  clock.at = t0 + 5000;
  assert.equal((await status.queue()).oldestDueAt, t0);

  // The oldest is attempted (leased): the next one is the oldest due.
  repos(store).deliveries.lease([first!], clock.at + LEASE_MS, clock.at);
  assert.equal((await status.queue()).oldestDueAt, t0 + 1000);
  // It failed and waits for a retry in a minute: not due until then.
  repos(store).deliveries.settle(first!, { status: DeliveryStatus.pending, attempts: 1, nextAttemptAt: t0 + 65_000, at: clock.at, statusCode: 503, error: 'HTTP 503' });
  assert.equal((await status.queue()).oldestDueAt, t0 + 1000);
  clock.at = t0 + 70_000;
  const snapshot = await status.queue();
  assert.equal(snapshot.oldestDueAt, t0 + 1000);
  assert.equal(snapshot.organizations.find((o) => o.orgId === 'org-a')!.oldestDueAt, t0 + 1000);

  // Another organization's older retry, due now, is the oldest of all.
  clock.at = t0 - 50_000;
  const [other] = await queue(store, 'org-b', ['ar_9']);
  clock.at = t0 + 70_000;
  fail(store, other!, t0 + 10, t0 + 500);
  assert.equal((await status.queue()).oldestDueAt, t0 + 500);
  // ...until its webhook is disabled: its deliveries are held, not due.
  repos(store).webhooks.setStatus('org-b', WebhookStatus.disabled, 'gone', clock.at);
  const held = await status.queue();
  assert.equal(held.oldestDueAt, t0 + 1000);
  assert.equal(held.organizations.find((o) => o.orgId === 'org-b')!.oldestDueAt, null);
  assert.equal(held.totals.held, 1);
});

test('each webhook says why it has its status: the latest failure of its recent deliveries, the disabled reason, when it will be disabled', async (t) => {
  const store = openTestStore(t, ['org-ok', 'org-failing', 'org-gone']);
  const clock = store.clock as ManualClock;
  const t0 = clock.at;
  const status = createStatusService(store, { disableAfterMs: 5 * DAY });
  const audit = testAudit(store);
  const webhooks = createWebhookService(store, createOrgService(store, audit), { checkTarget: createTargetCheck(createNetworkPolicies({ allowNetworks: [], organizationNetworks: [], storeInternalResponses: [] }), false), disableAfterMs: 5 * DAY, secretRotationGraceMs: 1000, vault: createCredentialVault({ stateDir: tempDir(t), delivery: { credentialKeyFile: null } }) }, audit);

  const [ok] = await queue(store, 'org-ok', ['ar_1']);
  settle(store, ok!, t0, 'delivered');
  repos(store).webhooks.recordSuccess('org-ok', t0);

  const failing = await queue(store, 'org-failing', ['ar_1', 'ar_2', 'ar_3']);
  fail(store, failing[0]!, t0 + 10, t0 + 60_000, 'DNS lookup failed (ENOTFOUND)', null);
  fail(store, failing[2]!, t0 + 30, t0 + 60_000, 'HTTP 503', 503); // the latest failure
  fail(store, failing[1]!, t0 + 20, t0 + 60_000, 'HTTP 500', 500);
  for (const at of [t0 + 10, t0 + 20, t0 + 30]) repos(store).webhooks.recordFailure('org-failing', at, 3, 5 * DAY);

  const [gone] = await queue(store, 'org-gone', ['ar_1']);
  fail(store, gone!, t0 + 40, t0 + 40, 'HTTP 410', 410);
  repos(store).webhooks.setStatus('org-gone', WebhookStatus.disabled, 'gone', t0 + 40);

  const reports = new Map((await status.webhooks()).map((w) => [w.orgId, w]));
  assert.deepEqual(reports.get('org-ok'), {
    orgId: 'org-ok', url: 'https://hooks.example/org-ok?token=abc', status: 'active', rateLimit: null, outOfOrderDeliveries: 0,
    consecutiveFailures: 0, failingSince: null, lastSuccessAt: t0, disabledReason: null, lastFailure: null,
    detail: `active; last success at ${new Date(t0).toISOString()}`,
  });
  const f = reports.get('org-failing')!;
  assert.equal(f.status, 'failing');
  assert.deepEqual(f.lastFailure, { at: t0 + 30, statusCode: 503, error: 'HTTP 503' });
  assert.equal(
    f.detail,
    `failing since ${new Date(t0 + 10).toISOString()}: 3 attempt(s) in a row failed; last error at ${new Date(t0 + 30).toISOString()}: HTTP 503; it is disabled if no attempt succeeds by ${new Date(t0 + 10 + 5 * DAY).toISOString()}`,
  );
  const g = reports.get('org-gone')!;
  assert.equal(g.disabledReason, 'gone');
  assert.deepEqual(g.lastFailure, { at: t0 + 40, statusCode: 410, error: 'HTTP 410' });
  assert.match(g.detail, /^disabled because the receiver answered 410 Gone; last error at .*: HTTP 410\. Deliveries are held, not dropped; registering the webhook again or `hookrelay webhook enable` sends them$/);
  // The API reads the same report for one organization.
  assert.deepEqual((await webhooks.getWithHealth('org-gone')).health, { consecutiveFailures: g.consecutiveFailures, failingSince: g.failingSince, lastSuccessAt: g.lastSuccessAt, disabledReason: 'gone', lastFailure: g.lastFailure, detail: g.detail });
  // A dead delivery's failure counts too, when it is the latest.
  const [dead] = await queue(store, 'org-failing', ['ar_4']);
  settle(store, dead!, t0 + 50, 'dead');
  assert.deepEqual((await status.webhooks()).find((w) => w.orgId === 'org-failing')!.lastFailure, { at: t0 + 50, statusCode: 500, error: 'HTTP 500' });

  const sentence = (reason: string) => healthSentence({ status: 'disabled', consecutiveFailures: 9, failingSince: t0, lastSuccessAt: null, disabledReason: reason, lastFailure: null, disableAfterMs: 5 * DAY });
  assert.match(sentence('failing_too_long'), /^disabled because it failed without a success for 5d \(delivery\.disableAfter\)\./);
  assert.match(sentence('operator'), /^disabled because the operator disabled it \(hookrelay webhook disable\)\./);
  assert.equal(healthSentence({ status: 'active', consecutiveFailures: 2, failingSince: t0, lastSuccessAt: null, disabledReason: null, lastFailure: { at: t0, statusCode: null, error: 'no complete response within the attempt deadline' }, disableAfterMs: DAY }), `active, but the last 2 attempt(s) failed; last error at ${new Date(t0).toISOString()}: no complete response within the attempt deadline`);
});

test('feed lag: size minus the committed position of the same file; the whole new file after a rotation; 0 without a file', async (t) => {
  const store = openTestStore(t, []);
  const status = createStatusService(store, { disableAfterMs: DAY });
  const dir = tempDir(t);
  const path = join(dir, 'feed.jsonl');
  assert.deepEqual(await status.feed(path), { path, position: null, size: null, lagBytes: 0, rotated: false, accepted: 0, duplicates: 0, quarantined: 0, updatedAt: null });

  writeFileSync(path, 'x'.repeat(100) + '\n');
  assert.equal((await status.feed(path)).lagBytes, 101, 'nothing committed: all of it');
  const st = statSync(path, { bigint: true });
  const saved = { source: path, dev: String(st.dev), ino: String(st.ino), fingerprint: 'f', fingerprintBytes: 0, position: 101, tailFingerprint: null };
  repos(store).feed.savePosition(saved, 1);
  appendFileSync(path, 'y'.repeat(49) + '\n');
  const report = await status.feed(path);
  assert.deepEqual([report.position, report.size, report.lagBytes, report.rotated], [101, 151, 50, false]);

  renameSync(path, `${path}.1`);
  writeFileSync(path, 'z'.repeat(30) + '\n');
  const rotated = await status.feed(path);
  assert.deepEqual([rotated.position, rotated.size, rotated.lagBytes, rotated.rotated], [101, 31, 31, true]);
});

test('the gauge reads use the partial indexes: a search by organization, never a scan of the deliveries', (t) => {
  const store = openTestStore(t, ['org-a']);
  const params = { org: 'org-a', after: 0, limit: 20_000, now: 0, status: 'pending' };
  for (const [name, sql] of Object.entries(SQLITE_QUEUE_GAUGE_SQL)) {
    const names = Object.keys(params).filter((p) => sql.includes(`@${p}`));
    const plan = (store.db.prepare(`EXPLAIN QUERY PLAN ${sql}`).all(Object.fromEntries(names.map((n) => [n, params[n as keyof typeof params]]))) as Array<{ detail: string }>).map((r) => r.detail);
    assert.ok(!plan.some((d) => /^SCAN deliveries\b/.test(d)), `${name} scans the deliveries: ${plan.join(' | ')}`);
    assert.ok(
      plan.some((d) => /^SEARCH deliveries USING INDEX deliveries_org_(fresh|status|due) \(org_id=\?/.test(d)),
      `${name} searches one organization's part of a partial index: ${plan.join(' | ')}`,
    );
  }
});

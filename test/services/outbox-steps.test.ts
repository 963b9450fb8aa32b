/**
 * The pure steps of the outbox's group commit (src/services/outbox.ts): what an attempt's end
 * writes (its log row, its delivery's state, its word on the webhook's health) and how much a
 * claim may take of an organization. The transaction around them is covered on both backends
 * by deliveries-contract.test.ts.
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { AttemptError, type AttemptResult, type DeliveryOutcome } from '../../src/domain/retry-policy.ts';
import { attemptToStore, healthOf, claimableOf, settlementOf, type ClaimedDelivery, type FinishedAttempt } from '../../src/services/outbox.ts';
import { DeliveryStatus, type ClaimTurn } from '../../src/store/values.ts';

const delivery: ClaimedDelivery = {
  id: 7,
  orgId: 'acme',
  orderingKey: 1,
  attempts: 2,
  eventId: 'evt_1',
  anticipationRequestId: 'req_1',
  payload: '{}',
  url: 'https://example.com/hook',
  headers: [],
  clientCertificate: null,
  oauth2: null,
  activeHmac: true,
  secret: 'whsec_x',
  previousSecret: null,
  previousSecretExpiresAt: null,
  unsendable: null,
  traceparent: null,
  tracestate: null,
  secrets: ['whsec_x'],
  holdsBack: false,
  leaseEpoch: null,
};

function finished(result: Partial<AttemptResult>, outcome: DeliveryOutcome): FinishedAttempt {
  const full: AttemptResult = { statusCode: null, error: null, errorDetail: null, responseBody: null, durationMs: 12, retryAfterMs: null, sentTimestamp: 1_700, sentSignature: 'v1,sig', ...result };
  return { delivery, result: full, outcome, startedAt: 1_000 };
}

const ok = finished({ statusCode: 200, responseBody: 'ok' }, { kind: 'delivered' });
const failedRetry = finished({ statusCode: 500, error: AttemptError.http, errorDetail: 'HTTP 500' }, { kind: 'retry', at: 9_000 });
const gone = finished({ statusCode: 410, error: AttemptError.http, errorDetail: 'HTTP 410' }, { kind: 'disable' });
const invalid = finished({ error: AttemptError.invalidRequest, errorDetail: 'header too long', sentTimestamp: null, sentSignature: null }, { kind: 'dead' });

describe('outbox steps', () => {
  test('attemptToStore: the attempt numbered after those before it, its outcome as the log names it', () => {
    assert.deepEqual(attemptToStore(ok), {
      deliveryId: 7,
      attempt: 3,
      startedAt: 1_000,
      durationMs: 12,
      url: 'https://example.com/hook',
      statusCode: 200,
      errorClass: null,
      errorDetail: null,
      responseBody: 'ok',
      outcome: 'delivered',
      sentTimestamp: 1_700,
      sentSignature: 'v1,sig',
    });
    assert.equal(attemptToStore(gone).outcome, 'disabled');
  });

  test('settlementOf: delivered, retried at its time, dead, or held pending by a 410', () => {
    assert.deepEqual(settlementOf(ok, 5_000), { status: DeliveryStatus.delivered, attempts: 3, nextAttemptAt: 5_000, at: 5_000, statusCode: 200, error: null });
    assert.deepEqual(settlementOf(failedRetry, 5_000), { status: DeliveryStatus.pending, attempts: 3, nextAttemptAt: 9_000, at: 5_000, statusCode: 500, error: 'HTTP 500' });
    assert.deepEqual(settlementOf(invalid, 5_000), { status: DeliveryStatus.dead, attempts: 3, nextAttemptAt: 5_000, at: 5_000, statusCode: null, error: 'header too long' });
    assert.deepEqual(settlementOf(gone, 5_000), { status: DeliveryStatus.pending, attempts: 3, nextAttemptAt: 5_000, at: 5_000, statusCode: 410, error: 'HTTP 410' });
  });

  test('healthOf: a 2xx is a success; a 410 and a request never sent say nothing of the receiver', () => {
    assert.equal(healthOf(ok), 'success');
    assert.equal(healthOf(failedRetry), 'failure');
    assert.equal(healthOf(gone), 'none');
    assert.equal(healthOf(invalid), 'none');
  });

  test('claimableOf: the upTo alone on SQLite, the cap on a shared database, one for a failing webhook, less what others hold', () => {
    const alone: ClaimTurn = { leasedElsewhere: 0, failing: false, shared: false };
    const shared: ClaimTurn = { leasedElsewhere: 2, failing: false, shared: true };
    assert.equal(claimableOf({ orgId: 'acme', upTo: 8, cap: 3 }, alone), 8, 'SQLite claims ahead: the cap is for shared databases');
    assert.equal(claimableOf({ orgId: 'acme', upTo: 8, cap: 3 }, shared), 1);
    assert.equal(claimableOf({ orgId: 'acme', upTo: 8 }, shared), 6, 'no cap: the upTo');
    assert.equal(claimableOf({ orgId: 'acme', upTo: 8 }, { ...shared, leasedElsewhere: 9 }), -1, 'others fill its slots: contended');
    assert.equal(claimableOf({ orgId: 'acme', upTo: 8 }, { ...alone, failing: true }), 1);
  });
});

/**
 * Deliveries that share an ordering key go out one at a time, oldest first. The key is a
 * 53-bit hash of (organization, anticipation request): an integer indexes far more cheaply
 * than the text it stands for, which matters at ingest rates of 100k lines/s. Two requests
 * whose keys collide (about n²/2⁵⁴ for n requests) are merely delivered in one common order:
 * never out of order.
 */
export function orderingKey(orgId: string, requestId: string): number {
  return hash53(`${orgId}\u0000${requestId}`);
}

/** A test notification is ordered on its own: nothing waits for it, it waits for nothing. */
export function testOrderingKey(orgId: string, eventId: string): number {
  return hash53(`${orgId}\u0000\u0000test\u0000${eventId}`);
}

/** Two independent 32-bit multiplicative hashes combined into a non-negative safe integer. */
function hash53(text: string): number {
  let a = 0x9e3779b9;
  let b = 0x85ebca6b;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    a = Math.imul(a ^ c, 0x01000193);
    b = Math.imul(b ^ c, 0x5bd1e995);
  }
  a = Math.imul(a ^ (a >>> 15), 0x2c1b3c6d) ^ Math.imul(b ^ (b >>> 13), 0x297a2d39);
  b = Math.imul(b ^ (b >>> 16), 0x2c1b3c6d) ^ Math.imul(a ^ (a >>> 12), 0x297a2d39);
  return (b & 0x1fffff) * 0x100000000 + (a >>> 0);
}

/**
 * When a change stored from a feed may be sent, on a database shared by several instances
 * (epoch ms): `windowMs` after it happened or after it was stored, whichever is later, so that
 * a change of the same request that happened earlier but is read from another host's feed a
 * little later is stored in time to go first. An `occurredAt` ahead of the storing clock (an
 * application host whose clock runs ahead) counts as at most `windowMs` ahead, so that a wrong
 * clock holds a change for at most twice the window. With a window of 0, `storedAt`: at once.
 */
export function reorderReleaseAt(occurredAt: number, storedAt: number, windowMs: number): number {
  if (windowMs <= 0) return storedAt;
  return Math.min(Math.max(occurredAt, storedAt), storedAt + windowMs) + windowMs;
}

/** A change's status and the status its line says came before it (previous_status), as stored. */
export interface ChangeStatuses {
  readonly status: string;
  readonly previous: string | null;
}

/** The two status members a feed event's stored details start with (see parseFeedLine: `"status":…,"previous_status":…`). */
const STATUS_MEMBERS = /^"status":("(?:[^"\\]|\\.)*"),"previous_status":(null|"(?:[^"\\]|\\.)*")/;

/**
 * The statuses of a feed change, read from the front of its stored details (not the whole
 * body, which may be large), or null when they are not there (a body stored whole).
 */
export function changeStatusesOf(details: string): ChangeStatuses | null {
  const m = STATUS_MEMBERS.exec(details);
  if (m === null) return null;
  return { status: JSON.parse(m[1]!) as string, previous: m[2] === 'null' ? null : (JSON.parse(m[2]!) as string) };
}

/**
 * Until when (epoch ms) a change stored from a feed may wait for its predecessor, the change
 * of its request whose status its previous_status names (delivery.orderHold, PostgreSQL): from
 * its release (reorderReleaseAt) for `holdMs` more. Null, nothing to wait for: the hold is off,
 * or the change names no status before it. The wait ends sooner once the request's latest
 * change sent before it has that status (see the due query, pg/deliveries-repo.ts).
 */
export function orderHoldUntil(releaseAt: number, previousStatus: string | null, holdMs: number): number | null {
  return holdMs > 0 && previousStatus !== null ? releaseAt + holdMs : null;
}

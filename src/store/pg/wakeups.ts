/**
 * Wake-ups between the instances sharing a PostgreSQL database (LISTEN/NOTIFY), and the
 * guard that keeps two instances from running under one name.
 *
 * The in-process work signal (services/work-signal.ts) wakes this instance's dispatcher when
 * its own services queue work; on a shared database the other instances must hear it too,
 * or they would find the work only at their next poll (`delivery.pollInterval`). So each
 * instance relays what its work signal says to the channel `hookrelay_work` (NOTIFY, after
 * the commit: the signal is only given once the work is committed), and relays what the
 * channel says from the other instances into its own signal. Notifications are a hint, not a
 * queue: PostgreSQL drops them for a session that is not connected, so the poll stays as the
 * safety net, and an instance that lost its listening connection polls at once when it has
 * it back.
 *
 * What one tick of the event loop signals is sent together: one NOTIFY per payload of up to
 * NOTIFY_PAYLOAD_BYTES (PostgreSQL refuses more than 8000 bytes), each an array of
 * [organization, kind] pairs, with the sending process's id (its instance name and a random
 * part: a daemon ignores what it sent itself, not what a CLI command run under the same
 * instance name sends).
 *
 * The listening connection also holds a session-level advisory lock on the instance's name
 * for as long as the daemon runs: a second daemon started with the same instance.name (a
 * copied config, a clone of the host) is refused at start, rather than sharing feed positions
 * and lease fencing with the first, which would make both wrong.
 */
import { randomUUID } from 'node:crypto';
import type { Notification, Pool, PoolClient } from 'pg';
import { ErrorCode, HookrelayError } from '../../domain/errors.ts';
import type { Logger } from '../../log.ts';
import type { WorkKind, WorkSignal } from '../../domain/work.ts';
import { createPgPool, loggableDatabaseUrl } from './pool.ts';

export const WORK_CHANNEL = 'hookrelay_work';
/** Below PostgreSQL's 8000-byte limit on a notification's payload. */
const NOTIFY_PAYLOAD_BYTES = 7000;
/**
 * The first key of the instance-name lock (pg_try_advisory_lock(int, int)): the ASCII bytes
 * of "hkin" (0x686b696e); the second is hashtext(instance name). Fixed forever.
 */
export const INSTANCE_LOCK_CLASS = 1751869806;
/** Waits between tries to get the listening connection back, growing to the last. */
const RECONNECT_DELAYS_MS = [500, 1000, 2000, 5000];

/** A sender id for this process: the instance's name, and a random part that tells two processes under one name apart. */
export function senderId(instance: string): string {
  return `${instance}/${randomUUID().slice(0, 8)}`;
}

interface Message {
  /** The sending process (see senderId). */
  readonly i: string;
  /** [organization, kind] pairs. */
  readonly w: ReadonlyArray<readonly [string, WorkKind]>;
}

export interface PgWakeups {
  /** Stops listening and relaying, and lets go of the instance-name lock. */
  close(): Promise<void>;
}

/** The payloads that carry `work` from `sender` (see senderId), each under the size limit. */
export function workPayloads(sender: string, work: ReadonlyArray<readonly [string, WorkKind]>): string[] {
  const payloads: string[] = [];
  let batch: Array<readonly [string, WorkKind]> = [];
  let bytes = 0;
  const overhead = Buffer.byteLength(JSON.stringify({ i: sender, w: [] }));
  for (const pair of work) {
    const size = Buffer.byteLength(JSON.stringify(pair)) + 1;
    if (batch.length > 0 && overhead + bytes + size > NOTIFY_PAYLOAD_BYTES) {
      payloads.push(JSON.stringify({ i: sender, w: batch }));
      batch = [];
      bytes = 0;
    }
    batch.push(pair);
    bytes += size;
  }
  if (batch.length > 0) payloads.push(JSON.stringify({ i: sender, w: batch }));
  return payloads;
}

/** A message from the channel, or null when it is not one of ours (then it is ignored). */
function parseMessage(payload: string): Message | null {
  try {
    const value = JSON.parse(payload) as Partial<Message>;
    if (typeof value.i !== 'string' || !Array.isArray(value.w)) return null;
    const w = value.w.filter((p): p is [string, WorkKind] => Array.isArray(p) && typeof p[0] === 'string' && (p[1] === 'queued' || p[1] === 'webhook'));
    return { i: value.i, w };
  } catch {
    return null;
  }
}

/**
 * Sends what `work` signals in this process to the other instances. For processes that do
 * not listen (a CLI command that replays deliveries, say): the daemons hear it at once.
 * Returns the function that stops (and closes its connection).
 */
export function publishWork(url: string, instance: string, work: WorkSignal, log: Logger): () => Promise<void> {
  const pool = createPgPool(url, { max: 1, log });
  const unsubscribe = relayOut(pool, senderId(instance), work, log, () => false);
  return async () => {
    unsubscribe.stop();
    await unsubscribe.flushed();
    await pool.end();
  };
}

/**
 * Subscribes to `work` and NOTIFYs what it says, a tick's worth at a time, unless `muted()` (a
 * signal relayed in from the channel). `stop()` unsubscribes and sends what is left; `flushed()`
 * resolves once everything handed over so far is sent.
 */
function relayOut(pool: Pool, sender: string, work: WorkSignal, log: Logger, muted: () => boolean): { stop(): void; flushed(): Promise<void> } {
  const relay = new WorkRelay(pool, sender, log);
  const unsubscribe = work.subscribe((orgId, kind) => {
    if (!muted()) relay.add(orgId, kind);
  });
  return {
    stop: () => {
      unsubscribe();
      relay.send();
    },
    flushed: () => relay.sending,
  };
}

/** What this process's work signal said during the current tick, sent at its end (see relayOut). */
class WorkRelay {
  readonly #pool: Pool;
  readonly #sender: string;
  readonly #log: Logger;
  #pending = new Map<string, WorkKind>();
  #scheduled = false;
  /** Sends that failed in a row: only the first is logged. */
  #failures = 0;
  /** The sends under way, one after the other. */
  sending: Promise<void> = Promise.resolve();
  readonly #sendNow = (): void => this.send();

  constructor(pool: Pool, sender: string, log: Logger) {
    this.#pool = pool;
    this.#sender = sender;
    this.#log = log;
  }

  add(orgId: string, kind: WorkKind): void {
    // 'webhook' says more than 'queued' (the dispatcher reloads the webhook): it wins.
    if (this.#pending.get(orgId) !== 'webhook') this.#pending.set(orgId, kind);
    if (!this.#scheduled) {
      this.#scheduled = true;
      setImmediate(this.#sendNow);
    }
  }

  send(): void {
    this.#scheduled = false;
    const batch = [...this.#pending];
    this.#pending = new Map();
    if (batch.length === 0) return;
    this.sending = this.sending.then(async () => {
      try {
        for (const payload of workPayloads(this.#sender, batch)) await this.#pool.query('SELECT pg_notify($1, $2)', [WORK_CHANNEL, payload]);
        this.#failures = 0;
      } catch (err) {
        if (this.#failures++ === 0) this.#log.warn({ err }, 'telling the other instances about new work failed; they find it at their next poll');
      }
    });
  }
}

/**
 * Starts the wake-ups of a daemon: takes the instance-name lock (refused with `invalid_config`
 * when another daemon holds it), listens on the channel, relays in both directions. `poll` is
 * called when the listening connection comes back after a loss (notifications sent meanwhile
 * are lost: look at everything).
 */
export async function startPgWakeups(o: { url: string; instance: string; work: WorkSignal; log: Logger; poll: () => void }): Promise<PgWakeups> {
  const log = o.log.child({ subsystem: 'wakeups' });
  // One connection that stays checked out (LISTEN and the session lock live on it), and one for NOTIFY.
  const listenPool = createPgPool(o.url, { max: 1, idleTimeoutMs: 0, log });
  const notifyPool = createPgPool(o.url, { max: 1, log });
  const me = senderId(o.instance);
  const listener = new WorkListener(listenPool, o, me, log);
  try {
    await listener.connect();
  } catch (err) {
    await Promise.all([listenPool.end(), notifyPool.end()]).catch(() => undefined);
    throw err;
  }
  const out = relayOut(notifyPool, me, o.work, log, () => listener.relaying);
  log.info({ channel: WORK_CHANNEL, instance: o.instance }, 'listening for work queued by other instances');
  return {
    async close() {
      if (!listener.close()) return;
      out.stop();
      await out.flushed();
      listener.detach(true);
      await Promise.all([listenPool.end(), notifyPool.end()]);
    },
  };
}

/** What the listening connection needs of startPgWakeups' options. */
interface ListenerOptions {
  readonly url: string;
  readonly instance: string;
  readonly work: WorkSignal;
  readonly poll: () => void;
}

/**
 * The listening connection: it holds the instance-name lock, relays what the other instances
 * send into this process's work signal, and comes back after a loss (RECONNECT_DELAYS_MS).
 */
class WorkListener {
  readonly #pool: Pool;
  readonly #o: ListenerOptions;
  readonly #me: string;
  readonly #log: Logger;
  /** True while a message from the channel is relayed in: relayOut does not send it back. */
  relaying = false;
  #closed = false;
  #client: PoolClient | null = null;
  #reconnectTimer: NodeJS.Timeout | null = null;
  #reconnects = 0;

  constructor(pool: Pool, o: ListenerOptions, me: string, log: Logger) {
    this.#pool = pool;
    this.#o = o;
    this.#me = me;
    this.#log = log;
  }

  /** Connects, takes the lock, listens. Throws what failed (the lock taken: invalid_config). */
  async connect(): Promise<void> {
    const c = await this.#pool.connect();
    try {
      const { rows } = await c.query<{ locked: boolean }>('SELECT pg_try_advisory_lock($1, hashtext($2)) AS locked', [INSTANCE_LOCK_CLASS, this.#o.instance]);
      if (!rows[0]?.locked) {
        throw new HookrelayError(
          ErrorCode.config,
          `another hookrelay instance named "${this.#o.instance}" is running on database ${loggableDatabaseUrl(this.#o.url)}; give each instance sharing a database its own instance.name (HOOKRELAY_INSTANCE_NAME)`,
        );
      }
      c.on('notification', this.#onNotification);
      c.on('error', this.#onLost);
      await c.query(`LISTEN ${WORK_CHANNEL}`);
    } catch (err) {
      c.removeListener('notification', this.#onNotification);
      c.removeListener('error', this.#onLost);
      c.release(true);
      throw err;
    }
    this.#client = c;
    // Closed while connecting (a reconnect under way at shutdown): the pool's end waits for it.
    if (this.#closed) this.detach(true);
  }

  /** Stops reconnecting; false when it was closed already. */
  close(): boolean {
    if (this.#closed) return false;
    this.#closed = true;
    if (this.#reconnectTimer !== null) clearTimeout(this.#reconnectTimer);
    return true;
  }

  /** Lets go of the listening connection, if any: ending its session ends LISTEN and the instance-name lock. */
  detach(reason: Error | true): void {
    const c = this.#client;
    this.#client = null;
    if (c === null) return;
    c.removeListener('notification', this.#onNotification);
    c.removeListener('error', this.#onLost);
    c.release(reason);
  }

  readonly #onNotification = (msg: Notification): void => {
    if (msg.channel !== WORK_CHANNEL || msg.payload === undefined) return;
    const message = parseMessage(msg.payload);
    if (message === null || message.i === this.#me) return;
    this.relaying = true;
    try {
      for (const [orgId, kind] of message.w) this.#o.work.notify(orgId, kind);
    } finally {
      this.relaying = false;
    }
  };

  readonly #onLost = (err: Error): void => {
    this.detach(err);
    if (this.#closed) return;
    this.#log.warn({ err }, 'the connection that hears other instances was lost; polling meanwhile, reconnecting');
    this.#scheduleReconnect();
  };

  #scheduleReconnect(): void {
    if (this.#closed || this.#reconnectTimer !== null) return;
    const delay = RECONNECT_DELAYS_MS[Math.min(this.#reconnects, RECONNECT_DELAYS_MS.length - 1)]!;
    this.#reconnects++;
    this.#reconnectTimer = setTimeout(() => {
      this.#reconnectTimer = null;
      this.connect().then(
        () => {
          if (this.#closed) return;
          this.#log.info({ tries: this.#reconnects }, 'listening to other instances again');
          this.#reconnects = 0;
          this.#o.poll();
        },
        (err: unknown) => {
          if (this.#reconnects === 1 || this.#reconnects % 12 === 0) this.#log.warn({ err, tries: this.#reconnects }, 'cannot listen to other instances yet; trying again');
          this.#scheduleReconnect();
        },
      );
    }, delay);
  }
}

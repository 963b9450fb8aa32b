/**
 * What a group commit carries (group-commit.ts): the attempts and deliveries waiting for the
 * next commit, the batch one commit takes, and the dispatcher's side of each commit.
 */
import type { ClaimedDelivery, FinishedAttempt, FlushResult, FlushWork } from '../services/outbox.ts';

/** `all`: the group commit (records what waits, claims for the free slots). `claim`: claims only, for new work, without waiting for the disk. */
export type CommitKind = 'all' | 'claim';

/** An attempt as the group commit carries it: ended (`finished` set), or cut short (null). */
export interface PendingAttempt {
  readonly delivery: ClaimedDelivery;
  readonly finished: FinishedAttempt | null;
}

/** What one commit records. */
export interface CommitBatch<A extends PendingAttempt> {
  /** Attempts that ended with an outcome. */
  readonly ended: readonly A[];
  /** Attempts cut short (shutdown, a bug in deliver): given back uncounted. */
  readonly cutShort: readonly A[];
  /** Deliveries claimed and never started: given back. */
  readonly neverStarted: readonly ClaimedDelivery[];
}

/** The dispatcher's side of a commit. One commit at a time: the calls of one commit come in this order. */
export interface CommitHost<A extends PendingAttempt> {
  /** The dispatcher still claims (it runs and is not stopping). */
  claiming(): boolean;
  /** Reads the list of webhooks when it is due (null: not due), before anything else of the commit. */
  refresh(): Promise<void> | null;
  /** Before the batch is taken: gives back stale deliveries claimed ahead (they join this commit), notes retries fallen due. */
  prepare(): void;
  /** What this commit claims (null: nothing); `kind` 'claim' comes with an empty batch. */
  plan(batch: CommitBatch<A>, kind: CommitKind): FlushWork['claim'];
  /** A group commit with nothing to record: the part of `claim` that has anything due (a read, no write transaction), or null. */
  peek(claim: NonNullable<FlushWork['claim']>): Promise<FlushWork['claim']>;
  /** After the transaction (its result), or when the commit had nothing to write (null). */
  committed(batch: CommitBatch<A>, result: FlushResult | null): void;
  /** After repeated failures, `a` was recorded (or given back) alone, or let go: its slot is free. */
  recordedAlone(a: A, givenBack: boolean): void;
}

export const EMPTY_BATCH: CommitBatch<never> = Object.freeze({ ended: [], cutShort: [], neverStarted: [] });

/** What waits for the next commit, oldest first. */
export class WaitingWork<A extends PendingAttempt> {
  ended: A[] = [];
  cutShort: A[] = [];
  neverStarted: ClaimedDelivery[] = [];

  get size(): number {
    return this.ended.length + this.cutShort.length + this.neverStarted.length;
  }

  /** Takes all of it, for one commit. */
  takeBatch(): CommitBatch<A> {
    const batch = { ended: this.ended, cutShort: this.cutShort, neverStarted: this.neverStarted };
    this.ended = [];
    this.cutShort = [];
    this.neverStarted = [];
    return batch;
  }

  /** A commit that failed keeps what it carried, ahead of what came since. */
  putBack(batch: CommitBatch<A>): void {
    this.ended = batch.ended.concat(this.ended);
    this.cutShort = batch.cutShort.concat(this.cutShort);
    this.neverStarted = batch.neverStarted.concat(this.neverStarted);
  }
}

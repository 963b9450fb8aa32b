/**
 * Fixtures for the database-care tests: a state directory seeded through the built CLI, a
 * deterministic way to damage a database file (a data page, or the header), and polling of
 * the daemon's /readyz.
 */
import assert from 'node:assert/strict';
import { closeSync, openSync, writeSync } from 'node:fs';
import { join } from 'node:path';
import type { TestContext } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import Database from 'better-sqlite3';
import { databaseIn, migrateCli, runCli, scratchDir, WAIT_LIMIT_MS } from './feed-helpers.ts';
import { appendFeed, feedLine } from './receivers.ts';

/** Polls the async `probe` every 50 ms until it returns something other than undefined or false. */
export async function waitUntil<T>(what: string, probe: () => Promise<T | undefined | false>, limitMs = WAIT_LIMIT_MS): Promise<T> {
  const deadline = Date.now() + limitMs;
  for (;;) {
    const value = await probe();
    if (value !== undefined && value !== false) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(50);
  }
}

export async function readyz(baseUrl: string): Promise<{ status: number; body: Record<string, unknown> }> {
  const res = await fetch(`${baseUrl}/readyz`);
  return { status: res.status, body: (await res.json()) as Record<string, unknown> };
}

/** A database with organization acme, its webhook (at `url`) and `events` ingested, not delivered; its WAL folded into the file. */
export async function seededState(t: TestContext, url: string, events: number): Promise<{ stateDir: string; db: string; feed: string }> {
  const stateDir = scratchDir(t, 'hookrelay-damaged-');
  const common = ['--state-dir', stateDir];
  await migrateCli(t, common);
  for (const args of [['orgs', 'add', 'acme'], ['webhook', 'set', '--org', 'acme', '--url', url]]) {
    // The receivers of these tests are on 127.0.0.1, which registration refuses unless allowed.
    const r = await runCli(t, [...args, ...common], { env: { HOOKRELAY_DELIVERY_ALLOW_NETWORKS: '127.0.0.1/32' } });
    assert.equal(r.code, 0, r.stderr);
  }
  const feed = join(stateDir, 'seed.jsonl');
  appendFeed(feed, Array.from({ length: events }, (_, i) => feedLine('acme', `evt_seed_${i}`)));
  const ingested = await runCli(t, ['ingest', feed, ...common]);
  assert.equal(ingested.code, 0, ingested.stderr);
  const db = databaseIn(stateDir);
  const conn = new Database(db);
  conn.pragma('wal_checkpoint(TRUNCATE)');
  conn.close();
  return { stateDir, db, feed };
}

/** Overwrites the first bytes of a leaf page of `table` (its b-tree page header): a damaged data page. */
export function damagePageOf(db: string, table: string): number {
  const conn = new Database(db, { readonly: true });
  const { pageno } = conn.prepare("SELECT pageno FROM dbstat WHERE name = ? AND pagetype = 'leaf' ORDER BY pageno LIMIT 1").get(table) as { pageno: number };
  const pageSize = conn.pragma('page_size', { simple: true }) as number;
  conn.close();
  const fd = openSync(db, 'r+');
  writeSync(fd, Buffer.alloc(32, 0xde), 0, 32, (pageno - 1) * pageSize);
  closeSync(fd);
  return pageno;
}

/** Overwrites the file's header ("SQLite format 3"): no longer a database. */
export function damageHeader(db: string): void {
  const fd = openSync(db, 'r+');
  writeSync(fd, Buffer.from('this is not sqlite'), 0, 18, 0);
  closeSync(fd);
}


/**
 * The cost of the audit trail's write on a write path of the admin API: a user's role changed
 * (update_role's service call) with its audit entry appended in the same transaction, against
 * the same transaction without the append. SQLite (a temp file, synchronous=FULL as the daemon
 * runs it) and, with --pg URL, PostgreSQL. Prints the median per operation of each run and
 * writes JSON with --json FILE. Usage: node --import tsx scripts/bench-audit.ts [--ops 300] [--runs 5] [--pg URL]
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { ActorKind, type AuditContext } from '../src/domain/audit.ts';
import { systemClock } from '../src/domain/clock.ts';
import { emailKey } from '../src/domain/validation.ts';
import { loadConfig } from '../src/config/load.ts';
import { createServices } from '../src/services/services.ts';
import { openPgStore } from '../src/store/pg/store.ts';
import type { Store } from '../src/store/repos.ts';
import { openSqliteStore } from '../src/store/sqlite/store.ts';

const { values } = parseArgs({ options: { ops: { type: 'string', default: '300' }, runs: { type: 'string', default: '5' }, pg: { type: 'string' }, json: { type: 'string' } } });
const ops = Number(values.ops);
const runs = Number(values.runs);
const BY: AuditContext = { actor: { kind: ActorKind.api, name: 'admin@acme.test', orgId: 'acme' }, requestId: 'bench', source: '127.0.0.1' };
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

async function bench(name: string, store: Store): Promise<{ backend: string; withAuditUs: number[]; withoutAuditUs: number[] }> {
  const services = createServices(store, loadConfig({ env: {}, overrides: { stateDir: tmpdir() } }));
  await services.orgs.add(BY, { id: 'acme' });
  await services.users.add(BY, { orgId: 'acme', email: 'admin@acme.test', roleName: 'saas_admin' });
  await services.users.add(BY, { orgId: 'acme', email: 'bob@acme.test', roleName: 'saas_viewer' });
  const roles = ['saas_admin', 'saas_viewer'];
  // The same reads and write setRole makes, in one transaction, without the audit entry.
  const bare = async (role: string) =>
    store.transaction(async (tx) => {
      const user = (await tx.users.findByEmail('acme', emailKey('bob@acme.test')))!;
      await tx.roles.get(role);
      await tx.users.setRole(user.id, role, store.clock.now());
    });
  const audited = (role: string) => services.users.setRole(BY, 'acme', { email: 'bob@acme.test', role_name: role });
  const time = async (fn: (role: string) => Promise<unknown>) => {
    const t0 = performance.now();
    for (let i = 0; i < ops; i++) await fn(roles[i % 2]!);
    return ((performance.now() - t0) / ops) * 1000;
  };
  await time(audited);
  await time(bare);
  const withAuditUs: number[] = [];
  const withoutAuditUs: number[] = [];
  for (let r = 0; r < runs; r++) {
    withoutAuditUs.push(await time(bare));
    withAuditUs.push(await time(audited));
  }
  console.log(`${name}: update_role's transaction ${median(withoutAuditUs).toFixed(0)} us without the audit entry, ${median(withAuditUs).toFixed(0)} us with it (median of ${runs} runs of ${ops}; runs: ${withAuditUs.map((x) => x.toFixed(0)).join(', ')} / ${withoutAuditUs.map((x) => x.toFixed(0)).join(', ')})`);
  return { backend: name, withAuditUs, withoutAuditUs };
}

const results = [];
const dir = mkdtempSync(join(tmpdir(), 'hookrelay-bench-audit-'));
try {
  const sqlite = openSqliteStore(join(dir, 'hookrelay.db'), systemClock);
  results.push(await bench('sqlite', sqlite));
  await sqlite.close();
  if (values.pg !== undefined) {
    const pg = await openPgStore(values.pg, systemClock, { instance: 'bench' });
    results.push(await bench('postgres', pg));
    await pg.close();
  }
} finally {
  rmSync(dir, { recursive: true, force: true });
}
if (values.json !== undefined) writeFileSync(values.json, JSON.stringify({ ops, runs, results }, null, 2));

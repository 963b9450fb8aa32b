/**
 * The fault suite's network (scripts/fault-suite-pg.ts): network namespaces joined by veth
 * pairs, made for one run and removed at its end, so that links between the PostgreSQL server
 * and each hookrelay instance can be cut, slowed and made lossy without touching anything
 * else on the machine. Root only (ip netns, ip link, tc).
 *
 *   ns <run>-db   PostgreSQL on a bridge, 10.D.0.1/24
 *   ns <run>-rx   a bridge, 10.R.0.1/24: the receivers' network
 *   ns <run>-iK   instance K: 10.D.0.(10+K) on a veth into the db bridge (its database link),
 *                 10.R.0.(10+K) on a veth into the rx bridge (its receivers' link)
 *   root          10.D.0.254 and 10.R.0.254 on a veth into each bridge: the suite itself
 *                 (its queries to PostgreSQL, the receivers, the /readyz probes)
 *
 * Nothing has a default route: no namespace reaches beyond these two /24 networks, and the
 * root namespace gains only two addresses on two links of its own, in /24s no route of the
 * machine uses (chosen at random per run, so that two runs side by side do not collide).
 * Faults act on an instance's database link only: its receivers stay reachable, which is the
 * dangerous case (an instance cut off from the database that could still send).
 */
import { execFile, execFileSync } from 'node:child_process';
import { randomBytes, randomInt } from 'node:crypto';
import { promisify } from 'node:util';

const execFileAsync = promisify(execFile);

export interface FaultNet {
  /** A short id of the run, in every name made (namespaces, links). */
  readonly id: string;
  /** The database namespace, and the server's address in it. */
  readonly dbNs: string;
  readonly dbAddress: string;
  /** The root namespace's address on the database network (the suite's queries) and on the receivers' network (receivers, probes). */
  readonly rootDbAddress: string;
  readonly rootRxAddress: string;
  /** Instance k's (1-based) namespace and addresses. */
  instanceNs(k: number): string;
  instanceDbAddress(k: number): string;
  instanceRxAddress(k: number): string;
  /** Cuts instance k's database link (the veth goes down on both ends: packets are dropped, sockets stay open), or restores it. */
  cut(k: number): Promise<void>;
  restore(k: number): Promise<void>;
  /** Delay and loss on instance k's database link in both directions (tc netem), or back to none. Only when `netem`. */
  shape(k: number, delayMs: number, lossPercent: number): Promise<void>;
  unshape(k: number): Promise<void>;
  /** Whether this kernel has the netem queueing discipline (sch_netem). */
  readonly netem: boolean;
  /** Removes everything made (idempotent); synchronous, so that an exit handler can run it. */
  destroy(): void;
}

const ip = (...args: string[]) => execFileAsync('ip', args);
const ipSync = (...args: string[]) => execFileSync('ip', args, { stdio: ['ignore', 'ignore', 'pipe'] });

/** Whether the kernel offers netem: tried on the loopback of a scratch namespace. */
function hasNetem(scratch: string): boolean {
  try {
    ipSync('netns', 'add', scratch);
    execFileSync('ip', ['netns', 'exec', scratch, 'tc', 'qdisc', 'add', 'dev', 'lo', 'root', 'netem', 'delay', '1ms'], { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  } finally {
    try {
      ipSync('netns', 'del', scratch);
    } catch {
      // never made
    }
  }
}

/** Two /24s of 10.x.0.0 that no route of the machine overlaps. */
function freeSubnets(): [number, number] {
  const routes = execFileSync('ip', ['-4', 'route', 'show', 'table', 'all'], { encoding: 'utf8' });
  const taken = new Set<number>();
  for (const m of routes.matchAll(/\b10\.(\d+)\./g)) taken.add(Number(m[1]));
  if (/\b10\.0\.0\.0\/8\b/.test(routes)) throw new Error('a route covers all of 10.0.0.0/8: no room for the suite\'s networks');
  const pick = (): number => {
    for (let i = 0; i < 200; i++) {
      const x = randomInt(100, 250);
      if (!taken.has(x)) {
        taken.add(x);
        return x;
      }
    }
    throw new Error('no free 10.x.0.0/24 for the suite\'s networks');
  };
  return [pick(), pick()];
}

/** Makes the namespaces and links for `instances` instances. Root only. */
export async function createFaultNet(instances: number): Promise<FaultNet> {
  if (process.getuid?.() !== 0) throw new Error('the network fault suite needs root (ip netns, ip link, tc)');
  const id = `hf${randomBytes(2).toString('hex')}`;
  const netem = hasNetem(`${id}-probe`);
  const [d, r] = freeSubnets();
  const dbNs = `${id}-db`;
  const rxNs = `${id}-rx`;
  const instanceNs = (k: number) => `${id}-i${k}`;
  const made: string[] = [];
  const rootLinks: string[] = [];
  const destroy = () => {
    for (const link of rootLinks.splice(0)) {
      try {
        ipSync('link', 'del', link);
      } catch {
        // gone with its peer's namespace
      }
    }
    for (const ns of made.splice(0).reverse()) {
      try {
        ipSync('netns', 'del', ns);
      } catch {
        // already gone
      }
    }
  };
  try {
    for (const ns of [dbNs, rxNs]) {
      await ip('netns', 'add', ns);
      made.push(ns);
      await ip('-n', ns, 'link', 'set', 'lo', 'up');
      await ip('-n', ns, 'link', 'add', 'name', 'br0', 'type', 'bridge');
      await ip('-n', ns, 'link', 'set', 'br0', 'up');
    }
    await ip('-n', dbNs, 'addr', 'add', `10.${d}.0.1/24`, 'dev', 'br0');
    await ip('-n', rxNs, 'addr', 'add', `10.${r}.0.1/24`, 'dev', 'br0');
    /** A veth pair: `near` in `nearNs` (null: root) with `address`, its peer a port of `bridgeNs`'s bridge. */
    const join = async (near: string, nearNs: string | null, bridgeNs: string, address: string) => {
      const far = `${near}b`;
      await ip('link', 'add', near, 'type', 'veth', 'peer', 'name', far, 'netns', bridgeNs);
      if (nearNs === null) rootLinks.push(near);
      else await ip('link', 'set', near, 'netns', nearNs);
      const at = nearNs === null ? [] : ['-n', nearNs];
      await ip(...at, 'addr', 'add', address, 'dev', near);
      await ip(...at, 'link', 'set', near, 'up');
      await ip('-n', bridgeNs, 'link', 'set', far, 'master', 'br0');
      await ip('-n', bridgeNs, 'link', 'set', far, 'up');
    };
    await join(`${id}rd`, null, dbNs, `10.${d}.0.254/24`);
    await join(`${id}rr`, null, rxNs, `10.${r}.0.254/24`);
    for (let k = 1; k <= instances; k++) {
      const ns = instanceNs(k);
      await ip('netns', 'add', ns);
      made.push(ns);
      await ip('-n', ns, 'link', 'set', 'lo', 'up');
      await join(`${id}i${k}d`, ns, dbNs, `10.${d}.0.${10 + k}/24`);
      await join(`${id}i${k}r`, ns, rxNs, `10.${r}.0.${10 + k}/24`);
    }
  } catch (err) {
    destroy();
    throw err;
  }
  const dbLink = (k: number) => ({ ns: instanceNs(k), near: `${id}i${k}d`, far: `${id}i${k}db` });
  const tc = (ns: string, ...args: string[]) => execFileAsync('ip', ['netns', 'exec', ns, 'tc', ...args]);
  return {
    id,
    netem,
    dbNs,
    dbAddress: `10.${d}.0.1`,
    rootDbAddress: `10.${d}.0.254`,
    rootRxAddress: `10.${r}.0.254`,
    instanceNs,
    instanceDbAddress: (k) => `10.${d}.0.${10 + k}`,
    instanceRxAddress: (k) => `10.${r}.0.${10 + k}`,
    async cut(k) {
      const l = dbLink(k);
      await ip('-n', l.ns, 'link', 'set', l.near, 'down');
      await ip('-n', dbNs, 'link', 'set', l.far, 'down');
    },
    async restore(k) {
      const l = dbLink(k);
      await ip('-n', dbNs, 'link', 'set', l.far, 'up');
      await ip('-n', l.ns, 'link', 'set', l.near, 'up');
    },
    async shape(k, delayMs, lossPercent) {
      if (!netem) throw new Error('this kernel has no netem (sch_netem)');
      const l = dbLink(k);
      // Each direction's egress: the instance's end delays what it sends, the bridge's port what it receives.
      await tc(l.ns, 'qdisc', 'add', 'dev', l.near, 'root', 'netem', 'delay', `${delayMs}ms`, 'loss', `${lossPercent}%`);
      await tc(dbNs, 'qdisc', 'add', 'dev', l.far, 'root', 'netem', 'delay', `${delayMs}ms`, 'loss', `${lossPercent}%`);
    },
    async unshape(k) {
      const l = dbLink(k);
      await tc(l.ns, 'qdisc', 'del', 'dev', l.near, 'root').catch(() => undefined);
      await tc(dbNs, 'qdisc', 'del', 'dev', l.far, 'root').catch(() => undefined);
    },
    destroy,
  };
}

/**
 * Delay and loss on a database link where the kernel has no netem (sch_netem): a TCP relay in
 * a process of its own (forked by scripts/fault-suite-pg.ts, driven over IPC), one listening
 * port per instance, each connection relayed to the PostgreSQL server. Unshaped, bytes pass as
 * they come. Shaped, each chunk of either direction is held `delayMs` before it goes on, in
 * order, and `lossPercent` of the chunks are held longer, as a lost segment is until TCP
 * sends it again: max(200 ms, twice the delay) more (Linux's least retransmission timeout is
 * 200 ms, and it waits about a round trip), with the chunks behind it waiting too (TCP
 * delivers in order). What the application sees of `netem delay 200ms loss 5%` is this: late
 * bytes, in order, some later still; never lost ones. A link cut is not done here: the suite
 * takes the instance's veth down (a real one), which stalls its connections to this relay.
 */
import { connect, createServer, type Server, type Socket } from 'node:net';

export type ShaperCommand =
  | { readonly id: number; readonly type: 'listen'; readonly name: string; readonly host: string; readonly target: { readonly host: string; readonly port: number } }
  | { readonly id: number; readonly type: 'shape'; readonly name: string; readonly delayMs: number; readonly lossPercent: number }
  | { readonly id: number; readonly type: 'unshape'; readonly name: string }
  | { readonly id: number; readonly type: 'exit' };

export interface ShaperReply {
  readonly id: number;
  readonly ok: boolean;
  readonly error?: string;
  readonly port?: number;
}

interface Shape {
  delayMs: number;
  lossPercent: number;
}

/** One direction of one connection: chunks written to `to` in order, each no earlier than its due time. */
class Pipe {
  #lastDue = 0;
  readonly #to: Socket;
  readonly #shape: () => Shape | null;
  constructor(to: Socket, shape: () => Shape | null) {
    this.#to = to;
    this.#shape = shape;
  }

  push(chunk: Buffer): void {
    const shape = this.#shape();
    if (shape === null && this.#lastDue <= performance.now()) {
      this.#to.write(chunk);
      return;
    }
    const delay = shape === null ? 0 : shape.delayMs + (Math.random() * 100 < shape.lossPercent ? Math.max(200, 2 * shape.delayMs) : 0);
    const due = Math.max(performance.now() + delay, this.#lastDue);
    this.#lastDue = due;
    setTimeout(() => {
      if (!this.#to.destroyed) this.#to.write(chunk);
    }, due - performance.now());
  }
}

const links = new Map<string, { server: Server; shape: Shape | null }>();

function relay(name: string, client: Socket, target: { host: string; port: number }): void {
  const link = links.get(name)!;
  const upstream = connect(target);
  const toServer = new Pipe(upstream, () => link.shape);
  const toClient = new Pipe(client, () => link.shape);
  client.on('data', (c: Buffer) => toServer.push(c));
  upstream.on('data', (c: Buffer) => toClient.push(c));
  const end = () => {
    client.destroy();
    upstream.destroy();
  };
  for (const s of [client, upstream]) {
    s.on('error', end);
    s.on('close', end);
  }
}

function handle(cmd: ShaperCommand): Promise<Omit<ShaperReply, 'id'>> | Omit<ShaperReply, 'id'> {
  switch (cmd.type) {
    case 'listen':
      return new Promise((resolve) => {
        const server = createServer((socket) => relay(cmd.name, socket, cmd.target));
        links.set(cmd.name, { server, shape: null });
        server.once('error', (err) => resolve({ ok: false, error: String(err) }));
        server.listen(0, cmd.host, () => {
          const address = server.address();
          resolve({ ok: true, port: typeof address === 'object' && address !== null ? address.port : 0 });
        });
      });
    case 'shape':
      links.get(cmd.name)!.shape = { delayMs: cmd.delayMs, lossPercent: cmd.lossPercent };
      return { ok: true };
    case 'unshape':
      links.get(cmd.name)!.shape = null;
      return { ok: true };
    case 'exit':
      setImmediate(() => process.exit(0));
      return { ok: true };
  }
}

if (process.send !== undefined) {
  process.on('message', async (cmd: ShaperCommand) => {
    try {
      process.send!({ id: cmd.id, ...(await handle(cmd)) } satisfies ShaperReply);
    } catch (err) {
      process.send!({ id: cmd.id, ok: false, error: String(err) } satisfies ShaperReply);
    }
  });
  // The suite gone, the relay goes too.
  process.on('disconnect', () => process.exit(0));
}

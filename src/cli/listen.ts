import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Command } from 'commander';
import { createNetworkPolicies } from '../domain/address-policy.ts';
import { ErrorCode, isHookrelayError } from '../domain/errors.ts';
import { verifySignature } from '../domain/signature.ts';
import { terminalSafe, terminalSafeBytes, terminalSafeJson } from '../domain/terminal-text.ts';
import { optionsOf, say, UsageError, withServices } from './shared.ts';

/** Where `hookrelay listen` listens unless told otherwise: the admin API's port plus ten. */
export const LISTEN_DEFAULT_PORT = 8090;
/** The most of a request body `listen` reads; a delivery is far smaller. */
const MAX_BODY_BYTES = 1024 * 1024;

interface ListenOptions {
  readonly org: string;
  readonly port: string;
  readonly status: string;
  readonly verbose?: boolean;
}

/**
 * A value that came from the network (a header, the URL, a field of the body) as a short part of
 * the request's one-line summary: its first `max` characters (then "..."), escaped for the
 * terminal (terminalSafe), so that no request writes escape sequences, line breaks or
 * bidirectional controls to the user's terminal.
 */
function shown(value: unknown, max = 60): string {
  const text = typeof value === 'string' ? value : (JSON.stringify(value) ?? '');
  if (text.length <= max) return terminalSafe(text);
  // Not in the middle of a surrogate pair: half of one would show as an escape of its own.
  const end = /[\ud800-\udbff]/.test(text.charAt(max - 1)) ? max - 1 : max;
  return `${terminalSafe(text.slice(0, end))}...`;
}

const utf8 = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true });

/**
 * The body of a request as `--verbose` prints it, each line indented by two spaces, its line
 * breaks kept: valid JSON with every character a terminal must not get raw written as JSON's
 * own `\uNNNN` escape, so that it is still the same JSON (terminalSafeJson); any other body
 * escaped as terminalSafe text (backslashes doubled, `\xNN` for a byte that is not UTF-8).
 * Verified or not, nothing of it reaches the terminal as a control: an unverified request may
 * come from any local process, or from a web page posting to 127.0.0.1.
 */
function bodyLines(bytes: Uint8Array): string {
  let text: string;
  try {
    text = utf8.decode(bytes);
    JSON.parse(text);
  } catch {
    return indent(terminalSafeBytes(bytes, { lines: true }));
  }
  return indent(terminalSafeJson(text));
}

const indent = (text: string) => text.replace(/^/gm, '  ');

/**
 * `hookrelay listen --org ORG`: a local receiver for development. It listens on 127.0.0.1,
 * verifies each delivery's Standard Webhooks signature with the organization's current signing
 * secret, read from this install's database for every request (a rotation made meanwhile is
 * seen; during a rotation the daemon signs with both secrets, so the current one is enough),
 * prints a line per request and answers `--status` (204 by default; 500 to watch retries). A
 * request whose signature does not verify is answered 401 and said so. It tells the user the
 * one-time setup that lets the daemon deliver to it: the development settings for this
 * organization, and the `webhook set` command.
 */
export function registerListenCommand(program: Command): void {
  program
    .command('listen')
    .description('a local webhook receiver for development: verifies and prints each delivery of an organization')
    .requiredOption('--org <id>', 'organization whose deliveries to verify')
    .option('--port <n>', 'port on 127.0.0.1 (0: any free port)', String(LISTEN_DEFAULT_PORT))
    .option('--status <code>', 'HTTP status to answer verified deliveries with (e.g. 500 to see retries)', '204')
    .option('--verbose', 'print each body as well')
    .action((_options: unknown, cmd: Command) => {
      const options = optionsOf<ListenOptions>(cmd);
      const port = Number(options.port);
      if (!Number.isInteger(port) || port < 0 || port > 65_535) throw new UsageError(`--port must be an integer from 0 to 65535; got "${options.port}"`);
      const status = Number(options.status);
      if (!Number.isInteger(status) || status < 200 || status > 599) throw new UsageError(`--status must be an HTTP status from 200 to 599; got "${options.status}"`);
      return withServices(options, async ({ services, config }) => {
        // The organization and its webhook exist (a clear error now rather than 401s later).
        await services.orgs.require(options.org);
        const secret = async (): Promise<string | null> => {
          try {
            return await services.webhooks.getSecret(options.org);
          } catch (err) {
            // No webhook yet, or one without HMAC: requests are shown as unsigned.
            if (isHookrelayError(err) && (err.code === ErrorCode.secretNotConfigured || err.code === ErrorCode.webhookNotConfigured)) return null;
            throw err;
          }
        };

        const out = say;
        const handle = (req: IncomingMessage, res: ServerResponse) => {
          const chunks: Buffer[] = [];
          let size = 0;
          req.on('data', (chunk: Buffer) => {
            size += chunk.length;
            if (size <= MAX_BODY_BYTES) chunks.push(chunk);
          });
          req.on('end', () => {
            answerDelivery(req, res, Buffer.concat(chunks), { secret, status, verbose: options.verbose === true, out }).catch((err: unknown) => {
              out(`error: ${terminalSafe((err as Error).message)}`);
              res.writeHead(500).end();
            });
          });
        };

        const server = createServer(handle);
        await new Promise<void>((resolve, reject) => {
          server.once('error', (err: NodeJS.ErrnoException) =>
            reject(err.code === 'EADDRINUSE' ? new UsageError(`port ${port} on 127.0.0.1 is already in use; choose another with --port`) : err),
          );
          server.listen(port, '127.0.0.1', () => resolve());
        });
        const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/webhook`;
        out(`listening on ${url} for organization ${options.org}; each delivery is verified with its current signing secret (Ctrl-C stops)`);
        const allowed = createNetworkPolicies(config.delivery).forOrg(options.org).refusal('127.0.0.1') === null && config.delivery.allowHttp;
        out('');
        out('one-time setup, if not done yet:');
        if (allowed) {
          out(`  - the daemon's configuration already lets ${options.org}'s webhook reach http://127.0.0.1 (delivery.allowHttp, and 127.0.0.1 granted)`);
        } else {
          out(`  - let ${options.org}'s webhook reach this machine over http, in the configuration file the daemon and the CLI read (--config),`);
          out(`    then restart the daemon (it reads its configuration at start). For development only:`);
          out(`      { "delivery": { "allowHttp": true, "organizationNetworks": ["${options.org}=127.0.0.1/32"] } }`);
        }
        out(`  - hookrelay webhook set --org ${options.org} --url ${url}   (with the same --config / --state-dir as the daemon)`);
        out(`  - send one: hookrelay webhook test --org ${options.org}`);
        out('');
        await new Promise<void>((resolve) => {
          const stop = () => {
            server.close(() => resolve());
            server.closeAllConnections();
          };
          process.once('SIGINT', stop);
          process.once('SIGTERM', stop);
        });
      });
    });
}

/** What answerDelivery needs besides the request: the organization's secret now, the status to answer, where to print. */
interface ListenContext {
  readonly secret: () => Promise<string | null>;
  readonly status: number;
  readonly verbose: boolean;
  readonly out: (line: string) => void;
}

/** Verifies one request, prints its line (and with --verbose its body, escaped), and answers it. */
async function answerDelivery(req: IncomingMessage, res: ServerResponse, bytes: Buffer, context: ListenContext): Promise<void> {
  const body = bytes.toString('utf8');
  const header = (name: string) => (typeof req.headers[name] === 'string' ? (req.headers[name] as string) : undefined);
  const current = await context.secret();
  const signature = header('webhook-signature');
  let problem: string | null;
  if (current !== null) problem = verifySignature([current], { id: header('webhook-id'), timestamp: header('webhook-timestamp'), signature }, body, Math.floor(Date.now() / 1000));
  else problem = signature === undefined ? null : 'signed, but the webhook has no signing secret here (another install?)';
  let data: Record<string, unknown> = {};
  try {
    data = ((JSON.parse(body) as { data?: Record<string, unknown> }).data ?? {}) as Record<string, unknown>;
  } catch {
    // Not JSON: shown as such below.
  }
  const verdict = problem !== null ? `signature FAILED: ${problem}` : current === null ? 'unsigned (active_hmac is false)' : 'signature ok';
  const answer = problem === null ? context.status : 401;
  context.out(
    [
      new Date().toISOString(),
      `${shown(req.method ?? '?')} ${shown(req.url, 80)}`,
      `id ${shown(header('webhook-id') ?? '-')}`,
      `request ${shown(data.anticipation_request_id ?? '-')}`,
      `status ${shown(data.status ?? '-')}`,
      verdict,
      `-> ${answer}`,
    ].join('  '),
  );
  if (context.verbose) context.out(bodyLines(bytes));
  res.writeHead(answer, answer === 401 ? { 'content-type': 'text/plain' } : {});
  res.end(answer === 401 ? 'signature does not verify\n' : undefined);
}

import type { Command } from 'commander';
import type { Config } from '../config/load.ts';
import { iso } from '../domain/iso.ts';
import { consoleRedirectUri, localBaseUrl } from '../domain/listen.ts';
import type { FeedReport, QueueSnapshot, WebhookReport } from '../services/status.ts';
import { webhookHealthView } from '../services/views.ts';
import { certificateExpiries, loadOperatorCertificates, NO_OPERATOR_CERTIFICATES, type OperatorCertificates } from '../services/receiver-credentials.ts';
import { daysLeft, expirySentence, expiryState, type CertificateExpiry } from '../domain/certificate-expiry.ts';
import { configFrom, jsonOption, optionsOf, print, table, withStore } from './shared.ts';

/** How long `status` waits for the daemon's /readyz. */
export const PROBE_TIMEOUT_MS = 2000;

/** What the daemon's readiness probe said, or why it could not be asked. */
export interface DaemonProbe {
  readonly url: string | null;
  readonly reachable: boolean;
  readonly ready: boolean;
  readonly statusCode: number | null;
  readonly error: string | null;
  /** Ready, but on borrowed time: `reason (detail)` of each entry of /readyz's `degraded` (the identity provider unreachable). */
  readonly degraded: readonly string[];
}

/** The URL of the daemon's /readyz for a listen address: a wildcard address is asked on loopback. */
export function readinessUrl(listen: string): string | null {
  const base = localBaseUrl(listen);
  return base === null ? null : `${base}/readyz`;
}

/** Asks the daemon's /readyz, for at most `timeoutMs`. Never throws. */
export async function probeDaemon(listen: string, timeoutMs = PROBE_TIMEOUT_MS): Promise<DaemonProbe> {
  const url = readinessUrl(listen);
  if (url === null) return { url, reachable: false, ready: false, statusCode: null, error: `api.listen is ${listen}: with port 0 the daemon picks its port at start; pass --listen HOST:PORT`, degraded: [] };
  try {
    const res = await fetch(url, { signal: AbortSignal.timeout(timeoutMs) });
    const body = Buffer.from(await res.arrayBuffer()).toString('utf8');
    // A 503 says why (a full disk, a damaged database: docs/operations.md, "Health checks").
    let reason = '';
    let degraded: string[] = [];
    try {
      const parsed = JSON.parse(body) as { reason?: unknown; detail?: unknown; degraded?: unknown };
      if (typeof parsed.reason === 'string') reason = `: ${parsed.reason}${typeof parsed.detail === 'string' ? ` (${parsed.detail})` : ''}`;
      if (Array.isArray(parsed.degraded)) degraded = (parsed.degraded as Array<{ reason?: unknown; detail?: unknown }>).map((d) => `${String(d.reason)} (${String(d.detail)})`);
    } catch {
      // not JSON: the status code says enough
    }
    return { url, reachable: true, ready: res.status === 200, statusCode: res.status, error: res.status === 200 ? null : `/readyz answered ${res.status}${reason}`, degraded };
  } catch (err) {
    const e = err as Error & { cause?: NodeJS.ErrnoException };
    const why = e.name === 'TimeoutError' ? `no answer within ${timeoutMs} ms` : e.cause?.code ? e.cause.message || e.cause.code : e.message;
    return { url, reachable: false, ready: false, statusCode: null, error: why, degraded: [] };
  }
}

/** How the console signs in: by link always, and through the identity provider when console.oidc.clientId is set. */
export interface ConsoleSignInReport {
  readonly identity_provider: null | {
    readonly issuer: string | null;
    readonly client_id: string;
    /** What to register at the provider as the redirect URI and post-logout redirect URI; null when api.listen has port 0 and console.publicUrl is not set. */
    readonly redirect_uri: string | null;
    readonly scope: string;
  };
}

/** The console's sign-in as configured: the redirect URI is <console.publicUrl or the api.listen address>/console/. */
export function consoleSignInReport(config: Pick<Config, 'api' | 'auth' | 'console'>): ConsoleSignInReport {
  const { oidc, publicUrl } = config.console;
  if (oidc.clientId === null) return { identity_provider: null };
  const base = publicUrl ?? localBaseUrl(config.api.listen);
  return { identity_provider: { issuer: config.auth.provider.issuer, client_id: oidc.clientId, redirect_uri: base === null ? null : consoleRedirectUri(base, base), scope: oidc.scopes.join(' ') } };
}

/** The JSON of `hookrelay status --json` (the human form is made from it). */
export function statusView(input: {
  daemon: DaemonProbe;
  feed: FeedReport | null;
  queue: QueueSnapshot;
  webhooks: readonly WebhookReport[];
  now: number;
  console?: ConsoleSignInReport;
  /** The client certificates deliveries present, and how long before expiry they are flagged (delivery.clientCertificateExpiryWarning). */
  certificates?: { readonly list: readonly CertificateExpiry[]; readonly warnMs: number };
}) {
  const { daemon, feed, queue, webhooks, now } = input;
  const byOrg = new Map(queue.organizations.map((o) => [o.orgId, o]));
  return {
    checked_at: iso(now),
    daemon: { url: daemon.url, reachable: daemon.reachable, ready: daemon.ready, status_code: daemon.statusCode, error: daemon.error, degraded: daemon.degraded },
    console: input.console ?? { identity_provider: null },
    feed:
      feed === null
        ? null
        : {
            path: feed.path,
            position: feed.position,
            size: feed.size,
            lag_bytes: feed.lagBytes,
            rotated: feed.rotated,
            accepted: feed.accepted,
            duplicates: feed.duplicates,
            quarantined: feed.quarantined,
            updated_at: iso(feed.updatedAt),
          },
    queue: {
      pending: queue.totals.new + queue.totals.retrying + queue.totals.held,
      new: queue.totals.new,
      retrying: queue.totals.retrying,
      held: queue.totals.held,
      rate_limited: queue.totals.rateLimited,
      oldest_due_at: iso(queue.oldestDueAt),
      oldest_due_age_seconds: queue.oldestDueAt === null ? null : Math.max(0, Math.round((queue.at - queue.oldestDueAt) / 1000)),
      // Several instances: changes sent after a later change of their request (docs/scale-out.md).
      out_of_order_deliveries: webhooks.reduce((sum, w) => sum + w.outOfOrderDeliveries, 0),
    },
    webhooks: webhooks.map((w) => {
      const q = byOrg.get(w.orgId);
      return {
        organization_id: w.orgId,
        webhook_url: w.url,
        status: w.status,
        rate_limit: w.rateLimit,
        ...webhookHealthView(w),
        queue: { new: q?.fresh ?? 0, retrying: q?.tried ?? 0, oldest_due_at: iso(q?.oldestDueAt ?? null), rate_limited: q?.rateLimited ?? 0, out_of_order_deliveries: w.outOfOrderDeliveries },
      };
    }),
    client_certificates: (input.certificates?.list ?? []).map((c) => ({
      organization_id: c.orgId,
      source: c.source,
      subject: c.subject,
      fingerprint_sha256: c.fingerprintSha256,
      not_after: iso(c.notAfter),
      days_left: daysLeft(c, now),
      state: expiryState(c, now, input.certificates?.warnMs ?? 0),
      detail: expirySentence(c, now),
    })),
  };
}
export type StatusView = ReturnType<typeof statusView>;

/** Seconds as a short human duration: 42s, 3m 20s, 5h 2m, 2d 4h. */
function ago(seconds: number): string {
  if (seconds < 60) return `${seconds}s`;
  const [m, s] = [Math.floor(seconds / 60), seconds % 60];
  if (m < 60) return `${m}m ${s}s`;
  const [h, mm] = [Math.floor(m / 60), m % 60];
  if (h < 48) return `${h}h ${mm}m`;
  return `${Math.floor(h / 24)}d ${h % 24}h`;
}

/** The human form of `hookrelay status`. */
export function statusText(view: StatusView): string {
  const d = view.daemon;
  const lines = [
    `daemon:   ${d.reachable ? `reachable at ${d.url}, ${d.ready ? (d.degraded.length === 0 ? 'ready' : `ready, degraded: ${d.degraded.join('; ')}`) : `not ready (${d.error})`}` : `not reachable${d.url ? ` at ${d.url}` : ''}: ${d.error}`}`,
  ];
  const idp = view.console.identity_provider;
  if (idp !== null) {
    const uri = idp.redirect_uri ?? '(api.listen has port 0: set console.publicUrl)';
    lines.push(`console:  sign-in by link, and through ${idp.issuer} as client ${idp.client_id}: register ${uri} as its redirect URI and post-logout redirect URI`);
  }
  const f = view.feed;
  if (f === null) lines.push('feed:     standard input (no position, no lag)');
  else if (f.size === null) lines.push(`feed:     ${f.path}: no such file yet${f.position === null ? '' : ` (position ${f.position} committed)`}`);
  else {
    const where = f.position === null ? 'nothing committed yet' : f.rotated ? `a new file (position ${f.position} is of the previous one)` : `committed ${f.position} of ${f.size} bytes`;
    lines.push(`feed:     ${f.path}: ${where}, lag ${f.lag_bytes} bytes; ${f.accepted} accepted, ${f.duplicates} duplicate, ${f.quarantined} quarantined${f.updated_at ? `; last commit ${f.updated_at}` : ''}`);
  }
  const q = view.queue;
  lines.push(
    `queue:    ${q.pending} pending: ${q.new} new, ${q.retrying} retrying, ${q.held} held (disabled webhooks)` +
      (q.oldest_due_at === null ? '; nothing due' : `; oldest due since ${q.oldest_due_at} (${ago(q.oldest_due_age_seconds ?? 0)})`) +
      (q.rate_limited > 0 ? `; ${q.rate_limited} due waiting for their webhook's rate limit` : ''),
  );
  if (q.out_of_order_deliveries > 0) {
    lines.push(`order:    ${q.out_of_order_deliveries} change(s) sent after a later change of their request (stored later than delivery.reorderWindow allows for; docs/scale-out.md)`);
  }
  if (view.webhooks.length === 0) {
    lines.push('webhooks: none; register one with: hookrelay webhook set --org ORG --url URL');
    return lines.join('\n');
  }
  lines.push('', table([['ORGANIZATION', 'STATUS', 'NEW', 'RETRYING', 'OLDEST DUE', 'RATE LIMIT', 'LAST ERROR'], ...view.webhooks.map((w) => [
    w.organization_id,
    w.status,
    String(w.queue.new),
    String(w.queue.retrying),
    w.queue.oldest_due_at ?? '-',
    w.rate_limit === null ? '-' : `${w.rate_limit}/s${w.queue.rate_limited > 0 ? ` (reached: ${w.queue.rate_limited} waiting)` : ''}`,
    w.last_error === null ? '-' : `${w.last_error.error} (${w.last_error.at})`,
  ])]));
  for (const w of view.webhooks) if (w.status !== 'active' || w.consecutive_failures > 0) lines.push(`  ${w.organization_id}: ${w.status_detail}`);
  if (view.client_certificates.length > 0) {
    lines.push('', table([['CLIENT CERTIFICATE', 'OF', 'SUBJECT', 'NOT AFTER', 'STATE'], ...view.client_certificates.map((c) => [
      c.fingerprint_sha256.slice(0, 23),
      c.organization_id === null ? '* (operator)' : `${c.organization_id}${c.source === 'operator' ? ' (operator)' : ''}`,
      c.subject,
      c.not_after,
      c.state === 'valid' ? `valid (${c.days_left} days)` : c.state === 'expiring' ? `EXPIRES SOON (${c.days_left} days)` : 'EXPIRED',
    ])]));
    for (const c of view.client_certificates) if (c.state !== 'valid') lines.push(`  ${c.detail}`);
  }
  return lines.join('\n');
}

/** The operator's client certificates as the daemon reads them; none when this user cannot read their files (they are the daemon's). */
function operatorCertificates(config: Config, now: number): OperatorCertificates {
  try {
    return loadOperatorCertificates(config.delivery, now);
  } catch {
    return NO_OPERATOR_CERTIFICATES;
  }
}

/** `hookrelay status`: the daemon, the feed, the queue and every webhook, at a glance. */
export function registerStatusCommands(program: Command): void {
  jsonOption(
    program
      .command('status')
      .description('daemon reachable or not, feed position and lag, queue depth and oldest due delivery, each webhook and why it fails')
      .option('--listen <host:port>', "the daemon's admin API address (default api.listen)"),
  ).action(async (_options: unknown, cmd: Command) => {
    const options = optionsOf(cmd);
    // Asked while the database is read: the report takes as long as the slower of the two.
    const daemon = probeDaemon(configFrom(options).api.listen);
    await withStore(options, async ({ config, store, services: { status } }) => {
      const view = statusView({
        daemon: await daemon,
        feed: config.feed.path === '-' ? null : await status.feed(config.feed.path),
        queue: await status.queue(),
        webhooks: await status.webhooks(),
        now: store.clock.now(),
        console: consoleSignInReport(config),
        certificates: { list: await certificateExpiries(store, operatorCertificates(config, store.clock.now())), warnMs: config.delivery.clientCertificateExpiryWarning },
      });
      print(options, view, () => statusText(view));
    });
  });
}

/**
 * Logs an operator can use: every attempt outcome at its level with the URL's origin (never its
 * path or query) and the next attempt time, webhook state changes at warn, successful
 * deliveries summarized at info; journald priority prefixes (unit, and the built daemon under
 * a JOURNAL_STREAM that names its standard output); uncaught exceptions and unhandled
 * rejections as one JSON fatal line (the handler, and the built daemon).
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { appendFileSync, closeSync, fstatSync, mkdirSync, openSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { test, type TestContext } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { createLogger, fatalHandler, syslogPrefixWanted } from '../../src/log.ts';
import { createServices } from '../../src/services/services.ts';
import { assertBuilt, CLI, cleanEnv, defer, WAIT_LIMIT_MS } from '../helpers/feed-helpers.ts';
import { tempDir } from '../helpers/helpers.ts';
import { feedLine, startDeliveryRig, startReceiver, waitFor, waitForDelivery } from '../helpers/receivers.ts';
import { repos } from '../helpers/sqlite-repos.ts';
import { BY_TEST } from '../helpers/audit-helpers.ts';

/** A pino destination that keeps every line, parsed. */
function capture() {
  const lines: string[] = [];
  return {
    lines,
    records: () => lines.map((l) => JSON.parse(l) as Record<string, any>),
    stream: { write: (line: string) => void lines.push(line) },
  };
}

const ISO = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/;

test('attempt outcomes at their level, with the URL origin and the next attempt time; webhook changes at warn; successes summarized at info', async (t) => {
  const log = capture();
  const { tls, relay, feed } = await startDeliveryRig(t, { 'delivery.retrySchedule': '1s', 'delivery.failingAfterFailures': '1' }, { log: createLogger('debug', log.stream) });
  const ok = await startReceiver(t, tls, () => ({ status: 200 }));
  const flaky = await startReceiver(t, tls, () => ({ status: 503 }));
  const gone = await startReceiver(t, tls, () => ({ status: 410 }));
  const { services, store } = relay;
  // Secrets in the path and the query, as Slack- or Discord-style URLs carry them.
  const urls = { 'org-ok': `${ok.url}/s3cr3t-path?token=t0k3n-ok`, 'org-flaky': `${flaky.url}/s3cr3t-path?token=t0k3n-flaky`, 'org-gone': `${gone.url}?sig=t0k3n-gone` };
  for (const [org, url] of Object.entries(urls)) {
    await services.orgs.add(BY_TEST, { id: org });
    await services.webhooks.register(BY_TEST, org, { webhook_url: url });
  }
  const origin = (url: string) => new URL(url).origin;

  feed(feedLine('org-ok', 'evt_ok_1'), feedLine('org-ok', 'evt_ok_2'), feedLine('org-flaky', 'evt_flaky_1'), feedLine('org-gone', 'evt_gone_1'));
  await waitForDelivery(store, 'org-ok', 'evt_ok_2', (d) => d.status === 'delivered', 'delivered');
  await waitForDelivery(store, 'org-flaky', 'evt_flaky_1', (d) => d.status === 'dead', 'dead after its one retry');
  await waitFor('the 410 webhook disabled', () => repos(store).webhooks.get('org-gone')?.status === 'disabled');
  // The flaky receiver recovers: its webhook is active again.
  flaky.respond(() => ({ status: 200 }));
  feed(feedLine('org-flaky', 'evt_flaky_2'));
  await waitForDelivery(store, 'org-flaky', 'evt_flaky_2', (d) => d.status === 'delivered', 'delivered');
  await waitFor('the recovery logged', () => log.records().some((r) => r.msg === 'webhook active again: an attempt succeeded'));
  await relay.relay.stop();

  const records = log.records();
  const attempts = (org: string) => records.filter((r) => r.org === org && typeof r.outcome === 'string');
  for (const r of records.filter((r) => typeof r.outcome === 'string')) {
    assert.equal(r.subsystem, 'dispatch');
    assert.equal(r.url, origin(urls[r.org as keyof typeof urls]), 'the origin only');
    assert.equal(typeof r.delivery, 'number');
    assert.match(r.eventId, /^evt_/);
  }

  const delivered = attempts('org-ok');
  assert.deepEqual(delivered.map((r) => [r.level, r.outcome, r.status, r.attempt, r.msg]), [
    [20, 'delivered', 200, 1, 'delivered'],
    [20, 'delivered', 200, 1, 'delivered'],
  ]);

  const [retry, dead, recovered] = attempts('org-flaky');
  assert.equal(retry!.level, 40);
  assert.equal(retry!.outcome, 'retry');
  assert.equal(retry!.status, 503);
  assert.equal(retry!.error, 'http_status');
  assert.equal(retry!.detail, 'HTTP 503');
  assert.match(retry!.nextAttemptAt, ISO);
  const wait = Date.parse(retry!.nextAttemptAt) - Date.parse(retry!.time);
  assert.ok(wait > 500 && wait <= 1100, `the retry is scheduled 1 s after the attempt (${wait} ms)`);
  assert.match(retry!.msg, new RegExp(`^delivery attempt failed \\(http_status\\); retrying at ${retry!.nextAttemptAt.replace(/\./g, '\\.')}$`));
  assert.equal(dead!.level, 50);
  assert.equal(dead!.outcome, 'dead');
  assert.equal(dead!.attempt, 2);
  assert.equal(dead!.nextAttemptAt, null);
  assert.match(dead!.msg, /no retry is left: the delivery is dead \(replayable\)/);
  assert.equal(recovered!.outcome, 'delivered');

  const [disabled] = attempts('org-gone');
  assert.deepEqual([disabled!.level, disabled!.outcome, disabled!.status, disabled!.nextAttemptAt], [40, 'disabled', 410, null]);

  const changes = records.filter((r) => r.from !== undefined && r.to !== undefined);
  const byKey = (a: unknown[], b: unknown[]) => JSON.stringify(a).localeCompare(JSON.stringify(b));
  assert.deepEqual(
    changes.map((r) => [r.level, r.org, r.from, r.to, r.by, r.msg]).sort(byKey),
    [
      [40, 'org-flaky', 'active', 'failing', 'delivery', 'webhook failing: attempts fail in a row'],
      [40, 'org-gone', 'active', 'disabled', 'delivery', 'webhook disabled: the receiver answered 410 Gone; its deliveries are held'],
      [40, 'org-flaky', 'failing', 'active', 'delivery', 'webhook active again: an attempt succeeded'],
    ].sort(byKey),
  );
  // The flaky webhook failed, then recovered, in that order.
  assert.ok(changes.findIndex((r) => r.org === 'org-flaky' && r.to === 'failing') < changes.findIndex((r) => r.org === 'org-flaky' && r.to === 'active'));
  const gone410 = changes.find((r) => r.to === 'disabled')!;
  assert.equal(gone410.disabledReason, 'gone');
  assert.equal(gone410.url, origin(urls['org-gone']));
  assert.equal(changes.find((r) => r.to === 'failing')!.consecutiveFailures, 1);

  // Successes are summarized at info (here: at the stop), organizations by name.
  const summaries = records.filter((r) => r.level === 30 && typeof r.delivered === 'number');
  assert.ok(summaries.length >= 1);
  assert.equal(summaries.reduce((sum, r) => sum + r.delivered, 0), 3);
  const byOrg: Record<string, number> = {};
  for (const r of summaries) for (const [org, n] of Object.entries<number>(r.organizations)) byOrg[org] = (byOrg[org] ?? 0) + n;
  assert.deepEqual(byOrg, { 'org-ok': 2, 'org-flaky': 1 });
  assert.match(summaries.at(-1)!.msg, /^\d+ deliveries delivered in the last [\d.]+ s$/);

  // Nothing of the paths or the queries, anywhere in the log.
  const text = log.lines.join('');
  for (const secret of ['s3cr3t', 't0k3n']) assert.ok(!text.includes(secret), `the log contains ${secret}`);
});

test('operator changes of a webhook are logged at warn: disabled, enabled, registered again', async (t) => {
  const log = capture();
  const { relay } = await startDeliveryRig(t);
  const services = createServices(relay.store, relay.config, createLogger('info', log.stream));
  await services.orgs.add(BY_TEST, { id: 'acme' });
  await services.webhooks.register(BY_TEST, 'acme', { webhook_url: 'https://hooks.acme.example/in?token=t0k3n' });
  await services.webhooks.setEnabled(BY_TEST, 'acme', false);
  await services.webhooks.setEnabled(BY_TEST, 'acme', false); // no change: no line
  await services.webhooks.setEnabled(BY_TEST, 'acme', true);
  await services.webhooks.setEnabled(BY_TEST, 'acme', false);
  await services.webhooks.register(BY_TEST, 'acme', { webhook_url: 'https://hooks2.acme.example/in' });
  assert.deepEqual(
    log.records().map((r) => [r.level, r.subsystem, r.org, r.url, r.from, r.to, r.by, r.msg]),
    [
      [40, 'dispatch', 'acme', 'https://hooks.acme.example', 'active', 'disabled', 'operator', 'webhook disabled: the operator disabled it (hookrelay webhook disable); its deliveries are held'],
      [40, 'dispatch', 'acme', 'https://hooks.acme.example', 'disabled', 'active', 'operator', 'webhook enabled: held deliveries go out'],
      [40, 'dispatch', 'acme', 'https://hooks.acme.example', 'active', 'disabled', 'operator', 'webhook disabled: the operator disabled it (hookrelay webhook disable); its deliveries are held'],
      [40, 'dispatch', 'acme', 'https://hooks2.acme.example', 'disabled', 'active', 'registration', 'webhook enabled: registered again, held deliveries go out'],
    ],
  );
  assert.ok(!log.lines.join('').includes('t0k3n'));
});

test('syslog priority prefixes: <7> debug and trace, <6> info, <4> warn, <3> error, <2> fatal, on child loggers too', () => {
  const log = capture();
  const logger = createLogger('trace', log.stream, { syslogPrefix: true });
  logger.trace('t');
  logger.debug('d');
  logger.child({ subsystem: 'x' }).info('i');
  logger.warn('w');
  logger.child({ subsystem: 'y' }).error({ err: new Error('e') }, 'e');
  logger.fatal('f');
  assert.deepEqual(log.lines.map((l) => /^<(\d)>\{/.exec(l)?.[1]), ['7', '7', '6', '4', '3', '2']);
  for (const line of log.lines) JSON.parse(line.slice(3));
  const plain = capture();
  createLogger('info', plain.stream).warn('w');
  assert.match(plain.lines[0]!, /^\{"level":40,/);
});

test('syslogPrefixWanted: on, off, or auto when JOURNAL_STREAM names the standard output (device:inode)', (t) => {
  const file = join(tempDir(t), 'stdout');
  const fd = openSync(file, 'w');
  t.after(() => closeSync(fd));
  const st = fstatSync(fd, { bigint: true });
  assert.equal(syslogPrefixWanted('auto', `${st.dev}:${st.ino}`, fd), true);
  assert.equal(syslogPrefixWanted('auto', `${st.dev}:${st.ino + 1n}`, fd), false, 'another stream: a process that inherited the variable');
  assert.equal(syslogPrefixWanted('auto', null, fd), false);
  assert.equal(syslogPrefixWanted('auto', 'not-a-stream', fd), false);
  assert.equal(syslogPrefixWanted('on', null, fd), true);
  assert.equal(syslogPrefixWanted('off', `${st.dev}:${st.ino}`, fd), false);
});

/** Spawns the built daemon with its stdout in a file; returns the file and a way to stop it. */
function spawnDaemonTo(t: TestContext, dir: string, env: Record<string, string>, nodeArgs: readonly string[] = []) {
  const stdoutPath = join(dir, `stdout-${Math.random().toString(36).slice(2)}.log`);
  const fd = openSync(stdoutPath, 'w');
  const st = fstatSync(fd, { bigint: true });
  const journalStream = `${st.dev}:${st.ino}`;
  const child = spawn(process.execPath, [...nodeArgs, CLI, 'serve', '--state-dir', join(dir, 'var'), '--listen', '127.0.0.1:0'], {
    env: { ...cleanEnv(), ...Object.fromEntries(Object.entries(env).map(([k, v]) => [k, v.replace('$STDOUT', journalStream)])) },
    stdio: ['ignore', fd, 'pipe'],
  });
  closeSync(fd);
  let stderr = '';
  child.stderr!.setEncoding('utf8').on('data', (chunk: string) => (stderr += chunk));
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) => child.once('close', (code, signal) => resolve({ code, signal })));
  defer(t, async () => {
    if (child.exitCode === null && child.signalCode === null) {
      child.kill('SIGKILL');
      await exited;
    }
  });
  const lines = () => readFileSync(stdoutPath, 'utf8').split('\n').filter((l) => l !== '');
  return { child, exited, lines, stderr: () => stderr };
}

test('the built daemon under journald: each line prefixed with its priority when JOURNAL_STREAM names its stdout, plain JSON otherwise', async (t) => {
  assertBuilt();
  const dir = tempDir(t);
  mkdirSync(join(dir, 'var'));
  const runs = [[{ JOURNAL_STREAM: '$STDOUT' }, true], [{ JOURNAL_STREAM: '1:1' }, false], [{ HOOKRELAY_LOG_SYSLOG_PREFIX: 'on' }, true], [{ JOURNAL_STREAM: '$STDOUT', HOOKRELAY_LOG_SYSLOG_PREFIX: 'off' }, false]] as const;
  for (const [env, prefixed] of runs) {
    const daemon = spawnDaemonTo(t, dir, env);
    await waitFor('the daemon started', () => daemon.lines().some((l) => l.includes('"msg":"dispatcher started"')) || daemon.child.exitCode !== null, WAIT_LIMIT_MS);
    // A warning: a line that is not JSON is quarantined (each run appends its own; the feed is read from where the last run stopped).
    appendFileSync(join(dir, 'var', 'feed.jsonl'), 'not a JSON line\n');
    await waitFor('the quarantine warning', () => daemon.lines().some((l) => l.includes('feed line quarantined')) || daemon.child.exitCode !== null, WAIT_LIMIT_MS);
    daemon.child.kill('SIGTERM');
    assert.deepEqual(await daemon.exited, { code: 0, signal: null }, daemon.stderr());
    const lines = daemon.lines();
    assert.ok(lines.length >= 5, lines.join('\n'));
    for (const line of lines) {
      const match = /^(?:<(\d)>)?(\{.*\})$/.exec(line);
      assert.ok(match, `a JSON line, possibly prefixed: ${line}`);
      const record = JSON.parse(match[2]!) as { level: number };
      if (!prefixed) assert.equal(match[1], undefined, `no prefix ${JSON.stringify(env)}: ${line}`);
      else assert.equal(match[1], { 20: '7', 30: '6', 40: '4', 50: '3', 60: '2' }[record.level], `the priority of level ${record.level}: ${line}`);
    }
    assert.ok(lines.some((l) => (prefixed ? l.startsWith('<4>{') : l.startsWith('{"level":40'))), 'a warning is among them');
  }
});

test('fatalHandler: one JSON line at fatal level with the error, its stack and its origin, then exit 1', () => {
  for (const [reason, origin] of [[new Error('boom'), 'uncaughtException'], [new Error('nope'), 'unhandledRejection']] as const) {
    const log = capture();
    const exits: number[] = [];
    fatalHandler(createLogger('info', log.stream), (code) => exits.push(code))(reason, origin);
    assert.deepEqual(exits, [1]);
    assert.equal(log.lines.length, 1);
    const record = log.records()[0]!;
    assert.equal(record.level, 60);
    assert.equal(record.origin, origin);
    assert.equal(record.err.message, reason.message);
    assert.match(record.err.stack, /relay\/logs\.test\.ts/);
    assert.equal(record.msg, origin === 'uncaughtException' ? 'uncaught exception; exiting' : 'unhandled promise rejection; exiting');
  }
  // A rejection with something that is not an Error still makes one line, and the exit.
  const log = capture();
  const exits: number[] = [];
  fatalHandler(createLogger('info', log.stream), (code) => exits.push(code))('a string', 'unhandledRejection');
  assert.deepEqual(exits, [1]);
  assert.equal(log.records()[0]!.err, 'a string');
});

test('the built daemon: an uncaught exception or an unhandled rejection ends it with a JSON fatal line (exit 1), under journald with <2>', async (t) => {
  assertBuilt();
  const dir = tempDir(t);
  // A preload of this test's own: on SIGUSR2 it throws from a signal handler, or rejects a promise nobody handles.
  const preload = (code: string) => `data:text/javascript,${encodeURIComponent(code)}`;
  const cases = [
    { code: "process.on('SIGUSR2', () => { throw new Error('thrown by the test preload'); });", msg: 'uncaught exception; exiting', origin: 'uncaughtException', message: 'thrown by the test preload' },
    { code: "process.on('SIGUSR2', () => { Promise.reject(new Error('rejected by the test preload')); });", msg: 'unhandled promise rejection; exiting', origin: 'unhandledRejection', message: 'rejected by the test preload' },
  ];
  for (const c of cases) {
    for (const journald of [false, true]) {
      const daemon = spawnDaemonTo(t, dir, journald ? { JOURNAL_STREAM: '$STDOUT' } : {}, ['--import', preload(c.code)]);
      await waitFor('the daemon listening', () => daemon.lines().some((l) => l.includes('admin API listening')) || daemon.child.exitCode !== null, WAIT_LIMIT_MS);
      await sleep(50);
      daemon.child.kill('SIGUSR2');
      assert.deepEqual(await daemon.exited, { code: 1, signal: null });
      assert.equal(daemon.stderr(), '', 'nothing in plain text');
      const last = daemon.lines().at(-1)!;
      assert.ok(journald ? last.startsWith('<2>{') : last.startsWith('{'), last);
      const record = JSON.parse(journald ? last.slice(3) : last) as Record<string, any>;
      assert.equal(record.level, 60);
      assert.equal(record.msg, c.msg);
      assert.equal(record.origin, c.origin);
      assert.equal(record.err.message, c.message);
      assert.match(record.err.stack, /^Error: /);
    }
  }
});

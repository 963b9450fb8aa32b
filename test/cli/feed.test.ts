/**
 * The feed commands of the built CLI, run as a user would: `hookrelay ingest FILE|-` (counts,
 * human and --json), `feed rejects [--json]`, `feed status --json`, and the outbox rows an
 * ingest leaves for an organization with a webhook. Build first.
 */
import assert from 'node:assert/strict';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { before, test } from 'node:test';
import { orderingKey } from '../../src/domain/ordering.ts';
import { assertBuilt, databaseIn, fields, jsonLine, Probe, runCli, scratchDir, type CliResult } from '../helpers/feed-helpers.ts';

before(assertBuilt);

const ISO_TIME = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/;

function ok(result: CliResult, what: string): string {
  assert.equal(result.code, 0, `${what} exited with ${result.code}; stderr: ${result.stderr}`);
  return result.stdout;
}

test('ingest FILE and ingest -: counts printed (human and --json), rejects listed, status shown, outbox rows for the organization with a webhook', async (t) => {
  const stateDir = scratchDir(t, 'hookrelay-feed-cli-');
  const path = join(stateDir, 'batch.jsonl');
  const cli = (...args: string[]) => runCli(t, [...args, '--state-dir', stateDir]);

  ok(await cli('migrate'), 'migrate');
  ok(await cli('orgs', 'add', 'org-hooked'), 'orgs add');
  ok(await cli('webhook', 'set', '--org', 'org-hooked', '--url', 'https://hooks.example.com/hookrelay'), 'webhook set');

  const lines = [
    jsonLine(fields(0, { organization_id: 'org-hooked', event_id: 'chg_h1' })),
    jsonLine(fields(1, { organization_id: 'org-quiet' })),
    jsonLine(fields(0, { organization_id: 'org-hooked', event_id: 'chg_h1' })), // duplicate
    'nope\n',
    '{"organization_id":"org-hooked","status":"approved","event_id":"chg_bad"}\n',
    JSON.stringify(fields(2, { organization_id: 'org-hooked', event_id: 'chg_h2' })), // last line, no newline
  ];
  writeFileSync(path, lines.join(''));
  const at = (i: number) => Buffer.byteLength(lines.slice(0, i).join(''));

  assert.match(
    ok(await cli('ingest', path), 'ingest FILE'),
    /^3 accepted, 1 duplicate, 2 quarantined \(1 of the accepted are undeliverable: their organization has no webhook\)\n6 lines in \d+\.\d\d s, \d+ lines\/s\nsee: hookrelay feed rejects\n$/,
  );
  // Again: everything already stored is a duplicate; bad lines are quarantined again.
  const counts = (output: string) => {
    const { accepted, duplicates, quarantined, undeliverable, lines } = JSON.parse(output) as Record<string, unknown>;
    return { accepted, duplicates, quarantined, undeliverable, lines };
  };
  assert.deepEqual(counts(ok(await cli('ingest', path, '--json'), 'ingest FILE --json')), { accepted: 0, duplicates: 4, quarantined: 2, undeliverable: 0, lines: 6 });

  const fromStdin = await runCli(t, ['ingest', '-', '--json', '--state-dir', stateDir], { input: jsonLine(fields(1, { organization_id: 'org-quiet' })) + jsonLine(fields(3)) });
  assert.deepEqual(counts(ok(fromStdin, 'ingest -')), { accepted: 1, duplicates: 1, quarantined: 0, undeliverable: 1, lines: 2 });
  assert.match(ok(await runCli(t, ['ingest', '-', '--state-dir', stateDir], { input: '' }), 'ingest - (empty)'), /^0 accepted, 0 duplicate, 0 quarantined\n0 lines in \d+\.\d\d s, 0 lines\/s\n$/);

  const rejects = JSON.parse(ok(await cli('feed', 'rejects', '--json'), 'feed rejects --json')) as Array<Record<string, unknown>>;
  assert.equal(rejects.length, 4);
  for (const r of rejects) assert.match(r.received_at as string, ISO_TIME);
  const invalidJson = { source: path, position: at(3), reason: 'invalid_json', event_id: null, line_bytes: 4, raw: 'nope', raw_truncated: false };
  const missing = {
    source: path,
    position: at(4),
    reason: 'missing_field',
    detail: '"anticipation_request_id" is required',
    event_id: 'chg_bad',
    line_bytes: lines[4]!.length - 1,
    // The quarantine keeps a 64-byte excerpt of a line.
    raw: `${lines[4]!.slice(0, 64)}...`,
    raw_truncated: true,
  };
  assert.deepEqual(
    rejects.map(({ received_at: _, detail, ...rest }) => (rest.reason === 'invalid_json' ? { ...rest, detailOk: /^not valid JSON: /.test(detail as string) } : { ...rest, detail })),
    [
      { id: 1, ...invalidJson, detailOk: true },
      { id: 2, ...missing },
      { id: 3, ...invalidJson, detailOk: true },
      { id: 4, ...missing },
    ],
  );
  const page = JSON.parse(ok(await cli('feed', 'rejects', '--json', '--after', '2', '--limit', '1'), 'feed rejects --after --limit')) as Array<{ id: number }>;
  assert.deepEqual(page.map((r) => r.id), [3]);

  const human = ok(await cli('feed', 'rejects', '--limit', '2'), 'feed rejects');
  const humanLines = human.trimEnd().split('\n');
  assert.equal(humanLines.length, 4);
  assert.match(humanLines[0]!, new RegExp(`^#1 ${path.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}@${at(3)} invalid_json: not valid JSON: `));
  assert.equal(humanLines[1], '    nope');
  assert.equal(humanLines[2], `#2 ${path}@${at(4)} missing_field: "anticipation_request_id" is required`);
  assert.equal(humanLines[3], `    ${lines[4]!.slice(0, 64)}...`);

  const status = JSON.parse(ok(await cli('feed', 'status', '--json'), 'feed status --json')) as {
    sources: Array<Record<string, unknown>>;
    undeliverable: unknown;
  };
  assert.deepEqual(
    status.sources.map(({ updated_at, ...rest }) => {
      assert.match(updated_at as string, ISO_TIME);
      return rest;
    }),
    [
      { source: path, accepted: 3, duplicates: 5, quarantined: 4, position: null },
      { source: 'stdin', accepted: 1, duplicates: 1, quarantined: 0, position: null },
    ],
  );
  assert.deepEqual(status.undeliverable, [
    { organization_id: 'org-a', events: 1 },
    { organization_id: 'org-quiet', events: 1 },
  ]);

  const probe = new Probe(t, databaseIn(stateDir));
  assert.deepEqual(probe.deliveries(), [
    { event_id: 'chg_h1', org_id: 'org-hooked', status: 'pending', ordering_key: orderingKey('org-hooked', 'ar_0') },
    { event_id: 'chg_h2', org_id: 'org-hooked', status: 'pending', ordering_key: orderingKey('org-hooked', 'ar_2') },
  ]);
  assert.deepEqual(
    probe.events().map((e) => [e.id.startsWith('evt_') ? 'derived' : e.id, e.anticipation_request_id, e.source, e.source_position]),
    [
      ['chg_h1', 'ar_0', path, 0],
      ['derived', 'ar_1', path, at(1)],
      ['chg_h2', 'ar_2', path, at(5)],
      ['derived', 'ar_3', 'stdin', Buffer.byteLength(jsonLine(fields(1, { organization_id: 'org-quiet' })))],
    ],
  );
});

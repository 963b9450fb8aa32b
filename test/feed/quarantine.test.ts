/**
 * What the quarantine and the log keep of a rejected line (issue 31, point 2): a short escaped
 * excerpt, never the line. A file that was never a feed (a password file, say) read as one, a
 * line of terminal escapes and a line over the size limit go through the real tailer into
 * SQLite; the rows, the daemon's log and `hookrelay feed rejects` (the built CLI) are checked.
 */
import assert from 'node:assert/strict';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { assertBuilt, feedRelay, runCli, scratchDir } from '../helpers/feed-helpers.ts';

/** What the quarantine keeps of a line at most (src/domain/feed-event.ts, LINE_EXCERPT_BYTES). */
const EXCERPT_BYTES = 64;
/** Written after the first 64 bytes of every line: nothing may carry it. */
const TAIL = 'TAIL-BEYOND-THE-EXCERPT';

test('the quarantine and the log keep at most a 64-byte escaped excerpt of a rejected line, and the parser quotes none of it', async (t) => {
  assertBuilt();
  const dir = scratchDir(t);
  const path = join(dir, 'feed.jsonl');
  const shadow = `root:$6$Xy7Q2v9aL$kP1nqJ0sHq8bW3xRz5mT6yUeV2cD4fG7hJ9kL1mN3pQ5rS7tU9vW1xY3zA5bC7dE9fG1hJ3kL5mN7pQ9rS1tU:20228:0:99999:7:::${TAIL}`;
  const escapes = `{"organization_id":"org-a","status":"\u001b]0;pwned\u0007\u001b[2J\u202e", oops ${'.'.repeat(30)}${TAIL}}`;
  const tooLong = `{"organization_id":"org-a","data":{"blob":"${'q'.repeat(40)}${TAIL}${'q'.repeat(2000)}"}}`;
  writeFileSync(path, [shadow, escapes, tooLong].join('\n') + '\n');
  const relay = feedRelay(t, { 'feed.path': path, 'feed.maxLineBytes': '1024' });
  await relay.start();
  const probe = relay.probe();
  await probe.waitForLines(path, 3);
  await relay.stop();

  const rejects = probe.rejects();
  assert.deepEqual(rejects.map((r) => r.reason), ['invalid_json', 'invalid_json', 'line_too_long']);
  for (const r of rejects) {
    assert.ok(r.raw.length <= EXCERPT_BYTES, `${r.reason}: ${r.raw.length} bytes kept`);
    assert.doesNotMatch(r.detail, /root|kP1n|pwned|oops|\u001b/, `${r.reason}: the detail quotes the line: ${r.detail}`);
  }
  assert.equal(rejects[0]!.detail, 'not valid JSON: an unexpected character where a value should be at byte 0 of the line');
  assert.equal(rejects[0]!.line_bytes, Buffer.byteLength(shadow));
  assert.equal(rejects[2]!.line_bytes, Buffer.byteLength(tooLong));

  const logged = relay.logRecords().filter((r) => r.msg === 'feed line quarantined');
  assert.equal(logged.length, 3);
  assert.equal(logged[0]!.excerpt, `${shadow.slice(0, EXCERPT_BYTES)}...`);
  assert.equal(logged[1]!.excerpt, '{"organization_id":"org-a","status":"\\u001b]0;pwned\\u0007\\u001b[2J\\u202e", oops .....');
  const log = JSON.stringify(relay.logRecords());
  assert.ok(!log.includes(TAIL), 'the log carries more of a line than its excerpt');
  for (const record of relay.logRecords()) {
    for (const value of Object.values(record)) {
      if (typeof value === 'string') assert.doesNotMatch(value, /[\u0000-\u001f\u007f-\u009f\u202e]/, 'the log carries a control character of a line unescaped');
    }
  }

  // The CLI prints the same excerpts, escaped, in both forms.
  const cli = (...args: string[]) => runCli(t, [...args, '--state-dir', relay.stateDir]);
  const human = await cli('feed', 'rejects');
  assert.equal(human.code, 0, human.stderr);
  assert.ok(!human.stdout.includes(TAIL));
  assert.doesNotMatch(human.stdout, /[\u0000-\u0009\u000b-\u001f\u007f-\u009f\u202e]/, 'feed rejects printed a control character');
  assert.ok(human.stdout.includes('\n    {"organization_id":"org-a","status":"\\u001b]0;pwned\\u0007\\u001b[2J\\u202e", oops .....\n'), human.stdout);
  const json = JSON.parse((await cli('feed', 'rejects', '--json')).stdout) as Array<{ raw: string; raw_truncated: boolean; line_bytes: number }>;
  assert.deepEqual(json.map((r) => r.raw_truncated), [true, true, true]);
  assert.equal(json[1]!.raw, logged[1]!.excerpt);
  assert.ok(!JSON.stringify(json).includes(TAIL));
});

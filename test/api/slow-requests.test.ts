/**
 * Slow requests are cut at the documented times (issue 31, point 9; docs/api.md, "Limits"):
 * a client that sends its headers a byte at a time is answered 408 and cut 15 s after it
 * connected, one that sends its body a byte at a time 30 s after, within a second or so, not
 * whenever Node's 30-second sweep comes by. Real sockets against a real relay; about 31 s.
 */
import assert from 'node:assert/strict';
import { connect, type Socket } from 'node:net';
import { test } from 'node:test';
import { seedOrg, startRelay } from '../helpers/helpers.ts';

/** Writes `head` at once, then one byte of `trickle` a second; resolves with when (ms after connecting) the server ended the connection, and what it answered. */
function trickle(port: number, head: string, trickle: string): Promise<{ ms: number; answer: string }> {
  return new Promise((resolve, reject) => {
    const started = performance.now();
    let answer = '';
    let sent = 0;
    const socket: Socket = connect(port, '127.0.0.1', () => {
      socket.write(head);
      timer.refresh();
    });
    const timer = setInterval(() => {
      if (!socket.writable || socket.connecting) return;
      socket.write(trickle[sent++ % trickle.length]!);
    }, 1000);
    socket.setEncoding('utf8').on('data', (chunk: string) => (answer += chunk));
    socket.on('error', () => {});
    socket.on('close', () => {
      clearInterval(timer);
      resolve({ ms: performance.now() - started, answer });
    });
    setTimeout(() => {
      clearInterval(timer);
      socket.destroy();
      reject(new Error('the server did not cut the slow request within 70 s'));
    }, 70_000).unref();
  });
}

test('a request whose headers trickle in is cut 15 s after it connected, one whose body trickles in 30 s after: 408, connection closed', { timeout: 90_000 }, async (t) => {
  const relay = await startRelay(t);
  const { admin } = await seedOrg(relay.services, 'org-a');
  const token = relay.token('org-a', admin);
  const { port } = relay.relay.address();

  const [headers, body] = await Promise.all([
    trickle(port, `GET /users/get_roles HTTP/1.1\r\nHost: 127.0.0.1:${port}\r\nX-Slow: `, 'abcdefghijklmnopqrstuvwxyz'),
    trickle(
      port,
      `POST /webhook/register_webhook HTTP/1.1\r\nHost: 127.0.0.1:${port}\r\nAuthorization: Bearer ${token}\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{"webhook_url": "https://hooks.example.com/`,
      'abcdefghijklmnopqrstuvwxyz',
    ),
  ]);
  t.diagnostic(`headers cut after ${Math.round(headers.ms)} ms, body after ${Math.round(body.ms)} ms`);
  assert.match(headers.answer, /^HTTP\/1\.1 408 /);
  assert.ok(headers.ms >= 14_500 && headers.ms < 17_000, `the slow headers were cut after ${Math.round(headers.ms)} ms, not about 15 s`);
  assert.match(body.answer, /^HTTP\/1\.1 408 /);
  assert.ok(body.ms >= 29_500 && body.ms < 32_000, `the slow body was cut after ${Math.round(body.ms)} ms, not about 30 s`);
  // The webhook was not registered from the half-sent body.
  await assert.rejects(relay.services.webhooks.get('org-a'), { code: 'webhook_not_configured' });
});

// A complete webhook receiver for hookrelay, with Node.js alone and the `standardwebhooks`
// package (npm install standardwebhooks). It verifies every request, answers 204 at once,
// ignores an event id it has already seen (delivery is at least once), and prints the change.
//
//   HOOKRELAY_SECRET=whsec_... PORT=8091 node receiver.mjs
//
// The secret is the one `register_webhook` returned (or `hookrelay webhook secret --org ORG`).
import { createServer } from 'node:http';
import { Webhook } from 'standardwebhooks';

const secret = process.env.HOOKRELAY_SECRET;
if (!secret) {
  console.error('set HOOKRELAY_SECRET to the webhook signing secret (whsec_...)');
  process.exit(2);
}
const webhook = new Webhook(secret);
// In production, keep these in your database, with a time to forget them after.
const seen = new Set();

const server = createServer((req, res) => {
  if (req.method !== 'POST') {
    res.writeHead(405, { allow: 'POST' }).end();
    return;
  }
  const chunks = [];
  req.on('data', (chunk) => chunks.push(chunk));
  req.on('end', () => {
    // Verify the raw bytes as received, never a re-serialised object.
    const body = Buffer.concat(chunks).toString('utf8');
    let event;
    try {
      // Checks the signature (any of them, during a secret rotation) and that the timestamp is within 5 minutes.
      event = webhook.verify(body, req.headers);
    } catch (err) {
      console.log(`rejected ${req.headers['webhook-id'] ?? '(no id)'}: ${err.message}`);
      res.writeHead(401).end();
      return;
    }
    // Answer first; do slow work afterwards (the attempt deadline is 15 s).
    res.writeHead(204).end();
    const id = req.headers['webhook-id'];
    if (seen.has(id)) return;
    seen.add(id);
    const { type, data } = event;
    if (type === 'anticipation_request.status_changed') {
      console.log(`verified ${id}: ${data.anticipation_request_id} ${data.previous_status ?? '-'} -> ${data.status}`);
    } else {
      console.log(`verified ${id}: ${type}`);
    }
  });
});

server.listen(Number(process.env.PORT ?? 8091), process.env.HOST ?? '127.0.0.1', () => {
  const { address, port } = server.address();
  console.log(`receiver listening on http://${address}:${port}/`);
});

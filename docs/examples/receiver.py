#!/usr/bin/env python3
"""A complete webhook receiver for hookrelay, in Python 3.9+ with the standard library alone.

It verifies every request (Standard Webhooks signature, timestamp within 5 minutes), answers
204 at once, ignores an event id it has already seen (delivery is at least once), and prints
the change.

    HOOKRELAY_SECRET=whsec_... PORT=8091 python3 receiver.py

The secret is the one `register_webhook` returned (or `hookrelay webhook secret --org ORG`).

With the `standardwebhooks` package from PyPI (`pip install standardwebhooks`), the function
`verify` below is `Webhook(secret).verify(body, headers)`, the same checks:

    from standardwebhooks.webhooks import Webhook
    webhook = Webhook(secret)                  # the whsec_... secret, as is
    event = webhook.verify(body, headers)      # raises when it does not verify

This example uses the standard library instead (hmac, hashlib, base64), so it runs anywhere
Python 3.9+ does, with nothing to install.
"""
import base64
import binascii
import hashlib
import hmac
import json
import os
import signal
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

# The accepted distance between the webhook-timestamp header and this clock, as standardwebhooks.
TOLERANCE_SECONDS = 5 * 60
# A hookrelay body is a few hundred bytes; anything larger than this is refused unread.
MAX_BODY_BYTES = 1024 * 1024


class VerificationError(Exception):
    pass


def secret_key(secret):
    """The HMAC key of a `whsec_<base64>` secret: the base64-decoded part after the prefix."""
    if secret.startswith("whsec_"):
        secret = secret[len("whsec_"):]
    return base64.b64decode(secret, validate=True)


def verify(key, body, headers):
    """Returns the event (parsed JSON) when the request verifies, else raises VerificationError.

    `body` is the raw bytes as received: never verify a re-serialised object.
    """
    msg_id = headers.get("webhook-id")
    timestamp = headers.get("webhook-timestamp")
    signatures = headers.get("webhook-signature")
    if not msg_id or not timestamp or not signatures:
        raise VerificationError("the webhook-id, webhook-timestamp or webhook-signature header is missing")
    if not (timestamp.isascii() and timestamp.isdigit() and len(timestamp) <= 12):
        raise VerificationError("webhook-timestamp is not a number of seconds")
    off = time.time() - int(timestamp)
    if abs(off) > TOLERANCE_SECONDS:
        raise VerificationError(f"webhook-timestamp is {round(off)} s away from this clock (more than {TOLERANCE_SECONDS} s)")
    # http.server decodes header values as latin-1: encoding them back gives the bytes as sent.
    signed = msg_id.encode("latin-1") + b"." + timestamp.encode("latin-1") + b"." + body
    expected = hmac.new(key, signed, hashlib.sha256).digest()
    # Several signatures, space-separated, during a secret rotation: any one of them will do.
    for part in signatures.split(" "):
        version, _, value = part.partition(",")
        if version != "v1" or not value:
            continue
        try:
            given = base64.b64decode(value, validate=True)
        except (binascii.Error, ValueError):
            continue
        if hmac.compare_digest(expected, given):
            try:
                return json.loads(body)
            except ValueError as err:
                raise VerificationError(f"the body is not JSON: {err}") from None
    raise VerificationError("no v1 signature matches the secret (tampered body, or another secret)")


def log(line):
    print(line, flush=True)


def make_handler(key):
    # In production, keep these in your database, with a time to forget them after.
    seen = set()
    seen_lock = threading.Lock()

    class Receiver(BaseHTTPRequestHandler):
        def refuse(self, status, reason, extra_headers=()):
            log(f"rejected {self.headers.get('webhook-id') or '(no id)'}: {reason}")
            self.send_response(status)
            for name, value in extra_headers:
                self.send_header(name, value)
            self.end_headers()

        def do_POST(self):
            length = self.headers.get("content-length")
            if length is None or not (length.isascii() and length.isdigit()):
                self.refuse(411, "no Content-Length")
                return
            if int(length) > MAX_BODY_BYTES:
                self.refuse(413, f"body of {length} bytes (more than {MAX_BODY_BYTES})")
                return
            body = self.rfile.read(int(length))
            try:
                event = verify(key, body, self.headers)
            except VerificationError as err:
                self.refuse(401, err)
                return
            # Answer first; do slow work afterwards (the attempt deadline is 15 s).
            self.send_response(204)
            self.end_headers()
            self.wfile.flush()
            msg_id = self.headers["webhook-id"]
            with seen_lock:
                if msg_id in seen:
                    return
                seen.add(msg_id)
            kind = event.get("type") if isinstance(event, dict) else None
            data = event.get("data") if isinstance(event, dict) else None
            if kind == "anticipation_request.status_changed" and isinstance(data, dict):
                previous = data.get("previous_status")
                log(f"verified {msg_id}: {data.get('anticipation_request_id')} {'-' if previous is None else previous} -> {data.get('status')}")
            else:
                log(f"verified {msg_id}: {kind}")

        def do_GET(self):
            self.send_response(405)
            self.send_header("Allow", "POST")
            self.end_headers()

        do_PUT = do_DELETE = do_PATCH = do_HEAD = do_GET

        def log_message(self, format, *args):
            pass  # one line per delivery, printed above; no access log

    return Receiver


def main():
    secret = os.environ.get("HOOKRELAY_SECRET")
    if not secret:
        print("set HOOKRELAY_SECRET to the webhook signing secret (whsec_...)", file=sys.stderr)
        return 2
    try:
        key = secret_key(secret)
    except (binascii.Error, ValueError):
        print("HOOKRELAY_SECRET is not a whsec_<base64> secret", file=sys.stderr)
        return 2
    server = ThreadingHTTPServer((os.environ.get("HOST", "127.0.0.1"), int(os.environ.get("PORT", "8091"))), make_handler(key))
    server.daemon_threads = True
    # SIGTERM (and Ctrl-C): stop accepting, then exit 0. shutdown() waits for serve_forever to
    # return, so it must run in another thread than the one serving (this one, where signals land).
    def stop(_signum, _frame):
        threading.Thread(target=server.shutdown).start()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    address, port = server.server_address[:2]
    log(f"receiver listening on http://{address}:{port}/")
    try:
        server.serve_forever()
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())

/**
 * Forward-only migrations. Entry N (1-based) moves the database from user_version N-1 to N.
 * Never edit an applied migration: add a new one.
 */
export const MIGRATIONS: readonly string[] = [
  // 1: organizations, roles, users, webhooks
  `
  CREATE TABLE organizations (
    id          TEXT PRIMARY KEY,
    name        TEXT NOT NULL,
    created_at  INTEGER NOT NULL
  ) STRICT;

  CREATE TABLE roles (
    name         TEXT PRIMARY KEY,
    description  TEXT NOT NULL,
    permissions  TEXT NOT NULL CHECK (json_valid(permissions) AND json_type(permissions) = 'array'),
    builtin      INTEGER NOT NULL DEFAULT 0 CHECK (builtin IN (0, 1)),
    created_at   INTEGER NOT NULL
  ) STRICT;

  CREATE TABLE users (
    id          INTEGER PRIMARY KEY,
    org_id      TEXT NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
    email       TEXT NOT NULL,
    email_key   TEXT NOT NULL,
    role_name   TEXT NOT NULL REFERENCES roles (name),
    created_at  INTEGER NOT NULL,
    updated_at  INTEGER NOT NULL,
    UNIQUE (org_id, email_key)
  ) STRICT;
  CREATE INDEX users_role_name ON users (role_name);

  CREATE TABLE webhooks (
    org_id       TEXT PRIMARY KEY REFERENCES organizations (id) ON DELETE CASCADE,
    url          TEXT NOT NULL,
    active_hmac  INTEGER NOT NULL CHECK (active_hmac IN (0, 1)),
    secret       TEXT,
    status       TEXT NOT NULL DEFAULT 'active' CHECK (status IN ('active', 'failing', 'disabled')),
    created_at   INTEGER NOT NULL,
    updated_at   INTEGER NOT NULL
  ) STRICT;

  INSERT INTO roles (name, description, permissions, builtin, created_at) VALUES
    ('saas_admin', 'read plus specific modifications for the associated SaaS',
     '["roles:read","users:manage","webhook:read","webhook:manage"]', 1, unixepoch() * 1000),
    ('saas_viewer', 'view-only access to the SaaS resources',
     '["roles:read","webhook:read"]', 1, unixepoch() * 1000);
  `,
  // 2: feed ingestion: events, their outbox (deliveries), quarantined lines, feed positions
  `
  CREATE TABLE events (
    seq                      INTEGER PRIMARY KEY,
    id                       TEXT NOT NULL UNIQUE,
    org_id                   TEXT NOT NULL,
    anticipation_request_id  TEXT NOT NULL,
    status                   TEXT NOT NULL,
    previous_status          TEXT,
    occurred_at              INTEGER NOT NULL,
    payload                  TEXT NOT NULL,
    source                   TEXT NOT NULL,
    source_position          INTEGER,
    received_at              INTEGER NOT NULL
  ) STRICT;
  CREATE INDEX events_org_received ON events (org_id, received_at);

  CREATE TABLE deliveries (
    id                INTEGER PRIMARY KEY,
    event_seq         INTEGER NOT NULL REFERENCES events (seq),
    org_id            TEXT NOT NULL,
    ordering_key      INTEGER NOT NULL,
    status            TEXT NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'delivered', 'dead')),
    attempts          INTEGER NOT NULL DEFAULT 0,
    next_attempt_at   INTEGER NOT NULL,
    lease_expires_at  INTEGER,
    last_attempt_at   INTEGER,
    last_status_code  INTEGER,
    last_error        TEXT,
    created_at        INTEGER NOT NULL,
    updated_at        INTEGER NOT NULL
  ) STRICT;
  CREATE INDEX deliveries_org_due ON deliveries (org_id, next_attempt_at) WHERE status = 'pending';
  CREATE INDEX deliveries_event ON deliveries (event_seq);
  CREATE INDEX deliveries_org_status ON deliveries (org_id, status, id);

  CREATE TABLE feed_rejects (
    id            INTEGER PRIMARY KEY,
    source        TEXT NOT NULL,
    position      INTEGER,
    line_bytes    INTEGER NOT NULL,
    raw           BLOB NOT NULL,
    reason        TEXT NOT NULL,
    detail        TEXT NOT NULL,
    event_id      TEXT,
    received_at   INTEGER NOT NULL
  ) STRICT;

  CREATE TABLE feed_positions (
    source             TEXT PRIMARY KEY,
    dev                TEXT NOT NULL,
    ino                TEXT NOT NULL,
    fingerprint        TEXT NOT NULL,
    fingerprint_bytes  INTEGER NOT NULL,
    position           INTEGER NOT NULL,
    updated_at         INTEGER NOT NULL
  ) STRICT;

  CREATE TABLE feed_stats (
    source       TEXT PRIMARY KEY,
    accepted     INTEGER NOT NULL DEFAULT 0,
    duplicates   INTEGER NOT NULL DEFAULT 0,
    quarantined  INTEGER NOT NULL DEFAULT 0,
    updated_at   INTEGER NOT NULL
  ) STRICT;
  `,
  // 3: delivery engine: attempts log, webhook health and secret rotation, per-request ordering
  `
  ALTER TABLE events ADD COLUMN type TEXT NOT NULL DEFAULT 'anticipation_request.status_changed';

  ALTER TABLE webhooks ADD COLUMN previous_secret TEXT;
  ALTER TABLE webhooks ADD COLUMN previous_secret_expires_at INTEGER;
  ALTER TABLE webhooks ADD COLUMN consecutive_failures INTEGER NOT NULL DEFAULT 0;
  ALTER TABLE webhooks ADD COLUMN failing_since INTEGER;
  ALTER TABLE webhooks ADD COLUMN last_success_at INTEGER;
  ALTER TABLE webhooks ADD COLUMN disabled_reason TEXT;

  -- Only deliveries that were tried or are being tried: fresh ones (all of them at ingest) stay
  -- out, which keeps ingestion fast; the dispatcher orders fresh ones by (next_attempt_at, id).
  CREATE INDEX deliveries_ordering ON deliveries (ordering_key, id)
    WHERE status = 'pending' AND (attempts > 0 OR lease_expires_at IS NOT NULL);

  CREATE TABLE delivery_attempts (
    id             INTEGER PRIMARY KEY,
    delivery_id    INTEGER NOT NULL REFERENCES deliveries (id),
    attempt        INTEGER NOT NULL,
    started_at     INTEGER NOT NULL,
    duration_ms    INTEGER NOT NULL,
    url            TEXT NOT NULL,
    status_code    INTEGER,
    error_class    TEXT,
    error_detail   TEXT,
    response_body  TEXT,
    outcome        TEXT NOT NULL CHECK (outcome IN ('delivered', 'retry', 'dead', 'disabled', 'abandoned'))
  ) STRICT;
  CREATE INDEX delivery_attempts_delivery ON delivery_attempts (delivery_id, id);
  `,
  // 4: leaner ingestion. Events lose the per-organization time index (it cost about a fifth of
  // the ingest rate); from this version on, received_at never decreases along seq (every insert
  // takes the larger of the clock and the newest event's time), so a time window maps to a seq
  // range by binary search: see feed-repo's seqRange. Events stored before this version under a
  // clock that stepped back may sit a few ms outside a window's edges.
  // Events also lose the columns that repeated what their payload holds (type, status,
  // previous_status): about 60 bytes a row, an eighth of what ingestion writes. The type is
  // read from the payload where needed.
  // Deliveries are rebuilt with their status check written as comparisons: SQLite evaluates
  // `status IN ('pending', 'delivered', 'dead')` through a temporary table built on every insert
  // (a third of an outbox row's insert: docs/benchmarks.md, "Figures behind the code's choices");
  // the comparisons cost nothing measurable. The
  // rebuild runs with foreign keys off, as SQLite's procedure for table changes requires; migrate()
  // checks them before committing.
  `
  DROP INDEX events_org_received;
  ALTER TABLE events DROP COLUMN type;
  ALTER TABLE events DROP COLUMN status;
  ALTER TABLE events DROP COLUMN previous_status;

  CREATE TABLE deliveries_rebuilt (
    id                INTEGER PRIMARY KEY,
    event_seq         INTEGER NOT NULL REFERENCES events (seq),
    org_id            TEXT NOT NULL,
    ordering_key      INTEGER NOT NULL,
    status            TEXT NOT NULL DEFAULT 'pending' CHECK (status = 'pending' OR status = 'delivered' OR status = 'dead'),
    attempts          INTEGER NOT NULL DEFAULT 0,
    next_attempt_at   INTEGER NOT NULL,
    lease_expires_at  INTEGER,
    last_attempt_at   INTEGER,
    last_status_code  INTEGER,
    last_error        TEXT,
    created_at        INTEGER NOT NULL,
    updated_at        INTEGER NOT NULL
  ) STRICT;
  INSERT INTO deliveries_rebuilt (id, event_seq, org_id, ordering_key, status, attempts, next_attempt_at, lease_expires_at,
      last_attempt_at, last_status_code, last_error, created_at, updated_at)
    SELECT id, event_seq, org_id, ordering_key, status, attempts, next_attempt_at, lease_expires_at,
      last_attempt_at, last_status_code, last_error, created_at, updated_at FROM deliveries;
  DROP TABLE deliveries;
  ALTER TABLE deliveries_rebuilt RENAME TO deliveries;
  CREATE INDEX deliveries_org_due ON deliveries (org_id, next_attempt_at) WHERE status = 'pending';
  CREATE INDEX deliveries_event ON deliveries (event_seq);
  CREATE INDEX deliveries_org_status ON deliveries (org_id, status, id);
  CREATE INDEX deliveries_ordering ON deliveries (ordering_key, id)
    WHERE status = 'pending' AND (attempts > 0 OR lease_expires_at IS NOT NULL);
  `,
  // 5: leaner ingestion, again.
  // - Deliveries: one per-organization index to write at ingestion instead of two. A fresh
  //   delivery (pending, never attempted, not leased: what ingestion queues) sits only in
  //   deliveries_org_fresh; the two indexes that served the dispatcher and the delivery log now
  //   leave fresh ones out, and a fresh delivery enters them when it is first leased. Each
  //   per-organization index cost ingestion about a sixth of its rate (every batch inserts into
  //   50 places of it and rewrites their pages). The dispatcher claims fresh deliveries in queue
  //   order and tried ones by due time (see deliveries-repo's due()).
  // - Events name their source by a number (feed_sources) instead of repeating its path on
  //   every row, which is rebuilt for it, with foreign keys off as SQLite's procedure for table
  //   changes requires (migrate() checks them before committing).
  // - From this version on, events of the feed store only their details in `payload`: the rest
  //   of the webhook body repeats the event's columns (see feed-event's storedBody). Rows stored
  //   before keep their whole body, which still reads back as it did.
  // - Ids derived from lines with occurred_at now start with that time (see feed-event's
  //   derivedEventId). legacy_event_ids remembers where the events stored before under a
  //   derived id (evt_ and 32 hex digits) end, so that a line read again is still found under
  //   the id it was given then; it stays empty when there are none, and nothing is looked up.
  `
  DROP INDEX deliveries_org_due;
  DROP INDEX deliveries_org_status;
  CREATE INDEX deliveries_org_fresh ON deliveries (org_id, id)
    WHERE status = 'pending' AND attempts = 0 AND lease_expires_at IS NULL;
  CREATE INDEX deliveries_org_due ON deliveries (org_id, next_attempt_at)
    WHERE status = 'pending' AND (attempts > 0 OR lease_expires_at IS NOT NULL);
  CREATE INDEX deliveries_org_status ON deliveries (org_id, status, id)
    WHERE status <> 'pending' OR attempts > 0 OR lease_expires_at IS NOT NULL;

  CREATE TABLE feed_sources (
    id    INTEGER PRIMARY KEY,
    name  TEXT NOT NULL UNIQUE
  ) STRICT;
  INSERT INTO feed_sources (name) VALUES ('api');
  INSERT OR IGNORE INTO feed_sources (name) SELECT DISTINCT source FROM events ORDER BY source;

  CREATE TABLE events_rebuilt (
    seq                      INTEGER PRIMARY KEY,
    id                       TEXT NOT NULL UNIQUE,
    org_id                   TEXT NOT NULL,
    anticipation_request_id  TEXT NOT NULL,
    occurred_at              INTEGER NOT NULL,
    payload                  TEXT NOT NULL,
    source_id                INTEGER NOT NULL REFERENCES feed_sources (id),
    source_position          INTEGER,
    received_at              INTEGER NOT NULL
  ) STRICT;
  INSERT INTO events_rebuilt (seq, id, org_id, anticipation_request_id, occurred_at, payload, source_id, source_position, received_at)
    SELECT e.seq, e.id, e.org_id, e.anticipation_request_id, e.occurred_at, e.payload, s.id, e.source_position, e.received_at
    FROM events e JOIN feed_sources s ON s.name = e.source ORDER BY e.seq;
  DROP TABLE events;
  ALTER TABLE events_rebuilt RENAME TO events;

  CREATE TABLE legacy_event_ids (
    before_seq  INTEGER NOT NULL
  ) STRICT;
  INSERT INTO legacy_event_ids (before_seq)
    SELECT max(seq) + 1 FROM events
    WHERE length(id) = 36 AND substr(id, 1, 4) = 'evt_' AND ltrim(substr(id, 5), '0123456789abcdef') = ''
    HAVING count(*) > 0;
  `,
  // 6: retention (see retention-repo.ts). Quarantined lines are pruned by age: an index on
  // received_at finds the old ones without reading the table (a quarantine is rare, so the
  // index costs ingestion nothing measurable). Events and deliveries need none: events are
  // taken in seq order (received_at never decreases along seq, see feed-repo's seqRange) and
  // their deliveries through deliveries_event.
  `
  CREATE INDEX feed_rejects_received ON feed_rejects (received_at);
  `,
  // 7: e-mails are compared under a new key (domain/validation.ts emailKey): ASCII letters
  // lower-cased, then NFC; no longer JavaScript's full Unicode lower-casing, which matched a
  // Kelvin sign (U+212A) with "k". hookrelay_email_key is that function, registered on the
  // connection by migrate(). Two users whose addresses only differed in Unicode normal form
  // would now share a key: the first keeps it and the other keeps its old key (OR IGNORE), so
  // the migration never fails on them; list them with hookrelay users list.
  `
  UPDATE OR IGNORE users SET email_key = hookrelay_email_key(email) WHERE email_key <> hookrelay_email_key(email);
  `,
  // 8: a feed position also remembers the bytes just before it (a sha256 of up to 256 bytes),
  // so that a file rewritten with the same first bytes is not read on from the old offset.
  // Positions committed before have none: for them only the first bytes are compared.
  `
  ALTER TABLE feed_positions ADD COLUMN tail_fingerprint TEXT;
  `,
  // 9: the console's chart of attempts per minute (GET /webhook/stats). Attempts by the time
  // they started, with what the chart reads of each (its delivery, which says the organization,
  // and its outcome), so that a window's attempts are read from this index alone, never from the
  // table, whose rows hold the receivers' answers. Attempts start in time order, give or take an
  // attempt's duration: each is added at the end of the index, one page more per group commit
  // (not one per attempt, as an index in random order would be). Ingestion writes no attempt.
  // Built once, in the migration (its cost per million attempts: docs/benchmarks.md, "Figures
  // behind the code's choices").
  `
  CREATE INDEX delivery_attempts_started ON delivery_attempts (started_at, delivery_id, outcome);
  `,
  // 10: the request as each attempt sent it: its webhook-timestamp (seconds) and its
  // webhook-signature header, null when the attempt sent nothing (or sent it unsigned, for the
  // signature). Attempts recorded before have neither: the console says so.
  `
  ALTER TABLE delivery_attempts ADD COLUMN sent_timestamp INTEGER;
  ALTER TABLE delivery_attempts ADD COLUMN sent_signature TEXT;
  `,
  // 11: per-webhook outbound controls: a rate limit in deliveries per second (null:
  // none) and the receiver's own static headers, a JSON array of [name, value] pairs sent on
  // every attempt (null: none). Nullable columns without a default: no table rewrite.
  `
  ALTER TABLE webhooks ADD COLUMN rate_limit INTEGER;
  ALTER TABLE webhooks ADD COLUMN headers TEXT;
  `,
  // 12: the rate limit's state: the deliveries a webhook with a rate limit started
  // in the last second and a little more, as JSON [at, count, at, count, ...] (epoch ms; see
  // domain/rate-window.ts), written by the claim that starts them. In the database rather than
  // in the daemon's memory so that a restart does not let a second burst through, and so that
  // `hookrelay status` can tell that a webhook's deliveries wait for their limit. Null: none.
  `
  ALTER TABLE webhooks ADD COLUMN rate_window TEXT;
  `,
  // 13: facts about the database itself, as key/value text. 'hookrelay_version': the newest
  // hookrelay that has opened it, so that an upgrade is recognized (and backed up first) even when
  // it brings no migration, and an older hookrelay that refuses a newer schema can say which
  // version wrote it (upgrade-backup.ts).
  `
  CREATE TABLE hookrelay_meta (
    key TEXT PRIMARY KEY,
    value TEXT NOT NULL
  ) STRICT;
  `,
  // 14: the audit trail (domain/audit.ts, docs/operations.md "Audit trail"): who changed
  // what, numbered without gaps (id is given by the code, the previous id + 1, never by
  // SQLite) and chained by hash. audit_entries_org serves an organization's reader (the API),
  // audit_entries_action finds the newest anchor (audit.prune) and the CLI's --action filter,
  // audit_entries_at turns a --since time into an id (times never decrease along the id).
  // audit_journal: the last entry the daemon wrote to its log, so each entry's log line is
  // written once, also for entries made by a CLI command while the daemon was stopped.
  `
  CREATE TABLE audit_entries (
    id          INTEGER PRIMARY KEY,
    at          INTEGER NOT NULL,
    actor_kind  TEXT NOT NULL,
    actor_name  TEXT,
    actor_org   TEXT,
    action      TEXT NOT NULL,
    org_id      TEXT,
    target      TEXT,
    changes     TEXT,
    request_id  TEXT,
    source      TEXT,
    outcome     TEXT NOT NULL CHECK (outcome IN ('ok', 'denied', 'failed')),
    code        TEXT,
    prev_hash   TEXT NOT NULL,
    hash        TEXT NOT NULL
  ) STRICT;
  CREATE INDEX audit_entries_org ON audit_entries (org_id, id);
  CREATE INDEX audit_entries_action ON audit_entries (action, id);
  CREATE INDEX audit_entries_at ON audit_entries (at);

  CREATE TABLE audit_journal (
    instance        TEXT PRIMARY KEY,
    logged_through  INTEGER NOT NULL
  ) STRICT;
  -- The audit trail's reader: saas_admin reads its organization's entries.
  UPDATE roles SET permissions = rtrim(permissions, ']') || ',"audit:read"]'
  WHERE name = 'saas_admin' AND builtin = 1 AND permissions NOT LIKE '%"audit:read"%';
  `,
  // 15: API keys for machines (domain/api-keys.ts, docs/api.md "API keys"): the key itself is
  // never stored, only SHA-256 of it (hash) and its public prefix, by which a request's key finds
  // its row. A revoked key keeps its row (revoked_at) so its prefix is never handed out again;
  // its name may be used again (the name is unique among the keys not revoked). last_used_at is
  // written at most once a minute per key. saas_admin may manage the organization's keys.
  `
  CREATE TABLE api_keys (
    id            INTEGER PRIMARY KEY,
    org_id        TEXT NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
    name          TEXT NOT NULL,
    role_name     TEXT NOT NULL REFERENCES roles (name),
    prefix        TEXT NOT NULL UNIQUE,
    hash          TEXT NOT NULL,
    created_at    INTEGER NOT NULL,
    created_by    TEXT,
    expires_at    INTEGER,
    last_used_at  INTEGER,
    revoked_at    INTEGER
  ) STRICT;
  CREATE UNIQUE INDEX api_keys_org_name ON api_keys (org_id, name) WHERE revoked_at IS NULL;
  UPDATE roles SET permissions = rtrim(permissions, ']') || ',"api_keys:manage"]'
  WHERE name = 'saas_admin' AND builtin = 1 AND permissions NOT LIKE '%"api_keys:manage"%';
  `,
  // 16: an event's trace context (W3C Trace Context, domain/trace-context.ts, docs/observability.md):
  // the traceparent its delivery attempts are children of (the daemon's ingest span's, or the
  // producer's from the feed line) and its tracestate, so that every retry and replay of the
  // event, after a restart too, joins the same trace. Null: none (stored while tracing was off,
  // from a line without one, or before this version). Nullable columns without a default: no
  // table rewrite, and an event without trace context costs two null markers.
  `
  ALTER TABLE events ADD COLUMN traceparent TEXT;
  ALTER TABLE events ADD COLUMN tracestate TEXT;
  `,
  // 17: receiver authentication (issue 43, docs/delivery.md "Receiver authentication"): a client
  // certificate the webhook presents (mutual TLS) and OAuth2 client credentials it gets access
  // tokens with. What may be shown (JSON: the certificate's subject, issuer, fingerprint and
  // validity; the token URL, client id, scope, audience) in client_certificate and oauth2; the
  // private key with its chain, and the client secret, sealed with AES-256-GCM under the
  // key-encryption key kept outside the database (domain/sealing.ts), in the *_sealed columns.
  `
  ALTER TABLE webhooks ADD COLUMN client_certificate TEXT;
  ALTER TABLE webhooks ADD COLUMN client_certificate_sealed TEXT;
  ALTER TABLE webhooks ADD COLUMN oauth2 TEXT;
  ALTER TABLE webhooks ADD COLUMN oauth2_secret_sealed TEXT;
  `,
];

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
];

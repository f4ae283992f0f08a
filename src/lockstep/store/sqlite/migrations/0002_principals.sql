-- Tenants (settings and the start-rate bucket), users with hashed API keys and passwords, UI sessions,
-- and an audit log for actions that are not run events (logins, refused requests).
CREATE TABLE tenants (
    name            TEXT    PRIMARY KEY,
    settings        TEXT    NOT NULL DEFAULT '{}',
    bucket_tokens   REAL,
    bucket_at_ms    INTEGER,
    created_at      TEXT    NOT NULL
);

CREATE TABLE users (
    tenant          TEXT    NOT NULL,
    name            TEXT    NOT NULL,
    roles           TEXT    NOT NULL,   -- JSON list
    groups          TEXT    NOT NULL,   -- JSON list
    key_hash        TEXT    UNIQUE,     -- sha256 of the API key; the key itself is never stored
    password_hash   TEXT,               -- scrypt
    disabled        INTEGER NOT NULL DEFAULT 0,
    created_at      TEXT    NOT NULL,
    PRIMARY KEY (tenant, name)
);

CREATE TABLE sessions (
    id_hash     TEXT    PRIMARY KEY,    -- sha256 of the cookie value
    tenant      TEXT    NOT NULL,
    user        TEXT    NOT NULL,
    csrf        TEXT    NOT NULL,
    created_at  INTEGER NOT NULL,
    expires_at  INTEGER NOT NULL
);

CREATE TABLE audit (
    id      INTEGER PRIMARY KEY AUTOINCREMENT,
    at      TEXT    NOT NULL,
    tenant  TEXT,
    actor   TEXT,
    action  TEXT    NOT NULL,
    target  TEXT,
    outcome TEXT    NOT NULL,
    detail  TEXT    NOT NULL DEFAULT '{}'
);
CREATE INDEX audit_by_tenant ON audit (tenant, id);

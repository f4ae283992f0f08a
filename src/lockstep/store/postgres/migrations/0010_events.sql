-- External events (`wait_event` steps): the events inbox, the waits index, the callbacks and the
-- integrations (see the SQLite migration 0013 for the life of their rows).
CREATE TABLE event_inbox (
    tenant       TEXT    NOT NULL,
    event_id     TEXT    NOT NULL,
    name         TEXT    NOT NULL,
    key          TEXT    NOT NULL,
    payload      TEXT    NOT NULL,
    status       TEXT    NOT NULL,
    delivered_to TEXT    NOT NULL DEFAULT '[]',
    received_at  BIGINT  NOT NULL,
    buffer_until BIGINT,
    updated_at   BIGINT  NOT NULL,
    PRIMARY KEY (tenant, event_id)
);
CREATE INDEX event_inbox_buffered ON event_inbox (tenant, name, key, received_at) WHERE status = 'buffered';

CREATE TABLE event_waits (
    run_id      TEXT    NOT NULL,
    step        TEXT    NOT NULL,
    tenant      TEXT    NOT NULL,
    name        TEXT    NOT NULL,
    key         TEXT    NOT NULL,
    generation  INTEGER NOT NULL,
    expires_at  TEXT    NOT NULL,
    created_at  BIGINT  NOT NULL,
    PRIMARY KEY (run_id, step)
);
CREATE INDEX event_waits_by_key ON event_waits (tenant, name, key, created_at);

CREATE TABLE event_callbacks (
    token_hash  TEXT    PRIMARY KEY,
    callback_id TEXT    NOT NULL UNIQUE,
    tenant      TEXT    NOT NULL,
    run_id      TEXT    NOT NULL,
    step        TEXT    NOT NULL,
    generation  INTEGER NOT NULL,
    expires_at  TEXT    NOT NULL,
    status      TEXT    NOT NULL,
    used_at     BIGINT,
    created_at  BIGINT  NOT NULL
);
CREATE INDEX event_callbacks_by_run ON event_callbacks (run_id, step);

CREATE TABLE integrations (
    tenant      TEXT    NOT NULL,
    name        TEXT    NOT NULL,
    secret      TEXT    NOT NULL,   -- a sealed marker (JSON), never the secret in clear
    created_at  BIGINT  NOT NULL,
    updated_at  BIGINT  NOT NULL,
    PRIMARY KEY (tenant, name)
);

-- External events (`wait_event` steps). event_inbox: every event a publisher sent, by its id per
-- tenant (a replay is answered from its row, never delivered again): delivering (the deliveries to
-- the waiting runs are under way, one transaction per run; delivered_to grows with each), delivered,
-- buffered (nobody waited: kept until buffer_until for the first run that starts waiting), consumed
-- (by that run), expired. event_waits: the waits index, one row per waiting step (written and removed
-- by the run's own appends). event_callbacks: the per-wait callback URLs, by the sha256 of their token
-- (the token is never stored): open, used, replaced (a newer one was minted), closed (the wait ended).
-- integrations: a tenant's named Standard Webhooks secrets, sealed under a data key of the tenant's.
CREATE TABLE event_inbox (
    tenant       TEXT    NOT NULL,
    event_id     TEXT    NOT NULL,
    name         TEXT    NOT NULL,
    key          TEXT    NOT NULL,
    payload      TEXT    NOT NULL,
    status       TEXT    NOT NULL,
    delivered_to TEXT    NOT NULL DEFAULT '[]',
    received_at  INTEGER NOT NULL,
    buffer_until INTEGER,
    updated_at   INTEGER NOT NULL,
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
    created_at  INTEGER NOT NULL,
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
    used_at     INTEGER,
    created_at  INTEGER NOT NULL
);
CREATE INDEX event_callbacks_by_run ON event_callbacks (run_id, step);

CREATE TABLE integrations (
    tenant      TEXT    NOT NULL,
    name        TEXT    NOT NULL,
    secret      TEXT    NOT NULL,   -- a sealed marker (JSON), never the secret in clear
    created_at  INTEGER NOT NULL,
    updated_at  INTEGER NOT NULL,
    PRIMARY KEY (tenant, name)
);

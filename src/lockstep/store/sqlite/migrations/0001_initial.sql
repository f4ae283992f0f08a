-- lockstep schema v1 (SQLite). Times used for scanning are epoch milliseconds; events keep ISO text.
CREATE TABLE definitions (
    tenant      TEXT    NOT NULL,
    name        TEXT    NOT NULL,
    version     INTEGER NOT NULL,
    digest      TEXT    NOT NULL,
    document    TEXT    NOT NULL,
    created_at  TEXT    NOT NULL,
    PRIMARY KEY (tenant, name, version),
    UNIQUE (tenant, name, digest)
);

CREATE TABLE runs (
    run_id          TEXT    PRIMARY KEY,
    tenant          TEXT    NOT NULL,
    definition      TEXT    NOT NULL,
    version         INTEGER NOT NULL,
    status          TEXT    NOT NULL,
    seq             INTEGER NOT NULL,
    current_step    TEXT,
    snapshot        TEXT    NOT NULL,
    last_hash       TEXT    NOT NULL,
    start_key       TEXT,
    request_digest  TEXT,
    created_at      TEXT    NOT NULL,
    updated_at      TEXT    NOT NULL,
    UNIQUE (tenant, start_key)
);
CREATE INDEX runs_by_tenant_status ON runs (tenant, status, run_id);
CREATE INDEX runs_by_tenant ON runs (tenant, run_id);

-- Append-only: (run_id, seq) is unique, so two writers can never both append seq N.
CREATE TABLE events (
    run_id  TEXT    NOT NULL,
    seq     INTEGER NOT NULL,
    type    TEXT    NOT NULL,
    at      TEXT    NOT NULL,
    v       INTEGER NOT NULL,
    data    TEXT    NOT NULL,
    hash    TEXT    NOT NULL,
    PRIMARY KEY (run_id, seq)
) WITHOUT ROWID;

CREATE TRIGGER events_append_only_update BEFORE UPDATE ON events
BEGIN SELECT RAISE(ABORT, 'events are append-only'); END;
CREATE TRIGGER events_append_only_delete BEFORE DELETE ON events
BEGIN SELECT RAISE(ABORT, 'events are append-only'); END;

-- The outbox of activity attempts; a row is written in the same transaction as ActivityScheduled.
CREATE TABLE tasks (
    task_id          TEXT    PRIMARY KEY,
    tenant           TEXT    NOT NULL,
    run_id           TEXT    NOT NULL,
    step             TEXT    NOT NULL,
    attempt          INTEGER NOT NULL,
    kind             TEXT    NOT NULL,
    activity         TEXT    NOT NULL,
    queue            TEXT    NOT NULL,
    input            TEXT    NOT NULL,
    idempotency_key  TEXT    NOT NULL,
    definition       TEXT    NOT NULL,
    version          INTEGER NOT NULL,
    delivery         TEXT    NOT NULL,
    timeout_ms       INTEGER NOT NULL,
    status           TEXT    NOT NULL,  -- ready | leased | done | cancelled | stale
    available_at     INTEGER NOT NULL,
    fencing          INTEGER,
    lease_owner      TEXT,
    lease_expires_at INTEGER,
    deadline         INTEGER,
    created_at       INTEGER NOT NULL
);
CREATE INDEX tasks_ready ON tasks (activity, available_at) WHERE status = 'ready';
CREATE INDEX tasks_leased ON tasks (lease_expires_at) WHERE status = 'leased';

CREATE TABLE timers (
    run_id      TEXT    NOT NULL,
    key         TEXT    NOT NULL,
    generation  INTEGER NOT NULL,
    tenant      TEXT    NOT NULL,
    fire_at     INTEGER NOT NULL,
    status      TEXT    NOT NULL,  -- scheduled | fired | cancelled | stale
    PRIMARY KEY (run_id, key, generation)
);
CREATE INDEX timers_due ON timers (fire_at) WHERE status = 'scheduled';

-- Migrations that need approval (see the SQLite migration 0016 for the life of the rows).
CREATE TABLE migration_requests (
    request_id    TEXT    PRIMARY KEY,
    tenant        TEXT    NOT NULL,
    definition    TEXT    NOT NULL,
    from_version  INTEGER NOT NULL,
    to_version    INTEGER NOT NULL,
    mapping       TEXT    NOT NULL,
    reason        TEXT    NOT NULL,
    requested_by  TEXT    NOT NULL,
    policy        TEXT    NOT NULL,
    bulk          BOOLEAN NOT NULL,
    status        TEXT    NOT NULL,
    created_at    BIGINT  NOT NULL,
    expires_at    BIGINT  NOT NULL,
    decided_at    BIGINT,
    applied_at    BIGINT
);
CREATE INDEX migration_requests_by_tenant ON migration_requests (tenant, status, created_at);
CREATE INDEX migration_requests_due ON migration_requests (expires_at) WHERE status IN ('pending', 'approved');

CREATE TABLE migration_decisions (
    request_id  TEXT    NOT NULL,
    approver    TEXT    NOT NULL,
    decision    TEXT    NOT NULL,
    comment     TEXT,
    at          TEXT    NOT NULL,
    roles       TEXT    NOT NULL,
    groups_     TEXT    NOT NULL,
    PRIMARY KEY (request_id, approver)
);

CREATE TABLE migration_request_runs (
    request_id  TEXT    NOT NULL,
    run_id      TEXT    NOT NULL,
    tenant      TEXT    NOT NULL,
    outcome     TEXT,
    detail      TEXT,
    at          BIGINT,
    open        INTEGER,
    PRIMARY KEY (request_id, run_id)
);
CREATE UNIQUE INDEX migration_request_runs_open ON migration_request_runs (run_id) WHERE open = 1;
CREATE TRIGGER migration_request_runs_purge_only_delete BEFORE DELETE ON migration_request_runs
    FOR EACH ROW EXECUTE FUNCTION lockstep_purge_only_delete('a migration request''s run row');

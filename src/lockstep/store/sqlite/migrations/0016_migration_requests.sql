-- Migrations that need approval (docs/approvals.md, "Migrations that need approval"): a request made by
-- `migrate` of one run or a bulk batch, the approvers' decisions, and each run's outcome once applied.
-- `policy` is the JSON the request is decided under (users, groups, quorum, reject_quorum, timeout_ms,
-- version: the definition version it is from). Times are epoch milliseconds.
CREATE TABLE migration_requests (
    request_id    TEXT    PRIMARY KEY,
    tenant        TEXT    NOT NULL,
    definition    TEXT    NOT NULL,
    from_version  INTEGER NOT NULL,
    to_version    INTEGER NOT NULL,
    mapping       TEXT    NOT NULL,     -- JSON {old step: new step}
    reason        TEXT    NOT NULL,
    requested_by  TEXT    NOT NULL,
    policy        TEXT    NOT NULL,     -- JSON
    bulk          INTEGER NOT NULL,
    status        TEXT    NOT NULL,     -- pending | approved | applied | rejected | expired
    created_at    INTEGER NOT NULL,
    expires_at    INTEGER NOT NULL,
    decided_at    INTEGER,
    applied_at    INTEGER
);
CREATE INDEX migration_requests_by_tenant ON migration_requests (tenant, status, created_at);
CREATE INDEX migration_requests_due ON migration_requests (expires_at) WHERE status IN ('pending', 'approved');

-- One decision per approver per request: the primary key makes a second one impossible.
CREATE TABLE migration_decisions (
    request_id  TEXT    NOT NULL,
    approver    TEXT    NOT NULL,
    decision    TEXT    NOT NULL,     -- approve | reject
    comment     TEXT,
    at          TEXT    NOT NULL,
    roles       TEXT    NOT NULL,     -- JSON list, as read when they decided
    groups_     TEXT    NOT NULL,     -- JSON list
    PRIMARY KEY (request_id, approver)
);

-- The runs of a request. `outcome` is NULL until the run's migration command commits (migrated) or is
-- refused (skipped, with why), in the same transaction as that command: the apply pass is idempotent.
-- A run is in at most one open request (pending or approved, outcome NULL): `open` is 1 while it is.
CREATE TABLE migration_request_runs (
    request_id  TEXT    NOT NULL,
    run_id      TEXT    NOT NULL,
    tenant      TEXT    NOT NULL,
    outcome     TEXT,                 -- migrated | skipped | rejected | expired
    detail      TEXT,
    at          INTEGER,
    open        INTEGER,              -- 1 while the request may still migrate the run, else NULL
    PRIMARY KEY (request_id, run_id)
);
CREATE UNIQUE INDEX migration_request_runs_open ON migration_request_runs (run_id) WHERE open = 1;

CREATE TRIGGER migration_request_runs_purge_only_delete BEFORE DELETE ON migration_request_runs
WHEN NOT EXISTS (SELECT 1 FROM tombstones WHERE run_id = OLD.run_id)
BEGIN SELECT RAISE(ABORT, 'a migration request''s run row is deleted only by its run''s purge, once the run has a tombstone'); END;

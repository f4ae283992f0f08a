-- Child runs (a parent's `run` step): the outbox between a parent and its child (see the SQLite
-- migration 0012 for the life of a row).
CREATE TABLE child_runs (
    child_run_id  TEXT    PRIMARY KEY,
    run_id        TEXT    NOT NULL,
    tenant        TEXT    NOT NULL,
    step          TEXT    NOT NULL,
    definition    TEXT    NOT NULL,
    version       INTEGER,
    input         TEXT    NOT NULL,
    start_key     TEXT    NOT NULL,
    depth         INTEGER NOT NULL,
    status        TEXT    NOT NULL,
    cancel_reason TEXT,
    cancel_sent   BOOLEAN NOT NULL DEFAULT FALSE,
    child_status  TEXT,
    result        TEXT,
    attempts      INTEGER NOT NULL DEFAULT 0,
    last_error    TEXT,
    available_at  BIGINT  NOT NULL,
    created_at    BIGINT  NOT NULL,
    updated_at    BIGINT  NOT NULL
);
CREATE INDEX child_runs_due ON child_runs (available_at) WHERE status IN ('requested', 'started', 'ended');
CREATE INDEX child_runs_by_run ON child_runs (run_id);
CREATE TRIGGER child_runs_purge_only_delete BEFORE DELETE ON child_runs
    FOR EACH ROW EXECUTE FUNCTION lockstep_purge_only_delete('a child run row');

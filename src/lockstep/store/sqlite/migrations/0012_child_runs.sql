-- Child runs (a parent's `run` step): the outbox between a parent and its child, which are different
-- runs and so never change in one command. The parent's ChildRunRequested writes the row (requested);
-- the scheduler's children pass starts the child in a transaction of its own (started); the child's
-- terminal event writes its end here (ended); the pass hands it to the parent as a command (reported).
-- A parent's cancel sets cancel_reason; the pass sends it to the child once (cancel_sent).
CREATE TABLE child_runs (
    child_run_id  TEXT    PRIMARY KEY,
    run_id        TEXT    NOT NULL,     -- the parent
    tenant        TEXT    NOT NULL,     -- the parent's, so the child's: there is no other
    step          TEXT    NOT NULL,     -- the parent's step key
    definition    TEXT    NOT NULL,
    version       INTEGER,              -- NULL: the latest when the child starts
    input         TEXT    NOT NULL,     -- JSON, as the parent stored it (its sealed values stay sealed)
    start_key     TEXT    NOT NULL,
    depth         INTEGER NOT NULL,
    status        TEXT    NOT NULL,     -- requested | started | ended | reported
    cancel_reason TEXT,
    cancel_sent   INTEGER NOT NULL DEFAULT 0,
    child_status  TEXT,                 -- completed | failed | cancelled, once ended
    result        TEXT,                 -- JSON {output, error} of the end, as the child stored it
    attempts      INTEGER NOT NULL DEFAULT 0,
    last_error    TEXT,
    available_at  INTEGER NOT NULL,
    created_at    INTEGER NOT NULL,
    updated_at    INTEGER NOT NULL
);
CREATE INDEX child_runs_due ON child_runs (available_at) WHERE status IN ('requested', 'started', 'ended');
CREATE INDEX child_runs_by_run ON child_runs (run_id);

CREATE TRIGGER child_runs_purge_only_delete BEFORE DELETE ON child_runs
WHEN NOT EXISTS (SELECT 1 FROM tombstones WHERE run_id = OLD.run_id)
BEGIN SELECT RAISE(ABORT, 'a child run row is deleted only by its run''s purge, once the run has a tombstone'); END;

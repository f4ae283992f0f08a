-- Retention: finished runs past their tenant's retention are purged; legal holds stop that; every
-- purged run leaves one tombstone. The database itself refuses every delete the purge would not make
-- (docs/security.md, "Retention and purge"): events, runs and the rows keyed by a run may be deleted
-- only once the run has a tombstone, and a tombstone may be written only for a finished, unheld run,
-- with the run's own tenant, definition, status, event count and chain head.

-- When each run reached its terminal status: the retention clock. Kept by the triggers below (so no
-- write path can forget it), read by the purge through (tenant, finished_at).
CREATE TABLE finished_runs (
    run_id      TEXT    PRIMARY KEY,
    tenant      TEXT    NOT NULL,
    finished_at TEXT    NOT NULL    -- ISO, the terminal event's time
);
CREATE INDEX finished_runs_due ON finished_runs (tenant, finished_at);
-- Runs finished before this migration: their last update is their terminal event, or later (a late
-- stale report), which only ever makes a purge later, never earlier.
INSERT INTO finished_runs (run_id, tenant, finished_at)
SELECT run_id, tenant, updated_at FROM runs WHERE status IN ('completed', 'failed', 'cancelled');

CREATE TRIGGER runs_finished_insert AFTER INSERT ON runs
WHEN NEW.status IN ('completed', 'failed', 'cancelled')
BEGIN
    INSERT OR IGNORE INTO finished_runs (run_id, tenant, finished_at)
    VALUES (NEW.run_id, NEW.tenant, NEW.updated_at);
END;
CREATE TRIGGER runs_finished_update AFTER UPDATE OF status ON runs
WHEN NEW.status IN ('completed', 'failed', 'cancelled') AND OLD.status NOT IN ('completed', 'failed', 'cancelled')
BEGIN
    INSERT OR IGNORE INTO finished_runs (run_id, tenant, finished_at)
    VALUES (NEW.run_id, NEW.tenant, NEW.updated_at);
END;

-- Legal holds: on one run, or (run_id NULL) on a whole tenant. Rows of their own, not run events: a
-- finished run stays exactly as it ended, and a hold is about the data, not about the process.
CREATE TABLE holds (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    tenant          TEXT    NOT NULL,
    run_id          TEXT,
    reason          TEXT    NOT NULL,
    held_by         TEXT    NOT NULL,
    held_at         TEXT    NOT NULL,
    released_by     TEXT,
    released_at     TEXT,
    release_reason  TEXT
);
CREATE UNIQUE INDEX holds_active ON holds (tenant, COALESCE(run_id, '')) WHERE released_at IS NULL;
CREATE INDEX holds_by_run ON holds (run_id) WHERE run_id IS NOT NULL;

-- One per purged run, kept for good: what the run was (so counts and the audit log stay explainable)
-- and how far its purge got. 'purging': written, the run row is gone, its other rows are being
-- deleted in batches (a crash resumes from here); 'purged': nothing of the run is left.
CREATE TABLE tombstones (
    run_id      TEXT    PRIMARY KEY,
    tenant      TEXT    NOT NULL,
    definition  TEXT    NOT NULL,
    version     INTEGER NOT NULL,
    status      TEXT    NOT NULL,
    started_at  TEXT    NOT NULL,
    finished_at TEXT    NOT NULL,
    events      INTEGER NOT NULL,
    last_hash   TEXT    NOT NULL,
    purged_at   TEXT    NOT NULL,
    purged_by   TEXT    NOT NULL,
    reason      TEXT    NOT NULL,
    state       TEXT    NOT NULL,
    done_at     TEXT
);
CREATE INDEX tombstones_by_tenant ON tombstones (tenant, run_id);
CREATE INDEX tombstones_purging ON tombstones (run_id) WHERE state = 'purging';

-- The purge deletes a run's other rows by run id.
CREATE INDEX tasks_closed_by_run ON tasks (run_id) WHERE status NOT IN ('ready', 'leased');
CREATE INDEX approval_requests_by_run ON approval_requests (run_id);
CREATE INDEX approval_links_by_run ON approval_links (run_id);
CREATE INDEX notifications_by_run ON notifications (run_id);

-- What the database refuses.
CREATE TRIGGER tombstones_insert_check BEFORE INSERT ON tombstones
BEGIN
    SELECT RAISE(ABORT, 'a tombstone is written only for an existing finished run, with its own tenant, definition, status, event count and chain head')
    WHERE NOT EXISTS (
        SELECT 1 FROM runs r
        WHERE r.run_id = NEW.run_id AND r.tenant = NEW.tenant AND r.definition = NEW.definition
          AND r.version = NEW.version AND r.status IN ('completed', 'failed', 'cancelled')
          AND r.status = NEW.status AND r.seq = NEW.events AND r.last_hash = NEW.last_hash);
    SELECT RAISE(ABORT, 'a held run is never purged: release its hold (or its tenant''s) first')
    WHERE EXISTS (
        SELECT 1 FROM holds h
        WHERE h.tenant = NEW.tenant AND (h.run_id = NEW.run_id OR h.run_id IS NULL) AND h.released_at IS NULL);
    SELECT RAISE(ABORT, 'a tombstone is written in state purging, not yet done')
    WHERE NEW.state <> 'purging' OR NEW.done_at IS NOT NULL;
END;

CREATE TRIGGER tombstones_update_check BEFORE UPDATE ON tombstones
BEGIN
    SELECT RAISE(ABORT, 'a tombstone only moves from purging to purged, once, and says nothing else new')
    WHERE OLD.state <> 'purging' OR NEW.state <> 'purged' OR NEW.done_at IS NULL
       OR NEW.run_id IS NOT OLD.run_id OR NEW.tenant IS NOT OLD.tenant
       OR NEW.definition IS NOT OLD.definition OR NEW.version IS NOT OLD.version
       OR NEW.status IS NOT OLD.status OR NEW.started_at IS NOT OLD.started_at
       OR NEW.finished_at IS NOT OLD.finished_at OR NEW.events IS NOT OLD.events
       OR NEW.last_hash IS NOT OLD.last_hash OR NEW.purged_at IS NOT OLD.purged_at
       OR NEW.purged_by IS NOT OLD.purged_by OR NEW.reason IS NOT OLD.reason;
    SELECT RAISE(ABORT, 'a tombstone is marked purged only when neither the run row nor any of its events is left')
    WHERE EXISTS (SELECT 1 FROM events WHERE run_id = OLD.run_id)
       OR EXISTS (SELECT 1 FROM runs WHERE run_id = OLD.run_id);
END;

CREATE TRIGGER tombstones_keep BEFORE DELETE ON tombstones
BEGIN SELECT RAISE(ABORT, 'tombstones are kept for good'); END;

-- Events stay append-only: never updated (events_append_only_update, unchanged), deleted only once
-- their run has a tombstone.
DROP TRIGGER events_append_only_delete;
CREATE TRIGGER events_append_only_delete BEFORE DELETE ON events
WHEN NOT EXISTS (SELECT 1 FROM tombstones WHERE run_id = OLD.run_id)
BEGIN SELECT RAISE(ABORT, 'events are append-only: only the events of a purged run (one with a tombstone) are ever deleted'); END;

CREATE TRIGGER runs_purge_only_delete BEFORE DELETE ON runs
WHEN NOT EXISTS (SELECT 1 FROM tombstones WHERE run_id = OLD.run_id)
BEGIN SELECT RAISE(ABORT, 'a run is deleted only by its purge, once it has a tombstone'); END;

CREATE TRIGGER tasks_purge_only_delete BEFORE DELETE ON tasks
WHEN NOT EXISTS (SELECT 1 FROM tombstones WHERE run_id = OLD.run_id)
BEGIN SELECT RAISE(ABORT, 'a task row is deleted only by its run''s purge, once the run has a tombstone'); END;

CREATE TRIGGER timers_purge_only_delete BEFORE DELETE ON timers
WHEN NOT EXISTS (SELECT 1 FROM tombstones WHERE run_id = OLD.run_id)
BEGIN SELECT RAISE(ABORT, 'a timer row is deleted only by its run''s purge, once the run has a tombstone'); END;

CREATE TRIGGER approval_requests_purge_only_delete BEFORE DELETE ON approval_requests
WHEN NOT EXISTS (SELECT 1 FROM tombstones WHERE run_id = OLD.run_id)
BEGIN SELECT RAISE(ABORT, 'an approval request is deleted only by its run''s purge, once the run has a tombstone'); END;

CREATE TRIGGER approval_links_purge_only_delete BEFORE DELETE ON approval_links
WHEN NOT EXISTS (SELECT 1 FROM tombstones WHERE run_id = OLD.run_id)
BEGIN SELECT RAISE(ABORT, 'an approval link is deleted only by its run''s purge, once the run has a tombstone'); END;

CREATE TRIGGER approval_decisions_purge_only_delete BEFORE DELETE ON approval_decisions
WHEN NOT EXISTS (
    SELECT 1 FROM approval_requests a JOIN tombstones t ON t.run_id = a.run_id
    WHERE a.request_id = OLD.request_id)
BEGIN SELECT RAISE(ABORT, 'an approval decision is deleted only by its run''s purge, once the run has a tombstone'); END;

CREATE TRIGGER notifications_purge_only_delete BEFORE DELETE ON notifications
WHEN NOT EXISTS (SELECT 1 FROM tombstones WHERE run_id = OLD.run_id)
BEGIN SELECT RAISE(ABORT, 'a notification row is deleted only by its run''s purge, once the run has a tombstone'); END;

CREATE TRIGGER holds_insert_check BEFORE INSERT ON holds
BEGIN
    SELECT RAISE(ABORT, 'the run is purged (it has a tombstone): there is nothing left to hold')
    WHERE NEW.run_id IS NOT NULL AND EXISTS (SELECT 1 FROM tombstones WHERE run_id = NEW.run_id);
    SELECT RAISE(ABORT, 'a hold is placed unreleased')
    WHERE NEW.released_at IS NOT NULL OR NEW.released_by IS NOT NULL OR NEW.release_reason IS NOT NULL;
END;

CREATE TRIGGER holds_update_check BEFORE UPDATE ON holds
BEGIN
    SELECT RAISE(ABORT, 'a hold is only ever released, once, saying who and why; nothing else about it changes')
    WHERE OLD.released_at IS NOT NULL OR NEW.released_at IS NULL OR NEW.released_by IS NULL
       OR NEW.release_reason IS NULL OR NEW.id IS NOT OLD.id OR NEW.tenant IS NOT OLD.tenant
       OR NEW.run_id IS NOT OLD.run_id OR NEW.reason IS NOT OLD.reason
       OR NEW.held_by IS NOT OLD.held_by OR NEW.held_at IS NOT OLD.held_at;
END;

CREATE TRIGGER holds_keep BEFORE DELETE ON holds
WHEN OLD.released_at IS NULL OR OLD.run_id IS NULL
  OR NOT EXISTS (SELECT 1 FROM tombstones WHERE run_id = OLD.run_id)
BEGIN SELECT RAISE(ABORT, 'holds are kept: only a released hold of a purged run is deleted, with the run'); END;

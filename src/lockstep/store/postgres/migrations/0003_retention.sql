-- Retention: finished runs past their tenant's retention are purged; legal holds stop that; every
-- purged run leaves one tombstone. The database itself refuses every delete the purge would not make
-- (docs/security.md, "Retention and purge"): events, runs and the rows keyed by a run may be deleted
-- only once the run has a tombstone, and a tombstone may be written only for a finished, unheld run,
-- with the run's own tenant, definition, status, event count and chain head. Whole monthly event
-- partitions are dropped by the purge only when every run in them has a tombstone (DDL fires no row
-- trigger: that check is the purge's, made under the partition's lock).

-- When each run reached its terminal status: the retention clock. Kept by the triggers below (so no
-- write path can forget it), read by the purge through (tenant, finished_at); `part` is the scheduler
-- partition, as on runs.
CREATE TABLE finished_runs (
    run_id      TEXT    PRIMARY KEY,
    tenant      TEXT    NOT NULL,
    finished_at TEXT    NOT NULL,
    part        INTEGER GENERATED ALWAYS AS (get_byte(decode(right(run_id, 2), 'hex'), 0) % 64) STORED
);
CREATE INDEX finished_runs_due ON finished_runs (tenant, finished_at);
-- Runs finished before this migration: their last update is their terminal event, or later (a late
-- stale report), which only ever makes a purge later, never earlier.
INSERT INTO finished_runs (run_id, tenant, finished_at)
SELECT run_id, tenant, updated_at FROM runs WHERE status IN ('completed', 'failed', 'cancelled');

CREATE FUNCTION lockstep_run_finished() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO finished_runs (run_id, tenant, finished_at) VALUES (NEW.run_id, NEW.tenant, NEW.updated_at)
    ON CONFLICT (run_id) DO NOTHING;
    RETURN NULL;
END;
$$;
CREATE TRIGGER runs_finished_insert AFTER INSERT ON runs FOR EACH ROW
    WHEN (NEW.status IN ('completed', 'failed', 'cancelled'))
    EXECUTE FUNCTION lockstep_run_finished();
CREATE TRIGGER runs_finished_update AFTER UPDATE OF status ON runs FOR EACH ROW
    WHEN (NEW.status IN ('completed', 'failed', 'cancelled') AND OLD.status NOT IN ('completed', 'failed', 'cancelled'))
    EXECUTE FUNCTION lockstep_run_finished();

-- Legal holds: on one run, or (run_id NULL) on a whole tenant. Rows of their own, not run events: a
-- finished run stays exactly as it ended, and a hold is about the data, not about the process.
CREATE TABLE holds (
    id              BIGSERIAL PRIMARY KEY,
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
    done_at     TEXT,
    part        INTEGER GENERATED ALWAYS AS (get_byte(decode(right(run_id, 2), 'hex'), 0) % 64) STORED
);
CREATE INDEX tombstones_by_tenant ON tombstones (tenant, run_id);
CREATE INDEX tombstones_purging ON tombstones (run_id) WHERE state = 'purging';

-- The purge deletes a run's other rows by run id.
CREATE INDEX tasks_closed_by_run ON tasks (run_id) WHERE status NOT IN ('ready', 'leased');
CREATE INDEX approval_requests_by_run ON approval_requests (run_id);
CREATE INDEX approval_links_by_run ON approval_links (run_id);
CREATE INDEX notifications_by_run ON notifications (run_id);

-- What the database refuses. Errors carry SQLSTATE 23000 (integrity_constraint_violation).
CREATE FUNCTION lockstep_tombstone_insert() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NOT EXISTS (
        SELECT 1 FROM runs r
        WHERE r.run_id = NEW.run_id AND r.tenant = NEW.tenant AND r.definition = NEW.definition
          AND r.version = NEW.version AND r.status IN ('completed', 'failed', 'cancelled')
          AND r.status = NEW.status AND r.seq = NEW.events AND r.last_hash = NEW.last_hash) THEN
        RAISE EXCEPTION 'a tombstone is written only for an existing finished run, with its own tenant, definition, status, event count and chain head'
            USING ERRCODE = 'integrity_constraint_violation';
    END IF;
    IF EXISTS (
        SELECT 1 FROM holds h
        WHERE h.tenant = NEW.tenant AND (h.run_id = NEW.run_id OR h.run_id IS NULL) AND h.released_at IS NULL) THEN
        RAISE EXCEPTION 'a held run is never purged: release its hold (or its tenant''s) first'
            USING ERRCODE = 'integrity_constraint_violation';
    END IF;
    IF NEW.state <> 'purging' OR NEW.done_at IS NOT NULL THEN
        RAISE EXCEPTION 'a tombstone is written in state purging, not yet done'
            USING ERRCODE = 'integrity_constraint_violation';
    END IF;
    RETURN NEW;
END;
$$;
CREATE TRIGGER tombstones_insert_check BEFORE INSERT ON tombstones
    FOR EACH ROW EXECUTE FUNCTION lockstep_tombstone_insert();

CREATE FUNCTION lockstep_tombstone_update() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        RAISE EXCEPTION 'tombstones are kept for good' USING ERRCODE = 'integrity_constraint_violation';
    END IF;
    IF OLD.state <> 'purging' OR NEW.state <> 'purged' OR NEW.done_at IS NULL
       OR (NEW.run_id, NEW.tenant, NEW.definition, NEW.version, NEW.status, NEW.started_at, NEW.finished_at,
           NEW.events, NEW.last_hash, NEW.purged_at, NEW.purged_by, NEW.reason)
          IS DISTINCT FROM
          (OLD.run_id, OLD.tenant, OLD.definition, OLD.version, OLD.status, OLD.started_at, OLD.finished_at,
           OLD.events, OLD.last_hash, OLD.purged_at, OLD.purged_by, OLD.reason) THEN
        RAISE EXCEPTION 'a tombstone only moves from purging to purged, once, and says nothing else new'
            USING ERRCODE = 'integrity_constraint_violation';
    END IF;
    IF EXISTS (SELECT 1 FROM events WHERE run_id = OLD.run_id) OR EXISTS (SELECT 1 FROM runs WHERE run_id = OLD.run_id) THEN
        RAISE EXCEPTION 'a tombstone is marked purged only when neither the run row nor any of its events is left'
            USING ERRCODE = 'integrity_constraint_violation';
    END IF;
    RETURN NEW;
END;
$$;
CREATE TRIGGER tombstones_update_check BEFORE UPDATE OR DELETE ON tombstones
    FOR EACH ROW EXECUTE FUNCTION lockstep_tombstone_update();

-- Events stay append-only: never updated, deleted only once their run has a tombstone (the trigger
-- events_append_only of 0001 calls this function).
CREATE OR REPLACE FUNCTION lockstep_events_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' AND EXISTS (SELECT 1 FROM tombstones WHERE run_id = OLD.run_id) THEN
        RETURN OLD;
    END IF;
    RAISE EXCEPTION 'events are append-only: only the events of a purged run (one with a tombstone) are ever deleted'
        USING ERRCODE = 'integrity_constraint_violation';
END;
$$;

-- The other rows of a run: deleted only by its purge. TG_ARGV[0] names what the row is.
CREATE FUNCTION lockstep_purge_only_delete() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM tombstones WHERE run_id = OLD.run_id) THEN
        RETURN OLD;
    END IF;
    RAISE EXCEPTION '% is deleted only by its run''s purge, once the run has a tombstone', TG_ARGV[0]
        USING ERRCODE = 'integrity_constraint_violation';
END;
$$;
CREATE TRIGGER runs_purge_only_delete BEFORE DELETE ON runs
    FOR EACH ROW EXECUTE FUNCTION lockstep_purge_only_delete('a run');
CREATE TRIGGER tasks_purge_only_delete BEFORE DELETE ON tasks
    FOR EACH ROW EXECUTE FUNCTION lockstep_purge_only_delete('a task row');
CREATE TRIGGER timers_purge_only_delete BEFORE DELETE ON timers
    FOR EACH ROW EXECUTE FUNCTION lockstep_purge_only_delete('a timer row');
CREATE TRIGGER approval_requests_purge_only_delete BEFORE DELETE ON approval_requests
    FOR EACH ROW EXECUTE FUNCTION lockstep_purge_only_delete('an approval request');
CREATE TRIGGER approval_links_purge_only_delete BEFORE DELETE ON approval_links
    FOR EACH ROW EXECUTE FUNCTION lockstep_purge_only_delete('an approval link');
CREATE TRIGGER notifications_purge_only_delete BEFORE DELETE ON notifications
    FOR EACH ROW EXECUTE FUNCTION lockstep_purge_only_delete('a notification row');

CREATE FUNCTION lockstep_decision_delete() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM approval_requests a JOIN tombstones t ON t.run_id = a.run_id
               WHERE a.request_id = OLD.request_id) THEN
        RETURN OLD;
    END IF;
    RAISE EXCEPTION 'an approval decision is deleted only by its run''s purge, once the run has a tombstone'
        USING ERRCODE = 'integrity_constraint_violation';
END;
$$;
CREATE TRIGGER approval_decisions_purge_only_delete BEFORE DELETE ON approval_decisions
    FOR EACH ROW EXECUTE FUNCTION lockstep_decision_delete();

CREATE FUNCTION lockstep_hold_check() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        IF NEW.run_id IS NOT NULL AND EXISTS (SELECT 1 FROM tombstones WHERE run_id = NEW.run_id) THEN
            RAISE EXCEPTION 'the run is purged (it has a tombstone): there is nothing left to hold'
                USING ERRCODE = 'integrity_constraint_violation';
        END IF;
        IF NEW.released_at IS NOT NULL OR NEW.released_by IS NOT NULL OR NEW.release_reason IS NOT NULL THEN
            RAISE EXCEPTION 'a hold is placed unreleased' USING ERRCODE = 'integrity_constraint_violation';
        END IF;
        RETURN NEW;
    END IF;
    IF TG_OP = 'UPDATE' THEN
        IF OLD.released_at IS NOT NULL OR NEW.released_at IS NULL OR NEW.released_by IS NULL
           OR NEW.release_reason IS NULL
           OR (NEW.id, NEW.tenant, NEW.run_id, NEW.reason, NEW.held_by, NEW.held_at)
              IS DISTINCT FROM (OLD.id, OLD.tenant, OLD.run_id, OLD.reason, OLD.held_by, OLD.held_at) THEN
            RAISE EXCEPTION 'a hold is only ever released, once, saying who and why; nothing else about it changes'
                USING ERRCODE = 'integrity_constraint_violation';
        END IF;
        RETURN NEW;
    END IF;
    IF OLD.released_at IS NULL OR OLD.run_id IS NULL
       OR NOT EXISTS (SELECT 1 FROM tombstones WHERE run_id = OLD.run_id) THEN
        RAISE EXCEPTION 'holds are kept: only a released hold of a purged run is deleted, with the run'
            USING ERRCODE = 'integrity_constraint_violation';
    END IF;
    RETURN OLD;
END;
$$;
CREATE TRIGGER holds_check BEFORE INSERT OR UPDATE OR DELETE ON holds
    FOR EACH ROW EXECUTE FUNCTION lockstep_hold_check();

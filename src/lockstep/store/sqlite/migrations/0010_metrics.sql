-- Metrics (issue 17). Each unfinished run's wait kind (core/explain.py's wait_kind: queued, running,
-- timer, retry, approval, attention, paused, cancelling, compensating, transition), written with its
-- status on every transition (NULL once finished), and partial indexes over what is in flight, so a
-- scrape counts unfinished runs by definition, step and wait kind, and pending approvals, without
-- reading finished rows.
ALTER TABLE runs ADD COLUMN wait_kind TEXT;

-- Runs already waiting get theirs from their snapshot (the same order of checks as wait_kind); a
-- snapshot SQLite cannot read as JSON keeps NULL, shown as wait="unknown" until the run moves.
UPDATE runs SET wait_kind = CASE
    WHEN json_extract(snapshot, '$.attention') IS NOT NULL THEN 'attention'
    WHEN json_extract(snapshot, '$.paused') IS NOT NULL THEN 'paused'
    WHEN json_extract(snapshot, '$.compensating') IS NOT NULL THEN 'compensating'
    WHEN json_extract(snapshot, '$.cancel') IS NOT NULL THEN 'cancelling'
    WHEN json_type(snapshot, '$.active') = 'object' THEN
        CASE WHEN json_extract(snapshot, '$.active.fencing') IS NULL THEN 'queued' ELSE 'running' END
    WHEN json_extract(snapshot, '$.approval') IS NOT NULL THEN 'approval'
    WHEN EXISTS (SELECT 1 FROM json_each(snapshot, '$.timers') WHERE json_extract(value, '$.kind') = 'wait')
        THEN 'timer'
    WHEN EXISTS (SELECT 1 FROM json_each(snapshot, '$.timers') WHERE json_extract(value, '$.kind') <> 'deadline')
        THEN 'retry'
    ELSE 'transition'
END
WHERE status NOT IN ('completed', 'failed', 'cancelled') AND json_valid(snapshot);

CREATE INDEX runs_live_at_step ON runs (tenant, definition, current_step, wait_kind)
WHERE status NOT IN ('completed', 'failed', 'cancelled');
CREATE INDEX approval_requests_waiting ON approval_requests (tenant, created_at) WHERE status = 'pending';

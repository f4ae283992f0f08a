-- Metrics (issue 17). Each unfinished run's wait kind (core/explain.py's wait_kind: queued, running,
-- timer, retry, approval, attention, paused, cancelling, compensating, transition), written with its
-- status on every transition (NULL once finished), and partial indexes over what is in flight, so a
-- scrape counts unfinished runs by definition, step and wait kind, and pending approvals, without
-- reading finished rows.
ALTER TABLE runs ADD COLUMN wait_kind TEXT;

CREATE FUNCTION lockstep_wait_kind(snapshot TEXT) RETURNS TEXT LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
    s JSONB;
BEGIN
    s := snapshot::jsonb;  -- inside the block, so a snapshot that is not JSON is caught below
    RETURN CASE
        WHEN s->>'attention' IS NOT NULL THEN 'attention'
        WHEN s->>'paused' IS NOT NULL THEN 'paused'
        WHEN s->>'compensating' IS NOT NULL THEN 'compensating'
        WHEN s->>'cancel' IS NOT NULL THEN 'cancelling'
        WHEN jsonb_typeof(s->'active') = 'object' THEN
            CASE WHEN s->'active'->>'fencing' IS NULL THEN 'queued' ELSE 'running' END
        WHEN s->>'approval' IS NOT NULL THEN 'approval'
        WHEN jsonb_typeof(s->'timers') = 'object'
             AND EXISTS (SELECT 1 FROM jsonb_each(s->'timers') t WHERE t.value->>'kind' = 'wait') THEN 'timer'
        WHEN jsonb_typeof(s->'timers') = 'object'
             AND EXISTS (SELECT 1 FROM jsonb_each(s->'timers') t WHERE t.value->>'kind' <> 'deadline') THEN 'retry'
        ELSE 'transition'
    END;
EXCEPTION WHEN others THEN
    RETURN NULL;  -- a snapshot PostgreSQL cannot read as JSON: wait="unknown" until the run moves
END;
$$;

-- Runs already waiting get theirs from their snapshot (the same order of checks as wait_kind).
UPDATE runs SET wait_kind = lockstep_wait_kind(snapshot) WHERE status NOT IN ('completed', 'failed', 'cancelled');
DROP FUNCTION lockstep_wait_kind(TEXT);

CREATE INDEX runs_live_at_step ON runs (tenant, definition, current_step, wait_kind)
WHERE status NOT IN ('completed', 'failed', 'cancelled');
CREATE INDEX approval_requests_waiting ON approval_requests (tenant, created_at) WHERE status = 'pending';

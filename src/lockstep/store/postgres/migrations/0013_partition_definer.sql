-- Partition maintenance runs with the rights of the role that owns the schema (the one that ran the
-- migrations), so the runtime role needs no DDL rights: it may create the coming months' partitions
-- and drop a purged month's, and nothing else (docs/production.md, roles). search_path is pinned to
-- the migration's, so a caller cannot make these functions resolve `events` or `runs` elsewhere.
ALTER FUNCTION lockstep_ensure_event_partition(DATE) SECURITY DEFINER SET search_path FROM CURRENT;

-- Drop one monthly partition of `events` once every run in its range has a tombstone: false (nothing
-- done) while a run row remains in the range; an exception (the detach rolled back with the
-- transaction) if an event of a run without a tombstone is found once the partition is detached.
CREATE FUNCTION lockstep_drop_event_partition(part TEXT) RETURNS BOOLEAN
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
DECLARE
    bound TEXT;
    lo TEXT;
    hi TEXT;
    orphan TEXT;
BEGIN
    IF part !~ '^events_y[0-9]{4}m[0-9]{2}$' THEN
        RAISE EXCEPTION 'not a monthly events partition: %', part;
    END IF;
    SELECT pg_get_expr(c.relpartbound, c.oid) INTO bound
    FROM pg_class c JOIN pg_inherits i ON i.inhrelid = c.oid
    WHERE i.inhparent = 'events'::regclass AND c.relname = part;
    IF bound IS NULL THEN
        RAISE EXCEPTION 'no partition % of events', part;
    END IF;
    lo := substring(bound FROM 'FROM \(''([0-9a-f]+)''\)');
    hi := substring(bound FROM 'TO \(''([0-9a-f]+)''\)');
    IF EXISTS (SELECT 1 FROM runs WHERE run_id >= lo AND run_id < hi) THEN
        RETURN FALSE;
    END IF;
    -- DETACH takes an ACCESS EXCLUSIVE lock on events: wait briefly, else refuse for this pass.
    PERFORM set_config('lock_timeout', '5s', true);
    EXECUTE format('ALTER TABLE events DETACH PARTITION %I', part);
    EXECUTE format('SELECT e.run_id FROM %I e WHERE NOT EXISTS '
                   '(SELECT 1 FROM tombstones t WHERE t.run_id = e.run_id) LIMIT 1', part) INTO orphan;
    IF orphan IS NOT NULL OR EXISTS (SELECT 1 FROM runs WHERE run_id >= lo AND run_id < hi) THEN
        RAISE EXCEPTION 'partition % holds events of run % that has no tombstone: not dropped (the detach is rolled back)',
            part, coalesce(orphan, '?');
    END IF;
    EXECUTE format('DROP TABLE %I', part);
    RETURN TRUE;
END;
$$;

REVOKE EXECUTE ON FUNCTION lockstep_ensure_event_partition(DATE) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION lockstep_drop_event_partition(TEXT) FROM PUBLIC;

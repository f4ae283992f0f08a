-- The audit log becomes a hash chain per tenant (core/auditchain.py): each row gets its place in its
-- chain (seq), the previous row's hash and its own. `lockstep db upgrade` chains the rows written before
-- this migration in id order, in the same transaction (store/sqltx/audit.py: chain_legacy_audit), so
-- every row is covered from then on. audit_chains is each chain's head: its row count and last row, so
-- rows removed from the end are noticed too; writers lock it (one writer per chain at a time), so a
-- chain's ids grow in commit order. Rows are append-only: a row may be updated only while it has no
-- hash (the upgrade chaining it), and never deleted; a head only moves forward.
ALTER TABLE audit ADD COLUMN seq BIGINT;
ALTER TABLE audit ADD COLUMN prev_hash TEXT;
ALTER TABLE audit ADD COLUMN hash TEXT;

CREATE TABLE audit_chains (
    chain       TEXT    PRIMARY KEY,    -- the tenant, or '' for the rows without a tenant
    rows        BIGINT  NOT NULL,
    last_id     BIGINT,
    last_hash   TEXT    NOT NULL
);

CREATE FUNCTION lockstep_audit_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'UPDATE' AND OLD.hash IS NULL THEN
        RETURN NEW;
    END IF;
    RAISE EXCEPTION 'audit rows are append-only';
END;
$$;
CREATE TRIGGER audit_append_only BEFORE UPDATE OR DELETE ON audit
    FOR EACH ROW EXECUTE FUNCTION lockstep_audit_append_only();

CREATE FUNCTION lockstep_audit_chains_forward_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'UPDATE' AND NEW.rows >= OLD.rows THEN
        RETURN NEW;
    END IF;
    RAISE EXCEPTION 'an audit chain only grows';
END;
$$;
CREATE TRIGGER audit_chains_forward_only BEFORE UPDATE OR DELETE ON audit_chains
    FOR EACH ROW EXECUTE FUNCTION lockstep_audit_chains_forward_only();

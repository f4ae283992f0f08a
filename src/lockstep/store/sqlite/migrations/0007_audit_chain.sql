-- The audit log becomes a hash chain per tenant (core/auditchain.py): each row gets its place in its
-- chain (seq), the previous row's hash and its own. `lockstep db upgrade` chains the rows written before
-- this migration in id order, in the same transaction (store/sqltx/audit.py: chain_legacy_audit), so
-- every row is covered from then on. audit_chains is each chain's head: its row count and last row, so
-- rows removed from the end are noticed too. Rows are append-only: a row may be updated only while it
-- has no hash (the upgrade chaining it), and never deleted; a head only moves forward.
ALTER TABLE audit ADD COLUMN seq INTEGER;
ALTER TABLE audit ADD COLUMN prev_hash TEXT;
ALTER TABLE audit ADD COLUMN hash TEXT;

CREATE TABLE audit_chains (
    chain       TEXT    PRIMARY KEY,    -- the tenant, or '' for the rows without a tenant
    rows        INTEGER NOT NULL,
    last_id     INTEGER,
    last_hash   TEXT    NOT NULL
);

CREATE TRIGGER audit_append_only_update BEFORE UPDATE ON audit WHEN OLD.hash IS NOT NULL
BEGIN SELECT RAISE(ABORT, 'audit rows are append-only'); END;
CREATE TRIGGER audit_append_only_delete BEFORE DELETE ON audit
BEGIN SELECT RAISE(ABORT, 'audit rows are append-only'); END;
CREATE TRIGGER audit_chains_forward_only BEFORE UPDATE ON audit_chains WHEN NEW.rows < OLD.rows
BEGIN SELECT RAISE(ABORT, 'an audit chain only grows'); END;
CREATE TRIGGER audit_chains_kept BEFORE DELETE ON audit_chains
BEGIN SELECT RAISE(ABORT, 'an audit chain only grows'); END;

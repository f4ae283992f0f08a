-- Secrets by reference and egress policies (issue 19, the http step). A secret's versions are sealed
-- markers under a data key of the secret's own (in run_keys, id secret:<tenant>/<name>/<nonce>): the
-- clear value is never stored. Deleting a secret deletes its rows and destroys its key.
CREATE TABLE secrets (
    tenant      TEXT    NOT NULL,
    name        TEXT    NOT NULL,
    version     INTEGER NOT NULL,
    key_id      TEXT    NOT NULL,
    sealed      TEXT    NOT NULL,
    created_at  TEXT    NOT NULL,
    created_by  TEXT,
    PRIMARY KEY (tenant, name, version)
);

-- A tenant's egress policy (JSON: allow, allow_hosts, allow_http, allow_loopback); none: nothing allowed.
CREATE TABLE egress_policies (
    tenant      TEXT    PRIMARY KEY,
    policy      TEXT    NOT NULL,
    updated_at  TEXT    NOT NULL,
    updated_by  TEXT
);

-- Secrets by reference and egress policies (issue 19, the http step): see the SQLite migration 0014.
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

-- lockstep schema v1 (PostgreSQL). Times used for scanning are epoch milliseconds (BIGINT); events keep
-- ISO text. `part` spreads runs over 64 scheduler partitions (from the run id's random last byte).

CREATE TABLE definitions (
    tenant      TEXT    NOT NULL,
    name        TEXT    NOT NULL,
    version     INTEGER NOT NULL,
    digest      TEXT    NOT NULL,
    document    TEXT    NOT NULL,
    created_at  TEXT    NOT NULL,
    PRIMARY KEY (tenant, name, version),
    UNIQUE (tenant, name, digest)
);

CREATE TABLE runs (
    run_id          TEXT    PRIMARY KEY,
    tenant          TEXT    NOT NULL,
    definition      TEXT    NOT NULL,
    version         INTEGER NOT NULL,
    status          TEXT    NOT NULL,
    seq             INTEGER NOT NULL,
    current_step    TEXT,
    snapshot        TEXT    NOT NULL,
    last_hash       TEXT    NOT NULL,
    start_key       TEXT,
    request_digest  TEXT,
    created_at      TEXT    NOT NULL,
    updated_at      TEXT    NOT NULL,
    part            INTEGER GENERATED ALWAYS AS (get_byte(decode(right(run_id, 2), 'hex'), 0) % 64) STORED,
    UNIQUE (tenant, start_key)
);
CREATE INDEX runs_by_tenant_status ON runs (tenant, status, run_id);
CREATE INDEX runs_by_tenant ON runs (tenant, run_id);

-- Append-only, partitioned by run id. Run ids start with their creation time in milliseconds (hex), so a
-- range of run ids is a range of creation times: retention drops whole partitions of finished runs.
CREATE TABLE events (
    run_id  TEXT    NOT NULL,
    seq     INTEGER NOT NULL,
    type    TEXT    NOT NULL,
    at      TEXT    NOT NULL,
    v       INTEGER NOT NULL,
    data    TEXT    NOT NULL,
    hash    TEXT    NOT NULL,
    PRIMARY KEY (run_id, seq)
) PARTITION BY RANGE (run_id);
CREATE TABLE events_default PARTITION OF events DEFAULT;

CREATE FUNCTION lockstep_events_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'events are append-only';
END;
$$;
CREATE TRIGGER events_append_only BEFORE UPDATE OR DELETE ON events
    FOR EACH ROW EXECUTE FUNCTION lockstep_events_append_only();

-- Monthly partitions named events_yYYYYmMM; lockstep creates the coming months as it runs.
CREATE FUNCTION lockstep_ensure_event_partition(month_start DATE) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    -- Month boundaries in UTC whatever the session's TimeZone: run ids carry UTC milliseconds.
    lo TEXT := lpad(to_hex((extract(epoch FROM month_start::timestamp AT TIME ZONE 'UTC') * 1000)::bigint),
                    12, '0');
    hi TEXT := lpad(to_hex((extract(epoch FROM (month_start + interval '1 month')::timestamp AT TIME ZONE 'UTC')
                            * 1000)::bigint), 12, '0');
    name TEXT := 'events_y' || to_char(month_start, 'YYYY') || 'm' || to_char(month_start, 'MM');
BEGIN
    IF to_regclass(name) IS NULL THEN
        EXECUTE format('CREATE TABLE %I PARTITION OF events FOR VALUES FROM (%L) TO (%L)', name, lo, hi);
    END IF;
END;
$$;
SELECT lockstep_ensure_event_partition((date_trunc('month', now() AT TIME ZONE 'UTC') + make_interval(months => m))::date)
FROM generate_series(-1, 3) AS m;

CREATE TABLE tasks (
    task_id          TEXT    PRIMARY KEY,
    tenant           TEXT    NOT NULL,
    run_id           TEXT    NOT NULL,
    step             TEXT    NOT NULL,
    attempt          INTEGER NOT NULL,
    kind             TEXT    NOT NULL,
    activity         TEXT    NOT NULL,
    queue            TEXT    NOT NULL,
    priority         INTEGER NOT NULL DEFAULT 0,
    input            TEXT    NOT NULL,
    idempotency_key  TEXT    NOT NULL,
    definition       TEXT    NOT NULL,
    version          INTEGER NOT NULL,
    delivery         TEXT    NOT NULL,
    timeout_ms       BIGINT  NOT NULL,
    status           TEXT    NOT NULL,
    available_at     BIGINT  NOT NULL,
    fencing          INTEGER,
    lease_owner      TEXT,
    lease_expires_at BIGINT,
    deadline         BIGINT,
    created_at       BIGINT  NOT NULL,
    dead_reason      TEXT,
    part             INTEGER GENERATED ALWAYS AS (get_byte(decode(right(run_id, 2), 'hex'), 0) % 64) STORED
);
CREATE INDEX tasks_ready ON tasks (tenant, queue, priority DESC, available_at) WHERE status = 'ready';
CREATE INDEX tasks_ready_age ON tasks (available_at) WHERE status = 'ready';
CREATE INDEX tasks_leased ON tasks (lease_expires_at) WHERE status = 'leased';
CREATE INDEX tasks_leased_tenant ON tasks (tenant) WHERE status = 'leased';

CREATE TABLE timers (
    run_id      TEXT    NOT NULL,
    key         TEXT    NOT NULL,
    generation  INTEGER NOT NULL,
    tenant      TEXT    NOT NULL,
    fire_at     BIGINT  NOT NULL,
    status      TEXT    NOT NULL,
    part        INTEGER GENERATED ALWAYS AS (get_byte(decode(right(run_id, 2), 'hex'), 0) % 64) STORED,
    PRIMARY KEY (run_id, key, generation)
);
CREATE INDEX timers_due ON timers (fire_at) WHERE status = 'scheduled';

-- Schedulers share the 64 partitions: each keeps a fair share leased and renews it; a scheduler that
-- dies stops renewing and the others take its partitions within one lease period.
CREATE TABLE scheduler_leases (
    part        INTEGER PRIMARY KEY,
    owner       TEXT    NOT NULL,
    expires_at  BIGINT  NOT NULL
);
CREATE TABLE scheduler_members (
    owner       TEXT    PRIMARY KEY,
    expires_at  BIGINT  NOT NULL
);

CREATE TABLE tenants (
    name            TEXT    PRIMARY KEY,
    settings        TEXT    NOT NULL DEFAULT '{}',
    bucket_tokens   DOUBLE PRECISION,
    bucket_at_ms    BIGINT,
    created_at      TEXT    NOT NULL
);

CREATE TABLE users (
    tenant          TEXT    NOT NULL,
    name            TEXT    NOT NULL,
    roles           TEXT    NOT NULL,
    groups          TEXT    NOT NULL,
    key_hash        TEXT    UNIQUE,
    password_hash   TEXT,
    disabled        INTEGER NOT NULL DEFAULT 0,
    created_at      TEXT    NOT NULL,
    email           TEXT,
    PRIMARY KEY (tenant, name)
);

CREATE TABLE sessions (
    id_hash     TEXT    PRIMARY KEY,
    tenant      TEXT    NOT NULL,
    "user"      TEXT    NOT NULL,
    csrf        TEXT    NOT NULL,
    created_at  BIGINT  NOT NULL,
    expires_at  BIGINT  NOT NULL
);

CREATE TABLE audit (
    id      BIGSERIAL PRIMARY KEY,
    at      TEXT    NOT NULL,
    tenant  TEXT,
    actor   TEXT,
    action  TEXT    NOT NULL,
    target  TEXT,
    outcome TEXT    NOT NULL,
    detail  TEXT    NOT NULL DEFAULT '{}'
);
CREATE INDEX audit_by_tenant ON audit (tenant, id);

CREATE TABLE approval_requests (
    request_id  TEXT    PRIMARY KEY,
    tenant      TEXT    NOT NULL,
    run_id      TEXT    NOT NULL,
    step        TEXT    NOT NULL,
    users       TEXT    NOT NULL,
    groups      TEXT    NOT NULL,
    initiator   TEXT,
    allow_initiator INTEGER NOT NULL,
    status      TEXT    NOT NULL,
    expires_at  BIGINT  NOT NULL,
    created_at  TEXT    NOT NULL
);
CREATE INDEX approval_requests_pending ON approval_requests (tenant, status);

CREATE TABLE approval_links (
    link_id     TEXT    PRIMARY KEY,
    token_hash  TEXT    NOT NULL UNIQUE,
    tenant      TEXT    NOT NULL,
    run_id      TEXT    NOT NULL,
    step        TEXT    NOT NULL,
    request_id  TEXT    NOT NULL,
    approver    TEXT    NOT NULL,
    status      TEXT    NOT NULL,
    expires_at  BIGINT  NOT NULL,
    created_at  TEXT    NOT NULL,
    used_at     TEXT,
    decision    TEXT
);
CREATE INDEX approval_links_by_request ON approval_links (request_id, status);

CREATE TABLE approval_decisions (
    request_id  TEXT    NOT NULL,
    approver    TEXT    NOT NULL,
    decision    TEXT    NOT NULL,
    link_id     TEXT,
    at          TEXT    NOT NULL,
    PRIMARY KEY (request_id, approver)
);

CREATE TABLE notifications (
    id              BIGSERIAL PRIMARY KEY,
    tenant          TEXT    NOT NULL,
    run_id          TEXT    NOT NULL,
    request_id      TEXT    NOT NULL,
    approver        TEXT,
    status          TEXT    NOT NULL,
    attempts        INTEGER NOT NULL DEFAULT 0,
    available_at    BIGINT  NOT NULL,
    lease_expires_at BIGINT,
    last_error      TEXT,
    created_at      BIGINT  NOT NULL
);
CREATE INDEX notifications_ready ON notifications (available_at) WHERE status = 'ready';
CREATE INDEX notifications_leased ON notifications (lease_expires_at) WHERE status = 'leased';

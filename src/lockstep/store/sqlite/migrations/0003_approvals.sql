-- Approval requests (for inboxes), single-use links (hash only), one decision per approver per request,
-- and the notification outbox that mints and delivers links.
ALTER TABLE users ADD COLUMN email TEXT;

CREATE TABLE approval_requests (
    request_id  TEXT    PRIMARY KEY,
    tenant      TEXT    NOT NULL,
    run_id      TEXT    NOT NULL,
    step        TEXT    NOT NULL,
    users       TEXT    NOT NULL,   -- JSON list, kept current by ApproverReplaced
    groups      TEXT    NOT NULL,   -- JSON list
    initiator   TEXT,
    allow_initiator INTEGER NOT NULL,
    status      TEXT    NOT NULL,   -- pending | approved | rejected | timed_out | cancelled
    expires_at  INTEGER NOT NULL,
    created_at  TEXT    NOT NULL
);
CREATE INDEX approval_requests_pending ON approval_requests (tenant, status);

CREATE TABLE approval_links (
    link_id     TEXT    PRIMARY KEY,    -- public id, safe to show and log
    token_hash  TEXT    NOT NULL UNIQUE, -- sha256 of the 256-bit token; the token itself is never stored
    tenant      TEXT    NOT NULL,
    run_id      TEXT    NOT NULL,
    step        TEXT    NOT NULL,
    request_id  TEXT    NOT NULL,
    approver    TEXT    NOT NULL,
    status      TEXT    NOT NULL,       -- pending | used | revoked
    expires_at  INTEGER NOT NULL,
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
    PRIMARY KEY (request_id, approver)   -- one decision per approver per request, enforced by the database
);

CREATE TABLE notifications (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    tenant          TEXT    NOT NULL,
    run_id          TEXT    NOT NULL,
    request_id      TEXT    NOT NULL,
    approver        TEXT,               -- NULL: every eligible approver of the request
    status          TEXT    NOT NULL,   -- ready | leased | done | failed
    attempts        INTEGER NOT NULL DEFAULT 0,
    available_at    INTEGER NOT NULL,
    lease_expires_at INTEGER,
    last_error      TEXT,
    created_at      INTEGER NOT NULL
);
CREATE INDEX notifications_ready ON notifications (available_at) WHERE status = 'ready';
CREATE INDEX notifications_leased ON notifications (lease_expires_at) WHERE status = 'leased';

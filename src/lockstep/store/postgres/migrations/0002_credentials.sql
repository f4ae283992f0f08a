-- Sessions end when their user's credentials change: a user's credential generation goes up with every
-- new password, new API key and disable; a session records the generation it was opened with and is
-- valid only while the user's is still the same (a login racing a change cannot open a lasting one).
ALTER TABLE users ADD COLUMN generation INTEGER NOT NULL DEFAULT 0;
ALTER TABLE sessions ADD COLUMN generation INTEGER NOT NULL DEFAULT 0;
CREATE INDEX sessions_by_user ON sessions (tenant, "user");

-- Login throttling, shared by every server process on the database: attempts per user and per client
-- address in the current window, the lockout in force and how many lockouts came in a row.
CREATE TABLE login_counters (
    key             TEXT    PRIMARY KEY,    -- 'user:<tenant>/<name>' or 'address:<ip or IPv6 /64>'
    attempts        INTEGER NOT NULL,
    window_start    BIGINT  NOT NULL,       -- epoch ms
    locked_until    BIGINT,                 -- epoch ms
    lockouts        INTEGER NOT NULL,
    expires_at      BIGINT  NOT NULL        -- from then on the row means no more than no row
);
CREATE INDEX login_counters_expiry ON login_counters (expires_at);

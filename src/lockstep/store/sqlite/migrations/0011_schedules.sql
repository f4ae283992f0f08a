-- Schedules (issue 18): durable rows the scheduler fires like timers. A slot starts at most one run: the
-- run's start key is `<name>:<slot time in UTC ISO>` (unique per tenant in `runs`), and a fire, the run's
-- start and the schedule's advance are one transaction, checked against `generation` (every change of
-- the row adds one), so a fire or an edit computed from an older row never lands.
CREATE TABLE schedules (
    id             TEXT    PRIMARY KEY,     -- 'sch' + 32 hex: the key id of its sealed input too
    tenant         TEXT    NOT NULL,
    name           TEXT    NOT NULL,
    definition     TEXT    NOT NULL,
    version        INTEGER,                 -- NULL: the latest version when a slot fires
    cron           TEXT    NOT NULL,
    timezone       TEXT    NOT NULL,        -- IANA name
    input          TEXT    NOT NULL,        -- JSON; its sensitive values sealed (markers) under the schedule's key
    overlap        TEXT    NOT NULL CHECK (overlap IN ('skip', 'allow', 'cancel_previous')),
    catch_up       TEXT    NOT NULL CHECK (catch_up IN ('none', 'last', 'all')),
    catch_up_limit INTEGER NOT NULL,
    status         TEXT    NOT NULL CHECK (status IN ('active', 'paused')),
    paused_reason  TEXT,
    next_at        INTEGER NOT NULL,        -- ms: its first slot not dealt with yet
    generation     INTEGER NOT NULL,
    last_slot      INTEGER,                 -- ms: the last slot that started a run
    last_run       TEXT,                    -- the run started last (by a slot or a trigger)
    runs_started   INTEGER NOT NULL DEFAULT 0,
    slots_skipped  INTEGER NOT NULL DEFAULT 0,
    slots_missed   INTEGER NOT NULL DEFAULT 0,
    created_at     TEXT    NOT NULL,
    created_by     TEXT,
    updated_at     TEXT    NOT NULL,
    updated_by     TEXT,
    UNIQUE (tenant, name)
);
CREATE INDEX schedules_due ON schedules (next_at) WHERE status = 'active';

-- What became of each slot (and trigger): started, skipped (overlap), missed (a range, after downtime),
-- refused (the start was refused: the reason), already started; the newest rows of each schedule only.
CREATE TABLE schedule_slots (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    schedule_id TEXT    NOT NULL,
    slot_at     INTEGER NOT NULL,           -- ms: the slot, or the first of a missed range
    until_at    INTEGER,                    -- ms: the last slot of a missed range
    count       INTEGER,                    -- slots in the range (NULL: more than were counted)
    outcome     TEXT    NOT NULL,
    started_run TEXT,
    reason      TEXT,
    recorded_at TEXT    NOT NULL
);
CREATE INDEX schedule_slots_of ON schedule_slots (schedule_id, id);
CREATE UNIQUE INDEX schedule_slots_started_once ON schedule_slots (schedule_id, slot_at) WHERE outcome = 'started';

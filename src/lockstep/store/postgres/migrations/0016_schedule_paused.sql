-- Who paused a schedule and when (the schedules page, `schedules show`, the API say "paused since ... by
-- ..." instead of fire times that will not happen); NULL while active and for pauses recorded before.
ALTER TABLE schedules ADD COLUMN paused_at TEXT;
ALTER TABLE schedules ADD COLUMN paused_by TEXT;

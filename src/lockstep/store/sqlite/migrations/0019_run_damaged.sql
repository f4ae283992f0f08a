-- A run the scheduler's background scrub found damaged (app/scrub.py): what `verify` found wrong with it,
-- NULL for a sound run. Loading a marked run for a command fails (CorruptRow), so every command on it is
-- refused (corrupt_run) instead of driving it on from a history that is not what was written.
ALTER TABLE runs ADD COLUMN damaged TEXT;

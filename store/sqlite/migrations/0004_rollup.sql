-- Completion events carry their outcome as fields, and the sealer keeps a
-- rollup of the figures per tool and minute as it seals (see rollup.go):
-- the report reads the rollup, not the events. Events sealed before this
-- migration are not in the rollup.
ALTER TABLE airlock_audit ADD COLUMN outcome TEXT NOT NULL DEFAULT '';
ALTER TABLE airlock_audit ADD COLUMN timed_out INTEGER NOT NULL DEFAULT 0;
ALTER TABLE airlock_audit ADD COLUMN duration_us INTEGER NOT NULL DEFAULT 0;

-- One figure of one tool in one minute (Unix minutes); the period's range
-- is the key's prefix.
CREATE TABLE airlock_rollup (
    minute INTEGER NOT NULL,
    tool   TEXT    NOT NULL,
    figure TEXT    NOT NULL,
    value  INTEGER NOT NULL,
    PRIMARY KEY (minute, tool, figure)
) WITHOUT ROWID;

-- New calls per run and tool, for calls per run; minute is the run's first.
CREATE TABLE airlock_run_calls (
    tool   TEXT    NOT NULL,
    run_id TEXT    NOT NULL,
    minute INTEGER NOT NULL,
    calls  INTEGER NOT NULL,
    PRIMARY KEY (tool, run_id)
) WITHOUT ROWID;
CREATE INDEX airlock_run_calls_minute ON airlock_run_calls (minute);

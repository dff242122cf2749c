-- Completion events carry their outcome as fields, and the sealer keeps a
-- rollup of the figures per tool and minute as it seals (see rollup.go):
-- the report reads the rollup, not the events. Events sealed before this
-- migration are not in the rollup.
ALTER TABLE airlock_audit ADD COLUMN outcome text NOT NULL DEFAULT '';
ALTER TABLE airlock_audit ADD COLUMN timed_out boolean NOT NULL DEFAULT false;
ALTER TABLE airlock_audit ADD COLUMN duration_us bigint NOT NULL DEFAULT 0;

-- One figure of one tool in one minute (Unix minutes); the period's range
-- is the key's prefix.
CREATE TABLE airlock_rollup (
    minute bigint NOT NULL,
    tool   text   NOT NULL,
    figure text   NOT NULL,
    value  bigint NOT NULL,
    PRIMARY KEY (minute, tool, figure)
);

-- New calls per run and tool, for calls per run; minute is the run's first.
CREATE TABLE airlock_run_calls (
    tool   text   NOT NULL,
    run_id text   NOT NULL,
    minute bigint NOT NULL,
    calls  bigint NOT NULL,
    PRIMARY KEY (tool, run_id)
);
CREATE INDEX airlock_run_calls_minute ON airlock_run_calls (minute);

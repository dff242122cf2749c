-- The rollup at a second resolution: per hour, for the whole hours of a
-- period, so that a day's figures read ~24 rows a figure, not 1,440; and a
-- histogram of calls per run by the hour of the run's first call, so that
-- calls per run does not read every run. The sealer keeps both in the
-- sealing transaction; the minute tables serve the edges of a period.
CREATE TABLE airlock_rollup_hour (
    hour   INTEGER NOT NULL,
    tool   TEXT    NOT NULL,
    figure TEXT    NOT NULL,
    value  INTEGER NOT NULL,
    PRIMARY KEY (hour, tool, figure)
) WITHOUT ROWID;
INSERT INTO airlock_rollup_hour (hour, tool, figure, value)
    SELECT minute / 60, tool, figure, SUM(value) FROM airlock_rollup GROUP BY 1, 2, 3;

CREATE TABLE airlock_run_hist (
    hour  INTEGER NOT NULL,
    tool  TEXT    NOT NULL,
    calls INTEGER NOT NULL,
    runs  INTEGER NOT NULL,
    PRIMARY KEY (hour, tool, calls)
) WITHOUT ROWID;
INSERT INTO airlock_run_hist (hour, tool, calls, runs)
    SELECT minute / 60, tool, calls, COUNT(*) FROM airlock_run_calls GROUP BY 1, 2, 3;

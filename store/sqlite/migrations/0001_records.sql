-- Records of side-effecting calls, unique on key. Times are Unix microseconds.
CREATE TABLE airlock_records (
    key         TEXT    NOT NULL PRIMARY KEY,
    tool        TEXT    NOT NULL,
    run_id      TEXT    NOT NULL DEFAULT '',
    window_id   TEXT    NOT NULL,
    state       TEXT    NOT NULL CHECK (state IN ('running', 'succeeded', 'failed', 'in_doubt')),
    args        TEXT    NOT NULL,
    args_hash   TEXT    NOT NULL,
    result      TEXT,
    note        TEXT    NOT NULL DEFAULT '',
    owner       TEXT    NOT NULL DEFAULT '',
    lease_until INTEGER NOT NULL DEFAULT 0,
    attempts    INTEGER NOT NULL DEFAULT 1,
    created_at  INTEGER NOT NULL,
    updated_at  INTEGER NOT NULL,
    expires_at  INTEGER
) WITHOUT ROWID;

CREATE INDEX airlock_records_running ON airlock_records (lease_until) WHERE state = 'running';
CREATE INDEX airlock_records_expires ON airlock_records (expires_at) WHERE state IN ('succeeded', 'failed');
CREATE INDEX airlock_records_run ON airlock_records (run_id, tool) WHERE run_id <> '';
